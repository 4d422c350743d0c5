"""The HTTP side of the server: REST routers, the listen socket, the pages in ``static/``.

:func:`install` adds everything to the FastAPI app: routers under ``/v1``, JSON errors with
stable codes, a request-size limit, security headers, and the pages at ``/ui/``.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote_to_bytes

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from server.api import audio, episodes, listen, runs, suites, tokens
from server.api.errors import error_body, install_error_handlers

STATIC_DIR = Path(__file__).resolve().parent.parent.parent / "static"
MAX_BODY = 64 * 1024  # API request bodies are small JSON documents
DRAIN_MAX = 4 << 20  # a refused body up to this size is read and dropped before the 413
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; media-src 'self' blob:; "
       "connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


class Guard:
    """ASGI middleware: rejects request bodies over ``max_body`` bytes (413) and requests with a NUL
    character anywhere (400, :func:`nul_in_request`), and adds security headers (no referrer: listen
    URLs carry tokens; a CSP on the pages)."""

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
        body = None
        if (length is not None and length != b"0") or (length is None and headers.get(b"transfer-encoding")):
            body, more = b"", True  # read it here (bounded): small JSON documents, checked below
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
        where = nul_in_request(scope, body)
        if where is not None:
            return await _refuse(send, 400, "bad_request", f"requests must not contain NUL characters ({where} does)")
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


def nul_in_request(scope, body: bytes | None) -> str | None:
    """Where a request carries a NUL character (U+0000): ``"the path"``, ``"the query string"``, ``"the
    body"``, or None. No name, label or filter needs one, and PostgreSQL cannot store one in text, so
    the one rule for every route is here. In a JSON body a NUL is the escape ``\\u0000`` (raw
    control characters are not JSON); the body is parsed only when that escape occurs in it."""
    if "\x00" in scope.get("path", ""):
        return "the path"
    if b"\x00" in unquote_to_bytes(scope.get("query_string", b"").replace(b"+", b" ")):
        return "the query string"
    if body and (b"\x00" in body or (b"\\u0000" in body and _json_has_nul(body))):
        return "the body"
    return None


def _json_has_nul(body: bytes) -> bool:
    try:
        return _has_nul(json.loads(body))
    except (ValueError, RecursionError):
        return False  # not JSON (or absurdly deep): the route answers that


def _has_nul(value) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


async def _too_large(send, limit: int, close: bool = True) -> None:
    await _refuse(send, 413, "too_large", f"request bodies are limited to {limit} bytes", close=close)


async def _refuse(send, status: int, code: str, message: str, close: bool = False) -> None:
    body = json.dumps(error_body(code, message)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def install(app: FastAPI) -> None:
    """Add the API to ``app``: JSON error handlers, the ``/v1`` routers and the listen socket, the
    :class:`Guard` middleware, and the pages at ``/ui/``."""
    install_error_handlers(app)
    for module in (runs, episodes, audio, suites, tokens):
        app.include_router(module.router)
    app.include_router(listen.router)
    app.add_middleware(Guard)
    if STATIC_DIR.is_dir():
        app.mount("/ui", StaticFiles(directory=STATIC_DIR, html=True), name="ui")

        @app.get("/", include_in_schema=False)
        async def root() -> RedirectResponse:
            return RedirectResponse("/ui/")
