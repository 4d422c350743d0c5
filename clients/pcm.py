"""16-bit PCM and float audio: the one conversion each way (full scale 32768, as the wire's int16).

``pcm16_to_float`` maps int16 to float32 in [-1, 1) exactly (a division by a power of two);
``float_to_pcm16`` rounds float audio back to int16, clipping what overshoots full scale (resampling
can). The offline voices keep a recipe of their own (``server.tts.base.float_to_int16``, scale 32767):
it is part of every cached clip's identity.
"""

from __future__ import annotations

import numpy as np

FULL_SCALE = 32768.0
_INV_FULL_SCALE = np.float32(1.0 / FULL_SCALE)


def pcm16_to_float(pcm: np.ndarray) -> np.ndarray:
    """int16 samples as float32 in [-1, 1)."""
    return np.asarray(pcm).astype(np.float32) * _INV_FULL_SCALE


def float_to_pcm16(x: np.ndarray) -> np.ndarray:
    """Float audio (full scale ±1) as int16, rounded and clipped."""
    return np.clip(np.round(np.asarray(x, dtype=np.float32) * FULL_SCALE), -32768, 32767).astype(np.int16)
