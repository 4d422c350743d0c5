"""Idle connections cost the server next to nothing, over real WebSockets and raw TCP, on SQLite and
PostgreSQL: idle bridges do not poll leasing (the work signal wakes them, server.engine.worksignal),
open connections share one token check, new work is still picked up — from this process, from
another process (PostgreSQL NOTIFY; the fallback poll on SQLite) and after a crashed bridge's lease
ran out —, a listener that never reads has its socket reset, and idle HTTP connections are closed."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import event, select

from server.core.status import AttemptStatus, EpisodeStatus
from server.db import Attempt, Episode
from server.engine.leasing import create_run, lease_episode
from server.engine.worksignal import WorkKey, WorkSignal
from tests.support.world import Quiet, bridge, narrow_server_side, stalled, until, wait_run, world_on

ROOT = Path(__file__).resolve().parents[1]
N_BRIDGES = 20
PERIOD_S = 2.0


@contextmanager
def statements(engine, table: str):
    """Count the statements ``engine`` runs that name ``table`` (a list of their texts)."""
    seen: list[str] = []
    pattern = re.compile(rf"\b{table}\b")

    def count(conn, cursor, statement, *args) -> None:
        if pattern.search(statement):
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", count)


def waiting(w) -> int:
    """How many bridges wait on the server's work signal."""
    return sum(len(g.waiters) for g in w.server.app.state.mpe.work.groups.values())


def one_episode(w, model: str = "x") -> str:
    return create_run(w.db, team="alpha", model=model, suite_path=str(w.suite), clock="lockstep", limit=1,
                      conditions=["explicit"])


