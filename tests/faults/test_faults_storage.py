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
import os
import subprocess
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from clients.messages import EpisodeEnd
from server.core.status import AttemptStatus, EpisodeStatus
from server.db import Attempt, BridgeRow, Episode
from server.engine.leasing import create_run
from server.engine.outage import Outage, StorageFailed
from tests.support.faults import (
    OnLog,
    bridge_to,
    check_recording,
    server_on,
    unavailable,
    wait_run_through_outage,
)
from tests.support.world import Quiet, until, wait_run


@contextmanager
def tiny_disk(size_mb: int = 32):
    """A tmpfs of its own: a real file system that fills up."""
    path = Path(tempfile.mkdtemp(prefix="mpe-disk-"))
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        path.rmdir()
        unavailable(f"cannot mount a tmpfs here: {r.stderr.strip()}")
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


# --- PostgreSQL going down and coming back -------------------------------------------------

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
