"""Leasing under concurrency (DESIGN §10): leases, finished attempts and cancels that meet on the
same run. Every unit of work locks the run row first and its episodes after it, so two of them
never wait on each other in a cycle (PostgreSQL: no ``DeadlockDetected``), and a cancel never
leaves an episode queued behind it. Each test runs on SQLite and on PostgreSQL; each thread has
its own :class:`~server.db.Database` (its own connections), as separate servers would.
"""

from __future__ import annotations

import random
import threading
import time

from sqlalchemy import event, select, text

from server.core.status import DONE_EPISODE, EpisodeStatus, RunStatus
from server.db import Database, Episode, Run
from server.engine.leasing import cancel_run, create_run, finish_attempt, lease_episode, lease_ranks
from server.engine.matching import bridge_work

T = 10.0  # generous per-step timeout: every step here takes well under a second when nothing is stuck


def _lease(db: Database, owner: str = "s1", lease_s: float = 20.0):
    return lease_episode(db, team="local", admin=False, model="m", clocks=["lockstep"], owner=owner,
                         bridge_id=f"b-{owner}", bridge_rate=24000, model_revision="", lease_s=lease_s)


def _new_run(db: Database, suite, **kw) -> str:
    return create_run(db, team="local", model="m", suite_path=str(suite), clock="lockstep", **kw)


def _state(db: Database, run_id: str) -> tuple[RunStatus, list[EpisodeStatus]]:
    with db.session() as s:
        status = s.scalar(select(Run.status).where(Run.id == run_id))
        eps = s.scalars(select(Episode.status).where(Episode.run_id == run_id).order_by(Episode.ordinal)).all()
        return status, list(eps)


class Pause:
    """Stops the first statement on ``db``'s engine that ``match`` accepts, right after it ran (its
    locks held, its transaction open), until :meth:`release`."""

    def __init__(self, db: Database, match):
        self.db, self.match = db, match
        self.paused, self.released = threading.Event(), threading.Event()
        self.pid: int | None = None  # PostgreSQL: the paused connection's backend
        event.listen(db.engine, "after_cursor_execute", self._after)

    def _after(self, conn, cursor, statement, parameters, context, executemany) -> None:
        if self.paused.is_set() or not self.match(statement):
            return
        if self.db.is_postgres:
            self.pid = conn.connection.dbapi_connection.info.backend_pid
        self.paused.set()
        self.released.wait(T)

    def release(self) -> None:
        self.released.set()


class Worker(threading.Thread):
    """Runs ``fn`` once in its own thread and keeps what it returned or raised."""

    def __init__(self, fn, *args, **kw):
        super().__init__(daemon=True)
        self.fn, self.args, self.kw = fn, args, kw
        self.result, self.error = None, None

    def run(self) -> None:
        try:
            self.result = self.fn(*self.args, **self.kw)
        except BaseException as exc:  # noqa: BLE001 - the test asserts on it
            self.error = exc


def _wait_until_blocked(db: Database, pause: Pause, worker: Worker, timeout: float = 3.0) -> None:
    """Until ``worker`` waits on a lock that the paused connection holds, or has ended. SQLite has no
    way to see a connection that waits for its write lock: give it a moment instead."""
    if not db.is_postgres:
        worker.join(0.5)
        return
    end = time.monotonic() + timeout
    while worker.is_alive() and time.monotonic() < end:
        with db.engine.connect() as c:
            n = c.execute(text("SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))"),
                          {"pid": pause.pid}).scalar()
        if n:
            return
        time.sleep(0.01)


def _side(settings) -> Database:
    return Database(settings.db_url, migrate=False)


def _release_and_join(db, pause, first, cancel) -> None:
    """Once the cancel waits on the paused unit of work, let that go on; both must end cleanly."""
    _wait_until_blocked(db, pause, cancel)
    pause.release()
    for w in (first, cancel):
        w.join(T)
        assert not w.is_alive(), f"{w.fn.__name__} is stuck"
        assert w.error is None, f"{w.fn.__name__} raised {w.error!r}"


def test_a_cancel_meeting_a_first_lease_does_not_deadlock(settings, db, mini_suite):
    """The lease holds its episode's row when the cancel comes (the run still queued, so the lease
    will start it): the cancel waits for the lease, never the other way round as well."""
    run = _new_run(db, mini_suite, limit=1, conditions=["explicit"])
    leaser, canceller = _side(settings), _side(settings)
    try:
        # stop the lease right after it locked (PostgreSQL) or picked (SQLite) the episode it will take
        pause = Pause(leaser, lambda sql: sql.lstrip().startswith("SELECT") and "FROM episodes" in sql
                      and ("FOR UPDATE" in sql or not leaser.is_postgres))
        lease = Worker(_lease, leaser)
        lease.start()
        assert pause.paused.wait(T), "the lease never selected an episode"
        cancel = Worker(cancel_run, canceller, run)
        cancel.start()
        _release_and_join(db, pause, lease, cancel)
        if lease.result is not None:  # the lease came first: its bridge finds the run cancelled
            finish_attempt(leaser, lease.result, ok=False, error_code="cancelled")
        assert _state(db, run) == (RunStatus.cancelled, [EpisodeStatus.cancelled])
        assert _lease(db) is None
    finally:
        leaser.dispose()
        canceller.dispose()


