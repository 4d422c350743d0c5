"""Bridges that live outside the repository, run with ``mpe bridge`` as an external team runs
them (subprocesses): a class in the team's own module (``--class module:Class``), a class an
installed package declares as an entry point (group ``duplex_mpe.bridges``), ``mpe bridge
list``, and what the SDK tells the person running a bridge: one log line per event — the
server's status while it waits, each episode, a refused token or a wrong URL — with the token
never shown, and an exit once idle (``--exit-when-idle``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select

from server.app import BackgroundServer
from server.auth import create_token
from server.core.audio import decode_audio
from server.db import Attempt, AudioChunk, Episode
from server.engine.leasing import create_run

ROOT = Path(__file__).resolve().parent.parent

# An outsider's bridge module: it uses the SDK only (clients/), lives in its own directory.
OUTSIDER_MODULE = '''
"""A team's own bridge, outside the benchmark's repository."""
import numpy as np

from clients.sdk import Bridge


class Constant(Bridge):
    """Plays one constant sample value (option ``level``) in every frame."""

    name = "outsider-const"
    clocks = ("lockstep",)
    blocking = False

    def __init__(self, level: str = "0"):
        super().__init__()
        self.level = int(level)

    def reset(self, episode):
        pass

    def step(self, seq, room):
        return np.full(self.frame_samples, self.level, dtype=np.int16)


class NotABridge:
    """Anything but a bridge."""
'''


@pytest.fixture
def outsider_dir(tmp_path) -> Path:
    d = tmp_path / "team-repo"
    d.mkdir()
    (d / "team_bridge.py").write_text(OUTSIDER_MODULE)
    return d


@pytest.fixture
def site_dir(tmp_path) -> Path:
    """A directory on PYTHONPATH holding an "installed" package that declares two bridge entry
    points (one of them broken), as pip would lay it out."""
    site = tmp_path / "site"
    (site / "outsider_pkg").mkdir(parents=True)
    (site / "outsider_pkg" / "__init__.py").write_text(OUTSIDER_MODULE)
    info = site / "outsider_pkg-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: outsider-pkg\nVersion: 0.3\n")
    (info / "entry_points.txt").write_text(textwrap.dedent("""\
        [duplex_mpe.bridges]
        const-ep = outsider_pkg:Constant
        broken-ep = outsider_missing:Nope
        """))
    return site


def _env(extra_path: Path | None = None, **kw: str) -> dict[str, str]:
    path = os.pathsep.join(str(p) for p in (extra_path, ROOT) if p is not None)
    env = {k: v for k, v in os.environ.items() if k != "MPE_TOKEN"}
    return env | {"PYTHONPATH": path, "COLUMNS": "200"} | kw


async def mpe(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 120):
    """Run ``mpe`` (python -m server.cli) without blocking the in-process server's loop."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "server.cli", *args, cwd=cwd,
                                                env=env or _env(), stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode, out.decode(), err.decode()


def _queue(db, suite, model: str) -> str:
    return create_run(db, team="local", model=model, suite_path=str(suite), clock="lockstep", limit=1,
                      conditions=["explicit"])


def _assistant_track(db, run_id: str) -> np.ndarray:
    with db.session() as s:
        ep = s.scalars(select(Episode).where(Episode.run_id == run_id)).one()
        assert ep.status == "completed"
        att = s.get(Attempt, ep.completed_attempt_id)
        chunks = s.scalars(select(AudioChunk).where(AudioChunk.attempt_id == att.id, AudioChunk.track == "assistant")
                           .order_by(AudioChunk.idx)).all()
        return np.concatenate([decode_audio(c.data) for c in chunks])


# --- running external bridges -------------------------------------------------------------------


async def test_bridge_class_from_the_teams_own_module(settings, db, mini_suite, outsider_dir):
    """``--class module:Class`` imports from the current directory; ``--opt`` reaches the constructor."""
    token = create_token(db, "local")
    run = _queue(db, mini_suite, "outsider-const")
    async with BackgroundServer(settings) as srv:
        rc, out, err = await mpe("bridge", "--class", "team_bridge:Constant", "--opt", "level=1234", "--server",
                                 srv.url, "--max-episodes", "1", cwd=outsider_dir, env=_env(MPE_TOKEN=token))
    assert rc == 0, err
    track = _assistant_track(db, run)
    assert len(track) > 0 and set(np.unique(track)) == {1234}  # the bridge's frames, with its option
    # one line per event, the token nowhere
    assert "connected to ws://127.0.0.1:" in err and "as bridge" in err
    assert "work: 1 episode queued in 1 run for model 'outsider-const'" in err
    assert "started (lockstep clock, 24000 Hz)" in err and "ended, completed" in err
    assert token not in out + err and token[4:] not in out + err


