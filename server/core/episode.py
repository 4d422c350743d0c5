"""One episode's pure loop: scheduler → room mixer, assistant audio → detector → scheduler.

This is the only place where the scheduler and the speech detector are wired together: the
live session, the oracle's replica and the tests all drive this class, so they see exactly
the same decisions (DESIGN §5: replaying a track gives the segments the scheduler saw).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from clients.codec import STREAM_RATE, frame_samples
from server.core.detector import SpeechDetector
from server.core.events import Event
from server.core.schedule import Scheduler

FRAME = frame_samples(STREAM_RATE)


class EpisodeCore:
    """Scheduler + causal detector + room mixer for one attempt (stream time only)."""

    def __init__(self, scheduler: Scheduler, clips: Mapping[str | int, np.ndarray], *, frame: int = FRAME):
        self.scheduler = scheduler
        self.detector = SpeechDetector()
        self.clips = clips
        self.frame = frame
        self.assistant_slots = 0  # assistant frames fed to the detector so far

    def next_room(self) -> tuple[int, np.ndarray, tuple[Event, ...]] | None:
        """The next room frame (seq, 24 kHz PCM, events decided on the way), or None at the end."""
        plan = self.scheduler.next_frame()
        if plan is None:
            return None
        pcm = np.zeros(self.frame, dtype=np.int16)
        for p in plan.pieces:
            pcm[p.dst_start : p.dst_start + p.length] = self.clips[p.source][p.src_start : p.src_start + p.length]
        return plan.seq, pcm, plan.events

    def feed_assistant(self, pcm: np.ndarray) -> None:
        """The assistant frame for the next timeline slot (24 kHz) -> detector -> scheduler."""
        events = self.detector.push(pcm)
        self.assistant_slots += 1
        self.scheduler.observe(events, self.detector.known_until)

    def finish(self) -> None:
        self.detector.finish()
