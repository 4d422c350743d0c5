"""Duplex-MPE: one request to Aria among 3-4 people (DESIGN §1-§6), the first benchmark plug-in.

Parts: ``suite`` (schema and validator, §2), ``scheduler`` (the pure runtime protocol, §3),
``rules`` (the window rules of §6, the one place they are written), ``outcome`` (the pages'
outcome from those rules), ``scoring`` / ``entry`` (a scored episode) / ``metrics`` / ``stats`` /
``report`` (§6 scoring), ``dataset`` (generators and synthesis), ``oracle`` (the reference behaviour),
``duty`` (the duty instruction's one text: the built-in preamble, the optional text prompt and the
text reference's prompt), ``textref`` (the transcript-conditioned text reference, ``mpe reference``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.benchmarks.mpe import outcome
from server.benchmarks.mpe.duty import DUTY_TEXT
from server.benchmarks.mpe.entry import EpisodeScore
from server.benchmarks.mpe.judging import JUDGE_TASKS, Judge, make_judge
from server.benchmarks.mpe.metrics import QUANTITIES
from server.benchmarks.mpe.outcome import timeline as episode_timeline
from server.benchmarks.mpe.scheduler import EpisodePlan, Scheduler, TurnPlan
from server.benchmarks.mpe.suite import CONDITIONS, Scenario, Suite, validate_suite
from server.benchmarks.mpe.textref.prompt import STATS_KEY as TEXT_REFERENCE_STATS
from server.core.benchmark import (
    MODEL_EVENTS,
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
from server.core.schedule import PREAMBLE

if TYPE_CHECKING:
    from server.benchmarks.mpe.dataset.commands import MPEDatasetTools
    from server.benchmarks.mpe.oracle import Oracle


def episode_plan(scenario: Scenario, lengths: Mapping[str | int, int]) -> EpisodePlan:
    """The scheduler's plan of one scenario version; clip lengths come from the audio itself."""
    return EpisodePlan(preamble_samples=lengths[PREAMBLE], turns=tuple(
        TurnPlan(idx=t.idx, label=t.label, n_samples=lengths[t.idx], speaker=t.speaker) for t in scenario.turns))


