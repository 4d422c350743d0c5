"""Audio helpers: frame-exact streaming resampling, compressed chunks, WAV files."""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from clients.codec import STREAM_RATE
from clients.pcm import float_to_pcm16, pcm16_to_float


class FrameResampler:
    """Streaming resampler that turns fixed frames into fixed frames (soxr, causal).

    soxr emits output in blocks, so the stream is padded once at its start with exactly
    the largest shortfall a probe run shows: every call then returns ``out_samples``
    samples and the added delay is the resampler's own latency, nothing more.
    """

    def __init__(self, in_rate: int, out_rate: int, out_samples: int, quality: str = "HQ"):
        self.out_samples = out_samples
        self._same = in_rate == out_rate
        if self._same:
            return
        self._stream = soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32", quality=quality)
        self.delay = _block_shortfall(in_rate, out_rate, out_samples, quality)
        self._buf = np.zeros(self.delay, dtype=np.float32)

    def __call__(self, pcm: np.ndarray) -> np.ndarray:
        if self._same:
            return pcm.astype(np.int16, copy=False)
        self._buf = np.concatenate([self._buf, self._stream.resample_chunk(pcm16_to_float(pcm))])
        out, self._buf = self._buf[: self.out_samples], self._buf[self.out_samples :]
        if len(out) < self.out_samples:  # not seen in probes; keeps the frame size exact regardless
            out = np.pad(out, (0, self.out_samples - len(out)))
        return float_to_pcm16(out)


@lru_cache(maxsize=16)
def _block_shortfall(in_rate: int, out_rate: int, out_samples: int, quality: str) -> int:
    """Largest lag of soxr's block output behind the ideal frame count (probe on zeros)."""
    probe = soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32", quality=quality)
    zeros = np.zeros(out_samples * in_rate // out_rate, np.float32)
    have = shortfall = 0
    for k in range(1, 400):
        have += len(probe.resample_chunk(zeros))
        shortfall = max(shortfall, k * out_samples - have)
    return shortfall


_SCRATCH = "/dev/shm" if Path("/dev/shm").is_dir() else None  # encode_flac's files; None: the system's temporary directory


def encode_flac(pcm: np.ndarray, rate: int = STREAM_RATE) -> bytes:
    """FLAC bytes of 16-bit mono ``pcm`` at ``rate`` Hz (how recorded audio chunks are stored, §8).

    Encoded into an unnamed temporary file (in memory where /dev/shm is), not a BytesIO: with a
    file object libsndfile hands every block it writes back to Python, taking the GIL each time,
    and a server encodes in a thread beside its event loop; with a file descriptor it writes on its
    own (docs/benchmarks.md "Recording")."""
    with tempfile.TemporaryFile(dir=_SCRATCH) as f:
        with sf.SoundFile(f.fileno(), "w", rate, 1, "PCM_16", format="FLAC", closefd=False) as out:
            out.write(pcm.astype(np.int16, copy=False))
        f.seek(0)
        return f.read()


def decode_audio(data: bytes) -> np.ndarray:
    """The int16 samples of an encoded audio file or chunk (FLAC, WAV: whatever soundfile reads)."""
    pcm, _ = sf.read(io.BytesIO(data), dtype="int16")
    return pcm


def write_wav(path: Path, pcm: np.ndarray, rate: int = STREAM_RATE) -> None:
    """Write ``pcm`` as a 16-bit WAV file at ``rate`` Hz (24 kHz unless told otherwise)."""
    sf.write(str(path), pcm.astype(np.int16, copy=False), rate, subtype="PCM_16")


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """The int16 samples of an audio file and its sample rate in Hz."""
    pcm, rate = sf.read(str(path), dtype="int16", always_2d=False)
    return pcm, rate


def mix_placed(items: Iterable[tuple[int, np.ndarray]], start: int, n: int) -> np.ndarray:
    """Samples ``[start, start + n)`` of a track made of clips placed at stream times: each item is
    (its start sample, int16 audio); overlaps add up, clipped to int16; silence elsewhere."""
    out = np.zeros(n, dtype=np.int32)
    for at, audio in items:
        lo, hi = max(start, at), min(start + n, at + len(audio))
        if lo < hi:
            out[lo - start : hi - start] += audio[lo - at : hi - at]
    return np.clip(out, -32768, 32767).astype(np.int16)
