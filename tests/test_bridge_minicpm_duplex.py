"""The in-process ``minicpm-o`` bridge against a test double of MiniCPM-o 4.5's duplex interface.

The double has the exact call signatures of the real API (``init_tts()``, ``as_duplex()``,
``prepare(prefix_system_prompt, suffix_system_prompt, ref_audio, prompt_wav_path)``,
``streaming_prefill(audio_waveform)``, ``streaming_generate(prompt_wav_path)`` → ``{is_listen,
text, audio_waveform, end_of_turn}``, ``finalize_unit()``), the upstream preconditions the bridge
depends on, and a scripted behaviour; it is not the model. The preconditions, from OpenBMB's
``minicpm-o-4_5-pytorch-simple-demo`` at c7e16605 (``MiniCPMO45/``):

- no waveform without a TTS prompt: ``MiniCPMODuplex.prepare`` initialises the token-to-wave cache
  only when ``prompt_wav_path`` is given (modeling_minicpmo.py:2579-2581), and
  ``_generate_waveform_from_tokens`` returns ``None`` while it is not (modeling_minicpmo.py:3416-3418);
- a unit must be finalised: the unified model's ``streaming_prefill`` raises while the previous
  ``streaming_generate`` has not been followed by ``finalize_unit()``
  (modeling_minicpmo_unified.py:4574-4579, ``needs_finalize`` at 4949-4952). Untested here: ``MiniCPMODuplex.load_model`` (the
checkpoint's remote code through ``AutoModel.from_pretrained(..., trust_remote_code=True)``), which
needs the real weights on a GPU host (docs/bridges.md)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from clients.messages import EpisodeStart
from model_bridges.minicpm_duplex import MiniCPMODuplex

# OpenBMB's framing of the system turn (core/processors/unified.py:879-882 of the demo, c7e16605)
SYSTEM_OPEN, SYSTEM_CLOSE, SUFFIX = "<|im_start|>system\n", "\n<|audio_start|>", "<|audio_end|><|im_end|>"
DEFAULT_SYSTEM = "Streaming Omni Conversation."

FRAME = 1920
SPEECH_S = 1.5


class DuplexDouble:
    """Listens until a chunk is loud, then answers with SPEECH_S of a tone over the next chunks."""

    def __init__(self):
        self.calls: list[str] = []
        self._pending_finalize = False

    @property
    def needs_finalize(self) -> bool:  # modeling_minicpmo_unified.py:4949-4952
        return self._pending_finalize

    def prepare(self, prefix_system_prompt=None, suffix_system_prompt=None, ref_audio=None, prompt_wav_path=None):
        self.calls.append(f"prepare:{prefix_system_prompt}")
        self.suffix, self.ref_audio = suffix_system_prompt, ref_audio
        # the token-to-wave cache exists only with a TTS prompt (modeling_minicpmo.py:2579-2581)
        self.token2wav_initialized = bool(prompt_wav_path)
        self.heard, self.left, self.chunk, self._pending_finalize = False, 0, None, False

    def streaming_prefill(self, audio_waveform=None, frame_list=None, text_list=None, max_slice_nums=1,
                          batch_vision_feed=False):
        if self._pending_finalize:  # modeling_minicpmo_unified.py:4574-4579
            raise RuntimeError("streaming_prefill called before finalize_unit()!")
        assert audio_waveform.dtype == np.float32 and audio_waveform.ndim == 1
        self.chunk = audio_waveform
        self.calls.append(f"prefill:{len(audio_waveform)}")

    def streaming_generate(self, prompt_wav_path=None, **_):
        self._pending_finalize = True  # modeling_minicpmo_unified.py:5144 (state kept for finalize_unit)
        loud = float(np.abs(self.chunk).max()) > 0.05
        if loud and not self.heard:
            self.heard, self.left = True, int(SPEECH_S * 24000)
        if self.left <= 0:
            return {"is_listen": True, "text": "", "audio_waveform": None, "end_of_turn": False}
        n = min(self.left, 24000)
        self.left -= n
        t = np.arange(n) / 24000
        wave = (0.3 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)
        # _generate_waveform_from_tokens: None while the cache is not initialised (modeling_minicpmo.py:3416-3418)
        return {"is_listen": False, "text": "yes", "audio_waveform": wave if self.token2wav_initialized else None,
                "end_of_turn": self.left == 0}

    def finalize_unit(self):  # modeling_minicpmo_unified.py:5263
        self._pending_finalize = False


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


def write_ref(directory):
    """A reference voice where OpenBMB's README reads it: ``assets/HT_ref_audio.wav`` (README.md:1600)."""
    (directory / "assets").mkdir(exist_ok=True)
    path = directory / "assets" / "HT_ref_audio.wav"
    sf.write(path, (0.2 * np.sin(2 * np.pi * 220 * np.arange(24000) / 24000)).astype(np.float32), 24000)
    return path


@pytest.fixture
def bridge(tmp_path):
    write_ref(tmp_path)
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
    default = f"{SYSTEM_OPEN}{DEFAULT_SYSTEM}{SYSTEM_CLOSE}"
    assert bridge.duplex.calls.count(f"prepare:{default}") == 3  # warm-up, then one per episode
    records = [m["data"]["instructions"] for m in bridge._outbox if "instructions" in m.get("data", {})]
    assert records and all(r["source"] == "none" for r in records)
    prompted = OnDouble(checkpoint=str(tmp_path), warmup_frames="0", instructions="You are Aria.")
    run(prompted, room)
    aria = f"{SYSTEM_OPEN}You are Aria.{SYSTEM_CLOSE}"
    assert prompted.duplex.calls.count(f"prepare:{aria}") == 2 and f"prepare:{default}" not in prompted.duplex.calls
    rec = [m["data"]["instructions"] for m in prompted._outbox if "instructions" in m.get("data", {})][-1]
    assert rec["source"] == "option" and rec["text"] == "You are Aria."


def test_speaks_with_the_tts_prompt_and_the_system_turn_framed_as_openbmb_does(bridge):
    """Without ``prompt_wav_path`` the real model returns no waveform and without ``finalize_unit``
    the next prefill raises: the double does both, so a bridge that skips either fails here."""
    room = np.zeros(40 * FRAME, np.int16)
    room[FRAME * 5:FRAME * 8] = 12000
    out = run(bridge, room)
    assert np.abs(out).max() > 1000  # the model's speech reached the room
    d = bridge.duplex
    assert d.suffix == SUFFIX and d.ref_audio is not None and d.ref_audio.dtype == np.float32
    assert bridge.model_stats()["tts_prompt"].endswith("HT_ref_audio.wav")


def test_no_reference_voice_is_a_clear_error(tmp_path):
    from clients.errors import ModelMissingWeights

    with pytest.raises(ModelMissingWeights, match="HT_ref_audio.wav"):
        OnDouble(checkpoint=str(tmp_path), warmup_frames="0")
