"""MTR-DuplexBench's side of ``mpe dataset`` (:class:`server.core.datasets.DatasetTools`): its
``generate`` (``--benchmark mtr-duplexbench``) and ``import`` (``--format advbench|llama-questions|
encoding|candor``) commands with their own options, and the bodies of ``synthesize``, ``validate``,
``stats`` and ``build`` for its suites."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from server.benchmarks.mtr.dataset.build import build_text_suite
from server.benchmarks.mtr.dataset.builtin import BUILTINS, build_builtin
from server.benchmarks.mtr.dataset.generators import make_generator
from server.benchmarks.mtr.dataset.importers import FORMATS
from server.benchmarks.mtr.dataset.plan import plan_suite
from server.benchmarks.mtr.dataset.sets import COMBINE
from server.benchmarks.mtr.suite import AUDIO_PENDING, Suite, check_suite
from server.datasets.console import console, voice_suite
from server.datasets.console import data_dir as _data_dir
from server.datasets.console import errors as _errors
from server.datasets.console import progress as _progress
from server.datasets.errors import DatasetError
from server.datasets.options import EngineName, GeneratorName, default_engine

_FORMAT_TEXT = {"advbench": "an AdvBench CSV of harmful requests (goal,target)",
                "llama-questions": "a Llama Questions file of spoken questions",
                "encoding": "a scenario-encoding JSON",
                "candor": "a folder of two-party recordings and transcripts (docs/mtr.md)",
                "published": "the published dataset layout: scenario encodings and their audio, not re-voiced "
                             "(docs/mtr.md)"}
#: ``mpe dataset import --format``: what MTR-DuplexBench reads (:data:`.importers.FORMATS`)
IMPORT_FORMATS: dict[str, str] = {fmt: _FORMAT_TEXT[fmt] for fmt in FORMATS}

generate_app = typer.Typer(add_completion=False)
import_app = typer.Typer(add_completion=False)


@generate_app.command("generate")
def generate(
    out: Path = typer.Option(..., "--out", help="suite directory to write"),
    dialogues: int = typer.Option(200, min=1, help="dialogues"),
    rounds: int = typer.Option(10, min=1, help="rounds per dialogue"),
    set_name: str = typer.Option("mixed", "--set", help="feature set of every dialogue (smooth, interruption, "
                                 "pause, background, backchannel, S+I, S+I+P, S+I+P+B) or mixed (each set in turn)"),
    seed: int = typer.Option(0, help="random seed (same seed, same suite)"),
    combine: str = typer.Option("overlay", help="combination sets: overlay (a round carries its set's pause and "
                                "background on top of a smooth or interruption turn, as published) or alternate "
                                "(one feature per round)"),
    generator: GeneratorName = typer.Option(GeneratorName.procedural, help="text generator"),
    no_audio: bool = typer.Option(False, "--no-audio", help="write the text suite only (synthesise later)"),
    tts: EngineName = typer.Option(default_engine(), "--tts", help="TTS engine for the voices"),
    name: Optional[str] = typer.Option(None, help="suite name (default: the directory name)"),
    model: Optional[str] = typer.Option(None, help="claude: Claude model"),
    workers: Optional[int] = typer.Option(None, min=1, help="synthesis worker processes (default: CPU cores)"),
    force: bool = typer.Option(False, help="replace a different suite already in --out"),
) -> None:
    """Generate an MTR-DuplexBench suite of dialogues (and synthesise its audio unless --no-audio)."""
    with _errors():
        options: dict[str, object] = {}
        if generator is not GeneratorName.procedural:
            options["data_dir"] = _data_dir()
            if model:
                options["model"] = model
        elif model:
            raise typer.BadParameter("--model applies to --generator claude only")
        gen = make_generator(generator.value, seed, **options)
        if combine not in COMBINE:
            raise typer.BadParameter(f"--combine must be one of {', '.join(COMBINE)}")
        plans = plan_suite(dialogues, rounds, set_name, seed, combine)  # type: ignore[arg-type]
        if combine == "overlay" and generator is not GeneratorName.procedural and any(p.overlays for p in plans):
            raise typer.BadParameter("overlay combination sets are written by --generator procedural; "
                                     "use --combine alternate with this generator")
        with _progress() as bar:
            task = bar.add_task(f"generating ({gen.name})", total=len(plans))
            suite, what = build_text_suite(out, name=name or out.resolve().name, plans=plans, seed=seed,
                                           generator=gen, engine_name=tts.value, force=force,
                                           progress=lambda d, n: bar.update(task, completed=d))
        sets = ", ".join(f"{s} {n}" for s, n in _count(p.set for p in plans).items())
        console.print(f"{'wrote' if what == 'written' else 'kept the identical'} MTR suite {out}: "
                      f"{len(plans)} dialogues of {rounds} rounds ({sets})")
        if no_audio:
            console.print(f"audio pending: run [bold]mpe dataset synthesize {out}[/bold]")
            return
        TOOLS.synthesize(out, tts=tts.value, workers=workers)


@import_app.command("import")
def import_requests(
    source: Path = typer.Argument(..., help="the file to read (--format candor: a folder of recordings and "
                                            "transcripts)"),
    out: Path = typer.Option(..., "--out", help="suite directory to write"),
    fmt: str = typer.Option(..., "--format", help=", ".join(FORMATS)),
    rounds: int = typer.Option(10, help="rounds per dialogue"),
    force: bool = typer.Option(False, help="replace a different suite at --out"),
    audio: str = typer.Option("original", help="--format published: the audio variant (original or woPAUSE)"),
    encoding: Optional[list[str]] = typer.Option(None, help="--format published: an encoding file under "
                                                "Scenarios_encoding/ (repeatable; default: every feature set's)"),
) -> None:
    """Import a published set as an MTR-DuplexBench suite: every bad line on its own line and exit 1."""
    from server.benchmarks.mtr.dataset.importers import ImportProblems, import_set

    with _errors():
        try:
            suite = import_set(source, out, fmt, rounds=rounds, force=force, audio=audio, encodings=encoding)
        except ImportProblems as exc:
            for line in exc.lines:
                print(line)
            console.print(f"[red]{len(exc.lines)} problem(s)[/red] in {escape(str(source))}; nothing imported")
            raise typer.Exit(1) from None
        n = sum(len(d.rounds) for d in suite.dialogues)
        audio = (f"audio pending: run [bold]mpe dataset synthesize {escape(str(out))}[/bold]"
                 if suite.meta.audio == AUDIO_PENDING else "clips cut from the recordings, not re-voiced")
        console.print(f"[green]imported[/green]: {escape(str(out))} ({len(suite.dialogues)} dialogues, {n} rounds, "
                      f"{audio})")


def _count(xs: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return out


class MTRDatasetTools:
    """MTR-DuplexBench's :class:`server.core.datasets.DatasetTools`."""

    builtin_names: tuple[str, ...] = tuple(BUILTINS)
    import_formats: Mapping[str, str] = IMPORT_FORMATS

    def generate_app(self) -> typer.Typer:
        return generate_app

    def import_app(self) -> typer.Typer | None:
        return import_app

    def synthesize(self, path: Path, *, tts: str, workers: int | None) -> None:
        from server.benchmarks.mtr.dataset.synth import synthesize_suite

        voice_suite(synthesize_suite, path, tts=tts, workers=workers)

    def validate(self, path: Path, *, strict: bool, no_audio: bool, as_json: bool) -> bool:
        """Every problem as ``PATH/FILE:LINE: DIALOGUE round N: message [rule]`` (every rule is an
        error: ``strict`` changes nothing)."""
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
        return not problems

    def stats(self, path: Path, *, as_json: bool) -> None:
        from server.benchmarks.mtr.dataset.stats import render_stats, suite_stats

        data = suite_stats(Suite.load(path))
        if as_json:
            print(json.dumps(data, indent=2))
        else:
            render_stats(data, Console(width=max(Console().width, 120)))

    def build(self, name: str, *, audio: bool | None, tts: str, workers: int | None) -> Path:
        with _progress() as bar:
            task = bar.add_task(f"building {name}", total=None)
            return build_builtin(name, _data_dir(), engine_name=tts, audio=audio, workers=workers,
                                 progress=lambda d, n: bar.update(task, completed=d, total=n))

    def rules(self) -> Sequence[tuple[str, str]]:
        return ()  # its validator's rule ids are in each problem line

    def export_text(self, path: Path, out: Path, *, conditions: tuple[str, ...] | None, labels: bool) -> int:
        raise DatasetError("an MTR-DuplexBench suite has no text export (its dialogues are in scenarios.jsonl)")


TOOLS = MTRDatasetTools()
