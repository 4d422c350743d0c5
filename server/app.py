"""The FastAPI application: bridge WebSocket plus health; state injected from Settings."""

from __future__ import annotations

import asyncio
import gc
import logging
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import uvicorn
from fastapi import FastAPI
from starlette.websockets import WebSocket

from clients.redact import RedactSecrets
from server.api import install as install_api
from server.api.errors import error_response
from server.bridgecheck.api import router as check_router
from server.core.phases import FramePhases
from server.db import Database
from server.engine.bridge_ws import GroupStatus, bridge_endpoint
from server.engine.flush_group import FlushGroup
from server.engine.leasing import leasable_groups
from server.engine.limits import ServerLimits
from server.engine.live import LiveHub
from server.engine.protocols import HttpProtocol, WebSocketProtocol
from server.engine.shared_slots import SharedSlots
from server.engine.worksignal import WorkSignal
from server.settings import Settings, default_server_id


@dataclass
class ServerState:
    settings: Settings
    db: Database
    server_id: str
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    live: LiveHub = field(default_factory=LiveHub)  # live listeners of running attempts
    limits: ServerLimits | None = None  # the limits (docs/api.md "Limits"); from settings by default
    work: WorkSignal | None = None  # wakes idle bridges when work may have appeared (started by the app)
    status: GroupStatus | None = None  # what idle bridges are told, per group
    flushes: FlushGroup | None = None  # the running attempts' flushes, written in groups
    phases: FramePhases = field(default_factory=FramePhases)  # where its realtime sessions keep their deadlines

    def __post_init__(self) -> None:
        if self.flushes is None:
            self.flushes = FlushGroup(self.db, self.server_id, self.settings.lease_s, self.settings.flush_group_s)
        if self.limits is None:  # on PostgreSQL the per-team connection limits hold for every process
            shared = SharedSlots(self.db, self.server_id, self.settings.slot_ttl_s) if self.db.is_postgres else None
            self.limits = ServerLimits(self.settings, shared=shared)
        if self.work is None:
            self.work = WorkSignal(self.db, leasable_groups, self.settings.wake_poll_s)
        if self.status is None:
            self.status = GroupStatus(self.db, self.work)


def create_app(settings: Settings | None = None, *, migrate: bool = True) -> FastAPI:
    """The application; ``migrate=False`` for the workers of ``mpe serve --workers``, whose
    supervisor brought the database to head before starting them (server/cli/supervisor.py)."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        settings.ensure_dirs()
        db = await asyncio.to_thread(Database, settings.db_url, migrate=migrate)  # §11: upgrade head before serving
        server_id = settings.server_id or default_server_id()
        app.state.mpe = state = ServerState(settings=settings, db=db, server_id=server_id)
        await state.work.start()
        if state.limits.shared is not None:
            await state.limits.shared.start()
        # What startup made (modules, the app, the pools) lives as long as the process: out of the
        # collector's way, a full collection walks only what serving made since, and the pauses it
        # puts on every session's deadlines are a fraction as long (DESIGN §10)
        gc.freeze()
        try:
            yield
        finally:
            gc.unfreeze()  # collectable again (a process that serves several apps in turn, as the tests)
            state.stopping.set()
            await state.work.stop()
            if state.limits.shared is not None:
                await state.limits.shared.stop()
            db.dispose()

    app = FastAPI(title="Duplex-MPE", version="0.1.0", lifespan=lifespan,
                  description="Benchmark server for full-duplex speech models in multi-party conversation. "
                              "Every /v1 route takes a team token (`Authorization: Bearer <token>`); errors are "
                              '`{"error": {"code", "message"}}` with a stable code.')
    app.add_api_websocket_route("/v1/bridge", bridge_endpoint)
    install_api(app)  # REST API, listen socket, pages
    app.include_router(check_router)  # the bridge check (/v1/checks)
    app.router.default = _socket_not_found(app.router.default)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict:
        return {"ok": True, "server_id": app.state.mpe.server_id}

    return app


def _socket_not_found(default):
    """The router's not-found handler, except that a WebSocket to a path that has none gets HTTP 404
    with a JSON error naming the bridge path (docs/protocol.md §2), not the bare 403 that reads like
    a refused token."""

    async def not_found(scope, receive, send) -> None:
        if scope["type"] != "websocket":
            return await default(scope, receive, send)
        ws = WebSocket(scope, receive, send)
        message = f"no WebSocket endpoint at {scope['path'][:200]}; bridges connect to /v1/bridge"
        if "websocket.http.response" in scope.get("extensions", {}):
            await ws.send_denial_response(error_response("not_found", message, 404))
        else:  # a server without the denial-response extension can only refuse (its own status code)
            await ws.close(code=1008, reason=message[:120])

    return not_found


REDACT = RedactSecrets()
SERVER_LOGGERS = ("uvicorn.access", "uvicorn.error")  # they log request paths: ?token=, signed URLs


def uvicorn_config(app: FastAPI, host: str, port: int, idle_timeout_s: float, **kw) -> uvicorn.Config:
    # Our own limits give clear errors; uvicorn's hard cap only stops abuse. PCM does not
    # compress: permessage-deflate would only cost CPU on every frame. An HTTP connection without a
    # complete request head for idle_timeout_s is closed (server.engine.protocols).
    config = uvicorn.Config(app, host=host, port=port, http=HttpProtocol, ws=WebSocketProtocol,
                            ws_max_size=1 << 20, ws_per_message_deflate=False, ws_ping_interval=20,
                            ws_ping_timeout=60, timeout_keep_alive=idle_timeout_s,
                            log_level=kw.pop("log_level", "warning"), lifespan="on", **kw)
    for name in SERVER_LOGGERS:  # after the Config, which sets up uvicorn's logging
        logging.getLogger(name).addFilter(REDACT)  # the same filter object: added once
    return config


class BackgroundServer:
    """Runs the server inside the current event loop (demo, tests, benchmarks)."""

    def __init__(self, settings: Settings, port: int = 0, host: str = "127.0.0.1"):
        self.settings = settings
        self.app = create_app(settings)
        self.server = uvicorn.Server(uvicorn_config(self.app, host, port, settings.http_idle_timeout_s))
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> "BackgroundServer":
        self.task = asyncio.create_task(self.server.serve())
        while not self.server.started:
            if self.task.done():
                self.task.result()
            await asyncio.sleep(0.02)
        return self

    @property
    def port(self) -> int:
        return self.server.servers[0].sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def __aexit__(self, *exc) -> None:
        self.server.should_exit = True
        if self.task:
            await self.task
