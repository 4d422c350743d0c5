"""One episode's pure loop: scheduler → room mixer, assistant audio → detector → scheduler.

This is the only place where the scheduler and the speech detector are wired together: the
live session, the oracle's replica and the tests all drive this class, so they see exactly
the same decisions (DESIGN §5: replaying a track gives the segments the scheduler saw).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from clients.codec import FRAME_SAMPLES
from server.core.detector import ModelSteps, SpeechDetector, run_steps
from server.core.events import Event
from server.core.schedule import Piece, Scheduler

FRAME = FRAME_SAMPLES


class RoomFrame(NamedTuple):
    """One planned slot: the room frame and, in a teacher-forced slot, the assistant context."""

    seq: int
    pcm: np.ndarray  # the room frame, 24 kHz
    events: tuple[Event, ...]  # decided while producing it
    context: np.ndarray | None  # the assistant-context frame sent before it (24 kHz), or None


class FedSlot(NamedTuple):
    """What one assistant slot became."""

    pcm: np.ndarray  # the assistant track for the slot: the context audio when forced, else the bridge's frame
    forced: bool  # the slot had a context frame: the bridge's own frame was ignored
    #: fed with ``defer``: the slot's detector work that can change no decision, still to run (to its
    #: end, before the next slot is fed); None when there is none
    later: ModelSteps[None] | None = None


class EpisodeCore:
    """Scheduler + causal detector + room mixer for one attempt (stream time only).

    Teacher forcing (docs/protocol.md §5.1) is decided here too: in a slot whose plan has a
    context frame, the context audio, not the bridge's frame, is the assistant's output — on
    the recorded track and for the detector (and so for the scheduler).
    """

    def __init__(self, scheduler: Scheduler, clips: Mapping[str | int, np.ndarray], *, frame: int = FRAME):
        self.scheduler = scheduler
        self.detector = SpeechDetector()
        self.clips = clips
        self.frame = frame
        self.assistant_slots = 0  # assistant frames fed to the detector so far
        self.context_frames = scheduler.context_frames
        self.context_turns = tuple(scheduler.context_turns) if self.context_frames else ()
        self._context: dict[int, np.ndarray] = {}  # planned context audio by slot, until that slot is fed
        self._later: ModelSteps[None] | None = None  # a deferred slot's detector work, until it has run

    def mix(self, pieces: tuple[Piece, ...]) -> np.ndarray:
        """One frame of the clips' pieces added up (int16 clipping where they overlap), silence elsewhere."""
        if len(pieces) <= 1:  # most frames: nothing to add up, nothing to clip (a tenth of the cost)
            out = np.zeros(self.frame, dtype=np.int16)
            for p in pieces:
                out[p.dst_start : p.dst_start + p.length] = self.clips[p.source][p.src_start : p.src_start + p.length]
            return out
        acc = np.zeros(self.frame, dtype=np.int32)
        for p in pieces:
            acc[p.dst_start : p.dst_start + p.length] += self.clips[p.source][p.src_start : p.src_start + p.length]
        return np.clip(acc, -32768, 32767).astype(np.int16)

    def next_room(self) -> RoomFrame | None:
        """The next room frame (with its events and its context frame, if any), or None at the end."""
        plan = self.scheduler.next_frame()
        if plan is None:
            return None
        if (plan.context is not None) != (plan.seq < self.context_frames):
            raise ValueError(f"scheduler contract: slot {plan.seq} {'has' if plan.context is not None else 'lacks'} "
                             f"a context frame, with context_frames = {self.context_frames}")
        context = None if plan.context is None else self.mix(plan.context)
        if context is not None:
            self._context[plan.seq] = context
        return RoomFrame(plan.seq, self.mix(plan.pieces), plan.events, context)

    def feed_assistant(self, pcm: np.ndarray) -> FedSlot:
        """The assistant frame for the next timeline slot (24 kHz) -> detector -> scheduler. In a
        teacher-forced slot the context audio replaces it."""
        return run_steps(self.feed_assistant_calls(pcm))

    def feed_assistant_calls(self, pcm: np.ndarray, *, defer: bool = False) -> ModelSteps[FedSlot]:
        """:meth:`feed_assistant`, yielding the detector's model calls to the caller (who may run
        them in a batch with other episodes', see server.core.detector); the same decisions.

        ``defer``: where the slot's audio cannot make the detector report an event, whatever the
        model says of it (:meth:`SpeechDetector.may_decide`), the scheduler hears at once what it
        would hear after the model (no event, and how far the detector has heard), and the model
        calls come back as :attr:`FedSlot.later`, for the caller to run while the bridge works on
        its next answer (lockstep, DESIGN §5). Every decision, event and segment is the same."""
        if self._later is not None:
            raise RuntimeError("an assistant slot fed before the previous slot's deferred detector work ran")
        forced = self._context.pop(self.assistant_slots, None)
        used = pcm if forced is None else forced
        self.detector.take(used)
        self.assistant_slots += 1
        if defer and not self.detector.may_decide():
            self.scheduler.observe([], self.detector.queued_until)
            self._later = self._deferred()
            return FedSlot(used, forced is not None, self._later)
        events = yield from self.detector.process_calls()
        self.scheduler.observe(events, self.detector.known_until)
        return FedSlot(used, forced is not None)

    def _deferred(self) -> ModelSteps[None]:
        events = yield from self.detector.process_calls()
        if events:  # may_decide() promised there would be none
            raise RuntimeError(f"deferred detector work reported {events}")
        self._later = None

    def finish(self) -> None:
        """The end of the attempt: the detector's track ends (a deferred slot's work never run is
        done by the detector's own finish)."""
        if self._later is not None:
            self._later.close()
            self._later = None
        self.detector.finish()
