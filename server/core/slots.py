"""Realtime slot placement (DESIGN §4 ``realtime`` clock): where each assistant frame goes
on the timeline, which arrivals break the protocol, and the lateness counters.

Pure: nothing here reads a clock. The session passes in ``t0`` and each frame's arrival
time (seconds on the connection's monotonic clock); slots and seqs are integer frame
indices. Slot ``n`` covers ``[t0 + n·period, t0 + (n+1)·period)``, the same instants on
which room frame ``n`` is sent.

What a bridge may send is measured against what the server actually sent, never against the
wall clock: its seqs strictly increase and stay below the room frames sent + ``grace``, so it
can never have sent more than ``grace`` frames beyond the room stream. How far its frames queue
behind their arrival slot is lateness, recorded (``SlotStats``), not a fault: the arrival times
are the server's own stamps, and a server whose loop falls behind stamps a bridge's prompt
answers late and together (and sends its own backlog in a burst), which would otherwise look
exactly like a bridge bursting.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from clients.errors import ProtocolError


@dataclass(slots=True)
class SlotStats:
    """Server timing of one realtime attempt, recorded as ``stats.server`` (docs/protocol.md §8)."""

    late_frames: int = 0  # frames fed at a slot after their own seq
    max_lateness_frames: int = 0  # the largest ``slot - seq`` among them
    missing_slots: int = 0  # slots fed as silence because nothing was placed there

    def to_json(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class SlotFrame:
    """What feeds one timeline slot: the frame placed there, or silence (``pcm is None``)."""

    slot: int
    seq: int | None
    pcm: np.ndarray | None
    arrived: float | None  # arrival time in seconds (the caller's clock), None for silence

    @property
    def silent(self) -> bool:
        return self.pcm is None


class SlotPlacer:
    """§4 realtime: each assistant frame sits at its arrival slot, never before the
    previous frame's slot + 1; its seq at most ``grace`` frames ahead of the room stream."""

    def __init__(self, t0: float, period: float, grace: int):
        self.t0 = t0
        self.period = period  # seconds per frame (80 ms)
        self.grace = grace  # frames
        self.stats = SlotStats()
        self._placed: dict[int, tuple[int, np.ndarray, float]] = {}
        self._last_slot = -1
        self._last_seq = -1
        self._next_due = 0  # slots before this one have been handed out by due()

    def start(self, slot: int) -> float:
        """§4: when slot ``slot`` begins; also the absolute deadline of room frame ``slot``
        (no cumulative drift)."""
        return self.t0 + slot * self.period

    def arrive(self, seq: int, pcm: np.ndarray, arrived: float, room_sent: int) -> int:
        """Place the assistant frame ``seq`` that arrived at ``arrived`` while ``room_sent``
        room frames were out; returns its slot. Raises ``ProtocolError(code="bad_seq")``
        for a seq that does not increase or one ``grace`` or more frames ahead of the room
        stream (so the bridge has sent at most ``room_sent + grace`` frames: its rate,
        measured against what the server sent). A frame queued behind its arrival slot is late,
        never refused: that queue may be the server's own doing (see the module's doc)."""
        if seq <= self._last_seq:
            raise ProtocolError(f"assistant frame seq {seq} not after {self._last_seq}", code="bad_seq")
        if seq >= room_sent + self.grace:
            raise ProtocolError(f"assistant frame seq {seq} is ahead of the room stream", code="bad_seq")
        arrival_slot = math.floor((arrived - self.t0) / self.period)
        slot = max(arrival_slot, self._last_slot + 1)  # §4: placed at its arrival slot
        self._placed[slot] = (seq, pcm, arrived)
        self._last_slot, self._last_seq = slot, seq
        return slot

    def due(self, n: int) -> list[SlotFrame]:
        """The slots from the first not yet handed out up to ``n`` (exclusive), in order:
        the frame placed at each, or silence; counts lateness and missing slots (§4)."""
        out = []
        for s in range(self._next_due, n):
            item = self._placed.pop(s, None)
            if item is None:
                self.stats.missing_slots += 1
                out.append(SlotFrame(s, None, None, None))
                continue
            seq, pcm, arrived = item
            if s > seq:  # arrival lateness in frames
                self.stats.late_frames += 1
                self.stats.max_lateness_frames = max(self.stats.max_lateness_frames, s - seq)
            out.append(SlotFrame(s, seq, pcm, arrived))
        self._next_due = max(self._next_due, n)
        return out
