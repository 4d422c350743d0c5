"""The suite behind ``mpe demo``: the built-in ``mini`` suite (see :mod:`server.benchmarks.mpe.dataset.builtin`).

Ten procedurally generated scenario pairs (explicit + implicit), voiced offline with the
piper voices of :mod:`server.tts` and written to ``<data_dir>/suites/mini/``. Building is
idempotent and cached: a complete build is reused as is, and clips come from the clip
cache, so only new lines are ever synthesised.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from server.benchmarks.mpe.dataset.build import PREAMBLE_CLIP, PREAMBLE_SPEAKER, PREAMBLE_TEXT
from server.benchmarks.mpe.dataset.builtin import build_builtin
from server.tts import TTSEngine

DEMO_SUITE_NAME = "mini"

__all__ = ["DEMO_SUITE_NAME", "PREAMBLE_CLIP", "PREAMBLE_SPEAKER", "PREAMBLE_TEXT", "build_demo_suite"]


def build_demo_suite(
    data_dir: Path,
    *,
    engine: TTSEngine | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Write (or reuse) the demo suite at ``<data_dir>/suites/mini/`` and return its path.

    ``progress(done, total)`` follows the synthesis. Raises TTSUnavailable when a build
    is needed and no TTS engine is installed.
    """
    return build_builtin(DEMO_SUITE_NAME, data_dir, engine=engine, progress=progress)
