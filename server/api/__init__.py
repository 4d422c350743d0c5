"""The HTTP side of the server: REST routers, the listen socket, the pages in ``static/``.

:func:`install` adds everything to the FastAPI app: routers under ``/v1``, JSON errors with
stable codes, a request-size limit, security headers, and the pages at ``/ui/``.
"""

from __future__ import annotations

import json
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from server.api import audio, checks, episodes, listen, runs, suites, tokens
from server.api.errors import error_body, install_error_handlers

STATIC_DIR = Path(__file__).resolve().parent.parent.parent / "static"
MAX_BODY = 64 * 1024  # API request bodies are small JSON documents
DRAIN_MAX = 4 << 20  # a refused body up to this size is read and dropped before the 413
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; media-src 'self' blob:; "
       "connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


class Guard:
    """ASGI middleware: rejects request bodies over ``max_body`` bytes (413) and adds
    security headers (no referrer: listen URLs carry tokens; a CSP on the pages)."""

    def __init__(self, app, max_body: int = MAX_BODY):
        self.app, self.max_body = app, max_body

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            drained = length.isdigit() and int(length) <= DRAIN_MAX and await _drain(receive)
            return await _too_large(send, self.max_body, close=not drained)
        if length is None and headers.get(b"transfer-encoding"):  # chunked: read it here, bounded
            body, more = b"", True
            while more:
                msg = await receive()
                if msg["type"] != "http.request":
                    return
                body += msg.get("body", b"")
                more = msg.get("more_body", False)
                if len(body) > self.max_body:
                    drained = not more or await _drain(receive, DRAIN_MAX - len(body))
                    return await _too_large(send, self.max_body, close=not drained)
            receive = _replay(body, receive)
        pages = scope["path"].startswith("/ui")

        async def send_with_headers(msg):
            if msg["type"] == "http.response.start":
                extra = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer")]
                if pages:
                    extra += [(b"content-security-policy", CSP.encode()), (b"x-frame-options", b"DENY")]
                msg = {**msg, "headers": list(msg.get("headers") or []) + extra}
            await send(msg)

        await self.app(scope, receive, send_with_headers)


def _replay(body: bytes, receive):
    """A receive channel that yields the already-read body, then the real channel."""
    sent = False

    async def inner():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return inner


async def _drain(receive, budget: int = 0) -> bool:
    """Read and drop the rest of a refused body (so the client sees the 413, not a reset);
    False when it is larger than ``budget`` (or DRAIN_MAX) and the connection must close."""
    budget = budget or DRAIN_MAX
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            return False
        budget -= len(msg.get("body", b""))
        if budget < 0:
            return False
        if not msg.get("more_body", False):
            return True


async def _too_large(send, limit: int, close: bool = True) -> None:
    body = json.dumps(error_body("too_large", f"request bodies are limited to {limit} bytes")).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def install(app: FastAPI) -> None:
    """Add the API to ``app``: JSON error handlers, the ``/v1`` routers and the listen socket, the
    :class:`Guard` middleware, and the pages at ``/ui/``."""
    install_error_handlers(app)
    for module in (runs, episodes, audio, suites, tokens, checks):
        app.include_router(module.router)
    app.include_router(listen.router)
    app.add_middleware(Guard)
    if STATIC_DIR.is_dir():
        app.mount("/ui", StaticFiles(directory=STATIC_DIR, html=True), name="ui")

        @app.get("/", include_in_schema=False)
        async def root() -> RedirectResponse:
            return RedirectResponse("/ui/")
