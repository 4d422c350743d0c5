"""The providers, each through its official SDK (the only place in the project that builds one):
:mod:`.anthropic_api` (``anthropic``), :mod:`.openai_api` (``openai``), :mod:`.google_api` (``google-genai``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from server.llm.types import LLMReply, LLMRequest, Usage

#: called once at the end of a stream with its tokens and the model that answered
UsageSink = Callable[[Usage, str], None]


class ProviderAPI(Protocol):
    """One provider's calls. Errors: :class:`server.llm.errors.APIStatus` for an HTTP status (retried by
    the client when retryable), :class:`server.llm.errors.LLMError` otherwise. SDK retries are off:
    :class:`server.llm.client.LLMClient` retries, the same way for every provider."""

    def complete(self, request: LLMRequest) -> LLMReply: ...

    def stream(self, request: LLMRequest, on_usage: UsageSink) -> Iterator[str]: ...
