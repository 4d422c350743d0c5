"""Wire protocol v1 over a real WebSocket against the in-process server (DESIGN §4).

Every bad input gets an ``error`` message with its stable code, then a close with the
close code that docs/protocol.md §9 promises; afterwards the server still serves a
well-behaved bridge. A bridge that fails mid-episode loses only that attempt. The minimal
bridge of docs/protocol.md §12 is run verbatim against the server. Each test runs on SQLite
and on PostgreSQL (the ``db_url`` fixture).
"""

from __future__ import annotations

import asyncio
import json
import re
import struct
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import websockets
from sqlalchemy import func, select

from clients.codec import FLAG_SILENT, KIND_ASSISTANT, Frame
from clients.errors import CLOSE_CODES, ProtocolError
from clients.lifecycle import LATE_ANSWERS_S, AssistantFrame
from clients.messages import Hello
from server.app import BackgroundServer
from server.auth import Principal, create_token
from server.core.audio import decode_audio
from server.db import Attempt, AudioChunk, Episode, FrameRow, Run
from server.engine.bridge_ws import WSConnection
from server.engine.leasing import cancel_run, create_run
from tests.support.world import serve_one

DOC = Path(__file__).resolve().parent.parent / "docs" / "protocol.md"
HEADER = struct.Struct("<BBHI")
T = 10.0  # generous per-step timeout: every step here should take well under a second


def hello(**over) -> str:
    msg = {"type": "hello", "protocol": 1, "model": {"name": "x", "revision": "test"},
           "sample_rate": 24000, "clocks": ["lockstep"]}
    msg.update(over)
    return json.dumps(msg)


def assistant(seq: int, payload: bytes | None = None, *, kind: int = 2, flags: int | None = None) -> bytes:
    if flags is None:
        flags = 1 if payload is None else 0
    return HEADER.pack(1, kind, flags, seq) + (payload or b"")


# --- fixtures and helpers ----------------------------------------------------------------


@pytest.fixture
def token(db) -> str:
    return create_token(db, "local")


@pytest.fixture
async def server(settings, db):
    async with BackgroundServer(settings) as srv:
        yield srv


def queue_run(db, mini_suite, **kw) -> str:
    args = dict(team="local", model="x", suite_path=str(mini_suite), clock="lockstep", limit=1,
                conditions=["explicit"])
    return create_run(db, **(args | kw))


async def connect(srv, token: str | None = None, *, query: str | None = None):
    url = srv.url + "/v1/bridge" + (f"?token={query}" if query is not None else "")
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return await websockets.connect(url, additional_headers=headers, max_size=None, open_timeout=T)


async def open_bridge(srv, token: str, **hello_over):
    """Connect and say hello; the server answers ``welcome``, then ``status`` (protocol.md §4.5)."""
    ws = await connect(srv, token)
    await ws.send(hello(**hello_over))
    welcome = json.loads(await asyncio.wait_for(ws.recv(), T))
    assert welcome["type"] == "welcome" and welcome["bridge_id"], welcome
    status = json.loads(await asyncio.wait_for(ws.recv(), T))
    assert status["type"] == "status", status
    return ws


async def recv_json(ws) -> dict:
    raw = await asyncio.wait_for(ws.recv(), T)
    assert isinstance(raw, str), f"expected a text message, got {len(raw)} bytes"
    return json.loads(raw)


async def recv_frame(ws) -> tuple[int, int, int, bytes]:
    raw = await asyncio.wait_for(ws.recv(), T)
    assert isinstance(raw, bytes), f"expected a binary frame, got {raw!r}"
    version, kind, flags, seq = HEADER.unpack_from(raw)
    return kind, flags, seq, raw[HEADER.size:]


async def start_episode(ws) -> dict:
    """The next ``episode.start``, past any ``status``: an idle bridge may be told what work matches
    it at any time (docs/protocol.md §4.5), e.g. that its run ended just before the next was queued."""
    while (start := await recv_json(ws))["type"] == "status":
        pass
    assert start["type"] == "episode.start", start
    return start


