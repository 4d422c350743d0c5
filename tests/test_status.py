"""Statuses of runs, episodes and attempts: the transition tables on literal inputs, and the
leasing code refusing what the tables refuse (both databases)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from server.core.states import IllegalTransition, advance, sources
from server.core.status import (
    ACTIVE_RUN,
    ATTEMPT_TRANSITIONS,
    DONE_EPISODE,
    EPISODE_TRANSITIONS,
    FAILED_ATTEMPT,
    RUN_TRANSITIONS,
    AttemptStatus,
    EpisodeStatus,
    RunStatus,
)
from server.db import Attempt, Episode, Run
from server.engine.leasing import BadRequest, cancel_run, create_run, fail_run, finish_attempt, lease_episode
from server.engine.progress import run_progress

R, E, A = RunStatus, EpisodeStatus, AttemptStatus

# --- the tables ---------------------------------------------------------------------------------

LEGAL_RUN = {(R.queued, R.running), (R.queued, R.cancelled), (R.running, R.finished), (R.running, R.failed),
             (R.running, R.cancelled)}
LEGAL_EPISODE = {(E.queued, E.running), (E.queued, E.cancelled), (E.running, E.running), (E.running, E.queued),
                 (E.running, E.completed), (E.running, E.failed), (E.running, E.cancelled)}
LEGAL_ATTEMPT = {(A.running, A.completed), (A.running, A.failed), (A.running, A.unstarted), (A.running, A.abandoned)}
TABLES = [(RUN_TRANSITIONS, RunStatus, LEGAL_RUN), (EPISODE_TRANSITIONS, EpisodeStatus, LEGAL_EPISODE),
          (ATTEMPT_TRANSITIONS, AttemptStatus, LEGAL_ATTEMPT)]


@pytest.mark.parametrize("table, enum, legal", TABLES, ids=["run", "episode", "attempt"])
def test_exactly_the_listed_transitions_are_allowed(table, enum, legal):
    for current in enum:
        for new in enum:
            if (current, new) in legal:
                assert advance(table, current, new) is new
            else:
                with pytest.raises(IllegalTransition):
                    advance(table, current, new)


@pytest.mark.parametrize("table, current, new", [
    (RUN_TRANSITIONS, R.finished, R.running),  # a finished run cannot start again
    (RUN_TRANSITIONS, R.cancelled, R.running),
    (RUN_TRANSITIONS, R.failed, R.finished),
    (RUN_TRANSITIONS, R.queued, R.finished),  # a run finishes only after its first lease
    (EPISODE_TRANSITIONS, E.completed, E.queued),  # a completed episode is never requeued
    (EPISODE_TRANSITIONS, E.cancelled, E.running),
    (EPISODE_TRANSITIONS, E.queued, E.completed),  # only an attempt completes an episode
    (ATTEMPT_TRANSITIONS, A.abandoned, A.failed),  # a taken-over attempt keeps its verdict
    (ATTEMPT_TRANSITIONS, A.completed, A.completed),
])
def test_illegal_transitions_name_what_was_refused(table, current, new):
    with pytest.raises(IllegalTransition, match=f"{current.value} -> {new.value}") as exc:
        advance(table, current, new)
    assert exc.value.code == "illegal_transition"


def test_sources_and_groups_come_from_the_tables():
    assert sources(EPISODE_TRANSITIONS, E.running) == {E.queued, E.running}
    assert sources(EPISODE_TRANSITIONS, E.cancelled) == {E.queued, E.running}
    assert sources(EPISODE_TRANSITIONS, E.completed) == {E.running}
    assert sources(RUN_TRANSITIONS, R.running) == {R.queued}
    assert sources(RUN_TRANSITIONS, R.queued) == frozenset()
    assert sources(ATTEMPT_TRANSITIONS, A.abandoned) == {A.running}
    assert ACTIVE_RUN == {R.queued, R.running}
    assert DONE_EPISODE == {E.completed, E.failed, E.cancelled}
    assert FAILED_ATTEMPT == {A.failed, A.abandoned}
    assert [s.value for s in RunStatus] == ["queued", "running", "finished", "failed", "cancelled"]  # stored as is


# --- leasing goes through the tables --------------------------------------------------------------


def _lease(db, owner="s1", lease_s=20.0):
    return lease_episode(db, team="local", admin=False, model="m", clocks=["lockstep"], owner=owner, bridge_id="b1",
                         bridge_rate=24000, model_revision="", lease_s=lease_s)


def _statuses(db, run_id):
    with db.session() as s:
        run = s.get(Run, run_id)
        eps = s.scalars(select(Episode).where(Episode.run_id == run_id).order_by(Episode.ordinal)).all()
        atts = {a.id: a for a in s.scalars(select(Attempt).join(Episode).where(Episode.run_id == run_id))}
        return run.status, [e.status for e in eps], {i: (a.status, a.error_code) for i, a in atts.items()}


def test_a_closed_attempt_cannot_be_closed_again(db, mini_suite):
    run = create_run(db, team="local", model="m", suite_path=str(mini_suite), clock="lockstep", limit=1,
                     conditions=["explicit"])
    assert _statuses(db, run) == (R.queued, [E.queued], {})
    lease = _lease(db)
    assert _statuses(db, run) == (R.running, [E.running], {lease.attempt_id: (A.running, None)})
    finish_attempt(db, lease, ok=True, end_sample=0)
    done = (R.finished, [E.completed], {lease.attempt_id: (A.completed, None)})
    assert _statuses(db, run) == done
    with pytest.raises(IllegalTransition, match="completed -> failed"):
        finish_attempt(db, lease, ok=False, error_code="disconnected")
    cancel_run(db, run)  # a finished run stays finished
    assert _statuses(db, run) == done
    assert isinstance(_statuses(db, run)[0], RunStatus)  # rows read back as the enums


def test_an_expired_lease_is_taken_over_and_its_attempt_stays_abandoned(db, mini_suite):
    run = create_run(db, team="local", model="m", suite_path=str(mini_suite), clock="lockstep", limit=1,
                     conditions=["explicit"])
    first = _lease(db, owner="s1", lease_s=-1.0)  # expired at once: its server counts as dead
    second = _lease(db, owner="s2")
    assert second.episode_id == first.episode_id and second.attempt_number == 2
    # the first server finds out late: its attempt keeps the takeover's verdict, the episode is not touched
    finish_attempt(db, first, ok=False, error_code="aborted", end_sample=1920, n_frames=1)
    assert _statuses(db, run) == (R.running, [E.running], {first.attempt_id: (A.abandoned, "lease_expired"),
                                                           second.attempt_id: (A.running, None)})
    finish_attempt(db, second, ok=True, end_sample=0)
    p = run_progress(db, run)
    assert (p.status, p.completed, p.failed_attempts) == (R.finished, 1, 1)


def test_a_failed_run_cancels_only_its_open_episodes(db, mini_suite):
    run = create_run(db, team="local", model="m", suite_path=str(mini_suite), clock="lockstep", limit=1)
    a = _lease(db)
    finish_attempt(db, a, ok=True, end_sample=0)
    b = _lease(db)
    fail_run(db, b, "suite_changed", "the suite changed on disk")
    status, eps, atts = _statuses(db, run)
    assert (status, sorted(eps)) == (R.failed, sorted([E.completed, E.cancelled]))  # the completed one is left alone
    assert atts == {a.attempt_id: (A.completed, None), b.attempt_id: (A.failed, "suite_changed")}
    with pytest.raises(IllegalTransition, match="failed -> completed"):  # its attempt is already closed
        finish_attempt(db, b, ok=True, end_sample=0)
    cancel_run(db, run)
    assert _statuses(db, run)[0] == R.failed
    assert _lease(db) is None


def test_a_cancelled_queued_run_is_never_leased(db, mini_suite):
    run = create_run(db, team="local", model="m", suite_path=str(mini_suite), clock="lockstep", limit=1)
    cancel_run(db, run)
    assert _statuses(db, run) == (R.cancelled, [E.cancelled, E.cancelled], {})
    assert _lease(db) is None


def test_a_run_needs_one_attempt_at_least(db, mini_suite):
    with pytest.raises(BadRequest, match="max_attempts"):
        create_run(db, team="local", model="m", suite_path=str(mini_suite), clock="lockstep", max_attempts=0)
