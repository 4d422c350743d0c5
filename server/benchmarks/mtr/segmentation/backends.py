"""Choosing a proposal backend by name (``--backend``)."""

from __future__ import annotations

from pathlib import Path

from server.benchmarks.mtr.segmentation.proposer import Proposer
from server.llm import is_llm_spec
from server.scoring.errors import BackendUnavailable

BACKEND_NAMES = ("offline", "claude", "claude:MODEL", "openai:MODEL[@BASE_URL]", "google:MODEL")


def make_proposer(spec: str, *, cache_dir: Path | None = None, **claude_options) -> Proposer:
    """``offline`` or an LLM spec (``claude[:MODEL]``, ``openai:gpt-4o``, …); the cache and the options go
    to an LLM backend only."""
    name, _, arg = spec.strip().partition(":")
    if name == "offline" and not arg:
        from server.benchmarks.mtr.segmentation.offline import OfflineProposer

        return OfflineProposer()
    if is_llm_spec(spec):
        from server.benchmarks.mtr.segmentation.claude import LLMProposer

        return LLMProposer(spec, cache_dir=cache_dir, **claude_options)
    raise BackendUnavailable(f"unknown segmentation backend {spec!r}; choose one of: {', '.join(BACKEND_NAMES)}")
