"""Faults of storage while episodes run (docs/guarantees.md "Faults"): a disk that fills up under
the SQLite database, and a PostgreSQL server that goes down and comes back. Both are real: the
SQLite file lives on a small tmpfs that the test fills with a file, and the PostgreSQL is a
cluster of the test's own (initdb in a temporary directory, never the shared test server).

Promises: an attempt rides out a database that refuses its writes for less than
``storage_patience_s`` (nothing lost or duplicated: frames counted against the duration, audio
chunks contiguous); longer, the attempt fails with ``storage_error``, the bridge stays connected
and the episode is retried; the server stays up throughout.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from clients.messages import EpisodeEnd
from server.app import BackgroundServer
from server.auth import create_token
from server.core.status import AttemptStatus, EpisodeStatus
from server.db import Attempt, AudioChunk, BridgeRow, Database, Episode, FrameRow
from server.engine.leasing import create_run
from server.engine.outage import UNAVAILABLE, Outage, StorageFailed
from tests.support.world import Quiet, bridge, make_settings, until, wait_run

REQUIRED = os.environ.get("MPE_REQUIRE_SYSTEM") == "1"


def _unavailable(why: str):
    if REQUIRED:
        pytest.fail(f"{why} (MPE_REQUIRE_SYSTEM=1)")
    pytest.skip(why)


@contextmanager
def tiny_disk(size_mb: int = 32):
    """A tmpfs of its own: a real file system that fills up."""
    path = Path(tempfile.mkdtemp(prefix="mpe-disk-"))
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        path.rmdir()
        _unavailable(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
        path.rmdir()


class Disk:
    """Fill the file system with one file (what is free, to the byte), and free it again."""

    def __init__(self, root: Path):
        self.filler = root / "filler"

    def fill(self) -> None:
        st = os.statvfs(self.filler.parent)
        with open(self.filler, "ab") as f:
            try:
                f.write(b"\0" * (st.f_bavail * st.f_frsize))
            except OSError:  # the last block: full, as meant
                pass

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)


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


class Trouble(Quiet):
    """A quiet bridge that makes trouble (``at(seq)``) once, at room frame ``seq`` of its first episode,
    and notes how its episodes ended."""

    def __init__(self, seq: int, at):
        super().__init__()
        self.seq, self.at, self.done, self.ends = seq, at, False, []

    def step(self, s, room):
        if s == self.seq and not self.done:
            self.done = True
            self.at()
        return None

    def end_episode(self, end: EpisodeEnd) -> None:
        self.ends.append(end.reason)


@asynccontextmanager
async def server_on(url: str, tmp: Path, suite: Path, **kw):
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


async def test_sqlite_disk_full_is_ridden_out(tmp_path, mini_suite):
    """The disk fills during an episode and is freed once a write was refused: the attempt keeps
    what it could not write and completes with nothing lost."""
    with tiny_disk() as root:
        disk = Disk(root)
        async with server_on(f"sqlite:///{root / 'mpe.db'}", tmp_path, mini_suite) as (db, server, token):
            run = create_run(db, team="ops", model="x", suite_path=str(mini_suite), clock="lockstep", limit=1,
                             conditions=["explicit"])
            b = Trouble(25, disk.fill)
            with OnLog("mpe.storage", "refused a write", disk.free) as seen:
                async with bridge_to(server, b, token) as task:
                    p = await wait_run(db, run, [task])
                    await until(lambda: len(b.ends) == 1, "the bridge to be told")  # the end follows the record
            assert seen.seen >= 1 and b.done  # the disk was full while it ran, and a write was refused
            assert p.completed == 1 and b.ends == ["completed"]
            with db.session() as s:
                ep_id, = s.scalars(select(Episode.id).where(Episode.run_id == run)).all()
                assert s.scalar(select(func.count()).select_from(Attempt)) == 1  # one attempt: ridden out
            att = check_recording(db, ep_id)
            assert att.stats["server"]["storage_refused"] >= 1


async def test_sqlite_disk_full_for_too_long_fails_the_attempt_only(tmp_path, mini_suite):
    """The disk stays full past the patience: the attempt fails with storage_error, the bridge is
    told (episode.end aborted) and stays, the server answers, and once space is back the retry
    completes whole."""
    with tiny_disk() as root:
        disk = Disk(root)
        async with server_on(f"sqlite:///{root / 'mpe.db'}", tmp_path, mini_suite,
                             storage_patience_s=0.5) as (db, server, token):
            run = create_run(db, team="ops", model="x", suite_path=str(mini_suite), clock="lockstep", limit=1,
                             conditions=["explicit"])
            b = Trouble(25, disk.fill)
            # space comes back when the attempt gives up (so that its failure can be recorded)
            with OnLog("mpe.storage", "giving up", disk.free) as gave_up:
                async with bridge_to(server, b, token) as task:
                    p = await wait_run(db, run, [task])
                    async with httpx.AsyncClient() as http:  # the server stayed up
                        r = await http.get(f"http://127.0.0.1:{server.port}/v1/runs/{run}",
                                           headers={"Authorization": f"Bearer {token}"})
                        assert r.status_code == 200
                    await until(lambda: len(b.ends) == 2, "the bridge to be told")
            assert gave_up.seen == 1
            assert p.completed == 1 and b.ends == ["aborted", "completed"]  # the same connection, twice
            with db.session() as s:
                ep = s.scalars(select(Episode).where(Episode.run_id == run)).one()
                atts = s.scalars(select(Attempt).where(Attempt.episode_id == ep.id).order_by(Attempt.number)).all()
                assert [(a.status, a.error_code) for a in atts] == [(AttemptStatus.failed, "storage_error"),
                                                                    (AttemptStatus.completed, None)]
                assert ep.status == EpisodeStatus.completed and ep.completed_attempt_id == atts[1].id
            check_recording(db, ep.id)


@asynccontextmanager
async def bridge_to(server, b, token):
    class W:  # what tests.support.world.bridge needs of a world
        ws = f"ws://127.0.0.1:{server.port}"
    async with bridge(W, b, token) as task:
        yield task


# --- PostgreSQL going down and coming back -------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")) and not shutil.which("pg_config"):
        _unavailable("no PostgreSQL server binaries (initdb) here")
    root = Path(tempfile.mkdtemp(prefix="mpe-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    c = Cluster(root, _free_port())
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


async def test_postgres_down_mid_episode_is_ridden_out(tmp_path, mini_suite, own_postgres):
    """PostgreSQL stops during an episode and starts again once a write was refused: the episode
    in flight completes whole, and so does the next one (the bridge never notices)."""
    pg = own_postgres
    async with server_on(pg.url, tmp_path, mini_suite, lease_s=20.0, storage_patience_s=15.0) as (db, server, token):
        run = create_run(db, team="ops", model="x", suite_path=str(mini_suite), clock="lockstep", limit=1)  # a pair: two episodes
        b = Trouble(25, pg.stop)
        with OnLog("mpe.storage", "refused a write", lambda: threading.Thread(target=pg.start).start()) as seen:
            async with bridge_to(server, b, token) as task:
                p = await wait_run_through_outage(db, run, [task])
                await until(lambda: len(b.ends) == 2, "the bridge to be told")
        assert seen.seen >= 1 and b.done
        assert p.completed == 2 and b.ends == ["completed", "completed"]
        with db.session() as s:
            assert s.scalar(select(func.count()).select_from(Attempt)) == 2  # nothing was retried
            ids = s.scalars(select(Episode.id).where(Episode.run_id == run)).all()
        for ep_id in ids:
            check_recording(db, ep_id)


async def wait_run_through_outage(db, run, tasks, timeout: float = 120):
    """wait_run, but reading progress may itself meet the database away."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            return await wait_run(db, run, tasks, timeout=timeout)
        except UNAVAILABLE:
            await asyncio.sleep(0.1)
    raise AssertionError("the database never came back")