async def test_bridge_from_an_installed_entry_point(settings, db, mini_suite, site_dir):
    token = create_token(db, "local")
    run = _queue(db, mini_suite, "outsider-const")
    async with BackgroundServer(settings) as srv:
        rc, _, err = await mpe("bridge", "const-ep", "--opt", "level=-777", "--server", srv.url, "--max-episodes",
                               "1", env=_env(site_dir, MPE_TOKEN=token))
    assert rc == 0, err
    assert set(np.unique(_assistant_track(db, run))) == {-777}


async def test_bridge_list_shows_every_source_one_line_each(site_dir):
    rc, out, err = await mpe("bridge", "list", env=_env(site_dir))
    assert rc == 0, err
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert rows["silent"].split(None, 2)[1:] == ["built-in", "Never speaks."]
    assert rows["oracle"].split()[1] == "server"
    assert "entry point outsider_pkg:Constant (outsider-pkg 0.3)" in rows["const-ep"]
    assert rows["const-ep"].endswith("Plays one constant sample value (option ``level``) in every frame.")
    assert "cannot be loaded: ModuleNotFoundError" in rows["broken-ep"]
    assert len(out.splitlines()) == len(rows)  # one line per bridge
    assert "--class MODULE:CLASS" in err and "duplex_mpe.bridges" in err


async def test_bridge_help_describes_the_forms_that_exist():
    rc, out, _ = await mpe("bridge", "--help")
    text = " ".join(out.split())
    assert rc == 0 and "--list" not in text
    assert "mpe bridge NAME" in text and "--class MODULE:CLASS" in text and "mpe bridge list" in text


@pytest.mark.parametrize("args, message", [
    (["--class", "team_bridge:NotABridge"], "error (unknown_bridge): team_bridge:NotABridge is not a bridge"),
    (["--class", "team_bridge:Missing"], "error (unknown_bridge): module 'team_bridge' has no 'Missing'"),
    (["--class", "no_such_module:X"], "error (unknown_bridge): cannot import 'no_such_module'"),
    (["--class", "team_bridge"], "--class expects module:Class"),
    (["--class", "team_bridge:Constant", "--opt", "volume=3"],
     "error (bridge_config): team_bridge:Constant does not take these options"),
    (["silent", "--class", "team_bridge:Constant"], "give a bridge NAME or --class MODULE:CLASS"),
    (["run"], "give a bridge NAME or --class MODULE:CLASS"),
])
async def test_bad_external_bridge_is_one_clear_line(outsider_dir, args, message):
    rc, out, err = await mpe("bridge", *args, cwd=outsider_dir, env=_env(MPE_TOKEN="t"))
    text = " ".join((out + err).split())
    assert rc == 2 and message in text and "Traceback" not in text


# --- what the SDK tells whoever runs a bridge -------------------------------------------------


async def test_waiting_bridge_says_why_and_exits_when_idle(settings, db, outsider_dir):
    token = create_token(db, "local")
    async with BackgroundServer(settings) as srv:
        rc, out, err = await mpe("bridge", "--class", "team_bridge:Constant", "--server", srv.url,
                                 "--exit-when-idle", "3", cwd=outsider_dir, env=_env(MPE_TOKEN=token))
    assert rc == 0, err
    lines = err.splitlines()  # (3 s: the server's first status must reach it first, on a loaded machine too)
    assert any("waiting: no run for model 'outsider-const' in team 'local'" in line for line in lines)
    assert any("no episode for 3 s: exiting" in line for line in lines)
    assert "Traceback" not in err and token not in out + err


@pytest.mark.parametrize("case", ["wrong-token", "wrong-path"])
async def test_refused_bridge_is_one_line_not_a_traceback(settings, db, outsider_dir, case):
    token = create_token(db, "local")
    wrong = "mpe_" + "B" * 43
    async with BackgroundServer(settings) as srv:
        server = srv.url + ("/api/v2" if case == "wrong-path" else "")
        rc, out, err = await mpe("bridge", "--class", "team_bridge:Constant", "--server", server,
                                 cwd=outsider_dir, env=_env(MPE_TOKEN=wrong if case == "wrong-token" else token))
    text = " ".join(err.split())
    assert rc == 2 and "Traceback" not in out + err
    if case == "wrong-token":
        assert "error (unauthorized): the server refused the token (invalid, revoked or expired token)" in text
    else:
        assert "error (not_found): no bridge endpoint at ws://127.0.0.1:" in text and "/api/v2/v1/bridge" in text
    assert wrong not in out + err and token not in out + err
