"""Waking idle bridges when work may have appeared, instead of each bridge polling the database
(DESIGN §10, docs/guarantees.md "Idle bridges").

Leasing calls :func:`announce` inside every unit of work that may make an episode leasable (a run
created, an attempt failed and requeued) or changes what an idle bridge is told (a run ended,
failed or was cancelled). The announcement fires when that unit of work commits: in this process
through the :class:`WorkSignal` of every server on the same database, in other processes through
PostgreSQL ``NOTIFY`` on a channel of the database schema's own (sent in the same transaction, so
PostgreSQL delivers it on commit; parallel schemas of one database never wake each other).

Idle bridges wait in groups, one per :class:`WorkKey` (bridges of one group may be leased exactly
the same episodes). An announcement wakes the longest-waiting bridge of each group; a bridge that
leases an episode passes the wake on to the next one (:meth:`WorkSignal.wake`), so one new episode
costs its group one or two lease attempts, however many bridges wait. An announcement that finds
a group with none of its bridges waiting (all in a lease attempt just then) is kept for the next
one that waits, so none is lost.

What nothing announces — work made by a process without a signal on SQLite (the CLI, another
replica), a crashed bridge's lease running out — one query per process every ``poll_s`` finds
(``probe``: which waiting groups have leasable work), and wakes those groups.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

from sqlalchemy import event, func, select
from sqlalchemy.orm import Session

from server.db import UNAVAILABLE, Database

log = logging.getLogger("mpe.work")

PROCESS = uuid.uuid4().hex  # the NOTIFY payload: a process ignores its own (it woke its bridges already)
RELISTEN_S = 2.0  # after the listening connection failed, how long until it connects again


@dataclass(frozen=True)
class WorkKey:
    """What decides which episodes a bridge may be leased (server.engine.leasing.lease_episode)."""

    team: str
    admin: bool
    model: str
    clocks: tuple[str, ...]
    accepts_context: bool
    check: bool = False  # hello.check: a bridge under check, served check runs only


Probe = Callable[[Database, list[WorkKey]], set[WorkKey]]  # which of these groups have leasable work


def channel():
    """The PostgreSQL channel of the current schema (SQL: one name per schema, at most 63 bytes)."""
    return func.concat("mpe_work_", func.left(func.md5(func.current_schema()), 16))


_signals: dict[str, set["WorkSignal"]] = {}  # by database URL: the signals of this process's servers
_signals_lock = threading.Lock()


def announce(s: Session) -> None:
    """Work may appear when ``s`` commits: wake the idle bridges of every server on this database
    (this process: after the commit; others: PostgreSQL NOTIFY in the same transaction)."""
    bind = s.get_bind()
    if bind.dialect.name == "postgresql":
        s.execute(select(func.pg_notify(channel(), PROCESS)))
    url = bind.url.render_as_string(hide_password=False)
    if not s.info.get("mpe_announced"):
        s.info["mpe_announced"] = True
        event.listen(s, "after_commit", lambda _s: _wake_process(url), once=True)


def _wake_process(url: str) -> None:
    with _signals_lock:
        signals = list(_signals.get(url, ()))
    for sig in signals:
        sig.announced_threadsafe()


@dataclass
class _Group:
    members: int = 0
    waiters: deque = field(default_factory=deque)  # futures of waiting bridges, longest-waiting first
    pending: bool = False  # an announcement came while none of the group's bridges was waiting


class WorkSignal:
    """One server process's waiters, grouped by :class:`WorkKey`, its fallback poll and (PostgreSQL)
    its one listening connection. Start it inside the server's event loop; every method but
    :meth:`announced_threadsafe` runs in that loop."""

    def __init__(self, db: Database | None, probe: Probe, poll_s: float):
        self.db, self.probe, self.poll_s = db, probe, poll_s
        self.url: str | None = None  # of the database, once started
        self.groups: dict[WorkKey, _Group] = {}
        self.generation = 0  # counts announcements (a cached view of the work is stale once it moved)
        self.probes = 0  # fallback queries made
        self.loop: asyncio.AbstractEventLoop | None = None
        self.tasks: list[asyncio.Task] = []
        self.listening = asyncio.Event()  # PostgreSQL: the channel is listened to

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.url = self.db.engine.url.render_as_string(hide_password=False)
        with _signals_lock:
            _signals.setdefault(self.url, set()).add(self)
        self.tasks.append(asyncio.create_task(self._poll()))
        if self.db.is_postgres:
            self.tasks.append(asyncio.create_task(self._listen()))

    async def stop(self) -> None:
        with _signals_lock:
            _signals.get(self.url, set()).discard(self)
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()

    @contextmanager
    def member(self, key: WorkKey) -> Iterator[None]:
        """A bridge of group ``key`` is connected (its group is woken while it is)."""
        group = self.groups.setdefault(key, _Group())
        group.members += 1
        try:
            yield
        finally:
            group.members -= 1
            if group.members == 0:
                del self.groups[key]

    async def wait(self, key: WorkKey, timeout: float) -> bool:
        """Wait (a member of group ``key``) until work may be there: True when woken, False when
        ``timeout`` passed. A wake that reaches a bridge cancelled meanwhile goes to the next one."""
        group = self.groups[key]
        if group.pending:
            group.pending = False
            return True
        fut = asyncio.get_running_loop().create_future()
        group.waiters.append(fut)
        try:
            await asyncio.wait({fut}, timeout=timeout)
        except asyncio.CancelledError:
            if fut.done():
                self.wake(key)  # woken and gone: the wake is not lost
            raise
        finally:
            woken = fut.done()
            if not woken:
                fut.cancel()
                with suppress(ValueError):
                    group.waiters.remove(fut)
        return woken

    def wake(self, key: WorkKey) -> None:
        """Wake the longest-waiting bridge of group ``key`` (or the next one to wait)."""
        group = self.groups.get(key)
        if group is None:
            return
        while group.waiters:
            fut = group.waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        group.pending = True

    def announced(self) -> None:
        """Work may have appeared: wake one bridge of every group."""
        self.generation += 1
        for key in list(self.groups):
            self.wake(key)

    def announced_threadsafe(self) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            with suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self.announced)

    async def _poll(self) -> None:
        """The fallback: one query every ``poll_s`` over the groups that have a bridge waiting."""
        while True:
            await asyncio.sleep(self.poll_s)
            keys = [k for k, g in self.groups.items() if g.waiters]
            if not keys:
                continue
            try:
                self.probes += 1
                found = await asyncio.to_thread(self.probe, self.db, keys)
            except UNAVAILABLE as exc:  # the database is away (restarting): looked at again next time
                log.warning("looking for work: database unavailable (%s)", type(exc).__name__)
                continue
            except Exception:
                log.exception("looking for work failed")
                continue
            for key in found:
                self.wake(key)

    def _channel_name(self) -> str:
        with self.db.engine.connect() as c:
            return c.execute(select(channel())).scalar_one()

    async def _listen(self) -> None:
        """PostgreSQL: one connection of this process LISTENs on the schema's channel; another
        process's NOTIFY wakes this one's bridges. Reconnects when the connection fails."""
        import psycopg
        from psycopg import sql

        conninfo = self.db.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        while True:
            try:
                name = await asyncio.to_thread(self._channel_name)
                async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
                    self.listening.set()
                    async for note in conn.notifies():
                        if note.payload != PROCESS:
                            self.announced()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("listening for new work failed (%s); the fallback poll covers it", exc)
            self.listening.clear()
            await asyncio.sleep(RELISTEN_S)
