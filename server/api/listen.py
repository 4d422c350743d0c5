"""``/v1/episodes/{id}/listen``: an episode's room and assistant audio, events and scheduler
state, live, for many listeners (browsers pass the token as ``?token=``; their number per episode and
per team is limited, server.engine.limits).

The socket follows the episode: while it is queued it says ``waiting``; while an attempt
runs in this process it streams from the live hub (server.engine.live); while it runs on another
replica it tails the database (audio chunks and events as they are flushed, about a second
behind); when the episode is done it says ``done`` and closes normally. Nothing a listener
does reaches the episode: its sender reads bounded queues, and a listener that stops reading
(a message not taken within ``listen_send_timeout_s``, or its queue overflowing) has its socket
reset, so that the kernel's buffers are freed at once (server.engine.protocols). A listener has
nothing to say: what it sends is read and dropped, and once it has sent more than
:data:`LISTEN_INBOUND_BYTES` in all its socket closes with ``too_much_data`` (1008), so that a client
flooding the socket costs the server no more than that much reading.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from fastapi import APIRouter, WebSocket
from pydantic import BaseModel
from sqlalchemy import select
from starlette.websockets import WebSocketState

from clients.codec import KIND_ASSISTANT, KIND_ROOM, STREAM_RATE, encode_frame
from clients.errors import CLOSE_INTERNAL_ERROR, MPEError, RetryLater
from server.api.deps import Caller, State, visible_episode
from server.api.errors import SlowListener, ws_close_code
from server.api.schemas import ERRORS, AudioUrl
from server.api.signed import query_string, signed_query, verify
from server.auth import Scope, TokenWatch, authenticate, socket_token
from server.core.audio import decode_audio
from server.core.benchmark import NO_CLIP_TEXTS, Benchmark, ClipTexts
from server.core.status import DONE_EPISODE, AttemptStatus, EpisodeStatus
from server.db import Attempt, AudioChunk, Database, Episode, EventRow, now
from server.engine.disclosure import PublicEvents, run_disclosure
from server.engine.limits import client_address
from server.engine.live import FRAME, Listener, ListenerOverflow, event_message, levels, timeline_message
from server.engine.protocols import reset
from server.engine.registry import get_benchmark

log = logging.getLogger("mpe.listen")
router = APIRouter()
LISTEN_URL_TTL_S = 300
LISTEN_INBOUND_BYTES = 64 * 1024  # the most a listener may send over one socket, all messages together


class ClientGone(Exception):
    """The listener left; its stream ends quietly."""
    pass


class Stalled(ClientGone):
    """The listener stopped reading: a message was not taken in time; its socket is reset."""
    pass


def _dumps(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _check(db: Database, p, episode_id: str) -> tuple[Benchmark, ClipTexts, PublicEvents | None,
                                                      dict[str, Any] | None]:
    """A visible episode's benchmark, its clip texts, the public events when the caller may not
    see its script (server.engine.disclosure; a running episode's run has not ended, so only admins
    do: then no texts), and its scenario snapshot when the caller may."""
    with db.session() as s:
        ep, run = visible_episode(s, p, episode_id)
        bench = get_benchmark(run.benchmark)
        if run_disclosure(s, p, run).script:
            scenario = bench.snapshot(ep.scenario, ep.id)
            return bench, bench.clip_texts(scenario), None, scenario
        return bench, NO_CLIP_TEXTS, bench.public_events, None


def _episode_state(db: Database, episode_id: str) -> tuple[EpisodeStatus, str | None, float | None, str | None]:
    with db.session() as s:
        ep = s.get(Episode, episode_id)
        return ep.status, ep.lease_owner, ep.lease_expires, ep.current_attempt_id


async def _drain_client(ws: WebSocket) -> None:
    """Read (and drop) what the listener sends, so a disconnect is noticed at once; past
    LISTEN_INBOUND_BYTES in all, close the socket (the stream then ends as if the client left)."""
    received = 0
    try:
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                return
            received += len(msg.get("bytes") or b"") + len((msg.get("text") or "").encode())
            if received > LISTEN_INBOUND_BYTES:
                err = MPEError(f"a listener sends nothing: over {LISTEN_INBOUND_BYTES} bytes received",
                               code="too_much_data")
                await _close(ws, ws_close_code(err), err.code, err.message)
                return
    except Exception:  # the socket is gone either way
        return


class Stream:
    """One listener's socket: follows the episode from waiting through the live hub (or another
    replica's rows in the database) to done."""

    def __init__(self, ws: WebSocket, state: Any, episode_id: str, bench: Benchmark, texts: ClipTexts,
                 public: PublicEvents | None, scenario: BaseModel | None = None):
        self.ws, self.state, self.episode_id, self.texts, self.public = ws, state, episode_id, texts, public
        self.scenario = scenario  # the script, for who may see it (the timeline's script table)
        self.bench = bench
        self.client = asyncio.create_task(_drain_client(ws))

    async def send(self, item: str | bytes) -> None:
        if self.client.done():
            raise ClientGone()
        timeout = self.state.settings.listen_send_timeout_s
        try:
            if isinstance(item, bytes):
                await asyncio.wait_for(self.ws.send_bytes(item), timeout)
            else:
                await asyncio.wait_for(self.ws.send_text(item), timeout)
        except asyncio.TimeoutError:
            raise Stalled() from None
        except Exception:  # the socket went away under us
            raise ClientGone() from None

    async def pause(self, seconds: float, listener: Listener | None = None) -> None:
        """Wait ``seconds`` (less when a channel opens or closes, or ``listener`` is attached);
        raise ClientGone if the listener left."""
        wake = self.state.live.wait_change(seconds) if listener is None else \
            asyncio.wait_for(listener.wake.wait(), seconds)
        change = asyncio.ensure_future(wake)
        done, _ = await asyncio.wait({change, self.client}, return_when=asyncio.FIRST_COMPLETED)
        if self.client in done:
            change.cancel()
            raise ClientGone()
        if change.exception() is not None and not isinstance(change.exception(), asyncio.TimeoutError):
            raise change.exception()

    async def follow(self) -> None:
        hub, db = self.state.live, self.state.db
        said = None
        while True:
            ch = hub.get(self.episode_id)
            if ch is not None:
                listener = hub.new_listener(self.public)
                ch.attach(listener)
                await self.pump(listener)
                continue
            status, owner, expires, attempt_id = await asyncio.to_thread(_episode_state, db, self.episode_id)
            if status in DONE_EPISODE:
                await self.send(_dumps({"type": "done", "status": status}))
                return
            remote = (status == EpisodeStatus.running and owner not in (None, self.state.server_id)
                      and (expires or 0) > now())
            if remote and attempt_id:
                await self.from_database(attempt_id)
                continue
            if said != status:
                said = status
                await self.send(_dumps({"type": "waiting", "status": status}))
            # Queued (or between attempts): be attached the moment an attempt opens here.
            listener = hub.new_listener(self.public)
            hub.expect(self.episode_id, listener)
            try:
                if hub.get(self.episode_id) is None:
                    await self.pause(max(self.state.settings.poll_s, 0.1) * 4, listener)
            finally:
                hub.unexpect(self.episode_id, listener)
            if listener.channel is not None:
                await self.pump(listener)

    async def pump(self, listener: Listener) -> None:
        """Send what the channel queues for ``listener`` until its final message."""
        ch = listener.channel
        try:
            while True:
                batch = asyncio.ensure_future(listener.next_batch())
                done, _ = await asyncio.wait({batch, self.client}, return_when=asyncio.FIRST_COMPLETED)
                if batch not in done:
                    batch.cancel()
                    raise ClientGone()
                try:
                    items = batch.result()
                except ListenerOverflow:
                    raise SlowListener("this listener fell too far behind and was disconnected") from None
                if items is None:
                    return
                for item in items:
                    await self.send(item)
        finally:
            ch.detach(listener)

    async def from_database(self, attempt_id: str) -> None:
        """Tail an attempt that runs on another server: what it flushes, as it flushes it."""
        db = self.state.db
        period = max(self.state.settings.flush_s, 0.25)
        last_event, next_idx, t = 0, {"room": 0, "assistant": 0}, 0
        history: dict[str, list[int]] = {"room": [], "assistant": []}
        seen: list[tuple[int, str, dict]] = []  # the attempt's events so far (for the timeline)
        shown: tuple[int, int] | None = None  # (events, t) of the last timeline message
        first = True
        while True:
            events, chunks, att_status, alive = await asyncio.to_thread(self._read, db, attempt_id, last_event,
                                                                        next_idx)
            frames: list[bytes] = []
            for track, start, pcm in chunks:
                kind = KIND_ROOM if track == "room" else KIND_ASSISTANT
                history[track] += levels(pcm)
                if not first:
                    frames += [encode_frame(kind, start // FRAME + k, pcm[k * FRAME:(k + 1) * FRAME])
                               for k in range(len(pcm) // FRAME)]
                next_idx[track] += 1
                if track == "room":
                    t = start + len(pcm)
            if first:  # history: events and levels so far; audio from now on
                await self.send(_dumps({"type": "hello", "live": True, "tail": True, "episode_id": self.episode_id,
                                        "attempt_id": attempt_id, "sample_rate": STREAM_RATE,
                                        "frame_samples": FRAME, "t": t}))
                await self.send(_dumps({"type": "levels", **history}))
                first = False
            for eid, et, etype, edata in events:
                last_event = eid
                seen.append((et, etype, edata))
                if (text := event_message(et, etype, edata, self.texts, self.public)) is not None:
                    await self.send(text)
            if seen and shown != (len(seen), t):  # the windows, as the listener may see them
                shown = (len(seen), t)
                await self.send(timeline_message(self.bench, seen, t, self.scenario, self.public))
            for f in frames:
                await self.send(f)
            if att_status != AttemptStatus.running:
                await self.send(_dumps({"type": "end", "reason": att_status, "t": t}))
                return
            if not alive:  # its server stopped renewing the lease: a retry will follow
                await self.send(_dumps({"type": "end", "reason": "lease_expired", "t": t}))
                return
            await self.pause(period)

    @staticmethod
    def _read(db: Database, attempt_id: str, after_event: int, next_idx: dict[str, int]):
        with db.session() as s:
            # The attempt's state and its lease in one statement, before its rows: each statement sees
            # what was committed before it (PostgreSQL, read committed), so an attempt read as ended has
            # all its rows in the reads that follow (the tail ends with its last events and audio), and
            # one read as running is not mistaken for a lost one because it ended in between.
            state = s.execute(select(Attempt.status, Episode.current_attempt_id, Episode.lease_expires)
                              .join(Episode, Episode.id == Attempt.episode_id)
                              .where(Attempt.id == attempt_id)).first()
            events = s.execute(select(EventRow.id, EventRow.t, EventRow.type, EventRow.data)
                               .where(EventRow.attempt_id == attempt_id, EventRow.id > after_event)
                               .order_by(EventRow.id)).all()
            chunks = []
            for track in ("room", "assistant"):
                rows = s.execute(select(AudioChunk.start_sample, AudioChunk.data)
                                 .where(AudioChunk.attempt_id == attempt_id, AudioChunk.track == track,
                                        AudioChunk.idx >= next_idx[track]).order_by(AudioChunk.idx)).all()
                chunks += [(track, r.start_sample, decode_audio(r.data)) for r in rows]
        status = state.status if state is not None else None
        alive = state is not None and state.current_attempt_id == attempt_id and (state.lease_expires or 0) > now()
        return events, chunks, status, alive


@router.get("/v1/episodes/{episode_id}/listen-url", response_model=AudioUrl, tags=["episodes"], responses=ERRORS,
            summary="A signed URL for the listen socket")
def listen_url(episode_id: str, p: Caller, state: State) -> AudioUrl:
    """A ``ws(s)://`` path that needs no token in the URL (valid for five minutes, for
    connecting; the stream itself may last longer). ``?token=`` works too."""
    with state.db.session() as s:
        ep, _ = visible_episode(s, p, episode_id)
    q, exp = signed_query(state.db, p, ep.id, "listen", ttl_s=LISTEN_URL_TTL_S)
    return AudioUrl(url=f"/v1/episodes/{ep.id}/listen?{query_string(q)}", expires_at=exp)


def _principal(db: Database, ws: WebSocket, episode_id: str):
    token = socket_token(ws)
    if token is not None or "sig" not in ws.query_params:
        return authenticate(db, token, Scope.read)
    q = ws.query_params
    return verify(db, q.get("tid"), q.get("exp"), q.get("sig"), episode_id, "listen")


@router.websocket("/v1/episodes/{episode_id}/listen")
async def listen(ws: WebSocket, episode_id: str) -> None:
    """Live audio (binary, wire v1 frame header; kind 1 room, 2 assistant; seq = slot) and
    JSON messages: waiting, hello, levels, event, status, timeline, end, done, error (docs/api.md)."""
    state = ws.app.state.mpe
    limits = state.limits
    await ws.accept()
    stream = watch = slot = None
    try:
        address = client_address(ws)
        limits.connection(address)  # docs/api.md "Limits": before anything costs the database
        p = await asyncio.to_thread(limits.authenticate, address, _principal, state.db, ws, episode_id)
        bench, texts, public, scenario = await asyncio.to_thread(_check, state.db, p, episode_id)
        # one slot per socket, whatever it does (waits for a queued episode, streams, tails the database)
        slot = await asyncio.to_thread(limits.listener, p, episode_id)
        stream = Stream(ws, state, episode_id, bench, texts, public, scenario)
        # a revoked or expired token closes the socket (the stream then ends as if the client left)
        watch = TokenWatch(state.db, p.token_id,
                           lambda exc: _close(ws, ws_close_code(exc), exc.code, exc.message))
        await stream.follow()
        await _close(ws, 1000)
    except Stalled:
        reset(ws)
    except ClientGone:
        pass
    except MPEError as exc:
        await _close(ws, ws_close_code(exc), exc.code, exc.message,
                     exc.retry_after_s if isinstance(exc, RetryLater) else None)
    except Exception:
        log.exception("listen socket failed")
        await _close(ws, CLOSE_INTERNAL_ERROR, "internal", "internal error")
    finally:
        if stream is not None:
            stream.client.cancel()
        if watch is not None:
            watch.cancel()
        if slot is not None:
            await asyncio.to_thread(slot.release)


async def _close(ws: WebSocket, code: int, err: str | None = None, message: str = "",
                 retry_after_s: float | None = None) -> None:
    """Say why (``err``) and close; a socket that does not take that within 2 s (a listener that
    stopped reading, e.g. cut off as ``too_slow``) is reset."""
    if ws.client_state != WebSocketState.CONNECTED:
        return
    try:
        if err is not None:
            msg = {"type": "error", "code": err, "message": message}
            if retry_after_s is not None:
                msg["retry_after_s"] = retry_after_s
            await asyncio.wait_for(ws.send_text(_dumps(msg)), 2.0)
        await asyncio.wait_for(ws.close(code), 2.0)
    except asyncio.TimeoutError:
        reset(ws)
    except Exception:
        pass
