"""The in-process ``minicpm-o`` bridge against a test double of MiniCPM-o 4.5's duplex interface.

The double has the exact call signatures of the real API (``init_tts()``, ``as_duplex()``,
``prepare(prefix_system_prompt, suffix_system_prompt, ref_audio)``, ``streaming_prefill(
audio_waveform)``, ``streaming_generate()`` → ``{is_listen, text, audio_waveform, end_of_turn}``)
and a scripted behaviour; it is not the model. Untested here: ``MiniCPMODuplex.load_model`` (the
checkpoint's remote code through ``AutoModel.from_pretrained(..., trust_remote_code=True)``), which
needs the real weights on a GPU host (docs/bridges.md)."""

from __future__ import annotations

import numpy as np
import pytest

from clients.messages import EpisodeStart
from model_bridges.minicpm_duplex import MiniCPMODuplex

FRAME = 1920
SPEECH_S = 1.5


class DuplexDouble:
    """Listens until a chunk is loud, then answers with SPEECH_S of a tone over the next chunks."""

    def __init__(self):
        self.calls: list[str] = []

    def prepare(self, prefix_system_prompt: str, suffix_system_prompt: str, ref_audio=None, **_):
        self.calls.append(f"prepare:{prefix_system_prompt}")
        self.heard, self.left, self.chunk = False, 0, None

    def streaming_prefill(self, audio_waveform):
        assert audio_waveform.dtype == np.float32 and audio_waveform.ndim == 1
        self.chunk = audio_waveform
        self.calls.append(f"prefill:{len(audio_waveform)}")

    def streaming_generate(self, **_):
        loud = float(np.abs(self.chunk).max()) > 0.05
        if loud and not self.heard:
            self.heard, self.left = True, int(SPEECH_S * 24000)
        if self.left <= 0:
            return {"is_listen": True, "text": "", "audio_waveform": None, "end_of_turn": False}
        n = min(self.left, 24000)
        self.left -= n
        t = np.arange(n) / 24000
        return {"is_listen": False, "text": "yes", "audio_waveform": (0.3 * np.sin(2 * np.pi * 300 * t)).astype(
            np.float32), "end_of_turn": self.left == 0}


class ModelDouble:
    def init_tts(self):
        pass

    def as_duplex(self):
        return DuplexDouble()


class OnDouble(MiniCPMODuplex):
    def load_model(self, directory):
        return ModelDouble()


def run(bridge, room):
    bridge.reset(EpisodeStart(episode_id="e", clock="lockstep", sample_rate=24000, frame_samples=FRAME))
    out = [bridge.step(s, room[s * FRAME:(s + 1) * FRAME]) for s in range(len(room) // FRAME)]
    return np.concatenate([np.zeros(FRAME, np.int16) if o is None else o for o in out])


@pytest.fixture
def bridge(tmp_path):
    return OnDouble(checkpoint=str(tmp_path), warmup_frames="2")


def test_chunks_of_one_second_and_playout_from_the_completing_slot(bridge):
    room = np.zeros(75 * FRAME, np.int16)  # 6 s
    room[int(2.2 * 24000):int(2.6 * 24000)] = 12000  # loud in the third chunk (2 s … 3 s)
    out = run(bridge, room)
    assert len(out) == len(room)
    d = bridge.duplex
    assert [c for c in d.calls if c.startswith("prefill")] == ["prefill:16000"] * 5  # 5 full chunks of 6 s
    # the third chunk completes with room frame 37 (2.96 … 3.04 s); its answer plays from that frame's
    # slot on, SPEECH_S long, then the turn ends
    loud = np.flatnonzero(np.abs(out.reshape(-1, FRAME)).max(axis=1) > 1000)
    assert loud[0] == 37 and len(loud) == int(np.ceil(SPEECH_S / 0.08))  # all of it, the last frame padded
    # the first second of speech ends mid-frame: that half frame waits for the next chunk (one underrun)
    assert loud[-1] - loud[0] + 1 == len(loud) + 1 and bridge.playout.stats()["underruns"] == 1


def test_fresh_state_and_text_prompt_only_as_an_option(bridge, tmp_path):
    room = np.zeros(40 * FRAME, np.int16)
    room[FRAME * 5:FRAME * 8] = 12000
    first = run(bridge, room)
    assert run(bridge, room).tobytes() == first.tobytes()
    assert bridge.duplex.calls.count("prepare:") == 3  # warm-up, then one per episode
    records = [m["data"]["instructions"] for m in bridge._outbox if "instructions" in m.get("data", {})]
    assert records and all(r["source"] == "none" for r in records)
    prompted = OnDouble(checkpoint=str(tmp_path), warmup_frames="0", instructions="You are Aria.")
    run(prompted, room)
    assert prompted.duplex.calls.count("prepare:You are Aria.") == 2 and "prepare:" not in prompted.duplex.calls
    rec = [m["data"]["instructions"] for m in prompted._outbox if "instructions" in m.get("data", {})][-1]
    assert rec["source"] == "option" and rec["text"] == "You are Aria."
