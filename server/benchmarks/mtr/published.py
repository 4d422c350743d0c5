"""The ``published`` rule set: MTR-DuplexBench's feature rules as its evaluation scripts define them
(ZhangHe0918/MTR-DuplexBench at 6d7c125, ``Eval/``), decided on the model channel's Whisper words.
The one place these rules are written; the project's own detector-based rules are
:mod:`server.benchmarks.mtr.rules` (docs/mtr.md, "Rule sets", compares them rule by rule).

Pure: a live round (:class:`~.rules.LiveRound`, stream samples), its ground-truth reply windows
and the word-timestamped segments of the whole model track (:class:`~server.scoring.asr.TimedSegment`,
seconds) in, one :class:`~.rules.RoundResult` out. Each rule names the script and line it follows
(``E1`` = ``Eval/eval_1_scenario.py``, ``E2`` = ``eval_2_scenarios.py``, ``BG`` =
``eval_single_scenario_background.py``, ``PH`` = ``eval_single_scenario_pause_handling.py``,
``E4`` = ``eval_4_scenarios.py``).

**Timestamps from a live round.** The published encodings give fixed times; a live round has them
in its events: ``user_start``/``user_end`` the first and last user speech, ``pause_*``,
``interruption_*`` (the barge-in) and ``background_*`` where they played. The published
``model_start``/``model_end`` is where the ground-truth reply lies; here the reply the round asks
for, laid out as the history lays out ground truth (:func:`~.scheduler.history_layout`):
:data:`~.scheduler.HISTORY_REPLY_DELAY_S` after the user's end (an interruption round: after the
barge-in's end, its ground-truth answer), as long as the ground-truth clip.

**Published defects, and what is done instead** (docs/mtr.md lists them):

* PH imports ``calculate_tor``, which ``eval_1_scenario.py`` does not define (PH line 5): the
  script cannot run. Its intended rule (PH lines 27-36, the TOR test being E1's "is the model
  speaking" test) is applied.
* BG takes latency and frequency from ``eval_3_scenarios`` (BG line 22), which returns
  ``(0, 0, 0)`` for a background-only label (E3 line 29): the latency is always 0. The intended
  latency, E1's from the user's end, is reported.
* The published scripts have no backchannel round (only the model's own backchannel frequency):
  a round of the ``backchannel`` feature is judged by E1, the rule every published script falls
  back on (an extension, documented as one).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from server.benchmarks.mtr.rules import Failure, LiveRound, RoundResult
from server.benchmarks.mtr.scheduler import HISTORY_REPLY_DELAY_S
from server.core.spans import total
from server.core.timebase import STREAM_RATE, samples
from server.scoring.asr import TimedSegment

# "speaking" in a window: >= 1.0 s of words, or more than 3 words in less (E1 lines 8-9, 58-62)
SPEAKING_WORDS_S = 1.0
SPEAKING_WORD_COUNT = 3
PAUSE_GRACE_S = 1.0  # pause handling: the window runs 1.0 s past the pause (PH lines 25, 30)
BACKGROUND_SKIP_S = 0.3  # background: the check starts 0.3 s into the voice (BG line 23, E4 line 24)
IPU_TOLERANCE_S = 0.1  # background: boundary tolerance (BG line 29)
IPU_GAP_S = 20 * IPU_TOLERANCE_S  # background: a gap between words longer than 2.0 s breaks the IPU (BG line 123)
OWN_BC_MAX_S = 3.0  # the own-backchannel frequency: segments under 3 s (E1 lines 13, 100, 122)
OWN_BC_WORDS = 2  # ... of at most 2 words (E1 lines 100, 122)
_PUNCT = re.compile(r"[^\w\s\[\]]")  # the punctuation removed before counting words (E1 line 17)


def _s(x: int) -> float:
    return x / STREAM_RATE


@dataclass(frozen=True)
class Windows:
    """A live round's published timestamps (seconds)."""

    user_start: float
    user_end: float
    model_start: float
    model_end: float
    pause: tuple[float, float] | None = None
    interruption: tuple[float, float] | None = None
    background: tuple[float, float] | None = None


def windows(r: LiveRound, reply_s: float, barge_in_reply_s: float | None) -> Windows:
    """The published timestamps of a live round (module docstring): ``reply_s`` the ground-truth
    reply's length, ``barge_in_reply_s`` the ground-truth answer to the barge-in's."""
    delay = HISTORY_REPLY_DELAY_S
    user_end = _s(r.user_end)
    start = user_end + delay
    length = reply_s
    if r.barge_in is not None and barge_in_reply_s is not None:
        start, length = _s(r.barge_in[1]) + delay, barge_in_reply_s

    def span(x: tuple[int, int] | None) -> tuple[float, float] | None:
        return None if x is None else (_s(x[0]), _s(x[1]))

    return Windows(user_start=_s(r.user[0][0]), user_end=user_end, model_start=start, model_end=start + length,
                   pause=span(r.pause), interruption=span(r.barge_in), background=span(r.background))


def speaking(segments: Sequence[TimedSegment], start: float, end: float) -> bool:
    """E1 ``check_if_speak_at_the_same_time`` (lines 19-65): of each segment that overlaps the window
    (line 40), the words lying wholly inside it (line 53); speaking if one segment has >= 1.0 s of
    such words, or more than 3 of them (lines 58-62). Fewer, shorter words are tolerated."""
    for seg in segments:
        if not ((seg.start < end and seg.end > start) or (seg.end < end and seg.start > start)):
            continue
        inside = [w for w in seg.words if w.start >= start and w.end <= end]
        if sum(w.end - w.start for w in inside) >= SPEAKING_WORDS_S or len(inside) > SPEAKING_WORD_COUNT:
            return True
    return False


