"""``mpe demo``: the built-in suite, an in-process server and the reference bridges, end to end,
then scoring with the offline backends, the results table and the HTML report."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from clients.codec import STREAM_RATE
from clients.sdk import BridgeClient, BridgeOptions
from server.app import BackgroundServer
from server.auth import create_token
from server.benchmarks.mpe.outcome import MPEOutcome, outcome_of_windows
from server.benchmarks.mpe.rules import episode_windows, parse_timeline
from server.core.events import Event
from server.db import Database, Episode
from server.engine.bundles import episode_document
from server.engine.leasing import create_run
from server.engine.progress import run_labels, runs_progress
from server.settings import Settings

ADMIN_ONLY = {"oracle", "mtr-oracle"}
# The demo runs offline: the cascade decides with its offline decider, even where a Claude key is set;
# in the MTR runs it plays the two-party mode (episode.start does not say which benchmark plays).
BRIDGE_OPTIONS = {"cascade": {"llm": "rule"}}
MTR_BRIDGE_OPTIONS = {"cascade": {"llm": "rule", "mode": "two-party"}}
# The cascade transcribes every utterance it hears (about 13 an episode): on 2 cores the demo runs
# it on the first pairs only (``mpe demo --cascade-pairs 0``: the whole suite, as docs/bridges.md reports).
CASCADE_PAIRS = 3
MTR_MODEL = {"oracle": "mtr-oracle"}  # the demo's models in the MTR runs (the oracle knows one benchmark)
MTR_SYSTEMS = {"cascade"}  # MTR runs beside the reference bridges (no known result to check)


@dataclass(frozen=True)
class EpisodeSummary:
    """One demo episode as the scheduler saw it (durations only; `mpe score` judges speech)."""

    t_wait: str | None  # why the wait after T ended (§3)
    onset_after_t_s: float | None  # the fresh onset after T ends
    speech_s: float  # assistant speech (live detector)
    duration_s: float
    outcome: MPEOutcome | None  # the pages' live outcome, from the §6 window rules


def summarize(doc: dict) -> EpisodeSummary:
    events = [Event.from_json(e) for e in doc["events"]]
    segs = [(g["start"], g["end"]) for g in doc["live_segments"]]
    end = doc.get("end_sample") or 0
    tl = parse_timeline(events, end, end)
    w = episode_windows(tl, segs)
    onset = None if not w.t.fresh or w.t.onset is None else round((w.t.onset - w.t.e_t) / STREAM_RATE, 2)
    return EpisodeSummary(t_wait=tl.t_wait[2] if tl.t_wait else None, onset_after_t_s=onset,
                          speech_s=round(sum(e - s for s, e in w.segments) / STREAM_RATE, 2),
                          duration_s=round(tl.end / STREAM_RATE, 1), outcome=outcome_of_windows(w))


async def run_demo(settings: Settings, models: list[str], *, clock: str = "lockstep", console: Console | None = None,
                   score: bool = True, asr: str = "faster-whisper", cascade_pairs: int = CASCADE_PAIRS) -> dict:
    from server.benchmarks.mpe.demo_suite import build_demo_suite

    console = console or Console(stderr=True)
    console.width = max(console.width, 150)  # the summary table is wide
    t_start = time.monotonic()
    with _progress(console) as bar:
        task = bar.add_task("building the demo suite (offline TTS)", total=None)
        suite_path = await asyncio.to_thread(
            build_demo_suite, settings.data_dir, progress=lambda i, n: bar.update(task, completed=i, total=n))
    db = await asyncio.to_thread(Database, settings.db_url)
    team_token = create_token(db, "local", label="demo")
    admin_token = create_token(db, "local", admin=True, label="demo oracle")
    limits = {"cascade": cascade_pairs or None}
    runs = {m: create_run(db, team="local", model=m, suite_path=str(suite_path), clock=clock, limit=limits.get(m),
                          max_attempts=settings.max_attempts, max_inflight=settings.max_inflight) for m in models}
    console.print(f"suite [bold]{suite_path}[/bold]; runs: " + ", ".join(f"{m}={r}" for m, r in runs.items()))

    # the MTR phase runs the reference bridges among the demo's models (their results are known)
    mtr_models = [m for m in (MTR_MODEL.get(m, m) for m in models) if m in MTR_EXPECTED or m in MTR_SYSTEMS]
    mtr_suite = await asyncio.to_thread(_build_mtr_suite, settings, console)
    tokens = {m: admin_token if m in ADMIN_ONLY else team_token for m in models + mtr_models}
    async with BackgroundServer(settings) as server:
        await _drive(server.url, settings, db, runs, tokens, console, BRIDGE_OPTIONS)
        # one benchmark after the other, the MTR runs created only now: a bridge serves every run of its
        # model, and the cascade's Duplex-MPE bridge (multi-party mode) must not take MTR episodes
        mtr_runs = {m: create_run(db, team="local", model=m, suite_path=str(mtr_suite), clock=clock,
                                  conditions=["gt", "free"], max_attempts=settings.max_attempts,
                                  max_inflight=settings.max_inflight) for m in mtr_models}
        console.print(f"MTR suite [bold]{mtr_suite}[/bold] (history modes gt and free); runs: "
                      + ", ".join(f"{m}={r}" for m, r in mtr_runs.items()))
        await _drive(server.url, settings, db, mtr_runs, tokens, console, MTR_BRIDGE_OPTIONS)

    table = Table(title="Demo episodes (scheduler view; `mpe score` gives the benchmark's numbers)")
    for col in ("model", "scenario", "condition", "status", "length s", "T wait", "onset after T s",
                "assistant speech s", "quiet N1-N3 windows", "N4 yield (§6)"):
        table.add_column(col)
    summaries = {}
    for m, run_id in runs.items():
        with db.session() as s:
            eps = s.query(Episode).filter(Episode.run_id == run_id).order_by(Episode.ordinal).all()
        for ep in eps:
            doc = episode_document(db, ep.id)
            sm = summarize(doc)
            summaries[(m, ep.scenario_id, ep.condition)] = sm
            clean, windows = sm.outcome.silence if sm.outcome else (0, 0)
            n4 = ", ".join(sm.outcome.n4) if sm.outcome and sm.outcome.n4 else "-"
            table.add_row(m, ep.scenario_id, ep.condition, ep.status, str(sm.duration_s), str(sm.t_wait),
                          "-" if sm.onset_after_t_s is None else str(sm.onset_after_t_s), str(sm.speech_s),
                          f"{clean}/{windows}", n4)
    console.print(table)
    scored = await asyncio.to_thread(_score_and_report, db, settings, runs, console, asr) if score else {}
    if score:
        scored["mtr"] = await asyncio.to_thread(_score_mtr, db, mtr_runs, console)
    console.print(f"database: {settings.db_url}   total time {time.monotonic() - t_start:.0f} s")
    console.print("export bundles with: mpe export RUN --out DIR")
    db.dispose()
    return {"runs": runs, "mtr_runs": mtr_runs, "summaries": summaries, **scored}


async def _drive(url: str, settings: Settings, db: Database, runs: dict[str, str], tokens: dict[str, str],
                 console: Console, options: dict[str, dict[str, str]]) -> None:
    """Connect one bridge per run's model (with its ``options``) and follow the runs to their end."""
    from server.cli.bridges import create_bridge

    clients = []
    for m in runs:
        bridge = await asyncio.to_thread(create_bridge, m, data_dir=str(settings.data_dir), **options.get(m, {}))
        clients.append(BridgeClient(bridge, BridgeOptions(server=url, token=tokens[m])))
    tasks = [asyncio.create_task(c.run()) for c in clients]
    with _progress(console) as bar:
        ids = {m: bar.add_task(m, total=None) for m in runs}
        while True:
            by_run = await asyncio.to_thread(runs_progress, db, runs.values())
            progress = {m: by_run[r] for m, r in runs.items()}
            for m, p in progress.items():
                bar.update(ids[m], total=p.total, completed=p.done,
                           description=f"{m:12s} running={p.running} failed={p.failed}")
            failed = [t for t in tasks if t.done() and t.exception()]
            if failed:
                raise failed[0].exception()
            if not any(p.active for p in progress.values()):
                break
            await asyncio.sleep(0.25)
    for c in clients:
        c.stop()
    await asyncio.gather(*tasks, return_exceptions=True)


