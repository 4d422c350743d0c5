"""``minicpm-o-ws`` end to end: our server <-> the bridge <-> a local MiniCPM-o demo peer.

The peer (``tests/support/peers/minicpm_peer.py``, test code) speaks the demo server's JSON over a
real WebSocket; the server runs realtime episodes of the mini suite on SQLite and on
PostgreSQL. Checked: the recorded assistant track holds exactly the audio the peer sent
(nothing lost, nothing duplicated, in order), never before the chunk that caused it was
complete, cut when the model reports an interruption; latency figures are stored with the
attempt; every endpoint failure ends the attempt with an error instead of silence.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import time

import numpy as np
import pytest
import soxr
from sqlalchemy import select

from clients.messages import EpisodeEnd, EpisodeStart
from model_bridges import create_bridge
from model_bridges.minicpm_ws import MiniCPMProtocol, session_url
from model_bridges.playout import (
    BridgeConfigError,
    EndpointError,
    EndpointProtocolError,
    EndpointRateLimited,
    EndpointTimeout,
    PlayoutBuffer,
    Rechunker,
)
from server.app import BackgroundServer
from server.auth import create_token
from server.benchmarks.mpe.duty import DUTY_TEXT
from server.core.detector import detect_segments
from server.db import Attempt, Episode, EventRow
from server.engine.bundles import load_track
from server.engine.leasing import create_run
from tests.support.peers.minicpm_peer import MiniCPMPeer, MiniCPMScript, Utterance
from tests.support.peers.peer_tools import mini_timeline, nonzero, play_run

FRAME = 1920
# Realtime latency bounds are generous: a loaded CI machine delays frames (figures: docs/bridges.md).
SLACK = 25 * FRAME

SEC = 24_000


# --- pure parts --------------------------------------------------------------------------


def test_rechunker_tiles_the_room_stream_in_exact_one_second_chunks():
    rng = np.random.default_rng(3)
    room = (rng.standard_normal(SEC * 5 + 700) * 3000).astype(np.int16)
    ch = Rechunker(16_000)
    chunks = []
    for i in range(0, len(room), FRAME):
        chunks += ch.push(room[i:i + FRAME])
    assert all(c.dtype == np.float32 and c.shape == (16_000,) for c in chunks)
    # streaming = one-shot resampling of the whole stream (no gaps or edges between frames)
    whole = soxr.resample(room.astype(np.float32) / 32768, SEC, 16_000, quality="HQ")
    got = np.concatenate(chunks)
    assert len(chunks) == 5 and ch.pending < 16_000
    lag = np.argmax([np.dot(got[2000:8000], whole[2000 - d:8000 - d]) for d in range(0, 400)])
    assert np.max(np.abs(got[lag + 2000:] - whole[2000:len(got) - lag])) < 1e-3


def _result(**kw) -> str:
    msg = {"type": "result", "is_listen": True, "text": "", "audio_data": None, "end_of_turn": False}
    msg.update(kw)
    if isinstance(msg.get("audio_data"), np.ndarray):
        msg["audio_data"] = base64.b64encode((msg["audio_data"].astype(np.float32) / 32768).astype("<f4").tobytes()).decode()
    return json.dumps(msg)


def test_protocol_turns_cuts_and_errors():
    pb = PlayoutBuffer(FRAME, SEC, clock=lambda: 0.0)
    proto = MiniCPMProtocol(pb)
    a = np.arange(1, 30_001, dtype=np.int16)
    for t in range(4):
        proto.chunk_sent(float(t))
    assert proto.handle(_result(), 0.5) == ("result", None)
    # two speak pieces of one turn play gap-free; the text is returned for logging
    assert proto.handle(_result(is_listen=False, text="Hello", audio_data=a[:5000]), 1.25)[1] == "Hello"
    proto.handle(_result(is_listen=False, audio_data=a[5000:]), 2.5)
    frames = [pb.pull() for _ in range(3)]
    assert np.array_equal(np.concatenate(frames), a[:3 * FRAME])
    # the model reports an interruption: what was not played is dropped
    proto.handle(_result(is_listen=True, end_of_turn=True), 3.5)
    assert pb.pull() is None and pb.dropped_samples == len(a) - 3 * FRAME
    st = proto.stats()
    assert st["results"] == 4 and st["interruptions"] == 1 and st["result_ms"]["max"] == 500
    assert st["turn_onset_ms"]["n"] == 1 and st["turn_onset_ms"]["max"] == 250
    # a finished turn (end_of_turn) plays its last partial frame, zero-padded
    proto.chunk_sent(4.0)
    proto.handle(_result(is_listen=False, audio_data=a[:100], end_of_turn=True), 4.1)
    last = pb.pull()
    assert np.array_equal(last[:100], a[:100]) and not last[100:].any()
    # a listen result may carry silence: not queued (it would only delay later speech); audible
    # audio on a listen result is still played
    proto.chunk_sent(4.5)
    proto.handle(_result(audio_data=np.zeros(SEC, np.int16)), 4.6)
    assert pb.depth_samples == 0 and proto.stats()["listen_silence_ms"] == 1000
    proto.chunk_sent(4.7)
    proto.handle(_result(audio_data=a[:FRAME]), 4.8)
    assert np.array_equal(pb.pull(), a[:FRAME])
    for bad, exc in [("{not json", EndpointProtocolError),
                     (_result(is_listen="no"), EndpointProtocolError),
                     (_result(is_listen=False, audio_data="@@@"), EndpointProtocolError),
                     (_result(is_listen=False, audio_data=base64.b64encode(b"abc").decode()), EndpointProtocolError),
                     (json.dumps({"type": "error", "error": "boom"}), EndpointError),
                     (json.dumps({"type": "error", "error": "Queue full (1000 requests)"}), EndpointRateLimited),
                     (json.dumps({"type": "timeout", "reason": "Pause timeout"}), EndpointTimeout),
                     (json.dumps({"type": "audio_only", "audio_data": ""}), EndpointProtocolError)]:
        proto.chunk_sent(5.0)
        with pytest.raises(exc):
            proto.handle(bad, 5.1)
    fresh = MiniCPMProtocol(PlayoutBuffer(FRAME, SEC))
    with pytest.raises(EndpointProtocolError, match="no audio chunk"):
        fresh.handle(_result(), 0.0)  # a result nobody asked for


def test_session_url_and_options():
    assert session_url("ws://h:8006", "adx_1") == "ws://h:8006/ws/duplex/adx_1"
    assert session_url("https://h:8006/", "adx_1") == "wss://h:8006/ws/duplex/adx_1"
    assert session_url("ws://h:22400/ws/duplex", "adx_1") == "ws://h:22400/ws/duplex?session_id=adx_1"
    assert session_url("wss://h/p/{session_id}/x", "a/b") == "wss://h/p/a%2Fb/x"
    for bad in ({"endpoint": "ftp://h"}, {"endpoint": "ws://h", "config": "[1]"},
                {"endpoint": "ws://h", "config": '{"chunk_ms": 500}'}, {"endpoint": "ws://h", "nope": "1"}):
        with pytest.raises(BridgeConfigError):
            create_bridge("minicpm-o-ws", **bad)
    b = create_bridge("minicpm-o-ws", endpoint="ws://h", model_name="minicpm-o-4.5-int4", config='{"force_listen_count": 1}')
    assert b.name == "minicpm-o-4.5-int4" and b.clocks == ("realtime",)
    assert b.config == {"chunk_ms": 1000, "sample_rate": 16_000, "force_listen_count": 1}


async def test_worker_url_without_the_gateway():
    """Straight to a worker (``/ws/duplex?session_id=``): no queue messages, same session."""
    async with MiniCPMPeer(MiniCPMScript()) as peer:
        bridge = create_bridge("minicpm-o-ws", endpoint=peer.url + "/ws/duplex")
        await bridge.reset(EpisodeStart(episode_id="e1", clock="realtime", sample_rate=SEC, frame_samples=FRAME))
        t0 = time.monotonic()
        for seq in range(20):  # 1.6 s of room audio on the realtime clock
            await asyncio.sleep(max(0.0, t0 + seq * 0.08 - time.monotonic()))
            assert await bridge.step(seq, np.zeros(FRAME, np.int16)) is None
        for _ in range(40):
            if peer.results:
                break
            await asyncio.sleep(0.05)
        bridge.end_episode(EpisodeEnd(episode_id="e1", reason="completed"))
        await bridge.close()
    assert peer.paths[0].startswith("/ws/duplex?session_id=adx_") and len(peer.results) == 1
    assert bridge.stats()["results"] == 1 and "queue_messages" not in bridge.stats()
    assert peer.stopped == 1  # close() waited for the goodbye


# --- end to end ----------------------------------------------------------------------------


async def test_realtime_episode_against_the_peer(db, settings, mini_suite, say, monkeypatch):
    tl = mini_timeline(mini_suite)
    # B: a burst (3 s in one result) right after the preamble, then the model reports it was
    # interrupted one step later. A: the answer after T, in irregular pieces, one step slow.
    k_b = math.ceil(tl["preamble_end"] / SEC)
    k_a = math.ceil(tl["t_end"] / SEC)
    assert (k_b + 3) * SEC < tl["t_start"], "the mini suite changed: B must end before T"
    burst = say("Let me tell you about my favourite recipe for a long time now.")[: 3 * SEC]
    answer = say("It is nine in the evening in Tokyo right now.")
    script = MiniCPMScript(
        utterances=[Utterance(k_b, burst, burst=True, interrupt_after=1),
                    Utterance(k_a, answer, text="It is nine in the evening", pieces=(23_000, 25_500, 21_000))],
        step_delay_s=lambda i: 1.2 if i == k_a + 1 else 0.02, listen_silence=True, queue_updates=2)
    monkeypatch.setenv("MINICPM_TEST_KEY", "sk-test-123")
    tok = create_token(db, "local")
    run = create_run(db, team="local", model="minicpm-o-4.5", suite_path=str(mini_suite), clock="realtime",
                     limit=1, conditions=["explicit"], text_prompt=True)
    async with MiniCPMPeer(script) as peer, BackgroundServer(settings) as server:
        bridge = create_bridge("minicpm-o-ws", endpoint=peer.url, api_key_env="MINICPM_TEST_KEY")
        p = await play_run(db, server, bridge, tok, run)
        for _ in range(40):  # the bridge frees the worker after the episode (``stop``)
            if peer.stopped:
                break
            await asyncio.sleep(0.05)
    assert p.completed == 1, p
    with db.session() as s:
        ep = s.scalars(select(Episode)).one()
        att = s.get(Attempt, ep.completed_attempt_id)
        events = [(e.t, e.type, e.data) for e in s.scalars(
            select(EventRow).where(EventRow.attempt_id == att.id).order_by(EventRow.id))]
    track = load_track(db, att.id, "assistant")
    assert len(track) == att.n_frames * FRAME

    # the session: one connection, prepared with the run's text prompt (the paper's duty text,
    # sent in episode.start and reported back), 1 s float32 chunks at 16 kHz
    assert peer.connections == 1 and peer.paths[0].startswith("/ws/duplex/adx_")
    assert peer.prepares[0]["system_prompt"] == DUTY_TEXT
    sent = att.stats["instructions"]
    assert (sent["source"], sent["offered"], sent["text"], sent["chars"]) == ("episode.start", True, DUTY_TEXT,
                                                                             len(DUTY_TEXT))
    assert peer.prepares[0]["config"] == {"chunk_ms": 1000, "sample_rate": 16_000}
    assert peer.headers[0].get("Authorization") == "Bearer sk-test-123"
    assert all(len(c) == 16_000 for _, _, c in peer.chunks)
    assert len(peer.chunks) >= att.n_frames * FRAME // SEC - 2
    assert peer.stopped == 1
    heard = np.concatenate([c for _, _, c in peer.chunks])  # the model hears the room, all of it
    room = load_track(db, att.id, "room")
    ref = soxr.resample(room.astype(np.float32) / 32768, SEC, 16_000, quality="HQ")[: len(heard)]
    lag = int(np.argmax([np.dot(heard[16_000:48_000], ref[16_000 - d:48_000 - d]) for d in range(0, 600)]))
    x, y = heard[lag:], ref[: len(heard) - lag]
    assert np.dot(x, y) / np.sqrt(np.dot(x, x) * np.dot(y, y)) > 0.999

    # B: exactly a prefix of the burst, not before its chunk was complete, cut about one
    # step after it started (when the interruption result arrived)
    region_b = track[: tl["t_start"]]
    got_b = nonzero(region_b)
    assert len(got_b) and np.array_equal(got_b, nonzero(burst)[: len(got_b)])
    first_b = np.flatnonzero(region_b)[0]
    assert (k_b + 1) * SEC <= first_b <= (k_b + 1) * SEC + SLACK
    played_b = np.flatnonzero(region_b)[-1] - first_b
    assert SEC - SLACK <= played_b <= SEC + SLACK
    assert not region_b[(k_b + 3) * SEC:].any()
    # A: all of it, in order, once, starting after its chunk was complete
    region_a = track[tl["t_end"]:]
    assert np.array_equal(nonzero(region_a), nonzero(answer))
    first_a = tl["t_end"] + np.flatnonzero(region_a)[0]
    assert (k_a + 1) * SEC <= first_a <= (k_a + 1) * SEC + SLACK

    # the scheduler heard a fresh answer to T (§3), the replayed track gives the same segments
    wait_end = next(d for _, ty, d in events if ty == "t_wait.end")
    assert wait_end["reason"] == "silence" and first_a - 2400 <= wait_end["onset_at"] <= first_a + 4800
    assert detect_segments(track)[0].start < tl["t_start"]  # B was heard too
    # the model's text is logged; bridge-side figures are stored with the attempt
    texts = [d["text"] for _, ty, d in events if ty == "text"]
    assert texts[:3] == ["It", "is", "nine"]
    st = att.stats["bridge"]
    assert st["interruptions"] == 1 and st["underruns"] >= 1 and st["dropped_ms"] >= 1500
    assert st["result_ms"]["max"] >= 1200 and st["turn_onset_ms"]["n"] == 2
    assert st["queue_messages"] == 3 and st["listen_silence_ms"] >= 5000  # queued, then 2 updates
    assert st["endpoint"].startswith("ws://127.0.0.1:") and "sk-test" not in json.dumps(att.stats)


FAULTS = {  # peer fault -> (error code, words of the attempt's error message)
    "queue_full": ("endpoint_rate_limited", "at capacity (Queue full"),
    "disconnect": ("endpoint_unavailable", "closed the connection (code 1011"),
    "malformed": ("endpoint_protocol", "malformed JSON"),
    "bad_audio": ("endpoint_protocol", "not valid base64"),
    "stall": ("endpoint_timeout", "no result from the endpoint in time"),
    "timeout": ("endpoint_timeout", "ended the session (Pause timeout"),
    "error": ("endpoint_error", "reported an error: CUDA out of memory"),
    "no_prepared": ("endpoint_timeout", "no connection from the endpoint in time"),
}


async def test_endpoint_failures_end_attempts_with_errors(db, settings, mini_suite):
    """Each connection meets another fault; every attempt fails with its own clear error, the
    engine retries, and nothing is kept as if the model had chosen silence."""
    scripts = [MiniCPMScript(queue_full=(f == "queue_full"), queue_updates=1,
                             fault=None if f == "queue_full" else f, fault_at_chunk=0) for f in FAULTS]
    tok = create_token(db, "local")
    run = create_run(db, team="local", model="minicpm-o-4.5", suite_path=str(mini_suite), clock="realtime",
                     limit=2, max_attempts=2)
    async with MiniCPMPeer(scripts) as peer, BackgroundServer(settings) as server:
        bridge = create_bridge("minicpm-o-ws", endpoint=peer.url, connect_timeout_s="1.5", response_timeout_s="1.5")
        p = await play_run(db, server, bridge, tok, run)
    assert p.status == "finished" and p.failed == 4 and p.completed == 0, p
    assert peer.connections == len(FAULTS)
    with db.session() as s:
        atts = s.scalars(select(Attempt).order_by(Attempt.started_at)).all()
        assert all(e.completed_attempt_id is None for e in s.scalars(select(Episode)))
    assert [a.status for a in atts] == ["failed"] * len(FAULTS)
    messages = [a.error_message for a in atts]
    assert sorted(a.error_code for a in atts) == sorted(code for code, _ in FAULTS.values())
    for fault, (code, words) in FAULTS.items():
        hits = [m for m in messages if f"bridge reported {code}:" in m and words in m]
        assert len(hits) == 1, (fault, messages)
