"""Voices of an MTR suite's roles, and the TV/radio sound of the ``broadcast`` role.

The roles take the engine's fixed voices (``server.tts.default_voices``), so a voice id means
the same thing in both benchmarks:

| role | speaker | piper | espeak-ng |
|---|---|---|---|
| ``user`` | A | ``piper:joe@0.84`` (lowest) | ``espeak:en-us+m3`` |
| ``assistant`` | C | ``piper:joe@1.19`` (higher) | ``espeak:en-us+f2`` |
| ``third`` | D | ``piper:joe@1.41`` (highest) | ``espeak:en-us+f4`` |
| ``broadcast`` | B | ``piper:joe@1.0`` + :func:`broadcast_filter` | ``espeak:en-us+m5`` + the filter |

The backchannels and the barge-in are the user's; the ground-truth answers the assistant's.
"""

from __future__ import annotations

import numpy as np

from server.benchmarks.mtr.suite import ROLES
from server.tts import OUTPUT_RATE, default_voices, float_to_int16

ROLE_SPEAKER: dict[str, str] = {"user": "A", "assistant": "C", "third": "D", "broadcast": "B"}
assert set(ROLE_SPEAKER) == set(ROLES)

#: the broadcast sound: telephone/TV-speaker band and a light compressor
BAND_HZ = (300.0, 3400.0)
BAND_ORDER = 6  # Butterworth, run forwards and backwards (zero phase, 12th order in effect)
BAND_PAD_S = 0.1
COMPRESS_THRESHOLD_DB = -18.0  # relative to the clip's peak
COMPRESS_RATIO = 2.5
COMPRESS_FRAME_S = 0.01


def role_voices(engine_name: str) -> dict[str, str]:
    """Role -> voice id of an engine (TTSUnavailable for an unknown engine)."""
    voices = default_voices(engine_name)
    return {role: voices[speaker] for role, speaker in ROLE_SPEAKER.items()}


def role_of_part(part: str, background_kind: str | None = None) -> str:
    """The role that speaks a part of a round (``Round.clips`` keys without the round)."""
    if part in ("assistant", "barge_in_response"):
        return "assistant"
    if part == "background":
        return "third" if background_kind == "speaker" else "broadcast"
    return "user"  # user, continuation, barge_in, backchannels


def _compress(x: np.ndarray, rate: int) -> np.ndarray:
    """A light static compressor: frame RMS above the threshold is reduced by the ratio; the
    gain is interpolated between frame centres (no clicks)."""
    peak = float(np.max(np.abs(x))) if len(x) else 0.0
    n = max(1, int(round(COMPRESS_FRAME_S * rate)))
    frames = len(x) // n
    if peak <= 0.0 or frames < 2:
        return x
    rms = np.sqrt(np.mean(x[: frames * n].reshape(frames, n) ** 2, axis=1)) + 1e-12
    level_db = 20.0 * np.log10(rms / peak)
    over = np.maximum(0.0, level_db - COMPRESS_THRESHOLD_DB)
    gain = 10.0 ** (-over * (1.0 - 1.0 / COMPRESS_RATIO) / 20.0)
    centres = (np.arange(frames) + 0.5) * n
    return x * np.interp(np.arange(len(x)), centres, gain)


def broadcast_filter(audio: np.ndarray, rate: int = OUTPUT_RATE) -> np.ndarray:
    """A TV/radio-like version of a clip: lightly compressed, then band-limited to
    :data:`BAND_HZ`; same length, int16, peak restored to the input's. Pure."""
    from scipy.signal import butter, sosfiltfilt

    x = np.asarray(audio, dtype=np.float64) / 32767.0
    if x.ndim != 1:
        raise ValueError("broadcast_filter takes mono audio")
    peak_in = float(np.max(np.abs(x))) if len(x) else 0.0
    if peak_in == 0.0 or len(x) < 64:
        return np.asarray(audio, dtype=np.int16).copy()
    y = _compress(x, rate)
    sos = butter(BAND_ORDER, BAND_HZ, btype="bandpass", fs=rate, output="sos")
    pad = int(BAND_PAD_S * rate)  # silence either side: the filter's start-up stays outside the clip
    y = sosfiltfilt(sos, np.pad(y, pad), padtype=None)[pad: pad + len(x)]
    peak_out = float(np.max(np.abs(y)))
    if peak_out > 0:
        y *= peak_in / peak_out
    return float_to_int16(y)