def _build_mtr_suite(settings: Settings, console: Console):
    from server.benchmarks.mtr.dataset.builtin import build_builtin

    with _progress(console) as bar:
        task = bar.add_task("building the MTR mini suite (offline TTS)", total=None)
        return build_builtin("mtr-mini", settings.data_dir, progress=lambda i, n: bar.update(task, completed=i, total=n))


# MTR-DuplexBench (DESIGN §12.4): the oracle passes every feature in both history modes; silent never
# responds; always-talk talks over every user turn.
MTR_EXPECTED = {"mtr-oracle": 1.0, "silent": 0.0, "always-talk": 0.0}


def mtr_sanity_problems(metrics: dict) -> list[str]:
    """MTR reference bridges outside their known results."""
    from server.benchmarks.mtr.suite import FEATURES

    return [f"{model} {mode} {f} = {q[f]['value']} (expected {want:g})"
            for model, want in MTR_EXPECTED.items() for mode, q in metrics.get(model, {}).items()
            for f in FEATURES if f in q and q[f]["value"] != want]


def _score_mtr(db: Database, runs: dict[str, str], console: Console) -> dict:
    """Score the MTR runs (speech timing only: no ASR) and print the published main-table layout."""
    from server.benchmarks.mtr.metrics import compute_metrics
    from server.benchmarks.mtr.report import print_tables
    from server.scoring.errors import ScoringError
    from server.scoring.runner import ScoreOptions, score_run

    entries = []
    with _progress(console) as bar:
        for m, run_id in runs.items():
            task = bar.add_task(f"scoring {m}", total=None)
            res = score_run(db, run_id, ScoreOptions(asr="none"),
                            lambda i, n, task=task: bar.update(task, completed=i, total=n))
            if res.failures:
                raise ScoringError(f"scoring {m} failed on {len(res.failures)} episodes: {res.failures[0]['error']}")
            entries.extend(res.episodes)
    metrics = compute_metrics(entries)
    print_tables(metrics, console, title="Demo results, MTR-DuplexBench: success % (Round 1 → mean of rounds) "
                                         "and latency")
    for p in mtr_sanity_problems(metrics):
        console.print(f"[red]unexpected[/red]: {p}")
    return {"metrics": metrics}


