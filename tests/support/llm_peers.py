"""Local servers speaking the OpenAI Chat Completions and Gemini ``generateContent`` wire formats over
real HTTP, for end-to-end tests of :mod:`server.llm` through the official ``openai`` and
``google-genai`` SDKs (the Anthropic Messages API peer, :mod:`tests.support.anthropic_peer`, is a
:class:`LLMPeer` too).

Replies are scripted in order (:meth:`LLMPeer.push`) or computed by ``responder(body)`` once the
script is used up: a ``str`` (the assistant's text), a ``dict`` (the whole JSON body) or a
:class:`Reply` (an error status with the provider's error body and headers such as ``retry-after``,
a forced tool call's input, a stop reason, a delay). A scripted ``body`` is sent as is, at the scripted
status. Every request is logged in :attr:`LLMPeer.requests`;
:attr:`LLMPeer.calls` counts the model calls.

Wire shapes, as the SDKs read them:

* OpenAI: ``POST /v1/chat/completions`` (openai ``resources/chat/completions/completions.py``,
  ``create``), reply ``ChatCompletion`` (``types/chat/chat_completion.py``: ``id``, ``object``,
  ``created``, ``model``, ``choices[].message`` with ``content`` / ``tool_calls[].function.arguments``
  as a JSON string, ``usage.prompt_tokens`` / ``completion_tokens``); streaming: ``data: <chunk>``
  events of ``chat.completion.chunk`` (``choices[].delta.content``), a last chunk with ``usage`` and no
  choices when ``stream_options.include_usage`` is set, then ``data: [DONE]`` (``_streaming.py``).
  Errors: ``{"error": {"message", "type", "param", "code"}}`` with ``x-ratelimit-*`` headers and
  ``retry-after`` on 429 (platform.openai.com/docs/guides/rate-limits, /docs/guides/error-codes).
* Gemini: ``POST /{v1,v1beta}/models/{model}:generateContent`` (the SDK's default version is ``v1``,
  ``_api_client.py`` ``GOOGLE_AI_API_DEFAULT_VERSION``) and ``:streamGenerateContent?alt=sse``,
  key in ``x-goog-api-key`` (google-genai ``models.py`` ``_generate_content``, ``_api_client.py``);
  reply ``GenerateContentResponse`` (``candidates[].content.parts[]`` with ``text`` or
  ``functionCall {name, args}``, ``finishReason``, ``usageMetadata.promptTokenCount`` /
  ``candidatesTokenCount``, ``modelVersion``); streaming: one ``data: <response>`` event per chunk.
  Errors: ``{"error": {"code", "message", "status"}}`` (ai.google.dev/api/rest, google.rpc.Status;
  429 is ``RESOURCE_EXHAUSTED``).
"""

from __future__ import annotations

