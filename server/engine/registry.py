"""Benchmarks registered by name (the plug-ins of :mod:`server.benchmarks`).

Suites name their benchmark in ``suite.json`` (``"benchmark"``; a suite that names none is
Duplex-MPE, DESIGN §2) and runs record it. To add a benchmark: a package
``server/benchmarks/NAME/`` whose ``__init__`` defines ``BENCHMARK``, an instance of
:class:`server.core.benchmark.Benchmark`, and one line in :data:`PLUGINS`.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from clients.errors import MPEError
from server.core.benchmark import Benchmark
from server.engine.suitedir import parse_json

DEFAULT = "duplex-mpe"  # §2: a suite that names no benchmark
#: benchmark name -> module that defines ``BENCHMARK`` (imported on first use)
PLUGINS: dict[str, str] = {"duplex-mpe": "server.benchmarks.mpe", "mtr-duplexbench": "server.benchmarks.mtr"}


class UnknownBenchmark(MPEError):
    """No benchmark is registered under that name."""

    code = "unknown_benchmark"


_LOADED: dict[str, Benchmark] = {}


def get_benchmark(name: str | None) -> Benchmark:
    """The registered benchmark called ``name`` (None: the default)."""
    name = name or DEFAULT
    if name not in _LOADED:
        if name not in PLUGINS:
            raise UnknownBenchmark(f"unknown benchmark {name!r}; known: {', '.join(sorted(PLUGINS))}")
        module = importlib.import_module(PLUGINS[name])
        _LOADED[name] = module.BENCHMARK
    return _LOADED[name]


def benchmark_name_of_suite(path: str | Path) -> str:
    """The benchmark a suite directory names in its ``suite.json`` (the default when absent or
    unreadable: the benchmark's own loader then reports what is wrong with the file)."""
    path = Path(path)
    root = path.parent if path.name == "suite.json" else path
    try:
        meta = parse_json((root / "suite.json").read_text("utf-8"))
    except (OSError, ValueError):
        return DEFAULT
    name = meta.get("benchmark") if isinstance(meta, dict) else None
    return name if isinstance(name, str) and name else DEFAULT


def benchmark_of_suite(path: str | Path) -> Benchmark:
    """The benchmark that a suite directory (or its ``suite.json``) names."""
    return get_benchmark(benchmark_name_of_suite(path))
