"""What the MTR generators take and give: a dialogue plan in, a schema dialogue out."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from server.benchmarks.mtr.suite import Dialogue, Dimension, Feature
from server.datasets.errors import DatasetError

#: a time in an imported file may lie this far past its recording's end (the rounding of published
#: and transcript times)
END_TOLERANCE_S = 0.05


class DialoguePlan(BaseModel):
    """One dialogue to write: its id, set, the feature of each round (and what each carries on top: an
    overlay set's pause and background), its topic, the dimension
    its rounds are judged on (a dimension set's; None: a feature set), and the seed its random
    choices derive from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dialogue_id: str
    set: str
    features: tuple[Feature, ...]
    topic: str
    overlays: tuple[tuple[Feature, ...], ...] = ()  # per round, the features it carries on top (none: no overlays)
    seed: int
    dimension: Dimension | None = None


class DialogueGenerator(Protocol):
    name: str
    version: str

    def generate(self, plan: DialoguePlan) -> Dialogue:
        ...


class ImportProblems(DatasetError):
    """An importer's input's bad lines (or entries), each ``FILE:LINE: message``."""

    def __init__(self, lines: list[str]):
        self.lines = lines
        super().__init__(f"{len(lines)} bad line(s): " + "; ".join(lines[:10]) + (" ..." if len(lines) > 10 else ""))


def csv_rows(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    """The rows of a CSV file with a header holding ``required`` (with their line numbers)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise ImportProblems([f"{path}:1: the header lacks column(s) {', '.join(missing)} "
                                      f"(expected {','.join(required)})"])
            return [(reader.line_num, row) for row in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DatasetError(f"{path}: cannot read ({exc})") from None