class DuplexMPE(Benchmark[Suite, EpisodeScore, Scenario]):
    name = "duplex-mpe"
    conditions = tuple(CONDITIONS)
    duty_text = DUTY_TEXT  # the paper's duty instruction (App. A3.1), sent only when a run asks for it
    failure_types = outcome.FAILURES
    oracle_bridge = "oracle"
    # what the model heard anyway: when the preamble and each clip (by index only) played
    public_events = {**MODEL_EVENTS, "preamble.start": frozenset(), "preamble.end": frozenset(),
                     "clip.start": frozenset({"idx"}), "clip.end": frozenset({"idx"})}
    script_stats = frozenset({TEXT_REFERENCE_STATS})  # a text reference's decisions name and quote the turns
    judge_tasks = JUDGE_TASKS

    def load_suite(self, path: str | Path) -> Suite:
        return Suite.load(path)

    def problems(self, suite: Suite) -> list[str]:
        return validate_suite(suite)

    def episodes(self, suite: Suite, conditions: Sequence[str], limit: int | None) -> list[EpisodeSpec[Scenario]]:
        """One episode per scenario version; ``limit`` counts pairs, so both conditions stay paired."""
        pairs = list(dict.fromkeys(sc.pair_id for sc in suite.scenarios))
        keep = set(pairs[:limit] if limit else pairs)
        return [EpisodeSpec(sc.scenario_id, sc.pair_id, sc.condition, sc)
                for sc in suite.scenarios if sc.pair_id in keep and sc.condition in conditions]

    #: the snapshot is the manifest line itself (§2), every field of it kept
    scenario_model = Scenario

    def clip_refs(self, suite: Suite, scenario: Scenario) -> dict[str | int, str]:
        refs: dict[str | int, str] = {PREAMBLE: suite.meta.preamble.clip}  # §3.1: the duty preamble
        refs.update({t.idx: t.clip for t in scenario.turns})
        return refs

    def scheduler(self, scenario: Scenario, lengths: Mapping[str | int, int]) -> Scheduler:
        return Scheduler(episode_plan(scenario, lengths))

    def live_outcome(self, events: Sequence[Event], segments: Sequence[Span], n_samples: int):
        return outcome.live_outcome(events, segments, n_samples)

    def scored_outcome(self, entry: EpisodeScore):
        return outcome.scored_outcome(entry)

    # --- shown ---------------------------------------------------------------------------------

    quantities = QUANTITIES

    def suite_summary(self, suite: Suite) -> SuiteSummary:
        """Scenario versions per addressing condition, turns per label."""
        conds: Counter[str] = Counter(sc.condition for sc in suite.scenarios)
        labels: Counter[str] = Counter(t.label for sc in suite.scenarios for t in sc.turns)
        return SuiteSummary(conditions=dict(conds), label_kind="turns by label", labels=dict(labels))

    def scenario_items(self, suite: Suite) -> list[ScenarioSummary]:
        """One item per scenario version; its turn labels and T position are script."""
        return [ScenarioSummary(scenario_id=sc.scenario_id, pair_id=sc.pair_id, condition=sc.condition,
                                n_speakers=sc.n_speakers, duration_s=round(sum(t.duration_s for t in sc.turns), 2),
                                labels=sc.labels, facts={"t_bucket": sc.t_bucket}) for sc in suite.scenarios]

    def clip_texts(self, scenario: Scenario) -> ClipTexts:
        """Each turn's text, on the clip events that name its index."""
        return ClipTexts(texts={f"clip.{t.idx}": t.text for t in scenario.turns},
                         events={"clip.start": ("idx",), "clip.end": ("idx",)})

    def timeline(self, events: Sequence[Event], segments: Sequence[OpenSpan], *, head: int, end: int | None,
                 entry: ScoreEntry | None, outcome: Outcome | None) -> Timeline:
        return episode_timeline(events, segments, head, end, entry if isinstance(entry, EpisodeScore) else None)

    labels = outcome.LABELS
    failure_titles = outcome.FAILURE_TITLES
    outcome_columns = outcome.OUTCOME_COLUMNS
    script_columns = outcome.SCRIPT_COLUMNS

    def outcome_cells(self, o: Outcome) -> list[Cell]:
        return outcome.outcome_cells(o) if isinstance(o, outcome.MPEOutcome) else super().outcome_cells(o)

    def metric_notes(self, analyses: Mapping[str, Any], model: str) -> list[str]:
        return outcome.metric_notes(analyses, model)

    def status_text(self, status: Mapping[str, Any], scenario: Scenario | None) -> str:
        return outcome.status_text(status, scenario)

    def room_blocks(self, events: Sequence[Event], scenario: Scenario | None) -> list[Block]:
        return outcome.room_blocks(events, scenario)

    def script_rows(self, scenario: Scenario, events: Sequence[Event], timeline: Timeline) -> list[ScriptRow]:
        return outcome.script_rows(scenario, events, timeline)

    def script_facts(self, scenario: Scenario) -> list[Note]:
        return outcome.script_facts(scenario)

    def script_notes(self, entry: ScoreEntry | None) -> list[Note]:
        return outcome.script_notes(entry if isinstance(entry, EpisodeScore) else None)

    scoring_version = "mpe-scoring-v1"
    entry_model = EpisodeScore

    def make_judge(self, spec: str | None) -> Judge:
        return make_judge(spec)

    def score_episode(self, episode, asr, judge, cache, rules=None) -> EpisodeScore:
        """A speech model's episode from its recording (``scoring``); a text reference's from its
        decisions on the script (``textref``: the same entry, so the same metrics)."""
        from server.benchmarks.mpe.scoring import score_episode
        from server.benchmarks.mpe.textref.entry import text_entry
        from server.benchmarks.mpe.textref.prompt import text_reference_of

        ref = text_reference_of(episode.doc)
        return score_episode(episode, asr, judge, cache) if ref is None else text_entry(episode, ref, judge, cache)

    def metrics(self, entries):
        from server.benchmarks.mpe.metrics import compute_metrics

        return compute_metrics(entries)

    def analyses(self, entries, metrics):
        from server.benchmarks.mpe.stats import analyses

        return analyses(entries, metrics)

    def print_tables(self, metrics, console, title=""):
        from server.benchmarks.mpe.report import print_tables

        print_tables(metrics, console, title)

    def print_report(self, db, refs, console, *, html=None, max_timelines=60):
        from server.benchmarks.mpe.report import collect_report, print_report, render_html

        data = collect_report(db, refs)
        print_report(data, console)
        if html is not None:
            html.write_text(render_html(data, max_timelines=max_timelines), encoding="utf-8")
        return {"metrics": data.metrics, "analyses": data.analyses, "reference": data.reference}

    def oracle(self, data_dir: Path, suite: str | None = None) -> Oracle:
        """Knows the Duplex-MPE script (admin token: ``episode.start`` carries the reference) and behaves ideally."""
        from server.benchmarks.mpe.oracle import Oracle

        return Oracle(data_dir, suite)

    def dataset_tools(self) -> MPEDatasetTools:
        """Its ``mpe dataset`` commands (imported on first use: the engine never needs them)."""
        from server.benchmarks.mpe.dataset.commands import TOOLS

        return TOOLS


BENCHMARK = DuplexMPE()
