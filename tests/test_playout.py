"""The shared parts of endpoint bridges (model_bridges.playout), the SDK's error reporting,
the ``mpe bridge`` command, and the SDK example of docs/bridges.md (run as written)."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from model_bridges.playout import (
    WIRE_LOG,
    EndpointAuthError,
    EndpointRateLimited,
    PlayoutBuffer,
    RoomActivity,
    Truncation,
    classify,
    load_secret,
    redact_url,
)

ROOT = Path(__file__).resolve().parents[1]


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def seq(a, b):
    return np.arange(a, b, dtype=np.int16)


# --- PlayoutBuffer on literal inputs (frames of 4 samples at 1000 Hz: 1 sample = 1 ms) -----


def test_one_frame_per_pull_and_partial_frames_wait_for_more():
    b = PlayoutBuffer(4, 1000)
    assert b.pull() is None  # nothing queued: silence, no underrun (nothing was playing)
    b.push(seq(1, 7), "a")  # 6 samples: one full frame and a partial one
    assert b.pull().tolist() == [1, 2, 3, 4]
    assert b.pull() is None and b.underruns == 1  # 2 samples held while "a" is still open
    b.push(seq(7, 9), "a")
    assert b.pull().tolist() == [5, 6, 7, 8]
    b.push(seq(9, 10), "a")
    b.end_item("a")  # no more audio for "a": the tail plays, zero-padded
    assert b.pull().tolist() == [9, 0, 0, 0]
    assert b.pull() is None and b.underruns == 1  # a finished item is not an underrun
    assert b.played_samples("a") == 9 and b.frames_played == 3 and b.slots == 6


def test_items_follow_each_other_within_a_frame():
    b = PlayoutBuffer(4, 1000)
    b.push(seq(1, 4), "a")
    b.end_item("a")
    b.push(seq(10, 16), "b")
    assert b.pull().tolist() == [1, 2, 3, 10]
    assert b.pull().tolist() == [11, 12, 13, 14]
    assert (b.played_samples("a"), b.played_samples("b")) == (3, 5)


def test_flush_reports_what_was_played_and_drops_late_audio():
    b = PlayoutBuffer(4, 1000)
    b.push(seq(1, 11), "a")  # 10 samples
    b.pull()
    b.pull()
    cuts = b.flush()
    assert cuts == [Truncation("a", 8, 2, 1000)] and cuts[0].played_ms == 8
    assert b.pull() is None and b.dropped_samples == 2 and b.flushes == 1
    b.push(seq(11, 20), "a")  # the endpoint still streams the cut item: dropped
    assert b.pull() is None and b.late_samples == 9 and b.played_samples("a") == 8
    b.push(seq(1, 5), "b")  # a new item plays normally
    assert b.pull().tolist() == [1, 2, 3, 4]


def test_flush_cuts_an_open_item_even_when_its_queue_is_empty():
    b = PlayoutBuffer(4, 1000)
    b.push(seq(1, 5), "a")
    b.pull()
    assert b.flush() == [Truncation("a", 4, 0, 1000)]  # still streaming: cut at what was heard
    b.push(seq(1, 5), "b")
    b.end_item("b")
    b.pull()
    assert b.flush() == []  # fully played and finished: nothing to cut
    assert b.flushes == 1


def test_underruns_count_every_empty_slot_of_an_open_item():
    b = PlayoutBuffer(4, 1000)
    b.push(seq(1, 5), "a")
    b.pull()
    for _ in range(3):
        assert b.pull() is None
    b.push(seq(5, 9), "a")
    assert b.pull().tolist() == [5, 6, 7, 8]
    assert b.underruns == 3


def test_depth_and_latency_figures():
    clock = FakeClock()
    b = PlayoutBuffer(4, 1000, clock=clock)
    b.mark_request(ago_s=0.5)  # room speech ended 0.5 s ago
    clock.t += 0.25
    b.push(seq(1, 13), "a")  # first audio after the request: 750 ms
    clock.t += 0.1
    b.pull()  # first played: 850 ms
    b.pull()
    b.pull()
    clock.t += 1
    b.mark_request()  # ignored: the model was audible in the last slot
    b.push(seq(1, 5), "b")
    st = b.stats()
    assert st["first_audio_ms"]["values"] == [750] and st["first_play_ms"]["values"] == [850]
    assert st["depth_ms_max"] == 12 and st["depth_ms_mean"] == 8  # (12 + 8 + 4) / 3
    assert st["frames_played"] == 3


def test_a_forgotten_request_does_not_count():
    clock = FakeClock()
    b = PlayoutBuffer(4, 1000, clock=clock)
    b.mark_request()
    clock.t += PlayoutBuffer.REQUEST_WINDOW_S + 1
    b.push(seq(1, 5), "a")
    assert b.stats()["first_audio_ms"] == {"n": 0}


def test_room_activity_start_and_end():
    act = RoomActivity(4, 1000, threshold_dbfs=-40, start_ms=8, end_ms=12)  # 2 frames on, 3 off
    loud, quiet = np.full(4, 3000, np.int16), np.zeros(4, np.int16)
    out = [act.push(f) for f in [loud, quiet, loud, loud, loud, quiet, quiet, loud, quiet, quiet, quiet]]
    assert out == [None, None, None, "start", None, None, None, None, None, None, "end"]


# --- errors, credentials, logs --------------------------------------------------------------


def test_secrets_and_urls(tmp_path, monkeypatch):
    monkeypatch.setenv("X_KEY", " k1 ")
    assert load_secret("X_KEY") == "k1"
    (tmp_path / "f").write_text("k2\nignored\n")
    assert load_secret("X_KEY", str(tmp_path / "f")) == "k2"
    with pytest.raises(Exception, match="cannot read"):
        load_secret(None, str(tmp_path / "missing"))
    assert redact_url("wss://user:pw@host.example:8443/ws/x?key=SECRET#f") == "wss://host.example:8443/ws/x"


def test_wire_log_masks_credentials(caplog):
    caplog.set_level(logging.DEBUG, logger="mpe.bridges.wire")
    WIRE_LOG.debug("> Authorization: Bearer sk-123")
    WIRE_LOG.debug("> GET /ws/x?key=%s&alt=1 HTTP/1.1", "AIza-456")
    WIRE_LOG.debug("> x-goog-api-key: AIza-789")
    text = caplog.text
    assert "sk-123" not in text and "AIza-456" not in text and "AIza-789" not in text
    assert "Authorization: Bearer ***" in text and "key=***&alt=1" in text


def test_classify_transport_errors():
    import websockets.exceptions as wse
    from websockets.datastructures import Headers
    from websockets.http11 import Response

    def status(code):
        return wse.InvalidStatus(Response(code, "x", Headers(), b""))

    assert isinstance(classify(status(401)), EndpointAuthError)
    assert isinstance(classify(status(429)), EndpointRateLimited)
    assert classify(status(502)).code == "endpoint_unavailable"
    assert classify(ConnectionRefusedError(111, "Connection refused")).code == "endpoint_unavailable"
    assert classify(asyncio.TimeoutError()).code == "endpoint_timeout"
    assert classify(KeyError("x")).code == "endpoint_error"


# --- SDK: a fatal endpoint error reaches the server and stops the bridge ----------------------


async def test_fatal_endpoint_error_stops_the_bridge(db, settings, mini_suite, monkeypatch):
    from sqlalchemy import select

    from clients.sdk import BridgeClient, BridgeOptions
    from model_bridges import create_bridge
    from server.app import BackgroundServer
    from server.auth import create_token
    from server.db import Attempt
    from server.engine.leasing import create_run
    from server.engine.progress import run_progress
    from tests.peers.openai_realtime_peer import RealtimePeer, RealtimeScript

    monkeypatch.setenv("OPENAI_API_KEY", "wrong")
    tok = create_token(db, "local")
    run = create_run(db, team="local", model="gpt-realtime", suite_path=str(mini_suite), clock="realtime", limit=1,
                     conditions=["explicit"])
    async with RealtimePeer(RealtimeScript(), key="right") as peer, BackgroundServer(settings) as server:
        bridge = create_bridge("openai-realtime", endpoint=peer.url)
        client = BridgeClient(bridge, BridgeOptions(server=server.url, token=tok, backoff_min_s=0.05))
        with pytest.raises(EndpointAuthError):
            await asyncio.wait_for(client.run(), 30)
        for _ in range(100):
            if run_progress(db, run).queued == 1:
                break
            await asyncio.sleep(0.05)
    with db.session() as s:
        att = s.scalars(select(Attempt)).one()
    assert att.status == "failed" and att.error_code == "endpoint_unauthorized"
    assert "endpoint_unauthorized" in att.error_message and "wrong" not in att.error_message
    assert run_progress(db, run).queued == 1  # the episode waits for a bridge that works


# --- the mpe bridge command ------------------------------------------------------------------


@pytest.mark.parametrize("args, message", [
    (["openai-realtime", "--endpoint", "ws://127.0.0.1:9/v1/realtime", "--opt", "turn_detection=often"],
     "error (bridge_config): turn_detection must be one of"),
    (["moshi-ws"], "error (bridge_config): moshi-ws needs --endpoint URL"),
    (["no-such-bridge"], "unknown bridge 'no-such-bridge'"),
    (["moshi-ws", "--opt", "oops"], "--opt expects key=value"),
])
def test_bridge_command_reports_bad_input_without_traceback(args, message):
    env = dict(os.environ, OPENAI_API_KEY="k", MPE_TOKEN="t")
    r = subprocess.run([sys.executable, "-m", "server.cli", "bridge", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    out = re.sub(r"\s+", " ", r.stdout + r.stderr)
    assert r.returncode == 2 and message in out and "Traceback" not in out


# --- docs/bridges.md: the SDK example runs as written ------------------------------------------


def _doc_example() -> str:
    text = (ROOT / "docs" / "bridges.md").read_text()
    guide = text[text.index("## Writing your own bridge"):]
    return re.search(r"```python\n(.*?)```", guide, re.S).group(1)


async def test_docs_sdk_example_runs(db, settings, mini_suite, tmp_path):
    from sqlalchemy import select

    from clients.sdk import BridgeClient, BridgeOptions
    from server.app import BackgroundServer
    from server.auth import create_token
    from server.db import Attempt, Episode, EventRow
    from server.engine.export import load_track
    from server.engine.leasing import create_run
    from server.engine.progress import run_progress

    code = _doc_example()
    assert len(code.strip().splitlines()) < 60
    (tmp_path / "my_bridge.py").write_text(code)
    spec = importlib.util.spec_from_file_location("my_bridge", tmp_path / "my_bridge.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    tok = create_token(db, "local")
    run = create_run(db, team="local", model="tone-after-speech", suite_path=str(mini_suite), clock="lockstep",
                     limit=1, conditions=["explicit"])
    async with BackgroundServer(settings) as server:
        client = BridgeClient(mod.ToneAfterSpeech(), BridgeOptions(server=server.url, token=tok, max_episodes=1))
        await asyncio.wait_for(client.run(), 120)
    assert run_progress(db, run).completed == 1
    with db.session() as s:
        att = s.get(Attempt, s.scalars(select(Episode)).one().completed_attempt_id)
        texts = s.scalars(select(EventRow).where(EventRow.attempt_id == att.id, EventRow.type == "text")).all()
    track = load_track(db, att.id, "assistant")
    loud = np.abs(track.reshape(-1, 1920)).max(axis=1) > 3000
    # a tone (7 frames) after each room utterance followed by 0.4 s of quiet, logged as text;
    # the episode may end during the last one
    assert len(texts) >= 4 and 7 * (len(texts) - 1) < loud.sum() <= 7 * len(texts)
    assert texts[0].t >= 5 * 1920  # never before the room has spoken
