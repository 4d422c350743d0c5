"""The MTR side of ``mpe dataset``: the commands of :mod:`server.cli.dataset`
hand an MTR suite (``"benchmark": "mtr-duplexbench"``) or ``--benchmark mtr-duplexbench``
to these functions."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from server.benchmarks.mtr.dataset.build import build_text_suite
from server.benchmarks.mtr.dataset.builtin import BUILTINS, build_builtin
from server.benchmarks.mtr.dataset.generators import make_generator
from server.benchmarks.mtr.dataset.plan import plan_suite
from server.benchmarks.mtr.suite import AUDIO_PENDING, Suite, check_suite
from server.datasets.console import console
from server.datasets.console import data_dir as _data_dir
from server.datasets.console import progress as _progress

BUILTIN_NAMES: tuple[str, ...] = tuple(BUILTINS)


def generate(*, out: Path, dialogues: int, rounds: int, set_name: str, seed: int, generator: str, no_audio: bool,
             tts: str, name: str | None, model: str | None, workers: int | None, force: bool) -> None:
    """``mpe dataset generate --benchmark mtr-duplexbench``."""
    options: dict = {}
    if generator != "procedural":
        options["data_dir"] = _data_dir()
        if model:
            options["model"] = model
    elif model:
        raise typer.BadParameter("--model applies to --generator claude only")
    gen = make_generator(generator, seed, **options)
    plans = plan_suite(dialogues, rounds, set_name, seed)
    with _progress() as bar:
        task = bar.add_task(f"generating ({gen.name})", total=len(plans))
        suite, what = build_text_suite(out, name=name or out.resolve().name, plans=plans, seed=seed, generator=gen,
                                       engine_name=tts, force=force,
                                       progress=lambda d, n: bar.update(task, completed=d))
    sets = ", ".join(f"{s} {n}" for s, n in _count(p.set for p in plans).items())
    console.print(f"{'wrote' if what == 'written' else 'kept the identical'} MTR suite {out}: {len(plans)} dialogues "
                  f"of {rounds} rounds ({sets})")
    if no_audio:
        console.print(f"audio pending: run [bold]mpe dataset synthesize {out}[/bold]")
        return
    synthesize(out, tts, workers)


def _count(xs) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return out


def synthesize(path: Path, engine: str, workers: int | None) -> None:
    from server.benchmarks.mtr.dataset.synth import synthesize_suite

    with _progress() as bar:
        task = bar.add_task(f"synthesising ({engine})", total=None)
        report = synthesize_suite(path, data_dir=_data_dir(), engine_name=engine, workers=workers,
                                  progress=lambda d, n: bar.update(task, completed=d, total=n))
    console.print(f"{report.clips} clips from {report.jobs} distinct lines: {report.synthesized} synthesised "
                  f"({report.audio_s:.0f} s of audio in {report.synth_wall_s:.1f} s on {report.workers} worker(s)), "
                  f"{report.cached} from the cache")


def validate(path: Path, *, no_audio: bool, as_json: bool) -> None:
    """Every problem as ``PATH/FILE:LINE: DIALOGUE round N: message [rule]``; exit 1 when any."""
    suite = Suite.load(path)
    pending = suite.meta.audio == AUDIO_PENDING
    check_audio = not no_audio and not pending
    problems = check_suite(suite, check_audio=check_audio)
    if as_json:
        print(json.dumps({"suite": str(path), "benchmark": suite.meta.benchmark, "valid": not problems,
                          "audio_checked": check_audio, "errors": [asdict(p) for p in problems]}, indent=2))
    else:
        for p in problems:
            print(f"{path}/{p}")
        if pending and not no_audio:
            console.print("[yellow]note[/yellow]: audio pending (text-only suite); clip checks skipped")
        n = len(suite.dialogues)
        if problems:
            console.print(f"[red]{len(problems)} problem(s)[/red] in {escape(str(path))} ({n} dialogues)")
        else:
            console.print(f"[green]valid[/green]: {escape(str(path))} ({n} dialogues, "
                          f"{sum(len(d.rounds) for d in suite.dialogues)} rounds"
                          f"{', audio checked' if check_audio else ''})")
    if problems:
        raise typer.Exit(1)


def stats(path: Path, *, as_json: bool) -> None:
    from server.benchmarks.mtr.dataset.stats import render_stats, suite_stats

    data = suite_stats(Suite.load(path))
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        render_stats(data, Console(width=max(Console().width, 120)))


def build(name: str, *, audio: bool | None, tts: str, workers: int | None) -> None:
    """``mpe dataset build NAME`` for the MTR built-ins (``audio`` None: the suite's default)."""
    with _progress() as bar:
        task = bar.add_task(f"building {name}", total=None)
        path = build_builtin(name, _data_dir(), engine_name=tts, audio=audio, workers=workers,
                             progress=lambda d, n: bar.update(task, completed=d, total=n))
    print(path)


def import_requests(path: Path, out: Path, fmt: str, *, rounds: int, force: bool) -> None:
    """``mpe dataset import FILE --format advbench|llama-questions|encoding`` (or ``DIR --format
    candor``): every bad line on its own line and exit 1, or a suite."""
    from server.benchmarks.mtr.dataset.importers import ImportProblems, import_set

    try:
        suite = import_set(path, out, fmt, rounds=rounds, force=force)
    except ImportProblems as exc:
        for line in exc.lines:
            print(line)
        console.print(f"[red]{len(exc.lines)} problem(s)[/red] in {escape(str(path))}; nothing imported")
        raise typer.Exit(1) from None
    n = sum(len(d.rounds) for d in suite.dialogues)
    audio = (f"audio pending: run [bold]mpe dataset synthesize {escape(str(out))}[/bold]"
             if suite.meta.audio == AUDIO_PENDING else "clips cut from the recordings")
    console.print(f"[green]imported[/green]: {escape(str(out))} ({len(suite.dialogues)} dialogues, {n} rounds, "
                  f"{audio})")
