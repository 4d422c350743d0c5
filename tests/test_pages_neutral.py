"""The pages hold no benchmark's knowledge: its labels, failure types, states and wording come
from the server (GET /v1/benchmarks, the episode's timeline, the episode list's cells, the live
status's text), so no script of static/js and no page of static/ names them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from server.engine.registry import get_benchmark

STATIC = Path(__file__).resolve().parents[1] / "static"
PAGES = sorted([*STATIC.glob("js/*.js"), *STATIC.glob("*.html")])
def _words() -> list[str]:
    words = {"T", "N1", "N2", "N3", "N4", "N4Q", "N4R", "t_wait_onset", "t_wait_silence", "n4_gap", "smooth",
             "barge", "backchannel", "PAUSE", "BARGE", "MTR", "rounds", "Silence windows", "T response"}
    for name in ("duplex-mpe", "mtr-duplexbench"):
        bench = get_benchmark(name)
        words |= {*bench.conditions, *bench.failure_types, *(lb.key for lb in bench.labels)}
    return sorted(words)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_pages_name_no_benchmark_word(page: Path):
    text = page.read_text("utf-8")
    found = [w for w in _words() if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", text)]
    assert found == [], f"{page.name} names {found}"
