"""Benchmarks registered by name (the plug-ins of :mod:`server.benchmarks`).

Suites name their benchmark in ``suite.json`` (``"benchmark"``; a suite that names none is
Duplex-MPE, DESIGN §2) and runs record it. To add a benchmark: a package whose ``__init__`` defines
``BENCHMARK``, an instance of :class:`server.core.benchmark.Benchmark`, and one registration line: in
:data:`PLUGINS` (a benchmark of this project, ``server/benchmarks/NAME/``), as an entry point of the
group :data:`ENTRY_POINT_GROUP` (an installed package: ``NAME = "module"``), or in the environment
variable :data:`ENV_VAR` (``NAME=module[,NAME=module…]``: a package on the Python path). This module is
the only place that names the benchmark packages.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
from pathlib import Path

from clients.errors import MPEError
from server.core.benchmark import Benchmark
from server.engine.suitedir import parse_json

DEFAULT = "duplex-mpe"  # §2: a suite that names no benchmark
#: benchmark name -> module that defines ``BENCHMARK`` (imported on first use)
PLUGINS: dict[str, str] = {"duplex-mpe": "server.benchmarks.mpe", "mtr-duplexbench": "server.benchmarks.mtr"}
ENTRY_POINT_GROUP = "duplex_mpe.benchmarks"
ENV_VAR = "MPE_BENCHMARKS"


class BadPluginSpec(MPEError):
    """The benchmarks named in the environment are not ``NAME=module`` pairs."""

    code = "bad_benchmark_spec"


@functools.cache
def _installed() -> dict[str, str]:
    """Installed packages' benchmarks (entry points are read once per process)."""
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def plugins() -> dict[str, str]:
    """Every registered benchmark: name -> module (this project's, installed packages', the environment's)."""
    found = {**_installed(), **PLUGINS}
    for item in filter(None, (x.strip() for x in os.environ.get(ENV_VAR, "").split(","))):
        name, sep, module = item.partition("=")
        if not sep or not name.strip() or not module.strip():
            raise BadPluginSpec(f"{ENV_VAR}: {item!r} is not NAME=module")
        found[name.strip()] = module.strip()
    return found


class UnknownBenchmark(MPEError):
    """No benchmark is registered under that name."""

    code = "unknown_benchmark"


_LOADED: dict[str, Benchmark] = {}


def get_benchmark(name: str | None) -> Benchmark:
    """The registered benchmark called ``name`` (None: the default)."""
    name = name or DEFAULT
    if name not in _LOADED:
        known = plugins()
        if name not in known:
            raise UnknownBenchmark(f"unknown benchmark {name!r}; known: {', '.join(sorted(known))}")
        bench = importlib.import_module(known[name]).BENCHMARK
        if bench.name != name:
            raise UnknownBenchmark(f"the module registered as {name!r} defines the benchmark {bench.name!r}")
        _LOADED[name] = bench
    return _LOADED[name]


def all_benchmarks() -> list[Benchmark]:
    """Every registered benchmark, by name."""
    return [get_benchmark(name) for name in sorted(plugins())]


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
