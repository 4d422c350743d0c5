"""``mpe dataset``: generate, synthesise, validate, report on, import and export scenario suites.

This module names no benchmark. It picks one and hands it the command
(:class:`server.core.datasets.DatasetTools`, from :meth:`server.core.benchmark.Benchmark.dataset_tools`):
``generate`` by ``--benchmark`` (the registry's default when absent), ``import`` by the benchmark that
reads ``--format``, ``build`` by the one that ships the named suite, and ``synthesize``, ``validate``,
``stats`` and ``export-text`` by the suite's own ``suite.json``. ``generate`` and ``import`` take the
benchmark's own options: everything but the selector goes, as typed, to that benchmark's command.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Optional

import typer

from server.core.datasets import DatasetTools
from server.datasets.console import console
from server.datasets.console import errors as _errors
from server.datasets.console import fail as _fail
from server.datasets.errors import DatasetError
from server.datasets.options import EngineName, default_engine
from server.engine.registry import DEFAULT, benchmark_name_of_suite, get_benchmark, plugins

dataset_app = typer.Typer(no_args_is_help=True, help="Scenario suites: generate, synthesize, validate, stats, export.")

#: a command that reads its selector and hands every other argument, as typed, to a benchmark's command
_FORWARDS = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
#: "every condition" for ``export-text --condition``
ALL_CONDITIONS = "both"


def _tools(benchmark: str) -> DatasetTools:
    tools = get_benchmark(benchmark).dataset_tools()
    if tools is None:
        raise DatasetError(f"benchmark {benchmark!r} has no dataset tools (its suites are made elsewhere)")
    return tools


def _every_tools() -> list[tuple[str, DatasetTools]]:
    """(name, tools) of every registered benchmark that has dataset tools, the default first."""
    names = sorted(plugins(), key=lambda n: (n != DEFAULT, n))
    return [(n, t) for n in names if (t := get_benchmark(n).dataset_tools()) is not None]


def _suite_tools(path: Path) -> DatasetTools:
    """The tools of the benchmark the suite at ``path`` names."""
    return _tools(benchmark_name_of_suite(path))


def _options(app: typer.Typer) -> dict[str, bool]:
    """The options of ``app``'s one command: name -> whether it takes a value."""
    return {opt: not (p.is_flag or p.count) for p in typer.main.get_command(app).params
            if p.param_type_name == "option" for opt in (*p.opts, *p.secondary_opts)}


def foreign_option(args: Sequence[str], options: Mapping[str, bool]) -> str | None:
    """The first option in ``args`` that is not one of ``options`` (name -> takes a value), if any."""
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            return None
        if not arg.startswith("-") or arg == "-" or arg.lstrip("-").replace(".", "", 1).isdigit():
            continue
        name, eq, _ = arg.partition("=")
        if name not in options:
            return name
        if options[name] and not eq:
            next(rest, None)  # its value
    return None


def _forward(ctx: typer.Context, app: typer.Typer, args: Sequence[str], *, via: str,
             others: Callable[[], list[tuple[str, typer.Typer]]]) -> None:
    """Run ``app``'s one command on ``args`` as ``mpe dataset COMMAND VIA ...``. An option it lacks is
    one line and exit 2 that names the selector taking it (``others``: (selector, app) of the rest)."""
    where = f"{ctx.command_path} {via}"
    if (name := foreign_option(args, {"--help": False, **_options(app)})) is not None:
        owners = [sel for sel, other in others() if name in _options(other)]
        if owners:
            _fail("usage", f"{name} is not an option of `{where}`; it is one of `{ctx.command_path} {owners[0]}`")
        _fail("usage", f"no such option {name} for `{where}` (`{where} --help` lists them)")
    command = typer.main.get_command(app)
    with command.make_context(via, list(args), parent=ctx, help_option_names=["--help"]) as sub:
        command.invoke(sub)


@dataset_app.command("generate", context_settings=_FORWARDS)
def generate(
    ctx: typer.Context,
    benchmark: Optional[str] = typer.Option(None, "--benchmark", show_default=DEFAULT,
                                            help="benchmark of the suite; every other option is its own"),
    show_help: bool = typer.Option(False, "--help", help="this help; after --benchmark NAME, that benchmark's "
                                                         "options"),
) -> None:
    """Generate a suite of the benchmark's scenarios (and synthesise its audio unless --no-audio).

    Every option but --benchmark is the benchmark's own: `mpe dataset generate --benchmark NAME --help`
    lists them (without --benchmark, the default benchmark's options apply).
    """
    if show_help and benchmark is None:
        _help(ctx, [f"  --benchmark {n} --help" + (" (the default)" if n == DEFAULT else "")
                    for n, _ in _every_tools()], "the options of each benchmark:")
        return
    name = benchmark or DEFAULT
    with _errors():
        app = _tools(name).generate_app()
    _forward(ctx, app, ["--help"] * show_help + ctx.args, via=f"--benchmark {name}",
             others=lambda: [(f"--benchmark {n}", t.generate_app()) for n, t in _every_tools() if n != name])


def _help(ctx: typer.Context, lines: list[str], title: str) -> None:
    text = ctx.get_help()  # typer's rich help prints itself and returns ""
    if text:
        typer.echo(text)
    typer.echo(f"\n{title}")
    for line in lines:
        typer.echo(line)


