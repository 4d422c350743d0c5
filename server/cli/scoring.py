"""``mpe score``, ``mpe report``, ``mpe audit``, ``mpe reference`` and ``mpe segment`` (registered into the
main CLI)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from clients.codec import STREAM_RATE

console = Console(stderr=True)
out = Console()  # tables go to stdout
audit_app = typer.Typer(no_args_is_help=True, help="Audit the semantic judge against human labels.")
reference_app = typer.Typer(invoke_without_command=True, help=(
    "The transcript-conditioned text reference (docs/scoring.md): `mpe reference --suite DIR --backend "
    "rule|claude|google:MODEL|openai:MODEL [--grader same|SPEC|judge]` decides every T, N1-N3 and N4Q of the suite "
    "on its script, grades its answers on T, and stores a finished run (score it with `mpe score "
    "RUN`); `mpe reference agreement RUN_A RUN_B` compares two such runs."))


def _db():
    from server.db import Database
    from server.settings import load_settings

    return Database(load_settings().db_url)  # brings the schema to head first


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=console, transient=False)


def score(targets: list[str] = typer.Argument(..., metavar="RUN_ID | BUNDLE_DIR...",
                                              help="a run id, or episode bundle directories (or export directories)"),
          asr: str = typer.Option("faster-whisper", help="faster-whisper[:DIR] | qwen3-asr:DIR | transformers:DIR | none"),
          judge: str = typer.Option("rule", help="rule | rule:fast (speech over the length limits decided on "
                                                 "duration, without ASR: faster) | claude[:MODEL] | "
                                                 "openai:MODEL[@BASE_URL] (openai:gpt-4o: the MTR paper's) | "
                                                 "google:MODEL (docs/llm.md)"),
          rules: Optional[str] = typer.Option(None, "--rules", help=(
              "the benchmark's rule set, for one that has several (MTR-DuplexBench: project, the default, or "
              "published: the published scripts' rules on Whisper word timestamps; docs/mtr.md)")),
          device: Optional[str] = typer.Option(None, help="ASR device: cpu | cuda | cuda:N | auto (default: cpu "
                                                          "for faster-whisper, a GPU when available for transformers)"),
          as_json: bool = typer.Option(False, "--json", help="print one JSON object (metrics, analyses, episodes)"),
          workers: Optional[int] = typer.Option(None, min=1, help="worker processes (default: one per core)"),
          lease_s: Optional[float] = typer.Option(None, "--lease-s", min=0.5,
                                                  help="seconds a killed scorer's episode stays claimed before "
                                                       "another scorer takes it over (renewed every third of it "
                                                       "while scoring; default: MPE_SCORING_LEASE_S, 120)"),
          fresh: bool = typer.Option(False, help="start a new scoring instead of resuming (caches still apply)"),
          status: bool = typer.Option(False, "--status", help="print where the run's scoring with these settings "
                                                              "stands (pending, claimed, done, failed) and exit"),
          suite: Optional[Path] = typer.Option(None, "--suite", exists=True, file_okay=False, help=(
              "score a folder of recordings made elsewhere, named as MTR-DuplexBench publishes them "
              "(dialogue_<N>_round_<R>_<scenario>.wav or turn<K>/<id>.mp3, stereo, left = user), against this "
              "suite (docs/mtr.md)")),
          swap: bool = typer.Option(False, "--swap", help="--suite: the recordings' left channel is the model"),
          index_base: int = typer.Option(1, "--index-base", min=0, max=1, help=(
              "--suite: N in the names is the dialogue's 1-based (or 0-based) position in scenarios.jsonl")),
          model: Optional[str] = typer.Option(None, "--model", help=(
              "--suite: the model's name in the reports (default: the folder's name), shown with '(imported)'")),
          count_moved: bool = typer.Option(False, "--count-moved", help=(
              "--suite: count the rounds whose barge-in, background voice or backchannels the recording has "
              "elsewhere than the live scheduler places them (default: left out of the feature scores, "
              "reported as excluded)"))
          ) -> None:
    """Score a run (or episode bundles, or recordings with --suite): windows, ASR, judges, metrics and analyses
    (DESIGN §6).

    Several `mpe score RUN` (on any machines sharing the database) split the run's episodes:
    each episode is scored once, and one whose scorer died is taken over after --lease-s."""
    from server.scoring.asr import NO_ASR_NOTE, asr_disabled
    from server.scoring.runner import (
        ScoreOptions,
        bundle_jobs,
        run_jobs,
        score_bundles,
        score_run,
        scoring_config,
        scoring_state,
    )

    dirs = [Path(t) for t in targets if Path(t).is_dir()]
    if dirs and len(dirs) != len(targets):
        raise typer.BadParameter("give either one run id or only bundle directories")
    if not dirs and len(targets) != 1:
        raise typer.BadParameter("give one run id (or several bundle directories)")
    if suite is not None and len(dirs) != 1:
        raise typer.BadParameter("--suite scores one folder of recordings")
    if count_moved and suite is None:
        raise typer.BadParameter("--count-moved applies to recordings scored with --suite")
    db = _db()
    if status:
        if dirs:
            raise typer.BadParameter("--status takes a run id")
        state = scoring_state(db, targets[0], asr, judge, rules)
        if state is None:
            raise typer.BadParameter(f"run {targets[0]} has no scoring with these settings yet")
        sid, c = state
        if as_json:
            print(json.dumps({"scoring_id": sid, "claims": c.to_json()}))
        else:
            out.print(f"scoring {sid}: {c.done} done, {c.failed} failed, {c.claimed} claimed, {c.pending} pending "
                      f"of {c.total} ({c.reclaimed} claimed more than once)", highlight=False)
        return
    from server.settings import load_settings

    opts = ScoreOptions(asr=asr, judge=judge, workers=workers, fresh=fresh, device=device, rules=rules,
                        lease_s=lease_s if lease_s is not None else load_settings().scoring_lease_s)
    label = targets[0] if not dirs else f"{len(dirs)} bundle paths"
    if suite is not None:
        label = f"recordings in {dirs[0]}"
    from server.engine.registry import get_benchmark

    if suite is not None:
        from server.benchmarks.mtr import BENCHMARK as mtr
        from server.benchmarks.mtr.imported import score_recordings

        bench_name: str | None = mtr.name
    else:
        jobs = bundle_jobs(dirs) if dirs else run_jobs(db, targets[0])[0]
        bench_name = jobs[0].benchmark if jobs else None
    # unknown or unusable backends, and a rule set the benchmark lacks, fail here, before any work
    scoring_config(asr, judge, get_benchmark(bench_name), device=device, rules=rules)
    try:
        with _progress() as bar:
            task = bar.add_task(f"scoring {label}", total=None)

            def progress(i: int, n: int) -> None:
                bar.update(task, completed=i, total=n)

            if suite is not None:
                res = score_recordings(db, dirs[0], suite, opts, data_dir=load_settings().data_dir, swap=swap,
                                       index_base=index_base, model=model, count_moved=count_moved,
                                       progress=progress)
            else:
                res = score_bundles(db, dirs, opts, progress) if dirs else score_run(db, targets[0], opts, progress)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]: finished episodes are saved; run the same command again to resume")
        raise typer.Exit(130)
    for w in res.warnings:
        console.print(f"[yellow]warning[/yellow]: {w}")
    # a text reference's answers are text: judged without ASR
    if asr_disabled(res.config) and not all(getattr(e, "text_reference", None) for e in res.episodes):
        console.print(f"[yellow]note[/yellow]: {NO_ASR_NOTE}")
    if res.failures:
        for f in res.failures[:20]:
            console.print(f"[red]failed[/red] episode {f['episode_id']}: {f['error']}")
        console.print(f"{len(res.failures)} of {len(res.episodes) + len(res.failures)} episodes could not be scored; "
                      "fix the cause and run the same command again (done episodes are kept)")
    if as_json:
        print(json.dumps(res.to_json()))
    elif not res.failures:
        title = f"scoring {res.scoring_id}" + (f" (rules: {res.config['rules']})" if "rules" in res.config else "")
        get_benchmark(res.config.get("benchmark")).print_tables(res.metrics, out, title=title)
    c = res.calls
    others = len(res.episodes) - res.skipped - res.scored_here
    console.print(f"scoring [bold]{res.scoring_id}[/bold]: {len(res.episodes)} episodes "
                  f"({res.skipped} already done, {res.scored_here} scored here"
                  + (f", {others} by other scorers" if others > 0 else "") + f") in {res.seconds:.1f} s; "
                  f"ASR calls {c.get('asr', 0)} (cached {c.get('asr_hits', 0)}), judge calls {c.get('judge', 0)} "
                  f"(cached {c.get('judge_hits', 0)})")
    _print_llm_usage(res.llm_usage)
    if res.failures:
        raise typer.Exit(1)


def _print_llm_usage(lines=None) -> None:
    """The LLM tokens and estimated cost per provider and model of this run (nothing when none was asked)."""
    from server.llm import RUN_LEDGER, Ledger

    ledger = RUN_LEDGER
    if lines is not None:
        ledger = Ledger()
        ledger.merge(lines)
    for line in ledger.report():
        console.print(f"LLM usage: {line}")


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
    """The paper's tables (3, 9, 10, 12-18, 21, numbered as the paper, then extras) in the terminal, and optionally the HTML report."""
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
        print(json.dumps({"sources": data.sources, "metrics": data.metrics, "analyses": data.analyses,
                          "reference": data.reference}))
    else:
        print_report(data, out)
    if any(asr_disabled(s.get("config") or {}) and not s.get("text_reference") for s in data.sources):
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


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


