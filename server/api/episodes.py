"""Episodes of a run (filters: condition, status, outcome), one episode in full, and its frame log."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from sqlalchemy import func, select
from sqlalchemy.orm import defer

from clients.codec import STREAM_RATE
from server.api import scores
from server.api.deps import Caller, Paging, State, visible_episode, visible_run
from server.api.errors import BadRequest, NotFound
from server.api.schemas import (
    ERRORS,
    AttemptOut,
    Condition,
    EpisodeItem,
    EpisodeOut,
    FrameItem,
    FrameLog,
    PageOf,
)
from server.core.benchmark import Benchmark, Cell, Outcome, ScoreEntry, Timeline, outcome_matches
from server.core.episode import FRAME
from server.core.events import Event
from server.core.status import AttemptStatus, EpisodeStatus
from server.db import Attempt, Episode, EventRow, SegmentRow
from server.engine.bundles import Direction, count_frames, episode_document, frame_log, frames_csv, iter_frame_log
from server.engine.disclosure import public_document, run_disclosure
from server.engine.registry import PLUGINS, get_benchmark
from server.engine.session import RoomTiming
from server.scoring.results import load_episode_scores

router = APIRouter(prefix="/v1", tags=["episodes"], responses=ERRORS)
CHUNK = 500  # ids per IN (...) query
MAX_FRAMES_PAGE = 5000
AttemptNumber = Annotated[int | None, Query(ge=1, le=1000, description="attempt number (default: the completed one, "
                                                                       "else the latest)")]


def _chunks(ids: list[str]):
    for i in range(0, len(ids), CHUNK):
        yield ids[i:i + CHUNK]


def outcomes_for(state: Any, bench: Benchmark, run_id: str, eps: list[Episode]) -> dict[str, Outcome | None]:
    """Outcomes of completed episodes: scored where scores exist, live otherwise."""
    done = [e for e in eps if e.status == EpisodeStatus.completed and e.completed_attempt_id]
    scored = scores.run_episode_scores(state.db, bench, run_id, [e.id for e in done]) if done else {}
    out: dict[str, Outcome | None] = {eid: bench.scored_outcome(sc) for eid, sc in scored.items()}
    rest = {e.completed_attempt_id: e.id for e in done if e.id not in out}
    events: dict[str, list[Event]] = {a: [] for a in rest}
    segs: dict[str, list[tuple[int, int]]] = {a: [] for a in rest}
    frames: dict[str, int] = {}
    with state.db.session() as s:
        for ids in _chunks(list(rest)):
            for a, t, typ, data in s.execute(select(EventRow.attempt_id, EventRow.t, EventRow.type, EventRow.data)
                                             .where(EventRow.attempt_id.in_(ids), ~EventRow.type.startswith("vad."))
                                             .order_by(EventRow.id)):
                events[a].append(Event(t, typ, data))
            for a, start, end in s.execute(select(SegmentRow.attempt_id, SegmentRow.start, SegmentRow.end)
                                           .where(SegmentRow.attempt_id.in_(ids))):
                segs[a].append((start, end))
            frames.update(s.execute(select(Attempt.id, Attempt.n_frames).where(Attempt.id.in_(ids))).all())
    for a, eid in rest.items():
        out[eid] = bench.live_outcome(events[a], segs[a], frames.get(a, 0) * FRAME)
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
    outcome: Annotated[str | None, Query(description="ok | a failure type of the run's benchmark ("
                                         + "; ".join(f"{n}: {' | '.join(get_benchmark(n).failure_types)}"
                                                     for n in sorted(PLUGINS))
                                         + ") | unfinished | unscored")] = None,
) -> PageOf[EpisodeItem]:
    """The run's episodes in order, each with its status, duration and outcome (from the latest
    scoring, else from the live events). Filters: condition, status, outcome. 404 when the run
    is not visible to you; 400 for a condition or an outcome the run's benchmark does not know."""
    where = [Episode.run_id == run_id]
    if condition:
        where.append(Episode.condition == condition)
    if status:
        where.append(Episode.status == status)
    with state.db.session() as s:
        run = visible_run(s, p, run_id)
        bench = get_benchmark(run.benchmark)
        pairing = run_disclosure(s, p, run).pairing
        # without the pairing the list's order would tell each episode's place in the suite
        q = select(Episode).options(defer(Episode.scenario)).where(*where) \
            .order_by(Episode.ordinal if pairing else Episode.id)
        if condition is not None and condition not in bench.conditions:
            raise BadRequest(f"condition must be one of {', '.join(bench.conditions)}")
        if outcome is not None and outcome not in bench.outcome_filters:
            raise BadRequest(f"outcome must be one of {', '.join(bench.outcome_filters)}")
        if outcome is None:
            total = s.scalar(select(func.count()).select_from(Episode).where(*where))
            eps = s.scalars(q.limit(paging.limit).offset(paging.offset)).all()
        else:
            eps = s.scalars(q).all()
    found = outcomes_for(state, bench, run_id, eps)
    if outcome is not None:  # outcomes are computed, not stored: filter, then page
        eps = [e for e in eps if outcome_matches(found.get(e.id), e.status == EpisodeStatus.completed, outcome)]
        total = len(eps)
        eps = eps[paging.offset:paging.offset + paging.limit]
    with state.db.session() as s:
        ends = _durations(s, [e.completed_attempt_id or e.current_attempt_id for e in eps])
    items = []
    for e in eps:
        end = ends.get(e.completed_attempt_id or e.current_attempt_id or "")
        items.append(EpisodeItem(id=e.id, run_id=e.run_id, ordinal=e.ordinal if pairing else None,
                                 scenario_id=e.scenario_id if pairing else None,
                                 pair_id=e.pair_id if pairing else None, condition=e.condition, status=e.status, attempts=e.attempts,
                                 live=state.live.is_live(e.id), duration_s=None if end is None else round(end / STREAM_RATE, 3),
                                 outcome=found.get(e.id), cells=_cells(bench, found.get(e.id)),
                                 updated_at=e.updated_at))
    return PageOf[EpisodeItem](items=items, total=total, limit=paging.limit, offset=paging.offset)


