"""The ``/v1/bridge`` WebSocket (DESIGN §4): handshake, auth, leasing loop, error mapping.

An idle bridge does not poll: it tries to lease when it connects, after each episode and when the
work signal wakes it (server.engine.worksignal), and otherwise only looks at the status its group
shares (:class:`GroupStatus`). What the bridge may send when (its hello first, audio only inside an
episode or as a late answer to the last one) is :class:`clients.lifecycle.ServerLifecycle`'s: this module
moves the bytes and stamps their arrival."""

from __future__ import annotations

import asyncio
import logging
import time

from fastapi import WebSocket
from starlette.websockets import WebSocketDisconnect, WebSocketState

from clients.errors import CLOSE_CODES, CLOSE_GOING_AWAY, MPEError, ProtocolError, RetryLater
from clients.lifecycle import AssistantFrame, ServerLifecycle
from clients.messages import Error, Hello, Stats, Status, Text
from server.auth import Forbidden, Principal, Scope, TokenWatch, authenticate, socket_token
from server.db import UNAVAILABLE, BridgeRow, utcnow
from server.engine.clips import open_episode
from server.engine.leasing import fail_run, lease_episode
from server.engine.limits import client_address
from server.engine.matching import bridge_work
from server.engine.session import Disconnected, EpisodeSession
from server.engine.worksignal import WorkKey, WorkSignal

log = logging.getLogger("mpe.bridge")

STATUS_EVERY_S = 2.0  # while a bridge is idle, how often the work that matches it is looked at again
DATABASE_RETRY_S = 1.0  # an idle bridge whose lease query met the database away tries again this soon


class WSConnection:
    """Reads the socket continuously into a queue; the session pulls from it. The protocol's rules
    are the connection's :class:`~clients.lifecycle.ServerLifecycle` (``protocol``): this class only
    moves bytes and stamps their arrival."""

    def __init__(self, ws: WebSocket, principal: Principal, hello: Hello, protocol: ServerLifecycle | None = None):
        self.ws = ws
        self.protocol = protocol if protocol is not None else ServerLifecycle.welcomed(hello)
        self.reference = principal.admin and hello.wants_reference  # episode.start tells it what it plays
        self.bridge_rate = hello.sample_rate
        self.accepts_context = hello.accepts_context  # §5.1: may be sent assistant-context frames
        self.queue: asyncio.Queue = asyncio.Queue()
        self.clock = time.monotonic

    def begin_episode(self) -> None:
        """An episode begins now: frames that arrived before are not its own (:meth:`next_inbound`)."""
        self.protocol.begin_episode(self.clock())

    def end_episode(self) -> None:
        """The episode ended now: audio after it is a late answer to it for a while (protocol.md §7.2)."""
        self.protocol.end_episode(self.clock())

    @property
    def gone(self) -> bool:
        """The bridge has left: a send found its socket closed (starlette then refuses every later
        send), or the server closed it."""
        return self.ws.application_state == WebSocketState.DISCONNECTED

    async def send_text(self, text: str) -> None:
        await self._send(self.ws.send_text, text)

    async def send_bytes(self, data: bytes) -> None:
        await self._send(self.ws.send_bytes, data)

    async def _send(self, send, data) -> None:
        """A send; Disconnected when the bridge has left (a departure, not a failure of the server)."""
        if self.gone:
            raise Disconnected()
        try:
            await send(data)
        except WebSocketDisconnect:
            raise Disconnected() from None

    async def reader(self) -> None:
        try:
            while True:
                msg = await self.ws.receive()
                arrived = self.clock()
                if msg["type"] == "websocket.disconnect":
                    raise Disconnected()
                data = msg.get("bytes")
                if data is not None:
                    self.queue.put_nowait(self.protocol.receive_bytes(data, arrived))
                else:
                    self.queue.put_nowait(self.protocol.receive_text(msg.get("text") or ""))
        except BaseException as exc:  # hand every failure to the consumer
            self.queue.put_nowait(exc)

    async def next_inbound(self, timeout: float | None) -> AssistantFrame | Text | Stats | None:
        """The next message from the bridge, None when ``timeout`` passes first; raises the reader's
        failure. Late answers to the last episode are passed over (they were queued before the
        episode began or while none ran, so passing them over takes no time of ``timeout``)."""
        while True:
            try:
                if (timeout is not None and timeout <= 0) or not self.queue.empty():  # no timer for what is here
                    item = self.queue.get_nowait()
                else:
                    async with asyncio.timeout(timeout):  # cheaper than wait_for: no inner task
                        item = await self.queue.get()
            except (asyncio.QueueEmpty, TimeoutError):
                return None
            if isinstance(item, BaseException):
                self.queue.put_nowait(item)  # stays fatal for later readers
                raise item
            if item.type != "frame" or not self.protocol.passed_over(item):
                return item


