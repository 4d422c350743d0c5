"""``mpe score``, ``mpe report`` and ``mpe audit`` (registered into the main CLI)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

console = Console(stderr=True)
out = Console()  # tables go to stdout
audit_app = typer.Typer(no_args_is_help=True, help="Audit the semantic judge against human labels.")


def _db():
    from server.db import Database
    from server.settings import load_settings

    return Database(load_settings().db_url)  # brings the schema to head first


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=console, transient=False)


def score(targets: list[str] = typer.Argument(..., metavar="RUN_ID | BUNDLE_DIR...",
                                              help="a run id, or episode bundle directories (or export directories)"),
          asr: str = typer.Option("faster-whisper", help="faster-whisper[:DIR] | transformers:DIR | none"),
          judge: str = typer.Option("rule", help="rule | rule:fast (speech over the length limits decided on "
                                                 "duration, without ASR: faster) | claude[:MODEL]"),
          as_json: bool = typer.Option(False, "--json", help="print one JSON object (metrics, analyses, episodes)"),
          workers: Optional[int] = typer.Option(None, min=1, help="worker processes (default: one per core)"),
          fresh: bool = typer.Option(False, help="start a new scoring instead of resuming (caches still apply)")) -> None:
    """Score a run (or episode bundles): windows, ASR, judges, metrics and analyses (DESIGN §6)."""
    from server.scoring.asr import NO_ASR_NOTE, asr_disabled
    from server.scoring.runner import ScoreOptions, bundle_jobs, run_jobs, score_bundles, score_run, scoring_config

    dirs = [Path(t) for t in targets if Path(t).is_dir()]
    if dirs and len(dirs) != len(targets):
        raise typer.BadParameter("give either one run id or only bundle directories")
    if not dirs and len(targets) != 1:
        raise typer.BadParameter("give one run id (or several bundle directories)")
    db = _db()
    opts = ScoreOptions(asr=asr, judge=judge, workers=workers, fresh=fresh)
    label = targets[0] if not dirs else f"{len(dirs)} bundle paths"
    scoring_config(asr, judge)  # unknown or unusable backends fail here, before any work
    if dirs:
        bundle_jobs(dirs)
    else:
        run_jobs(db, targets[0])
    try:
        with _progress() as bar:
            task = bar.add_task(f"scoring {label}", total=None)

            def progress(i: int, n: int) -> None:
                bar.update(task, completed=i, total=n)

            res = score_bundles(db, dirs, opts, progress) if dirs else score_run(db, targets[0], opts, progress)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]: finished episodes are saved; run the same command again to resume")
        raise typer.Exit(130)
    for w in res.warnings:
        console.print(f"[yellow]warning[/yellow]: {w}")
    if asr_disabled(res.config):
        console.print(f"[yellow]note[/yellow]: {NO_ASR_NOTE}")
    if res.failures:
        for f in res.failures[:20]:
            console.print(f"[red]failed[/red] episode {f['episode_id']}: {f['error']}")
        console.print(f"{len(res.failures)} of {len(res.episodes) + len(res.failures)} episodes could not be scored; "
                      "fix the cause and run the same command again (done episodes are kept)")
    if as_json:
        print(json.dumps(res.to_json()))
    elif not res.failures:
        from server.engine.registry import get_benchmark

        get_benchmark(res.config.get("benchmark")).print_tables(res.metrics, out, title=f"scoring {res.scoring_id}")
    c = res.calls
    console.print(f"scoring [bold]{res.scoring_id}[/bold]: {len(res.episodes)} episodes "
                  f"({res.skipped} already done) in {res.seconds:.1f} s; ASR calls {c.get('asr', 0)} "
                  f"(cached {c.get('asr_hits', 0)}), judge calls {c.get('judge', 0)} (cached {c.get('judge_hits', 0)})")
    if res.failures:
        raise typer.Exit(1)


def _benchmark_of_refs(db, refs: list[str]):
    """The benchmark of the runs (or scorings) to report on; they must share one."""
    from server.engine.registry import get_benchmark
    from server.scoring.results import benchmark_of, get_scoring, latest_scoring

    names = set()
    for ref in refs:
        row = latest_scoring(db, ref) or get_scoring(db, ref)
        if row is not None:
            names.add(benchmark_of(row).name)
    if len(names) > 1:
        raise typer.BadParameter(f"the runs belong to different benchmarks ({', '.join(sorted(names))}); "
                                 "report each benchmark's runs separately")
    return get_benchmark(names.pop() if names else None)


def report(refs: list[str] = typer.Argument(..., metavar="RUN_ID...", help="scored runs (or scoring ids)"),
           html: Optional[Path] = typer.Option(None, "--html", help="write a self-contained HTML report here"),
           timelines: str = typer.Option("60", help="episode timelines in the HTML report: a number or 'all'"),
           as_json: bool = typer.Option(False, "--json", help="print metrics and analyses as JSON")) -> None:
    """The paper's tables (3, 9, 10, 12-16, 19, 21 and more) in the terminal, and optionally the HTML report."""
    from server.benchmarks.mpe.report import collect_report, print_report, render_html
    from server.scoring.asr import NO_ASR_NOTE, asr_disabled

    if timelines != "all" and not timelines.isdigit():
        raise typer.BadParameter("--timelines takes a number or 'all'")
    from server.engine.registry import get_benchmark

    db = _db()
    bench = _benchmark_of_refs(db, refs)
    if bench.name != get_benchmark(None).name:  # the Duplex-MPE report below also prints its sources
        if html is not None:
            html.parent.mkdir(parents=True, exist_ok=True)
        quiet = Console(file=io.StringIO())  # --json prints the JSON alone
        data = bench.print_report(db, refs, quiet if as_json else out, html=html,
                                  max_timelines=None if timelines == "all" else int(timelines))
        if as_json:
            print(json.dumps(data))
        if html is not None:
            console.print(f"wrote {html}")
        return
    data = collect_report(db, refs)
    if as_json:
        print(json.dumps({"sources": data.sources, "metrics": data.metrics, "analyses": data.analyses}))
    else:
        print_report(data, out)
    if any(asr_disabled(s.get("config") or {}) for s in data.sources):
        console.print(f"[yellow]note[/yellow]: {NO_ASR_NOTE}")
    if html is not None:
        html.parent.mkdir(parents=True, exist_ok=True)
        html.write_text(render_html(data, max_timelines=None if timelines == "all" else int(timelines)),
                        encoding="utf-8")
        console.print(f"wrote {html}")


