"""This server process's limits (docs/api.md "Limits"): REST requests per token, connection
attempts and failed authentications per client address, and concurrent bridge and listen
sockets per team and per episode.

The rates and an episode's listener cap are counted in this process only, on the pure state of
server.core.limits (with the monotonic clock and one lock). The per-team connection limits are
counted in memory on SQLite (one server process) and in the database on PostgreSQL, for every
server process on it at once (server.engine.shared_slots): taking and giving back a slot may then
query the database, so the sockets call :meth:`ServerLimits.bridge`, :meth:`ServerLimits.listener`
and :meth:`Slot.release` in a thread. The queued episodes of a team are counted in the database
when a run is created (server.engine.leasing.create_run). Admin tokens are exempt from the
per-team connection limits (they are the operator's: an admin bridge serves every team), not from
the per-episode listener cap nor from the rates.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from clients.errors import AuthError, RetryLater
from server.auth import Principal
from server.core.limits import RateLimiter, SlotKind, Slots
from server.engine.shared_slots import SharedSlots
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


def worker_rates(settings: Settings, workers: int) -> dict[str, int | float]:
    """The rate settings of one of ``workers`` processes on one port (``mpe serve --workers N``): each
    enforces its share, 1/N of every rate and burst (a burst at least 1), so that a client whose
    connections the kernel spreads over the N processes gets about the configured total."""
    return {"rest_burst": max(1, settings.rest_burst // workers), "rest_rate_per_s": settings.rest_rate_per_s / workers,
            "connect_burst": max(1, settings.connect_burst // workers),
            "connect_rate_per_s": settings.connect_rate_per_s / workers}


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
    """The limits of one server process, from its settings (0: that limit off); with ``shared``, the
    per-team connection limits are those of every process on its database."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic,
                 shared: SharedSlots | None = None):
        self.clock, self.shared = clock, shared
        self._where = "to the servers of this database" if shared is not None else "to this server"
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
        return self._team_slot(p.team, SlotKind.bridge, self.bridges, lambda: RetryLater(
            f"team {p.team} has {self.bridges.limit} bridges connected {self._where}, its limit "
            "(MPE_MAX_BRIDGES_PER_TEAM); connect again when one has left", code="too_many_bridges"))

    def _team_slot(self, team: str, kind: SlotKind, slots: Slots, over: Callable[[], RetryLater]) -> Slot:
        """One of ``team``'s slots of ``kind``, in the database when shared (and limited), or ``over()``."""
        if self.shared is not None and slots.limit is not None:
            slot_id = self.shared.acquire(team, kind, slots.limit)
            if slot_id is None:
                raise over()
            shared = self.shared
            return Slot(lambda: shared.release(slot_id))
        with self._lock:
            if not slots.acquire(team):
                raise over()
        return Slot(lambda: self._release(slots, team))

    def listener(self, p: Principal, episode_id: str) -> Slot:
        """A slot for one listen socket on ``episode_id`` — waiting for it, live or tailing the
        database alike: RetryLater ``busy`` when the episode has its most listeners (admins
        included), ``too_many_listeners`` when ``p``'s team has (admins exempt)."""
        with self._lock:
            if not self.episode_listeners.acquire(episode_id):
                raise RetryLater(f"this episode has {self.episode_listeners.limit} listeners on this server, "
                                 "its limit (MPE_MAX_LISTENERS_PER_EPISODE); try again later", code="busy")
        team = Slot()
        if not p.admin:
            try:
                team = self._team_slot(p.team, SlotKind.listener, self.team_listeners, lambda: RetryLater(
                    f"team {p.team} has {self.team_listeners.limit} listen sockets open {self._where}, its "
                    "limit (MPE_MAX_LISTENERS_PER_TEAM); close one and try again", code="too_many_listeners"))
            except BaseException:
                self._release(self.episode_listeners, episode_id)
                raise

        def release() -> None:
            self._release(self.episode_listeners, episode_id)
            team.release()

        return Slot(release)

    def _release(self, slots: Slots, key: str) -> None:
        with self._lock:
            slots.release(key)
