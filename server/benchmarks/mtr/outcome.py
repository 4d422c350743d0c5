"""MTR episode outcomes for the pages and the demo, from the §12.4 rules: ``live`` from the
events and the live detector segments, ``score`` from a scoring entry (the same rules)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from server.benchmarks.mtr.entry import MTREpisodeScore, RoundScore
from server.benchmarks.mtr.rules import FAILURES, judge_episode
from server.core.benchmark import Outcome, Span, Timeline, Verdict, Window
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


# --- the pages' timeline: one window per round, with its verdict -----------------------------


@dataclass
class _Round:
    round: int
    feature: str | None
    live: bool | None
    start: int
    end: int | None = None


def round_verdict(r: _Round, verdict: RoundVerdict | RoundScore | None, scored: bool) -> Verdict:
    """A round: ground-truth history is not judged; a live round by the §12.4 rules' verdict."""
    if r.live is None:
        return Verdict(state="none", text="", scored=False)  # the script is withheld
    if not r.live:
        return Verdict(state="none", text="history (ground truth)", scored=False)
    if verdict is not None:
        text = "pass" if verdict.ok else (verdict.failure or "").replace("_", " ")
        return Verdict(state="pass" if verdict.ok else "fail", text=text, scored=scored)
    return Verdict(state="none", text="running…" if r.end is None else "not scored", scored=False)


def timeline(events: Sequence[Event], head: int, entry: MTREpisodeScore | None,
             outcome: MTROutcome | None) -> Timeline:
    """Each round from ``round.start`` to ``round.end`` (open: to ``head``), judged by the latest
    scoring's verdicts, else by the live outcome's."""
    rounds: list[_Round] = []
    for e in events:
        if e.type == "round.start" and "round" in e.data:
            live = e.data.get("live")
            rounds.append(_Round(round=int(e.data["round"]), feature=e.data.get("feature"),
                                 live=None if live is None else bool(live), start=e.t))
        elif e.type == "round.end":
            r = next((r for r in rounds if r.round == e.data.get("round") and r.end is None), None)
            if r is not None:
                r.end = e.t
    verdicts = {v.round: v for v in (entry.rounds if entry is not None else outcome.rounds if outcome else [])}
    return Timeline(head=head, windows=[
        Window(kind="round", label=f"R{r.round}" + (f" {r.feature}" if r.feature else ""), idx=r.round,
               start=r.start, end=r.end if r.end is not None else head, open=r.end is None,
               verdict=round_verdict(r, verdicts.get(r.round), entry is not None)) for r in rounds])
