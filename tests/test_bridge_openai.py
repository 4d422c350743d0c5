"""openai-realtime bridge against the local Realtime API peer (tests/support/peers), over real sockets.

End to end: server (realtime clock, both databases) <-> bridge <-> peer, including a
rate-limited first attempt that the engine retries, an answer to T, and an answer to N4Q
cut by N4R (barge-in: the unplayed audio is dropped and ``conversation.item.truncate``
carries exactly what was played). Bridge-level tests cover the other behaviours.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from model_bridges import create_bridge
from model_bridges.playout import EndpointError
from tests.support.peers.openai_realtime_peer import Answer, RealtimePeer, RealtimeScript
from tests.support.peers.peer_tools import (
    FRAME,
    audible_frames,
    build_n4_suite,
    drive,
    event,
    no_zero,
    run_endpoint_episode,
    t_end_sample,
)

KEY = "sk-test-secret-0123456789"
SHORT = "About two kilometres."
LONG = ("The weather today is sunny and warm with a light breeze from the west, and it should stay "
        "dry all afternoon, so it is a lovely day for a walk along the river.")


@pytest.fixture(scope="module")
def n4_suite(tmp_path_factory, say):
    return build_n4_suite(tmp_path_factory.mktemp("suite") / "bridges", say)


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def _room(say, *texts_and_gaps) -> np.ndarray:
    parts = []
    for x in texts_and_gaps:
        parts.append(np.zeros(int(x * 24000), np.int16) if isinstance(x, (int, float)) else say(x))
    return np.concatenate(parts)


async def test_realtime_episode_with_retry_answer_and_barge_in(db, settings, n4_suite, say, key_env):
    short, long_ = no_zero(say(SHORT)), no_zero(say(LONG))
    e_t_ms = t_end_sample(n4_suite) * 1000 // 24000

    def script(i):
        if i == 0:  # the first attempt is refused: the engine must retry, not record silence
            return RealtimeScript(reject_status=429)
        return RealtimeScript(answers=[Answer(after_ms=e_t_ms - 400, audio=short, transcript=SHORT),
                                       Answer(after_ms=e_t_ms + 500, audio=long_, transcript=LONG)])

    async with RealtimePeer(script, key=KEY) as peer:
        bridge = create_bridge("openai-realtime", endpoint=peer.url, model_name="gpt-test")
        res = await run_endpoint_episode(db, settings, n4_suite, bridge)

    # attempt 1 failed with a clear endpoint error, attempt 2 completed
    assert [a.status for a in res.attempts] == ["failed", "completed"]
    assert res.attempts[0].error_code == "endpoint_rate_limited"
    assert "endpoint_rate_limited" in res.attempts[0].error_message and KEY not in res.attempts[0].error_message
    log = peer.logs[-1]
    assert log.query["model"] == "gpt-realtime" and log.headers["Authorization"] == f"Bearer {KEY}"
    # §4: every speech system gets the same input: no text prompt unless the run asks for one
    assert "instructions" not in log.session
    assert res.completed.stats["instructions"] == {"source": "none", "offered": False}
    assert log.session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert log.session["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    # the room stream went to the API (the last frames may still be queued when the episode ends)
    assert (res.completed.n_frames - 5) * FRAME <= log.input_samples <= res.completed.n_frames * FRAME

    # what the bridge played, frame by frame: the short answer whole, then the long one up
    # to the cut, and nothing else (no audio lost, duplicated or played after the cut)
    (item1, audio1), (item2, audio2) = log.items.items()
    assert len(log.truncates) == 1 and log.truncates[0][0] == item2
    cut_ms = log.truncates[0][1]
    played2 = cut_ms * 24
    assert 0 < played2 < len(audio2) and played2 % FRAME == 0
    pad1 = np.pad(audio1, (0, -len(audio1) % FRAME))
    heard = res.by_seq[np.repeat([f.any() for f in res.by_seq.reshape(-1, FRAME)], FRAME)]
    assert np.array_equal(heard, np.concatenate([pad1, audio2[:played2]]))

    # when: the long answer starts after N4Q and is cut a few frames after N4R starts
    n4r = event(res.events, "clip.start", label="N4R")
    n4q_end = event(res.events, "clip.end", label="N4Q")["t"]
    frames = audible_frames(res.by_seq)
    first2 = frames[len(pad1) // FRAME]
    last2 = frames[-1]
    assert first2 * FRAME >= n4q_end
    assert n4r["t"] // FRAME <= last2 <= n4r["t"] // FRAME + 10
    # T's answer plays once the API's VAD has seen 500 ms of silence after T's last word
    stop_ms = next(ms for kind, ms in log.speech if kind == "stop" and ms >= e_t_ms - 400)
    assert stop_ms + 500 <= frames[0] * 80 <= stop_ms + 1500

    # the scheduler heard it: T answered; N4 yielded (speaking at t_R, silent 2 s later) (§6)
    assert event(res.events, "t_wait.end")["data"]["reason"] == "silence"
    t_r = n4r["t"]
    assert any(g.start <= t_r < g.end for g in res.segments)
    assert not any(g.start <= t_r + 48_000 < g.end for g in res.segments)

    # bridge statistics stored with the attempt; the model's transcript logged as text
    st = res.completed.stats["bridge"]
    assert st["interruptions"] == 1 and st["truncations"][0]["audio_end_ms"] == cut_ms
    assert st["frames_played"] == len(frames) and st["first_audio_ms"]["n"] >= 1
    texts = [e["data"]["text"] for e in res.events if e["type"] == "text"]
    assert SHORT in texts and LONG in texts and f"[cut after {cut_ms} ms]" in texts


async def test_truncate_equals_played_and_stale_audio_dropped(say, key_env):
    """Barge-in while the response is still streaming: the API cancels, late deltas are dropped."""
    ans = no_zero(say(LONG))
    room = _room(say, 0.3, "Aria, what is the weather like?", 1.6, "It is sunny, I checked.", 0.6)
    script = RealtimeScript(answers=[Answer(after_ms=500, audio=ans, transcript=LONG, pace=0.9)])
    async with RealtimePeer(script, key=KEY) as peer:
        b = create_bridge("openai-realtime", endpoint=peer.url)
        d = await drive(b, room)
        await b.close()
    assert d.error is None
    log = peer.logs[0]
    assert log.cancelled, "the running response was cancelled by the barge-in"
    (item, sent), = log.items.items()
    (t_item, end_ms), = log.truncates
    played = np.concatenate([o for o in d.outputs if o is not None])
    assert t_item == item and end_ms * 24 == len(played)
    assert np.array_equal(played, sent[: len(played)])  # in order, nothing skipped or repeated
    st = d.stats[-1]["data"]["bridge"]
    assert st["dropped_ms"] > 0 and st["interruptions"] == 1


async def test_turn_detection_none_commits_and_cancels(say, key_env):
    """turn_detection=none: the bridge's room detector commits, asks for responses and cuts."""
    ans = no_zero(say(LONG))
    room = _room(say, 0.3, "Aria, what is the weather like?", 1.8, "It is sunny, I checked.", 0.8)
    async with RealtimePeer(RealtimeScript(answers=[Answer(after_ms=500, audio=ans, transcript=LONG, pace=0.9)]),
                            key=KEY) as peer:
        b = create_bridge("openai-realtime", endpoint=peer.url, turn_detection="none")
        d = await drive(b, room)
        await b.close()
    assert d.error is None
    log = peer.logs[0]
    assert log.session["audio"]["input"]["turn_detection"] is None
    assert not log.speech  # the server VAD was off
    types = log.events_in
    assert types.count("input_audio_buffer.commit") == 2 and types.count("response.create") == 2
    assert "response.cancel" in types and len(log.truncates) == 1
    played = sum(o is not None for o in d.outputs)
    assert log.truncates[0][1] == played * 80


