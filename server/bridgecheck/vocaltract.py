"""The apparent vocal-tract length of recorded speech, from its formant spacing: how the bridge
check tells speech played at the wrong rate (a bridge that announces one sample rate and sends
another) from speech played right.

Played at ``k`` times its rate, speech has every formant scaled by ``k``; a human vocal tract
cannot be made ``1/k`` times as long. The tract is modelled as a uniform tube closed at the
glottis and open at the lips, whose resonances are ``F_i = (2i - 1) c / (4 L)``: evenly spaced by
``ΔF = c / (2 L)``. Per voiced frame, ``ΔF`` is the slope of the regression of ``F_1..F_4`` on
``(2i - 1) / 2`` through the origin (the formant-spacing regression of Reby & McComb 2003), and
the apparent length is ``L = c / (2 ΔF)``.

``c = 35,000 cm/s``, the speed of sound in the warm, moist air of the vocal tract as the
acoustic-phonetics textbooks round it (K. Johnson, Acoustic and Auditory Phonetics, the tube
formula; the same figure gives F1..F3 = 500, 1500, 2500 Hz for a 17.5 cm tube).

Formants come from Praat's Burg LPC tracker (``Sound: To Formant (burg)``, through
``praat-parselmouth``) with Praat's standard settings: 5 formants, a 25 ms window, pre-emphasis from
50 Hz. The ceiling ("maximum formant") is where Praat's manual puts it for a voice (FAQ: Formant
analysis): 5000 Hz for a male voice, 5500 Hz for a female one: the tracker fits five resonances
under it whatever the sound, so with a fixed ceiling the apparent length is drawn towards the one
the ceiling implies (a 17.5 cm tube at 5000 Hz) and speech played at 2/3 or 3/2 of its rate is
measured far too close to a normal voice. The ceiling is therefore swept as Praat's FormantPath
does (``5000 Hz * e^(0.05 j)``), far enough to cover both standard ceilings scaled by 2/3 and by
3/2, and the ceiling kept is the one under which the tracked F1..F4 are sharpest (smallest median
bandwidth over the voiced frames): a pole the LPC places where the spectrum has no resonance, or
one that spans two, is broad. (A first choice, the ceiling whose formants fit the uniform tube
best, picked wrong ceilings on the piper voice; docs/bridges.md has the measurements.)

Only voiced frames count (Praat's pitch tracker finds a pitch there), inside the segments the
live speech detector marked as speech.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SPEED_OF_SOUND_CM_S = 35_000.0
#: Praat's FormantPath sweep: ceilings ``5000 Hz * e^(0.05 j)``; j from -9 to 10 spans 3188-8244 Hz,
#: Praat's male and female ceilings scaled by 2/3 (3333, 3667 Hz) up to scaled by 3/2 (7500, 8250 Hz)
CEILINGS_HZ = tuple(round(5000.0 * float(np.exp(0.05 * j)), 1) for j in range(-9, 11))
N_FORMANTS = 4  # F1..F4 enter the regression
TIME_STEP_S = 0.01
#: voiced frames: Praat's pitch tracker, its ceiling (500 Hz) but a floor of 40 Hz, under the
#: 75 Hz default, so that a low male voice played at 2/3 of its rate (about 60 Hz) is still voiced
PITCH_FLOOR_HZ, PITCH_CEILING_HZ = 40.0, 500.0


def formant_spacing(formants: Sequence[float]) -> float:
    """ΔF: the least-squares slope of ``F_i`` on ``(2i - 1) / 2`` through the origin, i = 1.."""
    f = np.asarray(formants, dtype=float)
    x = (2 * np.arange(1, len(f) + 1) - 1) / 2
    return float(x @ f / (x @ x))


def tract_length_cm(spacing_hz: float) -> float:
    """The uniform tube's length for a formant spacing: ``c / (2 ΔF)``."""
    return SPEED_OF_SOUND_CM_S / (2 * spacing_hz)


@dataclass(frozen=True)
class TubeFit:
    """One voiced frame tracked under one ceiling: its apparent tract length and the mean bandwidth
    of its F1..F4."""

    length_cm: float
    bandwidth_hz: float


@dataclass(frozen=True)
class TractFrames:
    """The voiced frames of some speech, tracked under every ceiling of :data:`CEILINGS_HZ`
    (``by_ceiling[i]`` under ``CEILINGS_HZ[i]``; frames where F1..F4 were not all found are left out)."""

    voiced: int  # the voiced frames inside the spans, tracked or not
    by_ceiling: tuple[tuple[TubeFit, ...], ...]


@dataclass(frozen=True)
class TractEstimate:
    """The apparent vocal-tract length of some speech: the median over its voiced frames under the
    ceiling whose formants are sharpest (the smallest median bandwidth)."""

    length_cm: float
    ceiling_hz: float
    frames: int

    @property
    def seconds(self) -> float:
        """Of the frames it rests on."""
        return self.frames * TIME_STEP_S


def estimate(frames: Sequence[TractFrames]) -> TractEstimate | None:
    """Pool the frames of several recordings of one voice; None when no frame was tracked."""
    pooled = [[f for fr in frames for f in fr.by_ceiling[i]] for i in range(len(CEILINGS_HZ))] if frames else []
    fitted = [(float(np.median([f.bandwidth_hz for f in fits])), i) for i, fits in enumerate(pooled) if fits]
    if not fitted:
        return None
    _, best = min(fitted)
    return TractEstimate(length_cm=float(np.median([f.length_cm for f in pooled[best]])),
                         ceiling_hz=CEILINGS_HZ[best], frames=len(pooled[best]))


def tract_frames(track: np.ndarray, rate: int, spans: Sequence[tuple[int, int]]) -> TractFrames:
    """Track every voiced frame of ``track`` (int16 samples at ``rate``) inside ``spans`` (sample
    ranges: the detector's speech segments) under every ceiling."""
    import parselmouth

    x = np.asarray(track, dtype=np.float64) / 32768.0
    voiced = 0
    fits: list[list[TubeFit]] = [[] for _ in CEILINGS_HZ]
    for start, end in spans:
        piece = x[max(0, start):min(len(x), end)]
        if len(piece) < int(0.1 * rate):
            continue
        snd = parselmouth.Sound(piece, sampling_frequency=rate)
        pitch = snd.to_pitch(time_step=TIME_STEP_S, pitch_floor=PITCH_FLOOR_HZ, pitch_ceiling=PITCH_CEILING_HZ)
        times = [t for t in pitch.xs() if pitch.get_value_at_time(t) > 0]  # NaN (unvoiced) compares False
        voiced += len(times)
        for i, ceiling in enumerate(CEILINGS_HZ):
            fm = snd.to_formant_burg(time_step=TIME_STEP_S, max_number_of_formants=5, maximum_formant=ceiling,
                                     window_length=0.025, pre_emphasis_from=50.0)
            for t in times:
                f = np.array([fm.get_value_at_time(n, t) for n in range(1, N_FORMANTS + 1)])
                b = np.array([fm.get_bandwidth_at_time(n, t) for n in range(1, N_FORMANTS + 1)])
                if np.all(np.isfinite(f)) and np.all(np.isfinite(b)):
                    fits[i].append(TubeFit(tract_length_cm(formant_spacing(f)), float(b.mean())))
    return TractFrames(voiced=voiced, by_ceiling=tuple(tuple(f) for f in fits))
