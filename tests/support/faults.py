"""The fault tests' shared parts: a PostgreSQL cluster of the test's own (the ``own_postgres``
fixture, which tests/faults/conftest.py provides), a server on a given database, a hook on a log
line, the check that a completed recording is whole, waiting out an outage, and a digest of every
completed episode (to compare before and after a kill)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from sqlalchemy import select

from server.app import BackgroundServer
from server.auth import create_token
from server.core.status import EpisodeStatus
from server.db import Attempt, AudioChunk, Database, Episode, FrameRow
from server.engine.bundles import load_track
from server.engine.outage import UNAVAILABLE
from tests.support.servers import free_port
from tests.support.world import bridge, make_settings, wait_run

REQUIRED = os.environ.get("MPE_REQUIRE_SYSTEM") == "1"


def unavailable(why: str):
    """Skip for want of ``why`` on this machine; fail instead under MPE_REQUIRE_SYSTEM=1."""
    if REQUIRED:
        pytest.fail(f"{why} (MPE_REQUIRE_SYSTEM=1)")
    pytest.skip(why)


class OnLog(logging.Handler):
    """Calls ``action`` (once) on the first record of ``logger`` whose message contains ``text``."""

    def __init__(self, logger: str, text: str, action):
        super().__init__()
        self.logger, self.text, self.action, self.seen = logging.getLogger(logger), text, action, 0
        self.done = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen += 1
            if not self.done.is_set():
                self.done.set()
                self.action()

    def __enter__(self):
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self)


@asynccontextmanager
async def server_on(url: str, tmp: Path, suite: Path, **kw):
    """An in-process server on the database at ``url``: its database, the server and an admin token."""
    settings = make_settings(url, tmp, **kw)
    db = await asyncio.to_thread(Database, settings.db_url)
    token = create_token(db, "ops", admin=True)
    try:
        async with BackgroundServer(settings) as server:
            yield db, server, token
    finally:
        db.dispose()


def check_recording(db: Database, episode_id: str) -> Attempt:
    """The completed attempt's recording is whole: one frame row per room frame and slot, audio
    chunks contiguous from sample 0 to the episode's end on both tracks, no duplicates."""
    with db.session() as s:
        ep = s.get(Episode, episode_id)
        att = s.get(Attempt, ep.completed_attempt_id)
        seqs = s.scalars(select(FrameRow.seq).where(FrameRow.attempt_id == att.id,
                                                    FrameRow.direction == "room").order_by(FrameRow.seq)).all()
        assert seqs == list(range(att.n_frames))
        for track in ("room", "assistant"):
            chunks = s.execute(select(AudioChunk.idx, AudioChunk.start_sample, AudioChunk.n_samples)
                               .where(AudioChunk.attempt_id == att.id, AudioChunk.track == track)
                               .order_by(AudioChunk.idx)).all()
            assert [c.idx for c in chunks] == list(range(len(chunks)))
            at = 0
            for c in chunks:
                assert c.start_sample == at
                at += c.n_samples
            assert at == att.n_frames * 1920 >= att.end_sample
        return att


@asynccontextmanager
async def bridge_to(server, b, token):
    """The bridge ``b`` connected to ``server`` with ``token`` while inside (its task)."""
    class W:  # what tests.support.world.bridge needs of a world
        ws = f"ws://127.0.0.1:{server.port}"
    async with bridge(W, b, token) as task:
        yield task


class Cluster:
    """A PostgreSQL cluster of the test's own, run as the ``postgres`` user."""

    def __init__(self, root: Path, port: int):
        self.root, self.port, self.data = root, port, root / "data"

    def _pg(self, *args: str) -> None:
        bindir = Path(subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip()) \
            if shutil.which("pg_config") else next(Path("/usr/lib/postgresql").glob("*/bin"))
        cmd = [str(bindir / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=60)

    def init(self) -> None:
        self._pg("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def start(self) -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-w", "-l", str(self.root / "log"), "-o",
                 f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off", "start")

    def stop(self) -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-w", "-m", "fast", "stop")

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"


@pytest.fixture
def own_postgres():
    """A PostgreSQL cluster of the test's own (initdb in a temporary directory, never the shared
    test server), started; stopped and removed afterwards."""
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")) and not shutil.which("pg_config"):
        unavailable("no PostgreSQL server binaries (initdb) here")
    root = Path(tempfile.mkdtemp(prefix="mpe-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    c = Cluster(root, free_port())
    c.init()
    c.start()
    try:
        yield c
    finally:
        try:
            c.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(root, ignore_errors=True)


async def wait_run_through_outage(db, run, tasks, timeout: float = 120):
    """wait_run, but reading progress may itself meet the database away."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            return await wait_run(db, run, tasks, timeout=timeout)
        except UNAVAILABLE:
            await asyncio.sleep(0.1)
    raise AssertionError("the database never came back")
def completed(db) -> dict[str, str]:
    """Each completed episode: a digest of its completed attempt (both tracks and its row)."""
    out = {}
    with db.session() as s:
        for ep in s.scalars(select(Episode).where(Episode.status == EpisodeStatus.completed)):
            att = s.get(Attempt, ep.completed_attempt_id)
            h = hashlib.sha256(f"{att.id} {att.n_frames} {att.end_sample}".encode())
            for track in ("room", "assistant"):
                h.update(load_track(db, att.id, track).tobytes())
            out[ep.id] = h.hexdigest()
    return out
