"""The bridge check in the database: its runs (one per clock, on the probe suite) and the
report of what they recorded.

A check is ordinary runs of the probe suite (:mod:`.suite`) for the team's model, marked as a
check's (``runs.is_check``): they are leased only to the team's bridges that announce
``hello.check``, and such a bridge is leased nothing else (server.engine.leasing.bridge_runs). Each episode gets
one attempt: a failed attempt is a finding, not something to retry.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import or_, select

from clients.codec import STREAM_RATE
from server.bridgecheck.evaluate import (
    CLOCKS,
    AnswerFrame,
    BridgeSeen,
    CheckReport,
    CheckRun,
    RecordedAttempt,
    RoomFrame,
    check_done,
    evaluate,
)
from server.bridgecheck.suite import build_check_suite
from server.bridgecheck.vocaltract import TractFrames, tract_frames
from server.core.events import Event
from server.core.status import AttemptStatus
from server.db import Attempt, BridgeRow, Database, Episode, EventRow, FrameRow, Run, SegmentRow
from server.engine.bundles import load_track
from server.engine.leasing import BadRequest, create_run

CHECK_ATTEMPTS = 1  # every failed attempt is reported; none is retried


def start_check(db: Database, data_dir: Path, *, team: str, model: str, clocks: Sequence[str],
                max_inflight: int, max_queued: int | None = None) -> list[str]:
    """Queue the check's runs for ``model`` in ``team``, one per clock (lockstep first), and return
    their ids. Builds the probe suite under ``data_dir`` on first use (offline TTS). ``max_queued``:
    the team's limit of queued episodes (as :func:`create_run`)."""
    wanted = [c for c in CLOCKS if c in set(clocks)]
    unknown = sorted(set(clocks) - set(CLOCKS))
    if unknown or not wanted:
        raise BadRequest(f"clocks must be a non-empty subset of {', '.join(CLOCKS)}")
    suite = build_check_suite(data_dir)
    return [create_run(db, team=team, model=model, suite_path=str(suite), clock=clock, check=True,
                       max_attempts=CHECK_ATTEMPTS, max_inflight=max_inflight, max_queued=max_queued)
            for clock in wanted]


def check_runs(db: Database, run_ids: Sequence[str]) -> list[Run]:
    """The check's runs, lockstep first; raises BadRequest unless they are runs of the probe suite,
    for one model and team, one per clock."""
    with db.session() as s:
        rows = s.scalars(select(Run).where(Run.id.in_(list(run_ids)), Run.is_check)).all()
    runs = sorted(rows, key=lambda r: CLOCKS.index(r.clock))
    if len(runs) != len(set(run_ids)):
        raise BadRequest("these are not the runs of one bridge check")
    if len({(r.model_name, r.team) for r in runs}) != 1 or len({r.clock for r in runs}) != len(runs):
        raise BadRequest("a check's runs share one model and team and have one clock each")
    return runs


_TRACTS: dict[tuple[str, str, tuple[tuple[int, int], ...]], TractFrames] = {}  # oldest first, at most 256


def _tract(db: Database, attempt_id: str, segments: tuple[tuple[int, int], ...]) -> TractFrames:
    """The tract frames of a completed attempt's speech. Its recording never changes and the
    measurement costs a second or two of CPU, so a report read again does not repeat it."""
    key = (db.url, attempt_id, segments)
    if (found := _TRACTS.get(key)) is None:
        found = _TRACTS[key] = tract_frames(load_track(db, attempt_id, "assistant"), STREAM_RATE, segments)
        if len(_TRACTS) > 256:
            del _TRACTS[next(iter(_TRACTS))]
    return found


def check_report(db: Database, run_ids: Sequence[str]) -> CheckReport:
    """The report of a check's runs (:func:`check_runs`) as they stand now."""
    runs = check_runs(db, run_ids)
    ids = [r.id for r in runs]
    model, team = runs[0].model_name, runs[0].team
    clock_of = {r.id: r.clock for r in runs}
    with db.session() as s:
        episodes = {e.id: e for e in s.scalars(select(Episode).where(Episode.run_id.in_(ids)))}
        check = [CheckRun(clock=r.clock, run_id=r.id, status=r.status,
                          episodes=sum(e.run_id == r.id for e in episodes.values())) for r in runs]
        attempts = list(s.scalars(select(Attempt).where(Attempt.episode_id.in_(list(episodes)))
                                  .order_by(Attempt.started_at, Attempt.id)))
        aids = [a.id for a in attempts]
        frames: dict[str, list[FrameRow]] = {a: [] for a in aids}
        segments: dict[str, list[tuple[int, int]]] = {a: [] for a in aids}
        events: dict[str, list[Event]] = {a: [] for a in aids}
        if check_done(check):  # the recordings are read once, when the check has ended
            for f in s.scalars(select(FrameRow).where(FrameRow.attempt_id.in_(aids)).order_by(FrameRow.id)):
                frames[f.attempt_id].append(f)
            for g in s.scalars(select(SegmentRow).where(SegmentRow.attempt_id.in_(aids),
                                                        SegmentRow.source == "live").order_by(SegmentRow.start)):
                segments[g.attempt_id].append((g.start, g.end))
            for e in s.scalars(select(EventRow).where(EventRow.attempt_id.in_(aids)).order_by(EventRow.id)):
                events[e.attempt_id].append(Event(e.t, e.type, e.data or {}))
        served = {a.bridge_id for a in attempts}
        bridges = list(s.scalars(select(BridgeRow).where(
            BridgeRow.model_name == model,
            or_(BridgeRow.id.in_(served), (BridgeRow.team == team) & BridgeRow.disconnected_at.is_(None)))
            .order_by(BridgeRow.connected_at, BridgeRow.id)))
    tracts: dict[str, TractFrames] = {}
    if check_done(check):  # the bridge's voice, from its recorded track (24 kHz) in the detector's speech
        for a in attempts:
            if a.status == AttemptStatus.completed and segments[a.id]:
                tracts[a.id] = _tract(db, a.id, tuple(segments[a.id]))
    recorded = [RecordedAttempt(
        clock=clock_of[episodes[a.episode_id].run_id], episode=episodes[a.episode_id].ordinal, status=a.status,
        error_code=a.error_code, error_message=a.error_message, bridge_id=a.bridge_id, bridge_rate=a.bridge_rate,
        room=tuple(RoomFrame(f.seq, f.sent_us) for f in frames[a.id] if f.direction == "room"),
        answers=tuple(AnswerFrame(f.seq, f.slot, f.arrived_us, f.silent) for f in frames[a.id]
                      if f.direction == "assistant"),
        segments=tuple(segments[a.id]), events=tuple(events[a.id]), end_sample=a.end_sample,
        tract=tracts.get(a.id)) for a in attempts]
    seen = [BridgeSeen(bridge_id=b.id, model_revision=b.model_revision, sample_rate=b.sample_rate,
                       clocks=tuple(b.clocks), connected=b.disconnected_at is None, check=b.is_check) for b in bridges]
    return evaluate(model, check, recorded, seen)
