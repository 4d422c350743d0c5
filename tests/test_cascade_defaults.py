"""The cascade's timing defaults are not fitted to the suites' generators.

Every timing default of the cascade (server/cascade/defaults.py) is listed beside every timing range
the generators draw from, read from the generator modules themselves. A default that lies at a
generator bound or within 10 % above it (just long enough to outwait a generated pause, or to let a
generated backchannel through) fails, unless it is exactly the published value it cites.
"""

from __future__ import annotations

import pytest

from server.benchmarks.mpe import scheduler as mpe_scheduler
from server.benchmarks.mtr.dataset import phrases, timing
from server.cascade import bridge, defaults, turns
from server.cascade.defaults import TIMING, Published

FITTED_MARGIN = 0.10


def generator_bounds_s() -> dict[str, float]:
    """Every bound (seconds) of the generators' timing draws, and the backchannels' estimated lengths."""
    ranges = {
        "mtr barge-in after onset": timing.BARGE_IN_AFTER_S,
        "mtr pause": timing.PAUSE_S,
        "mtr background after onset": timing.BACKGROUND_AFTER_S,
        "mtr first backchannel": timing.BACKCHANNEL_FIRST_S,
        "mtr backchannel gap": timing.BACKCHANNEL_GAP_S,
        "mtr backchannel length (estimated)": (min(map(timing.estimate_s, phrases.BACKCHANNELS)),
                                               max(map(timing.estimate_s, phrases.BACKCHANNELS))),
    }
    out = {f"{k} {end}": v for k, (lo, hi) in ranges.items() for end, v in (("low", lo), ("high", hi))}
    out["mtr backchannel min gap"] = timing.BACKCHANNEL_MIN_GAP_S
    out["mpe gap after each clip"] = mpe_scheduler.GAP_S
    return out


def fitted(value_ms: int, bounds: dict[str, float]) -> list[str]:
    """The bounds that ``value_ms`` sits on or just above (within the margin)."""
    return [name for name, b in bounds.items() if b * 1000 <= value_ms <= b * 1000 * (1 + FITTED_MARGIN)]


def test_the_fitting_check_catches_a_hold_just_past_the_generated_pauses():
    assert fitted(3200, generator_bounds_s()) == ["mtr pause high"]
    assert fitted(2500, {"x": 3.0}) == [] and fitted(3301, {"x": 3.0}) == []


@pytest.mark.parametrize("default", TIMING, ids=lambda d: d.name)
def test_no_timing_default_is_fitted_to_a_generator_bound(default: Published):
    near = fitted(default.value_ms, generator_bounds_s())
    published = round(default.upstream_s * 1000) == default.value_ms and default.source.count(":") >= 2
    assert not near or published, f"{default.name} {default.value_ms} ms sits on or just above {near}"


def test_the_bridge_and_the_turn_taker_use_these_defaults_in_both_modes():
    import inspect

    params = inspect.signature(bridge.Cascade).parameters
    assert (params["eou_ms"].default, params["hold_ms"].default, params["barge_in_ms"].default) == (
        defaults.END_OF_UTTERANCE.value_ms, defaults.HOLD.value_ms, defaults.BARGE_IN.value_ms)
    assert params["broadcast_guard"].default is defaults.BROADCAST_GUARD
    assert turns.TurnConfig() == turns.TurnConfig(barge_in_ms=defaults.BARGE_IN_MS, hold_ms=defaults.HOLD_MS)
    assert not defaults.BROADCAST_GUARD
    assert not [n for n in dir(bridge) if n.startswith("TWO_PARTY_") and n.endswith("_MS")]  # no per-mode timing


def test_a_default_must_be_its_source_value():
    with pytest.raises(ValueError, match="not the published"):
        Published("x", 3200, 3.0, "somewhere")
