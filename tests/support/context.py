"""A small benchmark plug-in with assistant-context frames (teacher forcing, docs/protocol.md §5.1),
for the tests of the wire protocol and the engine until a real benchmark of that kind is used.

``context-test`` reads Duplex-MPE suites (copied with ``"benchmark": "context-test"``) and plays
each scenario version in a fixed layout. Its ``implicit`` episodes start with a **history**: the
room plays turn 0 with turn 3 overlapping its second half (the room mixer adds them up), and then
the context carries turn 1 — the ground-truth reply, the model's own output by teacher forcing;
after the history a **live** part plays turn 2 in the room. Its ``explicit`` episodes are the live
part alone, without context frames. The scheduler is pure and sample-exact, and reports the
detector's onsets and offsets as events, so a test sees what the detector heard.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import select

from server.benchmarks.mpe import DuplexMPE
from server.benchmarks.mpe.suite import Scenario
from server.core.events import Event
from server.core.schedule import FramePlan, Piece
from server.core.timebase import Segment, SpeechEvent
from server.db import Attempt, Episode, SegmentRow

NAME = "context-test"
FRAME = 1920
LEAD = 4_000  # samples before the first clip (not a whole number of frames: pieces cross frame edges)
GAP = 12_000  # 0.5 s between the user's turn and the reply, and after the reply


Placement = tuple[str | int, int, int]  # (clip key, stream start, length)


def pieces_at(placements: Iterable[Placement], a: int, frame: int = FRAME) -> tuple[Piece, ...]:
    """The pieces of ``placements`` that fall into the frame starting at stream sample ``a``."""
    out = []
    for key, start, length in placements:
        lo, hi = max(a, start), min(a + frame, start + length)
        if lo < hi:
            out.append(Piece(key, lo - start, lo - a, hi - lo))
    return tuple(out)


def layout(lengths: Mapping[str | int, int], history: bool) -> tuple[list[Placement], list[Placement], int, int]:
    """(room placements, context placements, context_frames, end sample) of one episode."""
    room: list[Placement] = []
    context: list[Placement] = []
    h = 0
    if history:
        u0 = LEAD
        room += [(0, u0, lengths[0]), (3, u0 + lengths[0] // 2, lengths[3])]  # turn 3 overlaps turn 0
        r0 = max(u0 + lengths[0], u0 + lengths[0] // 2 + lengths[3]) + GAP
        context.append((1, r0, lengths[1]))
        h = -(-(r0 + lengths[1] + GAP) // FRAME) * FRAME  # the history ends on a frame edge
    room.append((2, h + LEAD, lengths[2]))
    return room, context, h // FRAME, h + LEAD + lengths[2] + GAP


class HistoryScheduler:
    """History (room + context frames), then the live part; pure and clock-free."""

    def __init__(self, lengths: Mapping[str | int, int], history: bool):
        self.room, self.context, self.context_frames, self.end = layout(lengths, history)
        self._seq = 0
        self._pending: list[SpeechEvent] = []

    context_turns = ()  # audio only: the MPE suites it reads have no transcript of a reply

    @property
    def end_sample(self) -> int | None:
        return self.end

    def next_frame(self) -> FramePlan | None:
        a = self._seq * FRAME
        if a >= self.end:
            return None
        events = [Event(e.at, f"speech.{e.kind}", {"seen_at": e.seen_at}) for e in self._pending]
        self._pending = []
        if self._seq == 0 and self.context_frames:
            events.append(Event(0, "history.start"))
        if self._seq == self.context_frames:
            events.append(Event(a, "history.end" if self.context_frames else "live.start"))
        if a + FRAME >= self.end:
            events.append(Event(self.end, "episode.end"))
        ctx = pieces_at(self.context, a) if self._seq < self.context_frames else None
        plan = FramePlan(self._seq, pieces_at(self.room, a), tuple(events), context=ctx)
        self._seq += 1
        return plan

    def observe(self, events: Iterable[SpeechEvent], known_until: int) -> None:
        self._pending.extend(events)

    def status(self) -> dict[str, Any]:
        return {"seq": self._seq, "history": self._seq < self.context_frames}


class ContextTest(DuplexMPE):
    """Duplex-MPE's suites and scoring; the layout above as its runtime protocol."""

    name = NAME
    context_conditions = frozenset({"implicit"})

    def scheduler(self, scenario: Scenario, lengths: Mapping[str | int, int]) -> HistoryScheduler:
        return HistoryScheduler(lengths, history=scenario.condition in self.context_conditions)


BENCHMARK = ContextTest()


def register(monkeypatch) -> None:
    """Make ``context-test`` a registered benchmark for one test."""
    from server.engine import registry

    monkeypatch.setitem(registry.PLUGINS, NAME, __name__)
    monkeypatch.setitem(registry._LOADED, NAME, BENCHMARK)


def context_suite(src: Path, dst: Path) -> Path:
    """A copy of the Duplex-MPE suite ``src`` that names the ``context-test`` benchmark."""
    shutil.copytree(src, dst)
    meta = json.loads((dst / "suite.json").read_text("utf-8"))
    meta["benchmark"] = NAME
    (dst / "suite.json").write_text(json.dumps(meta), "utf-8")
    return dst


def expected_tracks(clips: Mapping[str | int, np.ndarray], history: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """(room track, context track, context_frames) of one episode, computed from the layout directly
    (whole tracks, additive mixing with 16-bit clipping), independently of the engine's mixer."""
    room_p, ctx_p, n_ctx, end = layout({k: len(v) for k, v in clips.items()}, history)
    n = -(-end // FRAME) * FRAME

    def track(placements: list[Placement]) -> np.ndarray:
        acc = np.zeros(n, np.int64)
        for key, start, length in placements:
            acc[start:start + length] += clips[key][:length]
        return np.clip(acc, -32768, 32767).astype(np.int16)

    return track(room_p), track(ctx_p)[: n_ctx * FRAME], n_ctx


def episode_of(db, run_id: str, condition: str):
    """The run's episode of ``condition``: its row, its completed attempt (or None) and that
    attempt's live speech segments."""
    with db.session() as s:
        ep = s.scalars(select(Episode).where(Episode.run_id == run_id, Episode.condition == condition)).one()
        att = s.get(Attempt, ep.completed_attempt_id) if ep.completed_attempt_id else None
        live = [Segment(g.start, g.end) for g in s.scalars(select(SegmentRow).where(
            SegmentRow.attempt_id == ep.completed_attempt_id).order_by(SegmentRow.start))] if att else []
    return ep, att, live
