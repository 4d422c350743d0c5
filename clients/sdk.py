"""Bridge SDK: write a model bridge by implementing "reset" and "one frame in, one frame out".

Depends only on numpy, websockets and this package (no server code), so a team can ship a
bridge with ``clients/`` alone. The connection loop speaks wire protocol v1 (DESIGN §4):
hello → welcome, then for every ``episode.start`` a reset to fresh state and one assistant
frame per room frame, with the same seq.
"""

from __future__ import annotations

import asyncio
import logging
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import websockets

from clients.codec import KIND_ASSISTANT, KIND_ROOM, PROTOCOL_VERSION, decode_frame, encode_frame, frame_samples
from clients.errors import CLOSE_CODES, AuthError, MPEError, ProtocolError, RemoteError
from clients.messages import (
    EpisodeEnd,
    EpisodeStart,
    Error,
    Hello,
    ModelInfo,
    Stats,
    Text,
    Welcome,
    parse_server_message,
)

log = logging.getLogger("mpe.sdk")

# Errors after which reconnecting cannot help.
FATAL_CODES = {"unauthorized", "unsupported_version", "bad_message", "unknown_type", "bad_json"}


class BaseBridge(ABC):
    """Common part of sync and async bridges."""

    name: str = "bridge"
    revision: str = ""
    sample_rate: int = 24_000
    clocks: tuple[str, ...] = ("lockstep", "realtime")

    def __init__(self) -> None:
        self._outbox: list[dict] = []
        self.episode: EpisodeStart | None = None

    @property
    def frame_samples(self) -> int:
        return frame_samples(self.sample_rate)

    def emit_text(self, seq: int, text: str) -> None:
        """Queue model text (logged by the server, never scored)."""
        self._outbox.append(Text(seq=seq, text=text[:4000]).model_dump())

    def emit_stats(self, **data) -> None:
        """Queue bridge-side measurements (stored with the episode)."""
        self._outbox.append(Stats(data=data).model_dump())

    def end_episode(self, end: EpisodeEnd) -> None:
        """Called when the server ends an episode (optional)."""


class Bridge(BaseBridge):
    """A frame-synchronous model: one 80 ms room frame in, one 80 ms assistant frame out."""

    blocking: bool = True  # run step() in a worker thread so pings keep flowing

    @abstractmethod
    def reset(self, episode: EpisodeStart) -> None:
        """Return to fresh model state before an episode."""

    @abstractmethod
    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        """int16 room frame (frame_samples) -> int16 assistant frame, or None for silence."""


class AsyncBridge(BaseBridge):
    """A bridge that buffers or talks to a remote endpoint (realtime only, usually)."""

    clocks = ("realtime",)

    @abstractmethod
    async def reset(self, episode: EpisodeStart) -> None: ...

    @abstractmethod
    async def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        """Take one room frame; return the assistant frame to play in this 80 ms slot."""

    async def close(self) -> None:
        """Release remote resources (optional)."""


@dataclass
class BridgeOptions:
    server: str = "ws://127.0.0.1:8600"
    token: str | None = None
    reconnect: bool = True
    backoff_min_s: float = 0.5
    backoff_max_s: float = 30.0
    max_episodes: int | None = None  # stop after serving this many episodes (tests, demo)


