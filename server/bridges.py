"""The bridges ``mpe bridge NAME`` and ``mpe demo`` can start: the SDK bridges of
``model_bridges`` plus two reference bridges that need the server's parts — ``always-talk``
(speaks through the offline TTS) and ``oracle`` (reads the Duplex-MPE script and drives the
engine's episode core)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clients.messages import EpisodeStart
from clients.sdk import BaseBridge, Bridge
from model_bridges import REGISTRY, load_all
from server.settings import Settings
from server.tts import speak

MONOLOGUE = (
    "So I was thinking about the weekend, and honestly there are a lot of options. "
    "We could go hiking up by the lake, or stay in town and try that new noodle bar. "
    "The weather is supposed to be nice on Saturday, a little cooler on Sunday, "
    "and I still have to finish the laundry and call my sister at some point."
)
VOICE = "piper:joe@1.0"


class AlwaysTalk(Bridge):
    """Speaks continuously from the first frame (a looped synthesised monologue)."""

    name = "always-talk"
    blocking = False

    def __init__(self, data_dir: Path):
        super().__init__()
        self.audio24 = speak(MONOLOGUE, VOICE, data_dir)
        self.audio = self.audio24
        self.pos = 0

    def reset(self, episode: EpisodeStart) -> None:
        self.pos = 0
        if episode.sample_rate != 24000:
            import soxr

            self.audio = soxr.resample(self.audio24, 24000, episode.sample_rate).astype(np.int16)
        else:
            self.audio = self.audio24

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        n = self.frame_samples
        idx = (self.pos + np.arange(n)) % len(self.audio)
        self.pos = (self.pos + n) % len(self.audio)
        return self.audio[idx]


def _oracle(data_dir: Path, suite: str | None = None) -> BaseBridge:
    from server.benchmarks.mpe.oracle import Oracle

    return Oracle(data_dir, suite)


SERVER_BRIDGES = {"always-talk": AlwaysTalk, "oracle": _oracle}


def bridge_names() -> list[str]:
    load_all()
    return sorted({*REGISTRY, *SERVER_BRIDGES})


def create_bridge(name: str, data_dir: str | None = None, **options: str) -> BaseBridge:
    """A bridge by name; ``options`` are its ``--opt key=value`` settings."""
    if name in SERVER_BRIDGES:
        return SERVER_BRIDGES[name](Path(data_dir) if data_dir else Settings().data_dir, **options)
    load_all()
    if name not in REGISTRY:
        raise KeyError(f"unknown bridge {name!r}; known: {', '.join(bridge_names())}")
    return REGISTRY[name](**options)
