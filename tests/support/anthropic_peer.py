"""A local fake of the Anthropic Messages API over real HTTP, for tests of Claude backends.

It speaks enough of ``POST /v1/messages`` for the official ``anthropic`` SDK: JSON replies
and (with ``"stream": true``) server-sent events; key checking (``x-api-key`` or ``Authorization: Bearer``, as SDK versions differ); API-shaped
errors with optional ``retry-after-ms``. Replies are scripted in order (:meth:`push`), or
computed by a ``responder(body) -> reply`` once the script is used up. Every request is
logged (path, headers, JSON body) in :attr:`requests`. The server, the script and the log are
:class:`tests.support.llm_peers.LLMPeer`'s.

Usage::

    with FakeAnthropic(api_key="k") as fake:
        fake.push('{"verdict": "CORRECT"}', Reply(status=529), "plain text")
        client = anthropic.Anthropic(api_key="k", base_url=fake.url)
        ...
        assert fake.requests[0].body["model"] == "claude-x"

A reply is a ``str`` (the assistant's text), a ``dict`` (sent as the whole JSON body), or
a :class:`Reply` (status, text or body, headers, optional delay, ``stop_reason``, default ``end_turn``).

Upstream (anthropic 2.17.0): ``resources/messages/messages.py`` ``create`` posts ``/v1/messages``;
``_client.py`` ``_api_key_auth`` sends the key as ``Authorization: Bearer`` (older versions as
``X-Api-Key``); ``_base_client.py`` reads ``retry-after-ms`` before ``retry-after``;
``lib/streaming/_messages.py`` ``accumulate_event`` reads the stream's ``message_start``,
``content_block_*``, ``message_delta`` and ``message_stop`` events.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable

from tests.support.llm_peers import LLMPeer, RecordedRequest, Reply

__all__ = ["ERROR_TYPES", "FakeAnthropic", "RecordedRequest", "Reply"]

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
               529: "overloaded_error"}


def _bearer(h: BaseHTTPRequestHandler) -> str | None:
    auth = h.headers.get("authorization") or ""
    return auth[7:] if auth.lower().startswith("bearer ") else None


class FakeAnthropic(LLMPeer):
    """``POST /v1/messages``; :attr:`url` is the SDK's ``base_url``."""

    name = "anthropic"

    def __init__(self, *, api_key: str | None = "test-key", responder: Callable[[dict], Any] | None = None,
                 model_echo: bool = True):
        super().__init__(api_key=api_key, responder=responder)
        self.model_echo = model_echo
        self._n = 0  # messages answered with generated text (their ids)

    @property
    def url(self) -> str:
        return self.origin

    @property
    def message_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.startswith("/v1/messages")]

    @classmethod
    def send(cls, h: BaseHTTPRequestHandler, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        super().send(h, status, obj, {"request-id": "req_fake", **(headers or {})})

    def error(self, h: BaseHTTPRequestHandler, status: int, message: str,
              headers: dict[str, str] | None = None) -> None:
        self.send(h, status, {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"),
                                                         "message": message}}, headers)

    def serve(self, h: BaseHTTPRequestHandler, path: str, body: Any) -> None:
        path = path.split("?", 1)[0]
        if h.command != "POST" or path != "/v1/messages":
            return self.error(h, 404, f"no route {h.command} {path}")
        if self.api_key is not None and self.api_key not in (h.headers.get("x-api-key"), _bearer(h)):
            return self.error(h, 401, "invalid x-api-key")
        if not isinstance(body, dict) or not body.get("model") or not isinstance(body.get("messages"), list) \
                or not isinstance(body.get("max_tokens"), int):
            return self.error(h, 400, "model, max_tokens and messages are required")
        reply = self.scripted(h, body)
        if reply is None:
            return
        with self._lock:
            self._n += 1
            mid = f"msg_fake_{self._n:06d}"
        text = reply.text or ""
        stop_reason = reply.stop_reason or "end_turn"
        model = body["model"] if self.model_echo else "claude-fake"
        usage = {"input_tokens": len(json.dumps(body)) // 4, "output_tokens": max(1, len(text) // 4)}
        if body.get("stream"):
            return self.send_sse(h, self._events(mid, model, text, stop_reason, usage), reply.headers)
        self.send(h, 200, {"id": mid, "type": "message", "role": "assistant", "model": model,
                           "content": [{"type": "text", "text": text}], "stop_reason": stop_reason,
                           "stop_sequence": None, "usage": usage}, reply.headers)

    @staticmethod
    def _events(mid: str, model: str, text: str, stop_reason: str, usage: dict[str, int]) -> list[bytes]:
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
        return parts
