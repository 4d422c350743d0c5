"""Statuses of runs, episodes, attempts, scorings and scoring claims, and which may follow which (DESIGN §10).

The tables below are the one place these lifecycles are written down: the leasing code
changes a status only through :func:`server.core.states.advance`, or, for a bulk UPDATE,
restricted to the rows whose status is in :func:`server.core.states.sources` of the new one.
The database and the REST API carry the enums' values, so these strings are the stored ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum


class RunStatus(StrEnum):
    """Lifecycle of a run (§10): queued, running from its first lease, then finished, failed or
    cancelled; see :data:`RUN_TRANSITIONS`."""

    queued = "queued"
    running = "running"  # from its first lease on
    finished = "finished"  # every episode completed, failed or was cancelled
    failed = "failed"  # §8: cannot go on (its suite changed on disk); ``runs.error`` says why
    cancelled = "cancelled"


class EpisodeStatus(StrEnum):
    """Lifecycle of an episode (§10): queued, running while leased, then completed, failed or
    cancelled (a failed attempt with attempts left queues it again); see :data:`EPISODE_TRANSITIONS`."""

    queued = "queued"
    running = "running"  # leased, until its lease expires
    completed = "completed"
    failed = "failed"  # its attempts are used up
    cancelled = "cancelled"


class AttemptStatus(StrEnum):
    """Lifecycle of one attempt at an episode (§10): running, then completed, failed, unstarted or
    abandoned; see :data:`ATTEMPT_TRANSITIONS`."""

    running = "running"
    completed = "completed"
    failed = "failed"
    unstarted = "unstarted"  # the bridge left before answering anything: not a failure of the model
    abandoned = "abandoned"  # §10: its lease expired (dead server or bridge) and the episode was leased again


class ClaimStatus(StrEnum):
    """Lifecycle of one episode's scoring work within a scoring (§10, docs/scoring.md "Several
    scorers"): pending, claimed by one scorer until its lease expires, then done or failed; see
    :data:`CLAIM_TRANSITIONS`."""

    pending = "pending"  # to score: no scorer holds it
    claimed = "claimed"  # a scorer holds it until ``lease_expires``
    done = "done"  # its entry is stored (in the same transaction as this status)
    failed = "failed"  # scoring raised; the next ``mpe score`` of the same scoring tries it again


class ScoringStatus(StrEnum):
    """Lifecycle of a scoring (docs/scoring.md): running until its last episode is done, then complete
    (metrics published) or incomplete (some episodes failed or are still open: no metrics; the same
    command resumes it); see :data:`SCORING_TRANSITIONS`."""

    running = "running"
    complete = "complete"
    incomplete = "incomplete"


RUN_TRANSITIONS: Mapping[RunStatus, frozenset[RunStatus]] = {
    RunStatus.queued: frozenset({RunStatus.running, RunStatus.cancelled}),
    RunStatus.running: frozenset({RunStatus.finished, RunStatus.failed, RunStatus.cancelled}),
}

EPISODE_TRANSITIONS: Mapping[EpisodeStatus, frozenset[EpisodeStatus]] = {
    EpisodeStatus.queued: frozenset({EpisodeStatus.running, EpisodeStatus.cancelled}),
    EpisodeStatus.running: frozenset({
        EpisodeStatus.running,  # §10: an expired lease is taken over by the next bridge
        EpisodeStatus.queued,  # a failed attempt with attempts left: retried from fresh model state
        EpisodeStatus.completed,
        EpisodeStatus.failed,
        EpisodeStatus.cancelled,  # its run was cancelled or failed
    }),
}

ATTEMPT_TRANSITIONS: Mapping[AttemptStatus, frozenset[AttemptStatus]] = {
    AttemptStatus.running: frozenset({AttemptStatus.completed, AttemptStatus.failed, AttemptStatus.unstarted,
                                      AttemptStatus.abandoned}),
}

CLAIM_TRANSITIONS: Mapping[ClaimStatus, frozenset[ClaimStatus]] = {
    ClaimStatus.pending: frozenset({ClaimStatus.claimed}),
    ClaimStatus.claimed: frozenset({
        ClaimStatus.claimed,  # §10: an expired lease is taken over by the next scorer
        ClaimStatus.done,
        ClaimStatus.failed,
        ClaimStatus.pending,  # given back by an interrupted scorer
    }),
    ClaimStatus.failed: frozenset({ClaimStatus.pending}),  # a new ``mpe score`` tries failed episodes again
    ClaimStatus.done: frozenset({ClaimStatus.pending}),  # the episode's completed attempt changed: score it anew
}

SCORING_TRANSITIONS: Mapping[ScoringStatus, frozenset[ScoringStatus]] = {
    ScoringStatus.running: frozenset({
        ScoringStatus.running,  # another scorer joins it (docs/scoring.md "Several scorers, one run")
        ScoringStatus.complete,
        ScoringStatus.incomplete,
    }),
    # published metrics are withdrawn only by resuming the scoring (running), never by a finish
    ScoringStatus.complete: frozenset({ScoringStatus.running, ScoringStatus.complete}),
    ScoringStatus.incomplete: frozenset({
        ScoringStatus.running,  # resumed by the same command
        ScoringStatus.incomplete,
        ScoringStatus.complete,  # a scorer that joined it finished what was left
    }),
}

# Runs that bridges may still be given episodes of: those that can still move on.
ACTIVE_RUN = frozenset(RUN_TRANSITIONS)
# Episodes that will not run again (completed, failed, cancelled): those that cannot move on.
DONE_EPISODE = frozenset(EpisodeStatus) - frozenset(EPISODE_TRANSITIONS)
# Attempts that count as failures of the model ("failed_attempts"); unstarted ones do not.
FAILED_ATTEMPT = frozenset({AttemptStatus.failed, AttemptStatus.abandoned})
