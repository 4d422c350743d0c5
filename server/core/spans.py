"""Spans of stream samples: the helpers every benchmark's window rules use (pure).

A span is a half-open ``(start, end)`` pair of stream samples at 24 kHz; detector segments
are spans. Seconds and milliseconds appear only at the edges (:func:`sec`, :func:`ms`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from server.core.timebase import STREAM_RATE

Span = tuple[int, int]


def active_at(segments: Sequence[Span], t: int) -> Span | None:
    """The segment active at ``t`` (``start <= t < end``), if any."""
    for s, e in segments:
        if s <= t < e:
            return (s, e)
    return None


def clipped(segments: Sequence[Span], a: int, b: int) -> list[Span]:
    """Parts of the segments inside the half-open window ``[a, b)``."""
    return [(max(s, a), min(e, b)) for s, e in segments if s < b and e > a]


def total(spans: Iterable[Span]) -> int:
    """Samples covered by the spans (counted once per span)."""
    return sum(e - s for s, e in spans)


def overlap_with(spans: Sequence[Span], others: Sequence[Span]) -> int:
    """Samples of ``spans`` that overlap any of ``others`` (others need not be disjoint)."""
    merged: list[list[int]] = []
    for s, e in sorted(others):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return sum(max(0, min(e, oe) - max(s, os_)) for s, e in spans for os_, oe in merged)


def ms(samples: int) -> int:
    """Samples as whole milliseconds."""
    return round(samples * 1000 / STREAM_RATE)


def sec(samples: int | None) -> float | None:
    """Samples as seconds (4 decimals); None stays None."""
    return None if samples is None else round(samples / STREAM_RATE, 4)
