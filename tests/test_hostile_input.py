"""Hostile input from HTTP clients and bridges, over real HTTP and real WebSockets, on SQLite and
PostgreSQL: absurd ``Range`` headers, NUL characters (which PostgreSQL refuses in text), lone
surrogates (which no UTF-8 response can carry), unbounded ``stats`` and ``text``, a suite that
vanished after its run was created, symlinked suite files that leave the suites root, and an SDK
talking to a server that sends fields it does not know. Each case is refused with a stable code or
stored safely, and every attempt ends (never left ``running`` until its lease expires).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import struct
import uuid
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
import websockets
from sqlalchemy import select

from clients.errors import CLOSE_CODES, MPEError
from clients.messages import MAX_DEPTH, MAX_STATS_BYTES, MAX_TEXT_BYTES, MAX_TEXT_MESSAGES, storable
from clients.sdk import Bridge, BridgeClient, BridgeOptions
from server.api.audio import parse_range
from server.api.errors import RangeNotSatisfiable
from server.db import Attempt, BridgeRow, Episode, EventRow, Run
from server.engine.leasing import create_run
from tests.support.world import world_on

# the async tests share the module's world (its server runs on the module's event loop)
shared_loop = pytest.mark.asyncio(loop_scope="module")

HEADER = struct.Struct("<BBHI")
T = 20.0  # per-step timeout; each step takes well under a second
HUGE = "9" * 5000  # more digits than Python's int() takes from a string by default (4300)


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["sqlite", "postgres"])
async def world(request, tmp_path_factory, mini_suite):
    async with world_on(request.param, tmp_path_factory.mktemp("hostile"), mini_suite) as w:
        yield w


def http(w, who: str = "alpha") -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=w.http, headers={"Authorization": f"Bearer {w.tokens[who]}"}, timeout=30)


def err(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    return body["error"]["message"]


def queue(w, model: str, suite=None) -> str:
    return create_run(w.db, team="alpha", model=model, suite_path=str(suite or w.suite), clock="lockstep", limit=1,
                      conditions=["explicit"])


def model_name() -> str:
    return "m-" + uuid.uuid4().hex[:10]  # a model of its own: each test's bridge gets only its run


async def raw_bridge(w, model: str, revision: str = "r1"):
    """A bridge on a plain WebSocket, after hello, welcome and the first status."""
    ws = await websockets.connect(w.ws + "/v1/bridge", additional_headers={"Authorization": f"Bearer {w.tokens['alpha']}"},
                                  max_size=None, open_timeout=T)
    await ws.send(json.dumps({"type": "hello", "protocol": 1, "model": {"name": model, "revision": revision},
                              "clocks": ["lockstep"]}))
    for expected in ("welcome", "status"):
        msg = json.loads(await asyncio.wait_for(ws.recv(), T))
        assert msg["type"] == expected, msg
    return ws


async def play(ws, side: list[str] = (), *, stop_after: int | None = None) -> tuple[dict, dict]:
    """Answer room frames with silence, sending the ``side`` messages after the first one, until
    ``episode.end`` or an ``error`` (or, with ``stop_after``, until that many frames were answered).
    Returns episode.start and the last message."""
    start = json.loads(await asyncio.wait_for(ws.recv(), T))
    assert start["type"] == "episode.start", start
    answered = 0
    while True:
        raw = await asyncio.wait_for(ws.recv(), T)
        if isinstance(raw, str):
            msg = json.loads(raw)
            assert msg["type"] in ("episode.end", "error"), msg
            return start, msg
        _, kind, _, seq = HEADER.unpack_from(raw)
        await ws.send(HEADER.pack(1, 2, 1, seq))
        answered += 1
        if answered == 1:
            for m in side:
                await ws.send(m)
        if stop_after is not None and answered >= stop_after:
            return start, {}


async def closed(ws) -> int:
    with pytest.raises(websockets.ConnectionClosed):
        extra = await asyncio.wait_for(ws.recv(), T)
        pytest.fail(f"message after a fatal error: {extra!r}")
    return ws.close_code


async def settled(w, attempt_id: str) -> Attempt:
    """The attempt once it has ended (it must not stay ``running`` until its lease expires)."""
    for _ in range(200):
        with w.db.session() as s:
            att = s.get(Attempt, attempt_id)
            if att is not None and att.status != "running":
                return att
        await asyncio.sleep(0.05)
    pytest.fail(f"attempt {attempt_id} is still running")


# --- 1. Range headers ---------------------------------------------------------------------------


def test_parse_range_takes_numbers_of_any_length():
    size = 1000
    with pytest.raises(RangeNotSatisfiable):
        parse_range(f"bytes={HUGE}-", size)
    with pytest.raises(RangeNotSatisfiable):
        parse_range(f"bytes={HUGE}-{HUGE}", size)
    assert parse_range(f"bytes=10-{HUGE}", size) == (10, size - 1)
    assert parse_range(f"bytes=-{HUGE}", size) == (0, size - 1)  # a suffix longer than the body: all of it
    assert parse_range(f"bytes={'0' * 5000}5-{'0' * 5000}9", size) == (5, 9)  # leading zeros are just zeros
    assert parse_range(f"bytes={HUGE}-5", size) is None  # end before start: ignored, as RFC 9110 allows


@shared_loop
async def test_a_range_header_of_thousands_of_digits(world):
    model = model_name()
    queue(world, model)
    ws = await raw_bridge(world, model)
    start, end = await play(ws)
    assert end == {"type": "episode.end", "episode_id": start["episode_id"], "reason": "completed"}
    await ws.close()
    with world.db.session() as s:
        ep_id = s.get(Attempt, start["episode_id"]).episode_id
    url = f"/v1/episodes/{ep_id}/audio/room"
    async with http(world) as c:
        size = int((await c.head(url)).headers["content-length"])
        r = await c.get(url, headers={"Range": f"bytes={HUGE}-"})
        assert "beyond" in err(r, 416, "range_not_satisfiable")
        assert r.headers["content-range"] == f"bytes */{size}"
        r = await c.get(url, headers={"Range": f"bytes=0-{HUGE}"})
        assert r.status_code == 206 and r.headers["content-range"] == f"bytes 0-{size - 1}/{size}"
        r = await c.get(url, headers={"Range": f"bytes=-{HUGE}"})
        assert r.status_code == 206 and len(r.content) == size


# --- 2. NUL characters in requests ----------------------------------------------------------------


@shared_loop
@pytest.mark.parametrize("who, path", [
    ("alpha", "/v1/runs?model=a%00b"),
    ("admin", "/v1/runs?team=alpha%00"),
    ("admin", "/v1/suites?team=%00"),
    ("admin", "/v1/tokens?team=al%00pha"),
    ("alpha", "/v1/runs?status=queued&model=%00"),
    ("alpha", "/v1/runs/ab%00cd"),
    ("alpha", "/ui/%00"),
])
async def test_nul_in_a_query_parameter_or_path_is_a_clear_400(world, who, path):
    async with http(world, who) as c:
        assert "NUL" in err(await c.get(path), 400, "bad_request")


@shared_loop
async def test_nul_in_a_token_label_is_a_clear_400(world):
    async with http(world, "admin") as c:
        r = await c.post("/v1/tokens", json={"team": "alpha", "label": "lab\x00el"})
        assert "NUL" in err(r, 400, "bad_request")
        r = await c.post("/v1/tokens", json={"team": "alpha", "label": {"nested": "\x00"}})  # wherever it is
        assert r.status_code == 400, r.text
        r = await c.post("/v1/tokens", content=b'{"team": "alpha", "label": "a\\\\u0000b"}',
                         headers={"Content-Type": "application/json"})  # a backslash, then "u0000": no NUL
        assert r.status_code == 201 and r.json()["label"] == "a\\u0000b", r.text


# --- 2 and 3. Bridge-provided free text is stored safely -------------------------------------------


UNSTORABLE = {"nul": "\x00", "surrogate": "\ud800"}  # PostgreSQL refuses the one, UTF-8 the other


@shared_loop
@pytest.mark.parametrize("char", UNSTORABLE)
@pytest.mark.parametrize("field", ["revision", "text", "stats-key", "stats-value", "stats-nested"])
async def test_unstorable_characters_from_a_bridge_are_stored_replaced(world, field, char):
    """hello.model.revision, text, stats keys and values at any depth: NUL and lone surrogates
    become U+FFFD; the attempt completes and its episode's document is served."""
    c = UNSTORABLE[char]
    model = model_name()
    queue(world, model)
    side = {"text": [{"type": "text", "seq": 0, "text": f"hi{c}"}],
            "stats-key": [{"type": "stats", "data": {f"k{c}": 1}}],
            "stats-value": [{"type": "stats", "data": {"k": f"v{c}"}}],
            "stats-nested": [{"type": "stats", "data": {"deep": [{"x": f"{c}y"}]}}]}.get(field, [])
    ws = await raw_bridge(world, model, revision=f"rev{c}" if field == "revision" else "rev")
    start, end = await play(ws, [json.dumps(m) for m in side])
    assert end["type"] == "episode.end" and end["reason"] == "completed", end
    await ws.close()
    att = await settled(world, start["episode_id"])
    assert att.status == "completed"
    async with http(world) as h:
        r = await h.get(f"/v1/episodes/{att.episode_id}")
        assert r.status_code == 200, r.text
        doc = r.json()
    if field == "revision":
        with world.db.session() as s:
            assert s.get(BridgeRow, att.bridge_id).model_revision == "rev\ufffd"
        assert doc["model"]["revision"] == doc["attempts"][0]["model_revision"] == "rev\ufffd"
    elif field == "text":
        assert [e["data"]["text"] for e in doc["events"] if e["type"] == "text"] == ["hi\ufffd"]
    else:
        expected = {"stats-key": {"k\ufffd": 1}, "stats-value": {"k": "v\ufffd"},
                    "stats-nested": {"deep": [{"x": "\ufffdy"}]}}[field]
        assert expected.items() <= doc["stats"].items()


