"""The client every LLM call site uses: cache, retries, a concurrency limit, token accounting.

* **Cache**: with a ``cache_dir``, each reply is stored under the sha256 of the whole request, the
  provider and the model (:meth:`server.llm.types.LLMRequest.key`); the same request again is answered
  from disk without a call. A streamed reply is cached too, and replayed as one piece.
* **Retries**: 429, 408 and 5xx (Anthropic's 529 overload included) and connection errors are retried
  up to ``max_retries`` times, waiting what the server's ``retry-after-ms`` / ``retry-after`` header
  asks, else an exponential backoff (``backoff_s`` × 2^attempt, with jitter, at most ``max_backoff_s``).
  The SDKs' own retries are off, so every provider retries alike. Other statuses fail at once.
* **Concurrency**: at most ``concurrency`` calls of this client in flight (a semaphore).
* **Accounting**: tokens of every call that reached the provider go to ``ledger``; cache hits are counted.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from server.llm.cache import ReplyCache
from server.llm.errors import APIStatus, LLMError
from server.llm.providers import ProviderAPI
from server.llm.spec import ModelSpec, parse_spec
from server.llm.types import LLMReply, LLMRequest, Usage
from server.llm.usage import RUN_LEDGER, Ledger

DEFAULT_MAX_RETRIES = 4
DEFAULT_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0


def provider_api(spec: ModelSpec, api_key: str | None = None, timeout_s: float = 120.0) -> ProviderAPI:
    """The SDK-backed API of ``spec``'s provider."""
    if spec.provider == "anthropic":
        from server.llm.providers.anthropic_api import AnthropicAPI

        return AnthropicAPI(spec, api_key, timeout_s)
    if spec.provider == "openai":
        from server.llm.providers.openai_api import OpenAIAPI

        return OpenAIAPI(spec, api_key, timeout_s)
    from server.llm.providers.google_api import GoogleAPI

    return GoogleAPI(spec, api_key, timeout_s)


class LLMClient:
    """``complete(request) -> reply`` and ``stream(request) -> text deltas`` for one provider and model."""

    def __init__(self, spec: ModelSpec | str, *, cache_dir: Path | str | None = None, api_key: str | None = None,
                 timeout_s: float = 120.0, max_retries: int = DEFAULT_MAX_RETRIES,
                 backoff_s: float = DEFAULT_BACKOFF_S, max_backoff_s: float = MAX_BACKOFF_S, concurrency: int = 8,
                 ledger: Ledger | None = None, sleep: Callable[[float], None] = time.sleep,
                 api: ProviderAPI | None = None):
        self.spec = parse_spec(spec) if isinstance(spec, str) else spec
        self.api = api if api is not None else provider_api(self.spec, api_key, timeout_s)
        self.cache = ReplyCache(cache_dir) if cache_dir is not None else None
        self.max_retries, self.backoff_s, self.max_backoff_s = max(0, max_retries), backoff_s, max_backoff_s
        self.ledger = ledger if ledger is not None else RUN_LEDGER
        self._sleep = sleep
        self._slots = threading.BoundedSemaphore(max(1, concurrency))

    @property
    def provider(self) -> str:
        return self.spec.provider

    @property
    def model(self) -> str:
        return self.spec.model

    def _key(self, request: LLMRequest) -> str:
        return request.key(self.spec.provider, self.spec.model)

    def _cached(self, request: LLMRequest) -> LLMReply | None:
        reply = self.cache.get(self._key(request)) if self.cache is not None else None
        if reply is not None:
            self.ledger.hit(self.spec.provider, self.spec.model)
        return reply

    def _wait(self, attempt: int, exc: LLMError) -> None:
        asked = exc.retry_after_s if isinstance(exc, APIStatus) else None
        if asked is None:
            asked = min(self.max_backoff_s, self.backoff_s * 2 ** attempt) * (0.5 + random.random() / 2)
        self._sleep(min(asked, self.max_backoff_s))

    @staticmethod
    def _retryable(exc: LLMError) -> bool:
        return exc.retryable if isinstance(exc, APIStatus) else True  # a connection error: retried

    def complete(self, request: LLMRequest) -> LLMReply:
        """The reply, from the cache when it holds one; :class:`LLMError` once the retries are spent."""
        hit = self._cached(request)
        if hit is not None:
            return hit
        attempt = 0
        while True:
            try:
                with self._slots:
                    reply = self.api.complete(request)
                break
            except LLMError as exc:
                if attempt >= self.max_retries or not self._retryable(exc):
                    raise
                self._wait(attempt, exc)
                attempt += 1
        self.ledger.add(self.spec.provider, self.spec.model, reply.usage)
        if self.cache is not None:
            self.cache.put(self._key(request), request, reply)
        return reply

    def stream(self, request: LLMRequest) -> Iterator[str]:
        """The reply's text as it arrives. A failure before the first piece is retried like
        :meth:`complete`; after it, it is raised (the caller has text already)."""
        hit = self._cached(request)
        if hit is not None:
            yield hit.text
            return
        done: list[tuple[Usage, str]] = []
        attempt = 0
        while True:
            pieces: list[str] = []
            try:
                with self._slots:
                    for piece in self.api.stream(request, lambda u, m: done.append((u, m))):
                        pieces.append(piece)
                        yield piece
                break
            except LLMError as exc:
                if pieces or attempt >= self.max_retries or not self._retryable(exc):
                    raise
                self._wait(attempt, exc)
                attempt += 1
        usage, model = done[-1] if done else (Usage(), self.spec.model)
        self.ledger.add(self.spec.provider, self.spec.model, usage)
        if self.cache is not None:
            self.cache.put(self._key(request), request, LLMReply(text="".join(pieces), usage=usage,
                                                                 provider=self.spec.provider, model=model))
