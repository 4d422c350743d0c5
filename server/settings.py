"""Settings (pydantic-settings), created once at the edge and injected everywhere else."""

from __future__ import annotations

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
    poll_s: float = 0.5
    # New runs (mpe run create, POST /v1/runs, mpe demo) unless they say otherwise.
    max_attempts: int = Field(default=3, ge=1, description="attempts per episode")
    max_inflight: int = Field(default=1, ge=1, le=MAX_INFLIGHT, description="lockstep: room frames in flight")
    # Recording (§8): chunks are flushed at least this often.
    flush_s: float = 1.0
    # Wire protocol
    handshake_timeout_s: float = 10.0
    lockstep_timeout_s: float = 30.0
    realtime_grace_frames: int = 25  # realtime: how far ahead of its arrival slot a frame may be queued
    # REST API: runs may name a suite directory only below this root (unset: registered suites only).
    suites_root: Path | None = None

    @cached_property
    def db_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'mpe.db').resolve()}"

    def ensure_dirs(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)


def load_settings() -> Settings:
    """Settings from the environment, with the data directory created (the CLI's entry)."""
    s = Settings()
    s.ensure_dirs()
    return s
