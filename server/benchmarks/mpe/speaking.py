"""Whether the model is speaking at the end of T (DESIGN §3, §6): one rule, read by both the
live scheduler and scoring.

Speech is *active at t* when a speech-detector segment holds ``t``: ``start <= t < end``. The
segments are the detector's (§5): pauses shorter than 800 ms inside speech are merged, so a
segment's end is known only once 800 ms of pause have passed. Scoring reads the closed segments
of the whole assistant track; the scheduler reads the segments it has heard so far, the last
one possibly still open (``end is None``: no offset yet), and settles its belief when the
offset arrives. Both therefore agree: speech that ended before ``e_T`` is not active at
``e_T``, even when the scheduler only learns of the offset after ``e_T``.
"""

from __future__ import annotations

from collections.abc import Iterable

#: a detector segment as heard: (start, end), end None while the detector has not closed it
HeardSpan = tuple[int, int | None]


def speaking_at(spans: Iterable[HeardSpan], t: int) -> bool:
    """§3/§6 "speech already active at e_T": a segment with ``start <= t < end`` (an open one
    holds every time from its start)."""
    return any(s <= t and (e is None or t < e) for s, e in spans)