async def expect_fatal(ws, code: str, close_code: int) -> dict:
    """The next message is ``error{code}``, then the server closes with ``close_code``."""
    err = await recv_json(ws)
    assert err["type"] == "error" and err["code"] == code, err
    assert set(err) <= {"type", "code", "message"} and isinstance(err.get("message", ""), str)
    assert "Traceback" not in err.get("message", "")
    with pytest.raises(websockets.ConnectionClosed):
        extra = await asyncio.wait_for(ws.recv(), T)
        pytest.fail(f"message after a fatal error: {extra!r}")
    assert ws.close_code == close_code
    assert CLOSE_CODES[code] == close_code  # the one mapping agrees with the documented table
    return err


def queued(db) -> int:
    with db.session() as s:
        return s.scalar(select(func.count()).select_from(Episode).where(Episode.status == "queued"))


async def assert_survives(srv, db, mini_suite, token: str) -> None:
    """A well-behaved bridge can still connect and complete a fresh episode."""
    await wait_attempts_settled(db)
    while queued(db):  # requeued episodes of earlier attempts first, one bridge each
        await serve_one(srv, token)
    # Queue the fresh run only now: a bridge that leaves right after episode.end must not
    # race the server's next lease (see test_bridge_leaving_after_episode_end_...).
    run_id = queue_run(db, mini_suite)
    await serve_one(srv, token)
    with db.session() as s:
        assert s.get(Run, run_id).status == "finished"
        assert s.scalar(select(Episode.status).where(Episode.run_id == run_id)) == "completed"


async def wait_attempts_settled(db, timeout: float = T) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with db.session() as s:
            running = s.scalar(select(func.count()).select_from(Attempt).where(Attempt.status == "running"))
        if not running:
            return
        assert time.monotonic() < deadline, "attempt still running"
        await asyncio.sleep(0.05)


# --- handshake and authentication -----------------------------------------------------------


async def test_missing_token(server, db, mini_suite, token):
    ws = await connect(server)
    await ws.send(hello())
    await expect_fatal(ws, "unauthorized", 1008)
    await assert_survives(server, db, mini_suite, token)


@pytest.mark.parametrize("where", ["header", "query"])
async def test_bad_token(server, db, mini_suite, token, where):
    bad = "mpe_" + "A" * 43
    ws = await (connect(server, bad) if where == "header" else connect(server, query=bad))
    await ws.send(hello())
    err = await expect_fatal(ws, "unauthorized", 1008)
    assert bad not in err["message"]
    await assert_survives(server, db, mini_suite, token)


async def test_query_token_is_accepted(server, token):
    ws = await connect(server, query=token)
    await ws.send(hello())
    assert (await recv_json(ws))["type"] == "welcome"
    await ws.close()


async def test_binary_before_hello(server, db, mini_suite, token):
    ws = await connect(server, token)
    await ws.send(assistant(0))
    await expect_fatal(ws, "binary_before_hello", 1002)
    await assert_survives(server, db, mini_suite, token)


@pytest.mark.parametrize(
    "raw, code, close_code",
    [
        (hello(protocol=2), "unsupported_version", 1002),
        (hello(protocol=0), "unsupported_version", 1002),
        (hello(protocol=2, model="future-shape", options={"x": 1}), "unsupported_version", 1002),
        ('{"type": "hello", "protocol": 1, "model": {"name": "x"', "bad_json", 1003),
        ("not json at all", "bad_json", 1003),
        ('["hello"]', "bad_message", 1002),
        ('{"type": "bogus"}', "unknown_type", 1002),
        ('{"type": "text", "seq": 0, "text": "hi"}', "unexpected_message", 1002),
        (hello(sample_rate=44100), "bad_message", 1002),
        (hello(clocks=[]), "bad_message", 1002),
        (hello(model={"name": "has space"}), "bad_message", 1002),
        (hello(colour="blue"), "bad_message", 1002),
        (json.dumps({"type": "hello", "model": {"name": "x"}}), "bad_message", 1002),
        ('{"type": "hello", "pad": "' + "x" * 70_000 + '"}', "message_too_big", 1009),
    ],
    ids=["protocol-2", "protocol-0", "protocol-2-other-shape", "truncated-json", "not-json", "not-an-object", "unknown-type",
         "text-before-hello", "bad-rate", "no-clocks", "bad-model-name", "extra-field", "no-protocol",
         "oversized"],
)
async def test_bad_first_message(server, db, mini_suite, token, raw, code, close_code):
    ws = await connect(server, token)
    await ws.send(raw)
    await expect_fatal(ws, code, close_code)
    await assert_survives(server, db, mini_suite, token)


