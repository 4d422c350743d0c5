"""MTR-DuplexBench: multi-round two-party conversation features (DESIGN §12), the second
benchmark plug-in.

Parts: ``suite`` (schema and validator, §12.1), ``scheduler`` (the pure round scheduler and the
gt history layout, §12.2-12.3), ``rules`` (the per-round rules, §12.4, the one place they are
written), ``outcome`` (the pages' outcome from those rules), ``scoring`` / ``entry`` / ``metrics``
/ ``stats`` / ``report``, ``dataset`` (generators, voices, built-in suites), ``oracle``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.benchmarks.mpe.judging import Judge, make_judge
from server.benchmarks.mtr import outcome
from server.benchmarks.mtr.entry import RULE_SETS, MTREpisodeScore
from server.benchmarks.mtr.judges import JUDGE_TASKS, PROMPT_VERSIONS
from server.benchmarks.mtr.metrics import QUANTITIES
from server.benchmarks.mtr.outcome import MTROutcome
from server.benchmarks.mtr.outcome import timeline as episode_timeline
from server.benchmarks.mtr.rules import FAILURES
from server.benchmarks.mtr.scheduler import RoundScheduler
from server.benchmarks.mtr.suite import (
    BENCHMARK_NAME,
    HISTORY_MODES,
    Dialogue,
    MTRScenario,
    Suite,
    scenario_of,
    validate_suite,
)
from server.core.benchmark import (
    MODEL_EVENTS,
    NO_CLIP_TEXTS,
    Benchmark,
    Block,
    Cell,
    ClipTexts,
    EpisodeSpec,
    Note,
    OpenSpan,
    Outcome,
    ScenarioSummary,
    ScoreEntry,
    ScriptRow,
    Span,
    SuiteSummary,
    Timeline,
)
from server.core.events import Event

if TYPE_CHECKING:
    from server.benchmarks.mtr.dataset.commands import MTRDatasetTools
    from server.benchmarks.mtr.oracle import MTROracle


def _episode_rounds(d: Dialogue, mode: str) -> list[int | None]:
    """The live round of each episode a dialogue makes in a history mode: gt one per round, free
    one (None: every round live)."""
    return [r.round for r in d.rounds] if mode == "gt" else [None]


class MTRDuplexBench(Benchmark[Suite, MTREpisodeScore, MTRScenario]):
    name = BENCHMARK_NAME
    conditions = HISTORY_MODES
    context_conditions = frozenset({"gt"})
    failure_types = FAILURES
    oracle_bridge = "mtr-oracle"
    judge_tasks = JUDGE_TASKS
    # what the model heard anyway: where the history and each round's user turns are (no features)
    public_events = {**MODEL_EVENTS, **{f"{k}.{e}": frozenset({"round", "part"}) for k in ("user", "round", "history")
                                        for e in ("start", "end")}}

    def load_suite(self, path: str | Path) -> Suite:
        return Suite.load(path)

    def problems(self, suite: Suite) -> list[str]:
        return validate_suite(suite)

    def episodes(self, suite: Suite, conditions: Sequence[str], limit: int | None) -> list[EpisodeSpec[MTRScenario]]:
        """gt: one episode per (dialogue, round); free: one per dialogue. ``limit`` counts dialogues."""
        out: list[EpisodeSpec[MTRScenario]] = []
        for d in suite.dialogues[:limit] if limit else suite.dialogues:
            for mode in conditions:
                for k in _episode_rounds(d, mode):
                    sc = scenario_of(d, mode, k)
                    out.append(EpisodeSpec(sc.scenario_id, d.dialogue_id, mode, sc))
        return out

    #: the dialogue, its history mode and its live round (§12.2)
    scenario_model = MTRScenario

    def clip_refs(self, suite: Suite, scenario: MTRScenario) -> dict[str | int, str]:
        return {name: c.clip for r in scenario.played() for name, c in r.clips()}

    def scheduler(self, scenario: MTRScenario, lengths: Mapping[str | int, int]) -> RoundScheduler:
        return RoundScheduler(scenario.dialogue, scenario.condition, scenario.round, lengths)

    def live_outcome(self, events: Sequence[Event], segments: Sequence[Span], n_samples: int):
        return outcome.live_outcome(events, segments, n_samples)

    def scored_outcome(self, entry: MTREpisodeScore):
        return outcome.scored_outcome(entry)

    # --- shown ---------------------------------------------------------------------------------

    quantities = QUANTITIES

    def suite_summary(self, suite: Suite) -> SuiteSummary:
        """Episodes per history mode, rounds per feature, dialogues per feature set."""
        return SuiteSummary(
            conditions={mode: sum(len(_episode_rounds(d, mode)) for d in suite.dialogues) for mode in self.conditions},
            label_kind="rounds by feature", labels=dict(Counter(f for d in suite.dialogues for r in d.rounds
                                                                        for f in r.features)),
            groups={"sets": dict(Counter(d.set for d in suite.dialogues))})

    def scenario_items(self, suite: Suite) -> list[ScenarioSummary]:
        """One item per dialogue (every history mode plays it); its rounds' features are script."""
        return [ScenarioSummary(scenario_id=d.dialogue_id, pair_id=d.dialogue_id, condition=None, n_speakers=None,
                                duration_s=round(sum(c.duration_s for r in d.rounds for _, c in r.clips()), 2),
                                labels=[r.label() for r in d.rounds], facts={"set": d.set, "topic": d.topic})
                for d in suite.dialogues]

    def clip_texts(self, scenario: MTRScenario) -> ClipTexts:
        """The words of each clip, on the event that starts it."""
        texts: dict[str, str] = {}
        for r in scenario.played():
            n = r.round
            texts[f"user.{n}.1"] = r.user.text
            texts[f"context.{n}.assistant"] = r.assistant.text
            if r.pause:
                texts[f"user.{n}.2"] = r.pause.continuation.text
            if r.barge_in:
                texts[f"barge_in.{n}"] = r.barge_in.text
                texts[f"context.{n}.barge_in_response"] = r.barge_in.response.text
            if r.background:
                texts[f"background.{n}"] = r.background.text
            texts.update({f"backchannel.{n}.{i}": b.text for i, b in enumerate(r.backchannels)})
        return ClipTexts(texts=texts, events={"user.start": ("round", "part"), "context.start": ("round", "part"),
                                              "barge_in.start": ("round",), "background.start": ("round",),
                                              "backchannel.start": ("round", "i")})

    def timeline(self, events: Sequence[Event], segments: Sequence[OpenSpan], *, head: int, end: int | None,
                 entry: ScoreEntry | None, outcome: Outcome | None) -> Timeline:
        return episode_timeline(events, head, entry if isinstance(entry, MTREpisodeScore) else None,
                                outcome if isinstance(outcome, MTROutcome) else None)

    labels = outcome.LABELS
    failure_titles = outcome.FAILURE_TITLES
    outcome_columns = outcome.OUTCOME_COLUMNS
    script_columns = outcome.SCRIPT_COLUMNS

    def outcome_cells(self, o: Outcome) -> list[Cell]:
        return outcome.outcome_cells(o) if isinstance(o, MTROutcome) else super().outcome_cells(o)

    def status_text(self, status: Mapping[str, Any], scenario: MTRScenario | None) -> str:
        return outcome.status_text(status)

    def room_blocks(self, events: Sequence[Event], scenario: MTRScenario | None) -> list[Block]:
        return outcome.room_blocks(events, self.clip_texts(scenario) if scenario is not None else NO_CLIP_TEXTS)

    def script_rows(self, scenario: MTRScenario, events: Sequence[Event], timeline: Timeline) -> list[ScriptRow]:
        return outcome.script_rows(scenario, events, timeline)

    def script_facts(self, scenario: MTRScenario) -> list[Note]:
        return outcome.script_facts(scenario)

    scoring_version = f"mtr-scoring-v3;{PROMPT_VERSIONS}"
    entry_model = MTREpisodeScore

    def make_judge(self, spec: str | None) -> Judge:
        """Duplex-MPE's judge of the same backend: it decides the answer correctness of instruction
        rounds, and the dimension judges follow its backend (:func:`.judges.make_dimension_judge`)."""
        return make_judge(spec)

    #: ``project`` (the detector-based §12.4 rules) or ``published`` (the published scripts' rules)
    rule_sets = RULE_SETS

    def score_episode(self, episode, asr, judge, cache, rules=None) -> MTREpisodeScore:
        from server.benchmarks.mtr.scoring import score_episode

        return score_episode(episode, asr, judge, cache, rules or RULE_SETS[0])  # the dimension rounds only are transcribed

    def metrics(self, entries):
        from server.benchmarks.mtr.metrics import compute_metrics

        return compute_metrics(entries)

    def analyses(self, entries, metrics):
        from server.benchmarks.mtr.stats import analyses

        return analyses(entries)

    def print_tables(self, metrics, console, title=""):
        from server.benchmarks.mtr.report import print_tables

        print_tables(metrics, console, title)

    def print_report(self, db, refs, console, *, html=None, max_timelines=60):
        from server.benchmarks.mtr.report import print_report, render_html, report_entries, room_timing_lines

        entries = report_entries(db, refs)
        late = room_timing_lines(db, refs)
        data = print_report(entries, console, late)
        if html is not None:
            html.write_text(render_html(entries, max_timelines=max_timelines, room_timing=late), encoding="utf-8")
        return data

    def oracle(self, data_dir: Path, suite: str | None = None) -> MTROracle:
        """Knows the MTR-DuplexBench dialogues (admin token) and handles every feature ideally."""
        from server.benchmarks.mtr.oracle import MTROracle

        return MTROracle(data_dir, suite)

    def dataset_tools(self) -> MTRDatasetTools:
        """Its ``mpe dataset`` commands (imported on first use: the engine never needs them)."""
        from server.benchmarks.mtr.dataset.commands import TOOLS

        return TOOLS


BENCHMARK = MTRDuplexBench()
