"""One LLM provider layer for every call site (generators, judges, segmentation, text reference, the
cascade): one request type, one reply type, providers ``anthropic``, ``openai`` (and OpenAI-compatible
servers by base URL) and ``google`` through their official SDKs, one on-disk cache, retries with
backoff, a concurrency limit, and token and cost accounting per run. See docs/llm.md.

The public API::

    client = make_client("openai:gpt-4o", cache_dir=data_dir / "llm-cache")
    reply = client.complete(LLMRequest.ask(system, user, temperature=0.1))
    for piece in client.stream(request): ...
"""

from __future__ import annotations

from pathlib import Path

from server.llm.client import LLMClient
from server.llm.errors import APIStatus, LLMError, LLMUnavailable
from server.llm.spec import ModelSpec, is_llm_spec, parse_spec
from server.llm.types import LLMReply, LLMRequest, Message, Tool, Usage
from server.llm.usage import RUN_LEDGER, Ledger

__all__ = ["APIStatus", "LLMClient", "LLMError", "LLMReply", "LLMRequest", "LLMUnavailable", "Ledger", "Message",
           "ModelSpec", "RUN_LEDGER", "Tool", "Usage", "is_llm_spec", "make_client", "parse_spec"]


def make_client(spec: str | ModelSpec, *, default_model: str | None = None, cache_dir: Path | str | None = None,
                **options: object) -> LLMClient:
    """A client for ``spec`` (``PROVIDER[:MODEL][@BASE_URL]``, :mod:`server.llm.spec`); ``default_model``
    when the spec names none."""
    parsed = parse_spec(spec, default_model) if isinstance(spec, str) else spec
    return LLMClient(parsed, cache_dir=cache_dir, **options)  # type: ignore[arg-type]