@reference_app.callback()
def reference(ctx: typer.Context,
              suite: Optional[Path] = typer.Option(None, exists=True, file_okay=False,
                                                   help="suite directory (only its script is read: a text-only "
                                                        "suite will do)"),
              backend: Optional[str] = typer.Option(None, help="rule (a name-detection rule baseline, offline) | "
                                                               "claude[:MODEL] | google:MODEL (Gemini, the paper's) | "
                                                               "openai:MODEL[@BASE_URL] (docs/llm.md)"),
              model_name: Optional[str] = typer.Option(None, help="the run's model name, text-ref:NAME (default: "
                                                                  "text-ref:rule-baseline, or text-ref:MODEL)"),
              conditions: Optional[str] = typer.Option(None, help="comma-separated (default: explicit,implicit)"),
              limit: Optional[int] = typer.Option(None, help="only the first N pairs"),
              team: str = typer.Option("local", help="team that owns the run"),
              repeat: int = typer.Option(0, min=0, help="ask every decision again as a new repetition (another "
                                                        "run for the run-to-run agreement); 0: the first"),
              grader: Optional[str] = typer.Option(None, help="who grades the answers on T: same (the reference's "
                                                             "own LLM: the default for an LLM backend, as the paper "
                                                             "grades) | an LLM spec | judge (mpe score's --judge: the "
                                                             "default for rule)"),
              concurrency: int = typer.Option(4, min=1, help="an LLM backend: requests in flight"),
              max_retries: int = typer.Option(4, min=0, help="an LLM backend: retries of a rate-limited or failed request "
                                                             "(the SDK's, honouring retry-after)"),
              as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Decide a suite with the text reference and store it as a finished run; print its id."""
    if ctx.invoked_subcommand is not None:
        return
    if suite is None or backend is None:
        raise typer.BadParameter("give --suite DIR and --backend rule|claude[:MODEL] (or a command: agreement)")
    from server.benchmarks.mpe.textref.backends import make_reference_backend
    from server.benchmarks.mpe.textref.grading import make_grader
    from server.benchmarks.mpe.textref.runs import create_reference_run

    ref = make_reference_backend(backend, max_retries=max_retries)
    grading = make_grader(grader, ref, max_retries=max_retries)
    db = _db()
    try:
        with _progress() as bar:
            task = bar.add_task(f"deciding ({ref.name})", total=None)
            made = create_reference_run(db, suite_path=str(suite), backend=ref, model_name=model_name,
                                        conditions=[c.strip() for c in conditions.split(",") if c.strip()]
                                        if conditions else None, limit=limit, team=team, repeat=repeat,
                                        concurrency=concurrency if ref.name != "rule" else 1,
                                        progress=lambda i, n: bar.update(task, completed=i, total=n),
                                        grader=grading)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]: answered decisions are cached; run the same command again")
        raise typer.Exit(130)
    if as_json:
        print(json.dumps(made.to_json()))
    else:
        print(made.run_id)
    t = Table(title=f"{made.model}: {made.episodes} scenario versions, {made.decisions} decisions ({made.queries} "
                    f"distinct queries: {made.asked} asked, {made.cached} cached)", title_justify="left")
    for col in ("type", "decisions", "RESPOND", "unparseable"):
        t.add_column(col, justify="left" if col == "type" else "right")
    for lab, c in made.by_label.items():
        t.add_row(lab, str(c["n"]), _pct(c["respond"] / c["n"] if c["n"] else None), str(c["unparseable"]))
    console.print(t)
    g = made.grading
    if g is None:
        console.print("answers on T: graded by mpe score's --judge (no grading call)")
    else:
        console.print(f"answers on T graded by {g.grader} ({g.prompt_version}): {g.answers} answers, {g.correct} "
                      f"correct, {g.incorrect} incorrect, {g.unparseable} unparseable (counted incorrect); "
                      f"{g.asked} asked, {g.cached} cached", highlight=False)
    _print_llm_usage()
    console.print(f"score it with: mpe score {made.run_id}   then: mpe report SPEECH_RUN... {made.run_id}")


@reference_app.command("agreement")
def reference_agreement(run_a: str = typer.Argument(..., help="a text reference run"),
                        run_b: str = typer.Argument(..., help="another text reference run of the same suite"),
                        as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Run-to-run agreement of two text reference runs: overall, by condition, by utterance type and addressee."""
    from server.benchmarks.mpe.tables import ADDRESSEE_TITLES
    from server.benchmarks.mpe.textref.runs import agreement, load_decisions

    db = _db()
    r = agreement(load_decisions(db, run_a), load_decisions(db, run_b))
    if as_json:
        print(json.dumps(r))
        return
    pub = r["published"]
    kappa = "–" if r["kappa"] is None else f"{r['kappa']:.3f}"
    out.print(f"[bold]{run_a} vs {run_b}[/bold]: {r['agree']}/{r['n']} decisions alike ({_pct(r['agreement'])}), "
              f"Cohen's kappa {kappa}; only in one run: {r['only_a']} / {r['only_b']}; unparseable: "
              f"{r['unparseable']['a']} / {r['unparseable']['b']}. The paper: {_pct(pub['agreement'])} of "
              f"{pub['decisions']:,} decisions.", highlight=False, soft_wrap=True)
    t = Table(title="agreement by utterance type and addressee", title_justify="left")
    for col in ("type", "addressee", "decisions", "alike", "agreement"):
        t.add_column(col, justify="left" if col in ("type", "addressee") else "right")
    for cond, c in r["by_condition"].items():
        t.add_row(f"all ({cond})", "", str(c["n"]), str(c["agree"]), _pct(c["agreement"]))
    for lab, c in r["by_label"].items():
        t.add_row(lab, "all", str(c["n"]), str(c["agree"]), _pct(c["agreement"]))
        for kind, k in r["by_addressee"][lab].items():
            t.add_row("", ADDRESSEE_TITLES.get(kind, kind), str(k["n"]), str(k["agree"]), _pct(k["agreement"]))
    out.print(t)
    if r["changes"]:
        out.print("changed decisions (A->B): " + ", ".join(f"{k} {v}" for k, v in r["changes"].items()),
                  highlight=False, soft_wrap=True)


def segment(inputs: list[Path] = typer.Argument(..., metavar="INPUT...", help=(
                "a stereo audio file (left = user, right = model), two mono files USER MODEL, or an episode "
                "bundle directory")),
            backend: str = typer.Option("offline", help="offline (rules on the speech segments) | claude[:MODEL] "
                                                        "| openai:gpt-4o (the paper's) | google:MODEL (docs/llm.md)"),
            n: int = typer.Option(6, "--n", min=1, help="proposals voted on (the paper: 6)"),
            min_support: Optional[int] = typer.Option(None, min=1, help=(
                "runs a turn needs to be kept (default: a strict majority of the usable runs; 2 is the published "
                "companion code's rule)")),
            swap: bool = typer.Option(False, "--swap", help="audio files: the model first (stereo: left = model)"),
            asr: str = typer.Option("none", help="transcribe the speech segments for the prompt: none | "
                                                 "faster-whisper[:DIR] | qwen3-asr:DIR | transformers:DIR"),
            out_file: Optional[Path] = typer.Option(None, "--out", help="write the JSON here (default: print it)"),
            max_retries: int = typer.Option(4, min=0, help="an LLM backend: retries of a rate-limited or failed "
                                                            "request")) -> None:
    """Segment a two-channel recording into user turns and response windows (docs/segmentation.md)."""
    from server.benchmarks.mtr.segmentation.backends import make_proposer
    from server.benchmarks.mtr.segmentation.inputs import read_recording, recording_input
    from server.benchmarks.mtr.segmentation.segment import segment as run_segment
    from server.files import atomic_write_bytes
    from server.scoring.asr import make_asr
    from server.scoring.errors import BadRecording
    from server.settings import load_settings

    if out_file is not None and any(out_file.resolve() == p.resolve() for p in inputs):
        raise BadRecording(f"--out {out_file} is one of the inputs; inputs are never written")
    cache = load_settings().data_dir / "llm-cache" / "segment"
    proposer = make_proposer(backend, cache_dir=cache, max_retries=max_retries)
    asr_backend = make_asr(asr)
    rec = read_recording(inputs, swap=swap)
    console.print(f"detecting speech ({len(rec.user) / STREAM_RATE:.1f} s, two channels)"
                  + (f", transcribing with {asr}" if asr_backend.enabled else ""))
    inp = recording_input(rec, asr=asr_backend)
    with _progress() as bar:
        task = bar.add_task(f"proposals ({proposer.name})", total=n)
        res = run_segment(inp, proposer, n=n, min_support=min_support,
                          progress=lambda i, total: bar.update(task, completed=i, total=total))
    doc = res.model_dump_json(indent=2)
    if out_file is not None:
        atomic_write_bytes(out_file, doc.encode())
        console.print(f"wrote {out_file}")
    else:
        print(doc)
    t = Table(title=f"{len(res.turns)} user turns ({res.usable} of {res.n} proposals usable, kept with at least "
                    f"{res.min_support}; {len(res.dropped)} dropped)", title_justify="left")
    for col in ("turn", "start s", "end s", "window s", "support"):
        t.add_column(col, justify="right")
    for turn, w in zip(res.turns, res.windows):
        t.add_row(str(turn.index), f"{turn.start_s:.2f}", f"{turn.end_s:.2f}", f"{w.start_s:.2f}-{w.end_s:.2f}",
                  f"{turn.votes.support}/{res.usable}")
    console.print(t)
    _print_llm_usage()


def register(app: typer.Typer) -> None:
    app.command("score")(score)
    app.command("report")(report)
    app.add_typer(audit_app, name="audit")
    app.add_typer(reference_app, name="reference")
    app.command("segment")(segment)
