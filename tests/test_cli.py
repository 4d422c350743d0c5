"""The `mpe` command line as a user runs it (subprocesses), on both databases."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import soundfile as sf
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from server.db import Base
from tests.support.cli import mpe


def test_db_upgrade_matches_models(settings):
    mpe(settings, "db", "upgrade")
    engine = create_engine(settings.db_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        version = conn.exec_driver_sql("select version_num from alembic_version").scalar()
    engine.dispose()
    assert diff == []  # the migrations create exactly the schema the models describe
    assert version is not None
    mpe(settings, "db", "upgrade")  # idempotent


def test_token_run_status_and_errors(settings, mini_suite):
    token = mpe(settings, "token", "create", "--team", "lab").stdout.strip()
    assert token.startswith("mpe_") and len(token) > 30
    bad = mpe(settings, "token", "create", "--team", "Bad Team!", check=False)
    assert bad.returncode != 0 and "team names" in bad.stderr and "Traceback" not in bad.stderr
    for args, needle in ((("--scope", "root"), "unknown scope"), (("--expires-in", "soon"), "not a duration")):
        bad = mpe(settings, "token", "create", "--team", "lab", *args, check=False)
        assert bad.returncode != 0 and needle in bad.stderr and "Traceback" not in bad.stderr
    for lifetime in ("1e20", "inf", "1000000000000s", "nan"):  # out of range: one line, exit 2, the range named
        bad = mpe(settings, "token", "create", "--team", "lab", "--expires-in", lifetime, check=False)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
        assert "must be > 0 and <= 3650d" in bad.stderr or "must be positive" in bad.stderr, bad.stderr
    mpe(settings, "token", "create", "--team", "lab", "--scope", "bridge", "--expires-in", "12h", "--label", "gpu")
    listed = [json.loads(line) for line in mpe(settings, "token", "list", "--team", "lab", "--json").stdout.splitlines()]
    assert [(t["scopes"], t["expires_at"] is not None) for t in listed] == [("bridge,read", False), ("bridge", True)]
    assert all(token not in line for line in mpe(settings, "token", "list").stdout.splitlines())
    mpe(settings, "token", "revoke", str(listed[1]["id"]))
    assert [t["revoked"] for t in map(json.loads, mpe(settings, "token", "list", "--json").stdout.splitlines())
            if t["team"] == "lab"] == [False, True]

    out = mpe(settings, "run", "create", "--model", "m1", "--suite", str(mini_suite), "--clock", "realtime",
              "--conditions", "implicit", "--limit", "1", "--team", "lab", "--json").stdout
    run = json.loads(out)
    assert run["total"] == 1 and run["status"] == "queued" and run["team"] == "lab" and run["clock"] == "realtime"
    status = json.loads(mpe(settings, "run", "status", run["run_id"], "--json").stdout)
    assert status["queued"] == 1

    for args, needle in [
        (("--clock", "sometimes"), "clock must be one of"),
        (("--conditions", "loud"), "conditions must be"),
        (("--limit", "0"), "limit must be"),
    ]:
        p = mpe(settings, "run", "create", "--model", "m1", "--suite", str(mini_suite), *args, check=False)
        assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr

    p = mpe(settings, "run", "status", "nope", check=False)
    assert p.returncode == 2 and "no such run" in p.stderr

    mpe(settings, "run", "cancel", run["run_id"])
    assert json.loads(mpe(settings, "run", "status", run["run_id"], "--json").stdout)["status"] == "cancelled"


def test_run_list_filters_and_labels(settings, mini_suite):
    def create(model, clock, team, *extra):
        return mpe(settings, "run", "create", "--model", model, "--suite", str(mini_suite), "--clock", clock,
                   "--team", team, *extra).stdout.strip()

    a = create("m1", "lockstep", "lab", "--limit", "1")  # one pair, both conditions: 2 episodes
    b = create("m1", "realtime", "lab", "--limit", "1", "--conditions", "implicit")
    c = create("m2", "lockstep", "other")
    mpe(settings, "run", "cancel", b)

    def listed(*args):
        return json.loads(mpe(settings, "run", "list", "--json", *args).stdout)

    everything = listed()
    assert [r["run_id"] for r in everything] == [c, b, a]  # newest first, every team
    by_id = {r["run_id"]: r for r in everything}
    assert (by_id[a]["total"], by_id[a]["queued"], by_id[b]["total"], by_id[b]["cancelled"]) == (2, 2, 1, 1)
    # two runs of one model are told apart by clock, suite and id
    assert by_id[a]["label"] == f"m1 · lockstep · mini v{by_id[a]['suite']['version']} · {a[:8]}"
    assert by_id[b]["label"].startswith("m1 · realtime · mini v") and by_id[a]["suite"]["name"] == "mini"
    assert [r["run_id"] for r in listed("--team", "lab")] == [b, a]
    assert [r["run_id"] for r in listed("--model", "m1", "--status", "cancelled")] == [b]
    assert [r["run_id"] for r in listed("--limit", "1")] == [c]
    assert listed("--team", "nobody") == []

    lines = mpe(settings, "run", "list", "--team", "lab").stdout.splitlines()
    assert lines[0].split()[:6] == ["RUN", "MODEL", "CLOCK", "SUITE", "TEAM", "STATUS"]
    assert lines[1].split()[:3] == [b, "m1", "realtime"] and "cancelled" in lines[1] and "1/1" in lines[1]
    assert lines[2].split()[:3] == [a, "m1", "lockstep"] and "queued" in lines[2] and "0/2" in lines[2]
    bad = mpe(settings, "run", "list", "--status", "sleeping", check=False)
    assert bad.returncode == 2 and "status must be one of queued, running" in bad.stderr and "Traceback" not in bad.stderr
    assert "pairs" in mpe(settings, "run", "create", "--help").stdout  # --limit counts pairs


def test_run_create_takes_its_defaults_from_the_settings(settings, mini_suite):
    from server.db import Database, Run

    env = {"MPE_MAX_ATTEMPTS": "5", "MPE_MAX_INFLIGHT": "4"}
    create = ("run", "create", "--model", "m1", "--suite", str(mini_suite), "--limit", "1")
    from_env = mpe(settings, *create, env=env).stdout.strip()
    given = mpe(settings, *create, "--max-attempts", "2", "--max-inflight", "1", "--text-prompt",
                env=env).stdout.strip()
    db = Database(settings.db_url)
    try:
        with db.session() as s:
            got = {r.id: (r.max_attempts, r.max_inflight, r.text_prompt) for r in s.query(Run)}
    finally:
        db.dispose()
    # §4: no text prompt unless the run asks for one, and then it is part of the run's record
    assert got == {from_env: (5, 4, False), given: (2, 1, True)}


def test_invalid_suite_is_refused(settings, mini_suite, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(mini_suite, broken)
    lines = (broken / "scenarios.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["turns"][2]["label"] = "N2"  # no T left
    lines[0] = json.dumps(first)
    (broken / "scenarios.jsonl").write_text("\n".join(lines) + "\n")
    p = mpe(settings, "run", "create", "--model", "m1", "--suite", str(broken), check=False)
    assert p.returncode == 2 and "invalid" in p.stderr and "Traceback" not in p.stderr


async def test_export_bundles(settings, db, mini_suite):
    from model_bridges import create_bridge
    from server.app import BackgroundServer
    from server.auth import create_token
    from server.engine.leasing import create_run
    from tests.support.servers import serve

    tok = create_token(db, "local")
    run = create_run(db, team="local", model="echo", suite_path=str(mini_suite), clock="lockstep", limit=1)
    async with BackgroundServer(settings) as server:
        await serve(db, server, [(create_bridge("echo"), tok)], run)
    out = settings.data_dir / "bundles"
    p = mpe(settings, "export", run, "--out", str(out))
    assert "wrote 2 bundles" in p.stderr
    dirs = sorted(out.iterdir())
    assert len(dirs) == 2
    for d in dirs:
        doc = json.loads((d / "episode.json").read_text())
        room, r1 = sf.read(d / "room.wav", dtype="int16")
        asst, r2 = sf.read(d / "assistant.wav", dtype="int16")
        assert r1 == r2 == 24000 and len(room) == len(asst) > 0  # §7: same length
        assert doc["scenario_id"] == "s-p1" and doc["condition"] in ("explicit", "implicit")
        assert doc["model"]["name"] == "echo" and doc["clock"] == "lockstep"
        assert [t["label"] for t in doc["turns"]] == ["N2", "N1", "T", "N3"]
        assert doc["events"][0]["type"] == "preamble.start" and doc["events"][-1]["type"] == "episode.end"
        assert doc["events"][-1]["t"] <= len(room)
        # the echo bridge repeats the room 5 frames later at half volume
        assert abs(int(asst[5 * 1920 + 30000]) - int(room[30000]) // 2) <= 1
        # the frame log: a row per room frame sent and per assistant frame answered (lockstep: slot = seq)
        frames = [line.split(",") for line in (d / "frames.csv").read_text().splitlines()]
        assert frames[0] == ["direction", "seq", "slot", "sent_us", "arrived_us", "silent"]
        for direction in ("room", "assistant"):
            rows = [f for f in frames[1:] if f[0] == direction]
            assert [(int(f[1]), int(f[2])) for f in rows] == [(i, i) for i in range(len(room) // 1920)]
    p = mpe(settings, "export", "nope", "--out", str(out), check=False)
    assert p.returncode == 2 and "no run" in p.stderr


def test_serve_bridge_wait_as_separate_processes(settings, mini_suite, tmp_path):
    """The documented flow: `mpe serve`, `mpe run create`, `mpe bridge`, `mpe run wait`; the bridge
    reads its (bridge-only) token from a file, so no process list shows it."""
    from tests.support.servers import free_port, start_server

    token = mpe(settings, "token", "create", "--team", "local", "--scope", "bridge").stdout.strip()
    (tmp_path / "token").write_text(token + "\n")
    run = mpe(settings, "run", "create", "--model", "silent", "--suite", str(mini_suite), "--limit", "1").stdout.strip()
    port = free_port()
    server = start_server(settings, port)
    env = dict(os.environ, DATABASE_URL=settings.db_url, MPE_DATA_DIR=str(settings.data_dir))
    env.pop("MPE_TOKEN", None)
    bridge = subprocess.Popen([sys.executable, "-m", "server.cli", "bridge", "silent", "--server",
                               f"ws://127.0.0.1:{port}", "--max-episodes", "2", "--token-file",
                               str(tmp_path / "token")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with open(f"/proc/{bridge.pid}/cmdline", "rb") as cmd:
            assert token.encode() not in cmd.read()
        p = mpe(settings, "run", "wait", run, "--timeout", "120")
        assert json.loads(p.stdout.strip().splitlines()[-1])["completed"] == 2
        assert bridge.wait(timeout=60) == 0  # exits by itself after --max-episodes
    finally:
        bridge.kill()
        server.terminate()
        server.wait()
