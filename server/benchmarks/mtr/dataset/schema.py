"""What the MTR generators take and give: a dialogue plan in, a schema dialogue out."""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict

from server.benchmarks.mtr.suite import Dialogue, Dimension, Feature


class DialoguePlan(BaseModel):
    """One dialogue to write: its id, set, the feature of each round, its topic, the dimension
    its rounds are judged on (a dimension set's; None: a feature set), and the seed its random
    choices derive from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dialogue_id: str
    set: str
    features: tuple[Feature, ...]
    topic: str
    seed: int
    dimension: Dimension | None = None


class DialogueGenerator(Protocol):
    name: str
    version: str

    def generate(self, plan: DialoguePlan) -> Dialogue:
        ...
