"""A local fake of the Anthropic Messages API over real HTTP, for tests of Claude backends.

It speaks enough of ``POST /v1/messages`` for the official ``anthropic`` SDK: JSON replies
and (with ``"stream": true``) server-sent events; key checking (``x-api-key`` or ``Authorization: Bearer``, as SDK versions differ); API-shaped
errors with optional ``retry-after-ms``. Replies are scripted in order (:meth:`push`), or
computed by a ``responder(body) -> reply`` once the script is used up. Every request is
logged (path, headers, JSON body) in :attr:`requests`.

Usage::

    with FakeAnthropic(api_key="k") as fake:
        fake.push('{"verdict": "CORRECT"}', Reply(status=529), "plain text")
        client = anthropic.Anthropic(api_key="k", base_url=fake.url)
        ...
        assert fake.requests[0].body["model"] == "claude-x"

A reply is a ``str`` (the assistant's text), a ``dict`` (sent as the whole JSON body), or
a :class:`Reply` (status, text or body, headers, optional delay).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
               529: "overloaded_error"}


@dataclass
class Reply:
    status: int = 200
    text: str | None = None  # assistant text for a 200 reply
    body: dict[str, Any] | None = None  # raw JSON body (overrides text / the error body)
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    stop_reason: str = "end_turn"


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


def _bearer(h: BaseHTTPRequestHandler) -> str | None:
    auth = h.headers.get("authorization") or ""
    return auth[7:] if auth.lower().startswith("bearer ") else None


class FakeAnthropic:
    def __init__(self, *, api_key: str | None = "test-key", responder: Callable[[dict], Any] | None = None,
                 model_echo: bool = True):
        self.api_key = api_key
        self.responder = responder
        self.model_echo = model_echo
        self.requests: list[RecordedRequest] = []
        self._script: deque[Any] = deque()
        self._lock = threading.Lock()
        self._n = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control

    def push(self, *replies: Any) -> None:
        with self._lock:
            self._script.extend(replies)

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def message_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.startswith("/v1/messages")]

    def start(self) -> "FakeAnthropic":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):
                fake._handle(self)

            def do_GET(self):
                fake._handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-anthropic", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeAnthropic":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- serving

    def _next_reply(self, body: dict) -> Any:
        with self._lock:
            if self._script:
                return self._script.popleft()
        if self.responder is not None:
            return self.responder(body)
        return ""

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("content-length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        path = h.path.split("?", 1)[0]
        with self._lock:
            self.requests.append(RecordedRequest(h.command, h.path, {k.lower(): v for k, v in h.headers.items()}, body))
        if h.command != "POST" or path != "/v1/messages":
            return self._error(h, 404, f"no route {h.command} {path}")
        if self.api_key is not None and self.api_key not in (h.headers.get("x-api-key"), _bearer(h)):
            return self._error(h, 401, "invalid x-api-key")
        if not isinstance(body, dict) or not body.get("model") or not isinstance(body.get("messages"), list) \
                or not isinstance(body.get("max_tokens"), int):
            return self._error(h, 400, "model, max_tokens and messages are required")
        reply = self._next_reply(body)
        if isinstance(reply, str):
            reply = Reply(text=reply)
        elif isinstance(reply, dict):
            reply = Reply(body=reply)
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.status != 200:
            return self._error(h, reply.status, reply.text or "scripted error", reply.body, reply.headers)
        if reply.body is not None:
            return self._send(h, 200, reply.body, reply.headers)
        with self._lock:
            self._n += 1
            mid = f"msg_fake_{self._n:06d}"
        text = reply.text or ""
        model = body["model"] if self.model_echo else "claude-fake"
        usage = {"input_tokens": len(json.dumps(body)) // 4, "output_tokens": max(1, len(text) // 4)}
        if body.get("stream"):
            return self._stream(h, mid, model, text, reply.stop_reason, usage, reply.headers)
        self._send(h, 200, {"id": mid, "type": "message", "role": "assistant", "model": model,
                            "content": [{"type": "text", "text": text}], "stop_reason": reply.stop_reason,
                            "stop_sequence": None, "usage": usage}, reply.headers)

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        h.send_header("request-id", "req_fake")
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def _error(self, h, status: int, message: str, body: dict | None = None, headers: dict | None = None) -> None:
        self._send(h, status, body or {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"),
                                                                  "message": message}}, headers)

    @staticmethod
    def _stream(h, mid: str, model: str, text: str, stop_reason: str, usage: dict, headers: dict) -> None:
        def ev(name: str, data: dict) -> bytes:
            return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()

        chunks = [text[i:i + 16] for i in range(0, len(text), 16)] or [""]
        parts = [ev("message_start", {"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 0}}}),
            ev("content_block_start", {"type": "content_block_start", "index": 0,
                                       "content_block": {"type": "text", "text": ""}})]
        parts += [ev("content_block_delta", {"type": "content_block_delta", "index": 0,
                                             "delta": {"type": "text_delta", "text": c}}) for c in chunks]
        parts += [ev("content_block_stop", {"type": "content_block_stop", "index": 0}),
                  ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop_reason,
                                                                          "stop_sequence": None},
                                       "usage": {"output_tokens": usage["output_tokens"]}}),
                  ev("message_stop", {"type": "message_stop"})]
        data = b"".join(parts)
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)
