"""Episodes of a run (filters: condition, status, outcome) and one episode in full."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from sqlalchemy import func, select
from sqlalchemy.orm import defer

from clients.codec import STREAM_RATE
from ..db import Attempt, Episode, EventRow, SegmentRow
from ..export import episode_document
from . import scores
from .deps import Caller, Paging, State, visible_episode, visible_run
from .errors import BadRequest, NotFound
from .outcomes import OUTCOME_FILTERS, live_outcome, matches, scored_outcome
from .schemas import ERRORS, AttemptOut, Condition, EpisodeItem, EpisodeOut, EpisodeStatus, Outcome, PageOf

router = APIRouter(prefix="/v1", tags=["episodes"], responses=ERRORS)
OUTCOME_EVENTS = ("clip.start", "clip.end", "t_wait.end", "episode.end")
CHUNK = 500  # ids per IN (...) query


def _chunks(ids: list[str]):
    for i in range(0, len(ids), CHUNK):
        yield ids[i:i + CHUNK]


def outcomes_for(state: Any, run_id: str, eps: list[Episode]) -> dict[str, dict]:
    """Outcomes of completed episodes: scored where scores exist, live otherwise."""
    done = [e for e in eps if e.status == "completed" and e.completed_attempt_id]
    scored = scores.run_episode_scores(state.db, run_id, [e.id for e in done]) if done else {}
    out = {eid: scored_outcome(sc) for eid, sc in scored.items()}
    rest = {e.completed_attempt_id: e.id for e in done if e.id not in out}
    events: dict[str, list[dict]] = {a: [] for a in rest}
    segs: dict[str, list[tuple[int, int]]] = {a: [] for a in rest}
    with state.db.session() as s:
        for ids in _chunks(list(rest)):
            for a, t, typ, data in s.execute(select(EventRow.attempt_id, EventRow.t, EventRow.type, EventRow.data)
                                             .where(EventRow.attempt_id.in_(ids), EventRow.type.in_(OUTCOME_EVENTS))
                                             .order_by(EventRow.id)):
                events[a].append({"t": t, "type": typ, "data": data})
            for a, start, end in s.execute(select(SegmentRow.attempt_id, SegmentRow.start, SegmentRow.end)
                                           .where(SegmentRow.attempt_id.in_(ids))):
                segs[a].append((start, end))
    for a, eid in rest.items():
        out[eid] = live_outcome(events[a], segs[a])
    return out


def _durations(s, attempt_ids: list[str]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for ids in _chunks([a for a in attempt_ids if a]):
        out.update(s.execute(select(Attempt.id, Attempt.end_sample).where(Attempt.id.in_(ids))).all())
    return out


@router.get("/runs/{run_id}/episodes", response_model=PageOf[EpisodeItem], summary="Episodes of a run")
def list_episodes(
    run_id: str, p: Caller, state: State, paging: Paging,
    condition: Annotated[Condition | None, Query()] = None,
    status: Annotated[EpisodeStatus | None, Query()] = None,
    outcome: Annotated[str | None, Query(description="ok | " + " | ".join(OUTCOME_FILTERS[1:]))] = None,
) -> PageOf[EpisodeItem]:
    if outcome is not None and outcome not in OUTCOME_FILTERS:
        raise BadRequest(f"outcome must be one of {', '.join(OUTCOME_FILTERS)}")
    where = [Episode.run_id == run_id]
    if condition:
        where.append(Episode.condition == condition)
    if status:
        where.append(Episode.status == status)
    q = select(Episode).options(defer(Episode.scenario)).where(*where).order_by(Episode.ordinal)
    with state.db.session() as s:
        visible_run(s, p, run_id)
        if outcome is None:
            total = s.scalar(select(func.count()).select_from(Episode).where(*where))
            eps = s.scalars(q.limit(paging.limit).offset(paging.offset)).all()
        else:
            eps = s.scalars(q).all()
    found = outcomes_for(state, run_id, eps)
    if outcome is not None:  # outcomes are computed, not stored: filter, then page
        eps = [e for e in eps if matches(found.get(e.id), e.status, outcome)]
        total = len(eps)
        eps = eps[paging.offset:paging.offset + paging.limit]
    with state.db.session() as s:
        ends = _durations(s, [e.completed_attempt_id or e.current_attempt_id for e in eps])
    items = []
    for e in eps:
        end = ends.get(e.completed_attempt_id or e.current_attempt_id or "")
        items.append(EpisodeItem(id=e.id, run_id=e.run_id, ordinal=e.ordinal, scenario_id=e.scenario_id,
                                 pair_id=e.pair_id, condition=e.condition, status=e.status, attempts=e.attempts,
                                 live=state.live.is_live(e.id), duration_s=None if end is None else round(end / STREAM_RATE, 3),
                                 outcome=found.get(e.id), updated_at=e.updated_at))
    return PageOf[EpisodeItem](items=items, total=total, limit=paging.limit, offset=paging.offset)


@router.get("/episodes/{episode_id}", response_model=EpisodeOut, summary="One episode: events, segments, verdicts")
def get_episode(episode_id: str, p: Caller, state: State,
                attempt: Annotated[int | None, Query(ge=1, le=1000, description="attempt number (default: the "
                                                     "completed one, else the latest)")] = None) -> dict:
    with state.db.session() as s:
        ep, _run = visible_episode(s, p, episode_id)
        atts = s.scalars(select(Attempt).where(Attempt.episode_id == ep.id).order_by(Attempt.number)).all()
    if attempt is not None:
        chosen = next((a for a in atts if a.number == attempt), None)
        if chosen is None:
            raise NotFound("no such attempt")
    else:
        chosen = next((a for a in atts if a.id == ep.completed_attempt_id), None) or (atts[-1] if atts else None)
    doc = episode_document(state.db, ep.id, chosen.id if chosen else None)
    doc["segments"] = doc.pop("live_segments")
    scored = scores.episode_scores(state.db, ep.id) if chosen is not None and chosen.id == ep.completed_attempt_id else None
    outcome = None
    if scored is not None:
        outcome = scored_outcome(scored)
    elif chosen is not None and chosen.status == "completed":
        outcome = live_outcome(doc["events"], [(g["start"], g["end"]) for g in doc["segments"]])
    end = doc.get("end_sample")
    doc.update(
        live=state.live.is_live(ep.id) and chosen is not None and chosen.status == "running",
        attempts=[AttemptOut(id=a.id, number=a.number, status=a.status, error_code=a.error_code,
                             error_message=a.error_message, n_frames=a.n_frames, started_at=a.started_at,
                             ended_at=a.ended_at, model_revision=a.model_revision) for a in atts],
        duration_s=None if end is None else round(end / STREAM_RATE, 3),
        outcome=None if outcome is None else Outcome(**outcome),
        scores=scored,
    )
    doc.pop("team", None)
    return doc
