"""The tests' own layout: what tests share lives in ``tests/support/``, and no file under tests/
imports a test module (``test_*.py``) or a conftest (pytest loads those itself). Imports are read
with :mod:`ast`, also those in code a test writes out as a string (a script it runs)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def _is_test_module(dotted: str, relative: bool) -> bool:
    parts = dotted.split(".")
    return (relative or parts[0] == "tests") and (parts[-1].startswith("test_") or parts[-1] == "conftest")


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The test modules ``node`` imports (dotted, relative ones with their leading dots)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if _is_test_module(a.name, relative=False)]
    relative = node.level > 0
    dots = "." * node.level
    if node.module and _is_test_module(node.module, relative):
        return [dots + node.module]
    return [dots + ".".join(filter(None, (node.module, a.name))) for a in node.names
            if _is_test_module(".".join(filter(None, (node.module, a.name))), relative)]


def offending_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import of a test module or conftest in ``source``, including those
    written on a line of a string constant (a script a test writes out)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            found += [(node.lineno, m) for m in _imported(node)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for line in node.value.splitlines():
                if not line.lstrip().startswith(("import ", "from ")):
                    continue
                try:
                    inner = ast.parse(line.strip())
                except SyntaxError:
                    continue
                found += [(node.lineno, m) for n in inner.body if isinstance(n, ast.Import | ast.ImportFrom)
                          for m in _imported(n)]
    return sorted(found)


def test_no_file_under_tests_imports_a_test_module():
    offenders = [f"{path.relative_to(TESTS.parent)}:{line} imports {module}"
                 for path in sorted(TESTS.rglob("*.py")) if path != Path(__file__)  # its examples below
                 for line, module in offending_imports(path.read_text())]
    assert offenders == [], "shared test code belongs in tests/support/:\n" + "\n".join(offenders)


def test_the_rule_finds_every_form_of_import():
    assert offending_imports("from tests.test_cli import mpe") == [(1, "tests.test_cli")]
    assert offending_imports("import tests.test_cli as c") == [(1, "tests.test_cli")]
    assert offending_imports("from tests.faults import test_faults_kill, x") == [(1, "tests.faults.test_faults_kill")]
    assert offending_imports("from tests.faults.test_faults_storage import own_postgres") == \
        [(1, "tests.faults.test_faults_storage")]
    assert offending_imports("from tests.conftest import database_url") == [(1, "tests.conftest")]
    assert offending_imports("from .test_listen import stalled") == [(1, ".test_listen")]
    assert offending_imports("from . import conftest") == [(1, ".conftest")]
    assert offending_imports("def f():\n    from tests.test_engine_e2e import serve\n") == [(2, "tests.test_engine_e2e")]
    script = 'x = f"""\nimport logging\nfrom tests.test_sdk_client import Quiet\nrun({port})\n"""\n'
    assert offending_imports(script) == [(1, "tests.test_sdk_client")]


def test_the_rule_lets_shared_code_through():
    assert offending_imports("from tests.support.cli import mpe\nfrom tests.support.peers.peer_tools import drive\n"
                             "from tests.beepbench import NAME\nimport tests.support.world\n"
                             "from server.engine import test_mode\nfrom .support import world\n"
                             "'from tests.test_x import ('") == []
