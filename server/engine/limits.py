"""This server process's limits (docs/api.md "Limits"): REST requests per token, connection
attempts and failed authentications per client address, and concurrent bridge and listen
sockets per team and per episode.

Everything here is counted in this process only, on the pure state of server.core.limits (with
the monotonic clock and one lock): with several server processes on one database, each has
its own counts. The queued episodes of a team are counted in the database when a run is
created (server.engine.leasing.create_run). Admin tokens are exempt from the per-team connection
limits (they are the operator's: an admin bridge serves every team), not from the per-episode
listener cap nor from the rates.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from clients.errors import AuthError, RetryLater
from server.auth import Principal
from server.core.limits import RateLimiter, Slots
from server.settings import Settings

T = TypeVar("T")


def client_address(conn) -> str:
    """The client's address of a request or WebSocket (as the ASGI server reports it: behind a
    trusted proxy, from its ``X-Forwarded-For``)."""
    client = getattr(conn, "client", None)
    return client.host if client is not None and client.host else "unknown"


def _seconds(wait: float) -> str:
    return f"{wait:.2f}".rstrip("0").rstrip(".")


def retry_after_header(seconds: float) -> str:
    """An HTTP ``Retry-After`` value: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))


class Slot:
    """A held connection slot; :meth:`release` (idempotent) gives it back."""

    def __init__(self, release: Callable[[], None] | None = None):
        self._release = release

    def release(self) -> None:
        """Give the slot back (once; later calls do nothing)."""
        release, self._release = self._release, None
        if release is not None:
            release()


class ServerLimits:
    """The limits of one server process, from its settings (0: that limit off)."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()  # REST dependencies run in worker threads, sockets in the loop
        self.rest = RateLimiter(settings.rest_burst, settings.rest_rate_per_s)
        self.connect = RateLimiter(settings.connect_burst, settings.connect_rate_per_s)
        self.bridges = Slots(settings.max_bridges_per_team or None)
        self.team_listeners = Slots(settings.max_listeners_per_team or None)
        self.episode_listeners = Slots(settings.max_listeners_per_episode or None)

    # --- rates ------------------------------------------------------------------------------

    def _address_limited(self, wait: float, what: str) -> RetryLater:
        return RetryLater(f"too many {what} from your address (at most {self.connect.burst:g} at once, "
                          f"{self.connect.rate:g} per second); try again in {_seconds(wait)} s",
                          code="rate_limited", retry_after_s=round(wait, 3))

    def check_address(self, address: str) -> None:
        """Before a REST request is authenticated: RetryLater (``rate_limited``) while ``address``
        has used up its connection attempts and failed authentications."""
        with self._lock:
            wait = self.connect.wait(address, self.clock())
        if wait > 0:
            raise self._address_limited(wait, "connection attempts and failed authentications")

    def connection(self, address: str) -> None:
        """A WebSocket connection attempt from ``address``: counted, or RetryLater (``rate_limited``)."""
        with self._lock:
            wait = self.connect.take(address, self.clock())
        if wait > 0:
            raise self._address_limited(wait, "connection attempts and failed authentications")

    def authenticate(self, address: str, authenticate: Callable[..., T], *args) -> T:
        """``authenticate(*args)``; an AuthError it raises (a missing, unknown, revoked or expired
        token, a forged or expired signed URL) also costs ``address`` one attempt."""
        try:
            return authenticate(*args)
        except AuthError:
            with self._lock:
                self.connect.take(address, self.clock())
            raise

    def request(self, p: Principal) -> None:
        """A REST request of ``p``'s token: counted, or RetryLater (``rate_limited``)."""
        with self._lock:
            wait = self.rest.take(p.token_id, self.clock())
        if wait > 0:
            raise RetryLater(f"too many requests with this token (at most {self.rest.burst:g} at once, "
                             f"{self.rest.rate:g} per second); try again in {_seconds(wait)} s",
                             code="rate_limited", retry_after_s=round(wait, 3))

    # --- connections ------------------------------------------------------------------------

    def bridge(self, p: Principal) -> Slot:
        """A slot for one bridge connection of ``p``'s team (admin tokens: none needed), or
        RetryLater (``too_many_bridges``)."""
        if p.admin:
            return Slot()
        with self._lock:
            if not self.bridges.acquire(p.team):
                raise RetryLater(f"team {p.team} has {self.bridges.limit} bridges connected to this server, "
                                 "its limit (MPE_MAX_BRIDGES_PER_TEAM); connect again when one has left",
                                 code="too_many_bridges")
        return Slot(lambda: self._release(self.bridges, p.team))

    def listener(self, p: Principal, episode_id: str) -> Slot:
        """A slot for one listen socket on ``episode_id`` — waiting for it, live or tailing the
        database alike: RetryLater ``busy`` when the episode has its most listeners (admins
        included), ``too_many_listeners`` when ``p``'s team has (admins exempt)."""
        with self._lock:
            if not self.episode_listeners.acquire(episode_id):
                raise RetryLater(f"this episode has {self.episode_listeners.limit} listeners on this server, "
                                 "its limit (MPE_MAX_LISTENERS_PER_EPISODE); try again later", code="busy")
            if not p.admin and not self.team_listeners.acquire(p.team):
                self.episode_listeners.release(episode_id)
                raise RetryLater(f"team {p.team} has {self.team_listeners.limit} listen sockets open on this "
                                 "server, its limit (MPE_MAX_LISTENERS_PER_TEAM); close one and try again",
                                 code="too_many_listeners")

        def release() -> None:
            self._release(self.episode_listeners, episode_id)
            if not p.admin:
                self._release(self.team_listeners, p.team)

        return Slot(release)

    def _release(self, slots: Slots, key: str) -> None:
        with self._lock:
            slots.release(key)
