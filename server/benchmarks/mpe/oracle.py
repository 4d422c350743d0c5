"""The Duplex-MPE oracle: the reference behaviour of an ideal model (admin tokens only).

It answers T with the gold answer right after T, answers N4Q inside its 3 s window and keeps
talking until it hears N4R, then stops. It follows the episode by driving the engine's own
pure episode core (:class:`server.core.episode.EpisodeCore`: the same scheduler and detector)
on its own output, which is exact in lockstep: the server's decisions depend only on the room
script and this output.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clients.codec import STREAM_RATE
from clients.messages import EpisodeStart
from clients.sdk import Bridge
from server.benchmarks.mpe.scheduler import N4_GAP_S
from server.core.audio import mix_placed
from server.core.episode import EpisodeCore
from server.core.timebase import samples
from server.engine.clips import load_suite, open_episode
from server.tts import speak

HOLD_ON = "Sure, let me look that up for you, one moment, I am checking the details right now, it should only take a second"
VOICE = "piper:joe@1.0"


class Oracle(Bridge):
    """Knows the script through the ``reference`` block of ``episode.start`` and behaves ideally."""

    name = "oracle"
    clocks = ("lockstep",)
    wants_reference = True
    blocking = False
    ANSWER_DELAY = 7_200  # 0.3 s after T ends
    N4_DELAY = 9_600  # 0.4 s after N4Q ends
    N4_GAP = samples(N4_GAP_S)  # §3: N4R starts exactly 3 s after N4Q ends
    N4_STOP = 19_200  # stop 0.8 s after N4R starts ("hears" it; well inside the 2 s)

    def __init__(self, data_dir: Path, suite: str | None = None):
        super().__init__()
        self.data_dir = data_dir
        self.suite_path = Path(suite) if suite else data_dir / "suites" / "mini"
        self.hold_on = speak(HOLD_ON, VOICE, data_dir)

    def reset(self, episode: EpisodeStart) -> None:
        if episode.reference is None:
            raise RuntimeError("the oracle needs an admin token (reference block)")
        if episode.sample_rate != STREAM_RATE:
            raise RuntimeError("the oracle speaks 24 kHz only")
        ref = episode.reference
        scenario = load_suite(self.suite_path).suite.scenario(ref.scenario_id, ref.condition)
        self.replica: EpisodeCore = open_episode(str(self.suite_path), scenario, suite_hash=None,
                                                 audio_hash=None)
        self.speech: list[tuple[int, np.ndarray]] = []  # (stream start sample, audio)
        self.answer = speak(scenario.gold_answer, VOICE, self.data_dir)

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        n = self.frame_samples
        item = self.replica.next_room()
        for ev in item[2] if item else ():
            if ev.type == "clip.end" and ev.data["label"] == "T":
                self.speech.append((ev.t + self.ANSWER_DELAY, self.answer))
            elif ev.type == "clip.end" and ev.data["label"] == "N4Q":
                start, stop = ev.t + self.N4_DELAY, ev.t + self.N4_GAP + self.N4_STOP
                self.speech.append((start, _fit(self.hold_on, stop - start)))
        frame = mix_placed(self.speech, seq * n, n)
        self.replica.feed_assistant(frame)
        return frame


def _fit(audio: np.ndarray, n: int) -> np.ndarray:
    """Loop or cut ``audio`` to exactly ``n`` samples, with a 20 ms fade-out."""
    out = np.resize(audio, n).astype(np.int16)
    fade = min(480, n)
    out[n - fade :] = (out[n - fade :] * np.linspace(1, 0, fade)).astype(np.int16)
    return out
