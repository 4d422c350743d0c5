"""TEST CODE: a faithful local peer of Kyutai's Moshi server (``/api/chat``), for tests only.

It speaks the real wire format byte for byte: an aiohttp WebSocket at ``/api/chat``; every
message binary with a kind byte; the handshake ``b"\\x00"`` (or the Rust server's nine
bytes) sent once the one-session lock is taken; Ogg/Opus pages of 24 kHz mono (``sphn``)
both ways, one page per 80 ms frame; one output frame per input frame except the very
first (the model's delay); text pieces as kind 2. The "model" is a script: which audio to
say from which step on, plus failure behaviours (slow steps, stalls followed by bursts,
disconnects, malformed or error messages, a busy server).
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import sphn
from aiohttp import WSMsgType, web

FRAME = 1920


@dataclass
class MoshiScript:
    speech: list = field(default_factory=list)  # [(step at which output starts, int16 24 kHz audio)]
    words: list = field(default_factory=list)  # [(step, text piece)]
    rust_handshake: bool = False  # nine-byte handshake of the Rust server
    step_delay_s: float = 0.0  # compute time per step (> 0.08 s: slower than real time)
    stall: tuple[int, int] | None = None  # (step, n): outputs of n steps held, then sent in one burst
    close_after: int | None = None  # close the WebSocket after this many input frames
    raw_after: tuple[int, bytes] | None = None  # send these raw bytes after this many input frames
    text_after: int | None = None  # send a text (not binary) WebSocket message after this many frames
    mute_after: int | None = None  # stop answering after this many input frames (a hung model)


@dataclass
class MoshiSession:
    frames_in: int = 0
    outputs: list = field(default_factory=list)  # int16 frame per step that produced output
    texts: list = field(default_factory=list)
    closed_by_peer: bool = False


class MoshiPeer:
    """``async with MoshiPeer(script) as peer: peer.url`` — one session at a time, like the real server."""

    def __init__(self, script: MoshiScript | Callable[[int], MoshiScript]):
        self.script = script if callable(script) else (lambda i, s=script: s)
        self.sessions: list[MoshiSession] = []
        self.lock = asyncio.Lock()
        self.connections = 0

    async def __aenter__(self) -> "MoshiPeer":
        app = web.Application()
        app.router.add_get("/api/chat", self._chat)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}/api/chat"
        return self

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()

    async def _chat(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        index = self.connections
        self.connections += 1
        script = self.script(index)
        async with self.lock:  # the real server serves one session at a time
            log = MoshiSession()
            self.sessions.append(log)
            writer, reader = sphn.OpusStreamWriter(24000), sphn.OpusStreamReader(24000)
            hs = b"\x00" + (struct.pack("<II", 1, 7) if script.rust_handshake else b"")
            await ws.send_bytes(hs)
            pcm = np.zeros(0, np.float32)
            held: list[bytes] = []
            step = 0
            async for msg in ws:
                if msg.type != WSMsgType.BINARY or not msg.data or msg.data[0] != 1:
                    continue  # the Python server only reads kind 1
                pcm = np.concatenate([pcm, reader.append_bytes(msg.data[1:])])
                while len(pcm) >= FRAME:
                    pcm = pcm[FRAME:]
                    log.frames_in += 1
                    if script.step_delay_s:
                        await asyncio.sleep(script.step_delay_s)
                    out = self._step(script, step, log)
                    step += 1
                    if out is not None:
                        page = writer.append_pcm(out.astype(np.float32) / 32768.0)
                        held.append(b"\x01" + page)
                        stalled = script.stall and script.stall[0] <= step - 1 < script.stall[0] + script.stall[1]
                        if not stalled:
                            for m in held:
                                await ws.send_bytes(m)
                            held = []
                    for s, piece in script.words:
                        if s == step - 1:
                            log.texts.append(piece)
                            await ws.send_bytes(b"\x02" + piece.encode())
                    n = log.frames_in
                    if script.raw_after and n == script.raw_after[0]:
                        await ws.send_bytes(script.raw_after[1])
                    if script.text_after and n == script.text_after:
                        await ws.send_str("hello")
                    if script.close_after and n >= script.close_after:
                        log.closed_by_peer = True
                        await ws.close()
                        return ws
        return ws

    def _step(self, script: MoshiScript, step: int, log: MoshiSession) -> np.ndarray | None:
        if step == 0:
            return None  # LMGen returns nothing on its first step (the acoustic delay)
        if script.mute_after is not None and log.frames_in > script.mute_after:
            return None
        out = np.zeros(FRAME, np.int16)
        for start, audio in script.speech:
            k = step - start
            if 0 <= k * FRAME < len(audio):
                chunk = audio[k * FRAME:(k + 1) * FRAME]
                out[: len(chunk)] = chunk
        log.outputs.append(out)
        return out
