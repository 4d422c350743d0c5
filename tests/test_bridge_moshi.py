"""moshi-ws bridge against the local Moshi server peer (tests/support/peers), over real sockets.

End to end: server (realtime clock, both databases) <-> bridge <-> peer (Ogg/Opus both ways),
with a first attempt whose endpoint drops the connection (retried by the engine), an
answer after T, and a stall followed by a burst in the middle of that answer: everything
is played, in order, late rather than lost. Bridge-level tests cover the start-up
handshake and the first frames, a slow server, a busy server and malformed messages.
"""

from __future__ import annotations

import aiohttp
import numpy as np
import pytest

from model_bridges import create_bridge
from model_bridges.playout import EndpointError
from tests.support.peers.moshi_peer import MoshiPeer, MoshiScript
from tests.support.peers.peer_tools import FRAME, build_n4_suite, drive, event, run_endpoint_episode, t_end_sample

ANSWER = "It is about two kilometres from here."


@pytest.fixture(scope="module")
def n4_suite(tmp_path_factory, say):
    return build_n4_suite(tmp_path_factory.mktemp("suite") / "bridges", say)


def _tone(frames: int, amp: int = 8000) -> np.ndarray:
    t = np.arange(frames * FRAME) / 24000
    return (amp * np.sin(2 * np.pi * 440 * t)).astype(np.int16)


def _best_corr(x: np.ndarray, ref: np.ndarray, max_lag: int = 480) -> float:
    """Largest normalised correlation of ref against x[lag:lag+len(ref)], lag in [0, max_lag]."""
    best = 0.0
    r = ref.astype(np.float64)
    for lag in range(0, max_lag + 1, 2):
        seg = x[lag:lag + len(ref)].astype(np.float64)
        if len(seg) < len(ref):
            break
        c = float(np.dot(seg, r) / (np.linalg.norm(seg) * np.linalg.norm(r) + 1e-9))
        best = max(best, c)
    return best


