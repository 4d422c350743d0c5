"""Shared helpers for the dataset tests: a deterministic tone engine and small suites."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from server.benchmarks.mpe.dataset.build import build_text_suite, make_generator
from server.benchmarks.mpe.dataset.compose import Composition
from server.benchmarks.mpe.dataset.synth import synthesize_suite
from server.benchmarks.mpe.suite import Suite
from server.tts import OUTPUT_RATE


class ToneEngine:
    """Stands in for a TTS engine: a tone whose length and pitch depend on text and voice."""

    name = "tone"
    version = "1"

    def __init__(self, fail_after: int | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail_after = fail_after

    def synthesize(self, text: str, voice: str) -> np.ndarray:
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise KeyboardInterrupt  # the run is interrupted here
        self.calls.append((voice, text))
        n = 2400 + 60 * len(text)
        f = 150 + 10 * (sum(map(ord, voice)) % 20)
        t = np.arange(n) / OUTPUT_RATE
        return (0.3 * 32767 * np.sin(2 * np.pi * f * t)).astype(np.int16)


def text_suite(root: Path, pairs: int = 4, seed: int = 3, **shares) -> Suite:
    composition = Composition.from_shares(pairs, **shares)
    suite, _ = build_text_suite(root, name=root.name, pairs=pairs, seed=seed,
                                generator=make_generator("procedural", seed), composition=composition)
    return suite


def voiced_suite(root: Path, data_dir: Path, pairs: int = 4, seed: int = 3, engine=None, **shares) -> Suite:
    text_suite(root, pairs, seed, **shares)
    synthesize_suite(root, data_dir=data_dir, engine=engine or ToneEngine())
    return Suite.load(root)
