"""Shared setup for the API, listen and browser tests: a database (SQLite or the real
PostgreSQL), an in-process server, tokens of two teams and an admin, and runs of the mini
suite played by a scripted bridge over real WebSockets."""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clients.messages import EpisodeStart
from clients.sdk import Bridge, BridgeClient, BridgeOptions
from server.app import BackgroundServer
from server.auth import create_token
from server.db import Database
from server.engine.progress import RunProgress, run_progress
from server.settings import Settings
from tests.support.databases import database_url

FRAME = 1920


def make_settings(url: str, tmp: Path, **kw) -> Settings:
    s = Settings(**{"data_dir": tmp / "data", "DATABASE_URL": url, "lease_s": 3.0, "flush_s": 0.2, "poll_s": 0.05,
                    "handshake_timeout_s": 2.0, "lockstep_timeout_s": 5.0} | kw)
    s.ensure_dirs()
    return s


class Scripted(Bridge):
    """An admin bridge that behaves by condition: silent in ``explicit`` episodes; in
    ``implicit`` ones it says one real sentence from frame ``start`` on (inside the first
    N1-N3 window of the mini suite), or talks all the time with ``always``. ``delay_s``
    per frame slows it down."""

    clocks = ("lockstep", "realtime")
    wants_reference = True

    def __init__(self, name: str, speech: np.ndarray, delay_s: float = 0.0, start: int = 40, always: bool = False):
        super().__init__()
        self.name, self.speech, self.delay_s, self.start, self.always = name, speech, delay_s, start, always
        self.talk = False

    def reset(self, episode: EpisodeStart) -> None:
        assert episode.reference is not None, "run the scripted bridge with an admin token"
        self.talk = episode.reference.condition == "implicit"

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        if self.delay_s:
            time.sleep(self.delay_s)
        k = seq - self.start
        if self.talk and self.always:  # talks without pause: the T wait runs to its 60 s cap
            return self.speech[(np.arange(FRAME) + seq * FRAME) % len(self.speech)].astype(np.int16)
        if not self.talk or k < 0 or (k + 1) * FRAME > len(self.speech):
            return None
        return self.speech[k * FRAME:(k + 1) * FRAME].astype(np.int16)


class Quiet(Bridge):
    """A well-behaved SDK bridge for model ``x``: answers every room frame with silence."""

    name = "x"
    clocks = ("lockstep",)
    blocking = False

    def reset(self, episode) -> None:
        pass

    def step(self, seq, room):
        return None


class Slow(Bridge):
    """A quiet bridge for model ``slow`` that takes ``delay_s`` per frame (so that an episode lasts)."""

    name = "slow"
    blocking = False

    def __init__(self, delay_s: float = 0.004):
        super().__init__()
        self.delay_s = delay_s

    def reset(self, episode) -> None:
        pass

    def step(self, seq, room):
        time.sleep(self.delay_s)
        return None


async def serve_one(srv: BackgroundServer, token: str) -> None:
    """A well-behaved bridge (:class:`Quiet`) connects, completes one episode and leaves."""
    client = BridgeClient(Quiet(), BridgeOptions(server=srv.url, token=token, reconnect=False, max_episodes=1))
    await asyncio.wait_for(client.run(), 60)
    assert client.episodes_done == 1


