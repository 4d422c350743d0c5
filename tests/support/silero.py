"""A TorchScript stand-in for silero-vad's ``silero_vad.jit`` (the file a ``vad=`` option loads)."""

from __future__ import annotations

from pathlib import Path

import torch


class Certain(torch.nn.Module):
    """Always speech: probability 1 for every window."""

    def forward(self, x: torch.Tensor, sr: int) -> torch.Tensor:
        return torch.ones(1, 1)

    @torch.jit.export
    def reset_states(self) -> None:
        pass


def save_certain(path: Path) -> Path:
    """``path`` (a ``silero_vad.jit``) written as :class:`Certain`, its directory made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(torch.jit.script(Certain()), str(path))
    return path