class GroupStatus:
    """The ``status`` of each group of bridges (:class:`WorkKey`), shared by the group's bridges: looked
    up at most once every ``every_s`` seconds per group, and again once work was announced."""

    def __init__(self, db, signal: WorkSignal, every_s: float = STATUS_EVERY_S, clock=time.monotonic):
        self.db, self.signal, self.every_s, self.clock = db, signal, every_s, clock
        self.known: dict[WorkKey, tuple[float, int, asyncio.Future]] = {}  # key: (looked at, generation, status)

    async def get(self, key: WorkKey) -> Status:
        t, gen = self.clock(), self.signal.generation
        hit = self.known.get(key)
        if hit is None or t >= hit[0] + self.every_s or gen != hit[1] or (hit[2].done() and hit[2].exception()):
            hit = (t, gen, asyncio.ensure_future(asyncio.to_thread(
                bridge_work, self.db, team=key.team, admin=key.admin, model=key.model, clocks=list(key.clocks),
                accepts_context=key.accepts_context, check=key.check)))
            self.known[key] = hit
            for old in [k for k, (at, _, _) in self.known.items() if t >= at + 10 * self.every_s]:
                del self.known[old]  # groups gone for a while
        return await asyncio.shield(hit[2])


class StatusReporter:
    """No silent waits (docs/protocol.md §4.5): tells a bridge what work matches it — right after
    ``welcome``, then while it is idle at most every ``every_s`` seconds, and only when that changed
    (so a bridge whose runs have ended hears "no more work" once). The server logs each one."""

    def __init__(self, shared: GroupStatus, conn: WSConnection, key: WorkKey, bridge_id: str,
                 every_s: float = STATUS_EVERY_S):
        self.shared, self.conn, self.key, self.bridge_id, self.every_s = shared, conn, key, bridge_id, every_s
        self.last: Status | None = None
        self.due = 0.0

    async def report(self) -> None:
        """Send the current status if it is due and differs from the last one sent."""
        t = self.conn.clock()
        if t < self.due:
            return
        self.due = t + self.every_s
        status = await self.shared.get(self.key)
        if status == self.last:
            return
        self.last = status
        log.info("bridge %s (model %s, team %s): %s: %s", self.bridge_id, self.key.model, self.key.team,
                 status.reason, status.hint)
        await self.conn.send_text(status.dumps())

    def after_episode(self) -> None:
        """Look again as soon as the bridge is idle (its run may have just ended)."""
        self.due = 0.0


async def _receive_hello(ws: WebSocket, protocol: ServerLifecycle, timeout: float) -> Hello:
    try:
        msg = await asyncio.wait_for(ws.receive(), timeout)
    except asyncio.TimeoutError:
        raise ProtocolError("no hello received in time", code="timeout") from None
    if msg["type"] == "websocket.disconnect":
        raise Disconnected()
    data = msg.get("bytes")
    return protocol.receive_hello(data if data is not None else msg.get("text") or "")


async def bridge_endpoint(ws: WebSocket) -> None:
    """Serve one bridge connection (§4): authenticate, read its hello, then lease and run episodes
    until it leaves or the server stops. Failures close the socket with an ``error`` message and
    their close code; a changed or broken suite fails its run, not the bridge (§8)."""
    state = ws.app.state.mpe
    settings = state.settings
    await ws.accept()
    bridge_id = None
    reader = watch = slot = None
    try:
        address = client_address(ws)
        state.limits.connection(address)  # docs/api.md "Limits": before anything costs the database
        principal = await asyncio.to_thread(state.limits.authenticate, address, authenticate, state.db,
                                            socket_token(ws), Scope.bridge)
        slot = await asyncio.to_thread(state.limits.bridge, principal)  # held until the connection ends, from before hello
        protocol = ServerLifecycle()
        hello = await _receive_hello(ws, protocol, settings.handshake_timeout_s)
        if hello.wants_reference and not principal.admin:
            raise Forbidden("only an admin token may ask for the reference (hello.wants_reference)")
        row = BridgeRow(team=principal.team, admin=principal.admin, model_name=hello.model.name,
                        model_revision=hello.model.revision, sample_rate=hello.sample_rate,
                        clocks=list(hello.clocks), accepts_context=hello.accepts_context, is_check=hello.check,
                        server_id=state.server_id)
        bridge_id = await asyncio.to_thread(_register_bridge, state.db, row)
        await ws.send_text(protocol.welcome(bridge_id))
        conn = WSConnection(ws, principal, hello, protocol)
        reader = asyncio.create_task(conn.reader())
        # a revoked or expired token ends the connection (and a running attempt) like a fatal message
        watch = TokenWatch(state.db, principal.token_id, conn.queue.put_nowait)
        key = WorkKey(team=principal.team, admin=principal.admin, model=hello.model.name, clocks=tuple(hello.clocks),
                      accepts_context=hello.accepts_context, check=hello.check)
        with state.work.member(key):
            await _serve(state, conn, key, hello, bridge_id)
        raise MPEError("server shutting down", code="shutdown")
    except (Disconnected, WebSocketDisconnect):
        pass
    except MPEError as exc:
        if exc.code not in CLOSE_CODES:  # not a code of the protocol (§9): a fault of the server, told as one
            log.error("bridge connection failed: %s (%s)", exc, exc.code)
            exc = MPEError("internal error")
        await _close_with_error(ws, exc.code, exc.message, exc.close_code,
                                exc.retry_after_s if isinstance(exc, RetryLater) else None)
    except Exception:
        log.exception("bridge connection failed")
        err = MPEError("internal error")
        await _close_with_error(ws, err.code, err.message, err.close_code)
    finally:
        if slot is not None:
            await asyncio.to_thread(slot.release)
        if reader is not None:
            reader.cancel()
        if watch is not None:
            watch.cancel()
        if bridge_id is not None:
            await asyncio.to_thread(_mark_disconnected, state.db, bridge_id)


