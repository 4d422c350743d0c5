"""``mpe dataset`` names no benchmark: it picks one (``generate --benchmark``, ``import --format``, the
suite's ``suite.json``, the built-in suite's owner) and hands the command, with that benchmark's own
options, to its :class:`server.core.datasets.DatasetTools`."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import server.cli.dataset as dataset_cli
from server.cli import app
from server.cli.dataset import foreign_option
from server.engine.registry import DEFAULT, all_benchmarks, plugins
from tests.beepbench import NAME as BEEP
from tests.support.plugins import BEEP_REGISTRATION

runner = CliRunner()
MTR = "mtr-duplexbench"


def _one_line_exit_2(r) -> str:
    assert r.exit_code == 2, r.output
    text = r.output.strip()
    assert "\n" not in text and "Traceback" not in text and text.startswith("error (usage)")
    return text


def _option_names(apps: list[typer.Typer]) -> set[str]:
    return {opt for a in apps for p in typer.main.get_command(a).params if p.param_type_name == "option"
            for opt in (*p.opts, *p.secondary_opts)}


def _benchmark_apps() -> list[typer.Typer]:
    apps: list[typer.Typer] = []
    for b in all_benchmarks():
        if (tools := b.dataset_tools()) is not None:
            apps.append(tools.generate_app())
            if (imp := tools.import_app()) is not None:
                apps.append(imp)
    return apps


# ------------------------------------------------------------------ the pure option check
def test_foreign_option_skips_values_and_knows_flags():
    opts = {"--out": True, "--seed": True, "--no-audio": False}
    assert foreign_option(["--out", "--pairs", "--seed", "-3"], opts) is None  # values, whatever they look like
    assert foreign_option(["--no-audio", "--pairs", "3"], opts) == "--pairs"  # a flag takes no value
    assert foreign_option(["--out=x", "--dialogues=3"], opts) == "--dialogues"
    assert foreign_option(["src.csv", "--out", "d", "--", "--rounds"], opts) is None
    assert foreign_option(["--out", "d", "-x"], opts) == "-x"


# ------------------------------------------------------------------ dispatch
def test_generate_takes_the_named_benchmarks_options_in_any_order(tmp_path):
    out = tmp_path / "m"
    r = runner.invoke(app, ["dataset", "generate", "--out", str(out), "--dialogues", "2", "--benchmark", MTR,
                            "--rounds", "2", "--set", "smooth", "--no-audio"])
    assert r.exit_code == 0, r.output
    meta = json.loads((out / "suite.json").read_text())
    assert meta["benchmark"] == MTR
    assert len((out / "scenarios.jsonl").read_text().splitlines()) == 2


def test_another_benchmarks_option_is_one_line_and_exit_2(tmp_path):
    out = tmp_path / "s"
    text = _one_line_exit_2(runner.invoke(app, ["dataset", "generate", "--out", str(out), "--dialogues", "3",
                                                "--no-audio"]))
    assert "--dialogues" in text and f"--benchmark {MTR}" in text
    text = _one_line_exit_2(runner.invoke(app, ["dataset", "generate", "--benchmark", MTR, "--out", str(out),
                                                "--pairs", "3", "--no-audio"]))
    assert "--pairs" in text and f"--benchmark {DEFAULT}" in text
    assert not out.exists()
    text = _one_line_exit_2(runner.invoke(app, ["dataset", "generate", "--out", str(out), "--bogus"]))
    assert "no such option --bogus" in text and f"--benchmark {DEFAULT} --help" in text
    # import: the format picks the benchmark, whose options alone are taken
    text = _one_line_exit_2(runner.invoke(app, ["dataset", "import", "x.csv", "--out", str(out), "--format",
                                                "advbench", "--mapping", "m.json"]))
    assert "--mapping" in text and "--format manifest" in text
    text = _one_line_exit_2(runner.invoke(app, ["dataset", "import", "x.jsonl", "--out", str(out), "--rounds", "3"]))
    assert "--rounds" in text and "--format advbench" in text


def test_unknown_benchmark_format_or_builtin_is_one_line(tmp_path, monkeypatch):
    r = runner.invoke(app, ["dataset", "generate", "--benchmark", "nope", "--out", str(tmp_path / "s")])
    assert r.exit_code == 2 and "unknown benchmark 'nope'" in r.output and "\n" not in r.output.strip()
    r = runner.invoke(app, ["dataset", "import", "x", "--out", str(tmp_path / "s"), "--format", "nope"])
    assert r.exit_code == 2 and "unknown import format 'nope'" in r.output and "advbench" in r.output
    r = runner.invoke(app, ["dataset", "build", "nope"])
    assert r.exit_code == 2 and "mini" in r.output and "mtr-mini" in r.output
    # a benchmark without dataset tools (its suites are made elsewhere) is named, not a traceback
    monkeypatch.setenv("MPE_BENCHMARKS", BEEP_REGISTRATION)
    r = runner.invoke(app, ["dataset", "generate", "--benchmark", BEEP, "--out", str(tmp_path / "b")])
    assert r.exit_code == 2 and "has no dataset tools" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["dataset", "generate", "--help"])
    assert r.exit_code == 0 and f"--benchmark {MTR} --help" in r.output and BEEP not in r.output


def test_export_text_refuses_a_condition_of_no_benchmark(tmp_path):
    out = tmp_path / "s"
    assert runner.invoke(app, ["dataset", "generate", "--out", str(out), "--pairs", "2", "--no-audio"]).exit_code == 0
    r = runner.invoke(app, ["dataset", "export-text", str(out), "--out", str(tmp_path / "t.jsonl"),
                            "--condition", "gt"])
    assert r.exit_code == 2 and "'gt' is not one of explicit, implicit, both" in r.output


# ------------------------------------------------------------------ help
def test_help_of_the_neutral_commands_points_to_each_benchmarks_options():
    r = runner.invoke(app, ["dataset", "generate", "--help"])
    assert r.exit_code == 0
    for name in (DEFAULT, MTR):
        assert f"--benchmark {name} --help" in r.output
    assert "--pairs" not in r.output and "--dialogues" not in r.output
    r = runner.invoke(app, ["dataset", "import", "--help"])
    assert r.exit_code == 0
    assert all(f in r.output for f in ("manifest", "advbench", "llama-questions", "candor", "encoding"))


@pytest.mark.parametrize("args, has, lacks", [
    (["generate", "--benchmark", MTR], ("--dialogues", "--rounds", "--set"), ("--pairs", "--turn-length")),
    (["generate", "--benchmark", DEFAULT], ("--pairs", "--turn-length", "--n4-share"), ("--dialogues", "--set")),
    (["import", "--format", "candor"], ("--rounds", "--force"), ("--mapping",)),
    (["import", "--format", "manifest"], ("--mapping",), ("--rounds",)),
])
def test_help_of_a_benchmarks_command_lists_its_own_options(args, has, lacks):
    r = runner.invoke(app, ["dataset", *args, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert f"dataset {' '.join(args)} [OPTIONS]" in r.output  # the usage line names the selector
    assert all(o in r.output for o in has) and not any(o in r.output for o in lacks)


# ------------------------------------------------------------------ the rule
def test_the_dataset_cli_names_no_benchmark_and_holds_none_of_their_options():
    path = Path(dataset_cli.__file__)
    source = path.read_text("utf-8")
    tree = ast.parse(source)
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert imported and not [m for m in imported if m.startswith("server.benchmarks")]
    for name in plugins():
        assert name not in source
    assert "Duplex-MPE" not in source and "MTR" not in source
    neutral = {opt for p in typer.main.get_command(app).commands["dataset"].commands.values()  # type: ignore[attr-defined]
               for q in p.params if q.param_type_name == "option" for opt in (*q.opts, *q.secondary_opts)}
    theirs = _option_names(_benchmark_apps()) - neutral - {"--help"}
    assert {"--pairs", "--dialogues", "--rounds", "--set", "--mapping"} <= theirs
    for opt in theirs:
        assert f'"{opt}"' not in source and f"'{opt}'" not in source and f"{opt} " not in source, opt