@audit_app.command("sample")
def audit_sample(ref: str = typer.Argument(..., metavar="RUN", help="a scored run (or scoring id)"),
                 out_dir: Path = typer.Option(Path("audit"), "--out", help="review directory to write"),
                 per_label: int = typer.Option(5, min=1, help="items per model × condition × task × label"),
                 seed: int = typer.Option(20260902, help="sampling seed")) -> None:
    """Draw a stratified sample of verdicts into a review sheet with the audio clips."""
    from server.scoring.audit import sample

    r = sample(_db(), ref, out_dir, per_label=per_label, seed=seed)
    console.print(f"wrote {r['items']} items from {r['strata']} strata: {r['sheet']} "
                  f"(open {out_dir / 'index.html'} to listen; fill the human_label column)")


@audit_app.command("import")
def audit_import(sheet: Path = typer.Argument(..., help="the filled sheet.csv"),
                 as_json: bool = typer.Option(False, "--json")) -> None:
    """Agreement between the judge and the human labels, per judge and task."""
    from server.scoring.audit import import_sheet

    r = import_sheet(sheet)
    if as_json:
        print(json.dumps(r))
        return
    t = Table(title=f"judge agreement ({r['labeled']} labeled, {r['unlabeled']} unlabeled)", title_justify="left")
    for col in ("judge", "task", "n", "agree", "agreement", "Cohen's kappa"):
        t.add_column(col)
    for g in r["results"]:
        t.add_row(g["judge"], g["task"], str(g["n"]), str(g["agree"]), f"{100 * g['agreement']:.1f}%",
                  "-" if g["kappa"] is None else f"{g['kappa']:.3f}")
    out.print(t)


def register(app: typer.Typer) -> None:
    app.command("score")(score)
    app.command("report")(report)
    app.add_typer(audit_app, name="audit")
