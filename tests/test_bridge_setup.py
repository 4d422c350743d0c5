"""``python -m model_bridges.setup``: the plan of every model family (its upstream torch pin, its
extra as pyproject.toml lists it, what to download), and the moshi family set up for real on the
CPU — its own venv, the client SDK, the bridges, the moshi stack — serving one episode of a real
server with the tiny random-weight model (slow: a torch install)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from model_bridges.setup import FAMILIES, extra_requirements, main, steps
from server.settings import Settings
from tests.support.cli import mpe
from tests.support.databases import database_url
from tests.support.servers import free_port, start_server

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_has_its_own_pins_and_downloads(family, tmp_path, capsys):
    venv = tmp_path / "host"
    assert main([family, "--venv", str(venv), "--dry-run", "--torch-index", "https://example.invalid/cu128"]) == 0
    out = capsys.readouterr().out
    assert not venv.exists()  # a dry run runs nothing
    f = FAMILIES[family]
    commands = steps(family, venv, "https://example.invalid/cu128")
    assert commands[0][-1] == str(venv) and "client-dist" in commands[1][-1]
    assert commands[3][-len(f.torch):] == list(f.torch) and "--index-url" in commands[3]
    assert commands[4][-len(extra_requirements(f.extra)):] == extra_requirements(f.extra)
    assert all(d.command.replace("DIR", str(venv)) in out for d in f.downloads) and "-m model_bridges" in out


def test_the_upstream_pins():
    """The pins each family's authors publish (cited in model_bridges/setup.py)."""
    assert FAMILIES["minicpm-o"].torch == ("torch==2.8.0", "torchaudio==2.8.0")
    assert "transformers==4.51.0" in extra_requirements("minicpm")
    assert FAMILIES["freeze-omni"].torch == ("torch==2.2.0", "torchaudio==2.2.0")
    assert {"transformers==4.45.2", "silero-vad==5.1.2"} <= set(extra_requirements("freeze-omni"))
    assert FAMILIES["moshi"].no_deps == ("moshi==0.2.13",)
    assert "einops>=0.7" in extra_requirements("voila")


def outside_env() -> dict[str, str]:
    """A host without the repository: nothing added to the import path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


@pytest.mark.slow
def test_moshi_host_on_the_cpu_serves_an_episode(tmp_path, mini_suite):
    venv = tmp_path / "moshi-host"
    done = subprocess.run([sys.executable, "-m", "model_bridges.setup", "moshi", "--venv", str(venv)], cwd=ROOT,
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "hf download kyutai/moshiko-pytorch-bf16" in done.stdout
    from tests.support.moshi import write_tiny_moshi

    checkpoint = write_tiny_moshi(tmp_path / "tiny")
    python = venv / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import clients.sdk, model_bridges, moshi, torch\n"
                            "try:\n    import server\nexcept ModuleNotFoundError:\n    print('no server')"],
                           cwd=tmp_path, env=outside_env(), capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0 and "no server" in probe.stdout, probe.stderr
    with database_url("sqlite", tmp_path) as url:
        settings = Settings(data_dir=tmp_path / "data", DATABASE_URL=url)
        token = tmp_path / "team.token"
        token.write_text(mpe(settings, "token", "create", "--team", "host").stdout.strip())
        run = json.loads(mpe(settings, "run", "create", "--model", "moshi-host", "--suite", str(mini_suite),
                             "--team", "host", "--limit", "1", "--clock", "lockstep", "--json").stdout)
        port = free_port()
        server = start_server(settings, port)
        try:
            bridge = subprocess.run(
                [str(python), "-m", "model_bridges", "moshi", "--server", f"ws://127.0.0.1:{port}", "--token-file",
                 str(token), "--max-episodes", "1", "--opt", f"checkpoint={checkpoint}", "--opt", "threads=1",
                 "--opt", "model_name=moshi-host"], cwd=tmp_path, env=outside_env(), capture_output=True, text=True,
                timeout=900)
            assert bridge.returncode == 0, bridge.stderr[-2000:]
        finally:
            server.terminate()
            server.wait()
    assert "1 episode(s) served" in bridge.stdout
    assert run["total"] >= 1
