"""Progress of runs: episodes by status and failed attempts, for one run or a page of runs in
one query. The one count behind ``mpe run status``/``wait``, the demo and the REST API."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import case, func, select

from server.core.status import ACTIVE_RUN, DONE_EPISODE, FAILED_ATTEMPT, EpisodeStatus, RunStatus
from server.db import Attempt, Database, Episode, Run, Suite
from server.engine.leasing import NotFound
from server.engine.session import RoomTiming


@dataclass(frozen=True)
class RunProgress:
    """A run's episodes counted by status, and its failed attempts."""

    run_id: str
    team: str
    model: str
    clock: str
    conditions: list[str]
    status: RunStatus
    total: int  # episodes
    queued: int
    running: int
    completed: int
    failed: int
    cancelled: int
    failed_attempts: int  # failed or abandoned attempts; unstarted ones (the bridge left first) are not failures
    error: str | None = None  # why a failed run stopped (§8: its suite changed on disk)

    @property
    def active(self) -> bool:
        """Bridges may still be given its episodes (``mpe run wait`` waits while it is)."""
        return self.status in ACTIVE_RUN

    @property
    def done(self) -> int:
        """Episodes that will not run again."""
        return sum(getattr(self, st.value) for st in DONE_EPISODE)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def runs_progress(db: Database, run_ids: Iterable[str]) -> dict[str, RunProgress]:
    """Progress of each of these runs that exists, by run id."""
    ids = list(dict.fromkeys(run_ids))
    if not ids:
        return {}
    counts = (select(Episode.run_id, func.count().label("total"),
                     *(func.count(case((Episode.status == st, 1))).label(st.value) for st in EpisodeStatus))
              .where(Episode.run_id.in_(ids)).group_by(Episode.run_id).subquery())
    failed = (select(Episode.run_id, func.count().label("n")).join(Attempt, Attempt.episode_id == Episode.id)
              .where(Episode.run_id.in_(ids), Attempt.status.in_(FAILED_ATTEMPT)).group_by(Episode.run_id).subquery())
    q = (select(Run.id, Run.team, Run.model_name, Run.clock, Run.conditions, Run.status, Run.error,
                func.coalesce(counts.c.total, 0), *(func.coalesce(counts.c[st.value], 0) for st in EpisodeStatus),
                func.coalesce(failed.c.n, 0))
         .outerjoin(counts, counts.c.run_id == Run.id).outerjoin(failed, failed.c.run_id == Run.id)
         .where(Run.id.in_(ids)))
    with db.session() as s:
        rows = s.execute(q).all()
    out = {}
    for run_id, team, model, clock, conditions, status, error, total, *by_status, n_failed in rows:
        episodes = {st.value: n for st, n in zip(EpisodeStatus, by_status)}
        out[run_id] = RunProgress(run_id=run_id, team=team, model=model, clock=clock, conditions=list(conditions),
                                  status=status, total=total, **episodes, failed_attempts=n_failed,
                                  error=error)
    return out


def run_label(model: str, clock: str, suite_name: str, suite_version: str, run_id: str) -> str:
    """How a run is named wherever runs are listed side by side (reports, the pages, ``mpe run
    list``): model, clock, suite name/version and the first 8 characters of its id, so that two
    runs of one model are told apart."""
    return f"{model} · {clock} · {suite_name} v{suite_version} · {run_id[:8]}"


def run_labels(db: Database, run_ids: Iterable[str]) -> dict[str, str]:
    """The :func:`run_label` of each of these runs that exists, by run id."""
    ids = list(dict.fromkeys(run_ids))
    if not ids:
        return {}
    with db.session() as s:
        rows = s.execute(select(Run.id, Run.model_name, Run.clock, Suite.name, Suite.version)
                         .join(Suite, Suite.id == Run.suite_id).where(Run.id.in_(ids))).all()
    return {run_id: run_label(model, clock, name, version, run_id) for run_id, model, clock, name, version in rows}


def room_late_episodes(db: Database, run_id: str) -> list[str]:
    """The episodes of a run whose completed attempt sent room frames late (realtime:
    ``stats.server.room_late``, server.engine.session.RoomTiming): their timing is not clean."""
    with db.session() as s:
        rows = s.execute(select(Episode.id, Attempt.stats).join(Attempt, Attempt.id == Episode.completed_attempt_id)
                         .where(Episode.run_id == run_id)).all()
    return sorted(ep for ep, stats in rows if (t := RoomTiming.of(stats)) is not None and t.late)


def room_late_line(run_id: str, episodes: list[str]) -> str | None:
    """What a report says of a run's :func:`room_late_episodes` (None when there are none)."""
    if not episodes:
        return None
    return (f"{len(episodes)} episode(s) of run {run_id} had room frames sent late by the server "
            f"(the model heard them late; their timing is not clean): {', '.join(episodes)}")


def run_progress(db: Database, run_id: str) -> RunProgress:
    """The progress of one run; raises :class:`NotFound` when it does not exist."""
    found = runs_progress(db, [run_id]).get(run_id)
    if found is None:
        raise NotFound("no such run")
    return found
