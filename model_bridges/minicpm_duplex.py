"""``minicpm-o``: the duplex interface of MiniCPM-o 4.5, run in this process through transformers.

MiniCPM-o decides once per chunk (1 s by default), not once per 80 ms frame. The bridge therefore
buffers the room stream: room frames are resampled to 16 kHz (soxr, streaming, causal) and cut
into chunks of exactly ``chunk_ms``; each full chunk goes to ``streaming_prefill`` and then
``streaming_generate``, whose speech (24 kHz) goes into the playout buffer
(:class:`model_bridges.playout.PlayoutBuffer`) and plays from the slot of the room frame that
completed the chunk on, one 80 ms frame per slot, as a loudspeaker would play it. So an answer starts at least one chunk after the
room speech it answers (the chunk must be complete), plus the model's compute time in realtime:
about 1 s of latency that is the model's design, not the bridge's. A turn's last partial frame
is played padded when the model says ``end_of_turn``.

The model's code comes with the checkpoint (``trust_remote_code``). The calls and their order are
those of OpenBMB's own code; references are to ``OpenBMB/MiniCPM-o`` at 3ec4cb0e (README.md) and
to ``OpenBMB/minicpm-o-4_5-pytorch-simple-demo`` at c7e16605 (the demo; ``MiniCPMO45/`` holds the
model code the checkpoint ships):

- load: ``AutoModel.from_pretrained(…, trust_remote_code=True)``, ``init_tts()``, ``as_duplex()``
  (README.md:1550-1567);
- per episode, the fresh state: ``prepare(prefix_system_prompt, suffix_system_prompt, ref_audio,
  prompt_wav_path)`` (MiniCPMO45/modeling_minicpmo.py:2561-2567). The system turn is framed as the
  demo frames it: prefix ``<|im_start|>system\n{text}\n<|audio_start|>``, the reference voice
  (16 kHz) as audio embeddings, suffix ``<|audio_end|><|im_end|>`` (demo core/processors/unified.py:
  879-882, modeling_minicpmo_unified.py:657-662), with the demo's default text ``Streaming Omni
  Conversation.`` (core/processors/unified.py:879-880) unless ``instructions`` is given;
- the **TTS prompt**: ``prompt_wav_path`` is the same reference WAV (core/processors/unified.py:894,
  README.md:1612). ``prepare`` initialises the token-to-wave cache only when it is given
  (modeling_minicpmo.py:2579-2581) and without that cache ``_generate_waveform_from_tokens`` returns
  ``None`` (modeling_minicpmo.py:3416-3418): the model would never make a sound. The reference WAV
  is ``ref_audio=WAV``, by default ``assets/HT_ref_audio.wav`` in the checkpoint directory (the
  file OpenBMB's README reads, README.md:1600; the demo's configured default,
  ``assets/ref_audio/ref_minicpm_signature.wav`` of the demo repository, config.py:65, is used
  when the checkpoint has that one instead). No reference voice is an error at start, not a
  silent run;
- per chunk: ``streaming_prefill(audio_waveform=…)``, ``streaming_generate(prompt_wav_path=…)``
  (README.md:1628-1639), then ``finalize_unit()`` where the model code has it: the unified model
  defers the unit's terminator to it and its next ``streaming_prefill`` raises until it is called
  (modeling_minicpmo_unified.py:4574-4579, 4970, 5263); the checkpoint's ``MiniCPMODuplex``
  finalises inside ``streaming_generate`` and has no such call.

Teacher forcing is not offered (``accepts_context`` false): the model's own past output enters
its context as the text tokens it generated, never as audio, and the speech is synthesised from
those tokens. The words of a ground-truth history do come with the episode
(``episode.start.context_turns``, docs/protocol.md §5.2), but the duplex interface cannot take
given tokens as the model's own: ``streaming_generate`` samples each token and feeds it to its
decoder within one call, with the unit's ``<|speak|>``/terminator tokens, ``total_ids``/``res_ids``,
``current_turn_ended``, the sliding window's ``register_unit_end`` and the TTS state
(MiniCPMO45/modeling_minicpmo.py:3078-3160 of the demo), and how many words go into each 1 s unit
is the model's choice. Forcing would be a second copy of that loop against private state.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clients.errors import ModelMissingPackage, ModelMissingWeights
from clients.pcm import float_to_pcm16
from model_bridges import register
from model_bridges.inprocess import InProcessBridge, bad_checkpoint, resolve_checkpoint, torch_dtype
from model_bridges.playout import PlayoutBuffer, Rechunker, opt_int

IN_RATE = 16_000
# the system turn as OpenBMB's demo frames it (core/processors/unified.py:879-882)
SYSTEM_PREFIX, SYSTEM_SUFFIX = "<|im_start|>system\n{text}\n<|audio_start|>", "<|audio_end|><|im_end|>"
DEFAULT_SYSTEM_TEXT = "Streaming Omni Conversation."
# reference voices a checkpoint directory may hold, in order (README.md:1600; demo config.py:65)
DEFAULT_REF_AUDIO = ("assets/HT_ref_audio.wav", "assets/ref_audio/ref_minicpm_signature.wav")


@register("minicpm-o")
class MiniCPMODuplex(InProcessBridge):
    """Options: ``checkpoint`` (directory or hub id, e.g. ``openbmb/MiniCPM-o-4_5`` in the local hub
    cache), ``device``, ``dtype``, ``seed``, ``chunk_ms`` (default 1000), ``ref_audio`` (the reference
    voice and TTS prompt, a WAV; default ``assets/HT_ref_audio.wav`` in the checkpoint),
    ``instructions`` / ``instructions_file`` (the text of the system turn instead of the demo's),
    ``model_name`` (default ``minicpm-o``), ``warmup_frames``, ``allow_download``."""

    name = "minicpm-o"
    family = "minicpm-o"
    takes_text_prompt = True

    def __init__(self, checkpoint: str = "", **options: Any):
        super().__init__(checkpoint, **options)
        self.chunk_ms = opt_int(self.options, "chunk_ms", 1000)
        self.ref_audio_path = self.options.pop("ref_audio", None)
        self.start()

    def load_model(self, directory):
        """The model object with its duplex interface (the checkpoint's own code)."""
        try:
            from transformers import AutoModel
        except ImportError:
            raise ModelMissingPackage("minicpm-o needs transformers: pip install 'duplex-mpe[minicpm]'") from None
        try:
            model = AutoModel.from_pretrained(str(directory), trust_remote_code=True,
                                              torch_dtype=torch_dtype(self.dtype_name), local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise bad_checkpoint(f"minicpm-o: loading {directory}", exc) from None
        model = model.to(self.device).eval()
        model.init_tts()
        return model

    def load(self) -> None:
        directory = resolve_checkpoint(self.checkpoint, self.allow_download)
        self.model = self.load_model(directory)
        self.duplex = self.model.as_duplex()
        self.tts_prompt = self.reference_voice(directory)
        import soundfile as sf
        import soxr

        x, rate = sf.read(self.tts_prompt, dtype="float32", always_2d=True)
        self.ref_audio = soxr.resample(x[:, 0], rate, IN_RATE).astype(np.float32)
        self.chunk_samples = IN_RATE * self.chunk_ms // 1000

    def reference_voice(self, directory) -> str:
        """The reference WAV: the ``ref_audio`` option, else the first of DEFAULT_REF_AUDIO in the checkpoint."""
        from pathlib import Path

        if self.ref_audio_path:
            path = Path(self.ref_audio_path).expanduser()
            if not path.is_file():
                raise ModelMissingWeights(f"minicpm-o: ref_audio={self.ref_audio_path!r} is not a file")
            return str(path)
        for name in DEFAULT_REF_AUDIO:
            if (Path(directory) / name).is_file():
                return str(Path(directory) / name)
        raise ModelMissingWeights(f"minicpm-o: no reference voice: give ref_audio=WAV or put {DEFAULT_REF_AUDIO[0]} "
                                  f"in {directory} (without a TTS prompt the model makes no sound)")

    def describe(self) -> dict[str, Any]:
        return {"chunk_ms": self.chunk_ms, "input_rate": IN_RATE, "tts_prompt": self.tts_prompt,
                "system_text": self.text_prompt or DEFAULT_SYSTEM_TEXT}

    def fresh_state(self) -> None:
        self.duplex.prepare(prefix_system_prompt=SYSTEM_PREFIX.format(text=self.text_prompt or DEFAULT_SYSTEM_TEXT),
                            suffix_system_prompt=SYSTEM_SUFFIX, ref_audio=self.ref_audio,
                            prompt_wav_path=self.tts_prompt)
        self.rechunk = Rechunker(self.chunk_samples, self.sample_rate, IN_RATE)
        self._slot = 0
        self.playout = PlayoutBuffer(self.frame_samples, self.sample_rate, clock=lambda: self._slot * 0.08)
        self.turn, self.chunks = 0, 0

    def compute(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        self._slot = seq
        for chunk in self.rechunk.push(room):
            self.chunks += 1
            self.duplex.streaming_prefill(audio_waveform=chunk)
            result = self.duplex.streaming_generate(prompt_wav_path=self.tts_prompt)
            if getattr(self.duplex, "needs_finalize", False):
                self.duplex.finalize_unit()
            item = f"turn{self.turn}"
            if result.get("text"):
                self.emit_text(seq, str(result["text"]))
            wave = result.get("audio_waveform")
            if not result.get("is_listen", True) and wave is not None and len(wave):
                self.playout.push(float_to_pcm16(np.asarray(wave, dtype=np.float32).reshape(-1)), item)
            if result.get("end_of_turn"):
                self.playout.end_item(item)
                self.turn += 1
        return self.playout.pull()

    def model_stats(self) -> dict[str, Any]:
        out = super().model_stats()
        if hasattr(self, "playout"):
            out |= {"chunks": self.chunks, "playout": self.playout.stats()}
        return out