def test_outage_patience_on_an_injected_clock():
    t = [0.0]
    o = Outage(patience_s=2.0, clock=lambda: t[0])
    err = OperationalError("INSERT", {}, Exception("database or disk is full"))
    o.refuse(err)
    t[0] = 1.9
    o.refuse(err)  # still within patience: kept
    o.ended()  # a write went through: the next outage starts afresh
    t[0] = 10.0
    o.refuse(err)
    t[0] = 11.9
    o.refuse(err)
    t[0] = 12.0
    with pytest.raises(StorageFailed) as e:
        o.refuse(err)
    assert e.value.code == "storage_error" and o.refused == 5


async def test_postgres_down_while_bridges_idle_keeps_them_connected(tmp_path, mini_suite, own_postgres):
    """PostgreSQL stops while a bridge waits for work and starts again seconds later: the bridge
    stays on its one connection (its lease queries, status and token checks meet the database away
    and try again) and plays a run created once the database is back."""
    pg = own_postgres
    async with server_on(pg.url, tmp_path, mini_suite, wake_poll_s=0.5) as (db, server, token):
        b = Trouble(-1, lambda: None)
        with OnLog("mpe.bridge", "database unavailable", lambda: None) as met:
            async with bridge_to(server, b, token) as task:
                await asyncio.sleep(1.0)  # connected and idle
                await asyncio.to_thread(pg.stop)
                await asyncio.sleep(4.0)  # past the token check, the status and the fallback poll
                await asyncio.to_thread(pg.start)
                run = await asyncio.to_thread(create_run, db, team="ops", model="x", suite_path=str(mini_suite),
                                              clock="lockstep", limit=1, conditions=["explicit"])
                p = await wait_run_through_outage(db, run, [task])
                await until(lambda: len(b.ends) == 1, "the bridge to be told")
                assert not task.done()  # the bridge never gave up
        assert met.seen >= 1  # the bridge's loop did meet the database away
        assert p.completed == 1 and b.ends == ["completed"]
        with db.session() as s:
            assert s.scalar(select(func.count()).select_from(BridgeRow)) == 1  # one connection throughout