async def test_beta_names_semantic_vad_and_slow_response(say, key_env):
    ans = no_zero(say(SHORT))
    room = _room(say, 0.3, "Aria, how far is the station?", 3.5)
    script = RealtimeScript(beta_names=True, answers=[Answer(after_ms=500, audio=ans, transcript=SHORT, delay_s=1.0)])
    async with RealtimePeer(script, key=KEY) as peer:
        b = create_bridge("openai-realtime", endpoint=peer.url, turn_detection="semantic_vad", eagerness="low",
                          voice="marin")
        d = await drive(b, room)
        await b.close()
    assert d.error is None
    td = peer.logs[0].session["audio"]["input"]["turn_detection"]
    assert td["type"] == "semantic_vad" and td["eagerness"] == "low"
    assert peer.logs[0].session["audio"]["output"]["voice"] == "marin"
    played = np.concatenate([o for o in d.outputs if o is not None])
    assert np.array_equal(played[: len(ans)], ans) and not played[len(ans):].any()
    st = d.stats[-1]["data"]["bridge"]
    # first audio after the request: the peer thinks for 1 s after its VAD's 500 ms of silence
    assert st["first_audio_ms"]["n"] == 1 and st["first_audio_ms"]["max"] >= 1400
    assert st["first_play_ms"]["max"] >= st["first_audio_ms"]["max"]
    assert [t["text"] for t in d.texts] == [SHORT]


