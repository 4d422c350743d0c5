"""Pure unit tests of the wire protocol v1 codec and messages (DESIGN §4, docs/protocol.md).

No sockets, no database: literal bytes and strings in, frames, messages or a
ProtocolError with its stable code out.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from clients.codec import (
    FLAG_SILENT,
    HEADER_SIZE,
    KIND_ASSISTANT,
    KIND_CONTEXT,
    KIND_ROOM,
    MAX_SEQ,
    PROTOCOL_VERSION,
    decode_frame,
    encode_frame,
    frame_samples,
    max_binary_size,
)
from clients.errors import CLOSE_CODES, AuthError, MPEError, ProtocolError, RemoteError
from clients.messages import (
    MAX_TEXT_MESSAGE,
    ContextTurn,
    EpisodeEnd,
    EpisodeStart,
    Error,
    Hello,
    ModelInfo,
    Reference,
    Stats,
    Text,
    Welcome,
    parse_bridge_message,
    parse_server_message,
)

N24, N16 = 1920, 1280


def pcm(n: int = N24, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(-32768, 32768, n, dtype=np.int16)


def header(version=1, kind=KIND_ASSISTANT, flags=0, seq=0) -> bytes:
    return struct.pack("<BBHI", version, kind, flags, seq)


def code_of(fn, *args, **kw) -> str:
    with pytest.raises(ProtocolError) as info:
        fn(*args, **kw)
    assert isinstance(info.value, MPEError)
    return info.value.code


# --- constants -----------------------------------------------------------------------------


def test_frame_geometry():
    assert (PROTOCOL_VERSION, KIND_ROOM, KIND_ASSISTANT, FLAG_SILENT, HEADER_SIZE) == (1, 1, 2, 1, 8)
    assert frame_samples(24_000) == N24 and frame_samples(16_000) == N16
    assert max_binary_size(24_000) == 8 + 3840 and max_binary_size(16_000) == 8 + 2560
    assert MAX_SEQ == 2**32 - 1


def test_header_layout_byte_by_byte():
    """The documented example: room frame seq 258, then a silent answer."""
    data = encode_frame(KIND_ROOM, 258, pcm())
    assert data[:8] == bytes.fromhex("0101000002010000")
    assert len(data) == 8 + 3840
    assert encode_frame(KIND_ASSISTANT, 258, None) == bytes.fromhex("0102010002010000")
    assert encode_frame(KIND_ASSISTANT, 0x01020304, None)[4:] == bytes([4, 3, 2, 1])  # u32 little-endian


# --- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [KIND_ROOM, KIND_ASSISTANT, KIND_CONTEXT])
@pytest.mark.parametrize("seq", [0, 1, 257, 123_456, MAX_SEQ])
def test_round_trip(kind, seq):
    x = pcm(seed=seq % 1000)
    data = encode_frame(kind, seq, x)
    assert len(data) == HEADER_SIZE + 2 * N24
    f = decode_frame(data, n_samples=N24, kind=kind)
    assert (f.kind, f.seq, f.flags, f.silent) == (kind, seq, 0, False)
    assert f.pcm.dtype == np.int16 and f.pcm.shape == (N24,)
    np.testing.assert_array_equal(f.pcm, x)


def test_payload_is_little_endian_s16():
    x = np.array([1, -1, 256, -32768, 32767] + [0] * (N24 - 5), dtype=np.int16)
    data = encode_frame(KIND_ASSISTANT, 7, x)
    assert data[8:18] == bytes.fromhex("0100ffff00010080ff7f")


def test_silent_round_trip():
    for frame in (None, np.zeros(N24, np.int16)):  # None and all-zero both travel as SILENT
        data = encode_frame(KIND_ASSISTANT, 42, frame)
        assert data == header(kind=KIND_ASSISTANT, flags=FLAG_SILENT, seq=42)
        f = decode_frame(data, n_samples=N24, kind=KIND_ASSISTANT)
        assert (f.seq, f.flags, f.silent) == (42, FLAG_SILENT, True)
        assert f.pcm.shape == (N24,) and not f.pcm.any() and f.pcm.dtype == np.int16


def test_16khz_size_round_trip():
    x = pcm(N16, seed=3)
    data = encode_frame(KIND_ROOM, 9, x)
    assert len(data) == HEADER_SIZE + 2 * N16 == max_binary_size(16_000)
    f = decode_frame(data, n_samples=N16, kind=KIND_ROOM)
    np.testing.assert_array_equal(f.pcm, x)
    # the same bytes are the wrong size for a 24 kHz connection and vice versa
    assert code_of(decode_frame, data, n_samples=N24) == "bad_frame"
    assert code_of(decode_frame, encode_frame(KIND_ROOM, 9, pcm()), n_samples=N16) == "bad_frame"
    silent = decode_frame(encode_frame(KIND_ROOM, 1, None), n_samples=N16)
    assert silent.pcm.shape == (N16,)


def test_encode_accepts_other_int_dtypes():
    x = pcm().astype(np.int32)
    f = decode_frame(encode_frame(KIND_ASSISTANT, 0, x), n_samples=N24)
    np.testing.assert_array_equal(f.pcm, x)


def test_decode_accepts_any_kind_without_expectation():
    for kind in (KIND_ROOM, KIND_ASSISTANT):
        assert decode_frame(encode_frame(kind, 0, None), n_samples=N24).kind == kind


# --- seq range -----------------------------------------------------------------------------


@pytest.mark.parametrize("seq", [-1, MAX_SEQ + 1, 2**40])
def test_encode_rejects_seq_out_of_range(seq):
    with pytest.raises(ValueError):
        encode_frame(KIND_ROOM, seq, None)


def test_decoded_seq_covers_full_u32():
    assert decode_frame(header(seq=MAX_SEQ, flags=FLAG_SILENT), n_samples=N24).seq == MAX_SEQ


# --- decode errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, code",
    [
        (b"", "bad_frame"),
        (b"\x01", "bad_frame"),
        (header(flags=FLAG_SILENT)[:7], "bad_frame"),  # short header
        (header(version=0, flags=FLAG_SILENT), "unsupported_version"),
        (header(version=2, flags=FLAG_SILENT), "unsupported_version"),
        (b"{\"type\": \"hello\"}", "unsupported_version"),  # JSON in a binary message
        (header(kind=0, flags=FLAG_SILENT), "bad_frame"),  # unknown kind
        (header(kind=4, flags=FLAG_SILENT), "bad_frame"),
        (header(kind=255, flags=FLAG_SILENT), "bad_frame"),
        (header(flags=0x0002), "bad_frame"),  # unknown flags
        (header(flags=0x8001), "bad_frame"),
        (header(flags=FLAG_SILENT) + b"\x00\x00", "bad_frame"),  # SILENT with payload
        (header(), "bad_frame"),  # not silent, no payload
        (header() + b"\x00" * (2 * N24 - 2), "bad_frame"),  # one sample short
        (header() + b"\x00" * (2 * N24 + 2), "bad_frame"),  # one sample long
        (header() + b"\x00" * (2 * N24 - 1), "bad_frame"),  # odd byte count
        (header() + b"\x00" * (2 * N24 + 1), "bad_frame"),
        (header() + b"\x00" * 2 * N16, "bad_frame"),  # a 16 kHz frame on a 24 kHz connection
    ],
    ids=["empty", "1-byte", "7-bytes", "version-0", "version-2", "json", "kind-0", "kind-4", "kind-255",
         "flag-bit-1", "flag-bit-15", "silent-with-payload", "no-payload", "short-1-sample",
         "long-1-sample", "odd-short", "odd-long", "16k-size"],
)
def test_decode_errors(data, code):
    assert code_of(decode_frame, data, n_samples=N24) == code


def test_wrong_kind_for_direction():
    room = encode_frame(KIND_ROOM, 0, pcm())
    assistant = encode_frame(KIND_ASSISTANT, 0, pcm())
    assert code_of(decode_frame, room, n_samples=N24, kind=KIND_ASSISTANT) == "bad_frame"
    assert code_of(decode_frame, assistant, n_samples=N24, kind=KIND_ROOM) == "bad_frame"
    assert decode_frame(assistant, n_samples=N24, kind=KIND_ASSISTANT).kind == KIND_ASSISTANT


def test_context_frame_kind_3():
    """§5.1: kind 3 is assistant context, server → bridge: same header, same frame size, SILENT as usual."""
    assert KIND_CONTEXT == 3
    x = pcm(seed=3)
    data = encode_frame(KIND_CONTEXT, 7, x)
    assert data[:8] == bytes.fromhex("0103000007000000") and len(data) == 8 + 3840
    f = decode_frame(data, n_samples=N24, kind=(KIND_ROOM, KIND_CONTEXT))  # what a bridge that accepts context reads
    assert (f.kind, f.seq, f.silent) == (KIND_CONTEXT, 7, False) and np.array_equal(f.pcm, x)
    silent = encode_frame(KIND_CONTEXT, 8, np.zeros(N16, np.int16))
    assert silent == bytes.fromhex("0103010008000000")
    assert not decode_frame(silent, n_samples=N16, kind=(KIND_ROOM, KIND_CONTEXT)).pcm.any()
    # the server reads only kind 2 from a bridge; a bridge that did not accept context reads only kind 1
    assert code_of(decode_frame, data, n_samples=N24, kind=KIND_ASSISTANT) == "bad_frame"
    assert code_of(decode_frame, data, n_samples=N24, kind=(KIND_ROOM,)) == "bad_frame"
    with pytest.raises(ProtocolError, match="expected 1 or 3"):
        decode_frame(encode_frame(KIND_ASSISTANT, 0, None), n_samples=N24, kind=(KIND_ROOM, KIND_CONTEXT))


def test_context_fields_only_on_the_wire_when_set():
    """hello.accepts_context and episode.start.context_frames are left off while at their default, so that
    peers which predate them (and reject unknown fields) keep working."""
    hello = Hello(protocol=1, model=ModelInfo(name="m"))
    assert "accepts_context" not in json.loads(hello.dumps()) and hello.accepts_context is False
    yes = Hello(protocol=1, model=ModelInfo(name="m"), accepts_context=True)
    assert json.loads(yes.dumps())["accepts_context"] is True
    assert parse_bridge_message(yes.dumps()) == yes
    assert code_of(parse_bridge_message, json.dumps({"type": "hello", "protocol": 1, "model": {"name": "m"},
                                                     "accepts_context": "yes"})) == "bad_message"
    start = EpisodeStart(episode_id="e", clock="lockstep", sample_rate=24000, frame_samples=N24)
    assert "context_frames" not in json.loads(start.dumps()) and start.context_frames == 0
    forced = start.model_copy(update={"context_frames": 125})
    assert json.loads(forced.dumps())["context_frames"] == 125
    assert parse_server_message(forced.dumps()).context_frames == 125
    assert parse_server_message(start.dumps()).context_frames == 0
    # §5.2: the words of the history, only when given (left off while empty)
    assert "context_turns" not in json.loads(forced.dumps())
    turn = ContextTurn(role="assistant", text="Two plus two is four.", start_seq=3, end_seq=40, played=0.5)
    worded = forced.model_copy(update={"context_turns": [turn]})
    assert json.loads(worded.dumps())["context_turns"][0] == {"role": "assistant", "text": "Two plus two is four.",
                                                              "start_seq": 3, "end_seq": 40, "played": 0.5}
    assert parse_server_message(worded.dumps()).context_turns == [turn] and turn.spoken_text() == "Two plus"
    assert ContextTurn(role="user", text="a b", start_seq=0, end_seq=1, played=0.01).spoken_text() == "a"


def test_error_order_version_before_kind_before_size():
    """The first broken field decides the code (documented precedence)."""
    assert code_of(decode_frame, header(version=9, kind=9, flags=0xFF), n_samples=N24) == "unsupported_version"
    with pytest.raises(ProtocolError, match="kind"):
        decode_frame(header(kind=9, flags=0xFF), n_samples=N24)


def test_error_close_codes():
    assert {c: CLOSE_CODES[c] for c in ("bad_frame", "unsupported_version", "message_too_big")} == \
        {"bad_frame": 1002, "unsupported_version": 1002, "message_too_big": 1009}
    err = ProtocolError("x", code="bad_frame")
    assert err.close_code == 1002 and err.message == "x"


# --- the error hierarchy -------------------------------------------------------------------


def test_error_hierarchy_and_close_code_map():
    assert issubclass(AuthError, ProtocolError) and issubclass(ProtocolError, MPEError)
    assert issubclass(RemoteError, MPEError)
    assert (AuthError().code, AuthError().close_code) == ("unauthorized", 1008)
    assert (ProtocolError().code, RemoteError().code, MPEError().code) == ("bad_message", "bridge_error", "internal")
    assert MPEError("x", code="no_such_code").close_code == 1011  # unknown codes are internal
    assert CLOSE_CODES == {
        "unauthorized": 1008, "unsupported_version": 1002, "bad_json": 1003, "unknown_type": 1002,
        "bad_message": 1002, "unexpected_message": 1002, "binary_before_hello": 1002, "bad_frame": 1002,
        "bad_seq": 1002, "message_too_big": 1009, "timeout": 1002, "bridge_error": 1000, "shutdown": 1001,
        "internal": 1011, "too_much_data": 1008, "forbidden": 1008,
        "rate_limited": 1013, "too_many_bridges": 1013, "too_many_listeners": 1013,
    }


# --- messages: hello -----------------------------------------------------------------------


def hello(**over) -> dict:
    msg = {"type": "hello", "protocol": 1, "model": {"name": "my-model", "revision": "abc"},
           "sample_rate": 24000, "clocks": ["lockstep", "realtime"]}
    msg.update(over)
    return msg


def bridge_code(obj) -> str:
    raw = obj if isinstance(obj, (str, bytes)) else json.dumps(obj)
    return code_of(parse_bridge_message, raw)


def test_valid_hello():
    m = parse_bridge_message(json.dumps(hello()))
    assert isinstance(m, Hello)
    assert (m.protocol, m.model.name, m.model.revision, m.sample_rate, m.clocks) == \
        (1, "my-model", "abc", 24000, ["lockstep", "realtime"])


def test_hello_defaults_and_16k():
    m = parse_bridge_message('{"type": "hello", "protocol": 1, "model": {"name": "m"}}')
    assert (m.model.revision, m.sample_rate, m.clocks) == ("", 24000, ["lockstep", "realtime"])
    m = parse_bridge_message(json.dumps(hello(sample_rate=16000, clocks=["realtime"])))
    assert (m.sample_rate, m.clocks) == (16000, ["realtime"])


@pytest.mark.parametrize("name", ["m", "Moshi-7B", "org/model@v1.2+cuda:0", "a" * 100, "0_x"])
def test_hello_model_names_ok(name):
    assert parse_bridge_message(json.dumps(hello(model={"name": name}))).model.name == name


@pytest.mark.parametrize(
    "over, code",
    [
        ({"protocol": None}, "bad_message"),
        ({"protocol": "one"}, "bad_message"),
        ({"protocol": 2}, "unsupported_version"),
        ({"protocol": 0}, "unsupported_version"),
        ({"protocol": 2, "model": 5, "something_new": True}, "unsupported_version"),  # v2 may look different
        ({"sample_rate": 44100}, "bad_message"),
        ({"sample_rate": 8000}, "bad_message"),
        ({"sample_rate": "24000 Hz"}, "bad_message"),
        ({"clocks": []}, "bad_message"),
        ({"clocks": ["wallclock"]}, "bad_message"),
        ({"clocks": "lockstep"}, "bad_message"),
        ({"model": {"name": ""}}, "bad_message"),
        ({"model": {"name": "has space"}}, "bad_message"),
        ({"model": {"name": "-leading-dash"}}, "bad_message"),
        ({"model": {"name": "a" * 101}}, "bad_message"),
        ({"model": {"name": "ok", "revision": "r" * 201}}, "bad_message"),
        ({"model": {"name": "ok", "weights": "x"}}, "bad_message"),  # extra field inside model
        ({"model": "my-model"}, "bad_message"),
        ({"extra": 1}, "bad_message"),  # extra field
    ],
    ids=["protocol-null", "protocol-str", "protocol-2", "protocol-0", "protocol-2-other-shape", "rate-44100",
         "rate-8000", "rate-str", "clocks-empty", "clocks-unknown", "clocks-not-list", "name-empty",
         "name-space", "name-dash", "name-long", "revision-long", "model-extra", "model-str", "extra"],
)
def test_invalid_hello(over, code):
    assert bridge_code(hello(**over)) == code


def test_hello_without_protocol_or_model():
    h = hello()
    del h["protocol"]
    assert bridge_code(h) == "bad_message"
    h = hello()
    del h["model"]
    assert bridge_code(h) == "bad_message"


def test_validation_error_message_names_the_field():
    with pytest.raises(ProtocolError, match=r"invalid hello message: sample_rate"):
        parse_bridge_message(json.dumps(hello(sample_rate=44100)))


# --- messages: framing errors --------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, code",
    [
        ("", "bad_json"),
        ("{", "bad_json"),
        ("{'type': 'hello'}", "bad_json"),  # single quotes
        ("hello", "bad_json"),
        (b"\xff\xfe{}", "bad_json"),  # not UTF-8
        ("[" * 50_000, "bad_json"),  # absurd nesting (RecursionError inside json)
        ("[]", "bad_message"),
        ('["hello"]', "bad_message"),
        ('"hello"', "bad_message"),
        ("42", "bad_message"),
        ("null", "bad_message"),
        ("{}", "bad_message"),
        ('{"type": 1}', "bad_message"),
        ('{"type": null}', "bad_message"),
        ('{"type": "bogus"}', "unknown_type"),
        ('{"type": "welcome", "bridge_id": "x"}', "unknown_type"),  # a server message from a bridge
        ('{"type": "episode.start"}', "unknown_type"),
    ],
    ids=["empty", "truncated", "single-quotes", "bare-word", "not-utf8", "deep-nesting", "array", "array-str",
         "string", "number", "null", "no-type", "type-int", "type-null", "unknown", "welcome-from-bridge",
         "episode-start-from-bridge"],
)
def test_bridge_message_framing_errors(raw, code):
    assert bridge_code(raw) == code


def test_unknown_type_message_is_truncated():
    with pytest.raises(ProtocolError) as info:
        parse_bridge_message(json.dumps({"type": "z" * 500}))
    assert info.value.code == "unknown_type" and len(info.value.message) < 100


def test_oversized_text_message():
    pad = "x" * (MAX_TEXT_MESSAGE + 1)
    assert bridge_code(json.dumps({"type": "text", "seq": 0, "text": pad})) == "message_too_big"
    assert bridge_code(pad) == "message_too_big"  # size is checked before parsing
    assert bridge_code(pad.encode()) == "message_too_big"


def test_text_limit_counts_utf8_bytes():
    base = json.dumps({"type": "stats", "data": {"k": ""}})
    room = MAX_TEXT_MESSAGE - len(base)
    ok = json.dumps({"type": "stats", "data": {"k": "x" * room}}, ensure_ascii=False)
    assert len(ok.encode()) == MAX_TEXT_MESSAGE
    assert isinstance(parse_bridge_message(ok), Stats)
    # fewer characters than the limit, but more bytes: 3 bytes per character in UTF-8
    wide = json.dumps({"type": "stats", "data": {"k": "€" * (room // 2)}}, ensure_ascii=False)
    assert len(wide) < MAX_TEXT_MESSAGE < len(wide.encode())
    assert bridge_code(wide) == "message_too_big"


# --- messages: text, stats, error ----------------------------------------------------------


def test_text_stats_error_messages():
    t = parse_bridge_message('{"type": "text", "seq": 12, "text": "Nine in the evening."}')
    assert isinstance(t, Text) and (t.seq, t.text) == (12, "Nine in the evening.")
    s = parse_bridge_message('{"type": "stats", "data": {"latency_ms": 41.5, "nested": {"a": [1]}}}')
    assert isinstance(s, Stats) and s.data == {"latency_ms": 41.5, "nested": {"a": [1]}}
    e = parse_bridge_message('{"type": "error", "code": "model_crashed"}')
    assert isinstance(e, Error) and (e.code, e.message) == ("model_crashed", "")


@pytest.mark.parametrize(
    "obj",
    [
        {"type": "text", "seq": -1, "text": "x"},
        {"type": "text", "seq": 2**32, "text": "x"},
        {"type": "text", "seq": 0, "text": "x" * 4001},
        {"type": "text", "seq": 0},
        {"type": "text", "seq": 0, "text": "x", "speaker": "A"},
        {"type": "stats", "data": [1, 2]},
        {"type": "stats"},
        {"type": "error", "code": "c" * 65},
        {"type": "error", "code": "x", "message": "m" * 1001},
        {"type": "error"},
    ],
    ids=["seq-negative", "seq-too-big", "text-4001", "text-missing", "text-extra", "stats-list", "stats-missing",
         "code-long", "message-long", "code-missing"],
)
def test_invalid_side_messages(obj):
    assert bridge_code(obj) == "bad_message"


def test_text_boundaries_ok():
    assert parse_bridge_message(json.dumps({"type": "text", "seq": 2**32 - 1, "text": "x" * 4000})).seq == 2**32 - 1


# --- server messages ---------------------------------------------------------------------------


def test_server_messages_round_trip():
    msgs = [
        Welcome(bridge_id="b1"),
        EpisodeStart(episode_id="e1", clock="lockstep", sample_rate=24000, frame_samples=1920, max_inflight=1),
        EpisodeStart(episode_id="e2", clock="realtime", sample_rate=16000, frame_samples=1280,
                     reference=Reference(scenario_id="s0007", condition="explicit")),
        EpisodeEnd(episode_id="e1", reason="completed"),
        Error(code="bad_seq", message="expected 3, got 2"),
    ]
    for m in msgs:
        back = parse_server_message(m.dumps())
        assert back == m and type(back) is type(m)


def test_server_message_wire_shapes():
    assert json.loads(Welcome(bridge_id="b1").dumps()) == {"type": "welcome", "bridge_id": "b1", "protocol": 1}
    start = json.loads(EpisodeStart(episode_id="e", clock="lockstep", sample_rate=24000,
                                    frame_samples=1920).dumps())
    assert start == {"type": "episode.start", "episode_id": "e", "clock": "lockstep", "sample_rate": 24000,
                     "frame_samples": 1920, "max_inflight": 1}  # no reference key unless admin
    assert json.loads(Error(code="timeout").dumps()) == {"type": "error", "code": "timeout", "message": ""}


def test_reference_block_allows_more_fields():
    raw = json.dumps({"type": "episode.start", "episode_id": "e", "clock": "lockstep", "sample_rate": 24000,
                      "frame_samples": 1920, "max_inflight": 1,
                      "reference": {"scenario_id": "s1", "condition": "implicit", "gold_answer": "x"}})
    m = parse_server_message(raw)
    assert m.reference.scenario_id == "s1" and m.reference.model_extra == {"gold_answer": "x"}


@pytest.mark.parametrize(
    "raw, code",
    [
        ('{"type": "hello", "protocol": 1, "model": {"name": "x"}}', "unknown_type"),
        ('{"type": "text", "seq": 0, "text": "x"}', "unknown_type"),
        ('{"type": "welcome"}', "bad_message"),
        ('{"type": "episode.start", "episode_id": "e", "clock": "sometimes", "sample_rate": 24000,'
         ' "frame_samples": 1920}', "bad_message"),
        ("{nope", "bad_json"),
    ],
)
def test_server_message_errors(raw, code):
    assert code_of(parse_server_message, raw) == code


def test_sdk_side_models_build_valid_hello():
    h = Hello(protocol=1, model=ModelInfo(name="x"), sample_rate=16000, clocks=["realtime"])
    assert parse_bridge_message(h.dumps()) == h
