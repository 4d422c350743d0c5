"""What a benchmark contributes to ``mpe dataset`` (types only).

:mod:`server.cli.dataset` names no benchmark: it picks one (``generate --benchmark NAME``, the suite's
``suite.json`` for ``synthesize``/``validate``/``stats``/``export-text``, the owner of a built-in suite for
``build`` or of a format for ``import --format``) and hands the command to that benchmark's
:class:`DatasetTools` (:meth:`server.core.benchmark.Benchmark.dataset_tools`). The commands whose options
belong to a benchmark (``generate``, ``import``) are its own typer apps; the others are calls with the
options every benchmark shares. Known failures raise :class:`clients.errors.MPEError` (one line, exit 2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import typer


class DatasetTools(Protocol):
    """One benchmark's side of ``mpe dataset``."""

    #: ``mpe dataset build NAME``: the built-in suites this benchmark builds
    builtin_names: tuple[str, ...]
    #: ``mpe dataset import SOURCE --format F``: the formats it reads, format -> what it is (one line)
    import_formats: Mapping[str, str]

    def generate_app(self) -> typer.Typer:
        """``mpe dataset generate --benchmark NAME``: one command with this benchmark's own options."""

    def import_app(self) -> typer.Typer | None:
        """``mpe dataset import SOURCE --format F`` for each of :attr:`import_formats`: one command that
        reads ``--format`` itself; None when it reads none."""

    def synthesize(self, path: Path, *, tts: str, workers: int | None) -> None:
        """Voice every clip of the suite at ``path`` (parallel, cached, resumable), with a report."""

    def validate(self, path: Path, *, strict: bool, no_audio: bool, as_json: bool) -> bool:
        """Print every problem of the suite at ``path`` (``strict``: the construction rules as errors,
        not warnings); True when it is valid."""

    def stats(self, path: Path, *, as_json: bool) -> None:
        """Print the suite's composition and duration tables."""

    def build(self, name: str, *, audio: bool | None, tts: str, workers: int | None) -> Path:
        """Build (or reuse) one of :attr:`builtin_names` under the data directory (``audio`` None: the
        suite's own default); its path."""

    def rules(self) -> Sequence[tuple[str, str]]:
        """Every rule ``validate`` can report: (rule id, one line)."""

    def export_text(self, path: Path, out: Path, *, conditions: tuple[str, ...] | None, labels: bool) -> int:
        """Speaker-attributed transcripts of the suite as JSONL at ``out`` (``conditions`` None: all of
        them; ``labels``: keep the benchmark's annotations); the number written."""
