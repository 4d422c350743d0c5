"""``mpe serve --workers N`` (server/cli/supervisor.py): N real server processes on one port against the
real PostgreSQL, bridges, listeners and REST clients connecting to that port. One run is shared by
both workers, each episode once; a listener follows an episode the other worker runs; a worker
killed mid-run is started again and loses nothing; SQLite is refused."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import websockets
from sqlalchemy import select

from clients.codec import KIND_ROOM, decode_frame
from clients.sdk import Bridge, BridgeClient, BridgeOptions
from server.auth import create_token
from server.cli.supervisor import (
    STARTED_LOG,
    RestartBackoff,
    WorkersUnsupported,
    check_workers,
    reserve_port,
    worker_server_id,
)
from server.core.status import AttemptStatus, EpisodeStatus
from server.db import Attempt, BridgeRow, Database, Episode
from server.engine.leasing import create_run
from server.engine.progress import run_progress
from tests.support.databases import database_url
from tests.support.faults import completed
from tests.support.servers import check_attempt_recording, free_port, start_server
from tests.support.world import FRAME, make_settings, wait_run

HOLD_SEQ = 25  # gated bridges stop answering at this room frame until the test lets them go


# --- pure parts ----------------------------------------------------------------------------------


def test_restart_backoff_doubles_while_a_worker_keeps_dying_and_resets_once_it_ran():
    b = RestartBackoff(min_s=0.5, max_s=4.0, stable_s=30.0)
    assert [b.delay(1.0) for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert b.delay(30.0) == 0.5  # it ran stable_s: a fresh start
    assert b.delay(0.1) == 1.0


def test_more_than_one_worker_needs_postgresql_and_linux(tmp_path, monkeypatch):
    sqlite = make_settings(f"sqlite:///{tmp_path / 'mpe.db'}", tmp_path)
    check_workers(sqlite, 1)
    with pytest.raises(WorkersUnsupported, match="needs PostgreSQL"):
        check_workers(sqlite, 2)
    pg = make_settings("postgresql+psycopg://u@h/db", tmp_path)
    check_workers(pg, 4)
    monkeypatch.setattr(sys, "platform", "darwin")  # SO_REUSEPORT does not spread connections there
    with pytest.raises(WorkersUnsupported, match="needs Linux"):
        check_workers(pg, 2)
    check_workers(pg, 1)
    assert worker_server_id("host-1-abc", 2) == "host-1-abc-w2"


def test_the_port_is_held_for_the_workers_and_refused_when_taken():
    held = reserve_port("127.0.0.1", 0)  # port 0: a free one, for every worker to bind
    port = held.getsockname()[1]
    try:
        with pytest.raises(ConnectionRefusedError):  # bound, never listening: it takes no connection
            socket.create_connection(("127.0.0.1", port), timeout=2)
        with pytest.raises(WorkersUnsupported, match="cannot bind"):  # another supervisor cannot join it
            reserve_port("127.0.0.1", port)
    finally:
        held.close()
    other = socket.create_server(("127.0.0.1", 0))
    try:
        with pytest.raises(WorkersUnsupported, match="cannot bind"):
            reserve_port("127.0.0.1", other.getsockname()[1])
    finally:
        other.close()


def test_serve_workers_on_sqlite_is_refused_with_a_clear_message(tmp_path):
    env = dict(os.environ, DATABASE_URL=f"sqlite:///{tmp_path / 'mpe.db'}", MPE_DATA_DIR=str(tmp_path / "data"))
    out = subprocess.run([sys.executable, "-m", "server.cli", "serve", "--port", str(free_port()), "--workers", "2"],
                         env=env, capture_output=True, text=True, timeout=60)
    said = " ".join(out.stderr.split())
    assert out.returncode == 2, said
    assert "--workers 2 needs PostgreSQL" in said and "SQLite lets one process write at a time" in said
    assert not (tmp_path / "mpe.db").exists()  # refused before anything touched the database


# --- real processes on PostgreSQL -----------------------------------------------------------------


@pytest.fixture
def pg(tmp_path):
    """Settings on a fresh, empty PostgreSQL schema, and a way to open it (migrating it, or not)."""
    with database_url("postgres", tmp_path) as url:
        opened: list[Database] = []

        def open_db(migrate: bool = True) -> Database:
            opened.append(Database(url, migrate=migrate))
            return opened[-1]

        yield make_settings(url, tmp_path), open_db
        for d in opened:
            d.dispose()


class Workers:
    """``mpe serve --workers 2`` on a free port, its log in a file."""

    def __init__(self, settings, tmp: Path, n: int = 2):
        self.port, self.log = free_port(), tmp / "serve.log"
        with self.log.open("wb") as f:
            self.proc = start_server(settings, self.port, "--workers", str(n), stderr=f)
        t0 = time.monotonic()
        while "serving on" not in self.text():
            assert self.proc.poll() is None, self.text()
            assert time.monotonic() - t0 < 60, self.text()
            time.sleep(0.1)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def started(self) -> list[tuple[int, int, str]]:
        """(worker, pid, server id) of every start so far, in order."""
        return [(int(i), int(pid), sid) for i, pid, sid in STARTED_LOG.findall(self.text())]

    def server_ids(self) -> set[str]:
        return {sid for _, _, sid in self.started()}

    def pid(self, server_id: str) -> int:
        return [pid for _, pid, sid in self.started() if sid == server_id][-1]

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


class Gated(Bridge):
    """A silent bridge that stops at room frame HOLD_SEQ of its ``hold_from``-th episode (and of every
    later one) until ``gate`` opens; step() runs in a thread, so pings go on meanwhile."""

    name = "gated"

    def __init__(self, gate: threading.Event, hold_from: int = 1, delay_s: float = 0.0):
        super().__init__()
        self.gate, self.hold_from, self.delay_s, self.served = gate, hold_from, delay_s, 0

    def reset(self, episode):
        self.served += 1

    def step(self, seq, room):
        if seq == HOLD_SEQ and self.served >= self.hold_from:
            self.gate.wait(60)
        if self.delay_s:
            time.sleep(self.delay_s)
        return None


async def _connect(server: str, token: str, bridge: Bridge) -> tuple[BridgeClient, asyncio.Task]:
    client = BridgeClient(bridge, BridgeOptions(server=server, token=token, backoff_min_s=0.1, backoff_max_s=0.3))
    task = asyncio.create_task(client.run())
    t0 = time.monotonic()
    while client.bridge_id is None:
        assert not task.done(), task
        assert time.monotonic() - t0 < 30, "the bridge did not connect"
        await asyncio.sleep(0.02)
    return client, task


def _bridge_server(db, bridge_id: str) -> str:
    with db.session() as s:
        return s.get(BridgeRow, bridge_id).server_id


async def _stop(clients) -> None:
    for c, _ in clients:
        c.stop()
    await asyncio.gather(*(t for _, t in clients), return_exceptions=True)


def _running(db, run_id: str) -> list[Episode]:
    with db.session() as s:
        return list(s.scalars(select(Episode).where(Episode.run_id == run_id, Episode.status == EpisodeStatus.running)))


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (an exited one not yet reaped is a zombie: gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


async def _until(what, timeout: float = 60):
    t0 = time.monotonic()
    while not (got := await asyncio.to_thread(what)):
        assert time.monotonic() - t0 < timeout, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
    return got


async def _listener_on_other_worker(url: str):
    """A listen socket that landed on a worker other than the one running the episode: it tails the
    database (``hello`` with ``tail``). The kernel spreads connections, so try until one does. On the
    episode's own worker, a socket that comes between the lease and the attempt's live channel is told
    ``waiting`` first, then ``hello`` (docs/api.md)."""
    local = 0
    for _ in range(40):
        ws = await websockets.connect(url, max_size=1 << 20)
        while (hello := json.loads(await ws.recv()))["type"] == "waiting":
            assert hello["status"] == "running", hello
        assert hello["type"] == "hello", hello
        if hello.get("tail"):
            return ws, hello, local
        local += 1  # on the episode's own worker: the live hub
        await ws.close()
    raise AssertionError("40 listen sockets all landed on the episode's own worker")


async def _hear(ws) -> tuple[list[tuple[int, int]], list[dict]]:
    frames, texts = [], []
    async for msg in ws:
        if isinstance(msg, bytes):
            f = decode_frame(msg, n_samples=FRAME)
            frames.append((f.kind, f.seq))
        else:
            texts.append(json.loads(msg))
    return frames, texts


async def test_two_workers_share_one_run_listeners_and_rest_work_on_either(pg, mini_suite, tmp_path):
    settings, open_db = pg
    workers = Workers(settings, tmp_path)  # on the empty schema: the supervisor migrates it, once
    db = open_db(migrate=False)
    tok, admin = create_token(db, "local"), create_token(db, "ops", admin=True)
    ids = workers.server_ids()
    assert len(ids) == 2
    server = f"ws://127.0.0.1:{workers.port}"
    gate = threading.Event()
    clients, kept = [], {sid: 0 for sid in ids}
    try:
        # two bridges on each worker: connect until the kernel has put two on each (extras leave)
        for _ in range(30):
            c = await _connect(server, tok, Gated(gate))
            sid = await asyncio.to_thread(_bridge_server, db, c[0].bridge_id)
            if kept[sid] < 2:
                kept[sid] += 1
                clients.append(c)
            else:
                await _stop([c])
            if min(kept.values()) == 2:
                break
        assert kept == {sid: 2 for sid in ids}
        run = create_run(db, team="local", model="gated", suite_path=str(mini_suite), clock="lockstep")
        # each bridge holds its episode at HOLD_SEQ: all four are running at once, two on each worker
        held = await _until(lambda: (r := _running(db, run)) and len(r) == 4 and r)
        assert sorted(e.lease_owner for e in held) == sorted([*ids, *ids])

        # REST on many connections (each request's connection lands on one worker): all answer
        answered = set()
        for _ in range(40):
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{workers.port}") as http:
                who = (await http.get("/healthz")).json()["server_id"]
                r = await http.get(f"/v1/runs/{run}", headers={"Authorization": f"Bearer {tok}"})
                assert r.status_code == 200 and r.json()["id"] == run, r.text
                answered.add(who)
            if answered == ids:
                break
        assert answered == ids

        # a listener (admin) on the worker that does not run the episode follows it from the database
        ep = held[0]
        ws, hello, _ = await _listener_on_other_worker(
            f"{server}/v1/episodes/{ep.id}/listen?token={admin}")
        assert hello["attempt_id"] == ep.current_attempt_id and hello["t"] <= (HOLD_SEQ + 1) * FRAME
        hearing = asyncio.create_task(_hear(ws))
        gate.set()
        p = await wait_run(db, run, [t for _, t in clients], timeout=120)
        frames, texts = await asyncio.wait_for(hearing, 60)
    finally:
        gate.set()
        await _stop(clients)
        assert workers.stop() == 0, workers.text()
    assert p.status == "finished" and p.completed == 4 and p.failed == 0
    with db.session() as s:
        atts = s.scalars(select(Attempt)).all()
        eps = s.scalars(select(Episode)).all()
    assert all([a.status for a in atts if a.episode_id == e.id] == [AttemptStatus.completed] for e in eps)
    assert sorted(a.server_id for a in atts) == sorted([*ids, *ids])  # each worker ran two episodes
    # the listener heard the episode to its end: room audio after it joined, the events, end, done
    room = [seq for kind, seq in frames if kind == KIND_ROOM]
    with db.session() as s:
        n_frames = s.get(Attempt, ep.current_attempt_id).n_frames
    assert room and room[-1] == n_frames - 1 and min(room) >= hello["t"] // FRAME - 8
    kinds = [m["type"] for m in texts]
    assert kinds[-2:] == ["end", "done"] and texts[-2]["reason"] == "completed"
    events = [m["event"] for m in texts if m["type"] == "event"]
    assert "clip.start" in events and events[-1] == "episode.end", events  # the tail's last rows too


async def test_a_worker_killed_mid_run_is_restarted_and_loses_nothing_and_none_outlives_its_supervisor(pg, mini_suite, tmp_path):
    settings, open_db = pg
    db = open_db()
    tok = create_token(db, "local")
    workers = Workers(settings, tmp_path)
    server = f"ws://127.0.0.1:{workers.port}"
    gate = threading.Event()
    run = create_run(db, team="local", model="gated", suite_path=str(mini_suite), clock="lockstep")
    clients = []
    try:
        # each bridge finishes one episode, then holds its second: two completed, two running
        clients = [await _connect(server, tok, Gated(gate, hold_from=2)) for _ in range(2)]
        await _until(lambda: (p := run_progress(db, run)).completed == 2 and p.running == 2)
        before = await asyncio.to_thread(completed, db)
        victim_id = _running(db, run)[0].lease_owner
        victim = workers.pid(victim_id)
        lost = {e.current_attempt_id for e in _running(db, run) if e.lease_owner == victim_id}
        os.kill(victim, signal.SIGKILL)
        gate.set()  # the held episode on the other worker goes on (before its lockstep timeout)
        await _until(lambda: workers.pid(victim_id) != victim)  # the supervisor started it again
        p = await wait_run(db, run, [t for _, t in clients], timeout=120)
        restarted = workers.pid(victim_id)
    finally:
        gate.set()
        await _stop(clients)
        # the supervisor killed too: its workers (the last start of each) stop by themselves
        last = {i: pid for i, pid, _ in workers.started()}
        workers.proc.kill()
        workers.proc.wait()
        try:
            await _until(lambda: not any(_alive(pid) for pid in last.values()), timeout=30)
        finally:
            for pid in last.values():
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
    assert "the supervisor is gone; stopping" in workers.text()
    assert f"worker {victim_id[-1]} (pid {victim}) was killed by signal 9" in workers.text()
    assert restarted != victim
    assert p.status == "finished" and p.completed == p.total == 4 and p.failed == 0
    after = await asyncio.to_thread(completed, db)
    assert {k: after[k] for k in before} == before  # completed episodes untouched
    with db.session() as s:
        atts = s.scalars(select(Attempt)).all()
        eps = s.scalars(select(Episode)).all()
    gone = [a for a in atts if a.status != AttemptStatus.completed]
    assert {a.id for a in gone} == lost  # exactly the attempts the killed worker ran, nothing else
    assert all(a.status == AttemptStatus.abandoned and a.error_code == "lease_expired" and a.server_id == victim_id
               for a in gone)
    for e in eps:  # each episode once; a lost one retried to completion
        assert [a.status for a in atts if a.episode_id == e.id].count(AttemptStatus.completed) == 1
        check_attempt_recording(db, e.completed_attempt_id)


def test_the_database_tail_ends_with_the_attempts_last_rows(pg, mini_suite):
    """The race a tail on another worker meets: the attempt's last events are committed, then the
    attempt ends, both between two statements of one read. A read that sees the attempt ended
    must also hold those events (PostgreSQL read committed: each statement sees what was committed
    before it), or the listener's stream would end without them; and a read that sees it running
    must see its lease alive, or the stream would end with ``lease_expired`` instead."""
    from sqlalchemy import event

    from server.api.listen import Stream
    from server.db import EventRow
    from server.engine.leasing import finish_attempt, lease_episode

    _, open_db = pg
    db = open_db()
    create_run(db, team="local", model="m", suite_path=str(mini_suite), clock="lockstep")
    lease = lease_episode(db, team="local", admin=False, model="m", clocks=["lockstep"], owner="w-other",
                          bridge_id="b1", bridge_rate=24000, model_revision="", lease_s=30)
    writer = open_db(migrate=False)  # the worker running the attempt
    fired = []

    def meanwhile(*_):  # after the read's first statement: the running worker's last flush, then its end
        if fired:
            return
        fired.append(True)
        with writer.session() as s:
            s.add(EventRow(attempt_id=lease.attempt_id, t=1920, type="episode.end", data={}))
        finish_attempt(writer, lease, ok=True, end_sample=1920, n_frames=1)

    event.listen(db.engine, "after_cursor_execute", meanwhile)
    try:
        reads = [Stream._read(db, lease.attempt_id, 0, {"room": 0, "assistant": 0}) for _ in range(2)]
    finally:
        event.remove(db.engine, "after_cursor_execute", meanwhile)
    assert fired
    heard = [[row.type for row in events] for events, _, _, _ in reads]
    status = [st for _, _, st, _ in reads]
    assert status[-1] == AttemptStatus.completed and "episode.end" in heard[0] + heard[1]
    for (types, _, st, alive) in reads:
        if st == AttemptStatus.completed:  # read as ended: its last events are in the same read
            assert "episode.end" in [row.type for row in types], (heard, status)
        else:  # read as running: its lease (30 s) is alive, not lost because the attempt ended meanwhile
            assert st == AttemptStatus.running and alive, (status, [r[3] for r in reads])
