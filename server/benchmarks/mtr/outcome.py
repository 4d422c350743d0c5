"""MTR episode outcomes for the pages and the demo, from the §12.4 rules: ``live`` from the
events and the live detector segments, ``score`` from a scoring entry (the same rules)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from server.benchmarks.mtr.entry import MTREpisodeScore
from server.benchmarks.mtr.rules import FAILURES, judge_episode
from server.core.benchmark import Outcome, Span
from server.core.events import Event
from server.scoring.errors import BadBundle


class RoundVerdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    round: int
    feature: str
    ok: bool
    failure: str | None


class MTROutcome(Outcome):
    rounds: list[RoundVerdict]


def _outcome(source, verdicts: list[RoundVerdict]) -> MTROutcome:
    failures = [f for f in FAILURES if any(v.failure == f for v in verdicts)]
    return MTROutcome(source=source, failures=failures, ok=not failures, rounds=verdicts)


def live_outcome(events: Sequence[Event], segments: Sequence[Span], n_samples: int) -> MTROutcome | None:
    try:
        results = judge_episode(events, segments)
    except (BadBundle, KeyError, ValueError, TypeError):
        return None
    if not results:
        return None
    return _outcome("live", [RoundVerdict(round=r.round, feature=r.feature, ok=r.ok, failure=r.failure)
                             for r in results])


def scored_outcome(entry: MTREpisodeScore) -> MTROutcome:
    return _outcome("score", [RoundVerdict(round=r.round, feature=r.feature, ok=r.ok, failure=r.failure)
                              for r in entry.rounds])
