"""``mpe dataset``: generate, synthesise, validate, report on and export scenario suites."""

from __future__ import annotations

import importlib
import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from server.benchmarks.mpe.dataset.phrases import TurnLength
from server.datasets.console import console
from server.datasets.console import data_dir as _data_dir
from server.datasets.console import errors as _errors
from server.datasets.console import progress as _progress
from server.engine.registry import plugins
from server.tts import preferred_engine

dataset_app = typer.Typer(no_args_is_help=True, help="Scenario suites: generate, synthesize, validate, stats, export.")


class GeneratorName(str, Enum):
    procedural = "procedural"
    anthropic = "anthropic"
    claude = "claude"  # the same as anthropic


class EngineName(str, Enum):
    piper = "piper"
    espeak = "espeak"
    kokoro = "kokoro"


class ConditionChoice(str, Enum):
    both = "both"
    explicit = "explicit"
    implicit = "implicit"


def _tools(benchmark: str):
    """The module with another benchmark's side of these commands (``generate``, ``synthesize``,
    ``validate``, ``stats``, ``build`` and ``BUILTIN_NAMES``: its ``Benchmark.dataset_cli``), imported
    by name like the registry's plug-ins; None for Duplex-MPE (the commands below)."""
    from server.engine.registry import get_benchmark

    module = get_benchmark(benchmark).dataset_cli
    return importlib.import_module(module) if module else None


def _suite_tools(path: Path):
    """The commands of the benchmark the suite at ``path`` names (None: Duplex-MPE's, below)."""
    from server.engine.registry import benchmark_name_of_suite

    return _tools(benchmark_name_of_suite(path))


def _load(path: Path):
    from server.benchmarks.mpe.suite import Suite

    return Suite.load(path)


def _synthesize(path: Path, engine: str, workers: Optional[int]) -> None:
    from server.benchmarks.mpe.dataset.synth import synthesize_suite

    with _progress() as bar:
        task = bar.add_task(f"synthesising ({engine})", total=None)
        report = synthesize_suite(path, data_dir=_data_dir(), engine_name=engine, workers=workers,
                                  progress=lambda d, n: bar.update(task, completed=d, total=n))
    speed = f", {report.speed:.1f} audio s per wall s" if report.speed else ""
    console.print(f"{report.clips} clips from {report.jobs} distinct lines: {report.synthesized} synthesised "
                  f"({report.audio_s:.0f} s of audio in {report.synth_wall_s:.1f} s on {report.workers} "
                  f"worker(s){speed}), {report.cached} from the cache")


@dataset_app.command("generate")
def generate(
    out: Path = typer.Option(..., "--out", help="suite directory to write"),
    pairs: int = typer.Option(2000, min=1, help="scenario pairs (each gives an explicit and an implicit version)"),
    seed: int = typer.Option(0, help="random seed (same seed, same suite)"),
    generator: GeneratorName = typer.Option(GeneratorName.procedural, help="script generator"),
    no_audio: bool = typer.Option(False, "--no-audio", help="write the text suite only (synthesise later)"),
    tts: EngineName = typer.Option(EngineName(preferred_engine()), "--tts", help="TTS engine for the voices"),
    name: Optional[str] = typer.Option(None, help="suite name (default: the directory name)"),
    four_speaker_share: float = typer.Option(0.25, help="share of pairs with four humans"),
    n4_share: float = typer.Option(0.484, help="share of pairs with an N4 event"),
    model: Optional[str] = typer.Option(None, help="anthropic: Claude model"),
    turn_length: TurnLength = typer.Option(
        TurnLength.paper, "--turn-length",
        help="procedural: paper (multi-sentence turns sized to the paper's durations) or short (one line per turn)"),
    workers: Optional[int] = typer.Option(None, min=1, help="synthesis worker processes (default: CPU cores)"),
    force: bool = typer.Option(False, help="replace a different suite already in --out"),
    benchmark: str = typer.Option("duplex-mpe", help="benchmark of the suite: duplex-mpe or mtr-duplexbench"),
    dialogues: int = typer.Option(200, min=1, help="mtr-duplexbench: dialogues"),
    rounds: int = typer.Option(10, min=1, help="mtr-duplexbench: rounds per dialogue"),
    feature_set: str = typer.Option("mixed", "--set", help="mtr-duplexbench: feature set of every dialogue "
                                    "(smooth, interruption, pause, background, backchannel, S+I, S+I+P, S+I+P+B) "
                                    "or mixed (each set in turn)"),
) -> None:
    """Generate a suite of scenario pairs, or of MTR dialogues (and synthesise its audio unless --no-audio)."""
    from server.benchmarks.mpe.dataset.build import build_text_suite, make_generator
    from server.benchmarks.mpe.dataset.compose import Composition

    with _errors():
        if benchmark != "duplex-mpe":
            tools = _tools(benchmark)
            if tools is None:
                raise typer.BadParameter(f"benchmark {benchmark!r} has no suite generator")
            tools.generate(out=out, dialogues=dialogues, rounds=rounds, set_name=feature_set, seed=seed,
                           generator=generator.value, no_audio=no_audio, tts=tts.value, name=name, model=model,
                           workers=workers, force=force)
            return
        if generator is GeneratorName.claude:
            generator = GeneratorName.anthropic
        options = {}
        if generator is GeneratorName.anthropic:
            options["data_dir"] = _data_dir()
            if model:
                options["model"] = model
        elif model:
            raise typer.BadParameter("--model applies to --generator anthropic only")
        else:
            options["turn_length"] = turn_length.value
        if generator is GeneratorName.anthropic and turn_length is not TurnLength.paper:
            raise typer.BadParameter("--turn-length applies to --generator procedural only")
        gen = make_generator(generator.value, seed, **options)
        composition = Composition.from_shares(pairs, four_speaker_share=four_speaker_share, n4_share=n4_share)
        with _progress() as bar:
            task = bar.add_task(f"generating ({generator.value})", total=pairs)
            suite, what = build_text_suite(out, name=name or out.resolve().name, pairs=pairs, seed=seed,
                                           generator=gen, composition=composition, engine_name=tts.value,
                                           force=force, progress=lambda d, n: bar.update(task, completed=d))
        c = composition
        console.print(f"{'wrote' if what == 'written' else 'kept the identical'} suite {out}: {pairs} pairs "
                      f"({pairs - c.four_speaker} three-human, {c.four_speaker} four-human; T buckets "
                      f"{' / '.join(str(v) for v in c.buckets.values())}; {c.n4} with N4 events, {c.n4_events} in all)")
        if no_audio:
            console.print(f"audio pending: run [bold]mpe dataset synthesize {out}[/bold]")
            return
        _synthesize(out, tts.value, workers)