def test_a_failed_attempt_finishing_during_a_cancel_is_not_requeued(settings, db, mini_suite):
    """The bridge's attempt fails (attempts left: it would be queued again) while its run is being
    cancelled. Whichever commits first, the episode ends cancelled: never queued in a cancelled run."""
    run = _new_run(db, mini_suite, limit=1, conditions=["explicit"])
    leased = _lease(db)
    assert _state(db, run) == (RunStatus.running, [EpisodeStatus.running])
    finisher, canceller = _side(settings), _side(settings)
    try:
        # stop the finish right after it read its run (the status it decides on)
        pause = Pause(finisher, lambda sql: sql.lstrip().startswith("SELECT") and "FROM runs" in sql)
        finish = Worker(finish_attempt, finisher, leased, ok=False, error_code="disconnected", end_sample=1920,
                        n_frames=1)
        finish.start()
        assert pause.paused.wait(T), "finish_attempt never read its run"
        cancel = Worker(cancel_run, canceller, run)
        cancel.start()
        _release_and_join(db, pause, finish, cancel)
        assert _state(db, run) == (RunStatus.cancelled, [EpisodeStatus.cancelled])
        assert _lease(db) is None
    finally:
        finisher.dispose()
        canceller.dispose()


def test_bridges_leasing_and_finishing_while_runs_are_cancelled(settings, db, mini_suite):
    """Six bridges (each its own Database) lease and finish episodes as fast as they can, most
    attempts failing so that episodes are queued again, while the runs are cancelled one after
    another, until the last cancel. Bounded: 20 runs of four episodes, a few seconds. No unit of work raises (no
    deadlock), and every run ends cancelled with every episode ended (or, if its bridges completed
    all four episodes before its cancel, finished)."""
    # the bridges race until every cancel is done (the deadline only guards against a hang)
    n_runs, n_bridges, deadline = 20, 6, time.monotonic() + 60.0
    runs: list[str] = []
    cancelled = threading.Event()
    errors: list[BaseException] = []

    def bridge(i: int) -> None:
        own = _side(settings)
        rng = random.Random(i)
        try:
            while time.monotonic() < deadline:
                lease = _lease(own, owner=f"s{i}")
                if lease is None:
                    if cancelled.is_set():
                        return
                    time.sleep(0.002)
                    continue
                if rng.random() < 0.5:
                    time.sleep(rng.random() * 0.003)
                finish_attempt(own, lease, ok=rng.random() < 0.1, error_code="disconnected", end_sample=0)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            own.dispose()

    def canceller() -> None:
        own = _side(settings)
        rng = random.Random(99)
        try:
            for run in runs:
                time.sleep(rng.random() * 0.006)  # bridges are starting it, or retrying its episodes
                cancel_run(own, run)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            cancelled.set()
            own.dispose()

    for _ in range(n_runs):
        runs.append(_new_run(db, mini_suite, max_attempts=1000))  # attempts never run out here
    threads = [threading.Thread(target=bridge, args=(i,), daemon=True) for i in range(n_bridges)]
    threads.append(threading.Thread(target=canceller, daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + T)
    assert not any(t.is_alive() for t in threads), "a thread is stuck"
    assert not errors, f"{len(errors)} unit(s) of work raised, the first: {errors[0]!r}"
    assert cancelled.is_set(), "the runs were not all cancelled"
    for run in runs:
        status, eps = _state(db, run)
        assert len(eps) == 4 and set(eps) <= DONE_EPISODE, f"run {run} ended {status} with episodes {eps}"
        assert status == RunStatus.cancelled or (status, set(eps)) == (RunStatus.finished, {EpisodeStatus.completed})


def test_episodes_are_leased_in_their_secret_rank_not_the_suites_order(db, mini_suite):
    """A run's episodes are leased by their stored lease rank (a shuffle of the ordinals), so the
    order a bridge receives its episode ids in is not the suite's order; a check's run keeps it."""
    run = _new_run(db, mini_suite)
    with db.session() as s:
        eps = s.scalars(select(Episode).where(Episode.run_id == run).order_by(Episode.ordinal)).all()
        n = len(eps)
        assert n >= 3 and sorted(e.lease_rank for e in eps) == list(range(n))
        for e in eps:  # a known shuffle: the suite's order reversed
            e.lease_rank = n - 1 - e.ordinal
        by_ordinal = [e.id for e in eps]
    leased = []
    while (lease := _lease(db)) is not None:
        leased.append(lease.episode_id)
        finish_attempt(db, lease, ok=True, end_sample=0)
    assert leased == by_ordinal[::-1]
    # drawn at random for each run: among 30 runs of n episodes, not all in the suite's order
    drawn = [lease_ranks(n) for _ in range(30)]
    assert all(sorted(r) == list(range(n)) for r in drawn) and any(r != list(range(n)) for r in drawn)
    assert lease_ranks(n, check=True) == list(range(n))


def test_a_waiting_bridges_hint_names_its_team(db):
    """A bridge with no run is told the command that creates one for its own team (a run of
    another team, e.g. the default ``local``, is never served to it)."""
    hint = bridge_work(db, team="lab", admin=False, model="nobody", clocks=["lockstep"]).hint
    assert "in team 'lab'" in hint and "mpe run create --team lab --model nobody" in hint, hint
    assert "--team" not in bridge_work(db, team="ops", admin=True, model="nobody", clocks=["lockstep"]).hint
