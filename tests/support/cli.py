"""The ``mpe`` command as a person runs it: a subprocess on a test's settings."""

from __future__ import annotations

import os
import subprocess
import sys


def mpe(settings, *args, check=True, env: dict[str, str] | None = None):
    """``mpe ARGS`` in a process of its own on ``settings``' database and data dir (``env``: more
    of its environment); asserts it exits 0 unless ``check`` is off."""
    env = dict(os.environ, DATABASE_URL=settings.db_url, MPE_DATA_DIR=str(settings.data_dir), **(env or {}))
    p = subprocess.run([sys.executable, "-m", "server.cli", *args], env=env, capture_output=True, text=True,
                       timeout=300)
    if check:
        assert p.returncode == 0, p.stderr
    return p
