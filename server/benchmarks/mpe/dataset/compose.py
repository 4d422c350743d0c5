"""Composition controls: how many pairs of each shape a suite gets, and which pair gets what.

By default a suite reproduces the benchmark's shape: a quarter of the pairs have four
humans, T sits in the early-middle / middle / late-middle bucket in equal thirds, and
48.4 % of the pairs have an N4 event (2,000 pairs -> 1,500 / 500 speakers, 667 / 667 /
666 buckets, 968 pairs with N4 events). Of the N4 pairs, 97.42 % have two events and the
rest one (943 + 25 -> 1,911 N4 events, the paper's total). Counts are exact: each dimension is a list with exactly the
apportioned number of each value, shuffled independently with the seed.

With ``version_differences`` (on for ``mpe dataset generate``; off for the built-in suites and
the library default) some pairs' versions differ beyond T at the paper's rates (its final
versions, 2,000 pairs: 339 pairs with further differences, 16 of them with unequal turn counts,
and 1,911 vs 1,910 N4 events): of every 2,000 pairs 323 have one more turn reworded, 15 one turn
said in one version only, and one N4 event in 1,911 is left out of the implicit version (its
pair has two turns fewer there). The pairs are drawn with a generator of their own, so the rest
of the plan is the same with the option on or off.

Scene attributes are spread evenly: activities cycle in shuffled rounds, and every other
attribute takes the least-used value compatible with the pair's setting and activity
(ties broken by the seeded generator).
"""

from __future__ import annotations

import random
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from server.benchmarks.mpe.dataset import inventory as inv
from server.benchmarks.mpe.dataset.schema import PairPlan, SceneAttributes
from server.benchmarks.mpe.suite import T_BUCKETS
from server.datasets.errors import DatasetError

DEFAULT_FOUR_SPEAKER_SHARE = 0.25
DEFAULT_N4_SHARE = 0.484
DEFAULT_N4_DOUBLE_SHARE = 0.9742  # of the N4 pairs, those with two N4 events (943 of 968)
DEFAULT_BUCKET_SHARES = (1.0, 1.0, 1.0)  # relative weights of early-middle, middle, late-middle
# The paper's final versions (2,000 pairs): pairs whose versions differ beyond T and the turn
# before it, those of them with unequal turn counts, and the N4 events of each condition.
PAPER_PAIRS, PAPER_FURTHER_DIFFERENCES, PAPER_UNEQUAL_TURNS = 2000, 339, 16
PAPER_N4_EVENTS = (1911, 1910)  # explicit, implicit


def _round_half_up(x: float) -> int:
    return int(Decimal(repr(x)).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def apportion(total: int, weights: tuple[float, ...]) -> list[int]:
    """Split ``total`` in proportion to ``weights`` (largest remainder; ties go to the
    earlier entries), so the parts are exact integers summing to ``total``."""
    if total < 0 or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise DatasetError("apportion needs a non-negative total and positive weights")
    s = sum(weights)
    exact = [Decimal(repr(w)) * total / Decimal(repr(s)) for w in weights]
    parts = [int(e) for e in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - parts[i]), i))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


