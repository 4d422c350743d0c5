"""The broadcast guard: tells a TV/radio voice from a person in the room by its spectrum, pure.

**Off by default** (``broadcast_guard=on`` turns it on; :data:`server.cascade.defaults.BROADCAST_GUARD`):
its threshold was set on the project's own voiced suite, whose broadcast clips pass through the
project's own 300–3400 Hz filter (:data:`server.benchmarks.mtr.dataset.voices.BAND_HZ`), so with it on
the cascade partly reads the generator rather than the room; no published voice agent filters
voices this way. It stays as a named option to measure what such a guard buys.

A broadcast voice reaches the room through a small loudspeaker and a transmission band (roughly
the telephone band, 300–3400 Hz): next to nothing of it lies below :data:`LOW_HZ`, where a talker's
voice close by has its fundamental and the first harmonics. :func:`band_limited` says whether the
start of an utterance looks like that: its share of energy below ``LOW_HZ`` under
:data:`LOW_SHARE`. A heuristic with known limits (docs/bridges.md "cascade"): a band-limited voice
is taken for a broadcast whoever speaks (a user on a poor phone line too), and a broadcast with its
low band intact is taken for a person; a third person in the room is never told from the user (the
cascade has no speaker identity).
"""

from __future__ import annotations

import numpy as np

from server.core.timebase import STREAM_RATE

LOW_HZ = 250
#: measured on the voiced mtr-mini suite (docs/bridges.md): the user's and listener's clips put
#: 4–57 % of their energy below LOW_HZ, the broadcast clip 0.02 %
LOW_SHARE = 0.01
MIN_S = 0.25  # judged on at least this much audio
JUDGE_S = 1.0  # and on the utterance's first second only


def band_limited(pcm: np.ndarray, rate: int = STREAM_RATE) -> bool:
    """Does this audio (the start of an utterance) sound band-limited like a broadcast?"""
    x = np.asarray(pcm, dtype=np.float64)
    if len(x) < MIN_S * rate:
        return False
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x)))) ** 2
    total = float(spectrum.sum())
    if total <= 0.0:
        return False
    freqs = np.fft.rfftfreq(len(x), 1.0 / rate)
    return float(spectrum[freqs < LOW_HZ].sum()) / total < LOW_SHARE
