"""TEST CODE: a faithful local peer of OpenAI's Realtime WebSocket API, for tests only.

Real JSON event shapes (GA names, or the beta audio names on request) over a real
WebSocket at ``/v1/realtime?model=…`` with Bearer authentication: ``session.created`` on
connect, ``session.update`` → ``session.updated``, ``input_audio_buffer.append`` feeding a
server VAD (energy based here) that emits ``speech_started`` / ``speech_stopped`` /
``committed``, responses streamed as ``response.output_audio.delta`` chunks faster than
real time with transcript deltas, ``interrupt_response`` cancelling a running response,
``conversation.item.truncate`` validated against the item's audio length (an
``audio_end_ms`` beyond it is an error, as in the real API) and answered with
``conversation.item.truncated``. The "model" is a script of answers triggered by the input
audio time, plus failure behaviours (HTTP rejection, slow or hung responses, error events,
malformed messages, disconnects).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import parse_qs, urlsplit

import numpy as np
from websockets.asyncio.server import serve

from .peer_tools import EnergyVAD

RATE = 24_000
_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):06d}"


@dataclass
class Answer:
    after_ms: int  # answer the first user turn that stops at or after this input time
    audio: np.ndarray  # int16, 24 kHz
    transcript: str = ""
    delay_s: float = 0.0  # thinking time before response.created
    chunk_ms: int = 100  # audio per delta
    pace: float = 0.2  # wall seconds per second of audio (0.2: five times faster than real time)
    stall: bool = False  # response.created, then nothing (a hung response)


@dataclass
class RealtimeScript:
    answers: list = field(default_factory=list)
    reject_status: int | None = None  # refuse the WebSocket handshake with this HTTP status
    beta_names: bool = False  # response.audio.delta & co.
    close_after_ms: int | None = None  # drop the connection after this much input audio
    error_after_ms: tuple[int, dict] | None = None  # send this "error" object after this much input
    malformed_after_ms: int | None = None  # send a non-JSON text message


@dataclass
class RealtimeLog:
    session: dict = field(default_factory=dict)
    events_in: list = field(default_factory=list)
    input_samples: int = 0
    speech: list = field(default_factory=list)  # ("start"|"stop", ms)
    items: dict = field(default_factory=dict)  # assistant item_id -> audio sent (int16)
    truncates: list = field(default_factory=list)  # (item_id, audio_end_ms)
    cancelled: list = field(default_factory=list)  # response ids cancelled
    errors_sent: list = field(default_factory=list)
    headers: object = None
    query: dict = field(default_factory=dict)


class RealtimePeer:
    """``async with RealtimePeer(script, key="k") as peer: peer.url``."""

    def __init__(self, script: RealtimeScript | Callable[[int], RealtimeScript], key: str | None = "test-key"):
        self.script = script if callable(script) else (lambda i, s=script: s)
        self.key = key
        self.logs: list[RealtimeLog] = []
        self.connections = 0

    async def __aenter__(self) -> "RealtimePeer":
        self.server = await serve(self._handler, "127.0.0.1", 0, process_request=self._check, max_size=1 << 24)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}/v1/realtime"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        await self.server.wait_closed()

    def _check(self, connection, request):
        index = self.connections
        self.connections += 1
        connection.script = self.script(index)
        path = urlsplit(request.path)
        if path.path != "/v1/realtime":
            return connection.respond(404, "not found\n")
        if self.key and request.headers.get("Authorization") != f"Bearer {self.key}":
            return connection.respond(401, "invalid api key\n")
        if connection.script.reject_status:
            return connection.respond(connection.script.reject_status, "refused\n")
        connection.query = {k: v[0] for k, v in parse_qs(path.query).items()}
        connection.req_headers = request.headers
        return None

    async def _handler(self, ws) -> None:
        await _Session(self, ws).run()


class _Session:
    def __init__(self, peer: RealtimePeer, ws):
        self.peer, self.ws, self.script = peer, ws, ws.script
        self.log = RealtimeLog(headers=ws.req_headers, query=ws.query)
        peer.logs.append(self.log)
        self.pending = list(self.script.answers)
        self.td = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500,
                   "create_response": True, "interrupt_response": True}
        self.vad = EnergyVAD(RATE, silence_ms=500)
        self.response: asyncio.Task | None = None
        self.response_id: str | None = None
        self.cancel = asyncio.Event()
        self.user_item: str | None = None
        self.fired: set = set()

    def name(self, ga: str) -> str:
        if not self.script.beta_names:
            return ga
        return {"response.output_audio.delta": "response.audio.delta",
                "response.output_audio.done": "response.audio.done",
                "response.output_audio_transcript.delta": "response.audio_transcript.delta",
                "response.output_audio_transcript.done": "response.audio_transcript.done",
                "conversation.item.added": "conversation.item.created"}.get(ga, ga)

    async def send(self, type_: str, **fields) -> None:
        await self.ws.send(json.dumps({"event_id": _id("event"), "type": self.name(type_), **fields}))

    async def error(self, code: str, message: str, event_id: str | None = None, type_: str = "invalid_request_error"):
        err = {"type": type_, "code": code, "message": message, "param": None, "event_id": event_id}
        self.log.errors_sent.append(err)
        await self.send("error", error=err)

    async def run(self) -> None:
        await self.send("session.created", session={"type": "realtime", "id": _id("sess"),
                                                    "model": self.log.query.get("model"), "instructions": "",
                                                    "audio": {"input": {"turn_detection": self.td}}})
        try:
            async for raw in self.ws:
                try:
                    ev = json.loads(raw)
                except ValueError:
                    await self.error("invalid_json", "The message is not valid JSON.")
                    continue
                self.log.events_in.append(ev.get("type"))
                await self.on_event(ev)
        finally:
            if self.response:
                self.response.cancel()

    @property
    def input_ms(self) -> int:
        return self.log.input_samples * 1000 // RATE

    async def on_event(self, ev: dict) -> None:
        t, eid = ev.get("type"), ev.get("event_id")
        if t == "session.update":
            s = ev.get("session") or {}
            if s.get("type") != "realtime":
                return await self.error("invalid_value", "session.type must be 'realtime'.", eid)
            self.log.session = s
            audio_in = (s.get("audio") or {}).get("input") or {}
            if "turn_detection" in audio_in:
                self.td = audio_in["turn_detection"]
                if self.td and self.td.get("silence_duration_ms"):
                    self.vad = EnergyVAD(RATE, silence_ms=self.td["silence_duration_ms"])
            await self.send("session.updated", session=s)
        elif t == "input_audio_buffer.append":
            pcm = np.frombuffer(base64.b64decode(ev["audio"]), dtype="<i2")
            self.log.input_samples += len(pcm)
            if self.td:
                for kind, ms in self.vad.push(pcm):
                    await self.on_vad(kind, ms)
            await self.scripted_failures()
        elif t == "input_audio_buffer.commit":
            self.user_item = _id("item")
            await self.send("input_audio_buffer.committed", previous_item_id=None, item_id=self.user_item)
        elif t == "response.create":
            await self.start_response(self.input_ms)
        elif t == "response.cancel":
            if self.response_id is None:
                return await self.error("response_cancel_not_active", "There is no active response.", eid)
            self.cancel.set()
        elif t == "conversation.item.truncate":
            item, end = ev.get("item_id"), ev.get("audio_end_ms")
            if item not in self.log.items:
                return await self.error("item_truncate_invalid_item_id", "Item not found.", eid)
            dur = len(self.log.items[item]) * 1000 // RATE
            if not isinstance(end, int) or end < 0 or end > dur:
                return await self.error("invalid_value", f"audio_end_ms {end} is beyond the audio ({dur} ms).", eid)
            self.log.truncates.append((item, end))
            await self.send("conversation.item.truncated", item_id=item, content_index=0, audio_end_ms=end)
        else:
            await self.error("invalid_value", f"Invalid event type {t!r}.", eid)

    async def scripted_failures(self) -> None:
        s, ms = self.script, self.input_ms
        if s.close_after_ms is not None and ms >= s.close_after_ms:
            await self.ws.close(1011, "internal server error")
        if s.error_after_ms and ms >= s.error_after_ms[0] and "error" not in self.fired:
            self.fired.add("error")
            err = s.error_after_ms[1]
            self.log.errors_sent.append(err)
            await self.send("error", error=err)
        if s.malformed_after_ms is not None and ms >= s.malformed_after_ms and "bad" not in self.fired:
            self.fired.add("bad")
            await self.ws.send("{not json")

    async def on_vad(self, kind: str, ms: int) -> None:
        self.log.speech.append((kind, ms))
        if kind == "start":
            self.user_item = _id("item")
            await self.send("input_audio_buffer.speech_started",
                            audio_start_ms=max(0, ms - self.td.get("prefix_padding_ms", 300)), item_id=self.user_item)
            if self.response_id is not None and self.td.get("interrupt_response", True):
                self.cancel.set()  # the API cancels the running response on barge-in
        else:
            await self.send("input_audio_buffer.speech_stopped", audio_end_ms=ms, item_id=self.user_item)
            await self.send("input_audio_buffer.committed", previous_item_id=None, item_id=self.user_item)
            await self.send("conversation.item.added", previous_item_id=None,
                            item={"id": self.user_item, "type": "message", "role": "user", "status": "completed",
                                  "content": [{"type": "input_audio", "transcript": None}]})
            if self.td.get("create_response", True):
                await self.start_response(ms)

    async def start_response(self, ms: int) -> None:
        if self.response_id is not None:
            return await self.error("conversation_already_has_active_response", "A response is in progress.")
        answer = None
        if self.pending and self.pending[0].after_ms <= ms:
            answer = self.pending.pop(0)
        self.response_id = _id("resp")
        self.cancel = asyncio.Event()
        self.response = asyncio.create_task(self.respond(self.response_id, answer))

    async def respond(self, rid: str, answer: Answer | None) -> None:
        try:
            if answer and answer.delay_s:
                await asyncio.sleep(answer.delay_s)
            await self.send("response.created", response={"id": rid, "object": "realtime.response",
                                                          "status": "in_progress", "output": []})
            if answer is None:  # nothing to say: an empty, completed response
                return await self.done(rid, "completed")
            if answer.stall:
                await asyncio.Event().wait()
            item = _id("item")
            self.log.items[item] = np.zeros(0, np.int16)
            msg = {"id": item, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
            await self.send("response.output_item.added", response_id=rid, output_index=0, item=msg)
            await self.send("conversation.item.added", previous_item_id=self.user_item, item=msg)
            await self.send("response.content_part.added", response_id=rid, item_id=item, output_index=0,
                            content_index=0, part={"type": "audio", "transcript": ""})
            step = RATE * answer.chunk_ms // 1000
            words = answer.transcript.split()
            n_chunks = -(-len(answer.audio) // step)
            for k in range(n_chunks):
                if self.cancel.is_set():
                    self.log.cancelled.append(rid)
                    return await self.done(rid, "cancelled")
                chunk = answer.audio[k * step:(k + 1) * step]
                self.log.items[item] = np.concatenate([self.log.items[item], chunk])
                await self.send("response.output_audio.delta", response_id=rid, item_id=item, output_index=0,
                                content_index=0, delta=base64.b64encode(chunk.astype("<i2").tobytes()).decode())
                w = words[k * len(words) // n_chunks:(k + 1) * len(words) // n_chunks]
                if w:
                    await self.send("response.output_audio_transcript.delta", response_id=rid, item_id=item,
                                    output_index=0, content_index=0, delta=" ".join(w) + " ")
                await asyncio.sleep(len(chunk) / RATE * answer.pace)
            base = dict(response_id=rid, item_id=item, output_index=0, content_index=0)
            await self.send("response.output_audio.done", **base)
            await self.send("response.output_audio_transcript.done", transcript=answer.transcript, **base)
            await self.send("response.content_part.done", part={"type": "audio", "transcript": answer.transcript},
                            **base)
            await self.done(rid, "completed")
        except (asyncio.CancelledError, ConnectionError):
            pass
        except Exception:  # the socket closed under us
            pass

    async def done(self, rid: str, status: str) -> None:
        self.response_id = None
        details = {"type": "cancelled", "reason": "turn_detected"} if status == "cancelled" else None
        await self.send("response.done", response={"id": rid, "object": "realtime.response", "status": status,
                                                   "status_details": details, "output": []})