async def test_realtime_episode_with_retry_and_burst(db, settings, n4_suite, say):
    answer = say(ANSWER)
    n_ans = -(-len(answer) // FRAME)
    s = t_end_sample(n4_suite) // FRAME + 5  # the model starts talking 0.4 s after T ends

    def script(i):
        if i == 0:
            return MoshiScript(close_after=25)  # the endpoint drops the first attempt after 2 s
        return MoshiScript(speech=[(s, answer)], words=[(s, " It"), (s + 1, " is"), (s + 3, " about two kilometres.")],
                           stall=(s + 5, 5))

    async with MoshiPeer(script) as peer:
        bridge = create_bridge("moshi-ws", endpoint=peer.url, model_name="moshi-test")
        res = await run_endpoint_episode(db, settings, n4_suite, bridge)

    assert [a.status for a in res.attempts] == ["failed", "completed"]
    assert "endpoint_unavailable" in res.attempts[0].error_message
    log = peer.sessions[-1]
    n = res.completed.n_frames
    assert n - 5 <= log.frames_in <= n  # every room frame reached the model (Opus pages, in order)

    # the bridge's output by seq: the answer starts one step after the model said it (its
    # reply to room frame k plays in slot k + 1), pauses for the stall, then resumes
    energy = np.abs(res.by_seq.reshape(-1, FRAME)).max(axis=1)
    j0 = int(np.argmax(energy > 1000))
    assert s + 1 <= j0 <= s + 3
    span = res.by_seq[j0 * FRAME:(j0 + n_ans + 20) * FRAME].reshape(-1, FRAME)
    gap = [k for k in range(len(span)) if not span[k].any()]  # slots where nothing was left to play
    assert len(gap) >= 5 and gap[0] == 5
    # drop the silent slots: what remains is the answer, whole and in order (Opus is lossy)
    joined = np.concatenate([f for k, f in enumerate(span) if k not in gap])
    assert _best_corr(joined, answer) > 0.9
    assert _best_corr(res.by_seq[j0 * FRAME:], answer) < 0.8  # with the gap left in, it is not

    assert event(res.events, "t_wait.end")["data"]["reason"] == "silence"
    st = res.completed.stats["bridge"]  # the last snapshot (sent every 12 frames)
    assert st["underruns"] >= 5 and st["depth_ms_max"] >= 5 * 80 and st["frames_received"] >= n - 30
    texts = [e["data"]["text"] for e in res.events if e["type"] == "text"]
    assert texts == ["It is about two kilometres."]


async def test_handshake_first_frames_and_text():
    """Rust-style nine-byte handshake; no output for the first frame; reply k plays at k + 1."""
    script = MoshiScript(rust_handshake=True, speech=[(10, _tone(8))], words=[(10, " Hello"), (12, " there.")])
    async with MoshiPeer(script) as peer:
        b = create_bridge("moshi-ws", endpoint=peer.url)
        d = await drive(b, np.zeros(30 * FRAME, np.int16))
        await b.close()
    assert d.error is None
    loud = [k for k, o in enumerate(d.outputs) if o is not None and np.abs(o).max() > 1000]
    # 8 frames of tone, spread over 9 slots by the Opus codec delay (about 6 ms), contiguous
    assert loud[0] in (11, 12) and len(loud) in (8, 9) and loud == list(range(loud[0], loud[0] + len(loud)))
    assert d.outputs[0] is None and d.outputs[1] is None  # nothing before the model's first reply
    assert [t["text"] for t in d.texts] == ["Hello there."]
    st = d.stats[-1]["data"]["bridge"]
    assert st["server_protocol"] == 1 and st["server_model_version"] == 7
    assert peer.sessions[0].frames_in >= 28


async def test_slow_server_underruns_without_error():
    """A server slower than real time: its audio is played late with gaps, and counted."""
    async with MoshiPeer(MoshiScript(step_delay_s=0.11, speech=[(1, _tone(60))])) as peer:
        b = create_bridge("moshi-ws", endpoint=peer.url)
        d = await drive(b, _tone(40, 3000))
        await b.close()
    assert d.error is None
    st = d.stats[-1]["data"]["bridge"]
    assert st["underruns"] >= 3 and st["lag_frames_max"] >= 5


async def test_busy_server_times_out():
    """The real server sends its handshake only when its one session slot is free."""
    async with MoshiPeer(MoshiScript()) as peer:
        async with aiohttp.ClientSession() as http, http.ws_connect(peer.url) as other:
            assert (await other.receive_bytes()) == b"\x00"  # another client holds the session
            b = create_bridge("moshi-ws", endpoint=peer.url, connect_timeout_s="0.6")
            d = await drive(b, np.zeros(20 * FRAME, np.int16))
            await b.close()
    assert isinstance(d.error, EndpointError) and d.error.code == "endpoint_timeout"
    assert "connect" in str(d.error)


@pytest.mark.parametrize("case, code", [
    ("closed", "endpoint_unavailable"), ("unknown_kind", "endpoint_protocol"), ("bad_ogg", "endpoint_protocol"),
    ("error_kind", "endpoint_error"), ("text_message", "endpoint_protocol"), ("empty", "endpoint_protocol"),
    ("hung", "endpoint_timeout"), ("refused", "endpoint_unavailable"),
])
async def test_failures_end_the_attempt(case, code):
    scripts = {
        "closed": MoshiScript(close_after=8),
        "unknown_kind": MoshiScript(raw_after=(8, b"\x09abc")),
        "bad_ogg": MoshiScript(raw_after=(8, b"\x01" + b"garbage" * 20)),
        "error_kind": MoshiScript(raw_after=(8, b"\x05model crashed")),
        "text_message": MoshiScript(text_after=8),
        "empty": MoshiScript(raw_after=(8, b"")),
        "hung": MoshiScript(mute_after=8),
        "refused": MoshiScript(),
    }
    async with MoshiPeer(scripts[case]) as peer:
        url = peer.url if case != "refused" else "ws://127.0.0.1:9/api/chat"
        b = create_bridge("moshi-ws", endpoint=url, response_timeout_s="0.5", connect_timeout_s="2")
        d = await drive(b, np.zeros(40 * FRAME, np.int16), period=0.04)
        await b.close()
    assert isinstance(d.error, EndpointError) and d.error.code == code, d.error
    if case == "error_kind":
        assert "model crashed" in str(d.error)
    assert len(d.outputs) < 40


def test_options():
    with pytest.raises(EndpointError, match="--endpoint"):
        create_bridge("moshi-ws")
    with pytest.raises(EndpointError, match="ws://"):
        create_bridge("moshi-ws", endpoint="http://localhost:8998/api/chat")
    with pytest.raises(EndpointError, match="not a number"):
        create_bridge("moshi-ws", endpoint="ws://localhost:8998/api/chat", response_timeout_s="soon")
    assert create_bridge("moshi-ws", endpoint="ws://h:8998/api/chat").clocks == ("realtime",)