@shared_loop
async def test_numbers_json_cannot_hold_are_stored_as_null(world):
    """``1e999`` parses as infinity, which no JSON column (PostgreSQL's) takes back: null instead."""
    model = model_name()
    queue(world, model)
    ws = await raw_bridge(world, model)
    side = ['{"type": "stats", "data": {"big": 1e999, "small": -1e999, "fine": 1e308, "list": [1e999]}}']
    start, end = await play(ws, side)
    assert end["type"] == "episode.end" and end["reason"] == "completed", end
    await ws.close()
    att = await settled(world, start["episode_id"])
    assert att.status == "completed"
    assert {"big": None, "small": None, "fine": 1e308, "list": [None]}.items() <= att.stats.items()


@shared_loop
@pytest.mark.parametrize("char", UNSTORABLE)
async def test_unstorable_characters_in_a_bridge_error_end_the_attempt_with_its_code(world, char):
    c = UNSTORABLE[char]
    model = model_name()
    queue(world, model)
    ws = await raw_bridge(world, model)
    start, _ = await play(ws, stop_after=3)
    await ws.send(json.dumps({"type": "error", "code": f"model{c}oom", "message": f"out of{c} memory"}))
    while isinstance(raw := await asyncio.wait_for(ws.recv(), T), bytes):
        pass  # the room frame sent before the server read the error
    msg = json.loads(raw)
    assert msg["type"] == "error" and msg["code"] == "bridge_error", msg
    assert await closed(ws) == 1000
    att = await settled(world, start["episode_id"])
    assert (att.status, att.error_code) == ("failed", "model\ufffdoom")
    assert att.error_message == "bridge reported model\ufffdoom: out of\ufffd memory"
    with world.db.session() as s:
        assert s.get(Episode, att.episode_id).status == "queued"  # requeued for the next bridge


