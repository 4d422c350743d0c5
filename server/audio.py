"""Audio helpers: frame-exact streaming resampling, compressed chunks, WAV files."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr


class FrameResampler:
    """Streaming resampler that turns fixed frames into fixed frames (soxr, causal).

    Output is delayed by the resampler's latency; the first frames are padded with
    leading zeros so every call returns exactly ``out_samples`` samples.
    """

    def __init__(self, in_rate: int, out_rate: int, out_samples: int):
        self.out_samples = out_samples
        self._same = in_rate == out_rate
        self._stream = None if self._same else soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32")
        self._buf = np.zeros(0, dtype=np.float32)
        self._primed = False

    def __call__(self, pcm: np.ndarray) -> np.ndarray:
        if self._same:
            return pcm.astype(np.int16, copy=False)
        y = self._stream.resample_chunk(pcm.astype(np.float32) / 32768.0)
        self._buf = np.concatenate([self._buf, y])
        if not self._primed:
            # Pad once at the start (the resampler's latency plus a small margin) so that
            # we never run dry afterwards.
            deficit = max(0, self.out_samples - len(self._buf)) + self.out_samples // 40
            self._buf = np.concatenate([np.zeros(deficit, np.float32), self._buf])
            self._primed = True
        out, self._buf = self._buf[: self.out_samples], self._buf[self.out_samples :]
        if len(out) < self.out_samples:  # cannot happen once primed, kept for safety
            out = np.pad(out, (0, self.out_samples - len(out)))
        return np.clip(np.round(out * 32768.0), -32768, 32767).astype(np.int16)


def encode_flac(pcm: np.ndarray, rate: int = 24_000) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, pcm.astype(np.int16, copy=False), rate, format="FLAC", subtype="PCM_16")
    return buf.getvalue()


def decode_audio(data: bytes) -> np.ndarray:
    pcm, _ = sf.read(io.BytesIO(data), dtype="int16")
    return pcm


def write_wav(path: Path, pcm: np.ndarray, rate: int = 24_000) -> None:
    sf.write(str(path), pcm.astype(np.int16, copy=False), rate, subtype="PCM_16")


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    pcm, rate = sf.read(str(path), dtype="int16", always_2d=False)
    return pcm, rate
