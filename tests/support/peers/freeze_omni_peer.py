"""TEST PEER (test code only): a local stand-in for Freeze-Omni's Socket.IO demo server.

Real Socket.IO (python-socketio's server on aiohttp, Engine.IO v4 / Socket.IO v5 framing,
as Flask-SocketIO speaks it), with the demo server's events and their order:

- on ``connect`` beyond ``max_users`` it emits ``too_many_users`` and keeps the socket open
  (every later event from that client is answered by a server-side disconnect);
- ``prompt_text`` (a string) -> ``prompt_success``;
- ``recording-started`` / ``recording-stopped`` -> ``stop_tts`` (twice for started) and a reset;
- ``audio`` (a JSON string ``{"sample_rate": 16000, "audio": [bytes of int16 LE]}``) ->
  at most one queued speech segment (binary, int16 24 kHz) per packet, then ``stop_tts``
  if the model was interrupted since the previous packet. A client must keep sending to
  pull output.

There is no model: a :class:`FreezeOmniScript` says, in seconds of input audio received,
when which reply's segments become ready (all at once = a burst faster than real time),
when the model detects a barge-in (queued segments dropped, ``stop_tts`` on the next
packet), and which fault to inject (disconnect, malformed ``audio`` payloads, ``out_time``).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import numpy as np
import socketio
from aiohttp import web

RATE_IN = 16_000


@dataclass
class Reply:
    at_s: float  # input seconds received when the first segment is ready
    segments: list[np.ndarray]  # int16 at 24 kHz
    gap_s: float = 0.0  # later segments become ready gap_s apart (0: all at once, a burst)
    interrupt_at_s: float | None = None  # barge-in detected: queued segments dropped, stop_tts


@dataclass
class FreezeOmniScript:
    replies: list[Reply] = field(default_factory=list)
    max_users: int = 5
    other_users: int = 0  # sessions held by someone else (too_many_users when >= max_users)
    # fault: None | "disconnect" | "malformed" | "odd_bytes" | "out_time" | "stall" (audio events
    # never acknowledged) | "refuse" (connection refused) | "mute" (handshake events unanswered)
    fault: str | None = None
    fault_at_s: float = 0.0


@dataclass
class _User:
    script: FreezeOmniScript
    prompt: str = ""
    received: int = 0  # input samples at 16 kHz since the last reset
    queue: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (reply, segment) ready to send
    pending: list[tuple[float, int, np.ndarray]] = field(default_factory=list)  # (ready_at_s, reply, segment)
    armed: set[int] = field(default_factory=set)
    cut: set[int] = field(default_factory=set)
    tts_over_time: int = 0
    faulted: bool = False


class FreezeOmniPeer:
    """``script`` may be a list: connection ``i`` follows ``script[min(i, len - 1)]``."""

    def __init__(self, script: FreezeOmniScript | list[FreezeOmniScript] | None = None):
        self.scripts = script if isinstance(script, list) else [script or FreezeOmniScript()]
        self.connections = 0
        self._release = asyncio.Event()  # ends stalls when the peer shuts down
        self.sio = socketio.AsyncServer(async_mode="aiohttp", async_handlers=False, max_http_buffer_size=16 << 20)
        self.app = web.Application()
        self.sio.attach(self.app)
        self.users: dict[str, _User] = {}
        self.connects: list[dict] = []
        self.prompts: list[str] = []
        self.recording_started = 0
        self.recording_stopped = 0
        self.packets: list[tuple[float, int, int]] = []  # (time, samples, sample_rate)
        self.input: list[np.ndarray] = []
        self.emitted: list[tuple[float, float, int, np.ndarray]] = []  # (time, input_s, reply, segment)
        self.stop_tts: list[tuple[float, float]] = []  # (time, input_s) of barge-in stop_tts
        self.disconnects = 0
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._register()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> "FreezeOmniPeer":
        self._runner = web.AppRunner(self.app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc) -> None:
        self._release.set()
        await self.sio.shutdown()
        await self._runner.cleanup()

    def _register(self) -> None:
        sio = self.sio

        @sio.event
        async def connect(sid, environ, auth=None):
            script = self.scripts[min(self.connections, len(self.scripts) - 1)]
            self.connections += 1
            self.connects.append({"sid": sid, "auth": auth, "headers": {k: v for k, v in environ.items()
                                                                        if k.startswith("HTTP_")}})
            if script.fault == "refuse":
                return False
            if len(self.users) + script.other_users >= script.max_users:
                await sio.emit("too_many_users", to=sid)
                return  # the demo server keeps such a socket open but never serves it
            self.users[sid] = _User(script)

        @sio.event
        async def disconnect(sid, reason=None):
            self.disconnects += 1
            self.users.pop(sid, None)

        @sio.on("recording-started")
        async def recording_started(sid):
            if sid not in self.users:
                await sio.disconnect(sid)
                return
            self.recording_started += 1
            if self.users[sid].script.fault == "mute":
                return
            await sio.emit("stop_tts", to=sid)
            self._reset(sid)
            await sio.emit("stop_tts", to=sid)

        @sio.on("recording-stopped")
        async def recording_stopped(sid):
            if sid not in self.users:
                await sio.disconnect(sid)
                return
            self.recording_stopped += 1
            self._reset(sid)
            await sio.emit("stop_tts", to=sid)

        @sio.on("prompt_text")
        async def prompt_text(sid, text):
            if sid not in self.users:
                await sio.disconnect(sid)
                return
            self.users[sid].prompt = text
            self.prompts.append(text)
            if self.users[sid].script.fault != "mute":
                await sio.emit("prompt_success", to=sid)

        @sio.on("audio")
        async def audio(sid, data):
            user = self.users.get(sid)
            if user is None:
                await sio.disconnect(sid)
                return
            await self._audio(sid, user, data)

    def _reset(self, sid: str) -> None:
        old = self.users[sid]
        self.users[sid] = _User(old.script, prompt=old.prompt)

    async def _audio(self, sid: str, user: _User, data) -> None:
        sc = user.script
        now_s = user.received / RATE_IN
        if sc.fault and not user.faulted and now_s >= sc.fault_at_s:
            user.faulted = sc.fault != "stall"
            if sc.fault == "stall":  # the handler hangs: no ack, no output, for every packet
                await self._release.wait()
                return
            if sc.fault == "disconnect":
                await self.sio.disconnect(sid)
                return
            if sc.fault == "malformed":
                await self.sio.emit("audio", "this is not audio", to=sid)
            elif sc.fault == "odd_bytes":
                await self.sio.emit("audio", b"\x01\x02\x03", to=sid)
            elif sc.fault == "out_time":  # the demo's session timer
                await self.sio.emit("out_time", to=sid)
                self.users.pop(sid, None)
                return
        # One queued segment per incoming packet, then stop_tts if interrupted (the demo's order).
        if user.queue:
            r, seg = user.queue.pop(0)
            self.emitted.append((time.monotonic(), now_s, r, seg))
            await self.sio.emit("audio", seg.astype("<i2").tobytes(), to=sid)
        if user.tts_over_time > 0:
            await self.sio.emit("stop_tts", to=sid)
            self.stop_tts.append((time.monotonic(), now_s))
            user.tts_over_time = 0
        msg = json.loads(data)
        pcm = np.frombuffer(bytes(msg["audio"]), dtype="<i2")
        self.packets.append((time.monotonic(), len(pcm), int(msg["sample_rate"])))
        self.input.append(pcm)
        user.received += len(pcm)
        self._advance(user, user.received / RATE_IN)

    def _advance(self, user: _User, now_s: float) -> None:
        """Scripted model: segments become ready; a barge-in drops what is queued."""
        for r, reply in enumerate(user.script.replies):
            if r not in user.armed and now_s >= reply.at_s:
                user.armed.add(r)
                user.pending += [(reply.at_s + k * reply.gap_s, r, seg) for k, seg in enumerate(reply.segments)]
            if r in user.armed and r not in user.cut and reply.interrupt_at_s is not None \
                    and now_s >= reply.interrupt_at_s:
                user.cut.add(r)
                user.queue = [q for q in user.queue if q[0] != r]
                user.pending = [p for p in user.pending if p[1] != r]
                user.tts_over_time += 1
        user.queue += [(r, seg) for t, r, seg in user.pending if t <= now_s]
        user.pending = [p for p in user.pending if p[0] > now_s]
