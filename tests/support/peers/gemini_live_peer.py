"""TEST CODE: a faithful local peer of the Gemini Live API (``BidiGenerateContent``), for tests only.

Real message shapes over a real WebSocket at
``/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent?key=…``,
JSON sent in binary frames as the service does: ``setup`` first (anything else closes with
1007) → ``setupComplete``; ``realtimeInput.audio`` at 16 kHz feeding an automatic activity
detector (energy based here), or ``activityStart``/``activityEnd`` when the setup disables
it; answers as ``serverContent.modelTurn.parts[].inlineData`` (``audio/pcm;rate=24000``)
faster than real time with ``outputTranscription``, then ``generationComplete`` and,
once the audio would have finished playing, ``turnComplete``; user speech during a turn →
``serverContent.interrupted``; ``sessionResumptionUpdate`` handles, ``goAway`` followed by
a close, resumption of the same session state on a new connection; errors as close codes
(1008 bad key, 1011 quota). The "model" is a script of answers triggered by input time.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import parse_qs, urlsplit

import numpy as np
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

from .peer_tools import EnergyVAD

PATH = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
IN_RATE, OUT_RATE = 16_000, 24_000
_handles = itertools.count(1)


@dataclass
class GeminiAnswer:
    after_ms: int  # answer the first activity that ends at or after this input time
    audio: np.ndarray  # int16, 24 kHz
    transcript: str = ""
    delay_s: float = 0.0
    chunk_ms: int = 100
    pace: float = 0.2  # wall seconds per second of audio
    stall: bool = False  # send one chunk, then nothing (a hung turn)


@dataclass
class GeminiScript:
    answers: list = field(default_factory=list)
    close_on_setup: tuple[int, str] | None = None  # close with (code, reason) instead of setupComplete
    go_away_after_ms: int | None = None  # send goAway after this much input audio
    go_away_left_s: float = 1.0
    close_after_ms: tuple[int, int, str] | None = None  # (ms, code, reason): drop the connection
    malformed_after_ms: int | None = None
    text_frames: bool = False  # JSON in text frames instead of binary


@dataclass
class GeminiState:
    """One logical session (it survives a resumption)."""

    script: GeminiScript
    setups: list = field(default_factory=list)
    connections: int = 0
    input_samples: int = 0
    turns: list = field(default_factory=list)  # audio sent per turn (int16)
    interrupted: int = 0
    activity: list = field(default_factory=list)  # ("start"|"stop", ms)
    go_away_sent: bool = False
    fired: set = field(default_factory=set)
    vad: EnergyVAD | None = None  # the activity detector follows the session across connections
    turn: asyncio.Task | None = None
    conn: "_Conn | None" = None  # the connection the session currently answers on


class GeminiPeer:
    def __init__(self, script: GeminiScript | Callable[[int], GeminiScript], key: str | None = "test-key"):
        self.script = script if callable(script) else (lambda i, s=script: s)
        self.key = key
        self.states: list[GeminiState] = []
        self.by_handle: dict[str, GeminiState] = {}
        self.connections = 0

    async def __aenter__(self) -> "GeminiPeer":
        self.server = await serve(self._handler, "127.0.0.1", 0, max_size=1 << 24)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}{PATH}"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def _handler(self, ws) -> None:
        index = self.connections
        self.connections += 1
        path = urlsplit(ws.request.path)
        if path.path != PATH:
            return await ws.close(1008, "Requested entity was not found.")
        key = parse_qs(path.query).get("key", [None])[0] or ws.request.headers.get("x-goog-api-key")
        try:
            first = json.loads(await ws.recv())
            setup = first["setup"]
            assert setup["model"].startswith("models/")
            assert setup["generationConfig"]["responseModalities"] == ["AUDIO"]
        except (ValueError, KeyError, TypeError, AssertionError):
            return await ws.close(1007, "Request contains an invalid argument.")
        except ConnectionClosed:
            return
        if self.key and key != self.key:
            return await ws.close(1008, "API key not valid. Please pass a valid API key.")
        handle = (setup.get("sessionResumption") or {}).get("handle")
        state = self.by_handle.get(handle) if handle else None
        if state is None:
            state = GeminiState(self.script(index))
            self.states.append(state)
        state.setups.append(setup)
        state.connections += 1
        if state.script.close_on_setup:
            return await ws.close(*state.script.close_on_setup)
        await _Conn(self, state, ws, setup).run()


class _Conn:
    def __init__(self, peer: GeminiPeer, state: GeminiState, ws, setup: dict):
        self.peer, self.state, self.ws, self.setup = peer, state, ws, setup
        self.script = state.script
        aad = (setup.get("realtimeInputConfig") or {}).get("automaticActivityDetection") or {}
        self.auto = not aad.get("disabled", False)
        if state.vad is None:
            state.vad = EnergyVAD(IN_RATE, silence_ms=aad.get("silenceDurationMs", 500))
        self.resumable = "sessionResumption" in setup
        state.conn = self

    async def send(self, msg: dict) -> None:
        data = json.dumps(msg)
        await self.ws.send(data if self.script.text_frames else data.encode())

    async def send_session(self, msg: dict) -> None:
        """Send on the session's current connection (a turn continues after a resumption)."""
        await self.state.conn.send(msg)

    async def run(self) -> None:
        await self.send({"setupComplete": {}})
        if self.resumable:
            await self.new_handle()
        try:
            async for raw in self.ws:
                msg = json.loads(raw)
                ri = msg.get("realtimeInput")
                if ri is None:
                    continue
                if "audio" in ri:
                    if ri["audio"].get("mimeType") != "audio/pcm;rate=16000":
                        return await self.ws.close(1007, "Request contains an invalid argument.")
                    pcm = np.frombuffer(base64.b64decode(ri["audio"]["data"]), dtype="<i2")
                    self.state.input_samples += len(pcm)
                    if self.auto:
                        for kind, ms in self.state.vad.push(pcm):
                            await self.on_activity(kind, ms)
                    await self.scripted()
                if "activityStart" in ri or "activityEnd" in ri:
                    if self.auto:
                        return await self.ws.close(1007, "Request contains an invalid argument.")
                    await self.on_activity("start" if "activityStart" in ri else "stop", self.input_ms)
        except ConnectionClosed:
            pass
        finally:
            if self.state.conn is self and self.state.turn is not None:
                self.state.turn.cancel()

    @property
    def input_ms(self) -> int:
        return self.state.input_samples * 1000 // IN_RATE

    async def new_handle(self) -> None:
        h = f"handle-{next(_handles)}"
        self.peer.by_handle[h] = self.state
        await self.send({"sessionResumptionUpdate": {"newHandle": h, "resumable": True}})

    async def scripted(self) -> None:
        s, st, ms = self.script, self.state, self.input_ms
        if s.go_away_after_ms is not None and ms >= s.go_away_after_ms and not st.go_away_sent:
            st.go_away_sent = True
            await self.send({"goAway": {"timeLeft": f"{s.go_away_left_s:g}s"}})
            asyncio.get_running_loop().call_later(s.go_away_left_s,
                                                  lambda: asyncio.ensure_future(self.ws.close(1000, "")))
        if s.close_after_ms and ms >= s.close_after_ms[0]:
            await self.ws.close(s.close_after_ms[1], s.close_after_ms[2])
        if s.malformed_after_ms is not None and ms >= s.malformed_after_ms and "bad" not in st.fired:
            st.fired.add("bad")
            await self.ws.send(b"\x00\xffnot json")

    async def on_activity(self, kind: str, ms: int) -> None:
        self.state.activity.append((kind, ms))
        if kind == "start":
            if self.state.turn is not None and not self.state.turn.done():
                self.state.turn.cancel()
                self.state.interrupted += 1
                await self.send({"serverContent": {"interrupted": True}})
            return
        pending = self.script.answers
        k = len(self.state.turns)
        if k < len(pending) and pending[k].after_ms <= ms and (self.state.turn is None or self.state.turn.done()):
            self.state.turns.append(np.zeros(0, np.int16))
            self.state.turn = asyncio.create_task(self.answer(pending[k], k))

    async def answer(self, a: GeminiAnswer, k: int) -> None:
        try:
            if a.delay_s:
                await asyncio.sleep(a.delay_s)
            step = OUT_RATE * a.chunk_ms // 1000
            n = -(-len(a.audio) // step)
            words = a.transcript.split()
            t_first = time.monotonic()
            for i in range(n):
                chunk = a.audio[i * step:(i + 1) * step]
                self.state.turns[k] = np.concatenate([self.state.turns[k], chunk])
                await self.send_session({"serverContent": {"modelTurn": {"parts": [{"inlineData": {
                    "mimeType": "audio/pcm;rate=24000", "data": base64.b64encode(chunk.astype("<i2").tobytes()).decode()}}]}}})
                w = words[i * len(words) // n:(i + 1) * len(words) // n]
                if w:
                    await self.send_session({"serverContent": {"outputTranscription": {"text": " ".join(w) + " "}}})
                if a.stall:
                    await asyncio.Event().wait()
                await asyncio.sleep(len(chunk) / OUT_RATE * a.pace)
            await self.send_session({"serverContent": {"generationComplete": True}})
            # the service ends the turn once its audio has been played out (modelled: real time)
            await asyncio.sleep(max(0.0, t_first + len(a.audio) / OUT_RATE - time.monotonic()))
            await self.send_session({"serverContent": {"turnComplete": True}})
            await self.send_session({"usageMetadata": {"totalTokenCount": 100 + k}})
            if self.resumable:
                await self.state.conn.new_handle()
        except (asyncio.CancelledError, ConnectionClosed):
            pass
