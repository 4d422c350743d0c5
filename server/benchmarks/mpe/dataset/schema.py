"""Scenario scripts before audio: the plan of a pair, its script, and the generator interface.

A :class:`PairScript` holds one scenario in both addressing conditions at once: every
turn has its explicit ``text`` and, where the implicit version differs (T, and possibly
the turn just before T), an ``implicit_text``. The same gold answer in both conditions
follows from the representation; so do the same turn count, labels and speakers, unless the
plan asks for a version difference (:data:`server.benchmarks.mpe.suite.VERSION_DIFFERENCES`):
then one more turn has an ``implicit_text`` (``reworded``), or turns are said in one
version only (``only``: ``extra_turn``, ``n4_dropped``).
"""

from __future__ import annotations

import warnings
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from server.benchmarks.mpe.suite import ATTRIBUTE_KEYS, T_BUCKETS, UTTERANCE_TYPES

TBucket = Literal["early-middle", "middle", "late-middle"]
Difference = Literal["none", "reworded", "extra_turn", "n4_dropped"]
Label = Literal["T", "N1", "N2", "N3", "N4Q", "N4R"]
Speaker = Literal["A", "B", "C", "D"]
UtteranceType = Literal["device_request", "human_request", "statement", "self_talk"]

assert tuple(TBucket.__args__) == T_BUCKETS  # type: ignore[attr-defined]
assert tuple(UtteranceType.__args__) == UTTERANCE_TYPES  # type: ignore[attr-defined]


with warnings.catch_warnings():
    # "register" is the attribute's name in the manifest; it shadows ABCMeta.register harmlessly.
    warnings.simplefilter("ignore", UserWarning)

    class SceneAttributes(BaseModel):
        """The five scene attributes of DESIGN §2 (free text, drawn from the inventories)."""

        model_config = ConfigDict(extra="forbid")

        setting: str
        activity: str
        relationship: str
        device_context: str
        register: str


assert tuple(SceneAttributes.model_fields) == ATTRIBUTE_KEYS


class PairPlan(BaseModel):
    """What the composition assigns to one pair before any text exists."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(ge=0)
    pair_id: str
    scenario_id: str
    n_speakers: Literal[3, 4]
    t_bucket: TBucket
    n4_events: int = Field(ge=0, le=2)  # §2: N4 events after T (the paper has about two per N4 pair)
    attributes: SceneAttributes
    # how the versions differ beyond T (compose.Composition); left out of the plan's dump when "none"
    difference: Difference = Field(default="none", exclude_if=lambda v: v == "none")

    @property
    def has_n4(self) -> bool:
        return self.n4_events > 0


class ScriptTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    speaker: Speaker
    label: Label
    # A speaker letter, "group" (several humans), "Aria", "device" (another assistant),
    # or None (nobody: thinking aloud).
    addressee: str | None = None
    text: str
    implicit_text: str | None = None  # only where the implicit condition differs
    # what the turn is (the paper's Table 19); T carries none (it is the request to Aria)
    utterance_type: UtteranceType | None = None
    # said in this version only (a version difference); None: in both
    only: Literal["explicit", "implicit"] | None = Field(default=None, exclude_if=lambda v: v is None)

    def in_version(self, condition: str) -> bool:
        return self.only is None or self.only == condition

    def text_for(self, condition: str) -> str:
        if condition == "implicit" and self.implicit_text is not None:
            return self.implicit_text
        return self.text


class PairScript(BaseModel):
    """One scenario in both conditions (explicit ``text``, implicit ``implicit_text``)."""

    model_config = ConfigDict(extra="forbid")

    pair_id: str
    scenario_id: str
    n_speakers: Literal[3, 4]
    t_bucket: TBucket
    attributes: SceneAttributes
    gold_answer: str
    answer_keys: list[list[str]] | None = None
    turns: list[ScriptTurn]
    version_difference: Literal["reworded", "extra_turn", "n4_dropped"] | None = None

    @property
    def labels(self) -> list[str]:
        return [t.label for t in self.turns]

    def version_turns(self, condition: str) -> list[ScriptTurn]:
        """The turns said in one version, in order."""
        return [t for t in self.turns if t.in_version(condition)]


@runtime_checkable
class ScenarioGenerator(Protocol):
    """Turns a :class:`PairPlan` into a :class:`PairScript` satisfying every rule."""

    name: str
    version: str

    def generate(self, plan: PairPlan) -> PairScript: ...


__all__ = [
    "Label",
    "PairPlan",
    "PairScript",
    "SceneAttributes",
    "ScenarioGenerator",
    "ScriptTurn",
    "Speaker",
    "T_BUCKETS",
    "TBucket",
    "UtteranceType",
]