@dataset_app.command("synthesize")
def synthesize(
    path: Path = typer.Argument(..., help="suite directory"),
    tts: EngineName = typer.Option(EngineName(preferred_engine()), "--tts", help="TTS engine"),
    workers: Optional[int] = typer.Option(None, min=1, help="worker processes (default: CPU cores)"),
) -> None:
    """Synthesise every clip of a suite (parallel, cached, resumable)."""
    with _errors():
        if (tools := _suite_tools(path)) is not None:
            return tools.synthesize(path, tts.value, workers)
        _synthesize(path, tts.value, workers)


@dataset_app.command("validate")
def validate(
    path: Path = typer.Argument(..., help="suite directory"),
    strict: bool = typer.Option(False, help="also enforce the construction rules (addressing, buckets, mentions)"),
    no_audio: bool = typer.Option(False, "--no-audio", help="skip the clip checks"),
    as_json: bool = typer.Option(False, "--json", help="print problems as JSON"),
) -> None:
    """Check a suite against every rule; exit 1 naming each violation (file, scenario, turn, rule)."""
    from server.benchmarks.mpe.suite import CONSTRUCTION_RULES, audio_pending, check_suite

    with _errors():
        if (tools := _suite_tools(path)) is not None:
            return tools.validate(path, no_audio=no_audio, as_json=as_json)
        suite = _load(path)
        pending = audio_pending(suite.meta)
        check_audio = not no_audio and not pending
        problems = check_suite(suite, check_audio=check_audio, strict=True)
        errors = [p for p in problems if strict or p.rule not in CONSTRUCTION_RULES]
        warnings = [p for p in problems if not strict and p.rule in CONSTRUCTION_RULES]
        if as_json:
            print(json.dumps({"suite": str(path), "valid": not errors, "audio_checked": check_audio,
                              "errors": [p.to_dict() for p in errors],
                              "warnings": [p.to_dict() for p in warnings]}, indent=2))
        else:
            for p in errors:
                print(f"{path}/{p}")
            for p in warnings:
                console.print(f"[yellow]warning[/yellow] {escape(f'{path}/{p}')}", highlight=False)
            if pending and not no_audio:
                console.print("[yellow]note[/yellow]: audio pending (text-only suite); clip checks skipped")
            n_sc = len(suite.scenarios)
            if errors:
                console.print(f"[red]{len(errors)} problem(s)[/red] in {path} ({n_sc} scenario versions)")
            else:
                console.print(f"[green]valid[/green]: {path} ({n_sc} scenario versions"
                              f"{', audio checked' if check_audio else ''}"
                              f"{f', {len(warnings)} construction warning(s)' if warnings else ''})")
        if errors:
            raise typer.Exit(1)


