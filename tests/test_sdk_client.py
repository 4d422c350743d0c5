"""The SDK's connection loop as the person running a bridge sees it (clients/sdk.py): the
server's ``status`` kept and logged, server messages and fields of a later protocol revision
ignored (docs/protocol.md §4), an exit once idle, and a refused token as one log line and exit
status 2 from :func:`run_bridge` — never with the token in it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest
import websockets

from clients.messages import Status, parse_server_message
from clients.sdk import Bridge, BridgeClient, BridgeOptions, run_bridge
from server.app import BackgroundServer
from server.auth import create_token


class Quiet(Bridge):
    name = "quiet-model"
    clocks = ("lockstep",)
    blocking = False

    def reset(self, episode):
        pass

    def step(self, seq, room):
        return None


def test_server_messages_of_a_later_revision_parse():
    """Fields the server adds later are ignored; ``status`` is a known message."""
    st = parse_server_message(json.dumps({"type": "status", "matching_runs": 2, "queued_episodes": 5,
                                          "reason": "queued", "hint": "5 episodes", "eta_s": 12}))
    assert st == Status(matching_runs=2, queued_episodes=5, reason="queued", hint="5 episodes")
    welcome = parse_server_message('{"type": "welcome", "bridge_id": "b", "protocol": 1, "server": "x"}')
    assert welcome.bridge_id == "b"
    assert parse_server_message('{"type": "status", "matching_runs": 0, "queued_episodes": 0, '
                                '"reason": "a-reason-from-the-future"}').reason == "a-reason-from-the-future"


async def test_client_skips_unknown_server_messages_keeps_status_and_exits_when_idle(caplog):
    """A server of a later revision: an unknown message type between welcome and status."""
    async def later_server(ws):
        await ws.recv()  # hello
        await ws.send(json.dumps({"type": "welcome", "bridge_id": "b-later", "protocol": 1}))
        await ws.send(json.dumps({"type": "announcement", "text": "new in a later revision"}))
        await ws.send(json.dumps({"type": "status", "matching_runs": 0, "queued_episodes": 0, "reason": "ended",
                                  "hint": "no more work: every run has ended", "next_check_s": 2}))
        await ws.wait_closed()

    caplog.set_level(logging.INFO, logger="mpe.sdk")
    async with websockets.serve(later_server, "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        client = BridgeClient(Quiet(), BridgeOptions(server=f"ws://127.0.0.1:{port}", token="mpe_" + "S" * 43,
                                                     exit_when_idle_s=0.5))
        await asyncio.wait_for(client.run(), 10)
    assert client.idle_exit and client.bridge_id == "b-later" and client.episodes_done == 0
    assert client.status is not None and client.status.reason == "ended"
    messages = [r.getMessage() for r in caplog.records if r.name == "mpe.sdk"]
    assert "waiting: no more work: every run has ended" in messages
    assert "no episode for 0.5 s: exiting" in messages
    assert not any("S" * 43 in m for m in messages)


class Lingering(Quiet):
    """A quiet bridge whose episodes last: ``delay_s`` per frame; it notes when each episode began
    and when it answered the latest frame."""

    def __init__(self, delay_s: float):
        super().__init__()
        self.delay_s = delay_s
        self.spans: list[list[float]] = []

    def reset(self, episode):
        self.spans.append([time.monotonic()] * 2)

    def step(self, seq, room):
        time.sleep(self.delay_s)
        self.spans[-1][1] = time.monotonic()
        return None


async def test_idle_time_counts_only_outside_episodes(settings, db, mini_suite):
    """With a run queued the bridge serves it, then leaves once idle for exit_when_idle_s; its
    episodes each last longer than that, so time inside them must not count."""
    from server.engine.leasing import create_run

    idle_s = 1.0
    token = create_token(db, "local")
    create_run(db, team="local", model="quiet-model", suite_path=str(mini_suite), clock="lockstep", limit=1,
               conditions=["explicit", "implicit"])
    async with BackgroundServer(settings) as srv:
        bridge = Lingering(delay_s=0.02)
        client = BridgeClient(bridge, BridgeOptions(server=srv.url, token=token, exit_when_idle_s=idle_s))
        await asyncio.wait_for(client.run(), 120)
    assert client.idle_exit and client.episodes_done == 2
    assert client.status is not None and client.status.reason == "ended"
    assert min(end - start for start, end in bridge.spans) > idle_s  # the episodes outlasted the idle limit


def test_run_bridge_turns_a_refused_token_into_one_line(settings, db, caplog):
    wrong = "mpe_" + "W" * 43

    async def attempt() -> int | str | None:
        async with BackgroundServer(settings) as srv:
            try:
                await asyncio.to_thread(run_bridge, Quiet(), BridgeOptions(server=srv.url, token=wrong))
            except SystemExit as exc:
                return exc.code
        pytest.fail("run_bridge returned")

    caplog.set_level(logging.INFO, logger="mpe.sdk")
    assert asyncio.run(attempt()) == 2
    errors = [r for r in caplog.records if r.name == "mpe.sdk" and r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is None
    line = errors[0].getMessage()
    assert "\n" not in line and "the server refused the token (invalid, revoked or expired token)" in line and line.endswith(
        "(unauthorized)")
    assert not any(wrong[4:] in r.getMessage() for r in caplog.records)


class Flaky(Bridge):
    """Raises in ``step()`` once, on its second episode."""

    name = "flaky-model"
    clocks = ("lockstep",)
    blocking = False

    def __init__(self):
        super().__init__()
        self.episodes = 0

    def reset(self, episode):
        self.episodes += 1

    def step(self, seq, room):
        if self.episodes == 2 and seq == 5:
            raise ValueError("boom in step")
        return None


async def test_an_exception_in_step_fails_only_that_attempt(settings, db, mini_suite, caplog):
    from sqlalchemy import select

    from server.db import Attempt, Episode, Run
    from server.engine.leasing import create_run

    token = create_token(db, "local")
    run_id = create_run(db, team="local", model="flaky-model", suite_path=str(mini_suite), clock="lockstep", limit=1,
                        conditions=["explicit", "implicit"])
    caplog.set_level(logging.INFO, logger="mpe.sdk")
    async with BackgroundServer(settings) as srv:
        client = BridgeClient(Flaky(), BridgeOptions(server=srv.url, token=token, backoff_min_s=0.05, max_episodes=2))
        await asyncio.wait_for(client.run(), 120)
    assert client.episodes_done == 2
    with db.session() as s:
        assert s.get(Run, run_id).status == "finished"
        eps = s.scalars(select(Episode).where(Episode.run_id == run_id)).all()
        assert sorted(e.status for e in eps) == ["completed", "completed"]
        failed = s.scalars(select(Attempt).where(Attempt.status == "failed")).all()
    assert [(a.error_code, a.error_message) for a in failed] == \
        [("bridge_error", "bridge reported bridge_error: ValueError: boom in step")]
    lines = [r.getMessage() for r in caplog.records if r.name == "mpe.sdk" and r.levelno >= logging.ERROR]
    assert len(lines) == 1 and "ValueError: boom in step" in lines[0] and "in step" in lines[0]


# --- a newcomer's mistakes: one line naming the fix ---------------------------------------


def closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fatal_line(bridge, options: BridgeOptions, caplog) -> str:
    """run_bridge's one ERROR line for a fatal mistake; its exit status must be 2."""
    caplog.set_level(logging.INFO, logger="mpe.sdk")
    with pytest.raises(SystemExit) as exit_:
        run_bridge(bridge, options)
    assert exit_.value.code == 2
    errors = [r for r in caplog.records if r.name == "mpe.sdk" and r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is None
    line = errors[0].getMessage()
    assert "\n" not in line
    return line


def test_the_pages_address_copied_from_the_browser_names_the_servers_address(caplog):
    line = fatal_line(Quiet(), BridgeOptions(server="http://127.0.0.1:8600/ui/", token="mpe_x"), caplog)
    assert "is the address of the server's web pages (/ui/)" in line
    assert "give the server's address, ws://127.0.0.1:8600" in line and line.endswith("(bad_url)")


def test_an_unsupported_sample_rate_is_one_line_and_exit_2(caplog):
    class Odd(Quiet):
        sample_rate = 22050

    line = fatal_line(Odd(), BridgeOptions(server="ws://127.0.0.1:8600", token="mpe_x"), caplog)
    assert line == "Odd.sample_rate = 22050 is not supported: use one of 24000, 16000 (resample in step) (bad_config)"


def test_a_wrong_port_says_it_cannot_connect_to_that_address(caplog):
    port = closed_port()
    line = fatal_line(Quiet(), BridgeOptions(server=f"ws://127.0.0.1:{port}", token="mpe_x", reconnect=False), caplog)
    assert line.startswith(f"cannot connect to 127.0.0.1:{port} (") and "is the server running there?" in line

    async def keeps_trying() -> list[str]:
        caplog.clear()
        client = BridgeClient(Quiet(), BridgeOptions(server=f"ws://127.0.0.1:{port}", token="mpe_x",
                                                     backoff_min_s=0.01, exit_when_idle_s=0.3))
        await asyncio.wait_for(client.run(), 30)
        return [r.getMessage() for r in caplog.records if r.name == "mpe.sdk" and r.levelno == logging.WARNING]

    warnings = asyncio.run(keeps_trying())
    assert warnings and all(w.startswith(f"cannot connect to 127.0.0.1:{port} (") and "Still trying" in w
                            for w in warnings)


def test_the_sdk_still_logs_after_a_scripts_own_logging_warning(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "my_bridge.py"
    script.write_text(f"""
import logging
from clients.sdk import Bridge, BridgeOptions, run_bridge

class Quiet(Bridge):  # a bridge of the script's own: it imports the SDK only, as a person's would
    name = "quiet-model"
    clocks = ("lockstep",)
    blocking = False

    def reset(self, episode):
        pass

    def step(self, seq, room):
        return None

logging.warning("my own line")  # configures the root logger at WARNING
run_bridge(Quiet(), BridgeOptions(server="ws://127.0.0.1:{closed_port()}", token="mpe_x", backoff_min_s=0.01,
                                  exit_when_idle_s=0.3))
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "my own line" in done.stderr
    assert "mpe.sdk:no episode for 0.3 s: exiting" in done.stderr.replace("INFO:", "")
