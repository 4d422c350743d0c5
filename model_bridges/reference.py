"""Reference bridges with known behaviour: ``silent`` and ``echo``.

``always-talk`` and ``oracle`` need the server's TTS and suites; they live in
:mod:`server.cli.bridges`.
"""

from __future__ import annotations

import numpy as np

from clients.messages import EpisodeStart
from clients.sdk import Bridge
from model_bridges import register


@register("silent")
class Silent(Bridge):
    """Never speaks."""

    name = "silent"
    blocking = False
    accepts_context = True  # its output never depends on its past output: teacher forcing changes nothing

    def __init__(self, **_):
        super().__init__()

    def reset(self, episode: EpisodeStart) -> None:
        pass

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        return None


@register("echo")
class Echo(Bridge):
    """Repeats the room audio ``delay`` frames later at half volume."""

    name = "echo"
    blocking = False
    accepts_context = True  # it hears only the room: its own (forced) past output changes nothing

    def __init__(self, delay: str = "5", **_):
        super().__init__()
        self.delay = int(delay)
        self.buf: list[np.ndarray] = []

    def reset(self, episode: EpisodeStart) -> None:
        self.buf = []

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        self.buf.append(room)
        if len(self.buf) <= self.delay:
            return None
        return (self.buf.pop(0) // 2).astype(np.int16)
