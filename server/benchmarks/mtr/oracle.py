"""The MTR oracle: the reference behaviour for every feature (admin tokens only).

It answers each user turn with the round's ground-truth reply 0.3 s after the user ends, stops
0.4 s after a barge-in starts and answers the barge-in with its ground-truth answer, stays
silent through a pause (it only answers once the turn has really ended), and keeps talking
through background voices and backchannels (the suite rule ``reply-covers`` makes every reply
outlast them). It follows the episode by driving the engine's own episode core on its own
output, which is exact in lockstep; in ``gt`` episodes it accepts the context frames (the
server uses the ground truth for those slots anyway).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clients.codec import STREAM_RATE
from clients.messages import EpisodeStart
from clients.sdk import Bridge
from server.benchmarks.mtr.suite import Suite, scenario_from_id
from server.core.audio import mix_placed
from server.core.episode import EpisodeCore
from server.engine.clips import open_episode

REPLY_DELAY = 7_200  # 0.3 s after the user (or the barge-in) ends
STOP_AFTER = 9_600  # 0.4 s after the barge-in starts
FADE = 480  # 20 ms


class MTROracle(Bridge):
    name = "mtr-oracle"
    clocks = ("lockstep",)
    accepts_context = True
    wants_reference = True
    blocking = False

    def __init__(self, data_dir: Path, suite: str | None = None):
        super().__init__()
        self.suite_path = Path(suite) if suite else data_dir / "suites" / "mtr-mini"

    def reset(self, episode: EpisodeStart) -> None:
        if episode.reference is None:
            raise RuntimeError("the oracle needs an admin token (reference block)")
        if episode.sample_rate != STREAM_RATE:
            raise RuntimeError("the oracle speaks 24 kHz only")
        suite = Suite.load(self.suite_path)
        scenario = scenario_from_id(suite, episode.reference.scenario_id, episode.reference.condition)
        self.replica: EpisodeCore = open_episode(str(self.suite_path), scenario, suite_hash=None, audio_hash=None)
        rounds = {r.round: r for r in scenario.dialogue.rounds}
        self.replies = {(n, "user"): suite.load_clip(r.assistant.clip) for n, r in rounds.items()}
        self.replies.update({(n, "barge_in"): suite.load_clip(r.barge_in.response.clip)
                             for n, r in rounds.items() if r.barge_in})
        self.speech: list[list] = []  # [start sample, audio]

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        n = self.frame_samples
        item = self.replica.next_room()
        for ev in item.events if item else ():
            if ev.type == "wait.start":
                self.speech.append([ev.t + REPLY_DELAY, self.replies[(ev.data["round"], ev.data["after"])]])
            elif ev.type == "barge_in.start" and "speaking" in ev.data and self.speech:  # a live barge-in
                start, audio = self.speech[-1]
                keep = max(0, min(len(audio), ev.t + STOP_AFTER - start))
                cut = audio[:keep].copy()
                fade = min(FADE, keep)
                cut[keep - fade:] = (cut[keep - fade:] * np.linspace(1, 0, fade)).astype(np.int16)
                self.speech[-1][1] = cut
        frame = mix_placed(self.speech, seq * n, n)
        self.replica.feed_assistant(frame)
        return frame
