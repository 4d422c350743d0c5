"""Tokens and estimated cost per provider and model for one run.

Every call through :class:`server.llm.client.LLMClient` adds its tokens to a :class:`Ledger` (by default
the process's :data:`RUN_LEDGER`, one per command run); cache hits are counted but cost nothing.

Prices (:data:`PRICES`): US dollars per million tokens, standard (not batch, not cached-input)
rates, from the providers' public price pages as published on 2025-11-01 —
https://openai.com/api/pricing, https://www.anthropic.com/pricing#api (the models overview of
docs.claude.com), https://ai.google.dev/gemini-api/docs/pricing (Gemini 2.5 Pro: the rate for
prompts up to 200k tokens). A model is priced by the longest entry its name starts with (a dated
snapshot such as ``gpt-4o-2024-08-06`` takes ``gpt-4o``'s price); any other model, and every model of
a custom OpenAI-compatible server, prints its tokens and "cost unknown".
"""

from __future__ import annotations

import threading

from pydantic import BaseModel

from server.llm.types import Usage

PRICES_DATE = "2025-11-01"
#: (provider, model prefix) -> (input, output) USD per million tokens; source and date: module docstring
PRICES: dict[tuple[str, str], tuple[float, float]] = {
    ("openai", "gpt-4o"): (2.50, 10.00),
    ("openai", "gpt-4o-mini"): (0.15, 0.60),
    ("openai", "gpt-4.1"): (2.00, 8.00),
    ("openai", "gpt-4.1-mini"): (0.40, 1.60),
    ("anthropic", "claude-opus-4-1"): (15.00, 75.00),
    ("anthropic", "claude-opus-4-0"): (15.00, 75.00),
    ("anthropic", "claude-sonnet-4"): (3.00, 15.00),
    ("anthropic", "claude-haiku-4-5"): (1.00, 5.00),
    ("google", "gemini-2.5-pro"): (1.25, 10.00),
    ("google", "gemini-2.5-flash"): (0.30, 2.50),
}


def price(provider: str, model: str) -> tuple[float, float] | None:
    """(input, output) USD per million tokens, or None when unknown."""
    best = max((p for (prov, p) in PRICES if prov == provider and model.startswith(p)), key=len, default=None)
    return None if best is None else PRICES[(provider, best)]


class UsageLine(BaseModel):
    provider: str
    model: str
    requests: int = 0  # calls that reached the provider (retries not counted)
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def cost_usd(self) -> float | None:
        p = price(self.provider, self.model)
        return None if p is None else (self.input_tokens * p[0] + self.output_tokens * p[1]) / 1e6

    def describe(self) -> str:
        cost = self.cost_usd
        money = "cost unknown" if cost is None else f"≈ ${cost:.4f} (prices of {PRICES_DATE})"
        return (f"{self.provider}:{self.model}: {self.requests} requests, {self.cache_hits} cached, "
                f"{self.input_tokens} input + {self.output_tokens} output tokens, {money}")


class Ledger:
    """Tokens per (provider, model), thread-safe."""

    def __init__(self) -> None:
        self._lines: dict[tuple[str, str], UsageLine] = {}
        self._lock = threading.Lock()

    def _line(self, provider: str, model: str) -> UsageLine:
        return self._lines.setdefault((provider, model), UsageLine(provider=provider, model=model))

    def add(self, provider: str, model: str, usage: Usage) -> None:
        with self._lock:
            line = self._line(provider, model)
            line.requests += 1
            line.input_tokens += usage.input_tokens
            line.output_tokens += usage.output_tokens

    def hit(self, provider: str, model: str) -> None:
        with self._lock:
            self._line(provider, model).cache_hits += 1

    def lines(self) -> list[UsageLine]:
        with self._lock:
            return [line.model_copy() for _, line in sorted(self._lines.items())]

    def report(self) -> list[str]:
        """One line per provider and model, and the total of the priced ones; empty if nothing was asked."""
        lines = self.lines()
        out = [line.describe() for line in lines]
        costs = [c for c in (line.cost_usd for line in lines) if c is not None]
        if len(lines) > 1 and costs:
            unknown = "" if len(costs) == len(lines) else " (+ models of unknown cost)"
            out.append(f"LLM total: ≈ ${sum(costs):.4f}{unknown}")
        return out

    def drain(self) -> list[UsageLine]:
        """The lines so far, and the ledger emptied (a worker process hands its usage on)."""
        with self._lock:
            out = [line for _, line in sorted(self._lines.items())]
            self._lines.clear()
            return out

    def merge(self, lines: list[UsageLine]) -> None:
        """Add another ledger's lines (a worker's)."""
        with self._lock:
            for other in lines:
                line = self._line(other.provider, other.model)
                line.requests += other.requests
                line.cache_hits += other.cache_hits
                line.input_tokens += other.input_tokens
                line.output_tokens += other.output_tokens

    def clear(self) -> None:
        with self._lock:
            self._lines.clear()


def merged(*groups: list[UsageLine]) -> list[UsageLine]:
    """Several ledgers' lines as one list (one line per provider and model)."""
    ledger = Ledger()
    for g in groups:
        ledger.merge(g)
    return ledger.lines()


#: the run's ledger (a CLI command is one run)
RUN_LEDGER = Ledger()
