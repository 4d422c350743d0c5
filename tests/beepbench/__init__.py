"""``beep-answer``: a third benchmark written only in this package, to show that a benchmark is a
plug-in and nothing more (DESIGN "How to add a benchmark").

The task: answer every beep. A scenario is a few beeps; after each the model has ``WINDOW`` of
silence to speak. One quantity, the answer rate. It registers with one line, outside every shared
file: ``MPE_BENCHMARKS=beep-answer=tests.beepbench`` (server.engine.registry).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import soundfile as sf
from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.table import Table

from server.core.benchmark import (
    MODEL_EVENTS,
    Benchmark,
    Block,
    Cell,
    Column,
    EpisodeSpec,
    EpisodeView,
    JudgedItem,
    Label,
    OpenSpan,
    Outcome,
    Quantity,
    ScenarioSummary,
    ScoreEntry,
    ScriptRow,
    Span,
    SuiteSummary,
    Timeline,
    Verdict,
    Window,
)
from server.core.detector import detect_segments
from server.core.events import Event
from server.core.schedule import FramePlan, Piece
from server.core.timebase import SpeechEvent

NAME = "beep-answer"
RATE = 24_000
FRAME = 1920
LEAD = RATE // 2  # silence before the first beep
WINDOW = 2 * RATE  # the answer window after each beep
CONDITION = "plain"
QUANTITY = "answer_rate"


# --- the suite ----------------------------------------------------------------------------------

class Beep(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    clip: str
    duration_s: float


class BeepMeta(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    benchmark: str = NAME
    name: str
    version: str


class BeepScenario(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scenario_id: str
    beeps: list[Beep]


class BeepEpisode(BeepScenario):
    """The scenario snapshot an episode stores: the scenario, and the run condition it plays in."""

    condition: str


class BeepSuite:
    """A suite directory: ``suite.json`` (benchmark, name, version), ``scenarios.jsonl``, ``clips/``."""

    def __init__(self, root: Path, meta: BeepMeta, scenarios: list[BeepScenario]):
        self.root, self.meta, self.scenarios = root, meta, scenarios

    @classmethod
    def load(cls, path: str | Path) -> BeepSuite:
        root = Path(path)
        root = root.parent if root.name == "suite.json" else root
        meta = BeepMeta.model_validate_json((root / "suite.json").read_text("utf-8"))
        lines = (root / "scenarios.jsonl").read_text("utf-8").splitlines()
        return cls(root, meta, [BeepScenario.model_validate_json(x) for x in lines if x.strip()])

    def content_hash(self) -> str:
        h = hashlib.sha256()
        for name in ("suite.json", "scenarios.jsonl"):
            h.update((self.root / name).read_bytes())
        return h.hexdigest()

    def clip_path(self, rel: str) -> Path:
        path = (self.root / rel).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise ValueError(f"clip {rel!r} is outside the suite")
        return path

    def load_clip(self, rel: str) -> np.ndarray:
        pcm, rate = sf.read(str(self.clip_path(rel)), dtype="int16")
        assert rate == RATE
        return pcm


def build_suite(root: Path, scenarios: int = 2, beeps: int = 2) -> Path:
    """A suite of ``scenarios`` scenarios of ``beeps`` beeps each (a 1 kHz tone of 0.3 s)."""
    t = np.arange(int(0.3 * RATE)) / RATE
    tone = (np.sin(2 * np.pi * 1000 * t) * 12_000).astype(np.int16)
    (root / "clips").mkdir(parents=True, exist_ok=True)
    sf.write(str(root / "clips" / "beep.wav"), tone, RATE, subtype="PCM_16")
    beep = Beep(clip="clips/beep.wav", duration_s=len(tone) / RATE)
    (root / "suite.json").write_text(BeepMeta(name="beeps", version="1").model_dump_json(), "utf-8")
    (root / "scenarios.jsonl").write_text("".join(
        BeepScenario(scenario_id=f"b{i}", beeps=[beep] * beeps).model_dump_json() + "\n" for i in range(scenarios)),
        "utf-8")
    return root


# --- the runtime protocol -------------------------------------------------------------------------

def layout(lengths: Sequence[int]) -> tuple[list[tuple[int, int, int]], int]:
    """((beep index, start, length) of each beep, end sample): each beep is followed by its window."""
    placed, t = [], LEAD
    for i, n in enumerate(lengths):
        placed.append((i, t, n))
        t += n + WINDOW
    return placed, t


class BeepScheduler:
    """Beeps and windows at fixed places: pure and clock-free (it needs nothing of the detector)."""

    context_frames = 0
    context_turns = ()

    def __init__(self, lengths: Sequence[int]):
        self.placed, self.end = layout(lengths)
        self._seq = 0

    @property
    def end_sample(self) -> int:
        return self.end

    def next_frame(self) -> FramePlan | None:
        a = self._seq * FRAME
        if a >= self.end:
            return None
        pieces, events = [], []
        for i, start, n in self.placed:
            lo, hi = max(a, start), min(a + FRAME, start + n)
            if lo < hi:
                pieces.append(Piece(i, lo - start, lo - a, hi - lo))
            for at, kind in ((start, "beep.start"), (start + n, "beep.end"), (start + n + WINDOW, "window.end")):
                if a <= at < a + FRAME:
                    events.append(Event(at, kind, {"i": i}))
        if a + FRAME >= self.end:
            events.append(Event(self.end, "episode.end"))
        self._seq += 1
        return FramePlan(self._seq - 1, tuple(pieces), tuple(sorted(events, key=lambda e: e.t)))

    def observe(self, events: Iterable[SpeechEvent], known_until: int) -> None:
        pass

    def status(self) -> dict[str, Any]:
        return {"seq": self._seq}


# --- the rule (its one place) ----------------------------------------------------------------------

def beep_ends(events: Sequence[Event]) -> list[int]:
    return [e.t for e in events if e.type == "beep.end"]


def answered(beep_end: int, segments: Iterable[OpenSpan], head: int | None = None) -> bool:
    """The model answered a beep: speech in its window (beep end, beep end + WINDOW]."""
    return any(s < beep_end + WINDOW and (head if e is None else e) > beep_end for s, e in segments)


class BeepOutcome(Outcome):
    answered: int
    beeps: int


def beep_outcome(source: Literal["live", "score"], answers: Sequence[bool]) -> BeepOutcome:
    ok = all(answers)
    return BeepOutcome(source=source, failures=[] if ok else ["missed"], ok=ok, answered=sum(answers),
                       beeps=len(answers))


# --- scoring ---------------------------------------------------------------------------------------

class BeepScore(ScoreEntry):
    answered: list[bool]

    def judged(self) -> list[JudgedItem]:
        return []


class NoJudge:
    """The benchmark needs no semantic judge."""

    name = "none"

    def describe(self) -> dict[str, object]:
        return {"backend": self.name}


def _metrics(entries: Sequence[BeepScore]) -> dict[str, Any]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for e in entries:
        q = out.setdefault(e.model, {}).setdefault(e.condition, {QUANTITY: {"num": 0, "den": 0, "value": None}})[QUANTITY]
        q["num"] += sum(e.answered)
        q["den"] += len(e.answered)
        q["value"] = q["num"] / q["den"] if q["den"] else None
    return out


class BeepAnswer(Benchmark[BeepSuite, BeepScore, BeepEpisode]):
    name = NAME
    conditions = (CONDITION,)
    failure_types = ("missed",)
    scoring_version = "beep-1"
    entry_model = BeepScore
    public_events = {**MODEL_EVENTS, "beep.start": frozenset({"i"}), "beep.end": frozenset({"i"})}
    quantities = (Quantity(key=QUANTITY, title="Answer rate", short_title="answered", description="beeps answered / beeps",
                           direction="higher", scored=True, unit="beeps", format="percent"),)

    def load_suite(self, path: str | Path) -> BeepSuite:
        return BeepSuite.load(path)

    def problems(self, suite: BeepSuite) -> list[str]:
        return [f"{sc.scenario_id}: no beeps" for sc in suite.scenarios if not sc.beeps]

    def episodes(self, suite: BeepSuite, conditions: Sequence[str], limit: int | None) -> list[EpisodeSpec[BeepEpisode]]:
        return [EpisodeSpec(sc.scenario_id, sc.scenario_id, c, BeepEpisode(**dict(sc), condition=c))
                for sc in suite.scenarios[:limit] for c in conditions]

    scenario_model = BeepEpisode

    def clip_refs(self, suite: BeepSuite, scenario: BeepEpisode) -> dict[str | int, str]:
        return {i: b.clip for i, b in enumerate(scenario.beeps)}

    def scheduler(self, scenario: BeepEpisode, lengths: Mapping[str | int, int]) -> BeepScheduler:
        return BeepScheduler([lengths[i] for i in range(len(scenario.beeps))])

    def live_outcome(self, events: Sequence[Event], segments: Sequence[Span], n_samples: int) -> Outcome | None:
        return beep_outcome("live", [answered(t, segments) for t in beep_ends(events)])

    def scored_outcome(self, entry: BeepScore) -> Outcome:
        return beep_outcome("score", entry.answered)

    def make_judge(self, spec: str | None) -> NoJudge:
        return NoJudge()

    def score_episode(self, episode, asr, judge, cache, rules=None) -> BeepScore:
        doc = episode.view(EpisodeView)  # the shared fields are all it reads of the document
        segments = episode.segments
        if segments is None:
            segments = [(g.start, g.end) for g in detect_segments(episode.assistant)]
        return BeepScore(episode_id=doc.episode_id, attempt_id=doc.attempt_id, run_id=doc.run_id,
                         scenario_id=doc.scenario_id, condition=doc.condition, model=doc.model.name,
                         source=episode.source, answered=[answered(t, segments) for t in beep_ends(episode.events)])

    def metrics(self, entries: Sequence[BeepScore]) -> dict[str, Any]:
        return _metrics(entries)

    def analyses(self, entries: Sequence[BeepScore], metrics: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def print_tables(self, metrics: Mapping[str, Any], console: Console, title: str = "") -> None:
        table = Table(title=title or "Beeps answered")
        for col in ("model", "condition", "answered"):
            table.add_column(col)
        for model, by_cond in sorted(metrics.items()):
            for cond, q in sorted(by_cond.items()):
                v = q[QUANTITY]
                table.add_row(model, cond, f"{v['num']}/{v['den']}")
        console.print(table)

    def print_report(self, db, refs, console, *, html=None, max_timelines=60) -> dict[str, Any]:
        from server.scoring.results import latest_scoring
        from server.scoring.store import load_entries

        entries: list[BeepScore] = []
        for ref in refs:
            row = latest_scoring(db, ref)
            if row is not None:
                entries += load_entries(db, row.id, BeepScore)
        metrics = _metrics(entries)
        self.print_tables(metrics, console, "Beeps answered (report)")
        if html is not None:
            html.write_text(f"<html><body><pre>{json.dumps(metrics)}</pre></body></html>", "utf-8")
        return {"metrics": metrics, "analyses": {}}

    # --- shown -------------------------------------------------------------------------------

    labels = (Label(key="beep", title="a tone to answer", legend="beep"),)
    failure_titles = {"missed": "a beep went unanswered"}
    outcome_columns = (Column(key="answered", title="Beeps answered"),)
    script_columns = (Column(key="beep", title="Beep"),)

    def outcome_cells(self, outcome: Outcome) -> list[Cell]:
        if not isinstance(outcome, BeepOutcome):
            return super().outcome_cells(outcome)
        return [Cell(text=f"{outcome.answered}/{outcome.beeps} beeps", bad=outcome.answered < outcome.beeps)]

    def room_blocks(self, events: Sequence[Event], scenario: BeepEpisode | None) -> list[Block]:
        starts = {e.data["i"]: e.t for e in events if e.type == "beep.start"}
        ends = {e.data["i"]: e.t for e in events if e.type == "beep.end"}
        return [Block(key=f"beep-{i}", idx=i, kind="beep", who=f"beep {i + 1}", title=f"beep {i + 1}",
                      aria=f"{{t}}: beep {i + 1}", start=t, end=ends.get(i)) for i, t in starts.items()]

    def script_rows(self, scenario: BeepEpisode, events: Sequence[Event], timeline: Timeline) -> list[ScriptRow]:
        starts = {e.data["i"]: e.t for e in events if e.type == "beep.start"}
        return [ScriptRow(key=f"beep-{i}", name=f"beep {i + 1}", start=starts.get(i), cells=[Cell(text=f"beep {i + 1}")],
                          verdict=next((w.verdict for w in timeline.windows if w.idx == i), None))
                for i in range(len(scenario.beeps))]

    def suite_summary(self, suite: BeepSuite) -> SuiteSummary:
        return SuiteSummary(conditions={c: len(suite.scenarios) for c in self.conditions}, label_kind="beeps",
                            labels={"beep": sum(len(sc.beeps) for sc in suite.scenarios)})

    def scenario_items(self, suite: BeepSuite) -> list[ScenarioSummary]:
        return [ScenarioSummary(scenario_id=sc.scenario_id, pair_id=sc.scenario_id, condition=None, n_speakers=None,
                                duration_s=sum(b.duration_s for b in sc.beeps), labels=["beep"] * len(sc.beeps))
                for sc in suite.scenarios]

    def timeline(self, events: Sequence[Event], segments: Sequence[OpenSpan], *, head: int, end: int | None,
                 entry: ScoreEntry | None, outcome: Outcome | None) -> Timeline:
        windows = []
        for i, t in enumerate(beep_ends(events)):
            closes = t + WINDOW
            open_ = end is None and head < closes
            if isinstance(entry, BeepScore) and i < len(entry.answered):
                ok, scored = entry.answered[i], True
            else:
                ok, scored = answered(t, segments, head), False
            state = "pass" if ok else ("quiet" if open_ else "fail")
            windows.append(Window(kind="beep", label=f"beep {i + 1}", idx=i, start=t, end=min(closes, head) if open_
                                  else closes, open=open_,
                                  verdict=Verdict(state=state, text="answered" if ok else "no answer", scored=scored)))
        return Timeline(head=head, windows=windows)


BENCHMARK = BeepAnswer()
