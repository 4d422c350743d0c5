"""MTR-DuplexBench: multi-round two-party conversation features (DESIGN §12), the second
benchmark plug-in.

Parts: ``suite`` (schema and validator, §12.1), ``scheduler`` (the pure round scheduler and the
gt history layout, §12.2-12.3), ``rules`` (the per-round rules, §12.4, the one place they are
written), ``outcome`` (the pages' outcome from those rules), ``scoring`` / ``entry`` / ``metrics``
/ ``stats`` / ``report``, ``dataset`` (generators, voices, built-in suites), ``oracle``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from server.benchmarks.mpe.judging import Judge, make_judge
from server.benchmarks.mtr import outcome
from server.benchmarks.mtr.entry import MTREpisodeScore
from server.benchmarks.mtr.judges import JUDGE_TASKS, PROMPT_VERSIONS
from server.benchmarks.mtr.rules import FAILURES
from server.benchmarks.mtr.scheduler import RoundScheduler
from server.benchmarks.mtr.suite import BENCHMARK_NAME, HISTORY_MODES, Dialogue, Suite, scenario_of, validate_suite
from server.core.benchmark import MODEL_EVENTS, Benchmark, EpisodeSpec, Span
from server.core.events import Event


def _rounds(scenario: Mapping[str, Any]) -> tuple[Dialogue, int | None]:
    return Dialogue.model_validate(scenario["dialogue"]), scenario.get("round")


class MTRDuplexBench(Benchmark[Suite, MTREpisodeScore]):
    name = BENCHMARK_NAME
    conditions = HISTORY_MODES
    context_conditions = frozenset({"gt"})
    dataset_cli = "server.benchmarks.mtr.dataset.cli"
    failure_types = FAILURES
    judge_tasks = JUDGE_TASKS
    # what the model heard anyway: where the history and each round's user turns are (no features)
    public_events = {**MODEL_EVENTS, **{f"{k}.{e}": frozenset({"round", "part"}) for k in ("user", "round", "history")
                                        for e in ("start", "end")}}

    def load_suite(self, path: str | Path) -> Suite:
        return Suite.load(path)

    def problems(self, suite: Suite) -> list[str]:
        return validate_suite(suite)

    def episodes(self, suite: Suite, conditions: Sequence[str], limit: int | None) -> list[EpisodeSpec]:
        """gt: one episode per (dialogue, round); free: one per dialogue. ``limit`` counts dialogues."""
        out: list[EpisodeSpec] = []
        for d in suite.dialogues[:limit] if limit else suite.dialogues:
            for mode in conditions:
                for k in [r.round for r in d.rounds] if mode == "gt" else [None]:
                    sc = scenario_of(d, mode, k)
                    out.append(EpisodeSpec(sc["scenario_id"], d.dialogue_id, mode, sc))
        return out

    def clip_refs(self, suite: Suite, scenario: Mapping[str, Any]) -> dict[str | int, str]:
        d, k = _rounds(scenario)
        return {name: c.clip for r in d.rounds if k is None or r.round <= k for name, c in r.clips()}

    def scheduler(self, scenario: Mapping[str, Any], lengths: Mapping[str | int, int]) -> RoundScheduler:
        d, k = _rounds(scenario)
        return RoundScheduler(d, scenario["condition"], k, lengths)

    def live_outcome(self, events: Sequence[Event], segments: Sequence[Span], n_samples: int):
        return outcome.live_outcome(events, segments, n_samples)

    def scored_outcome(self, entry: MTREpisodeScore):
        return outcome.scored_outcome(entry)

    scoring_version = f"mtr-scoring-v3;{PROMPT_VERSIONS}"
    entry_model = MTREpisodeScore

    def make_judge(self, spec: str | None) -> Judge:
        """Duplex-MPE's judge of the same backend: it decides the answer correctness of instruction
        rounds, and the dimension judges follow its backend (:func:`.judges.make_dimension_judge`)."""
        return make_judge(spec)

    def score_episode(self, episode, asr, judge, cache) -> MTREpisodeScore:
        from server.benchmarks.mtr.scoring import score_episode

        return score_episode(episode, asr, judge, cache)  # the dimension rounds only are transcribed

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
        from server.benchmarks.mtr.report import print_report, render_html, report_entries

        entries = report_entries(db, refs)
        data = print_report(entries, console)
        if html is not None:
            html.write_text(render_html(entries, max_timelines=max_timelines), encoding="utf-8")
        return data


BENCHMARK = MTRDuplexBench()
