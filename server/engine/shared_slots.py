"""The per-team connection limits of every server process on one PostgreSQL (docs/api.md "Limits"):
bridge connections and listen sockets of a team, counted in the database.

Each open socket that counts against its team's limit is one row of ``connection_slots`` (team,
kind, this process's server id, an expiry). A slot is taken in one transaction that holds the
team's advisory lock, so two processes taking the last slot at once cannot both get it: it counts
the team's unexpired rows of that kind and inserts one more, or refuses. The socket's end deletes
the row. While the socket is open, this process renews its rows every third of ``ttl_s`` (one
statement for all of them, re-inserting a row the database lost); a process that dies stops
renewing, so its rows stop counting ``ttl_s`` after their last renewal and are deleted by the next
slot taken for that team.

The database's clock (``now()``) sets and compares every expiry, so the processes' clocks never
need to agree. On SQLite (one server process) the limits stay in memory (server.engine.limits).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import timedelta

from sqlalchemy import delete, func, insert, select
from sqlalchemy.dialects.postgresql import insert as pg_insert

from server.core.limits import SlotKind
from server.db import UNAVAILABLE, ConnectionSlot, Database, advisory_xact_lock, new_id

log = logging.getLogger("mpe.limits")


class SharedSlots:
    """The connection slots this process holds in the database, and their renewal."""

    def __init__(self, db: Database, server_id: str, ttl_s: float):
        self.db, self.server_id, self.ttl = db, server_id, timedelta(seconds=ttl_s)
        self.every_s = ttl_s / 3
        self.held: dict[str, tuple[str, SlotKind]] = {}  # slot id -> (team, kind)
        self._lock = threading.Lock()  # a renewal and a release never interleave (no row re-inserted once gone)
        self._task: asyncio.Task | None = None

    def count(self, team: str, kind: SlotKind) -> int:
        """How many unexpired slots of ``kind`` ``team`` holds, in every process."""
        with self.db.session() as s:
            return s.scalar(select(func.count()).select_from(ConnectionSlot).where(
                ConnectionSlot.team == team, ConnectionSlot.kind == kind, ConnectionSlot.expires_at > func.now()))

    def acquire(self, team: str, kind: SlotKind, limit: int) -> str | None:
        """Take a slot of ``kind`` for ``team``: its id, or None when the team holds ``limit``."""
        slot_id = new_id()
        with self.db.session() as s:
            advisory_xact_lock(s, f"mpe-slots:{team}")
            s.execute(delete(ConnectionSlot).where(ConnectionSlot.team == team,
                                                   ConnectionSlot.expires_at <= func.now()))
            held = s.scalar(select(func.count()).select_from(ConnectionSlot).where(
                ConnectionSlot.team == team, ConnectionSlot.kind == kind))
            if held >= limit:
                return None
            s.execute(insert(ConnectionSlot).values(id=slot_id, team=team, kind=kind, server_id=self.server_id,
                                                    expires_at=func.now() + self.ttl))
        with self._lock:
            self.held[slot_id] = (team, kind)
        return slot_id

    def release(self, slot_id: str) -> None:
        """Give a slot back; with the database away, it is left to expire."""
        with self._lock:
            if self.held.pop(slot_id, None) is None:
                return
            try:
                with self.db.session() as s:
                    s.execute(delete(ConnectionSlot).where(ConnectionSlot.id == slot_id))
            except UNAVAILABLE as exc:
                log.warning("connection slot %s not given back (%s); it expires", slot_id, type(exc).__name__)

    def renew(self) -> None:
        """Push the expiry of every slot this process holds ``ttl_s`` ahead (one statement)."""
        with self._lock:
            if not self.held:
                return
            rows = [{"id": i, "team": team, "kind": kind, "server_id": self.server_id,
                     "expires_at": func.now() + self.ttl} for i, (team, kind) in self.held.items()]
            stmt = pg_insert(ConnectionSlot).values(rows)
            with self.db.session() as s:
                s.execute(stmt.on_conflict_do_update(index_elements=[ConnectionSlot.id],
                                                     set_={"expires_at": stmt.excluded.expires_at}))

    async def _renewing(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            try:
                await asyncio.to_thread(self.renew)
            except UNAVAILABLE as exc:
                log.warning("connection slots not renewed (%s); trying again", type(exc).__name__)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._renewing())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.to_thread(self._release_all)

    def _release_all(self) -> None:
        for slot_id in list(self.held):
            self.release(slot_id)
