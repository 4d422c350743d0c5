"""The rate line's measurement (server/bridgecheck/vocaltract.py) on synthetic vowels whose formants
are known, and its judgement (server/bridgecheck/evaluate.py) on literal tracked frames."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy.signal import lfilter

from server.bridgecheck.evaluate import TRACT_FAIL_CM, TRACT_WARN_CM, Verdict
from server.bridgecheck.vocaltract import (
    CEILINGS_HZ,
    SPEED_OF_SOUND_CM_S,
    TractFrames,
    TubeFit,
    estimate,
    formant_spacing,
    tract_frames,
    tract_length_cm,
)
from tests.support.checks import ANSWERED, attempt, judge

RATE = 24_000


def tube_vowel(length_cm: float, seconds: float = 2.0, f0: float = 110.0, rate: int = RATE) -> np.ndarray:
    """A schwa of a uniform tube ``length_cm`` long: a glottal pulse train (with a little vibrato)
    through five two-pole resonators at ``(2i - 1) c / (4 L)``, 80 Hz bandwidth each; int16."""
    n = int(seconds * rate)
    t = np.arange(n) / rate
    phase = np.cumsum(f0 * (1 + 0.03 * np.sin(2 * np.pi * 5 * t)) / rate)
    x = (np.diff(np.floor(phase), prepend=0) > 0).astype(float)
    x = lfilter([1.0], [1.0, -0.97], x)  # a glottal pulse's spectral tilt
    for i in range(1, 6):
        f = (2 * i - 1) * SPEED_OF_SOUND_CM_S / (4 * length_cm)
        if f >= rate / 2 - 200:
            continue
        r = np.exp(-np.pi * 80 / rate)
        x = lfilter([1 - r], [1, -2 * r * np.cos(2 * np.pi * f / rate), r * r], x)
    return (x / np.abs(x).max() * 12_000).astype(np.int16)


def test_spacing_and_length_of_a_uniform_tube():
    formants = [(2 * i - 1) * SPEED_OF_SOUND_CM_S / (4 * 17.5) for i in range(1, 5)]  # 500, 1500, 2500, 3500
    assert formant_spacing(formants) == pytest.approx(1000.0)
    assert tract_length_cm(1000.0) == pytest.approx(17.5)


@pytest.mark.parametrize("length_cm", [14.0, 17.5])
def test_a_synthetic_vowel_and_the_same_vowel_played_at_the_wrong_rate(length_cm):
    vowel = tube_vowel(length_cm)
    found = estimate([tract_frames(vowel, RATE, [(0, len(vowel))])])
    assert found is not None and found.length_cm == pytest.approx(length_cm, rel=0.08)
    assert found.seconds > 1.5
    # 24 kHz audio announced as 16 kHz: every formant at 2/3, the tract 3/2 as long (and the reverse)
    slow = tube_vowel(length_cm * 1.5, f0=110 * 2 / 3)
    assert estimate([tract_frames(slow, RATE, [(0, len(slow))])]).length_cm == pytest.approx(length_cm * 1.5, rel=0.08)
    fast = tube_vowel(length_cm / 1.5, f0=110 * 1.5)
    assert estimate([tract_frames(fast, RATE, [(0, len(fast))])]).length_cm == pytest.approx(length_cm / 1.5, rel=0.08)


def test_only_speech_inside_the_spans_counts():
    vowel = tube_vowel(17.5, seconds=1.0)
    assert tract_frames(np.zeros(RATE, np.int16), RATE, [(0, RATE)]).voiced == 0
    assert tract_frames(vowel, RATE, []).voiced == 0
    assert estimate([tract_frames(vowel, RATE, [])]) is None


def frames(length_cm: float, seconds: float) -> TractFrames:
    """Literal tracked frames: sharp formants under the ceiling in the middle of the sweep, broad ones elsewhere."""
    n = int(seconds * 100)
    mid = len(CEILINGS_HZ) // 2
    return TractFrames(voiced=n, by_ceiling=tuple(
        tuple(TubeFit(length_cm if i == mid else 17.5, 100.0 if i == mid else 400.0) for _ in range(n))
        for i in range(len(CEILINGS_HZ))))


@pytest.mark.parametrize("length_cm,expected", [
    (17.5, Verdict.passed), (14.0, Verdict.passed), (20.0, Verdict.passed),  # adults, within the estimation error
    (TRACT_FAIL_CM + 0.2, Verdict.failed), (27.0, Verdict.failed),  # 24 kHz sent as 16 kHz: 1.5 x 18 cm
    (TRACT_WARN_CM - 0.2, Verdict.warn), (11.7, Verdict.warn),  # 16 kHz sent as 24 kHz: 2/3 x 17.5 cm
])
def test_rate_judged_from_the_apparent_tract_length(length_cm, expected):
    a = [replace(attempt(episode=e, speech=ANSWERED), tract=frames(length_cm, 1.0)) for e in (0, 1)]
    line = judge(*a).line("rate", "lockstep")
    assert line.verdict == expected, line.detail
    assert f"{length_cm:.1f} cm over 2.00 s" in line.detail
    if expected == Verdict.failed:
        assert "sends audio at a higher rate than the one it announces" in line.advice
        assert "hello.sample_rate" in line.advice
    elif expected == Verdict.warn:
        assert "lower rate than the one it announces" in line.advice
    else:
        assert line.advice == ""


def test_rate_skipped_without_enough_voiced_speech():
    short = [replace(attempt(speech=ANSWERED), tract=frames(27.0, 0.4))]
    line = judge(*short).line("rate", "lockstep")
    assert line.verdict == Verdict.skipped and "0.40 s of voiced speech" in line.detail and "1.00 s" in line.detail
    assert judge(attempt(), attempt(episode=1)).line("rate", "lockstep").verdict == Verdict.skipped
