"""The client-only distribution (client-dist/) as an external team uses it: built from the
repository, installed into a fresh virtual environment without the server, and a bridge
written only against the installed SDK plays a run on a real server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

import clients
from clients.codec import PROTOCOL_VERSION
from server.bridgecheck.suite import CHECK_SUITE_NAME, build_check_suite
from server.core.status import EpisodeStatus, RunStatus
from server.db import Database, Episode
from server.settings import Settings
from tests.support.cli import mpe
from tests.support.databases import database_url
from tests.support.servers import free_port, start_server

ROOT = Path(__file__).resolve().parents[1]
DIST = "duplex-mpe-client"
# What clients/ imports besides the standard library, as distribution names.
CLIENT_DEPS = {"numpy", "websockets", "pydantic"}

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class ClientVenv:
    python: Path  # the fresh environment's interpreter
    wheel: Path
    home: Path  # an empty working directory outside the repository

    def run(self, script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        path = self.home / "script.py"
        path.write_text(script)
        return subprocess.run([str(self.python), str(path), *args], cwd=self.home, env=outside_env(),
                              capture_output=True, text=True, timeout=timeout)


def outside_env() -> dict[str, str]:
    """The environment of a host without the repository: nothing added to the import path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def pip(python: Path | str, *args: str, cwd: Path) -> None:
    p = subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args], cwd=cwd,
                       env=outside_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory) -> ClientVenv:
    tmp = tmp_path_factory.mktemp("client-dist")
    # The repository's layout, copied so that building leaves nothing in the working tree:
    # client-dist/clients stays the relative symlink to clients/.
    shutil.copytree(ROOT / "clients", tmp / "src" / "clients", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "client-dist", tmp / "src" / "client-dist", symlinks=True,
                    ignore=shutil.ignore_patterns("build", "*.egg-info"))
    assert (tmp / "src" / "client-dist" / "clients").is_symlink()
    wheels = tmp / "wheels"
    # Built with this environment's setuptools (no download); then installed like a team
    # would: a fresh environment, the wheel, its dependencies from the package index.
    pip(sys.executable, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), "./client-dist",
        cwd=tmp / "src")
    (wheel,) = wheels.glob("*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(tmp / "venv")], check=True, env=outside_env(), timeout=300)
    python = tmp / "venv" / "bin" / "python"
    pip(python, "install", "--quiet", str(wheel), cwd=tmp)  # the file itself: never a same-named index package
    home = tmp / "home"
    home.mkdir()
    return ClientVenv(python, wheel, home)


def test_wheel_ships_the_repository_clients_and_declares_only_their_dependencies(client_venv):
    with zipfile.ZipFile(client_venv.wheel) as whl:
        names = set(whl.namelist())
        shipped = {n for n in names if not n.split("/")[0].endswith(".dist-info")}
        assert shipped == {f"clients/{p.name}" for p in (ROOT / "clients").glob("*.py")}  # every module, no other
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        fields = [line.split(": ", 1) for line in whl.read(meta).decode().splitlines() if ": " in line]
    requires = {v.split(";")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
                for k, v in fields if k == "Requires-Dist"}
    assert requires == CLIENT_DEPS
    version = dict(fields)["Version"]
    assert version == clients.__version__
    assert int(version.split(".")[0]) == PROTOCOL_VERSION  # versioned with the wire protocol


def test_fresh_environment_has_the_sdk_and_not_the_server(client_venv):
    p = client_venv.run(textwrap.dedent("""
        import importlib, importlib.metadata, json
        out = {}
        for name in ["clients.sdk", "clients.codec", "clients.messages", "server", "fastapi", "sqlalchemy",
                     "uvicorn", "scipy", "soundfile", "torch", "model_bridges"]:
            try:
                importlib.import_module(name)
                out[name] = "ok"
            except ModuleNotFoundError as exc:
                out[name] = "missing:" + exc.name
        import clients, clients.sdk
        out["file"] = clients.sdk.__file__
        out["version"] = importlib.metadata.version("duplex-mpe-client")
        out["dists"] = sorted(d.metadata["Name"].lower() for d in importlib.metadata.distributions())
        print(json.dumps(out))
    """))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["clients.sdk"] == out["clients.codec"] == out["clients.messages"] == "ok"
    for name in ["server", "fastapi", "sqlalchemy", "uvicorn", "scipy", "soundfile", "torch", "model_bridges"]:
        assert out[name] == f"missing:{name}", name
    assert Path(out["file"]).is_relative_to(client_venv.python.parents[1])  # the installed copy, not the repo
    assert out["version"] == clients.__version__
    assert "duplex-mpe" not in out["dists"] and {DIST, *CLIENT_DEPS} <= set(out["dists"])


# A bridge as an external team writes it: the SDK only, its own command line.
OUTSIDER_BRIDGE = '''
import argparse, asyncio, json
from collections import deque

import numpy as np

from clients.sdk import Bridge, BridgeOptions, serve_bridge


class Parrot(Bridge):
    """Repeats what the room said one second ago, at 16 kHz."""

    name = "parrot"
    revision = "outside-1"
    sample_rate = 16_000
    clocks = ("lockstep",)

    def __init__(self):
        super().__init__()
        self.resets, self.frames, self.sizes = 0, 0, set()

    def reset(self, episode):
        self.resets += 1
        self.past = deque(maxlen=13)

    def step(self, seq, room):
        self.frames += 1
        self.sizes.add((str(room.dtype), len(room)))
        self.past.append(room.copy())
        return self.past[0] if len(self.past) == self.past.maxlen else None


p = argparse.ArgumentParser()
p.add_argument("--server")
p.add_argument("--token")
p.add_argument("--max-episodes", type=int)
a = p.parse_args()
bridge = Parrot()
client = asyncio.run(serve_bridge(bridge, BridgeOptions(server=a.server, token=a.token, max_episodes=a.max_episodes,
                                                        reconnect=False)))
print(json.dumps({"episodes": client.episodes_done, "resets": bridge.resets, "frames": bridge.frames,
                  "sizes": sorted(bridge.sizes)}))
'''


def test_bridge_from_the_fresh_environment_plays_a_run(client_venv, mini_suite, tmp_path):
    with database_url("sqlite", tmp_path) as url:
        settings = Settings(data_dir=tmp_path / "data", DATABASE_URL=url)
        token = mpe(settings, "token", "create", "--team", "outside").stdout.strip()
        run = json.loads(mpe(settings, "run", "create", "--model", "parrot", "--suite", str(mini_suite),
                             "--team", "outside", "--limit", "1", "--json").stdout)
        assert run["total"] == 2
        port = free_port()
        server = start_server(settings, port)
        try:
            bridge = client_venv.run(OUTSIDER_BRIDGE, "--server", f"ws://127.0.0.1:{port}", "--token", token,
                                     "--max-episodes", "2", timeout=300)
            assert bridge.returncode == 0, bridge.stderr
            done = json.loads(mpe(settings, "run", "wait", run["run_id"], "--timeout", "60").stdout.splitlines()[-1])
        finally:
            server.terminate()
            server.wait()
    played = json.loads(bridge.stdout.splitlines()[-1])
    assert played["episodes"] == played["resets"] == 2
    assert played["frames"] > 0 and played["sizes"] == [["int16", 1280]]  # 80 ms at 16 kHz
    assert done["completed"] == 2 and done["failed_attempts"] == 0 and done["status"] == RunStatus.finished


def test_check_from_the_fresh_environment_with_the_bridge_token(client_venv, mini_suite, tmp_path, pytestconfig):
    """The GPU host's case: only the client install and a token with the bridge scope. A real run of
    the same model is queued first; the check plays its own episodes and leaves the real run's alone."""
    bridge_file = client_venv.home / "parrot_bridge.py"
    bridge_file.write_text(OUTSIDER_BRIDGE.split("\n\np = argparse")[0])  # the bridge class, not its script
    probe = build_check_suite(Path(pytestconfig.cache.mkdir("bridge-check")))
    with database_url("sqlite", tmp_path) as url:
        settings = Settings(data_dir=tmp_path / "data", DATABASE_URL=url)
        shutil.copytree(probe, settings.data_dir / "suites" / CHECK_SUITE_NAME)
        token = mpe(settings, "token", "create", "--team", "outside", "--scope", "bridge").stdout.strip()
        real = json.loads(mpe(settings, "run", "create", "--model", "parrot", "--suite", str(mini_suite),
                              "--team", "outside", "--limit", "1", "--json").stdout)
        port = free_port()
        server = start_server(settings, port)
        try:
            env = outside_env() | {"MPE_TOKEN": token}
            cli = client_venv.python.parent / DIST
            p = subprocess.run([str(cli), "check", "--bridge", f"{bridge_file}:Parrot", "--server",
                                f"ws://127.0.0.1:{port}", "--wait", "30", "--json"], cwd=client_venv.home, env=env,
                               capture_output=True, text=True, timeout=300)
        finally:
            server.terminate()
            server.wait()
        with Database(url).session() as s:
            episodes = s.query(Episode).filter(Episode.run_id == real["run_id"]).all()
            real_state = [(e.status, e.attempts) for e in episodes]
    assert p.returncode in (0, 1), p.stderr
    assert "Traceback" not in p.stderr
    report = json.loads(p.stdout)
    assert report["done"] and report["model"] == "parrot"
    assert [(r["clock"], r["status"]) for r in report["runs"]] == [("lockstep", "finished")]
    lines = {(x["check"], x["clock"]): x for x in report["lines"]}
    assert lines[("bridge", None)]["verdict"] == "pass"
    assert lines[("episodes", "lockstep")]["verdict"] == "pass", lines[("episodes", "lockstep")]
    assert lines[("frames", "lockstep")]["detail"].endswith("1280 samples at 16000 Hz")
    # the real run, queued before the check, was never leased
    assert real_state == [(EpisodeStatus.queued, 0)] * real["total"]