@pytest.mark.parametrize(
    "over, words",
    [
        ({"model": "x"}, "model must be an object"),
        ({"model": None}, "model must be an object"),
        ({"sample_rate": "16000"}, "sample_rate must be an integer (24000 or 16000)"),
        ({"sample_rate": 44100}, "sample_rate must be 24000 or 16000"),
        ({"protocol": "1"}, "protocol must be an integer"),
        ({"clocks": "lockstep"}, "clocks must be an array"),
        ({"clocks": ["sometimes"]}, "clocks.0 must be 'lockstep' or 'realtime'"),
        ({"model": {"name": "x", "revision": 5}}, "model.revision must be a string"),
        ({"model": {"name": ""}}, "model.name must have at least 1 character"),
        ({"colour": "blue"}, "colour is not a field of this message"),
    ],
    ids=["model-string", "model-null", "rate-string", "rate-44100", "protocol-string", "clocks-string",
         "clock-unknown", "revision-number", "name-empty", "extra-field"],
)
async def test_bad_hello_is_explained_in_the_protocols_words(server, token, over, words):
    """The message names the field and what it must be, never an internal class (§4.1, §9)."""
    ws = await connect(server, token)
    await ws.send(hello(**over))
    err = await expect_fatal(ws, "bad_message", 1002)
    assert err["message"] == f"invalid hello message: {words}"
    assert not re.search(r"ModelInfo|Hello\b|_Msg|BaseModel|instance of|Input should", err["message"])


