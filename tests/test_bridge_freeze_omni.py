"""``freeze-omni-sio`` end to end: our server <-> the bridge <-> a local Freeze-Omni peer.

The peer (``tests/support/peers/freeze_omni_peer.py``, test code) is a real Socket.IO server
(python-socketio on aiohttp) with the demo server's events; the server runs realtime
episodes of the mini suite on SQLite and on PostgreSQL. Checked: the model hears the room
(16 kHz int16 packets, every frame), the recorded assistant track holds exactly the
segments the peer sent, in order and once, never before they were ready, cut at
``stop_tts``; failures end the attempt with a clear error.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import soxr
from sqlalchemy import select

from model_bridges import create_bridge
from model_bridges.freeze_omni_sio import FreezeOmniProtocol, audio_packet, endpoint_url
from model_bridges.playout import (
    BridgeConfigError,
    EndpointProtocolError,
    EndpointRateLimited,
    EndpointTimeout,
    PlayoutBuffer,
)
from server.app import BackgroundServer
from server.auth import create_token
from server.db import Attempt, Episode, EventRow
from server.engine.bundles import load_track
from server.engine.leasing import create_run
from tests.support.peers.freeze_omni_peer import FreezeOmniPeer, FreezeOmniScript, Reply
from tests.support.peers.peer_tools import mini_timeline, nonzero, play_run

FRAME = 1920
# Realtime latency bounds are generous: a loaded CI machine delays frames (figures: docs/bridges.md).
SLACK = 25 * FRAME

SEC = 24_000
PROMPT = "Answer briefly, and only when you are asked."


# --- pure parts --------------------------------------------------------------------------


def test_audio_packet_is_the_demo_format():
    pcm = np.array([0, 1, -1, 32767, -32768, 258], dtype=np.int16)
    msg = json.loads(audio_packet(pcm))
    assert msg["sample_rate"] == 16_000 and all(isinstance(b, int) and 0 <= b < 256 for b in msg["audio"])
    # what the demo server does with it: np.frombuffer(bytes(data['audio']), dtype=np.int16)
    assert np.array_equal(np.frombuffer(bytes(msg["audio"]), dtype=np.int16), pcm)


def test_protocol_segments_and_stop_tts():
    pb = PlayoutBuffer(FRAME, SEC, clock=lambda: 0.0)
    proto = FreezeOmniProtocol(pb)
    proto.on_stop_tts()  # the handshake's acknowledgement cuts nothing
    proto.live = True
    s1, s2 = np.arange(1, 3001, dtype=np.int16), np.arange(5001, 9001, dtype=np.int16)
    proto.on_audio(s1.astype("<i2").tobytes())
    proto.on_audio(s2.astype("<i2").tobytes())
    assert np.array_equal(pb.pull(), np.concatenate([s1, s2])[:FRAME])  # gap-free across segments
    proto.on_stop_tts()  # barge-in: what was not played is dropped
    assert pb.pull() is None and proto.interruptions == 1 and pb.dropped_samples == 7000 - FRAME
    proto.on_audio(s1[:100].astype("<i2").tobytes())  # a new reply; its tail plays padded
    last = pb.pull()
    assert np.array_equal(last[:100], s1[:100]) and not last[100:].any()
    assert proto.stats()["segments"] == 3 and proto.stats()["stop_tts"] == 2
    for bad in ("text", b"\x01\x02\x03", [1, 2]):
        with pytest.raises(EndpointProtocolError):
            proto.on_audio(bad)
    with pytest.raises(EndpointRateLimited):
        proto.on_other("too_many_users")
    with pytest.raises(EndpointTimeout):
        proto.on_other("out_time")
    proto.on_other("something_new")
    assert proto.stats()["unknown_events"] == {"something_new": 1}


def test_endpoint_url_and_options():
    assert endpoint_url("ws://h:8081/") == "http://h:8081"
    assert endpoint_url("wss://h") == "https://h"
    for bad in ({"endpoint": "ftp://h"}, {"endpoint": "http://h", "packet_samples": "8"},
                {"endpoint": "http://h", "transport": "carrier-pigeon"}, {"endpoint": "http://h", "acks": "maybe"}):
        with pytest.raises(BridgeConfigError):
            create_bridge("freeze-omni-sio", **bad)
    b = create_bridge("freeze-omni-sio", endpoint="http://h", transport="websocket", model_name="freeze-omni-7b")
    assert b.name == "freeze-omni-7b" and b.transports == ["websocket"] and b.clocks == ("realtime",)


# --- end to end ----------------------------------------------------------------------------


async def test_realtime_episode_against_the_peer(db, settings, mini_suite, say, monkeypatch):
    tl = mini_timeline(mini_suite)
    # Reply 1 right after the preamble: a burst (all segments ready at once), cut by the
    # model's barge-in 1.2 s later. Reply 2 after T: three segments, ready 0.25 s apart.
    start1 = tl["preamble_end"] / SEC + 0.3
    cut1 = start1 + 1.2
    assert (cut1 + 1) * SEC < tl["t_start"], "the mini suite changed: reply 1 must end before T"
    long = say("Well, I was thinking that we could all go to the market together on Saturday morning.")
    segs1 = [long[: 2 * SEC], long[2 * SEC:]]
    answer = [say("It is nine in the evening."), say("That is in Tokyo."), say("Japan standard time.")]
    start2 = tl["t_end"] / SEC + 0.4
    script = FreezeOmniScript(replies=[Reply(start1, segs1, interrupt_at_s=cut1), Reply(start2, answer, gap_s=0.25)])
    monkeypatch.setenv("FREEZE_OMNI_API_KEY", "fo-secret-9")
    tok = create_token(db, "local")
    run = create_run(db, team="local", model="freeze-omni", suite_path=str(mini_suite), clock="realtime",
                     limit=1, conditions=["explicit"])
    async with FreezeOmniPeer(script) as peer, BackgroundServer(settings) as server:
        bridge = create_bridge("freeze-omni-sio", endpoint=peer.url, instructions=PROMPT)
        p = await play_run(db, server, bridge, tok, run)
        for _ in range(40):  # the bridge ends the session after the episode
            if peer.disconnects:
                break
            await asyncio.sleep(0.05)
    assert p.completed == 1, p
    with db.session() as s:
        ep = s.scalars(select(Episode)).one()
        att = s.get(Attempt, ep.completed_attempt_id)
        events = [(e.t, e.type, e.data) for e in s.scalars(
            select(EventRow).where(EventRow.attempt_id == att.id).order_by(EventRow.id))]
    track, room = load_track(db, att.id, "assistant"), load_track(db, att.id, "room")

    # the session: prompt, one recording, then a 16 kHz int16 packet for every room frame
    # (a text prompt set on the bridge, not by the run: sent, and recorded with the attempt)
    assert peer.connections == 1 and peer.prompts == [PROMPT]
    assert att.stats["instructions"]["source"] == "option" and att.stats["instructions"]["text"] == PROMPT
    assert att.stats["instructions"]["offered"] is False
    assert peer.recording_started == 1 and peer.recording_stopped == 1 and peer.disconnects == 1
    assert peer.connects[0]["headers"].get("HTTP_AUTHORIZATION") == "Bearer fo-secret-9"
    assert {(n, r) for _, n, r in peer.packets} == {(1280, 16_000)}
    heard = np.concatenate(peer.input).astype(np.float32)
    assert abs(len(heard) * 3 // 2 - len(room)) <= 3 * FRAME  # every frame went out (a few at the end not)
    ref = soxr.resample(room.astype(np.float32), SEC, 16_000, quality="HQ")[: len(heard)]
    lag = int(np.argmax([np.dot(heard[16_000:48_000], ref[16_000 - d:48_000 - d]) for d in range(0, 600)]))
    a, b = heard[lag:], ref[: len(heard) - lag]
    assert np.dot(a, b) / np.sqrt(np.dot(a, a) * np.dot(b, b)) > 0.999  # the model hears the room

    # reply 1: a prefix of its segments, not before it was ready, cut at the barge-in
    region1 = track[: tl["t_start"]]
    got1 = nonzero(region1)
    assert len(got1) and np.array_equal(got1, nonzero(np.concatenate(segs1))[: len(got1)])
    first1 = np.flatnonzero(region1)[0]
    assert start1 * SEC <= first1 <= start1 * SEC + SLACK
    played1 = np.flatnonzero(region1)[-1] - first1
    assert (cut1 - start1) * SEC - SLACK <= played1 <= (cut1 - start1) * SEC + SLACK
    assert [r for _, _, r, _ in peer.emitted].count(0) == 2 and len(peer.stop_tts) == 1
    # reply 2: every segment, in order, once
    region2 = track[tl["t_end"]:]
    assert np.array_equal(nonzero(region2), nonzero(np.concatenate(answer)))
    first2 = tl["t_end"] + np.flatnonzero(region2)[0]
    assert start2 * SEC <= first2 <= start2 * SEC + SLACK
    wait_end = next(d for _, ty, d in events if ty == "t_wait.end")
    assert wait_end["reason"] == "silence" and first2 - 2400 <= wait_end["onset_at"] <= first2 + 4800

    st = att.stats["bridge"]
    assert st["segments"] == 5 and st["interruptions"] == 1 and st["dropped_ms"] >= 1000
    assert st["depth_ms_max"] >= 1500 and st["acks"] >= st["packets_sent"] - 2 > 100
    assert "fo-secret" not in json.dumps(att.stats)


FAULTS = {  # peer script -> (error code, words of the attempt's error message)
    "too_many_users": ("endpoint_rate_limited", "at capacity (too_many_users)"),
    "refuse": ("endpoint_unavailable", "cannot connect"),
    "disconnect": ("endpoint_unavailable", "closed the connection"),
    "malformed": ("endpoint_protocol", "without binary int16 data"),
    "odd_bytes": ("endpoint_protocol", "odd number of bytes"),
    "out_time": ("endpoint_timeout", "ended the session (out_time)"),
    "stall": ("endpoint_timeout", "no ack from the endpoint in time"),
    "mute": ("endpoint_timeout", "no connection from the endpoint in time"),
}


async def test_endpoint_failures_end_attempts_with_errors(db, settings, mini_suite):
    scripts = [FreezeOmniScript(other_users=5 if f == "too_many_users" else 0,
                                fault=None if f == "too_many_users" else f, fault_at_s=0.5) for f in FAULTS]
    tok = create_token(db, "local")
    run = create_run(db, team="local", model="freeze-omni", suite_path=str(mini_suite), clock="realtime",
                     limit=2, max_attempts=2)
    async with FreezeOmniPeer(scripts) as peer, BackgroundServer(settings) as server:
        bridge = create_bridge("freeze-omni-sio", endpoint=peer.url, connect_timeout_s="4",
                               response_timeout_s="4")
        p = await play_run(db, server, bridge, tok, run)
    assert p.status == "finished" and p.failed == 4 and p.completed == 0, p
    assert peer.connections == len(FAULTS)
    with db.session() as s:
        atts = s.scalars(select(Attempt).order_by(Attempt.started_at)).all()
        assert all(e.completed_attempt_id is None for e in s.scalars(select(Episode)))
    assert [a.status for a in atts] == ["failed"] * len(FAULTS)
    messages = [a.error_message for a in atts]
    for fault, (code, words) in FAULTS.items():
        hits = [m for m in messages if f"bridge reported {code}:" in m and words in m]
        assert len(hits) == 1, (fault, messages)
