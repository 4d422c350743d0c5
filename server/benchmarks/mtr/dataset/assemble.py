"""From a round's texts to a schema round: clip paths, estimated durations, placements.

Both generators write texts only (:class:`RoundText`); :func:`assemble_round` lays out the
clips (``clips/<dialogue>/r<NN>_<part>.wav``), estimates durations and places the feature
parts from the round's :class:`~server.benchmarks.mtr.dataset.timing.Draw`.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.benchmarks.mtr.dataset.timing import SLACK_S, Draw, backchannel_starts, estimate_s, fit_round
from server.benchmarks.mtr.suite import Backchannel, Background, BargeIn, Clip, Feature, Pause, Round


@dataclass(frozen=True)
class RoundText:
    """What is said in one round (the parts of its feature only)."""

    feature: Feature
    user: str  # a pause round: the first part, before the pause
    assistant: str  # the ground-truth reply
    continuation: str | None = None  # pause
    barge_in: str | None = None  # interruption
    barge_in_response: str | None = None
    background_kind: str | None = None  # background: "speaker" or "broadcast"
    background: str | None = None
    backchannels: tuple[str, ...] = ()  # backchannel
    overlay: tuple[Feature, ...] = ()  # the features carried on top of ``feature`` (their parts above)


def clip_rel(dialogue_id: str, round_: int, part: str) -> str:
    """The clip path of one part of a round, relative to the suite."""
    return f"clips/{dialogue_id}/r{round_:02d}_{part}.wav"


def _clip(text: str, rel: str) -> Clip:
    return Clip(text=text, clip=rel, duration_s=estimate_s(text))


def assemble_round(dialogue_id: str, number: int, t: RoundText, draw: Draw) -> Round:
    """The schema round of ``t``, placed by ``draw`` and fitted (with the generators' slack)
    to the estimated reply. Raises DatasetError when the reply cannot cover its parts."""
    def rel(part: str) -> str:
        return clip_rel(dialogue_id, number, part)

    r = Round(round=number, feature=t.feature, overlay=list(t.overlay), user=_clip(t.user, rel("user")),
              assistant=_clip(t.assistant, rel("assistant")))
    if t.continuation is not None:
        r.pause = Pause(length_s=draw.pause_s, continuation=_clip(t.continuation, rel("continuation")))
    if t.barge_in is not None:
        r.barge_in = BargeIn(text=t.barge_in, clip=rel("barge_in"), duration_s=estimate_s(t.barge_in),
                             after_onset_s=draw.barge_in_after_s,
                             response=_clip(t.barge_in_response or "", rel("barge_in_response")))
    if t.background is not None:
        r.background = Background(kind=t.background_kind or "speaker", text=t.background, clip=rel("background"),
                                  duration_s=estimate_s(t.background), after_onset_s=draw.background_after_s)
    if t.backchannels:
        durs = [estimate_s(b) for b in t.backchannels]
        starts = backchannel_starts(draw.backchannel_first_s, list(draw.backchannel_gaps_s), durs)
        r.backchannels = [Backchannel(text=b, clip=rel(f"backchannel{i}"), duration_s=d, after_onset_s=s)
                          for i, (b, d, s) in enumerate(zip(t.backchannels, durs, starts))]
    return fit_round(r, SLACK_S)
