"""Settings (pydantic-settings), created once at the edge and injected everywhere else."""

from __future__ import annotations

import os
import socket
import uuid
from functools import cached_property
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

MAX_INFLIGHT = 64  # §4 lockstep: the most room frames a run may keep in flight


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MPE_", extra="ignore")

    data_dir: Path = Field(default=Path(".mpe"), description="caches and the default SQLite database")
    database_url: str | None = Field(default=None, validation_alias="DATABASE_URL")
    host: str = "127.0.0.1"
    port: int = 8600
    server_id: str | None = None
    # Leasing (§10): a dead server or bridge costs only a retry once its lease expires.
    lease_s: float = 20.0
    poll_s: float = 0.5  # how often a listen socket looks again at a queued episode (x4)
    wake_poll_s: float = Field(default=2.0, gt=0, description="idle bridges are woken when work is announced; "
                               "this often one query per process looks for work nothing announced (expired leases, "
                               "runs created by a process without the signal on SQLite)")
    # Scoring (§10): a killed scorer's episode is taken over this long after its last lease renewal.
    scoring_lease_s: float = Field(default=120.0, gt=0, description="lease of one episode's scoring work")
    # New runs (mpe run create, POST /v1/runs, mpe demo) unless they say otherwise.
    max_attempts: int = Field(default=3, ge=1, description="attempts per episode")
    max_inflight: int = Field(default=1, ge=1, le=MAX_INFLIGHT, description="lockstep: room frames in flight")
    # Recording (§8): chunks are flushed at least this often. A database that refuses writes
    # (restarting, disk full) is ridden out this long before the attempt fails with storage_error;
    # keep it below lease_s, or another server may take the episode over meanwhile.
    flush_s: float = 1.0
    flush_group_s: float = Field(default=0.25, ge=0, description="a flush waits this long at most for the "
                                 "process's other attempts' flushes, to be written in one transaction with them "
                                 "(server/engine/flush_group.py); 0: only those due at the same moment")
    storage_patience_s: float = Field(default=10.0, gt=0)
    # Wire protocol
    handshake_timeout_s: float = 10.0
    lockstep_timeout_s: float = 30.0
    realtime_grace_frames: int = 25  # realtime: how many frames a seq may run ahead of the room frames sent
    # The speech detector's model calls in one worker thread, batched across sessions
    # (server/engine/detection.py); off (the default): the batches run on the event loop. The worker
    # frees the loop thread but costs the process more CPU: an option for a machine with a core to
    # spare (docs/benchmarks.md "Detector batches that wait")
    detector_worker: bool = False
    # Connections (docs/api.md "Limits"): an HTTP connection without a complete request head for this
    # long (idle before its first request, between keep-alive requests, or a head that trickles in) is
    # closed; a listen socket that takes listen_send_timeout_s to accept one message is reset.
    http_idle_timeout_s: float = Field(default=5.0, gt=0, description="HTTP keep-alive and request-head timeout")
    listen_send_timeout_s: float = Field(default=20.0, gt=0, description="a stalled listener's socket is reset")
    # REST API: runs may name a suite directory only below this root (unset: registered suites only).
    suites_root: Path | None = None
    # Limits (docs/api.md "Limits"). Rates and an episode's listeners are counted by each server
    # process on its own; the per-team connections in memory on SQLite and, on PostgreSQL, in the
    # database for every process (a slot of a process that died counts until slot_ttl_s has passed);
    # queued episodes in the database. 0 turns a limit off. Admin tokens are exempt from the
    # per-team connection limits, not from the others.
    max_bridges_per_team: int = Field(default=32, ge=0, description="bridge connections of a team "
                                      "(PostgreSQL: on every server process of the database together)")
    max_listeners_per_team: int = Field(default=32, ge=0, description="listen sockets of a team "
                                        "(PostgreSQL: on every server process of the database together)")
    max_listeners_per_episode: int = Field(default=64, ge=0, description="listen sockets of an episode, per process")
    slot_ttl_s: float = Field(default=30.0, gt=0, description="PostgreSQL: a process renews its connection slots "
                              "every third of this; those of a process that died stop counting this long after")
    max_queued_episodes_per_team: int = Field(default=20_000, ge=0, description="checked when a run is created")
    rest_burst: int = Field(default=120, ge=1, description="REST requests a token may make at once")
    rest_rate_per_s: float = Field(default=20.0, ge=0, description="REST requests per token and second, on average")
    connect_burst: int = Field(default=120, ge=1,
                               description="WebSocket connections and failed authentications of an address at once")
    connect_rate_per_s: float = Field(default=10.0, ge=0, description="WebSocket connections and failed "
                                      "authentications per address and second, on average")

    @cached_property
    def db_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'mpe.db').resolve()}"

    def queue_limit(self) -> int | None:
        """The most queued episodes a team may have (None: no limit)."""
        return self.max_queued_episodes_per_team or None

    def ensure_dirs(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)


def default_server_id() -> str:
    """A server id for a process whose settings name none: host, process id and a random tag."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def load_settings() -> Settings:
    """Settings from the environment, with the data directory created (the CLI's entry)."""
    s = Settings()
    s.ensure_dirs()
    return s
