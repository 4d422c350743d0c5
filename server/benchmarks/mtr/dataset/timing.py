"""Timing of a round's parts: speaking-time estimates and where the feature clips go.

A text-only suite carries *estimated* durations (:func:`estimate_s`, piper's speaking rate)
so that its placements can be checked before any audio exists; synthesis replaces them by the
real ones and :func:`fit_round` moves a placement only where the real reply is too short for it.

Placement ranges (seconds after the model's speech onset, DESIGN §12.1):

| part | range | why |
|---|---|---|
| barge-in | 1.0–2.5 s | the model is well into its answer, far from its end |
| pause | 1.5–3.0 s | long enough to tempt a turn-taker, shorter than a finished turn |
| background | 0.5–1.5 s | over the start of the reply |
| backchannels | first 0.8–1.8 s, then 1.0–2.0 s apart | spread through the early reply |

Every part placed over the reply ends :data:`REPLY_MARGIN_S` before the reply does (rule
``reply-covers``); the generators keep :data:`SLACK_S` more on the estimates, so real audio
rarely needs a move.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from server.benchmarks.mtr.suite import REPLY_MARGIN_S, Round
from server.datasets.errors import DatasetError

BARGE_IN_AFTER_S = (1.0, 2.5)
PAUSE_S = (1.5, 3.0)
BACKGROUND_AFTER_S = (0.5, 1.5)
BACKCHANNEL_FIRST_S = (0.8, 1.8)
BACKCHANNEL_GAP_S = (1.0, 2.0)
BACKCHANNEL_MIN_GAP_S = 0.3  # a fitted placement never packs backchannels closer than this
#: the ground-truth reply's spoken length (estimated), 2-4 sentences
REPLY_S = (6.0, 15.0)
#: extra room the generators keep on estimated durations
SLACK_S = 1.0
#: a barge-in starts at least this long before the reply's end
BARGE_IN_BEFORE_END_S = 1.0

# piper (joe, any pitch variant) speaks about 21 characters per second, after about 0.7 s;
# fitted on the suites' own lines (docs/mtr.md)
_CHARS_PER_S = 21.0
_ONSET_S = 0.7


def estimate_s(text: str) -> float:
    """Estimated spoken length of ``text`` (seconds, 2 decimals)."""
    return round(_ONSET_S + len(" ".join(text.split())) / _CHARS_PER_S, 2)


def sentences(text: str) -> int:
    """Number of sentences (ends of . ? ! followed by a space or the end)."""
    return len(re.findall(r"[.?!](?=\s|$)", text.strip()))


def _r2(x: float) -> float:
    return round(x, 2)


@dataclass(frozen=True)
class Draw:
    """The random choices of one round's placement (drawn once, fitted to durations later)."""

    barge_in_after_s: float
    pause_s: float
    background_after_s: float
    backchannel_first_s: float
    backchannel_gaps_s: tuple[float, float]

    @classmethod
    def of(cls, rng: random.Random) -> Draw:
        u = rng.uniform
        return cls(_r2(u(*BARGE_IN_AFTER_S)), _r2(u(*PAUSE_S)), _r2(u(*BACKGROUND_AFTER_S)),
                   _r2(u(*BACKCHANNEL_FIRST_S)), (_r2(u(*BACKCHANNEL_GAP_S)), _r2(u(*BACKCHANNEL_GAP_S))))


def backchannel_starts(first: float, gaps: list[float], durations: list[float]) -> list[float]:
    starts, t = [], first
    for i, d in enumerate(durations):
        starts.append(_r2(t))
        t += d + (gaps[i] if i < len(gaps) else 0.0)
    return starts


def fit_round(r: Round, slack_s: float = 0.0) -> Round:
    """``r`` with its feature clips moved earlier where the reply (its ``duration_s``) is too
    short for them: ``reply-covers`` then holds with ``slack_s`` to spare. Placements that fit
    are kept. Raises DatasetError when no placement fits (the reply is too short)."""
    r = r.model_copy(deep=True)
    reply = r.assistant.duration_s
    room = reply - REPLY_MARGIN_S - slack_s  # every covered part must end by then
    where = f"round {r.round}"
    if r.barge_in is not None:
        latest = reply - BARGE_IN_BEFORE_END_S - slack_s
        if latest <= 0:
            raise DatasetError(f"{where}: the reply ({reply:.2f} s) is too short for a barge-in")
        r.barge_in.after_onset_s = _r2(min(r.barge_in.after_onset_s, latest))
    if r.background is not None:
        latest = room - r.background.duration_s
        if latest < 0:
            raise DatasetError(f"{where}: the reply ({reply:.2f} s) is too short to cover the background "
                               f"voice ({r.background.duration_s:.2f} s)")
        r.background.after_onset_s = _r2(min(r.background.after_onset_s, latest))
    if r.backchannels:
        bcs = r.backchannels
        end = bcs[-1].after_onset_s + bcs[-1].duration_s
        if end > room:
            durs = [b.duration_s for b in bcs]
            first = bcs[0].after_onset_s
            gaps = [bcs[i + 1].after_onset_s - (bcs[i].after_onset_s + durs[i]) for i in range(len(bcs) - 1)]
            spare = room - sum(durs)
            floor = BACKCHANNEL_MIN_GAP_S * len(bcs)
            if spare < floor:
                raise DatasetError(f"{where}: the reply ({reply:.2f} s) is too short for {len(bcs)} backchannels")
            scale = (spare - floor) / max(1e-9, first + sum(gaps) - floor)
            first = BACKCHANNEL_MIN_GAP_S + (first - BACKCHANNEL_MIN_GAP_S) * scale
            gaps = [BACKCHANNEL_MIN_GAP_S + (g - BACKCHANNEL_MIN_GAP_S) * scale for g in gaps]
            for b, s in zip(bcs, backchannel_starts(first, gaps, durs)):
                b.after_onset_s = s
            # rounding to 10 ms may add a few ms: take them off the first offset
            over = bcs[-1].after_onset_s + bcs[-1].duration_s - room
            if over > 0:
                for b in bcs:
                    b.after_onset_s = _r2(b.after_onset_s - over - 0.01)
    return r


__all__ = ["BACKCHANNEL_FIRST_S", "BACKCHANNEL_GAP_S", "BACKGROUND_AFTER_S", "BARGE_IN_AFTER_S", "Draw",
           "PAUSE_S", "REPLY_S", "SLACK_S", "backchannel_starts", "estimate_s", "fit_round", "sentences"]
