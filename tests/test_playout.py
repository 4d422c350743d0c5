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

from clients.messages import EpisodeStart
from model_bridges.playout import (
    WIRE_LOG,
    BridgeConfigError,
    EndpointAuthError,
    EndpointRateLimited,
    PlayoutBuffer,
    RoomActivity,
    Truncation,
    classify,
    instructions_option,
    load_secret,
    redact_url,
    text_prompt_record,
)
from tests.support.audio import needs_espeak

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


# --- the text prompt (§4) -------------------------------------------------------------------


def test_instructions_option_and_record(tmp_path):
    assert instructions_option({}) is None and instructions_option({"instructions": "  "}) is None
    opts = {"instructions": " Be brief. ", "other": 1}
    assert instructions_option(opts) == "Be brief." and opts == {"other": 1}
    (tmp_path / "p.txt").write_text("From a file.\n")
    assert instructions_option({"instructions_file": str(tmp_path / "p.txt")}) == "From a file."
    for bad in ({"instructions": "a", "instructions_file": str(tmp_path / "p.txt")},
                {"instructions_file": str(tmp_path / "missing.txt")}, {"instructions": "x" * 16_001}):
        with pytest.raises(BridgeConfigError):
            instructions_option(bad)
    assert text_prompt_record(None, "none", True) == {"source": "none", "offered": True}
    rec = text_prompt_record("y" * 2500, "option", False)
    assert rec["chars"] == 2500 and rec["text"] == "y" * 2000 and len(rec["sha256"]) == 64


def _start(instructions=None):
    return EpisodeStart(episode_id="e", clock="realtime", sample_rate=24000, frame_samples=1920,
                        instructions=instructions)


@pytest.mark.parametrize("bridge, options, offered, sent, source", [
    ("openai-realtime", {}, None, None, "none"),  # no text prompt by default
    ("openai-realtime", {}, "Duty.", "Duty.", "episode.start"),  # the run's text prompt
    ("openai-realtime", {"instructions": "Mine."}, "Duty.", "Mine.", "option"),  # the bridge's wins
    ("openai-realtime", {"instructions": "Mine."}, None, "Mine.", "option"),
    ("moshi-ws", {}, "Duty.", None, "none"),  # takes no text: ignored, and reported as offered
    ("freeze-omni-sio", {"send_prompt": "false"}, "Duty.", None, "none"),
])
async def test_the_text_prompt_sent_is_chosen_and_reported(bridge, options, offered, sent, source, monkeypatch):
    from model_bridges import create_bridge

    monkeypatch.setenv("OPENAI_API_KEY", "k")
    b = create_bridge(bridge, endpoint="ws://127.0.0.1:9/x", connect_timeout_s="30", **options)
    await b.reset(_start(offered))
    try:
        assert b.instructions == sent
        rec = [m["data"]["instructions"] for m in b._outbox if m["type"] == "stats"]
        assert len(rec) == 1 and rec[0]["source"] == source and rec[0]["offered"] == (offered is not None)
        assert rec[0].get("text") == sent
        if bridge == "openai-realtime":
            assert b.session_config().get("instructions") == sent
    finally:
        await b.close()


def test_bridges_without_text_input_refuse_the_option():
    from model_bridges import create_bridge

    with pytest.raises(BridgeConfigError, match="unknown option"):
        create_bridge("moshi-ws", endpoint="ws://h/api/chat", instructions="Be brief.")
    with pytest.raises(BridgeConfigError, match="send_prompt"):
        create_bridge("freeze-omni-sio", endpoint="http://h", instructions="Be brief.", send_prompt="false")


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
    from tests.support.peers.openai_realtime_peer import RealtimePeer, RealtimeScript

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


@needs_espeak  # the example synthesises its answer with espeak-ng
async def test_docs_sdk_example_is_detected_as_speech(db, settings, mini_suite, tmp_path):
    """The example of docs/bridges.md, run as the doc says (``python my_bridge.py``) against a
    server: its answers are detected as speech, live and on replay, and answer the request."""
    from sqlalchemy import select

    from server.app import BackgroundServer
    from server.auth import create_token
    from server.core.detector import detect_segments
    from server.db import Attempt, Episode, EventRow, SegmentRow
    from server.engine.bundles import load_track
    from server.engine.leasing import create_run
    from server.engine.progress import run_progress

    code = _doc_example()
    assert len(code.strip().splitlines()) < 80 and "from server" not in code  # clients/ only
    (tmp_path / "my_bridge.py").write_text(code)
    tok = create_token(db, "local")
    run = create_run(db, team="local", model="speak-after-speech", suite_path=str(mini_suite), clock="lockstep",
                     limit=1, conditions=["explicit"])
    async with BackgroundServer(settings) as server:
        env = dict(os.environ, MPE_TOKEN=tok, PYTHONPATH=str(ROOT))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(tmp_path / "my_bridge.py"), "--server", server.url, "--max-episodes", "1",
            cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    log = err.decode()
    assert proc.returncode == 0, log
    assert "connected to" in log and "ended, completed" in log and tok not in log
    assert run_progress(db, run).completed == 1
    with db.session() as s:
        att = s.get(Attempt, s.scalars(select(Episode)).one().completed_attempt_id)
        texts = [e.t for e in s.scalars(select(EventRow).where(EventRow.attempt_id == att.id, EventRow.type == "text"))]
        onset = s.scalars(select(EventRow).where(EventRow.attempt_id == att.id, EventRow.type == "t_wait.onset")).all()
        live = [(g.start, g.end) for g in s.scalars(select(SegmentRow).where(SegmentRow.attempt_id == att.id))]
    # the live detector heard each spoken answer as speech (the episode may end during the last one) ...
    assert len(texts) >= 3 and len(live) >= len(texts) - 1
    assert all(any(t <= start < t + 24_000 for start, _ in live) for t in texts[:-1])
    assert sum(end - start for start, end in live) >= 24_000 * (len(texts) - 1)
    # ... so the request was answered, and a replay of the recorded track finds the same speech
    assert len(onset) == 1 and onset[0].data["already_speaking"] is False
    track = load_track(db, att.id, "assistant")
    assert [(g.start, g.end) for g in detect_segments(track)] == sorted(live)
    # what the doc warns about: a tone is no speech to the detector
    tone = (4000 * np.sin(2 * np.pi * 440 * np.arange(5 * 24_000) / 24_000)).astype(np.int16)
    assert detect_segments(tone) == []

    # --wav: any 16-bit WAV file (here espeak-ng's, 22050 Hz) resampled to the bridge's rate
    spec = importlib.util.spec_from_file_location("my_bridge", tmp_path / "my_bridge.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    wav = tmp_path / "answer.wav"
    subprocess.run(["espeak-ng", "-w", str(wav), "Nine dollars."], check=True)
    import soundfile as sf

    src, rate = sf.read(wav, dtype="int16")
    speech = mod.SpeakAfterSpeech(str(wav)).speech
    assert speech.dtype == np.int16 and abs(len(speech) - len(src) * 24_000 / rate) <= 1
    assert len(mod.load_speech(str(wav), 16_000)) == len(src) * 16_000 // rate
