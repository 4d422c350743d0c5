"""Duplex-MPE's side of ``mpe dataset`` (:class:`server.core.datasets.DatasetTools`): its ``generate``
and ``import`` commands with their own options, and the bodies of ``synthesize``, ``validate``,
``stats``, ``build``, ``rules`` and ``export-text`` for its suites."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from server.benchmarks.mpe.dataset.builtin import BUILTINS, build_builtin
from server.benchmarks.mpe.dataset.phrases import TurnLength
from server.datasets.console import console, voice_suite
from server.datasets.console import data_dir as _data_dir
from server.datasets.console import errors as _errors
from server.datasets.console import progress as _progress
from server.datasets.options import EngineName, GeneratorName, default_engine

#: ``mpe dataset import --format``: what Duplex-MPE reads
IMPORT_FORMATS: dict[str, str] = {"manifest": "an external manifest, JSONL or CSV (clip paths relative to it), "
                                              "fields mapped by --mapping (docs/scenarios.md)"}

generate_app = typer.Typer(add_completion=False)
import_app = typer.Typer(add_completion=False)


def _load(path: Path):
    from server.benchmarks.mpe.suite import Suite

    return Suite.load(path)


@generate_app.command("generate")
def generate(
    out: Path = typer.Option(..., "--out", help="suite directory to write"),
    pairs: int = typer.Option(2000, min=1, help="scenario pairs (each gives an explicit and an implicit version)"),
    seed: int = typer.Option(0, help="random seed (same seed, same suite)"),
    generator: GeneratorName = typer.Option(GeneratorName.procedural, help="script generator"),
    no_audio: bool = typer.Option(False, "--no-audio", help="write the text suite only (synthesise later)"),
    tts: EngineName = typer.Option(default_engine(), "--tts", help="TTS engine for the voices"),
    name: Optional[str] = typer.Option(None, help="suite name (default: the directory name)"),
    four_speaker_share: float = typer.Option(0.25, help="share of pairs with four humans"),
    n4_share: float = typer.Option(0.484, help="share of pairs with an N4 event"),
    model: Optional[str] = typer.Option(None, help="anthropic: Claude model"),
    turn_length: TurnLength = typer.Option(
        TurnLength.paper, "--turn-length",
        help="procedural: paper (multi-sentence turns sized to the paper's durations) or short (one line per turn)"),
    workers: Optional[int] = typer.Option(None, min=1, help="synthesis worker processes (default: CPU cores)"),
    version_differences: bool = typer.Option(
        True, "--version-differences/--equal-versions",
        help="let some pairs' versions differ beyond T at the paper's rates (docs/scenarios.md)"),
    preamble_pace: str = typer.Option("paper", "--preamble-pace", help=(
        "paper: the preamble voice reads the duty at the paper's length (31.9 s); voice: at the speaker's own "
        "rate (the built-in suites' preamble)")),
    force: bool = typer.Option(False, help="replace a different suite already in --out"),
) -> None:
    """Generate a Duplex-MPE suite of scenario pairs (and synthesise its audio unless --no-audio)."""
    from server.benchmarks.mpe.dataset.build import PreamblePace, build_text_suite, make_generator
    from server.benchmarks.mpe.dataset.compose import Composition

    with _errors():
        if preamble_pace not in {p.value for p in PreamblePace}:
            raise typer.BadParameter(f"--preamble-pace is paper or voice, not {preamble_pace!r}")
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
        composition = Composition.from_shares(pairs, four_speaker_share=four_speaker_share, n4_share=n4_share,
                                              version_differences=version_differences
                                              and generator is GeneratorName.procedural)
        with _progress() as bar:
            task = bar.add_task(f"generating ({generator.value})", total=pairs)
            suite, what = build_text_suite(out, name=name or out.resolve().name, pairs=pairs, seed=seed,
                                           generator=gen, composition=composition, engine_name=tts.value,
                                           force=force, progress=lambda d, n: bar.update(task, completed=d),
                                           pace=PreamblePace(preamble_pace))
        c = composition
        console.print(f"{'wrote' if what == 'written' else 'kept the identical'} suite {out}: {pairs} pairs "
                      f"({pairs - c.four_speaker} three-human, {c.four_speaker} four-human; T buckets "
                      f"{' / '.join(str(v) for v in c.buckets.values())}; {c.n4} with N4 events, {c.n4_events} in all)")
        if no_audio:
            console.print(f"audio pending: run [bold]mpe dataset synthesize {out}[/bold]")
            return
        TOOLS.synthesize(out, tts=tts.value, workers=workers)


@import_app.command("import")
def import_manifest_cmd(
    manifest: Path = typer.Argument(..., help="external manifest: JSONL or CSV (clip paths relative to it)"),
    out: Path = typer.Option(..., "--out", help="suite directory to write"),
    mapping: Optional[Path] = typer.Option(None, "--mapping", help="JSON field/label mapping (docs/scenarios.md)"),
    fmt: str = typer.Option("manifest", "--format", help="manifest (the only one Duplex-MPE reads)"),
) -> None:
    """Import an external manifest as a Duplex-MPE suite; exit 1 naming each problem (manifest row, rule)."""
    from server.benchmarks.mpe.dataset.importer import import_manifest, load_mapping

    with _errors():
        if fmt not in IMPORT_FORMATS:
            raise typer.BadParameter(f"Duplex-MPE reads {', '.join(IMPORT_FORMATS)}, not {fmt!r}")
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


class MPEDatasetTools:
    """Duplex-MPE's :class:`server.core.datasets.DatasetTools`."""

    builtin_names: tuple[str, ...] = tuple(BUILTINS)
    import_formats: Mapping[str, str] = IMPORT_FORMATS

    def generate_app(self) -> typer.Typer:
        return generate_app

    def import_app(self) -> typer.Typer | None:
        return import_app

    def synthesize(self, path: Path, *, tts: str, workers: int | None) -> None:
        from server.benchmarks.mpe.dataset.synth import synthesize_suite

        voice_suite(synthesize_suite, path, tts=tts, workers=workers)

    def validate(self, path: Path, *, strict: bool, no_audio: bool, as_json: bool) -> bool:
        from server.benchmarks.mpe.suite import CONSTRUCTION_RULES, audio_pending, check_suite

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
        return not errors

    def stats(self, path: Path, *, as_json: bool) -> None:
        from server.benchmarks.mpe.dataset.stats import render_stats, suite_stats

        data = suite_stats(_load(path))
        if as_json:
            print(json.dumps(data, indent=2))
        else:
            render_stats(data, Console(width=max(Console().width, 120)))

    def build(self, name: str, *, audio: bool | None, tts: str, workers: int | None) -> Path:
        with _progress() as bar:
            task = bar.add_task(f"building {name}", total=None)
            return build_builtin(name, _data_dir(), engine_name=tts, audio=audio is not False, workers=workers,
                                 progress=lambda d, n: bar.update(task, completed=d, total=n))

    def rules(self) -> Sequence[tuple[str, str]]:
        from server.benchmarks.mpe.dataset.rules import SCRIPT_RULES
        from server.benchmarks.mpe.suite import CONSTRUCTION_RULES, RULES

        return ([(rid, f"{text}{' (strict)' if rid in CONSTRUCTION_RULES else ''}") for rid, text in RULES.items()]
                + [(rid, f"{text} (generated scripts)") for rid, text in SCRIPT_RULES.items()])

    def export_text(self, path: Path, out: Path, *, conditions: tuple[str, ...] | None, labels: bool) -> int:
        from server.benchmarks.mpe.dataset.textexport import export_text
        from server.benchmarks.mpe.suite import CONDITIONS

        return export_text(_load(path), out, conditions=conditions or CONDITIONS, labels=labels)


TOOLS = MPEDatasetTools()