class BridgeClient:
    """Connection loop with reconnect and exponential backoff."""

    def __init__(self, bridge: BaseBridge, options: BridgeOptions):
        self.bridge, self.options = bridge, options
        self.episodes_done = 0
        self.bridge_id: str | None = None
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    def _url(self) -> str:
        base = self.options.server.rstrip("/")
        return base if base.endswith("/v1/bridge") else base + "/v1/bridge"

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            if isinstance(self.bridge, AsyncBridge):
                await self.bridge.close()  # release remote resources (endpoint sessions)

    async def _run(self) -> None:
        delay = self.options.backoff_min_s
        while not self._stop.is_set():
            try:
                await self._session()
                delay = self.options.backoff_min_s
                if self._finished():
                    return
            except (AuthError, ProtocolError, RemoteError) as exc:
                if exc.code in FATAL_CODES or getattr(exc, "fatal", False) or not self.options.reconnect:
                    raise
                log.warning("bridge: %s (%s); reconnecting", exc, exc.code)
            except (OSError, websockets.ConnectionClosed, asyncio.TimeoutError) as exc:
                if not self.options.reconnect:
                    raise
                log.warning("bridge: connection lost (%s); retrying in %.1f s", exc, delay)
            if self._finished() or not self.options.reconnect:
                return
            try:
                await asyncio.wait_for(self._stop.wait(), delay * (0.5 + random.random()))
            except asyncio.TimeoutError:
                pass
            delay = min(delay * 2, self.options.backoff_max_s)

    def _finished(self) -> bool:
        n = self.options.max_episodes
        return self._stop.is_set() or (n is not None and self.episodes_done >= n)

    async def _session(self) -> None:
        headers = {"Authorization": f"Bearer {self.options.token}"} if self.options.token else {}
        b = self.bridge
        # compression=None: PCM does not compress, permessage-deflate would only cost CPU.
        async with websockets.connect(self._url(), additional_headers=headers, max_size=1 << 20,
                                      compression=None) as ws:
            hello = Hello(protocol=PROTOCOL_VERSION, model=ModelInfo(name=b.name, revision=b.revision),
                          sample_rate=b.sample_rate, clocks=list(b.clocks))
            await ws.send(hello.dumps())
            first = parse_server_message(await ws.recv())
            if isinstance(first, Error):
                raise _remote(first)
            if not isinstance(first, Welcome):
                raise ProtocolError(f"expected welcome, got {first.type}", code="unexpected_message")
            self.bridge_id = first.bridge_id
            n = b.frame_samples
            stop = asyncio.create_task(self._stop.wait())
            try:
                while True:
                    recv = asyncio.create_task(ws.recv())
                    done, _ = await asyncio.wait({recv, stop}, return_when=asyncio.FIRST_COMPLETED)
                    if recv not in done:
                        recv.cancel()
                        return
                    raw = recv.result()
                    if isinstance(raw, bytes):
                        frame = decode_frame(raw, n_samples=n, kind=KIND_ROOM)
                        out = await self._reported(ws, self._step(frame.seq, frame.pcm))
                        await ws.send(encode_frame(KIND_ASSISTANT, frame.seq, out))
                        await self._flush_outbox(ws)
                        continue
                    msg = parse_server_message(raw)
                    if isinstance(msg, EpisodeStart):
                        b.episode = msg
                        await self._reported(ws, self._reset(msg))
                    elif isinstance(msg, EpisodeEnd):
                        b.end_episode(msg)
                        b.episode = None
                        self.episodes_done += 1
                        if self._finished():
                            await ws.close()
                            return
                    elif isinstance(msg, Error):
                        raise _remote(msg)
            finally:
                stop.cancel()

    async def _reported(self, ws, work):
        """Run bridge code; an MPEError it raises (e.g. its model endpoint failed) is sent to
        the server as ``error {code, message}`` first, so the attempt ends with that error."""
        try:
            return await work
        except MPEError as exc:
            try:
                await ws.send(Error(code=exc.code[:64], message=str(exc)[:1000]).dumps())
            except Exception:
                pass
            raise

    async def _reset(self, episode: EpisodeStart) -> None:
        b = self.bridge
        if isinstance(b, AsyncBridge):
            await b.reset(episode)
        elif b.blocking:
            await asyncio.to_thread(b.reset, episode)
        else:
            b.reset(episode)

    async def _step(self, seq: int, pcm: np.ndarray) -> np.ndarray | None:
        b = self.bridge
        if isinstance(b, AsyncBridge):
            out = await b.step(seq, pcm)
        elif b.blocking:
            out = await asyncio.to_thread(b.step, seq, pcm)
        else:
            out = b.step(seq, pcm)
        if out is not None and (out.dtype != np.int16 or out.shape != (b.frame_samples,)):
            raise ValueError(f"{b.name}.step() must return int16[{b.frame_samples}] or None")
        return out

    async def _flush_outbox(self, ws) -> None:
        import json

        box, self.bridge._outbox = self.bridge._outbox, []
        for m in box:
            await ws.send(json.dumps(m))


def _remote(msg: Error) -> Exception:
    cls = AuthError if msg.code == "unauthorized" else (ProtocolError if msg.code in CLOSE_CODES else RemoteError)
    return cls(f"server error {msg.code}: {msg.message}", code=msg.code)


async def serve_bridge(bridge: BaseBridge, options: BridgeOptions) -> BridgeClient:
    client = BridgeClient(bridge, options)
    await client.run()
    return client
