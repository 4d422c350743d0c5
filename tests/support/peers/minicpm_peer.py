"""TEST PEER (test code only): a local stand-in for MiniCPM-o 4.5's duplex demo server.

It speaks the wire format of the demo's gateway (``/ws/duplex/{session_id}``: optional
``queued`` / ``queue_update`` / ``queue_done`` first) and worker (``/ws/duplex?session_id=``)
over a real WebSocket: JSON text messages, ``prepare`` -> ``prepared``, one ``result`` per
``audio_chunk`` (``audio_base64`` = 16 kHz float32 little-endian), processed one at a time
in arrival order as the worker does, ``pause`` / ``resume`` / ``stop``, and
``{"type": "error", "error": "..."}`` for bad requests.

There is no model: a :class:`MiniCPMScript` says which chunk starts which utterance, how the
utterance is cut into ``result`` pieces (irregular lengths, or one burst), when the model
reports an interruption (``is_listen`` and ``end_of_turn`` both true), how slowly steps run,
and which fault to inject (disconnect, malformed JSON, undecodable audio, a stall, the
pause-timeout message, an ``error`` reply, a full queue). Everything sent and received is
logged with monotonic times so tests can check what the bridge made of it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import parse_qs, urlsplit

import numpy as np
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

RATE_IN = 16_000
RATE_OUT = 24_000


@dataclass
class Utterance:
    """Speech the scripted model says, starting with the result of chunk ``at_chunk``."""

    at_chunk: int
    audio: np.ndarray  # int16 at 24 kHz; sent as float32 (exactly representable: int16 / 32768)
    text: str = ""
    pieces: tuple[int, ...] = (24_000,)  # samples per result, cycled (irregular on purpose)
    burst: bool = False  # the whole utterance in one result (faster than real time)
    interrupt_after: int | None = None  # after this many pieces: is_listen + end_of_turn (interrupted)


@dataclass
class MiniCPMScript:
    utterances: list[Utterance] = field(default_factory=list)
    step_delay_s: float | Callable[[int], float] = 0.03  # per chunk (chunk index -> seconds)
    prepare_delay_s: float = 0.05
    queue_updates: int = 0  # gateway: queue_update messages before queue_done
    queue_update_s: float = 0.05
    queue_full: bool = False
    listen_silence: bool = False  # listen results carry 1 s of zeros (allowed: "silence or None")
    # fault: None | "disconnect" | "malformed" | "bad_audio" | "stall" | "timeout" | "error" | "no_prepared"
    fault: str | None = None
    fault_at_chunk: int = 0


@dataclass
class SentResult:
    chunk: int
    t: float
    is_listen: bool
    end_of_turn: bool
    audio: np.ndarray  # int16 at 24 kHz (empty when none)
    text: str


class MiniCPMPeer:
    """Serves one scripted session per connection on 127.0.0.1 (any free port).

    ``script`` may be a list: connection ``i`` follows ``script[min(i, len - 1)]``.
    """

    def __init__(self, script: MiniCPMScript | list[MiniCPMScript] | None = None):
        self.scripts = script if isinstance(script, list) else [script or MiniCPMScript()]
        self.connections = 0
        self._release = asyncio.Event()  # ends stalls when the peer shuts down
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.prepares: list[dict] = []
        self.chunks: list[tuple[int, float, np.ndarray]] = []  # (index, arrival, float32 16 kHz)
        self.results: list[SentResult] = []
        self.unknown: list[dict] = []
        self.stopped = 0
        self.closed_at: float | None = None
        self._server = None

    @property
    def url(self) -> str:
        port = self._server.sockets[0].getsockname()[1]
        return f"ws://127.0.0.1:{port}"

    async def __aenter__(self) -> "MiniCPMPeer":
        self._server = await serve(self._handler, "127.0.0.1", 0, max_size=16 << 20, compression=None)
        return self

    async def __aexit__(self, *exc) -> None:
        self._release.set()
        self._server.close()
        await self._server.wait_closed()

    # --- one connection ---------------------------------------------------------------

    async def _handler(self, ws: ServerConnection) -> None:
        path = ws.request.path
        self.paths.append(path)
        self.headers.append(dict(ws.request.headers.raw_items()))
        parts = urlsplit(path)
        sc = self.scripts[min(self.connections, len(self.scripts) - 1)]
        self.connections += 1
        if parts.path.startswith("/ws/duplex/"):  # the gateway queues first
            if sc.queue_full:
                await ws.send(json.dumps({"type": "error", "error": "Queue full (1000 requests)"}))
                await ws.close(1013, "Queue full")
                return
            if sc.queue_updates:
                await ws.send(json.dumps({"type": "queued", "position": 1, "estimated_wait_s": 1.0,
                                          "ticket_id": "t-1", "queue_length": 1}))
                for _ in range(sc.queue_updates):
                    await asyncio.sleep(sc.queue_update_s)
                    await ws.send(json.dumps({"type": "queue_update", "position": 1, "estimated_wait_s": 0.5,
                                              "queue_length": 1}))
            await ws.send(json.dumps({"type": "queue_done"}))
        elif parts.path != "/ws/duplex" or not parse_qs(parts.query).get("session_id"):
            await ws.close(1008, "unknown path")
            return
        try:
            await self._session(ws, sc)
        except ConnectionClosed:
            pass
        finally:
            self.closed_at = time.monotonic()

    async def _session(self, ws: ServerConnection, sc: MiniCPMScript) -> None:
        prepared = False
        idx = 0
        speaking: dict | None = None  # the utterance being sent: {"u", "pos", "pieces"}
        while True:
            raw = await ws.recv()
            msg = json.loads(raw)
            kind = msg.get("type", "")
            if kind == "prepare":
                self.prepares.append(msg)
                await asyncio.sleep(sc.prepare_delay_s)
                if sc.fault == "no_prepared":
                    continue
                prepared = True
                await ws.send(json.dumps({"type": "prepared", "prompt_length": len(msg.get("system_prompt") or "")}))
            elif kind == "audio_chunk":
                b64 = msg.get("audio_base64")
                if not b64:
                    await ws.send(json.dumps({"type": "error", "error": "Missing audio_base64"}))
                    continue
                audio = np.frombuffer(base64.b64decode(b64), dtype="<f4")
                self.chunks.append((idx, time.monotonic(), audio))
                if not prepared:
                    await ws.send(json.dumps({"type": "error", "error": "Duplex session not prepared"}))
                    continue
                if sc.fault and idx >= sc.fault_at_chunk:
                    if await self._fault(ws, sc.fault):
                        return
                delay = sc.step_delay_s(idx) if callable(sc.step_delay_s) else sc.step_delay_s
                await asyncio.sleep(delay)  # the worker reads the next message only after this one
                speaking = await self._result(ws, sc, idx, speaking)
                idx += 1
            elif kind == "pause":
                await ws.send(json.dumps({"type": "paused", "timeout": 60.0}))
            elif kind == "resume":
                await ws.send(json.dumps({"type": "resumed"}))
            elif kind == "stop":
                self.stopped += 1
                await ws.send(json.dumps({"type": "stopped"}))
                return
            else:
                self.unknown.append(msg)
                await ws.send(json.dumps({"type": "error", "error": f"Unknown message type: {kind}"}))

    async def _fault(self, ws: ServerConnection, fault: str) -> bool:
        """Inject a failure; True when the connection is over."""
        if fault == "disconnect":
            await ws.close(1011, "worker crashed")
            return True
        if fault == "malformed":
            await ws.send('{"type": "result", "is_listen": fal')
        elif fault == "bad_audio":
            await ws.send(json.dumps({"type": "result", "is_listen": False, "text": "x", "audio_data": "%%%not-base64",
                                      "end_of_turn": False, "current_time": 0}))
        elif fault == "timeout":  # the worker's pause watchdog: message, then a normal close
            await ws.send(json.dumps({"type": "timeout", "reason": "Pause timeout (60.0s)"}))
            await ws.close(1000, "Pause timeout")
            return True
        elif fault == "error":
            await ws.send(json.dumps({"type": "error", "error": "CUDA out of memory"}))
        elif fault == "stall":  # alive (pings answered) but the model step never finishes
            await self._release.wait()
            return True
        return False

    async def _result(self, ws: ServerConnection, sc: MiniCPMScript, idx: int, speaking: dict | None) -> dict | None:
        if speaking is None:
            u = next((u for u in sc.utterances if u.at_chunk == idx), None)
            if u is not None:
                speaking = {"u": u, "pos": 0, "pieces": 0}
        audio = np.zeros(0, np.int16)
        text, is_listen, end = "", True, False
        if speaking is not None:
            u, pos, n = speaking["u"], speaking["pos"], speaking["pieces"]
            if u.interrupt_after is not None and n >= u.interrupt_after:
                is_listen, end, speaking = True, True, None  # the model reports it was interrupted
            else:
                size = len(u.audio) if u.burst else u.pieces[n % len(u.pieces)]
                audio = u.audio[pos : pos + size]
                is_listen = False
                text = (u.text.split() + [""])[min(n, len(u.text.split()))] if u.text else ""
                speaking["pos"], speaking["pieces"] = pos + len(audio), n + 1
                if speaking["pos"] >= len(u.audio) and u.interrupt_after is None:
                    end, speaking = True, None  # finished; with interrupt_after the cut comes first
        if is_listen and not len(audio) and sc.listen_silence:
            audio = np.zeros(RATE_OUT, np.int16)
        t = time.monotonic()
        await ws.send(json.dumps({
            "type": "result", "is_listen": is_listen, "text": text,
            "audio_data": base64.b64encode((audio.astype(np.float32) / 32768.0).astype("<f4").tobytes()).decode()
            if len(audio) else None,
            "end_of_turn": end, "current_time": idx, "cost_llm_ms": 12.0, "cost_tts_prep_ms": None,
            "cost_tts_ms": None, "cost_token2wav_ms": None, "cost_all_ms": 30.0, "n_tokens": 3, "n_tts_tokens": None,
            "usage": None, "server_send_ts": time.time(), "latency": None, "wall_clock_ms": 31.5,
            "kv_cache_length": 100 + idx, "vision_slices": 0, "vision_tokens": 0,
        }))
        self.results.append(SentResult(idx, t, is_listen, end, audio, text))
        return speaking