class Composition(BaseModel):
    """Exact counts per dimension for a suite of ``pairs`` pairs."""

    model_config = ConfigDict(extra="forbid")

    pairs: int = Field(ge=1)
    four_speaker: int = Field(ge=0)
    buckets: dict[str, int]
    n4: int = Field(ge=0)
    n4_double: int = Field(default=0, ge=0)  # of the ``n4`` pairs, those with two N4 events
    # version differences (left out of suite.json where none): pairs with one more turn reworded,
    # with one turn in one version only, and with one N4 event left out of the implicit version
    reworded: int = Field(default=0, ge=0, exclude_if=lambda v: v == 0)
    extra_turn: int = Field(default=0, ge=0, exclude_if=lambda v: v == 0)
    n4_dropped: int = Field(default=0, ge=0, exclude_if=lambda v: v == 0)

    @model_validator(mode="after")
    def _consistent(self) -> "Composition":
        if self.four_speaker > self.pairs:
            raise ValueError(f"four_speaker ({self.four_speaker}) exceeds pairs ({self.pairs})")
        if self.n4 > self.pairs:
            raise ValueError(f"n4 ({self.n4}) exceeds pairs ({self.pairs})")
        if self.n4_double > self.n4:
            raise ValueError(f"n4_double ({self.n4_double}) exceeds n4 ({self.n4})")
        if set(self.buckets) != set(T_BUCKETS) or any(v < 0 for v in self.buckets.values()):
            raise ValueError(f"buckets must give a count for each of {', '.join(T_BUCKETS)}")
        if sum(self.buckets.values()) != self.pairs:
            raise ValueError(f"bucket counts sum to {sum(self.buckets.values())}, not {self.pairs}")
        if self.n4_dropped > self.n4:
            raise ValueError(f"n4_dropped ({self.n4_dropped}) exceeds n4 ({self.n4})")
        if self.reworded + self.extra_turn + self.n4_dropped > self.pairs:
            raise ValueError("more pairs with version differences than pairs")
        return self

    @classmethod
    def from_shares(
        cls,
        pairs: int,
        *,
        four_speaker_share: float = DEFAULT_FOUR_SPEAKER_SHARE,
        n4_share: float = DEFAULT_N4_SHARE,
        n4_double_share: float = DEFAULT_N4_DOUBLE_SHARE,
        bucket_shares: tuple[float, float, float] = DEFAULT_BUCKET_SHARES,
        version_differences: bool = False,
    ) -> "Composition":
        if pairs < 1:
            raise DatasetError("a suite needs at least one pair")
        for name, v in (("four-speaker share", four_speaker_share), ("N4 share", n4_share),
                        ("two-N4 share", n4_double_share)):
            if not 0.0 <= v <= 1.0:
                raise DatasetError(f"{name} must be between 0 and 1 (got {v})")
        if len(bucket_shares) != 3 or any(w < 0 for w in bucket_shares) or sum(bucket_shares) <= 0:
            raise DatasetError("bucket shares must be three non-negative weights, not all zero")
        n4 = _round_half_up(pairs * n4_share)
        n4_double = _round_half_up(n4 * n4_double_share)
        diffs = {}
        if version_differences:
            dropped = min(n4, _round_half_up((n4 + n4_double) * (PAPER_N4_EVENTS[0] - PAPER_N4_EVENTS[1])
                                             / PAPER_N4_EVENTS[0]))
            unequal = max(dropped, _round_half_up(pairs * PAPER_UNEQUAL_TURNS / PAPER_PAIRS))
            further = max(unequal, _round_half_up(pairs * PAPER_FURTHER_DIFFERENCES / PAPER_PAIRS))
            diffs = {"reworded": further - unequal, "extra_turn": unequal - dropped, "n4_dropped": dropped}
        return cls(
            pairs=pairs,
            four_speaker=_round_half_up(pairs * four_speaker_share),
            buckets=dict(zip(T_BUCKETS, apportion(pairs, tuple(bucket_shares)))),
            n4=n4,
            n4_double=n4_double,
            **diffs,
        )

    @property
    def n4_events(self) -> int:
        """The total number of N4 events per condition."""
        return self.n4 + self.n4_double


def _least_used(options: list, used: Counter, rng: random.Random, key=lambda o: o.value):
    low = min(used[key(o)] for o in options)
    pick = rng.choice([o for o in options if used[key(o)] == low])
    used[key(pick)] += 1
    return pick


def pair_ids(index: int, pairs: int) -> tuple[str, str]:
    width = max(4, len(str(pairs)))
    return f"p{index + 1:0{width}d}", f"s{index + 1:0{width}d}"


def _differences(c: Composition, n4: list[int], seed: int) -> list[str]:
    """Which pairs' versions differ, and how: exact counts, drawn with a generator of their own (an
    N4 event is left out only where a pair has one)."""
    out = ["none"] * c.pairs
    if not (c.reworded or c.extra_turn or c.n4_dropped):
        return out
    rng = random.Random(f"duplex-mpe/compose/{seed}/differences")
    for i in rng.sample([i for i in range(c.pairs) if n4[i] > 0], c.n4_dropped):
        out[i] = "n4_dropped"
    rest = [i for i in range(c.pairs) if out[i] == "none"]
    picked = rng.sample(rest, c.extra_turn + c.reworded)
    for k, i in enumerate(picked):
        out[i] = "extra_turn" if k < c.extra_turn else "reworded"
    return out


def plan_pairs(composition: Composition, seed: int) -> list[PairPlan]:
    """One :class:`PairPlan` per pair: exact composition, attributes spread evenly."""
    rng = random.Random(f"duplex-mpe/compose/{seed}")
    n = composition.pairs
    speakers = [4] * composition.four_speaker + [3] * (n - composition.four_speaker)
    buckets = [b for b in T_BUCKETS for _ in range(composition.buckets[b])]
    n4 = [2] * composition.n4_double + [1] * (composition.n4 - composition.n4_double) + [0] * (n - composition.n4)
    for dim in (speakers, buckets, n4):
        rng.shuffle(dim)
    differences = _differences(composition, n4, seed)

    activities: list[inv.Activity] = []
    while len(activities) < n:
        round_ = list(inv.ACTIVITIES)
        rng.shuffle(round_)
        activities.extend(round_)

    used: dict[str, Counter] = {k: Counter() for k in ("setting", "device", "relationship", "register")}
    plans = []
    for i in range(n):
        act = activities[i]
        st = _least_used(inv.settings_for(act), used["setting"], rng)
        dev = _least_used(inv.devices_for(st), used["device"], rng)
        rel = _least_used(inv.relationships_for(st, act), used["relationship"], rng)
        reg = _least_used(list(inv.REGISTERS), used["register"], rng)
        pid, sid = pair_ids(i, n)
        plans.append(
            PairPlan(
                index=i, pair_id=pid, scenario_id=sid, n_speakers=speakers[i], t_bucket=buckets[i],
                n4_events=n4[i], difference=differences[i],
                attributes=SceneAttributes(setting=st.value, activity=act.value, relationship=rel.value,
                                           device_context=dev.value, register=reg.value),
            )
        )
    return plans
