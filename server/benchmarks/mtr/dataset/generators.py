"""The MTR dialogue generators by name."""

from __future__ import annotations

from server.benchmarks.mtr.dataset.schema import DialogueGenerator
from server.datasets.errors import DatasetError

GENERATORS = ("procedural", "claude")


def make_generator(name: str, seed: int, **options) -> DialogueGenerator:
    """A dialogue generator by name (``procedural`` or ``claude``; ``anthropic`` is ``claude``)."""
    if name == "procedural":
        from server.benchmarks.mtr.dataset.procedural import ProceduralGenerator

        if options:
            raise DatasetError(f"the procedural generator takes no options ({', '.join(options)})")
        return ProceduralGenerator(seed)
    if name in ("claude", "anthropic"):
        from server.benchmarks.mtr.dataset.claude import ClaudeDialogueGenerator

        return ClaudeDialogueGenerator(seed=seed, **options)
    raise DatasetError(f"unknown generator {name!r} ({', '.join(GENERATORS)})")