def test_storable_replaces_what_no_database_or_utf8_response_can_hold():
    assert storable("a\x00b\ud800c\udfffd") == "a\ufffdb\ufffdc\ufffdd"
    assert storable("😀 fine \ufffd") == "😀 fine \ufffd"
    assert storable({"\x00": ["\ud83d", 1, 2.5, None, True, {"k": "\x00"}]}) == \
        {"\ufffd": ["\ufffd", 1, 2.5, None, True, {"k": "\ufffd"}]}
    assert storable([float("inf"), float("-inf"), float("nan"), 1e308, 10**30]) == [None, None, None, 1e308, 10**30]


# --- 4. stats and text are bounded per attempt -----------------------------------------------------


async def _over_the_limit(w, side: list[str]) -> Attempt:
    model = model_name()
    queue(w, model)
    ws = await raw_bridge(w, model)
    start, msg = await play(ws, side)
    assert msg["type"] == "error" and msg["code"] == "too_much_data", msg
    assert await closed(ws) == CLOSE_CODES["too_much_data"] == 1008
    att = await settled(w, start["episode_id"])
    assert (att.status, att.error_code) == ("failed", "too_much_data")
    return att


@shared_loop
async def test_stats_over_the_per_attempt_total_end_the_attempt(world):
    value = "x" * 60_000
    n = MAX_STATS_BYTES // 60_000 + 2  # each message is below the 64 KiB message cap, their sum is not
    att = await _over_the_limit(world, [json.dumps({"type": "stats", "data": {f"k{i}": value}}) for i in range(n)])
    assert len(json.dumps(att.stats)) <= MAX_STATS_BYTES + 4096  # what was stored stayed within the bound


