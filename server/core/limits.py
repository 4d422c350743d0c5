"""Limits as pure, clock-injected state (docs/api.md "Limits"): a token bucket, token buckets by
key with a bounded number of keys, and concurrent slots by key.

Nothing here reads a clock or holds a lock: callers pass the time (monotonic seconds) and
serialise their calls (server.engine.limits does both for one server process).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from enum import StrEnum

MAX_KEYS = 10_000  # buckets kept per limiter; the least recently used goes first


class SlotKind(StrEnum):
    """What a per-team connection slot is held for."""

    bridge = "bridge"
    listener = "listener"


@dataclass
class TokenBucket:
    """Holds at most ``burst`` tokens and gains ``rate`` per second; an action takes ``cost``.

    A full bucket allows ``burst`` actions at once, then ``rate`` per second on average.
    """

    burst: float
    rate: float  # tokens per second (> 0)
    tokens: float
    stamp: float  # the time ``tokens`` was reckoned at

    @classmethod
    def full(cls, burst: float, rate: float, now: float) -> "TokenBucket":
        """A bucket holding ``burst`` tokens at ``now``."""
        return cls(burst=burst, rate=rate, tokens=burst, stamp=now)

    def _refill(self, now: float) -> None:
        if now > self.stamp:  # a clock that goes back (or stands) gives nothing
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now

    def wait(self, now: float, cost: float = 1.0) -> float:
        """Seconds from ``now`` until ``cost`` tokens are there (0.0: now); takes nothing."""
        self._refill(now)
        if self.tokens >= cost:
            return 0.0
        if cost > self.burst:
            return math.inf  # never: more than the bucket holds
        return (cost - self.tokens) / self.rate

    def take(self, now: float, cost: float = 1.0) -> float:
        """Take ``cost`` tokens and return 0.0, or take nothing and return the seconds to wait."""
        wait = self.wait(now, cost)
        if wait == 0.0:
            self.tokens -= cost
        return wait


class RateLimiter:
    """A :class:`TokenBucket` per key (a token id, a client address), created full on first use.

    At most ``max_keys`` buckets are kept: a new key beyond that drops the least recently used
    one (which has had the longest to refill, so it is usually full anyway). ``rate`` 0 turns
    the limiter off: everything is allowed and nothing is kept.
    """

    def __init__(self, burst: float, rate: float, max_keys: int = MAX_KEYS):
        if burst < 1 or rate < 0 or max_keys < 1:
            raise ValueError("a rate limiter needs burst >= 1, rate >= 0 and max_keys >= 1")
        self.burst, self.rate, self.max_keys = burst, rate, max_keys
        self.buckets: OrderedDict[Hashable, TokenBucket] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def _bucket(self, key: Hashable, now: float) -> TokenBucket:
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = TokenBucket.full(self.burst, self.rate, now)
            while len(self.buckets) > self.max_keys:
                self.buckets.popitem(last=False)
        else:
            self.buckets.move_to_end(key)
        return bucket

    def take(self, key: Hashable, now: float, cost: float = 1.0) -> float:
        """Take ``cost`` from ``key``'s bucket: 0.0 when allowed, else the seconds to wait."""
        if not self.enabled:
            return 0.0
        return self._bucket(key, now).take(now, cost)

    def wait(self, key: Hashable, now: float, cost: float = 1.0) -> float:
        """Seconds until ``key`` could take ``cost`` (0.0: now), taking nothing; a key never seen
        has a full bucket (and is not stored)."""
        bucket = self.buckets.get(key) if self.enabled else None
        return 0.0 if bucket is None else bucket.wait(now, cost)


class Slots:
    """Concurrent holders per key, at most ``limit`` each (None: no limit, only counted)."""

    def __init__(self, limit: int | None):
        self.limit = limit
        self.counts: dict[Hashable, int] = {}

    def count(self, key: Hashable) -> int:
        """How many hold a slot of ``key`` now."""
        return self.counts.get(key, 0)

    def acquire(self, key: Hashable) -> bool:
        """Take a slot of ``key``: False (and nothing taken) when all ``limit`` are held."""
        n = self.counts.get(key, 0)
        if self.limit is not None and n >= self.limit:
            return False
        self.counts[key] = n + 1
        return True

    def release(self, key: Hashable) -> None:
        """Give back a slot of ``key`` (taken by :meth:`acquire`)."""
        n = self.counts.get(key, 0) - 1
        if n > 0:
            self.counts[key] = n
        else:
            self.counts.pop(key, None)  # bounded: only keys in use are kept
