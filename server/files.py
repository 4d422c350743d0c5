"""Atomic file writes: a reader never sees a half-written file."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def create_temp_file(path: Path) -> tuple[int, str]:
    """Open a fresh temporary file next to ``path`` (mode 0666 less the umask, unlike
    ``tempfile.mkstemp``'s 0600, so the final file has ordinary permissions)."""
    while True:
        tmp = str(path.parent / f".{path.name}.{os.getpid()}-{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:  # pragma: no cover - 48 random bits
            continue


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same directory and rename over the target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_temp_file(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