import json
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Reply:
    status: int = 200
    text: str | None = None  # the assistant's text (a 200) or the error message
    body: dict[str, Any] | None = None  # the whole JSON body
    headers: dict[str, str] = field(default_factory=dict)
    tool_input: dict[str, Any] | None = None  # answer with a call of the request's (first) tool
    delay_s: float = 0.0
    stop_reason: str | None = None  # the stop / finish reason in the provider's words; None: a normal end


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class LLMPeer(ABC):
    """The HTTP server and the script; subclasses speak one provider's format (:meth:`serve`, :meth:`error`)."""

    name = "peer"

    def __init__(self, *, api_key: str | None = "test-key", responder: Callable[[dict], Any] | None = None):
        self.api_key = api_key
        self.responder = responder
        self.requests: list[RecordedRequest] = []
        self.calls = 0  # model calls answered (any status)
        self._script: deque[Any] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def push(self, *replies: Any) -> None:
        with self._lock:
            self._script.extend(replies)

    @property
    def origin(self) -> str:
        assert self._server is not None, "start() first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self):
        peer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                peer._handle(self)

            def do_GET(self):
                peer._handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name=f"{self.name}-peer", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _next(self, body: dict) -> Reply:
        with self._lock:
            self.calls += 1
            reply = self._script.popleft() if self._script else None
        if reply is None:
            reply = self.responder(body) if self.responder is not None else ""
        if isinstance(reply, str):
            return Reply(text=reply)
        if isinstance(reply, dict):
            return Reply(body=reply)
        return reply

    def scripted(self, h: BaseHTTPRequestHandler, body: dict) -> Reply | None:
        """The next reply after its delay, or None once it has been answered here: an error status
        (with the provider's error body unless a ``body`` is scripted) or a scripted ``body``."""
        reply = self._next(body)
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.status != 200 and not reply.body:
            self.error(h, reply.status, reply.text or "scripted error", reply.headers)
        elif reply.body is not None:
            self.send(h, reply.status, reply.body, reply.headers)
        else:
            return reply
        return None

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        raw = h.rfile.read(int(h.headers.get("content-length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        with self._lock:
            self.requests.append(RecordedRequest(h.command, h.path, {k.lower(): v for k, v in h.headers.items()},
                                                 body))
        self.serve(h, h.path, body)

    @abstractmethod
    def serve(self, h: BaseHTTPRequestHandler, path: str, body: Any) -> None:
        """Answer one request to ``path`` in the provider's format."""

    @abstractmethod
    def error(self, h: BaseHTTPRequestHandler, status: int, message: str,
              headers: dict[str, str] | None = None) -> None:
        """Answer with the provider's error body."""

    @staticmethod
    def write(h: BaseHTTPRequestHandler, status: int, content_type: str, data: bytes,
              headers: dict[str, str] | None = None) -> None:
        h.send_response(status)
        h.send_header("content-type", content_type)
        h.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    @classmethod
    def send(cls, h: BaseHTTPRequestHandler, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        cls.write(h, status, "application/json", json.dumps(obj).encode(), headers)

    @classmethod
    def send_sse(cls, h: BaseHTTPRequestHandler, events: list[bytes], headers: dict[str, str] | None = None) -> None:
        cls.write(h, 200, "text/event-stream", b"".join(events), headers)


def _tokens(obj: Any) -> int:
    return max(1, len(json.dumps(obj)) // 4)


class FakeOpenAI(LLMPeer):
    """``POST /v1/chat/completions``; :attr:`url` is the SDK's ``base_url``."""

    name = "openai"
    ERROR_TYPES = {400: ("invalid_request_error", None), 401: ("invalid_request_error", "invalid_api_key"),
                   404: ("invalid_request_error", "model_not_found"), 429: ("requests", "rate_limit_exceeded"),
                   500: ("server_error", None), 503: ("server_error", None)}

    @property
    def url(self) -> str:
        return self.origin + "/v1"

    def error(self, h, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        kind, code = self.ERROR_TYPES.get(status, ("server_error", None))
        hdrs = dict(headers or {})
        if status == 429:
            hdrs = {"x-ratelimit-limit-requests": "500", "x-ratelimit-remaining-requests": "0",
                    "x-ratelimit-reset-requests": "120ms", **hdrs}
        self.send(h, status, {"error": {"message": message, "type": kind, "param": None, "code": code}}, hdrs)

    def serve(self, h, path: str, body: Any) -> None:
        if h.command != "POST" or path.split("?")[0] != "/v1/chat/completions":
            return self.error(h, 404, f"Invalid URL ({h.command} {path})")
        auth = h.headers.get("authorization") or ""
        if self.api_key is not None and auth != f"Bearer {self.api_key}":
            return self.error(h, 401, "Incorrect API key provided.")
        if not isinstance(body, dict) or not body.get("model") or not isinstance(body.get("messages"), list):
            return self.error(h, 400, "you must provide a model parameter and messages")
        reply = self.scripted(h, body)
        if reply is None:
            return
        cid, model, created = f"chatcmpl-{self.calls:06d}", body["model"], int(time.time())
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or "", "refusal": None}
        finish = reply.stop_reason or "stop"
        if reply.tool_input is not None:
            fn = body["tools"][0]["function"]["name"]
            message = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [
                {"id": f"call_{self.calls}", "type": "function",
                 "function": {"name": fn, "arguments": json.dumps(reply.tool_input)}}]}
            finish = reply.stop_reason or "tool_calls"
        usage = {"prompt_tokens": _tokens(body["messages"]), "completion_tokens": _tokens(message),
                 "total_tokens": 0}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if body.get("stream"):
            def ev(obj: Any) -> bytes:
                return f"data: {json.dumps(obj)}\n\n".encode()

            text = reply.text or ""
            base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}
            events = [ev({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                               "finish_reason": None}]})]
            events += [ev({**base, "choices": [{"index": 0, "delta": {"content": text[i:i + 8]},
                                                "finish_reason": None}]}) for i in range(0, len(text), 8)]
            events.append(ev({**base, "choices": [{"index": 0, "delta": {},
                                               "finish_reason": reply.stop_reason or "stop"}]}))
            if (body.get("stream_options") or {}).get("include_usage"):
                events.append(ev({**base, "choices": [], "usage": usage}))
            events.append(b"data: [DONE]\n\n")
            return self.send_sse(h, events, reply.headers)
        self.send(h, 200, {"id": cid, "object": "chat.completion", "created": created, "model": model,
                           "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                           "usage": usage}, reply.headers)


class FakeGemini(LLMPeer):
    """``/v1[beta]/models/{model}:generateContent`` and ``:streamGenerateContent?alt=sse``; :attr:`url`
    is the SDK's ``HttpOptions.base_url``."""

    name = "google"
    STATUSES = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED",
                500: "INTERNAL", 503: "UNAVAILABLE"}

    @property
    def url(self) -> str:
        return self.origin

    def error(self, h, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        self.send(h, status, {"error": {"code": status, "message": message,
                                        "status": self.STATUSES.get(status, "UNKNOWN")}}, headers)

    def serve(self, h, path: str, body: Any) -> None:
        route, _, query = path.partition("?")
        version, _, rest = route.lstrip("/").partition("/models/")
        if h.command != "POST" or version not in ("v1", "v1beta") or ":" not in rest:
            return self.error(h, 404, f"no route {h.command} {path}")
        model, _, method = rest.partition(":")
        if method not in ("generateContent", "streamGenerateContent"):
            return self.error(h, 404, f"unknown method {method}")
        if self.api_key is not None and h.headers.get("x-goog-api-key") != self.api_key:
            return self.error(h, 400, "API key not valid. Please pass a valid API key.")
        if not isinstance(body, dict) or not isinstance(body.get("contents"), list) or not body["contents"]:
            return self.error(h, 400, "* GenerateContentRequest.contents: contents is not specified")
        reply = self.scripted(h, body)
        if reply is None:
            return
        if reply.tool_input is not None:
            fn = body["tools"][0]["functionDeclarations"][0]["name"]
            parts: list[dict[str, Any]] = [{"functionCall": {"name": fn, "args": reply.tool_input}}]
        else:
            parts = [{"text": reply.text or ""}]
        usage = {"promptTokenCount": _tokens(body["contents"]), "candidatesTokenCount": _tokens(parts)}
        usage["totalTokenCount"] = usage["promptTokenCount"] + usage["candidatesTokenCount"]
        finish_reason = reply.stop_reason or "STOP"

        def response(ps: list[dict[str, Any]], finish: str | None, meta: dict[str, int] | None) -> dict[str, Any]:
            cand: dict[str, Any] = {"content": {"role": "model", "parts": ps}, "index": 0}
            if finish:
                cand["finishReason"] = finish
            out: dict[str, Any] = {"candidates": [cand], "modelVersion": model, "responseId": f"r{self.calls}"}
            if meta:
                out["usageMetadata"] = meta
            return out

        if method == "streamGenerateContent":
            if query != "alt=sse":
                return self.error(h, 400, "this peer streams only with alt=sse")
            text = reply.text or ""
            pieces = [text[i:i + 8] for i in range(0, len(text), 8)] or [""]
            events = [f"data: {json.dumps(response([{'text': p}], finish_reason if i == len(pieces) - 1 else None, usage if i == len(pieces) - 1 else None))}\r\n\r\n".encode()  # noqa: E501
                      for i, p in enumerate(pieces)]
            return self.send_sse(h, events, reply.headers)
        self.send(h, 200, response(parts, finish_reason, usage), reply.headers)