def latency(segments: Sequence[TimedSegment], after: float) -> float:
    """E1 ``calculate_latency`` (lines 67-98): from ``after`` to the start of the earliest segment
    that ends after it, floored at 0 (line 98); no such segment: 0 (line 93), so a missing reply
    counts as an instant one."""
    later = [seg.start for seg in segments if seg.end > after]
    return max(0.0, min(later) - after) if later else 0.0


def frequency(segments: Sequence[TimedSegment]) -> float:
    """E1 ``calculate_frequency`` (lines 100-130): segments under 3 s of at most 2 words (punctuation
    removed), per second of all segments, over the whole track (history included)."""
    spoken = sum(seg.end - seg.start for seg in segments)
    short = sum(1 for seg in segments
                if seg.end - seg.start < OWN_BC_MAX_S and len(_PUNCT.sub("", seg.text).split()) <= OWN_BC_WORDS)
    return short / spoken if spoken > 0 else 0.0


def covered(segments: Sequence[TimedSegment], start: float, end: float) -> bool:
    """BG ``check_time_range_in_ipu`` (lines 29-128): one segment spans ``[start, end]`` (within the
    0.1 s tolerance, line 77) and its words cover it with no gap over 2.0 s (lines 92-126).
    Silence through the window fails (lines 50-67, whatever the docstring says)."""
    tol = IPU_TOLERANCE_S
    if not segments or start >= end:
        return False
    if all(end <= seg.start or start >= seg.end - tol for seg in segments):
        return False
    for seg in segments:
        if not (seg.start <= start and end <= seg.end - tol) or not seg.words:
            continue
        near = sorted((w for w in seg.words if w.end > start and w.start < end + tol), key=lambda w: w.start)
        if not near or near[0].start > start or near[-1].end < end - tol:
            continue
        if all(b.start - a.end <= IPU_GAP_S for a, b in zip(near, near[1:])):
            return True
    return False


def judge_round(r: LiveRound, w: Windows, segments: Sequence[TimedSegment], own_rate: float) -> RoundResult:
    """One live round by the published rules (module docstring; ``own_rate`` the track's
    :func:`frequency`). A round carrying several features (an overlay round) is judged as E3/E4
    dispatch on its combined label: one rule decides, smooth turn-taking's (E1) before interruption's
    (E2; E3 lines 16-21: pause handling in a combination has no check of its own, E1's user window
    spans the pause), background ANDed in (E4 lines 20-40; no barge-in played fails, E4 line 42);
    that one verdict stands for every feature the round carries."""
    feats = r.features or (r.feature,)
    main = r.feature if len(feats) == 1 else "smooth" if "smooth" in feats else \
        "interruption" if "interruption" in feats else r.feature
    replied = speaking(segments, w.model_start, w.model_end)
    failure: Failure | None
    lat = latency(segments, w.user_end)
    barge_lat = None
    if (main == "interruption" and w.interruption is None) or (main == "background" and w.background is None):
        # the live scheduler places the barge-in or the voice after the model's onset: without a reply it never
        # played. The published timeline plays it anyway, and silence there fails (E2 lines 33-34: no stamps
        # give 0; BG lines 50-67: silence fails)
        failure = "no_response"
    elif main == "interruption" and w.interruption is not None:
        # E2 lines 24-45: silent through the barge-in and a reply in the model window; the latency from the
        # barge-in's end
        a, b = w.interruption
        failure = ("talked_over_barge_in" if speaking(segments, a, b)
                   else None if replied else "no_barge_in_response")
        lat = barge_lat = latency(segments, b)
    elif main == "pause" and w.pause is not None:
        # PH lines 27-36 (the intended rule; the script's import fails): silent from the pause's start to
        # 1.0 s after its end; no reply is asked for
        failure = "spoke_in_pause" if speaking(segments, w.pause[0], w.pause[1] + PAUSE_GRACE_S) else None
    elif main == "background" and w.background is not None:
        # BG lines 23-25: one segment's words run through the voice from 0.3 s in; that alone decides
        a, b = w.background
        failure = None if covered(segments, a + BACKGROUND_SKIP_S, b) else "yielded_to_background"
    else:
        # E1 lines 154-162 (smooth turn-taking; a backchannel round too): quiet over the user's turn, then
        # speaking in the model window
        failure = ("talked_over" if speaking(segments, w.user_start, w.user_end)
                   else None if replied else "no_response")
    if len(feats) > 1 and "background" in feats and main != "background" and failure is None:
        # E4: the background check ANDed into the combined label's verdict
        a, b = w.background if w.background is not None else (0.0, 0.0)
        if w.background is None or not covered(segments, a + BACKGROUND_SKIP_S, b):
            failure = "yielded_to_background"
    return RoundResult(r.round, r.feature, failure is None, failure, replied, samples(lat),
                       barge_in_latency=None if barge_lat is None else samples(barge_lat),
                       own_backchannels=None, user_speech=total(r.user), own_backchannel_rate=own_rate,
                       verdicts=dict.fromkeys(feats, failure) if len(feats) > 1 else {})
