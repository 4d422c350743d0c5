"""gemini-live bridge against the local Live API peer (tests/support/peers), over real sockets.

End to end: server (realtime clock, both databases) <-> bridge <-> peer, with a first
attempt refused for quota (retried by the engine), a goAway with session resumption in the
middle of the episode, an answer to T, and an answer to N4Q cut by ``interrupted`` when
N4R starts. Bridge-level tests cover the other behaviours.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from model_bridges import create_bridge
from model_bridges.playout import EndpointError
from tests.support.peers.gemini_live_peer import GeminiAnswer, GeminiPeer, GeminiScript
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

KEY = "AIza-test-secret-0123456789"
SHORT = "About two kilometres."
LONG = ("The weather today is sunny and warm with a light breeze from the west, and it should stay "
        "dry all afternoon, so it is a lovely day for a walk along the river.")


@pytest.fixture(scope="module")
def n4_suite(tmp_path_factory, say):
    return build_n4_suite(tmp_path_factory.mktemp("suite") / "bridges", say)


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", KEY)


async def test_realtime_episode_with_retry_resumption_and_interruption(db, settings, n4_suite, say, key_env):
    short, long_ = no_zero(say(SHORT)), no_zero(say(LONG))
    e_t_ms = t_end_sample(n4_suite) * 1000 // 24000

    def script(i):
        if i == 0:  # quota exhausted: the service closes with 1011; the engine retries
            return GeminiScript(close_on_setup=(1011, "RESOURCE_EXHAUSTED: You exceeded your current quota."))
        return GeminiScript(answers=[GeminiAnswer(after_ms=e_t_ms - 400, audio=short, transcript=SHORT),
                                     GeminiAnswer(after_ms=e_t_ms + 500, audio=long_, transcript=LONG)],
                            go_away_after_ms=e_t_ms - 1500, go_away_left_s=1.0)

    async with GeminiPeer(script, key=KEY) as peer:
        bridge = create_bridge("gemini-live", endpoint=peer.url, model_name="gemini-test")
        res = await run_endpoint_episode(db, settings, n4_suite, bridge)

    assert [a.status for a in res.attempts] == ["failed", "completed"]
    assert "endpoint_rate_limited" in res.attempts[0].error_message and KEY not in res.attempts[0].error_message
    st = peer.states[-1]
    # the session moved to a second connection (goAway) and kept its state (resumption handle)
    assert st.connections == 2 and st.go_away_sent
    assert "handle" not in st.setups[0]["sessionResumption"] and st.setups[1]["sessionResumption"]["handle"]
    setup = st.setups[0]
    assert "systemInstruction" not in setup  # §4: no text prompt unless the run asks for one
    assert res.completed.stats["instructions"] == {"source": "none", "offered": False}
    assert setup["realtimeInputConfig"]["automaticActivityDetection"]["disabled"] is False
    # 16 kHz input: the whole room stream (up to the last queued frames) reached the model
    n = res.completed.n_frames
    assert (n - 5) * 1280 - 400 <= st.input_samples <= n * 1280

    # played: the short answer whole, then the long one up to the interruption, nothing else
    assert st.interrupted == 1 and len(st.turns) == 2
    pad1 = np.pad(short, (0, -len(short) % FRAME))
    heard = res.by_seq[np.repeat([f.any() for f in res.by_seq.reshape(-1, FRAME)], FRAME)]
    assert np.array_equal(heard[: len(pad1)], pad1)
    played2 = len(heard) - len(pad1)
    assert 0 < played2 < len(long_) and played2 % FRAME == 0
    assert np.array_equal(heard[len(pad1):], long_[:played2])
    # the cut follows N4R's onset within a few frames (service VAD + network)
    n4r = event(res.events, "clip.start", label="N4R")["t"]
    frames = audible_frames(res.by_seq)
    assert n4r // FRAME <= frames[-1] <= n4r // FRAME + 10
    assert any(g.start <= n4r < g.end for g in res.segments)
    assert not any(g.start <= n4r + 48_000 < g.end for g in res.segments)
    assert event(res.events, "t_wait.end")["data"]["reason"] == "silence"

    b = res.completed.stats["bridge"]
    assert b["resumptions"] == 1 and b["interruptions"] == 1 and b["frames_played"] == len(frames)
    texts = [e["data"]["text"] for e in res.events if e["type"] == "text"]
    assert SHORT in texts
    assert any(t.endswith(f"[cut after {played2 // 24} ms]") for t in texts)


async def test_client_activity_detection_and_text_frames(say, key_env):
    ans = no_zero(say(SHORT))
    room = np.concatenate([np.zeros(7200, np.int16), say("Aria, how far is the station?"), np.zeros(24000 * 3, np.int16)])
    script = GeminiScript(text_frames=True, answers=[GeminiAnswer(after_ms=300, audio=ans, transcript=SHORT)])
    async with GeminiPeer(script, key=KEY) as peer:
        b = create_bridge("gemini-live", endpoint=peer.url, vad="client", auth="header", voice="Puck")
        d = await drive(b, room)
        await b.close()
    assert d.error is None
    st = peer.states[0]
    assert st.setups[0]["realtimeInputConfig"]["automaticActivityDetection"]["disabled"] is True
    assert st.setups[0]["generationConfig"]["speechConfig"]["voiceConfig"]["prebuiltVoiceConfig"]["voiceName"] == "Puck"
    assert [k for k, _ in st.activity] == ["start", "stop"]  # from the bridge's activityStart/End
    played = np.concatenate([o for o in d.outputs if o is not None])
    assert np.array_equal(played[: len(ans)], ans) and not played[len(ans):].any()
    assert [t["text"] for t in d.texts] == [SHORT]
    s = d.stats[-1]["data"]["bridge"]
    assert s["turns"] == 1 and s["first_audio_ms"]["n"] == 1 and s["underruns"] == 0


@pytest.mark.parametrize("case, code", [
    ("bad_key", "endpoint_unauthorized"), ("quota_mid", "endpoint_rate_limited"),
    ("invalid", "endpoint_protocol"), ("malformed", "endpoint_protocol"),
    ("dropped", "endpoint_unavailable"), ("stalled_turn", "endpoint_timeout"),
])
async def test_failures_end_the_attempt(case, code, say, key_env, caplog):
    caplog.set_level(logging.DEBUG)
    room = np.concatenate([np.zeros(4800, np.int16), say("Aria, how far is the station?"), np.zeros(24000 * 2, np.int16)])
    ans = no_zero(say(SHORT))
    scripts = {
        "bad_key": GeminiScript(),
        "quota_mid": GeminiScript(close_after_ms=(800, 1011, "RESOURCE_EXHAUSTED: quota exceeded")),
        "invalid": GeminiScript(close_after_ms=(800, 1007, "Request contains an invalid argument.")),
        "malformed": GeminiScript(malformed_after_ms=800),
        "dropped": GeminiScript(close_after_ms=(800, 1000, "")),
        "stalled_turn": GeminiScript(answers=[GeminiAnswer(after_ms=300, audio=ans, stall=True)]),
    }
    async with GeminiPeer(scripts[case], key="other-key" if case == "bad_key" else KEY) as peer:
        b = create_bridge("gemini-live", endpoint=peer.url, response_timeout_s="0.5")
        d = await drive(b, room, period=0.04)
        await b.close()
    assert isinstance(d.error, EndpointError) and d.error.code == code, d.error
    ours = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith("websockets.server"))
    assert "key=***" in ours and KEY not in ours and KEY not in str(d.error)


def test_options(monkeypatch):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(EndpointError, match="GEMINI_API_KEY"):
        create_bridge("gemini-live")
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    b = create_bridge("gemini-live", model="gemini-live-2.5-flash", resume="false", silence_duration_ms="300")
    assert b.url().endswith(f"BidiGenerateContent?key={KEY}") and b.name == "gemini-live-2.5-flash"
    s = b.setup(None)["setup"]
    assert s["model"] == "models/gemini-live-2.5-flash" and "sessionResumption" not in s
    assert s["realtimeInputConfig"]["automaticActivityDetection"]["silenceDurationMs"] == 300
    with pytest.raises(EndpointError, match="vad"):
        create_bridge("gemini-live", vad="maybe")
