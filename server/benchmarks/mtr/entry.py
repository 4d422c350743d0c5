"""The scoring entry of one MTR episode (DESIGN §12.4): one :class:`RoundScore` per live round.

One serialisation, ``model_dump(mode="json")``, one parse, ``model_validate`` (unknown or
missing fields are errors). Fields ending in ``_s`` are seconds.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from server.benchmarks.mtr.dimensions import DimensionScore
from server.benchmarks.mtr.rules import Failure, RoundResult
from server.benchmarks.mtr.suite import Feature
from server.core.benchmark import JudgedItem, ScoreEntry, Span
from server.core.spans import sec
from server.scoring.loading import SegmentsSource


class RoundScore(BaseModel):
    """One live round's verdict (§12.4)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    round: int
    feature: Feature
    ok: bool
    failure: Failure | None
    responded: bool
    latency_s: float | None = Field(description="user end -> the reply's onset (0: already speaking)")
    interrupted: bool | None = Field(description="interruption: the model was speaking when the barge-in began")
    stop_latency_s: float | None = Field(description="interruption: barge-in start -> the audible stop")
    barge_in_latency_s: float | None = Field(description="interruption: barge-in end -> the new reply's onset")
    own_backchannels: int | None = Field(description="project rules: the model's segments under 1 s over the "
                                                     "user's speech; None under the published rules")
    user_speech_s: float
    dimension: DimensionScore | None = Field(default=None, description="the round's verdict on its task's "
                                                                       "dimension (§12.5); none without a task")
    own_backchannel_rate: float | None = Field(default=None, description=(
        "published rules: the model's segments under 3 s of at most 2 words per second of its speech, "
        "over the whole track; None under the project rules"))
    excluded: str | None = Field(default=None, description="why the round is left out of the feature scores "
                                                           "(a recording whose parts were moved); None: counted")
    verdicts: dict[Feature, Failure | None] = Field(default_factory=dict, description="a round carrying several "
                                                    "features (an overlay round): the failure per feature (None: "
                                                    "passed); empty: the round's one feature, decided by ``ok``")

    def carried(self) -> list[Feature]:
        """Every feature the round's scores count it under."""
        return list(self.verdicts) if self.verdicts else [self.feature]

    def ok_for(self, feature: str) -> bool:
        """The round's verdict on one feature it carries."""
        return self.verdicts[feature] is None if self.verdicts else self.ok  # type: ignore[index]

    @classmethod
    def of(cls, r: RoundResult, dimension: DimensionScore | None = None, excluded: str | None = None) -> RoundScore:
        return cls(round=r.round, feature=r.feature, ok=r.ok, failure=r.failure, responded=r.responded,
                   latency_s=sec(r.latency), interrupted=r.interrupted, stop_latency_s=sec(r.stop_latency),
                   barge_in_latency_s=sec(r.barge_in_latency), own_backchannels=r.own_backchannels,
                   user_speech_s=sec(r.user_speech) or 0.0, own_backchannel_rate=r.own_backchannel_rate,
                   dimension=dimension, excluded=excluded, verdicts=dict(r.verdicts))


#: the rule sets a scoring may judge rounds by (``mpe score --rules``; the first is the default):
#: ``project`` the detector-based rules (:mod:`.rules`), ``published`` the published scripts' (:mod:`.published`)
RuleSet = Literal["project", "published"]
RULE_SETS: tuple[RuleSet, ...] = get_args(RuleSet)

RoomSpan = tuple[str, int, int, int]  # (kind: round | user | pause | barge_in | background | backchannel, round, start, end)


class MTREpisodeScore(ScoreEntry):
    """One scored MTR episode: a gt episode scores its one live round, a free episode all."""

    dialogue_id: str
    set: str = Field(description="the dialogue's feature set")
    mode: Literal["gt", "free"]
    live_round: int | None = Field(description="gt: the round that ran live")
    duration_s: float
    speech: list[Span] = Field(description="the model's speech segments (stream samples)")
    room: list[RoomSpan] = Field(description="the live rounds and what played in them (stream samples), for timelines")
    segments: SegmentsSource
    rules: RuleSet = Field(default="project", description="the rule set the rounds were judged by")
    rounds: list[RoundScore]

    def judged(self) -> list[JudgedItem]:
        """The dimension verdicts (the feature rules are decided on speech timing alone); a round's
        correctness verdict is an ``answer`` item. ``turn_idx`` is the round number."""
        out: list[JudgedItem] = []
        for r in self.rounds:
            d = r.dimension
            if d is None:
                continue
            if d.verdict_id is not None:
                out.append(JudgedItem(task=d.dimension, turn_idx=r.round, fragments=d.fragments,
                                      transcript=d.transcript, verdict_id=d.verdict_id, label=d.verdict))
            if d.correct_verdict_id is not None:
                out.append(JudgedItem(task="answer", turn_idx=r.round, fragments=d.fragments, transcript=d.transcript,
                                      verdict_id=d.correct_verdict_id, label=d.correct_verdict))
        return out