@pytest.mark.parametrize("path", ["/v1/bridges", "/bridge", "/", "/v1/bridge/extra"])
async def test_wrong_websocket_path_is_404_not_an_auth_failure(server, token, path):
    """A WebSocket to a path that has none: HTTP 404 naming /v1/bridge (§2), not a 403."""
    with pytest.raises(websockets.InvalidStatus) as info:
        await websockets.connect(server.url + path, additional_headers={"Authorization": f"Bearer {token}"},
                                 open_timeout=T)
    response = info.value.response
    assert response.status_code == 404
    error = json.loads(response.body)["error"]
    assert error["code"] == "not_found" and path in error["message"] and "/v1/bridge" in error["message"]
    async with httpx.AsyncClient() as http:  # plain HTTP keeps the API's own 404
        r = await http.get(server.url.replace("ws://", "http://") + path + "-nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


async def test_handshake_timeout(settings, db, mini_suite, token):
    settings.handshake_timeout_s = 0.3
    async with BackgroundServer(settings) as srv:
        ws = await connect(srv, token)
        t0 = time.monotonic()
        await expect_fatal(ws, "timeout", 1002)
        assert 0.25 <= time.monotonic() - t0 < 5
        await assert_survives(srv, db, mini_suite, token)


# --- after the handshake, outside an episode -------------------------------------------------


@pytest.mark.parametrize(
    "send, code, close_code",
    [
        (hello(), "unexpected_message", 1002),
        ('{"type": "bogus", "x": 1}', "unknown_type", 1002),
        ("{oops", "bad_json", 1003),
        ("[" * 50_000, "bad_json", 1003),
        (json.dumps({"type": "text", "seq": 0, "text": "x" * 70_000}), "message_too_big", 1009),
        (json.dumps({"type": "text", "seq": 0, "text": "x" * 4001}), "bad_message", 1002),
        (assistant(0, b"\x01\x00" * 1920 + b"\x00\x00"), "message_too_big", 1009),
        (assistant(0), "unexpected_message", 1002),
        (assistant(0, b"\x01\x00" * 1920), "unexpected_message", 1002),
    ],
    ids=["hello-twice", "unknown-type", "bad-json", "deeply-nested-json", "oversized-text", "text-too-long", "oversized-binary",
         "silent-frame-outside-episode", "frame-outside-episode"],
)
async def test_bad_message_after_welcome(server, db, mini_suite, token, send, code, close_code):
    ws = await open_bridge(server, token)  # no run queued: the bridge is idle
    await ws.send(send)
    await expect_fatal(ws, code, close_code)
    await assert_survives(server, db, mini_suite, token)


@pytest.mark.parametrize("case, close_code", [("over-1MiB", 1009), ("invalid-utf8", 1007)])
async def test_transport_level_closes(server, db, mini_suite, token, case, close_code):
    """The WebSocket layer itself refuses these, with a close and no error message."""
    ws = await open_bridge(server, token)
    if case == "over-1MiB":
        await ws.send(b"\x00" * (2 << 20))
    else:
        await ws.send(b'{"type": "text", "seq": 0, "text": "\xff\xfe"}', text=True)
    with pytest.raises(websockets.ConnectionClosed):
        raw = await asyncio.wait_for(ws.recv(), T)
        pytest.fail(f"unexpected message {raw!r}")
    assert ws.close_code == close_code
    await assert_survives(server, db, mini_suite, token)


# --- during a lockstep episode -----------------------------------------------------------


def _bad_payload(kind: str) -> bytes:
    pcm = b"\x01\x00" * 1920
    return {
        "short-payload": assistant(0, pcm[:200]),
        "odd-bytes": assistant(0, pcm[:-1]),
        "16k-size-on-24k": assistant(0, pcm[: 2 * 1280]),
        "kind-room": assistant(0, pcm, kind=1),
        "kind-unknown": assistant(0, pcm, kind=7),
        "unknown-flags": assistant(0, pcm, flags=0x0004),
        "silent-with-payload": assistant(0, pcm, flags=1),
        "short-header": b"\x01\x02\x00",
        "wrong-version": HEADER.pack(2, 2, 1, 0),
    }[kind]


@pytest.mark.parametrize(
    "kind, code, close_code",
    [
        ("short-payload", "bad_frame", 1002),
        ("odd-bytes", "bad_frame", 1002),
        ("16k-size-on-24k", "bad_frame", 1002),
        ("kind-room", "bad_frame", 1002),
        ("kind-unknown", "bad_frame", 1002),
        ("unknown-flags", "bad_frame", 1002),
        ("silent-with-payload", "bad_frame", 1002),
        ("short-header", "bad_frame", 1002),
        ("wrong-version", "unsupported_version", 1002),
    ],
)
async def test_bad_frame_in_episode(server, db, mini_suite, token, kind, code, close_code):
    queue_run(db, mini_suite)
    ws = await open_bridge(server, token)
    await start_episode(ws)
    k, _, seq, _ = await recv_frame(ws)
    assert (k, seq) == (1, 0)
    await ws.send(_bad_payload(kind))
    await expect_fatal(ws, code, close_code)
    await wait_attempts_settled(db)
    with db.session() as s:
        att = s.scalars(select(Attempt)).one()
        assert (att.status, att.error_code) == ("failed", code)
    await assert_survives(server, db, mini_suite, token)


@pytest.mark.parametrize("case", ["ahead", "duplicate", "behind"])
async def test_bad_seq_in_lockstep(server, db, mini_suite, token, case):
    queue_run(db, mini_suite)
    ws = await open_bridge(server, token)
    await start_episode(ws)
    for n in range(3):  # answer frames 0..2 correctly
        _, _, seq, _ = await recv_frame(ws)
        assert seq == n
        await ws.send(assistant(seq))
    _, _, seq, _ = await recv_frame(ws)
    assert seq == 3
    await ws.send(assistant({"ahead": 4, "duplicate": 2, "behind": 0}[case]))
    err = await expect_fatal(ws, "bad_seq", 1002)
    assert "3" in err["message"]
    await assert_survives(server, db, mini_suite, token)


async def test_hello_twice_during_episode(server, db, mini_suite, token):
    queue_run(db, mini_suite)
    ws = await open_bridge(server, token)
    await start_episode(ws)
    await recv_frame(ws)
    await ws.send(hello())
    await expect_fatal(ws, "unexpected_message", 1002)
    await assert_survives(server, db, mini_suite, token)


async def test_lockstep_timeout(settings, db, mini_suite, token):
    settings.lockstep_timeout_s = 0.3
    async with BackgroundServer(settings) as srv:
        queue_run(db, mini_suite)
        ws = await open_bridge(srv, token)
        await start_episode(ws)
        await recv_frame(ws)  # ... and never answer it
        await expect_fatal(ws, "timeout", 1002)
        await wait_attempts_settled(db)
        with db.session() as s:
            assert s.scalars(select(Attempt.error_code)).one() == "timeout"
        await assert_survives(srv, db, mini_suite, token)


@pytest.mark.parametrize("case", ["repeat", "back", "ahead-of-room"])
async def test_realtime_seq_rules(server, db, mini_suite, token, case):
    run_id = queue_run(db, mini_suite, clock="realtime")
    ws = await open_bridge(server, token, clocks=["realtime"])
    start = await start_episode(ws)
    assert start["clock"] == "realtime"
    _, _, seq, _ = await recv_frame(ws)
    assert seq == 0
    if case == "ahead-of-room":  # only room frame 0 is out: seq must stay below 0 + 1 + 25
        await ws.send(assistant(26))
    else:
        await ws.send(assistant(5))
        await ws.send(assistant(5 if case == "repeat" else 4))
    # room frames keep coming on the clock until the server notices
    while True:
        raw = await asyncio.wait_for(ws.recv(), T)
        if isinstance(raw, str):
            err = json.loads(raw)
            break
    assert err["type"] == "error" and err["code"] == "bad_seq"
    with pytest.raises(websockets.ConnectionClosed):
        await asyncio.wait_for(ws.recv(), T)
    assert ws.close_code == 1002
    await wait_attempts_settled(db)
    cancel_run(db, run_id)  # the survivor below serves lockstep only
    await assert_survives(server, db, mini_suite, token)


# --- a failing bridge loses only its attempt ---------------------------------------------


def _pattern(seq: int) -> bytes:
    return (np.arange(1920, dtype=np.int16) % 200 - 100 + seq).astype("<i2").tobytes()


@pytest.mark.parametrize("how", ["error-message", "protocol-error", "disconnect"])
async def test_mid_episode_failure_costs_one_attempt(server, db, mini_suite, token, how):
    run_id = queue_run(db, mini_suite)
    ws = await open_bridge(server, token)
    start = await start_episode(ws)
    answered = 30
    for n in range(answered):
        _, _, seq, _ = await recv_frame(ws)
        assert seq == n
        await ws.send(assistant(seq, _pattern(seq)))
    await recv_frame(ws)  # room frame 30 is out; the bridge fails before answering it
    if how == "error-message":
        await ws.send(json.dumps({"type": "error", "code": "model_crashed", "message": "out of memory"}))
        await expect_fatal(ws, "bridge_error", 1000)
        expected_code = "model_crashed"  # the attempt keeps the bridge's own code
    elif how == "protocol-error":
        await ws.send(assistant(99))
        await expect_fatal(ws, "bad_seq", 1002)
        expected_code = "bad_seq"
    else:
        await ws.close()
        expected_code = "disconnected"
    await wait_attempts_settled(db)

    with db.session() as s:
        ep = s.scalars(select(Episode).where(Episode.run_id == run_id)).one()
        att = s.get(Attempt, start["episode_id"])  # episode.start's id is the attempt's id
        assert (att.status, att.error_code) == ("failed", expected_code)
        assert (ep.status, ep.attempts, ep.completed_attempt_id) == ("queued", 1, None)
        # the partial recording of the failed attempt is kept
        chunks = s.scalars(select(AudioChunk).where(AudioChunk.attempt_id == att.id)
                           .order_by(AudioChunk.track, AudioChunk.idx)).all()
        tracks = {t: np.concatenate([decode_audio(c.data) for c in chunks if c.track == t]) for t in ("room", "assistant")}
        assert len(tracks["room"]) == (answered + 1) * 1920
        assert len(tracks["assistant"]) == answered * 1920
        sent = np.frombuffer(b"".join(_pattern(n) for n in range(answered)), dtype="<i2")
        np.testing.assert_array_equal(tracks["assistant"], sent)
        frames = dict(s.execute(select(FrameRow.direction, func.count()).where(FrameRow.attempt_id == att.id)
                                .group_by(FrameRow.direction)).all())
        assert frames == {"room": answered + 1, "assistant": answered}

    await serve_one(server, token)  # the next bridge gets the same episode and completes it
    with db.session() as s:
        ep = s.scalars(select(Episode).where(Episode.run_id == run_id)).one()
        atts = s.scalars(select(Attempt).where(Attempt.episode_id == ep.id).order_by(Attempt.number)).all()
        assert [a.status for a in atts] == ["failed", "completed"]
        assert atts[1].number == atts[0].number + 1 and atts[0].id == start["episode_id"] != atts[1].id
        assert (ep.status, ep.attempts, ep.completed_attempt_id) == ("completed", 2, atts[1].id)
        assert s.get(Run, run_id).status == "finished"


# --- conformance details the protocol document promises --------------------------------------


@pytest.mark.parametrize("admin,asks", [(False, False), (True, False), (True, True)])
async def test_episode_start_fields_and_reference(server, db, mini_suite, admin, asks):
    """Only an admin bridge that asks (``hello.wants_reference``) is told what it plays."""
    tok = create_token(db, "local", admin=admin)
    queue_run(db, mini_suite)
    ws = await open_bridge(server, tok, **({"wants_reference": True} if asks else {}))
    start = await start_episode(ws)
    base = {"type", "episode_id", "clock", "sample_rate", "frame_samples", "max_inflight"}
    assert set(start) == base | ({"reference"} if admin and asks else set())
    assert (start["clock"], start["sample_rate"], start["frame_samples"], start["max_inflight"]) == \
        ("lockstep", 24000, 1920, 1)
    if admin and asks:
        assert start["reference"] == {"scenario_id": "s-p1", "condition": "explicit"}
    else:
        assert "s-p1" not in json.dumps(start)
    await ws.close()


async def test_16khz_frames_and_max_inflight(server, db, mini_suite, token):
    queue_run(db, mini_suite, max_inflight=3)
    ws = await open_bridge(server, token, sample_rate=16000)
    start = await start_episode(ws)
    assert (start["sample_rate"], start["frame_samples"], start["max_inflight"]) == (16000, 1280, 3)
    got = [await recv_frame(ws) for _ in range(3)]  # three frames in flight before any answer
    assert [g[2] for g in got] == [0, 1, 2] and all(g[0] == 1 for g in got)
    assert all(len(g[3]) in (0, 2 * 1280) and (len(g[3]) == 0) == bool(g[1] & 1) for g in got)
    with pytest.raises(asyncio.TimeoutError):  # frame 3 waits for the answer to frame 0
        await asyncio.wait_for(ws.recv(), 0.3)
    await ws.send(assistant(0, b"\x01\x00" * 1280))
    assert (await recv_frame(ws))[2] == 3
    await ws.close()


# --- the minimal bridge of docs/protocol.md, verbatim -------------------------------------


def load_doc_example() -> dict:
    text = DOC.read_text()
    m = re.search(r"<!-- minimal-bridge -->\s*```python\n(.*?)```", text, re.S)
    assert m, "docs/protocol.md lost its minimal bridge example"
    ns: dict = {"__name__": "minimal_bridge"}
    exec(compile(m.group(1), str(DOC), "exec"), ns)
    return ns


@pytest.mark.parametrize("rate, model", [(24000, "silent"), (16000, "echo")])
async def test_doc_example_bridge_runs_a_lockstep_episode(server, db, mini_suite, token, rate, model):
    ns = load_doc_example()
    if model == "echo":  # exercise the example's non-silent path too: play the room back
        ns["model_step"] = lambda seq, room: room
    run_id = queue_run(db, mini_suite)
    url = server.url + "/v1/bridge"
    served = await asyncio.wait_for(ns["run_bridge"](url, token, "x", sample_rate=rate, max_episodes=1), 60)
    assert served == 1
    with db.session() as s:
        ep = s.scalars(select(Episode).where(Episode.run_id == run_id)).one()
        att = s.get(Attempt, ep.completed_attempt_id)
        assert (ep.status, att.status, att.bridge_rate, att.model_revision) == \
            ("completed", "completed", rate, "example-1")
        rows = s.execute(select(FrameRow.seq, FrameRow.slot, FrameRow.silent).where(
            FrameRow.attempt_id == att.id, FrameRow.direction == "assistant").order_by(FrameRow.seq)).all()
        assert [r.seq for r in rows] == [r.slot for r in rows] == list(range(att.n_frames))
        assert att.n_frames > 100
        assert all(r.silent for r in rows) == (model == "silent")


# --- server shutdown and known server bugs -----------------------------------------------


async def test_server_shutdown_closes_1012_and_requeues(settings, db, mini_suite, token):
    run_id = queue_run(db, mini_suite)
    srv = BackgroundServer(settings)
    await srv.__aenter__()
    try:
        ws = await open_bridge(srv, token)
        await start_episode(ws)
        await recv_frame(ws)
    finally:
        await srv.__aexit__(None, None, None)
    with pytest.raises(websockets.ConnectionClosed):
        await asyncio.wait_for(ws.recv(), T)
    assert ws.close_code == 1012
    with db.session() as s:
        # the bridge never answered: the attempt does not count against the episode
        assert s.scalars(select(Attempt.status)).one() == "unstarted"
        ep = s.scalars(select(Episode).where(Episode.run_id == run_id)).one()
        assert ep.status == "queued" and ep.attempts == 0
    async with BackgroundServer(settings) as srv2:  # a restarted server finishes the episode
        await serve_one(srv2, token)
    with db.session() as s:
        assert s.get(Run, run_id).status == "finished"


async def test_first_attempt_is_number_one(server, db, mini_suite, token):
    queue_run(db, mini_suite)
    await serve_one(server, token)
    with db.session() as s:
        assert s.scalars(select(Attempt.number)).one() == 1


async def test_bridge_leaving_after_episode_end_does_not_strand_next_episode(server, db, mini_suite, token):
    run_id = queue_run(db, mini_suite, conditions=["explicit", "implicit"])  # two episodes
    await serve_one(server, token)  # serves one, closes right after episode.end
    await asyncio.sleep(0.5)  # the server may have leased the second one to the leaving bridge
    with db.session() as s:
        eps = s.scalars(select(Episode).where(Episode.run_id == run_id)).all()
        assert sorted(e.status for e in eps) == ["completed", "queued"]
        # an attempt that never started does not use up one of the episode's attempts
        assert sorted(e.attempts for e in eps) == [0, 1]


async def play_lockstep(ws) -> int:
    """Answer every room frame with silence until ``episode.end``; returns the room frames."""
    await start_episode(ws)
    frames = 0
    while True:
        raw = await asyncio.wait_for(ws.recv(), T)
        if isinstance(raw, bytes):
            seq = HEADER.unpack_from(raw)[3]
            await ws.send(assistant(seq))
            frames += 1
        elif json.loads(raw)["type"] == "episode.end":
            return frames


async def test_a_late_answer_right_after_an_episode_is_discarded(server, db, mini_suite, token):
    """Answers on their way when the server ended the episode (protocol.md §7.2: within 2 s) do
    not end the connection: the bridge plays its next episode on it."""
    queue_run(db, mini_suite)
    ws = await open_bridge(server, token)
    frames = await play_lockstep(ws)
    await ws.send(assistant(frames))  # one frame too many, just after episode.end
    queue_run(db, mini_suite)
    assert await play_lockstep(ws) == frames  # same connection, the next episode, whole
    await ws.close()


async def test_frames_from_before_an_episode_began_are_late_answers_to_the_last():
    """The connection's rule (protocol.md §7.2), on literal arrival times: audio that arrived while no
    episode ran is passed over within 2 s of the last episode's end, even when the next episode has
    begun by the time it is read (the server leased it at once); later, or with no episode before,
    it is ``unexpected_message``. Frames that arrived after the episode began are its own."""
    now = [100.0]

    def connection() -> WSConnection:
        conn = WSConnection(None, Principal(team="t", scopes=frozenset(), token_id=1),
                            Hello(protocol=1, model={"name": "m", "revision": "r"}))
        conn.clock = lambda: now[0]
        return conn

    def arrive(conn: WSConnection, seq: int, at: float) -> None:
        conn.queue.put_nowait(AssistantFrame(Frame(kind=KIND_ASSISTANT, seq=seq, flags=FLAG_SILENT,
                                                 pcm=np.zeros(1920, np.int16)), at))

    fresh = connection()
    arrive(fresh, 0, 100.0)  # no episode before on this connection
    with pytest.raises(ProtocolError, match="outside an episode"):
        await fresh.next_inbound(0)

    conn = connection()
    conn.begin_episode()
    now[0] = 110.0
    conn.end_episode()
    arrive(conn, 250, 110.5)  # on its way when the episode ended
    now[0] = 111.0
    conn.begin_episode()  # the next episode, leased at once
    arrive(conn, 0, 111.2)
    got = await conn.next_inbound(0)
    assert (got.frame.seq, got.arrived) == (0, 111.2)
    assert await conn.next_inbound(0) is None
    now[0] = 120.0
    conn.end_episode()
    arrive(conn, 7, 120.0 + LATE_ANSWERS_S - 0.01)  # still a late answer, while idle
    assert await conn.next_inbound(0) is None
    arrive(conn, 8, 120.0 + LATE_ANSWERS_S + 0.01)  # too late to be one
    with pytest.raises(ProtocolError, match="outside an episode"):
        await conn.next_inbound(0)


# --- hearing an episode is a start ------------------------------------------------------


def test_hearing_starts_past_the_first_stretch_of_room_sound():
    from server.engine.session import Hearing

    silent, loud = np.zeros(4, np.int16), np.array([0, 3, 0, 0], np.int16)
    h = Hearing()
    for pcm in (silent, silent, loud, loud, loud):  # leading silence, then the first sound (a preamble)
        h.sent(pcm)
    assert not h.heard
    h.sent(silent)  # the pause after it
    assert not h.heard
    h.sent(loud)  # sound again: the episode itself
    assert h.heard
    h.sent(silent)
    assert h.heard


async def test_a_realtime_bridge_that_hears_and_leaves_without_answering_uses_an_attempt(server, db, mini_suite,
                                                                                          token):
    """A bridge that never answers but is sent room audio past the first stretch of sound, then
    leaves, fails its attempt (``disconnected``): it used one of the episode's attempts."""
    run_id = queue_run(db, mini_suite, clock="realtime")
    ws = await open_bridge(server, token, clocks=["realtime"])
    await start_episode(ws)
    state = "before"  # mirrors the rule: sound, a silent frame, sound again
    while state != "heard":
        raw = await asyncio.wait_for(ws.recv(), T)
        assert isinstance(raw, bytes)
        loud = not (HEADER.unpack_from(raw)[2] & FLAG_SILENT) and any(raw[8:])
        state = {("before", True): "sound", ("sound", False): "pause", ("pause", True): "heard"}.get((state, loud), state)
    await ws.close()
    for _ in range(200):
        with db.session() as s:
            ep = s.scalars(select(Episode).where(Episode.run_id == run_id)).one()
            att = s.scalars(select(Attempt).where(Attempt.episode_id == ep.id)).one()
        if att.status != "running":
            break
        await asyncio.sleep(0.05)
    assert (att.status, att.error_code) == ("failed", "disconnected")
    assert ep.status == "queued" and ep.attempts == 1