def _cells(bench: Benchmark, outcome: Outcome | None) -> list[Cell] | None:
    return None if outcome is None else bench.outcome_cells(outcome)


def episode_timeline(bench: Benchmark, doc: dict[str, Any], entry: ScoreEntry | None,
                     outcome: Outcome | None, scenario: BaseModel | None = None) -> Timeline:
    """The windows of an episode document as its caller sees it (its events and segments, and the
    scoring entry only where the script is visible), up to its last event; its end is the
    attempt's end sample, else its ``episode.end`` event. With the room lane's blocks, and with
    the script table where ``scenario`` (the script) is given."""
    events = [Event.from_json(e) for e in doc["events"]]
    head = max((e.t for e in events), default=0)
    end = doc.get("end_sample") or next((e.t for e in reversed(events) if e.type == "episode.end"), None)
    return bench.shown_timeline(events, [(g["start"], g["end"]) for g in doc["segments"]], head=head, end=end,
                                entry=entry, outcome=outcome, scenario=scenario)


def choose_attempt(ep: Episode, atts: list[Attempt], number: int | None) -> Attempt | None:
    """The attempt a request names by ``number``, else the completed one, else the latest (None when
    there is none yet); NotFound (404) for a number the episode does not have."""
    if number is not None:
        chosen = next((a for a in atts if a.number == number), None)
        if chosen is None:
            raise NotFound("no such attempt")
        return chosen
    return next((a for a in atts if a.id == ep.completed_attempt_id), None) or (atts[-1] if atts else None)


def _attempt_out(a: Attempt) -> AttemptOut:
    timing = RoomTiming.of(a.stats)
    return AttemptOut(id=a.id, number=a.number, status=a.status, error_code=a.error_code,
                      error_message=a.error_message, n_frames=a.n_frames, started_at=a.started_at,
                      ended_at=a.ended_at, model_revision=a.model_revision,
                      room_late=None if timing is None else timing.late,
                      room_late_frames=None if timing is None else timing.late_frames,
                      max_room_lateness_ms=None if timing is None else timing.max_lateness_ms)