@dataset_app.command("synthesize")
def synthesize(
    path: Path = typer.Argument(..., help="suite directory"),
    tts: EngineName = typer.Option(default_engine(), "--tts", help="TTS engine"),
    workers: Optional[int] = typer.Option(None, min=1, help="worker processes (default: CPU cores)"),
) -> None:
    """Synthesise every clip of a suite (parallel, cached, resumable)."""
    with _errors():
        _suite_tools(path).synthesize(path, tts=tts.value, workers=workers)


@dataset_app.command("validate")
def validate(
    path: Path = typer.Argument(..., help="suite directory"),
    strict: bool = typer.Option(False, help="also enforce the benchmark's construction rules (else warnings)"),
    no_audio: bool = typer.Option(False, "--no-audio", help="skip the clip checks"),
    as_json: bool = typer.Option(False, "--json", help="print problems as JSON"),
) -> None:
    """Check a suite against every rule; exit 1 naming each violation (file, scenario, turn, rule)."""
    with _errors():
        valid = _suite_tools(path).validate(path, strict=strict, no_audio=no_audio, as_json=as_json)
    if not valid:
        raise typer.Exit(1)


@dataset_app.command("rules")
def rules() -> None:
    """List every rule id that validate can report."""
    with _errors():
        for _, tools in _every_tools():
            for rid, text in tools.rules():
                print(f"{rid:22s} {text}")


@dataset_app.command("stats")
def stats(
    path: Path = typer.Argument(..., help="suite directory"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Composition and duration tables of a suite."""
    with _errors():
        _suite_tools(path).stats(path, as_json=as_json)


@dataset_app.command("import", context_settings=_FORWARDS)
def import_cmd(
    ctx: typer.Context,
    fmt: Optional[str] = typer.Option(None, "--format", help="the source's format (default: the default "
                                      "benchmark's first); every other argument is that format's"),
    show_help: bool = typer.Option(False, "--help", help="this help and every format; after --format F, "
                                                         "that format's options"),
) -> None:
    """Import an external dataset as a suite; exit 1 naming each problem.

    `mpe dataset import --format F --help` lists the arguments of format F.
    """
    with _errors():
        readers = [(f, text, name, tools) for name, tools in _every_tools()
                   for f, text in tools.import_formats.items()]
        if show_help and fmt is None:
            _help(ctx, [f"  {f:16s} ({name}) {text}" for f, text, name, _ in readers], "formats:")
            return
        owner = next(((f, tools) for f, _, _, tools in readers if fmt in (None, f)), None)
        if owner is None or (app := owner[1].import_app()) is None:
            raise DatasetError(f"unknown import format {fmt!r} (formats: {', '.join(r[0] for r in readers)})")
    chosen = owner[0]
    _forward(ctx, app, ["--format", chosen, *["--help"] * show_help, *ctx.args], via=f"--format {chosen}",
             others=lambda: [(f"--format {f}", a) for f, _, _, t in readers
                             if f != chosen and (a := t.import_app()) is not None])


@dataset_app.command("export-text")
def export_text_cmd(
    path: Path = typer.Argument(..., help="suite directory"),
    out: Path = typer.Option(..., "--out", help="JSONL file to write"),
    condition: str = typer.Option(ALL_CONDITIONS, help=f"one condition of the suite's benchmark, or "
                                                       f"{ALL_CONDITIONS} (every condition)"),
    labels: bool = typer.Option(True, help="keep the annotations (labels) in the transcripts"),
) -> None:
    """Export speaker-attributed transcripts as JSONL for text-only evaluation."""
    with _errors():
        name = benchmark_name_of_suite(path)
        conditions = get_benchmark(name).conditions
        if condition != ALL_CONDITIONS and condition not in conditions:
            raise typer.BadParameter(f"{condition!r} is not one of {', '.join((*conditions, ALL_CONDITIONS))}",
                                     param_hint="'--condition'")
        chosen = None if condition == ALL_CONDITIONS else (condition,)
        n = _tools(name).export_text(path, out, conditions=chosen, labels=labels)
        console.print(f"wrote {n} transcripts to {out}")


@dataset_app.command("build")
def build(
    name: str = typer.Argument(..., help="a built-in suite of any benchmark (an unknown name lists them)"),
    audio: Optional[bool] = typer.Option(None, "--audio/--no-audio",
                                         help="voice it or text only (default: the suite's own; most are voiced)"),
    tts: EngineName = typer.Option(default_engine(), "--tts", help="TTS engine"),
    workers: Optional[int] = typer.Option(None, min=1, help="synthesis worker processes"),
) -> None:
    """Build (or reuse) a built-in suite under the data directory and print its path."""
    with _errors():
        every = _every_tools()
        tools = next((t for _, t in every if name in t.builtin_names), None)
        if tools is None:
            known = [n for _, t in every for n in t.builtin_names]
            raise DatasetError(f"no built-in suite {name!r} (available: {', '.join(known)})")
        path = tools.build(name, audio=audio, tts=tts.value, workers=workers)
    print(path)


if __name__ == "__main__":  # pragma: no cover
    dataset_app()
    sys.exit(0)