@pytest.mark.parametrize("case, code", [
    ("http401", "endpoint_unauthorized"), ("http503", "endpoint_unavailable"),
    ("rate_event", "endpoint_rate_limited"), ("malformed", "endpoint_protocol"),
    ("disconnect", "endpoint_unavailable"), ("hung", "endpoint_timeout"), ("refused", "endpoint_unavailable"),
])
async def test_failures_end_the_attempt(case, code, say, key_env, caplog):
    caplog.set_level(logging.DEBUG)
    q = say("Aria, how far is the station?")
    room = np.concatenate([np.zeros(4800, np.int16), q, np.zeros(24000 * 3, np.int16)])
    ans = no_zero(say(SHORT))
    scripts = {
        "http401": RealtimeScript(reject_status=401),
        "http503": RealtimeScript(reject_status=503),
        "rate_event": RealtimeScript(error_after_ms=(800, {"type": "invalid_request_error", "code": "rate_limit_exceeded",
                                                           "message": "Rate limit reached."})),
        "malformed": RealtimeScript(malformed_after_ms=800),
        "disconnect": RealtimeScript(close_after_ms=800),
        "hung": RealtimeScript(answers=[Answer(after_ms=500, audio=ans, stall=True)]),
        "refused": RealtimeScript(),
    }
    async with RealtimePeer(scripts[case], key=KEY) as peer:
        url = peer.url if case != "refused" else "ws://127.0.0.1:9/v1/realtime"
        b = create_bridge("openai-realtime", endpoint=url, response_timeout_s="0.5", connect_timeout_s="2")
        d = await drive(b, room)
        await b.close()
    assert isinstance(d.error, EndpointError) and d.error.code == code, d.error
    assert d.error.fatal == (code == "endpoint_unauthorized")
    # the key never reaches a log record of the bridge side (the peer's server logs are not ours)
    ours = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith("websockets.server"))
    assert "Authorization" in ours or case == "refused"  # the handshake was logged, redacted
    assert KEY not in ours and KEY not in str(d.error)
    # no silence was passed off as the model's choice after the failure: the bridge stopped
    assert len(d.outputs) < len(room) // FRAME


async def test_options_and_credentials(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(EndpointError, match="OPENAI_API_KEY") as e:
        create_bridge("openai-realtime")
    assert e.value.fatal
    with pytest.raises(EndpointError, match="turn_detection"):
        create_bridge("openai-realtime", endpoint="ws://x/v1/realtime", turn_detection="sometimes")
    with pytest.raises(EndpointError, match="unknown option"):
        create_bridge("openai-realtime", endpoint="ws://x/v1/realtime", tempreature="1")
    (tmp_path / "key").write_text(KEY + "\n")
    b = create_bridge("openai-realtime", endpoint="wss://proxy.example/v1/realtime?model=m2&x=1",
                      api_key_file=str(tmp_path / "key"), api="beta", auth_header="api-key")
    assert b.headers() == {"api-key": KEY, "OpenAI-Beta": "realtime=v1"}
    assert b.url() == "wss://proxy.example/v1/realtime?model=m2&x=1"
    assert b.session_config()["input_audio_format"] == "pcm16" and KEY not in repr(vars(b).get("endpoint"))