@router.get("/episodes/{episode_id}", response_model=EpisodeOut, summary="One episode: events, segments, verdicts")
def get_episode(episode_id: str, p: Caller, state: State, attempt: AttemptNumber = None) -> dict:
    """One episode: the chosen attempt's events and detector segments (stream times in samples at
    24 kHz), every attempt, the outcome, and the latest scores (null when not scored). Until the
    run has ended (and always on a held-out suite) a team token gets no script: `script` is
    `"withheld"`, `turns` is empty, only the benchmark's public events are listed and `scores`
    is null; the outcome is shown. 404 for an unknown episode or attempt number."""
    with state.db.session() as s:
        ep, run = visible_episode(s, p, episode_id)
        atts = s.scalars(select(Attempt).where(Attempt.episode_id == ep.id).order_by(Attempt.number)).all()
        shown = run_disclosure(s, p, run)
    visible = shown.script
    chosen = choose_attempt(ep, atts, attempt)
    doc = episode_document(state.db, ep.id, chosen.id if chosen else None)
    doc["segments"] = doc.pop("live_segments")
    bench = get_benchmark(run.benchmark)
    scored = load_episode_scores(state.db, ep.id, bench.entry_model) \
        if chosen is not None and chosen.id == ep.completed_attempt_id else None
    outcome = None
    if scored is not None:
        outcome = bench.scored_outcome(scored.entry)
    elif chosen is not None and chosen.status == AttemptStatus.completed:
        outcome = bench.live_outcome([Event.from_json(e) for e in doc["events"]],
                                     [(g["start"], g["end"]) for g in doc["segments"]], chosen.n_frames * FRAME)
    end = doc.get("end_sample")
    if not visible:  # the script, and the scores built on it, wait for the run's end (or for ever)
        doc, scored = public_document(bench, doc, pairing=shown.pairing), None
    doc.update(
        timeline=None if chosen is None else episode_timeline(bench, doc, None if scored is None else scored.entry,
                                                              outcome, bench.snapshot(ep.scenario, ep.id) if visible else None),
        live=state.live.is_live(ep.id) and chosen is not None and chosen.status == AttemptStatus.running,
        attempts=[_attempt_out(a) for a in atts],
        duration_s=None if end is None else round(end / STREAM_RATE, 3),
        outcome=outcome,
        scores=None if scored is None else {**scored.entry.model_dump(mode="json"), "scoring_id": scored.scoring_id},
    )
    doc.pop("team", None)
    return doc


@router.get("/episodes/{episode_id}/frames", response_model=FrameLog, summary="The frame log of an attempt",
            responses={200: {"content": {"text/csv": {}}, "description": "a page of JSON, or the whole log as CSV"}})
def get_frames(
    episode_id: str, p: Caller, state: State, attempt: AttemptNumber = None,
    direction: Annotated[Direction | None, Query(description="only room or only assistant frames")] = None,
    format: Annotated[Literal["json", "csv"], Query(description="json: one page; csv: the whole log "
                                                    "(the columns of a bundle's frames.csv)")] = "json",
    limit: Annotated[int, Query(ge=1, le=MAX_FRAMES_PAGE, description=f"page size (at most {MAX_FRAMES_PAGE}; json)")]
    = 1000,
    offset: Annotated[int, Query(ge=0, le=10_000_000, description="rows to skip (json)")] = 0,
) -> FrameLog | StreamingResponse:
    """The per-frame log of one attempt (protocol.md §8), in the order it was written: each room
    frame with its seq and send time, each assistant frame that arrived with its seq, the timeline
    slot it was placed in and its arrival time (µs after the episode's t0; ``slot - seq`` is its
    lateness), and whether it was silent. Slots in which nothing arrived have no row. JSON is
    paged (`limit` up to 5000); `format=csv` streams the whole log. 404 for an unknown episode or
    attempt number."""
    with state.db.session() as s:
        ep, _ = visible_episode(s, p, episode_id)
        atts = s.scalars(select(Attempt).where(Attempt.episode_id == ep.id).order_by(Attempt.number)).all()
    chosen = choose_attempt(ep, atts, attempt)
    if format == "csv":
        rows = iter_frame_log(state.db, chosen.id, direction) if chosen is not None else iter(())
        name = f"frames-{ep.id}-{chosen.number if chosen is not None else 0}.csv"
        return StreamingResponse(frames_csv(rows), media_type="text/csv; charset=utf-8",
                                 headers={"Content-Disposition": f'attachment; filename="{name}"'})
    if chosen is None:
        return FrameLog(items=[], total=0, limit=limit, offset=offset, attempt=None, attempt_id=None)
    items = [FrameItem.model_validate(r, from_attributes=True)
             for r in frame_log(state.db, chosen.id, direction, limit=limit, offset=offset)]
    return FrameLog(items=items, total=count_frames(state.db, chosen.id, direction), limit=limit, offset=offset,
                    attempt=chosen.number, attempt_id=chosen.id)
