"""The interface of a proposal backend: one run proposes the user turns of a recording."""

from __future__ import annotations

from abc import ABC, abstractmethod

from server.benchmarks.mtr.segmentation.schema import BackendInfo, Proposal, SegmentInput


class Proposer(ABC):
    """Proposes user turns (and continuation flags) for a recording; ``run`` numbers the repetitions
    (0 … n − 1). A deterministic backend gives the same proposal for every run."""

    name: str
    model: str
    version: str
    deterministic: bool
    temperature: float | None = None

    def info(self) -> BackendInfo:
        return BackendInfo(name=self.name, model=self.model, version=self.version, deterministic=self.deterministic,
                           temperature=self.temperature)

    @abstractmethod
    def propose(self, inp: SegmentInput, run: int) -> Proposal: ...