async def _serve(state, conn: WSConnection, key: WorkKey, hello: Hello, bridge_id: str) -> None:
    """Lease and run episodes until the server stops. The bridge tries to lease when it connects,
    after each episode, and when the work signal wakes it; idle, it only reports its status."""
    settings, work = state.settings, state.work
    status = StatusReporter(state.status, conn, key, bridge_id)
    await status.report()
    woken = True
    while not state.stopping.is_set():
        if conn.gone:  # it left while its last episode ended (episode.end found it gone): lease nothing for it
            raise Disconnected()
        lease = None
        try:
            if woken:
                lease = await asyncio.to_thread(
                    lease_episode, state.db, team=key.team, admin=key.admin, model=key.model,
                    clocks=list(key.clocks), owner=state.server_id, bridge_id=bridge_id,
                    bridge_rate=hello.sample_rate, model_revision=hello.model.revision, lease_s=settings.lease_s,
                    accepts_context=key.accepts_context, check=key.check)
            if lease is None:
                await status.report()
        except UNAVAILABLE as exc:  # the database is away (restarting): the bridge stays and waits
            log.warning("bridge %s: database unavailable (%s); trying again", bridge_id, type(exc).__name__)
            await _idle(conn, work, key, DATABASE_RETRY_S)
            woken = True
            continue
        if lease is None:
            woken = await _idle(conn, work, key, status.every_s)
            continue
        work.wake(key)  # more may be queued: the next idle bridge of the group looks
        log.info("bridge %s: episode %s attempt %d", bridge_id, lease.episode_id, lease.attempt_number)
        try:
            core = await asyncio.to_thread(open_episode, lease.suite_path, lease.scenario,
                                           suite_hash=lease.suite_hash, audio_hash=lease.audio_hash)
        except MPEError as exc:  # §8: a changed or broken suite ends its run, not the bridge
            log.error("run %s failed: %s%s", lease.run_id, exc, f" ({exc.__cause__})" if exc.__cause__ else "")
            await asyncio.to_thread(fail_run, state.db, lease, exc.code, str(exc))
        else:
            with state.live.attempt(lease) as observer:  # live listeners
                try:
                    await EpisodeSession(state.db, conn, lease, state.flushes, state.phases, settings, core,
                                         observer=observer).run()
                finally:
                    conn.end_episode()
        status.after_episode()
        woken = True  # look again at once


async def _idle(conn: WSConnection, work: WorkSignal, key: WorkKey, timeout: float) -> bool:
    """Wait until the work signal wakes this bridge (True), ``timeout`` passes (False) or the bridge
    sends something: a disconnect or an error is raised, and so is an audio frame (outside an
    episode) unless it is a late answer to the last one (:meth:`WSConnection.next_inbound`)."""
    woken = asyncio.ensure_future(work.wait(key, timeout))
    try:
        inbound = asyncio.ensure_future(conn.next_inbound(None))
        try:
            await asyncio.wait({inbound, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            inbound.cancel()
        if inbound.done() and not inbound.cancelled():
            inbound.result()  # raises the reader's failure
        return woken.done() and not woken.cancelled() and woken.result()
    finally:
        woken.cancel()


def _register_bridge(db, row: BridgeRow) -> str:
    with db.session() as s:
        s.add(row)
        s.flush()
        return row.id


def _mark_disconnected(db, bridge_id: str) -> None:
    with db.session() as s:
        s.get(BridgeRow, bridge_id).disconnected_at = utcnow()


async def _close_with_error(ws: WebSocket, code: str, message: str, close_code: int,
                            retry_after_s: float | None = None) -> None:
    if ws.client_state != WebSocketState.CONNECTED:
        return
    try:
        await ws.send_text(Error(code=code, message=message[:1000], retry_after_s=retry_after_s).dumps())
        await ws.close(close_code if code != "shutdown" else CLOSE_GOING_AWAY)
    except Exception:
        pass
