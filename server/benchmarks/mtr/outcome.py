"""MTR episode outcomes for the pages and the demo, from the §12.4 rules: ``live`` from the
events and the live detector segments, ``score`` from a scoring entry (the same rules)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from server.benchmarks.mtr.entry import MTREpisodeScore, RoundScore
from server.benchmarks.mtr.rules import FAILURES, judge_episode
from server.benchmarks.mtr.suite import MTRScenario
from server.core.benchmark import (
    Block,
    Cell,
    ClipTexts,
    Column,
    Label,
    Note,
    Outcome,
    ScriptRow,
    Span,
    Timeline,
    Verdict,
    Window,
)
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


# --- shown: what the pages draw of MTR's spans, outcomes and rounds ----------------------------

#: the room's span kinds (their events ``KIND.start`` / ``KIND.end``) -> the label of their blocks
SPAN_LABELS = {"user": "U", "pause": "PAUSE", "barge_in": "BARGE", "background": "BG", "backchannel": "BC"}
LABELS = (Label(key="U", title="the user's turn", legend="U user"),
          Label(key="PAUSE", title="the user pauses mid-turn", legend="PAUSE pause"),
          Label(key="BARGE", title="the user barges in", legend="BARGE barge-in"),
          Label(key="BG", title="a background voice", legend="BG background"),
          Label(key="BC", title="a backchannel", legend="BC backchannel"))
LABEL_TITLES = {lb.key: lb.title for lb in LABELS}
FAILURE_TITLES = {f: f.replace("_", " ") for f in FAILURES}
OUTCOME_COLUMNS = (Column(key="rounds", title="Live rounds passed"), Column(key="failed", title="Failed rounds"))
SCRIPT_COLUMNS = (Column(key="played", title="Played as"), Column(key="round", title="Round"),
                  Column(key="text", title="Text"))


def outcome_cells(o: MTROutcome) -> list[Cell]:
    """The live rounds passed, and the rounds (with their features) that failed."""
    passed = sum(r.ok for r in o.rounds)
    failed = ", ".join(dict.fromkeys(f"R{r.round} {r.feature}" for r in o.rounds if not r.ok)) or "–"
    return [Cell(text=f"{passed}/{len(o.rounds)} rounds", bad=passed < len(o.rounds)), Cell(text=failed)]


def status_text(status: Mapping[str, Any]) -> str:
    """The round scheduler's status (:meth:`RoundScheduler.status`) in words."""
    state = status.get("state")
    rnd = f"Round {status.get('round')} ({status.get('feature')})"
    words = {"user": "the user speaks", "pause": "the user pauses mid-turn", "wait": "waiting for the model's reply",
             "responding": "the model is answering", "barge": "the user barges in"}
    if state == "history":
        return "Playing the ground-truth history (the rounds before the live one)"
    if state in words:
        return f"{rnd}: {words[str(state)]}"
    if state == "ended":
        return "Episode ended"
    return str(state)


def room_blocks(events: Sequence[Event], texts: ClipTexts) -> list[Block]:
    """The room's spans (user turns, pauses, barge-ins, background voices, backchannels) as blocks
    labelled by kind; the user's turn ends where a pause begins. ``texts``: the clips' words."""
    out: list[Block] = []

    def close(kind: str, rnd: object, t: int) -> None:
        for i, b in enumerate(out):
            if b.key.startswith(f"{kind}-{rnd}-") and b.end is None:
                out[i] = b.model_copy(update={"end": t})
                return

    for e in events:
        kind, _, edge = e.type.rpartition(".")
        if kind not in SPAN_LABELS or edge not in ("start", "end"):
            continue
        rnd = e.data.get("round")
        if e.type == "pause.start":
            close("user", rnd, e.t)
        if edge == "end":
            close(kind, rnd, e.t)
            continue
        label = SPAN_LABELS[kind]
        who = "user" if kind == "user" else kind.replace("_", " ")
        part = e.data.get("part", 1) if kind == "user" else e.data.get("i", 0)
        text = str(e.data.get("text") or texts.text_of(e.type, e.data) or "")
        out.append(Block(key=f"{kind}-{rnd}-{part}", idx=rnd if isinstance(rnd, int) else None, kind=label, who=f"{who} · {label}", text=text,
                         title=f"{who} · {label} ({LABEL_TITLES[label]}): {text}",
                         aria=f"{{t}}: speaker {who}, {label}, {text}", start=e.t, end=None))
    return out


def script_rows(scenario: MTRScenario, events: Sequence[Event], timeline: Timeline) -> list[ScriptRow]:
    """Each round played so far: where it began, live or ground-truth history, its feature, the
    user's words (with the continuation after a pause), and its window's verdict."""
    words = {r.round: r.user.text + (f" … {r.pause.continuation.text}" if r.pause else "")
             for r in scenario.dialogue.rounds}
    rows: list[ScriptRow] = []
    for e in events:
        if e.type == "round.start" and "round" in e.data:
            n = int(e.data["round"])
            w = next((w for w in timeline.windows if w.idx == n), None)
            rows.append(ScriptRow(key=f"round-{n}", name=f"round {n}", start=e.t, now=True,
                                  verdict=w.verdict if w is not None else None,
                                  cells=[Cell(text="live" if e.data.get("live") else "history"),
                                         Cell(text=f"R{n} {e.data.get('feature')}", chip=""),
                                         Cell(text=words.get(n, ""))]))
        elif e.type == "round.end":
            for i, r in enumerate(rows):
                if r.key == f"round-{e.data.get('round')}" and r.now:
                    rows[i] = r.model_copy(update={"now": False})
    return rows


def script_facts(scenario: MTRScenario) -> list[Note]:
    """The dialogue: its topic and set, and which round is live (gt: the rounds before it are ground truth)."""
    d, k = scenario.dialogue, scenario.round
    live = f"live round {k} (rounds before it: ground truth)" if k else "every round live"
    return [Note(title="Dialogue", text=f"{d.topic} · set {d.set} · {live}")]
