"""Benchmark plug-ins the tests register: beepbench (tests/beepbench/, a benchmark written outside
the server) is registered with this one line in ``MPE_BENCHMARKS``."""

from __future__ import annotations

from tests.beepbench import NAME

BEEP_REGISTRATION = f"{NAME}=tests.beepbench"  # the one registration line
