"""The spread of realtime deadlines over the frame period (server/core/phases.py), on literal times."""

from __future__ import annotations

import pytest

from server.core.phases import FramePhases

P = 0.08


def test_the_first_session_starts_at_once_and_the_next_half_a_period_away():
    phases = FramePhases(P)
    delay, first = phases.reserve(10.03)
    assert delay == 0.0 and first == pytest.approx(0.03)
    delay, second = phases.reserve(10.03)  # same instant: the opposite phase
    assert delay == pytest.approx(0.04) and second == pytest.approx(0.07)
    phases.release(first)
    delay, third = phases.reserve(10.075)  # the middle of the one gap, from 0.07 round to 0.07
    assert third == pytest.approx(0.03) and delay == pytest.approx(0.035)


@pytest.mark.parametrize("k", [1, 2, 3, 6])
def test_sessions_started_together_are_spaced_evenly(k):
    phases = FramePhases(P)
    n = 2 ** k
    got = [phases.reserve(5.0) for _ in range(n)]
    assert all(0.0 <= d < P for d, _ in got)
    assert [round((5.0 + d) % P, 9) for d, _ in got] == [round(p, 9) for _, p in got]  # t0 lands on the phase
    ordered = sorted(p for _, p in got)
    gaps = [b - a for a, b in zip(ordered, ordered[1:] + [ordered[0] + P])]
    assert max(gaps) == pytest.approx(P / n) and min(gaps) == pytest.approx(P / n)


def test_a_released_phase_is_given_again():
    phases = FramePhases(P)
    held = [phases.reserve(0.0)[1] for _ in range(4)]  # 0, 0.04, 0.02, 0.06
    assert sorted(held) == pytest.approx([0.0, 0.02, 0.04, 0.06])
    phases.release(0.02)
    assert phases.reserve(0.0)[1] == pytest.approx(0.02)
    phases.release(held[0])
    phases.release(held[1])
    assert sorted(phases.taken) == pytest.approx([0.02, 0.06])