async def test_a_wake_reaches_one_waiter_per_group_in_order_and_is_never_lost():
    sig = WorkSignal(None, lambda db, keys: set(), poll_s=60)
    a = WorkKey("alpha", False, "x", ("lockstep",), False)
    b = WorkKey("alpha", False, "y", ("lockstep",), False)

    async def waiter(key: WorkKey) -> asyncio.Task:
        task = asyncio.create_task(sig.wait(key, 30))
        await asyncio.sleep(0)  # it is waiting now
        return task

    with sig.member(a), sig.member(a), sig.member(a), sig.member(b):
        first, second, other = await waiter(a), await waiter(a), await waiter(b)
        sig.announced()  # one bridge of each group: the longest-waiting one
        assert await asyncio.wait_for(first, 5) is True and await asyncio.wait_for(other, 5) is True
        assert not second.done()
        third = await waiter(a)
        sig.wake(a)  # reaches `second`, which is cancelled before it can use it: `third` gets it
        second.cancel()
        await asyncio.gather(second, return_exceptions=True)
        assert await asyncio.wait_for(third, 5) is True
        sig.wake(a)  # nobody waits: kept for the next one
        assert await sig.wait(a, 30) is True
        assert await sig.wait(a, 0.01) is False  # nothing announced
    assert sig.groups == {}


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_idle_bridges_do_not_poll_and_a_new_run_wakes_one(kind, tmp_path, mini_suite):
    async with world_on(kind, tmp_path, mini_suite, wake_poll_s=0.25) as w:
        engine = w.server.app.state.mpe.db.engine
        clients = [bridge(w, Quiet()) for _ in range(N_BRIDGES)]
        tasks = [await c.__aenter__() for c in clients]
        try:
            await until(lambda: waiting(w) == N_BRIDGES)
            with statements(engine, "episodes") as leasing, statements(engine, "tokens") as tokens:
                await asyncio.sleep(PERIOD_S)
            polled = N_BRIDGES * PERIOD_S / w.settings.poll_s  # what one lease query per bridge and poll_s costs
            assert len(leasing) < polled / 20, (len(leasing), polled)
            # one token check per process every 2 s, not one per connection
            assert len(tokens) <= PERIOD_S / 2 + 1, tokens

            with statements(engine, "episodes") as after:
                run = one_episode(w)
                progress = await wait_run(w.db, run, tasks)
            assert progress.completed == 1
            picks = [s for s in after if "ORDER BY runs.created_at" in s]  # lease_episode's first query
            # the bridges woken (about one per announcement and fallback hit), not every idle one
            assert len(picks) < N_BRIDGES / 2, len(picks)
        finally:
            for c in clients:
                await c.__aexit__(None, None, None)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_run_created_by_another_process_is_picked_up(kind, tmp_path, mini_suite):
    # PostgreSQL: only NOTIFY can wake the bridge (the fallback poll would come after the test's end)
    poll = 600.0 if kind == "postgres" else 0.25
    async with world_on(kind, tmp_path, mini_suite, wake_poll_s=poll) as w:
        state = w.server.app.state.mpe
        if kind == "postgres":
            await asyncio.wait_for(state.work.listening.wait(), 20)
        async with bridge(w, Quiet()) as task:
            await until(lambda: waiting(w) == 1)
            code = ("import sys; from server.db import Database; from server.engine.leasing import create_run; "
                    "print(create_run(Database(sys.argv[1]), team='alpha', model='x', suite_path=sys.argv[2], "
                    "clock='lockstep', limit=1, conditions=['explicit']))")
            done = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", code, w.settings.db_url,
                                                            str(w.suite)], cwd=ROOT, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            progress = await wait_run(w.db, done.stdout.strip(), [task], timeout=30)
        assert progress.completed == 1 and progress.failed_attempts == 0


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_an_expired_lease_is_retried_by_an_idle_bridge(kind, tmp_path, mini_suite):
    async with world_on(kind, tmp_path, mini_suite, wake_poll_s=0.25) as w:
        run = one_episode(w)
        crashed = lease_episode(w.db, team="alpha", admin=False, model="x", clocks=["lockstep"], owner="gone",
                                bridge_id="crashed", bridge_rate=24000, model_revision="", lease_s=1.0)
        assert crashed is not None
        async with bridge(w, Quiet()) as task:  # connects while the lease still holds, then waits idle
            progress = await wait_run(w.db, run, [task], timeout=30)
        with w.db.session() as s:
            attempts = s.scalars(select(Attempt).order_by(Attempt.number)).all()
            assert [(a.status, a.error_code) for a in attempts] == [
                (AttemptStatus.abandoned, "lease_expired"), (AttemptStatus.completed, None)]
        assert progress.completed == 1


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_listener_that_never_reads_is_reset_and_the_episode_goes_on(kind, tmp_path, mini_suite):
    async with world_on(kind, tmp_path, mini_suite, listen_send_timeout_s=1.0) as w:
        run = one_episode(w)
        with w.db.session() as s:
            ep_id = s.scalars(select(Episode.id).where(Episode.run_id == run)).one()
        sock = await asyncio.to_thread(stalled, w.server.port, f"/v1/episodes/{ep_id}/listen?token={w.tokens['alpha']}")
        me = sock.getsockname()
        narrow_server_side(w.server, sock)

        def open_on_server() -> bool:
            return any(getattr(p, "transport", None) is not None and not p.transport.is_closing()
                       and p.transport.get_extra_info("peername") == me for p in w.server.server.server_state.connections)

        try:
            await until(lambda: ep_id in w.hub.pending)  # it waits for the queued episode, attached from frame 0
            async with bridge(w, Quiet()) as task:
                progress = await wait_run(w.db, run, [task], timeout=60)
                await until(lambda: not open_on_server(), timeout=30)  # the server let go of it
            assert progress.completed == 1 and progress.failed_attempts == 0
            with w.db.session() as s:
                ep = s.get(Episode, ep_id)
                att = s.get(Attempt, ep.completed_attempt_id)
                assert ep.status == EpisodeStatus.completed and att.n_frames > 0
            # reset, not closed: what the server had buffered for it is dropped, no FIN after it
            sock.settimeout(10)
            with pytest.raises(ConnectionResetError):
                while sock.recv(65536):
                    pass
        finally:
            sock.close()


def _closed_by_server(sock: socket.socket) -> bool:
    """Read until the server closes (True) or 10 s pass (False)."""
    sock.settimeout(10)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


async def test_idle_http_connections_are_closed_by_the_server(tmp_path, mini_suite):
    async with world_on("sqlite", tmp_path, mini_suite, http_idle_timeout_s=0.5) as w:
        def connect() -> socket.socket:
            return socket.create_connection(("127.0.0.1", w.server.port))

        def exchange() -> tuple[bytes, bool]:
            never = connect()  # opened, never a request
            partial = connect()  # a head that never completes
            partial.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            kept = connect()  # one keep-alive request, then idle
            kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
            kept.settimeout(10)
            head = b""
            while b"}" not in head and (chunk := kept.recv(4096)):  # the response, then nothing
                head += chunk
            closed = all(_closed_by_server(s) for s in (never, partial, kept))
            for s in (never, partial, kept):
                s.close()
            return head, closed

        head, closed = await asyncio.to_thread(exchange)
        assert head.startswith(b"HTTP/1.1 200") and b'"ok":true' in head
        assert closed
