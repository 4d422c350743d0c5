"""The errors of the LLM layer."""

from __future__ import annotations


class LLMError(RuntimeError):
    """A call failed (after the retries): an API error, an unreachable server."""


class LLMUnavailable(LLMError):
    """A backend cannot be used here: a bad spec, a missing SDK, a missing API key."""


class APIStatus(LLMError):
    """An HTTP error status from a provider; ``retry_after_s`` from its Retry-After header."""

    def __init__(self, provider: str, status: int, message: str, retry_after_s: float | None = None):
        super().__init__(f"{provider}: HTTP {status}: {message}")
        self.provider, self.status, self.retry_after_s = provider, status, retry_after_s

    @property
    def retryable(self) -> bool:
        return self.status == 429 or self.status == 408 or self.status >= 500
