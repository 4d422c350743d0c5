"""Riding out a database that refuses an attempt's writes (DESIGN §8; docs/guarantees.md
"Faults"): a lost connection, a database server restarting, a full disk.

A running attempt keeps what it could not write buffered and tries again at its next flush; only
when the database has refused its writes for ``patience_s`` on end does the attempt fail, with the
stable code ``storage_error`` (the episode is then retried like any failed attempt). Errors that
are not of the database's availability (a constraint violated, a bug) are never retried here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from clients.errors import MPEError
from server.db import UNAVAILABLE

log = logging.getLogger("mpe.storage")
T = TypeVar("T")
__all__ = ["UNAVAILABLE", "Outage", "StorageFailed"]


class StorageFailed(MPEError):
    """The database refused this attempt's writes for longer than the server waits."""

    code = "storage_error"


@dataclass
class Outage:
    """How long the database has been refusing one attempt's writes (clock injected)."""

    patience_s: float
    clock: Callable[[], float]
    since: float | None = None
    refused: int = 0  # writes refused in all (the attempt's stats keep it)

    def refuse(self, exc: BaseException) -> None:
        """A write was refused: note it, or raise StorageFailed once patience is spent."""
        t = self.clock()
        if self.since is None:
            self.since = t
        self.refused += 1
        if t - self.since >= self.patience_s:
            log.error("database refused writes for %.1f s: giving up the attempt", t - self.since)
            raise StorageFailed(f"the database refused writes for {t - self.since:.1f} s") from exc
        log.warning("database refused a write (%s); kept, trying again", type(exc.__cause__ or exc).__name__)

    def ended(self) -> None:
        self.since = None

    async def write(self, fn: Callable[..., T], *args, **kwargs) -> T:
        """Run ``fn`` in a thread until the database takes it, or patience is spent."""
        while True:
            try:
                result = await asyncio.to_thread(fn, *args, **kwargs)
            except UNAVAILABLE as exc:
                self.refuse(exc)
                await asyncio.sleep(min(0.5, max(self.patience_s / 10, 0.01)))
                continue
            self.ended()
            return result
