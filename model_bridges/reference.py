"""Reference bridges: ``silent``, ``always-talk``, ``echo`` and ``oracle``.

They exercise the whole path (wire protocol, scheduler, detector, recording, scoring) with
known behaviour. ``always-talk`` and ``oracle`` speak through the offline TTS (``[tts]``
extra).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clients.messages import EpisodeStart
from clients.sdk import Bridge
from . import register

MONOLOGUE = (
    "So I was thinking about the weekend, and honestly there are a lot of options. "
    "We could go hiking up by the lake, or stay in town and try that new noodle bar. "
    "The weather is supposed to be nice on Saturday, a little cooler on Sunday, "
    "and I still have to finish the laundry and call my sister at some point."
)
HOLD_ON = "Sure, let me look that up for you, one moment, I am checking the details right now, it should only take a second"
ORACLE_VOICE = "piper:joe@1.0"


def _data_dir(data_dir: str | None) -> Path:
    from server.settings import Settings

    return Path(data_dir) if data_dir else Settings().data_dir


def _speak(text: str, data_dir: Path) -> np.ndarray:
    from server.tts import ClipCache, get_engine

    return ClipCache(data_dir).synthesize(get_engine("piper"), text, ORACLE_VOICE)


@register("silent")
class Silent(Bridge):
    """Never speaks."""

    name = "silent"
    blocking = False

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


@register("always-talk")
class AlwaysTalk(Bridge):
    """Speaks continuously from the first frame (a looped synthesised monologue)."""

    name = "always-talk"
    blocking = False

    def __init__(self, data_dir: str | None = None, **_):
        super().__init__()
        self.audio24 = _speak(MONOLOGUE, _data_dir(data_dir))
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


@register("oracle")
class Oracle(Bridge):
    """Admin-only: knows the script through the ``reference`` block and behaves ideally.

    It answers T with the gold answer right after T, answers N4Q inside its 3 s window and
    keeps talking until it hears N4R, then stops. It follows the episode by running a
    replica of the server's scheduler and detector on its own output, which is exact in
    lockstep (the server's decisions depend only on the room script and this output).
    """

    name = "oracle"
    clocks = ("lockstep",)
    blocking = False
    ANSWER_DELAY = 7_200  # 0.3 s after T ends
    N4_DELAY = 9_600  # 0.4 s after N4Q ends
    N4_STOP = 19_200  # stop 0.8 s after N4R starts ("hears" it; well inside the 2 s)

    def __init__(self, suite: str | None = None, data_dir: str | None = None, **_):
        super().__init__()
        self.data_dir = _data_dir(data_dir)
        self.suite_path = Path(suite) if suite else self.data_dir / "suites" / "mini"
        self.hold_on = _speak(HOLD_ON, self.data_dir)

    def reset(self, episode: EpisodeStart) -> None:
        from server.detector import SpeechDetector
        from server.scheduler import Scheduler
        from server.session import build_plan, load_suite

        if episode.reference is None:
            raise RuntimeError("the oracle needs an admin token (reference block)")
        if episode.sample_rate != 24000:
            raise RuntimeError("the oracle speaks 24 kHz only")
        suite = load_suite(str(self.suite_path))
        scenario = suite.scenario(episode.reference.scenario_id, episode.reference.condition)
        self.plan, _ = build_plan(scenario.model_dump(mode="json"), str(self.suite_path))
        self.labels = {t.idx: t.label for t in self.plan.turns}
        self.replica = Scheduler(self.plan, frame_samples=self.frame_samples)
        self.detector = SpeechDetector()
        self.speech: list[tuple[int, np.ndarray]] = []  # (stream start sample, audio)
        self.answer = _speak(scenario.gold_answer, self.data_dir)

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        n = self.frame_samples
        plan = self.replica.next_frame()
        for ev in plan.events if plan else ():
            if ev.type == "clip.end" and ev.data["label"] == "T":
                self.speech.append((ev.t + self.ANSWER_DELAY, self.answer))
            elif ev.type == "clip.end" and ev.data["label"] == "N4Q":
                # §3: N4R starts exactly 3 s after N4Q ends; stop shortly after it starts.
                start, stop = ev.t + self.N4_DELAY, ev.t + 72_000 + self.N4_STOP
                self.speech.append((start, _fit(self.hold_on, stop - start)))
        out = np.zeros(n, dtype=np.int32)
        a = seq * n
        for start, audio in self.speech:
            lo, hi = max(a, start), min(a + n, start + len(audio))
            if lo < hi:
                out[lo - a : hi - a] += audio[lo - start : hi - start]
        frame = np.clip(out, -32768, 32767).astype(np.int16)
        self.replica.observe(self.detector.push(frame), self.detector.known_until)
        return frame


def _fit(audio: np.ndarray, n: int) -> np.ndarray:
    """Loop or cut ``audio`` to exactly ``n`` samples, with a 20 ms fade-out."""
    out = np.resize(audio, n).astype(np.int16)
    fade = min(480, n)
    out[n - fade :] = (out[n - fade :] * np.linspace(1, 0, fade)).astype(np.int16)
    return out