def stalled(port: int, path: str, headers: dict[str, str] | None = None) -> socket.socket:
    """A listener that completes the handshake and then never reads (tiny receive buffer)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                  + "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items()) + "\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


@dataclass
class World:
    settings: Settings
    db: Database
    server: BackgroundServer
    tokens: dict[str, str]
    runs: dict[str, str] = field(default_factory=dict)
    suite: Path | None = None

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.server.port}"

    @property
    def hub(self):
        return self.server.app.state.mpe.live

    @property
    def limits(self):
        return self.server.app.state.mpe.limits


async def until(predicate: Callable[[], Any], what: str = "a condition", timeout: float = 30.0) -> None:
    """Wait (at most ``timeout`` seconds) until ``predicate()`` holds."""
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def wait_run(db: Database, run_id: str, tasks=(), timeout: float = 120) -> RunProgress:
    t0 = time.monotonic()
    while True:
        p = await asyncio.to_thread(run_progress, db, run_id)
        if not p.active:
            return p
        for t in tasks:
            if t.done() and t.exception():
                raise t.exception()
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"run did not finish: {p}")
        await asyncio.sleep(0.05)


async def serve_run(settings: Settings, db: Database, bridge: Bridge, run_id: str, timeout: float = 240) -> RunProgress:
    """Serve ``run_id`` with ``bridge`` through a real server over a real WebSocket until the run ends."""
    token = create_token(db, "local")
    async with BackgroundServer(settings) as server:
        client = BridgeClient(bridge, BridgeOptions(server=server.url, token=token, backoff_min_s=0.05))
        task = asyncio.create_task(client.run())
        try:
            return await wait_run(db, run_id, [task], timeout)
        finally:
            client.stop()
            await asyncio.gather(task, return_exceptions=True)


@asynccontextmanager
async def bridge(world: World, b: Bridge, token: str | None = None, server: str | None = None):
    client = BridgeClient(b, BridgeOptions(server=server or world.ws, token=token or world.tokens["admin"],
                                           backoff_min_s=0.05))
    task = asyncio.create_task(client.run())
    try:
        yield task
    finally:
        client.stop()
        await asyncio.gather(task, return_exceptions=True)


@asynccontextmanager
async def world_on(kind: str, tmp: Path, suite: Path, **settings_kw):
    root = tmp / "suites"  # a suites root of this world's own (tests add bad suites to it)
    shutil.copytree(suite, root / suite.name)
    suite = root / suite.name
    with database_url(kind, tmp) as url:
        settings = make_settings(url, tmp, suites_root=root, **settings_kw)
        db = await asyncio.to_thread(Database, settings.db_url)
        tokens = {"alpha": create_token(db, "alpha", label="alpha user"),
                  "beta": create_token(db, "beta", label="beta user"),
                  "admin": create_token(db, "ops", admin=True, label="admin")}
        try:
            async with BackgroundServer(settings) as server:
                yield World(settings, db, server, tokens, suite=suite)
        finally:
            db.dispose()


class ServedWorld:
    """A world (:func:`world_on`, with ``settings_kw``) served from its own thread and event loop, so
    that synchronous tests (Hypothesis) can drive it over real HTTP and real WebSockets. ``setup``
    fills the world once it serves; what it returns is :attr:`ids` (the ids the tests draw from)."""

    def __init__(self, kind: str, tmp: Path, suite: Path, setup: Callable[[World], Awaitable[Any]] | None = None,
                 **settings_kw: Any):
        self.kind, self.tmp, self.suite, self.setup, self.settings_kw = kind, tmp, suite, setup, settings_kw
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.ids: Any = None
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        try:
            async with world_on(self.kind, self.tmp, self.suite, **self.settings_kw) as w:
                if self.setup is not None:
                    self.ids = await self.setup(w)
                self.world, self.loop, self.stop = w, asyncio.get_running_loop(), asyncio.Event()
                self.ready.set()
                await self.stop.wait()
        except BaseException as exc:  # handed to the test thread
            self.error = exc
            self.ready.set()

    def __enter__(self) -> "ServedWorld":
        self.thread.start()
        self.ready.wait(300)
        if self.error is not None:
            raise self.error
        return self

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(60)


def narrow_server_side(server: BackgroundServer, client: socket.socket, size: int = 8192) -> None:
    """Give the server's end of a stalled listener a small send buffer, as on a slow network
    path, so its backlog reaches the application within seconds instead of megabytes."""
    me = client.getsockname()
    for proto in list(server.server.server_state.connections):
        transport = getattr(proto, "transport", None)
        if transport is not None and transport.get_extra_info("peername") == me:
            transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
            return
    raise AssertionError("server side of the stalled listener not found")
