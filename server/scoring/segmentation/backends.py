"""Choosing a proposal backend by name (``--backend``)."""

from __future__ import annotations

from pathlib import Path

from server.scoring.errors import BackendUnavailable
from server.scoring.segmentation.proposer import Proposer

BACKEND_NAMES = ("offline", "claude", "claude:MODEL")


def make_proposer(spec: str, *, cache_dir: Path | None = None, **claude_options) -> Proposer:
    """``offline`` or ``claude[:MODEL]``; the cache and the options go to the Claude backend only."""
    name, _, arg = spec.strip().partition(":")
    if name == "offline" and not arg:
        from server.scoring.segmentation.offline import OfflineProposer

        return OfflineProposer()
    if name == "claude":
        from server.scoring.segmentation.claude import ClaudeProposer

        return ClaudeProposer(arg or None, cache_dir=cache_dir, **claude_options)
    raise BackendUnavailable(f"unknown segmentation backend {spec!r}; choose one of: {', '.join(BACKEND_NAMES)}")