@shared_loop
async def test_stats_that_replace_their_keys_stay_within_the_total(world):
    """The bound is on the merged stats that are stored: updating the same keys costs nothing extra."""
    model = model_name()
    queue(world, model)
    ws = await raw_bridge(world, model)
    value = "y" * 60_000
    side = [json.dumps({"type": "stats", "data": {"big": value + str(i)}}) for i in range(3 * MAX_STATS_BYTES // 60_000)]
    start, end = await play(ws, side)
    assert end["type"] == "episode.end" and end["reason"] == "completed", end
    await ws.close()
    att = await settled(world, start["episode_id"])
    assert att.status == "completed" and att.stats["big"] == value + str(len(side) - 1)


@shared_loop
async def test_text_over_the_per_attempt_total_ends_the_attempt(world):
    n = MAX_TEXT_BYTES // 4000 + 2
    att = await _over_the_limit(world, [json.dumps({"type": "text", "seq": 0, "text": "é" * 2000}) for _ in range(n)])
    with world.db.session() as s:
        texts = s.scalars(select(EventRow.data).where(EventRow.attempt_id == att.id, EventRow.type == "text")).all()
    assert MAX_TEXT_BYTES - 4000 < sum(len(t["text"].encode()) for t in texts) <= MAX_TEXT_BYTES  # up to the limit


@shared_loop
async def test_more_text_messages_than_allowed_end_the_attempt(world):
    att = await _over_the_limit(world, [json.dumps({"type": "text", "seq": 1, "text": "a"})] * (MAX_TEXT_MESSAGES + 1))
    with world.db.session() as s:
        n = len(s.scalars(select(EventRow.id).where(EventRow.attempt_id == att.id, EventRow.type == "text")).all())
    assert n == MAX_TEXT_MESSAGES  # the ones within the limit are kept


@shared_loop
async def test_stats_nested_too_deeply_end_the_attempt_and_the_page_is_served(world):
    """Found by tests/test_fuzz.py: stats nested 300 deep (600 bytes) were stored, and the episode's
    document could no longer be served (pydantic serialises 255 levels at most: a 500 for ever).
    Now refused: ``bad_message``, the attempt fails, the page is served."""
    model = model_name()
    queue(world, model)
    ws = await raw_bridge(world, model)
    start, end = await play(ws, ['{"type": "stats", "data": {"a": ' + "[" * 300 + "]" * 300 + "}}"])
    assert (end["type"], end["code"]) == ("error", "bad_message"), end
    assert await closed(ws) == CLOSE_CODES["bad_message"]
    att = await settled(world, start["episode_id"])
    assert (att.status, att.error_code) == ("failed", "bad_message")
    async with http(world) as h:
        assert (await h.get(f"/v1/episodes/{att.episode_id}")).status_code == 200


def test_the_limits_are_the_documented_ones():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "protocol.md").read_text()
    limits = doc[doc.index("## 11. Limits"):doc.index("## 12.")]
    assert (MAX_TEXT_MESSAGES, MAX_TEXT_BYTES, MAX_STATS_BYTES, MAX_DEPTH) == (20_000, 1 << 20, 256 << 10, 64)
    assert "| `text` messages per attempt | ≤ 20 000, with ≤ 1 MiB of `text` in all (UTF-8) |" in limits
    assert "| `stats` per attempt (all messages merged, compact JSON) | ≤ 256 KiB |" in limits
    assert "| objects and arrays nested in a text message (the message itself included) | ≤ 64 levels |" in limits
    assert f"| `too_much_data` | {CLOSE_CODES['too_much_data']} |" in doc


# --- 5. a suite that is gone after its run was created --------------------------------------------


@shared_loop
@pytest.mark.parametrize("how", ["removed", "moved", "clips-removed"])
async def test_a_vanished_suite_fails_its_run_with_a_stable_code_and_no_path(world, how):
    copy = world.settings.suites_root / f"vanishing-{uuid.uuid4().hex[:8]}"
    shutil.copytree(world.suite, copy)
    model = model_name()
    run_id = queue(world, model, suite=copy)
    if how == "removed":
        shutil.rmtree(copy)
    elif how == "moved":
        copy.rename(copy.with_name(copy.name + "-elsewhere"))
    else:  # suite.json and scenarios.jsonl are still there (and unchanged)
        shutil.rmtree(copy / "clips")
    ws = await raw_bridge(world, model)
    received = []
    try:  # the bridge stays connected and hears only that its work has ended, never a server path
        while True:
            raw = await asyncio.wait_for(ws.recv(), T)
            received.append(raw)
            if json.loads(raw).get("reason") == "ended":
                break
    finally:
        await ws.close()
    roots = {str(world.settings.suites_root), str(world.settings.suites_root.resolve())}
    assert not [m for m in received if any(r in m for r in roots)], received
    with world.db.session() as s:
        run = s.get(Run, run_id)
        att = s.scalars(select(Attempt).join(Episode).where(Episode.run_id == run_id)).one()
        assert (run.status, att.status, att.error_code) == ("failed", "failed", "suite_changed")
        assert str(copy) not in (run.error or "") and str(copy) not in (att.error_message or "")
    async with http(world) as c:
        r = (await c.get(f"/v1/runs/{run_id}")).json()
        assert r["status"] == "failed" and "suite" in r["error"] and str(copy.parent) not in r["error"]


# --- 6. the SDK ignores fields a later server adds ----------------------------------------------------


class Silent(Bridge):
    name = "later-model"
    clocks = ("lockstep",)
    blocking = False

    def reset(self, episode):
        self.episode_seen = episode

    def step(self, seq, room):
        return None


async def test_sdk_ignores_unknown_fields_in_every_server_message():
    """A real WebSocket peer speaking a later revision of protocol 1: every message it sends carries
    fields the SDK does not know, including nested ones, and its first message is of a type the SDK
    does not know. The SDK serves the episode, then stops on the server's error with that error's own
    code (not ``bad_message`` or ``unknown_type``)."""
    answers: list[int] = []

    async def later_server(ws):
        await ws.recv()  # hello
        extra = {"added_later": {"any": ["thing"]}, "x-vendor": 1}
        await ws.send(json.dumps({"type": "server.hello", "revision": 7}))  # a type of a later revision, first
        await ws.send(json.dumps({"type": "welcome", "bridge_id": "b1", "protocol": 1, **extra}))
        await ws.send(json.dumps({"type": "status", "matching_runs": 1, "queued_episodes": 1, "reason": "queued",
                                  "hint": "one", **extra}))
        await ws.send(json.dumps({"type": "episode.start", "episode_id": "e1", "clock": "lockstep",
                                  "sample_rate": 24000, "frame_samples": 1920, "max_inflight": 1,
                                  "reference": {"scenario_id": "s", "condition": "explicit", "more": 2}, **extra}))
        for seq in range(3):
            await ws.send(HEADER.pack(1, 1, 1, seq))
            _, kind, _, got = HEADER.unpack_from(await ws.recv())
            answers.append(got)
        await ws.send(json.dumps({"type": "episode.end", "episode_id": "e1", "reason": "completed", **extra}))
        await ws.send(json.dumps({"type": "error", "code": "shutdown", "message": "bye", **extra}))
        await ws.close(1001)

    async with websockets.serve(later_server, "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        bridge = Silent()
        client = BridgeClient(bridge, BridgeOptions(server=f"ws://127.0.0.1:{port}", token="t", reconnect=False))
        with pytest.raises(MPEError) as info:
            await asyncio.wait_for(client.run(), T)
    assert info.value.code == "shutdown", info.value
    assert answers == [0, 1, 2] and client.episodes_done == 1 and client.bridge_id == "b1"
    assert client.status is not None and client.status.reason == "queued"
    assert bridge.episode_seen.reference.scenario_id == "s"


# --- 7. suite files that are symlinks out of the suites root ------------------------------------------


@shared_loop
@pytest.mark.parametrize("linked", ["suite.json", "scenarios.jsonl", "both"])
async def test_suite_files_symlinked_out_of_the_root_are_refused(world, tmp_path, linked):
    outside = tmp_path / "outside"
    shutil.copytree(world.suite, outside)
    name = f"linked-{uuid.uuid4().hex[:8]}"
    inside = world.settings.suites_root / name
    shutil.copytree(world.suite, inside)
    for f in (["suite.json", "scenarios.jsonl"] if linked == "both" else [linked]):
        (inside / f).unlink()
        (inside / f).symlink_to(outside / f)
    async with http(world) as c:
        r = await c.post("/v1/runs", json={"model": "m", "suite": name, "conditions": ["explicit"]})
        msg = err(r, 400, "bad_request")
        assert str(tmp_path) not in msg and str(world.settings.suites_root) not in msg
        listed = (await c.get("/v1/suites/available")).json()
        assert name not in [d["path"] for d in listed]
        # symlinks that stay inside the root are fine
        ok = f"ok-{uuid.uuid4().hex[:8]}"
        shutil.copytree(world.suite, world.settings.suites_root / ok)
        for f in ("suite.json", "scenarios.jsonl"):
            (world.settings.suites_root / ok / f).unlink()
            (world.settings.suites_root / ok / f).symlink_to(world.suite / f)
        r = await c.post("/v1/runs", json={"model": "m", "suite": ok, "conditions": ["explicit"], "limit": 1})
        assert r.status_code == 201, r.text
        r = await c.post(f"/v1/runs/{r.json()['id']}/cancel")
        assert r.status_code == 200
        assert ok in [d["path"] for d in (await c.get("/v1/suites/available")).json()]


# --- not UTF-8, from anyone -----------------------------------------------------------------------

def _masked_text_frame(payload: bytes) -> bytes:
    mask = b"\x01\x02\x03\x04"
    return bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


@shared_loop
async def test_text_that_is_not_utf8_is_one_warning(world):
    """A text frame of invalid UTF-8 where a bridge's hello is awaited: the socket closes with 1007
    and the log has one WARNING line for it, no ERROR and no traceback (the check is the WebSocket
    layer's, before any handler reads the message: a socket of any path, with or without a token)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    server_log = logging.getLogger("uvicorn.error")
    server_log.addHandler(handler)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", world.server.port)
        writer.write(("GET /v1/bridge HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Authorization: Bearer {world.tokens['alpha']}\r\n"
                      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), T)
        assert head.startswith(b"HTTP/1.1 101"), head
        writer.write(_masked_text_frame(b'{"type": "hello", "x": "\xff\xfe"}'))
        answer = b""
        with contextlib.suppress(ConnectionResetError):  # until the server closes (or resets) the connection
            while chunk := await asyncio.wait_for(reader.read(4096), T):
                answer += chunk
        writer.close()
    finally:
        server_log.removeHandler(handler)
    assert answer == b"\x88\x02\x03\xef", answer  # a close frame with 1007, nothing before it
    assert [r.levelno for r in records] == [logging.WARNING], [(r.levelname, r.getMessage()) for r in records]
    assert "not UTF-8" in records[0].getMessage() and records[0].exc_info is None