@dataset_app.command("rules")
def rules() -> None:
    """List every rule id that validate can report."""
    from server.benchmarks.mpe.dataset.rules import SCRIPT_RULES
    from server.benchmarks.mpe.suite import CONSTRUCTION_RULES, RULES

    for rid, text in RULES.items():
        tag = " (strict)" if rid in CONSTRUCTION_RULES else ""
        print(f"{rid:22s} {text}{tag}")
    for rid, text in SCRIPT_RULES.items():
        print(f"{rid:22s} {text} (generated scripts)")


@dataset_app.command("stats")
def stats(
    path: Path = typer.Argument(..., help="suite directory"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Composition and duration tables of a suite."""
    from server.benchmarks.mpe.dataset.stats import render_stats, suite_stats

    with _errors():
        if (tools := _suite_tools(path)) is not None:
            return tools.stats(path, as_json=as_json)
        data = suite_stats(_load(path))
        if as_json:
            print(json.dumps(data, indent=2))
        else:
            render_stats(data, Console(width=max(Console().width, 120)))


@dataset_app.command("import")
def import_cmd(
    manifest: Path = typer.Argument(..., help="external manifest: JSONL or CSV (clip paths relative to it); "
                                              "--format candor: a folder of recordings and transcripts"),
    out: Path = typer.Option(..., "--out", help="suite directory to write"),
    mapping: Optional[Path] = typer.Option(None, "--mapping", help="JSON field/label mapping (docs/scenarios.md)"),
    fmt: str = typer.Option("manifest", "--format", help="manifest (Duplex-MPE, above), or an MTR-DuplexBench "
                                                         "file: advbench, llama-questions, encoding (a scenario-encoding JSON), "
                                                         "candor (two-party recordings; docs/mtr.md)"),
    rounds: int = typer.Option(10, help="MTR formats: rounds per dialogue"),
    force: bool = typer.Option(False, help="MTR formats: replace a different suite at --out"),
) -> None:
    """Import an external manifest as a suite; exit 1 naming each problem (manifest row, rule)."""
    from server.benchmarks.mpe.dataset.importer import import_manifest, load_mapping

    if fmt != "manifest":
        with _errors():
            _tools("mtr-duplexbench").import_requests(manifest, out, fmt, rounds=rounds, force=force)
        return
    with _errors():
        result = import_manifest(manifest, out, load_mapping(mapping))
        for p in result.problems:
            print(f"{manifest.parent}/{p}")
        if result.problems:
            console.print(f"[red]{len(result.problems)} problem(s)[/red] in {manifest}"
                          f"{'' if result.suite is not None else '; nothing imported'}")
            raise typer.Exit(1)
        assert result.suite is not None
        console.print(f"[green]imported[/green]: {out} ({len(result.suite.scenarios)} scenario versions, "
                      "audio checked)")


@dataset_app.command("export-text")
def export_text_cmd(
    path: Path = typer.Argument(..., help="suite directory"),
    out: Path = typer.Option(..., "--out", help="JSONL file to write"),
    condition: ConditionChoice = typer.Option(ConditionChoice.both, help="which condition(s)"),
    labels: bool = typer.Option(True, help="keep turn labels and addressees"),
) -> None:
    """Export speaker-attributed transcripts as JSONL for text-only evaluation."""
    from server.benchmarks.mpe.dataset.textexport import export_text

    with _errors():
        conds = ("explicit", "implicit") if condition is ConditionChoice.both else (condition.value,)
        n = export_text(_load(path), out, conditions=conds, labels=labels)
        console.print(f"wrote {n} transcripts to {out}")


@dataset_app.command("build")
def build(
    name: str = typer.Argument(..., help="built-in suite: mini, full, mtr-mini or mtr-features"),
    audio: Optional[bool] = typer.Option(None, "--audio/--no-audio",
                                         help="voice it or text only (default: voiced, except mtr-features)"),
    tts: EngineName = typer.Option(EngineName(preferred_engine()), "--tts", help="TTS engine"),
    workers: Optional[int] = typer.Option(None, min=1, help="synthesis worker processes"),
) -> None:
    """Build (or reuse) a built-in suite under the data directory and print its path."""
    from server.benchmarks.mpe.dataset.builtin import build_builtin

    with _errors():
        for benchmark in plugins():
            if (tools := _tools(benchmark)) is not None and name in tools.BUILTIN_NAMES:
                return tools.build(name, audio=audio, tts=tts.value, workers=workers)
        with _progress() as bar:
            task = bar.add_task(f"building {name}", total=None)
            path = build_builtin(name, _data_dir(), engine_name=tts.value, audio=audio is not False, workers=workers,
                                 progress=lambda d, n: bar.update(task, completed=d, total=n))
        print(path)


if __name__ == "__main__":  # pragma: no cover
    dataset_app()
    sys.exit(0)
