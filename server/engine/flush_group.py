"""Group commit of the running attempts' flushes (DESIGN §8).

Every running attempt writes what it recorded about once per ``flush_s`` and renews its lease in
the same transaction. One transaction per attempt and flush costs the server 3–4 ms of
interpreter time on PostgreSQL whatever its size (the connection's check-out, a statement per
table, two for the renewal, the commit): at 64 realtime sessions a quarter of a core, taken from
the event loop that paces them (docs/benchmarks.md). So the flushes of all sessions of one server
process that fall due within ``window_s`` are written together: each table's rows of all of them
in one statement, all their leases renewed in one, one commit. A flush waits at most
``window_s`` for its group (``hurry`` ends the wait, for an attempt that is ending); ``window_s``
0 writes whatever is due in the same turn of the event loop together.

Failure is still each attempt's own: a database that refuses the group's transaction refuses
every flush in it (each attempt keeps its rows and its patience, server.engine.outage); any
other error (one attempt's rows breaking a constraint, say) has each flush of the group written
on its own, so that only the attempt at fault sees it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from server.db import UNAVAILABLE, Database
from server.engine.leasing import Lease, renew_leases
from server.engine.recorder import Batch, write_batches


def commit(db: Database, batches: Sequence[Batch], leases: Sequence[Lease], owner: str, lease_s: float) -> set[str]:
    """One transaction: insert ``batches`` and renew ``leases``; the attempt ids whose lease holds."""
    with db.session() as s:
        write_batches(s, batches)
        return renew_leases(s, leases, owner, lease_s)


@dataclass
class _Flush:
    batch: Batch
    lease: Lease
    done: asyncio.Future[bool]


class FlushGroup:
    """The flushes of one server process's running attempts, written in groups (module doc)."""

    def __init__(self, db: Database, owner: str, lease_s: float, window_s: float) -> None:
        self.db, self.owner, self.lease_s, self.window_s = db, owner, lease_s, window_s
        self._due: list[_Flush] = []
        self._writer: asyncio.Task | None = None
        self._hurry: asyncio.Event | None = None
        self.transactions = 0  # committed or refused, for the benchmarks
        self.flushes = 0

    async def write(self, batch: Batch, lease: Lease) -> bool:
        """Write ``batch`` and renew ``lease`` with the group that is due: True while the lease
        holds, False once it was lost (written all the same); raises what the database raised."""
        loop = asyncio.get_running_loop()
        flush = _Flush(batch, lease, loop.create_future())
        self._due.append(flush)
        if self._writer is None:
            self._hurry = asyncio.Event()
            self._writer = loop.create_task(self._write_due())
        return await flush.done

    def hurry(self) -> None:
        """Write the group that is waiting now (an attempt is ending and waits for its last flush)."""
        if self._hurry is not None:
            self._hurry.set()

    async def _write_due(self) -> None:
        try:
            while self._due:
                try:
                    await asyncio.wait_for(self._hurry.wait(), self.window_s)
                except TimeoutError:
                    pass
                self._hurry.clear()
                group, self._due = self._due, []
                await self._commit(group)
        finally:
            self._writer = None
            for f in self._due:  # cancelled (the server stopping): nobody writes these
                f.done.cancel()
            self._due = []

    async def _commit(self, group: list[_Flush]) -> None:
        try:
            held = await asyncio.to_thread(commit, self.db, [f.batch for f in group], [f.lease for f in group],
                                           self.owner, self.lease_s)
        except Exception as exc:
            self.transactions += 1
            if len(group) == 1 or isinstance(exc, UNAVAILABLE):
                for f in group:
                    _settle(f.done, exc=exc)
            else:  # one flush's rows may be at fault: each on its own
                for f in group:
                    await self._commit([f])
            return
        except BaseException:
            for f in group:
                f.done.cancel()
            raise
        self.transactions += 1
        self.flushes += len(group)
        for f in group:
            _settle(f.done, f.lease.attempt_id in held)


def _settle(done: asyncio.Future[bool], result: bool = False, exc: BaseException | None = None) -> None:
    if done.done():  # its attempt stopped waiting (cancelled)
        return
    if exc is not None:
        done.set_exception(exc)
    else:
        done.set_result(result)
