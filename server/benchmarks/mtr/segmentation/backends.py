"""Choosing a proposal backend by name (``--backend``)."""

from __future__ import annotations

from pathlib import Path

from server.benchmarks.mtr.segmentation.proposer import Proposer
from server.scoring.errors import BackendUnavailable

BACKEND_NAMES = ("offline", "claude", "claude:MODEL")


def make_proposer(spec: str, *, cache_dir: Path | None = None, **claude_options) -> Proposer:
    """``offline`` or ``claude[:MODEL]``; the cache and the options go to the Claude backend only."""
    name, _, arg = spec.strip().partition(":")
    if name == "offline" and not arg:
        from server.benchmarks.mtr.segmentation.offline import OfflineProposer

        return OfflineProposer()
    if name == "claude":
        from server.benchmarks.mtr.segmentation.claude import ClaudeProposer

        return ClaudeProposer(arg or None, cache_dir=cache_dir, **claude_options)
    raise BackendUnavailable(f"unknown segmentation backend {spec!r}; choose one of: {', '.join(BACKEND_NAMES)}")
