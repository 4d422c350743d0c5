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

The model's code comes with the checkpoint (``trust_remote_code``): ``AutoModel.from_pretrained``,
``init_tts()``, ``as_duplex()``; per episode ``prepare(prefix_system_prompt,
suffix_system_prompt, ref_audio)`` is the fresh state. The text system prompt is empty unless the
bridge is started with ``instructions`` / ``instructions_file`` (recorded in the attempt's stats):
every model gets the duty as the spoken preamble only. ``ref_audio`` (a WAV, resampled to 16 kHz)
sets the voice.

Teacher forcing is not offered (``accepts_context`` false): the duplex interface has no call that
takes audio as the model's own past output.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clients.errors import ModelMissingPackage
from clients.pcm import float_to_pcm16
from model_bridges import register
from model_bridges.inprocess import InProcessBridge, bad_checkpoint, resolve_checkpoint, torch_dtype
from model_bridges.playout import PlayoutBuffer, Rechunker, opt_int

IN_RATE = 16_000


@register("minicpm-o")
class MiniCPMODuplex(InProcessBridge):
    """Options: ``checkpoint`` (directory or hub id, e.g. ``openbmb/MiniCPM-o-4_5`` in the local hub
    cache), ``device``, ``dtype``, ``seed``, ``chunk_ms`` (default 1000), ``ref_audio`` (a WAV for
    the voice), ``instructions`` / ``instructions_file`` (an explicit text system prompt),
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
        self.ref_audio = None
        if self.ref_audio_path:
            import soundfile as sf
            import soxr

            x, rate = sf.read(self.ref_audio_path, dtype="float32", always_2d=True)
            self.ref_audio = soxr.resample(x[:, 0], rate, IN_RATE).astype(np.float32)
        self.chunk_samples = IN_RATE * self.chunk_ms // 1000

    def describe(self) -> dict[str, Any]:
        return {"chunk_ms": self.chunk_ms, "input_rate": IN_RATE}

    def fresh_state(self) -> None:
        self.duplex.prepare(prefix_system_prompt=self.text_prompt or "", suffix_system_prompt="",
                            ref_audio=self.ref_audio)
        self.rechunk = Rechunker(self.chunk_samples, self.sample_rate, IN_RATE)
        self._slot = 0
        self.playout = PlayoutBuffer(self.frame_samples, self.sample_rate, clock=lambda: self._slot * 0.08)
        self.turn, self.chunks = 0, 0

    def compute(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        self._slot = seq
        for chunk in self.rechunk.push(room):
            self.chunks += 1
            self.duplex.streaming_prefill(audio_waveform=chunk)
            result = self.duplex.streaming_generate()
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