# What the reference bridges must score (§6); anything else means something is broken.
EXPECTED = {
    # The offline path scores the oracle's spoken gold answers correct (bench/answer_accuracy.py:
    # all 20 of the mini suite), with room for one slip of tiny.en per condition.
    "oracle": {"fresh_onset_rate": (0.9, 1.0), "response_presence": (0.9, 1.0), "answer_accuracy": (0.9, 1.0),
               "silence_preservation": (0.9, 1.0), "window_response": (0.9, 1.0)},
    "silent": {"fresh_onset_rate": (0.0, 0.0), "response_presence": (0.0, 0.0), "silence_preservation": (1.0, 1.0),
               "window_response": (0.0, 0.0)},
    "always-talk": {"fresh_onset_rate": (0.0, 0.0), "response_presence": (1.0, 1.0), "answer_accuracy": (0.0, 0.1),
                    "silence_preservation": (0.0, 0.0), "window_response": (1.0, 1.0)},
}


def sanity_problems(metrics: dict, *, semantic: bool = True) -> list[str]:
    """Reference bridges outside their known results."""
    problems = []
    for model, bounds in EXPECTED.items():
        for cond, qs in metrics.get(model, {}).items():
            for q, (lo, hi) in bounds.items():
                if q == "answer_accuracy" and not semantic:
                    continue
                v = qs[q]["value"]
                if v is None or not lo - 1e-9 <= v <= hi + 1e-9:
                    problems.append(f"{model} {cond} {q} = {v} (expected {lo:g}..{hi:g})")
    return problems


def _score_and_report(db: Database, settings: Settings, runs: dict[str, str], console: Console, asr: str) -> dict:
    """Score every run with the offline backends, print the benchmark's table, write the HTML report."""
    from server.benchmarks.mpe.report import print_tables, render_html, report_from_entries
    from server.scoring.errors import ScoringError
    from server.scoring.runner import ScoreOptions, score_run

    results, entries, sources = {}, [], []
    with _progress(console) as bar:
        for m, run_id in runs.items():
            task = bar.add_task(f"scoring {m}", total=None)
            res = score_run(db, run_id, ScoreOptions(asr=asr),
                            lambda i, n, task=task: bar.update(task, completed=i, total=n))
            if res.failures:
                raise ScoringError(f"scoring {m} failed on {len(res.failures)} episodes: {res.failures[0]['error']}")
            results[m] = res.scoring_id
            entries.extend(res.episodes)
            sources.append({"ref": run_id, "run_id": run_id, "scoring_id": res.scoring_id, "config": res.config,
                            "models": [m], "labels": {m: run_labels(db, [run_id])[run_id]},
                            "n_episodes": len(res.episodes)})
    data = report_from_entries(entries, sources)
    print_tables(data.metrics, console, title=f"Demo results (ASR {asr}, rule judge)")
    if asr == "none":
        from server.scoring.asr import NO_ASR_NOTE

        console.print(f"[yellow]note[/yellow]: {NO_ASR_NOTE}")
    for p in sanity_problems(data.metrics, semantic=asr != "none"):
        console.print(f"[red]unexpected[/red]: {p}")
    path = settings.data_dir / "reports" / "demo.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(data, title="Duplex-MPE demo report"), encoding="utf-8")
    console.print(f"HTML report: [bold]{path}[/bold]   (rescore: mpe score RUN; combine: mpe report RUN...)")
    return {"scorings": results, "metrics": data.metrics, "report": path}


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console)
