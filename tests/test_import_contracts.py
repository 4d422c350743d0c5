"""The import contracts of pyproject.toml (DESIGN "Map") really bind: ``lint-imports`` on a copy of
the tree fails once a neutral module imports a benchmark, or one benchmark imports another."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "tree"
    dst.mkdir()
    for name in ("clients", "model_bridges", "server"):
        shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")
    return dst


def _lint(tree: Path) -> subprocess.CompletedProcess:
    # the copy first on the path, so that the copy's modules are the ones analysed
    return subprocess.run([str(LINT), "--no-cache"], cwd=tree, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})


def _add_import(module: Path, line: str) -> None:
    module.write_text(module.read_text("utf-8") + f"\n{line}  # noqa: E402,F401\n", "utf-8")


@pytest.mark.parametrize("module, target, contract", [
    ("server/scoring/statistics.py", "server.benchmarks.mpe", "the neutral layers know no benchmark"),
    ("server/api/deps.py", "server.benchmarks.mtr.suite", "the neutral layers know no benchmark"),
    ("server/engine/clips.py", "server.benchmarks.mpe.rules", "the neutral layers know no benchmark"),
    ("server/core/spans.py", "server.benchmarks.mtr", "the neutral layers know no benchmark"),
    ("server/llm/usage.py", "server.benchmarks.mtr.judges", "the neutral layers know no benchmark"),
    ("server/benchmarks/mtr/rules.py", "server.benchmarks.mpe.rules", "benchmarks are independent of each other"),
])
def test_a_forbidden_import_breaks_a_contract(tmp_path, module, target, contract):
    tree = _copy(tmp_path)
    assert _lint(tree).returncode == 0, "the copy of the tree must pass before the change"
    _add_import(tree / module, f"import {target}")
    result = _lint(tree)
    assert result.returncode != 0
    broken = result.stdout[result.stdout.index("Broken contracts"):]
    assert contract in " ".join(broken.split())
