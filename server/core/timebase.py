"""Types shared by the speech detector, the scheduler and scoring.

All times are integer sample counts at the stream rate (24 kHz), counted from stream
time 0 (the first input frame). Seconds appear only at the edges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from clients.codec import STREAM_RATE

__all__ = ["STREAM_RATE", "Segment", "SpeechEvent"]


@dataclass(frozen=True, slots=True)
class Segment:
    """A detected speech segment [start, end) in stream samples."""

    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class SpeechEvent:
    """A detector decision.

    ``at`` is when the speech started (onset) or ended (offset) on the stream timeline;
    ``seen_at`` is the stream time up to which the detector had processed audio when it
    made the decision (causal: ``seen_at >= at``).
    """

    kind: Literal["onset", "offset"]
    at: int
    seen_at: int


def seconds(samples: int, rate: int = STREAM_RATE) -> float:
    """``samples`` in seconds (seconds appear only at the edges)."""
    return samples / rate


def samples(seconds_: float, rate: int = STREAM_RATE) -> int:
    """``seconds_`` as the nearest integer number of samples at ``rate``."""
    return round(seconds_ * rate)
