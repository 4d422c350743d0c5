"""Realtime slot placement (DESIGN §4 ``realtime`` clock): where each assistant frame goes
on the timeline, which arrivals break the protocol, and the lateness counters.

Pure: nothing here reads a clock. The session passes in ``t0`` and each frame's arrival
time (seconds on the connection's monotonic clock); slots and seqs are integer frame
indices. Slot ``n`` covers ``[t0 + n·period, t0 + (n+1)·period)``, the same instants on
which room frame ``n`` is sent.

The queue a bridge may build ahead of real time is measured against what the server actually
sent, not against the wall clock alone: when the server's own loop falls behind and sends a
backlog of room frames at once, a bridge that answers each of them promptly queues up exactly
as much, and that queue is the server's doing (:meth:`SlotPlacer.sent`).
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
    previous frame's slot + 1; at most ``grace`` slots of queue ahead of real time."""

    def __init__(self, t0: float, period: float, grace: int):
        self.t0 = t0
        self.period = period  # seconds per frame (80 ms)
        self.grace = grace  # frames
        self.stats = SlotStats()
        self._placed: dict[int, tuple[int, np.ndarray, float]] = {}
        # per room frame seq: the slot a bridge answering every room frame the moment it was sent
        # would have placed its answer at (``sent``); the server's own backlog, in slots
        self._paced: list[int] = []
        self._last_slot = -1
        self._last_seq = -1
        self._next_due = 0  # slots before this one have been handed out by due()

    def start(self, slot: int) -> float:
        """§4: when slot ``slot`` begins; also the absolute deadline of room frame ``slot``
        (no cumulative drift)."""
        return self.t0 + slot * self.period

    def sent(self, seq: int, at: float) -> None:
        """Room frame ``seq`` (the next one, in order) was handed to the socket at ``at``.

        A prompt bridge's answer to it cannot sit before the slot it was sent in, nor before the
        answer to the frame before it: ``paced[seq] = max(sent slot, paced[seq - 1] + 1)``. On
        time, that is ``seq`` itself; after the server sent a backlog in a burst, it is where the
        burst's answers queue to, and queueing up to there is never the bridge's fault."""
        if seq != len(self._paced):
            raise ValueError(f"room frame {seq} sent out of order (expected {len(self._paced)})")
        slot = self._slot_of(at)
        self._paced.append(max(slot, self._paced[-1] + 1) if self._paced else slot)

    def _slot_of(self, t: float) -> int:
        return math.floor((t - self.t0) / self.period)

    def arrive(self, seq: int, pcm: np.ndarray, arrived: float, room_sent: int) -> int:
        """Place the assistant frame ``seq`` that arrived at ``arrived`` while ``room_sent``
        room frames were out; returns its slot. Raises ``ProtocolError(code="bad_seq")``
        for a seq that does not increase, one ``grace`` or more frames ahead of the room
        stream, or a frame queued more than ``grace`` slots after both its arrival slot and
        the slot the server's own sending put the answer to ``seq`` at (:meth:`sent`)."""
        if seq <= self._last_seq:
            raise ProtocolError(f"assistant frame seq {seq} not after {self._last_seq}", code="bad_seq")
        if seq >= room_sent + self.grace:
            raise ProtocolError(f"assistant frame seq {seq} is ahead of the room stream", code="bad_seq")
        arrival_slot = self._slot_of(arrived)
        slot = max(arrival_slot, self._last_slot + 1)  # §4: placed at its arrival slot
        # the queue is measured from where the room frames the server sent allow it to be
        allowed_from = max(arrival_slot, self._paced[seq]) if seq < len(self._paced) else arrival_slot
        if slot - allowed_from > self.grace:
            raise ProtocolError("assistant frames arrive faster than real time", code="bad_seq")
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
