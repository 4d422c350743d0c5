"""The wire protocol's lifecycle (clients.lifecycle, DESIGN §4, docs/protocol.md §3, §5.1, §7),
driven synchronously on literal message sequences, each side alone and both against each other.
No socket, no clock: times are literal seconds."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import numpy as np
import pytest

from clients.codec import KIND_ASSISTANT, KIND_CONTEXT, KIND_ROOM, encode_frame
from clients.errors import MPEError, ProtocolError, RemoteError
from clients.lifecycle import (
    LATE_ANSWERS_S,
    AssistantFrame,
    BridgeLifecycle,
    EpisodeEnded,
    EpisodeStarted,
    ErrorReceived,
    Phase,
    ServerLifecycle,
    StatusChanged,
    Welcomed,
)
from clients.messages import EpisodeEnd, EpisodeStart, Error, Hello, ModelInfo, Status, Welcome

N = 1920  # samples of one 80 ms frame at 24 kHz
HELLO = '{"type":"hello","protocol":1,"model":{"name":"m","revision":"r"},"sample_rate":24000,' \
        '"clocks":["lockstep","realtime"]}'
SILENT_ANSWER_0 = bytes([1, 2, 1, 0, 0, 0, 0, 0])  # docs/protocol.md §5: kind 2, SILENT, seq 0


def hello(*, accepts_context: bool = False, clocks=("lockstep", "realtime")) -> Hello:
    return Hello(protocol=1, model=ModelInfo(name="m", revision="r"), clocks=list(clocks),
                 accepts_context=accepts_context)


def start(clock: str = "lockstep", *, context: int = 0, inflight: int = 1, episode: str = "e1") -> str:
    return EpisodeStart(episode_id=episode, clock=clock, sample_rate=24000, frame_samples=N,
                        max_inflight=inflight, context_frames=context).dumps()


def room(seq: int) -> bytes:
    return encode_frame(KIND_ROOM, seq, None)


def context(seq: int) -> bytes:
    return encode_frame(KIND_CONTEXT, seq, np.full(N, 7, np.int16))


def answer(seq: int) -> bytes:
    return encode_frame(KIND_ASSISTANT, seq, None)


def welcomed(**kw) -> BridgeLifecycle:
    life = BridgeLifecycle(hello(**kw))
    life.send_hello()
    assert life.receive_text(Welcome(bridge_id="b1").dumps()) == Welcomed("b1")
    return life


def in_episode(clock: str = "lockstep", *, hello_kw=None, **kw) -> BridgeLifecycle:
    life = welcomed(**(hello_kw or {}))
    assert isinstance(life.receive_text(start(clock, **kw)), EpisodeStarted)
    return life


@contextlib.contextmanager
def raises(code: str, match: str | None = None) -> Iterator[None]:
    """A ProtocolError with this code (and a message that matches)."""
    with pytest.raises(ProtocolError, match=match) as info:
        yield
    assert info.value.code == code, info.value.code


# --- the bridge's side --------------------------------------------------------------------------


def test_bridge_lockstep_episode_with_context_frames():
    life = BridgeLifecycle(hello(accepts_context=True))
    assert json.loads(life.send_hello()) == {"type": "hello", "protocol": 1, "model": {"name": "m", "revision": "r"},
                                             "sample_rate": 24000, "clocks": ["lockstep", "realtime"],
                                             "accepts_context": True}
    assert life.receive_text('{"type":"welcome","bridge_id":"b1","protocol":1}') == Welcomed("b1")
    status = '{"type":"status","matching_runs":1,"queued_episodes":1,"reason":"queued","hint":"h"}'
    assert life.receive_text(status) == StatusChanged(Status(matching_runs=1, queued_episodes=1, reason="queued",
                                                             hint="h"))
    ev = life.receive_text(start(context=2))
    assert isinstance(ev, EpisodeStarted) and ev.start.context_frames == 2 and life.phase is Phase.EPISODE
    got = []
    for seq in range(4):
        if seq < 2:
            f = life.receive_bytes(context(seq))
            assert (f.kind, f.seq, int(f.pcm[0])) == (KIND_CONTEXT, seq, 7)
        f = life.receive_bytes(room(seq))
        assert (f.kind, f.seq, f.silent) == (KIND_ROOM, seq, True)
        got.append(life.send_answer(seq, None))
    assert got[0] == SILENT_ANSWER_0
    assert got[3] == bytes([1, 2, 1, 0, 3, 0, 0, 0])
    assert life.receive_text(EpisodeEnd(episode_id="e1", reason="completed").dumps()) == \
        EpisodeEnded(EpisodeEnd(episode_id="e1", reason="completed"))
    assert life.phase is Phase.IDLE and life.episode is None
    # the next episode on the same connection starts from seq 0 again
    life.receive_text(start(episode="e2"))
    assert life.receive_bytes(room(0)).seq == 0


def test_bridge_realtime_episode():
    """§7.2: room frames keep coming while answers lag; answers strictly increase (gaps allowed)."""
    life = in_episode("realtime")
    for seq in range(3):
        life.receive_bytes(room(seq))  # realtime never waits for the bridge
    assert life.send_answer(0, None) == SILENT_ANSWER_0
    life.send_answer(2, np.ones(N, np.int16))  # a gap is allowed
    with raises("bad_seq", "does not increase"):
        life.send_answer(1, None)
    assert life.receive_text(EpisodeEnd(episode_id="e1", reason="completed").dumps()) is not None


def test_bridge_lockstep_max_inflight():
    """§7.1: with max_inflight 2 two room frames may be out; a third before the first answer breaks it."""
    life = in_episode(inflight=2)
    life.receive_bytes(room(0))
    life.receive_bytes(room(1))
    with raises("unexpected_message", "before the answer to frame 0"):
        life.receive_bytes(room(2))
    life = in_episode()
    life.receive_bytes(room(0))
    with raises("unexpected_message", "before the answer"):
        life.receive_bytes(room(1))


def test_bridge_unknown_message_types_are_skipped_and_errors_reported():
    life = BridgeLifecycle(hello())
    life.send_hello()
    assert life.receive_text('{"type":"news","x":1}') is None  # §4: skipped, even first
    assert life.receive_text(Error(code="unauthorized", message="no").dumps()) == \
        ErrorReceived(Error(code="unauthorized", message="no"))
    assert life.phase is Phase.CLOSED


@pytest.mark.parametrize(("feed", "code", "match"), [
    (lambda life: life.receive_bytes(room(0)), "unexpected_message", "before welcome"),
    (lambda life: life.receive_text(start()), "unexpected_message", "expected welcome, got episode.start"),
    (lambda life: life.receive_text('{"type":"status","matching_runs":0,"queued_episodes":0,"reason":"no_run"}'),
     "unexpected_message", "expected welcome, got status"),
    (lambda life: life.receive_text("{"), "bad_json", None),
    (lambda life: life.send_hello(), "unexpected_message", "already sent"),
])
def test_bridge_before_welcome(feed, code, match):
    life = BridgeLifecycle(hello())
    life.send_hello()
    with raises(code, match):
        feed(life)


def test_bridge_nothing_before_hello():
    with raises("unexpected_message", "before hello"):
        BridgeLifecycle(hello()).receive_text(Welcome(bridge_id="b").dumps())


def test_bridge_violations_inside_and_outside_episodes():
    life = welcomed()
    with raises("unexpected_message", "outside an episode"):
        life.receive_bytes(room(0))
    with raises("bad_frame"):  # a broken frame says so first, even outside an episode
        life.receive_bytes(b"\x01\x01")
    with raises("unexpected_message", "outside an episode"):
        life.send_answer(0, None)
    with raises("unexpected_message", "no episode"):
        life.receive_text(EpisodeEnd(episode_id="e1", reason="completed").dumps())
    with raises("unexpected_message", "welcome a second time"):
        life.receive_text(Welcome(bridge_id="b2").dumps())
    with raises("bad_message", "does not match the hello"):
        welcomed(clocks=("realtime",)).receive_text(start("lockstep"))
    with raises("bad_message", "context frames"):
        welcomed().receive_text(start(context=3))  # context frames only to a bridge that accepts them

    life = in_episode()
    with raises("unexpected_message", "inside an episode"):
        life.receive_text(start(episode="e2"))
    with raises("unexpected_message", "no episode in progress"):
        life.receive_text(EpisodeEnd(episode_id="other", reason="completed").dumps())
    with raises("bad_seq", "expected room frame seq 0, got 1"):
        life.receive_bytes(room(1))
    with raises("bad_frame", "not allowed"):  # kind 3 to a bridge that did not accept it
        life.receive_bytes(context(0))
    with raises("bad_seq", "room frame due an answer is 0"):
        life.send_answer(0, None)  # no room frame to answer yet
    life.receive_bytes(room(0))
    with raises("bad_seq", "answer seq 1"):
        life.send_answer(1, None)  # not the seq of its room frame
    life.send_answer(0, None)
    with raises("bad_seq"):
        life.send_answer(0, None)  # one answer per room frame


def test_bridge_context_frame_rules():
    """§5.1: in slots 0 … C−1 exactly one context frame, right before the room frame of its seq."""
    ctx = {"hello_kw": {"accepts_context": True}, "context": 2}
    life = in_episode(**ctx)
    with raises("unexpected_message", "without its context frame"):
        life.receive_bytes(room(0))
    life = in_episode(**ctx)
    life.receive_bytes(context(0))
    with raises("unexpected_message", "not right before"):
        life.receive_bytes(context(0))  # twice
    life = in_episode(**ctx)
    life.receive_bytes(context(0))
    life.receive_bytes(room(0))
    with raises("unexpected_message", "not right before"):
        life.receive_bytes(context(0))  # after its room frame
    life.send_answer(0, None)
    with raises("unexpected_message", "not right before"):
        life.receive_bytes(context(2))  # ahead of its slot
    life.receive_bytes(context(1))
    life.receive_bytes(room(1))
    life.send_answer(1, None)
    with raises("unexpected_message", "not right before"):
        life.receive_bytes(context(2))  # slot 2 is past context_frames
    life.receive_bytes(room(2))


def test_bridge_send_error_closes():
    life = in_episode()
    assert json.loads(life.send_error(MPEError("out of memory", code="model_oom"))) == \
        {"type": "error", "code": "model_oom", "message": "out of memory"}
    assert life.phase is Phase.CLOSED
    with raises("unexpected_message", "after an error"):
        life.receive_text(EpisodeEnd(episode_id="e1", reason="completed").dumps())


# --- the server's side --------------------------------------------------------------------------


def server(**kw) -> ServerLifecycle:
    life = ServerLifecycle()
    life.receive_hello(hello(**kw).dumps())
    life.welcome("b1")
    return life


@pytest.mark.parametrize(("first", "code", "match"), [
    (b"\x01\x02\x01\x00\x00\x00\x00\x00", "binary_before_hello", None),
    ('{"type":"text","seq":0,"text":"hi"}', "unexpected_message", "expected hello, got text"),
    ('{"type":"stats","data":{}}', "unexpected_message", "expected hello, got stats"),
    (HELLO.replace('"protocol":1', '"protocol":2'), "unsupported_version", None),
    (HELLO.replace('"lockstep","realtime"', ""), "bad_message", "clocks"),
    ('{"type":"goodbye"}', "unknown_type", None),
    ("[1,", "bad_json", None),
    ("x" * (64 * 1024 + 1), "message_too_big", None),
])
def test_server_hello_first(first, code, match):
    with raises(code, match):
        ServerLifecycle().receive_hello(first)


def test_server_hello_then_welcome():
    life = ServerLifecycle()
    assert life.receive_hello(HELLO) == hello()
    assert life.welcome("b7") == '{"type":"welcome","bridge_id":"b7","protocol":1}'
    assert life.phase is Phase.IDLE
    with raises("unexpected_message", "hello was already received"):
        life.receive_hello(HELLO)
    with raises("unexpected_message", "hello was already received"):
        life.receive_text(HELLO)


def test_server_what_the_bridge_sends():
    life = server()
    got = life.receive_bytes(SILENT_ANSWER_0, 12.5)
    assert isinstance(got, AssistantFrame) and (got.frame.seq, got.arrived, got.type) == (0, 12.5, "frame")
    with raises("message_too_big"):
        life.receive_bytes(bytes(8 + 2 * N + 1), 0.0)
    with raises("bad_frame", "not allowed"):
        life.receive_bytes(room(0), 0.0)  # a bridge sends only kind 2
    assert life.receive_text('{"type":"text","seq":3,"text":"hi"}').text == "hi"
    assert life.receive_text('{"type":"stats","data":{"a":1}}').data == {"a": 1}
    with pytest.raises(RemoteError) as info:
        life.receive_text('{"type":"error","code":"model_oom","message":"gone"}')
    assert (info.value.code, info.value.remote_code) == ("bridge_error", "model_oom")


def test_server_lockstep_episode_with_context_frames():
    life = server(accepts_context=True)
    text = life.start_episode(EpisodeStart.model_validate_json(start(context=1, episode="a1")), now=5.0)
    assert json.loads(text) == {"type": "episode.start", "episode_id": "a1", "clock": "lockstep",
                                "sample_rate": 24000, "frame_samples": N, "max_inflight": 1, "context_frames": 1}
    assert life.may_send_room and life.all_answered
    assert life.send_context(0, None) == bytes([1, 3, 1, 0, 0, 0, 0, 0])
    assert life.send_room(0, None) == bytes([1, 1, 1, 0, 0, 0, 0, 0])
    assert not life.may_send_room and not life.all_answered  # §7.1: frame 0 is answered before frame 1
    with pytest.raises(MPEError, match="out of turn"):
        life.send_room(1, None)
    life.receive_answer(0)
    assert life.may_send_room and life.all_answered
    assert len(life.send_room(1, np.ones(N, np.int16))) == 8 + 2 * N
    with raises("bad_seq", "expected assistant frame seq 1, got 2"):
        life.receive_answer(2)
    with raises("bad_seq", "expected assistant frame seq 1, got 0"):
        life.receive_answer(0)
    life.receive_answer(1)
    with raises("bad_seq", "expected assistant frame seq 2, got 2"):
        life.receive_answer(2)  # an answer to a room frame not sent
    assert life.episode_end("completed") == '{"type":"episode.end","episode_id":"a1","reason":"completed"}'
    life.end_episode(9.0)
    assert life.phase is Phase.IDLE and life.episode is None


def test_server_lockstep_max_inflight():
    life = server()
    life.start_episode(EpisodeStart.model_validate_json(start(inflight=3)), now=0.0)
    for seq in range(3):
        assert life.may_send_room
        life.send_room(seq, None)
    assert not life.may_send_room
    life.receive_answer(0)
    assert life.may_send_room


def test_server_orders_its_own_frames():
    """The server's own sends follow the rules too (§5.1, §7): a slip is an internal error, never sent."""
    life = server(accepts_context=True)
    life.start_episode(EpisodeStart.model_validate_json(start("realtime", context=1)), now=0.0)
    with pytest.raises(MPEError, match="out of turn") as info:
        life.send_room(0, None)  # slot 0 needs its context frame first
    assert info.value.code == "internal"
    life.send_context(0, None)
    with pytest.raises(MPEError, match="out of turn"):
        life.send_context(0, None)
    life.send_room(0, None)
    with pytest.raises(MPEError, match="out of turn"):
        life.send_context(1, None)  # past context_frames
    with pytest.raises(MPEError, match="out of turn"):
        life.send_room(2, None)  # a gap
    for seq in (1, 2, 3):  # realtime: never waits for answers
        life.send_room(seq, None)
    assert not life.ends_tail(2) and life.ends_tail(3) and life.ends_tail(4)  # §7.2: the answer to frame 3 ends it

    with pytest.raises(MPEError, match="did not accept"):
        server().start_episode(EpisodeStart.model_validate_json(start(context=2)), now=0.0)
    busy = server()
    busy.start_episode(EpisodeStart.model_validate_json(start()), now=0.0)
    with pytest.raises(MPEError, match="outside the idle state"):
        busy.start_episode(EpisodeStart.model_validate_json(start(episode="e2")), now=0.0)
    with pytest.raises(MPEError):
        ServerLifecycle().start_episode(EpisodeStart.model_validate_json(start()), now=0.0)  # no hello


def test_server_late_answers_of_the_previous_episode_are_passed_over():
    """protocol.md §7.2 on literal arrival times: audio that arrived while no episode ran is a late
    answer to the last one within LATE_ANSWERS_S of its end, passed over, even once the next episode
    has begun; later, or with no episode before, ``unexpected_message``. A frame that arrived after
    ``episode.start`` belongs to that episode."""

    def frame(seq: int, at: float) -> AssistantFrame:
        return ServerLifecycle.welcomed(hello()).receive_bytes(answer(seq), at)

    fresh = server()
    with raises("unexpected_message", "outside an episode"):
        fresh.passed_over(frame(0, 100.0))  # no episode before on this connection

    life = server()
    life.start_episode(EpisodeStart.model_validate_json(start()), now=100.0)
    assert life.passed_over(frame(0, 100.0)) is False  # its own
    life.end_episode(110.0)
    late = frame(250, 110.5)  # on its way when the episode ended
    life.start_episode(EpisodeStart.model_validate_json(start(episode="e2")), now=111.0)
    assert life.passed_over(late) is True
    assert life.passed_over(frame(0, 111.2)) is False
    life.end_episode(120.0)
    assert life.passed_over(frame(7, 120.0 + LATE_ANSWERS_S - 0.01)) is True  # still late, while idle
    with raises("unexpected_message", "outside an episode"):
        life.passed_over(frame(8, 120.0 + LATE_ANSWERS_S + 0.01))  # too late to be one


# --- both sides against each other ---------------------------------------------------------------


@pytest.mark.parametrize("clock", ["lockstep", "realtime"])
def test_both_sides_play_an_episode(clock):
    """What one side sends, the other takes: hello to episode.end, with two context frames."""
    bridge, srv = BridgeLifecycle(hello(accepts_context=True)), ServerLifecycle()
    got = srv.receive_hello(bridge.send_hello())
    assert bridge.receive_text(srv.welcome("b1")) == Welcomed("b1")
    ev = bridge.receive_text(srv.start_episode(EpisodeStart(
        episode_id="x", clock=clock, sample_rate=got.sample_rate, frame_samples=N, context_frames=2), now=1.0))
    assert isinstance(ev, EpisodeStarted)
    answers = []
    for seq in range(5):
        assert srv.may_send_room or clock == "realtime"
        if seq < 2:
            assert bridge.receive_bytes(srv.send_context(seq, np.full(N, seq + 1, np.int16))).kind == KIND_CONTEXT
        f = bridge.receive_bytes(srv.send_room(seq, None))
        inbound = srv.receive_bytes(bridge.send_answer(f.seq, np.full(N, 9, np.int16)), 1.0 + seq * 0.08)
        assert not srv.passed_over(inbound)
        if clock == "lockstep":
            srv.receive_answer(inbound.frame.seq)
        answers.append((inbound.frame.seq, int(inbound.frame.pcm[0])))
    assert answers == [(s, 9) for s in range(5)]
    assert srv.ends_tail(4) and (srv.all_answered or clock == "realtime")
    assert isinstance(bridge.receive_text(srv.episode_end("completed")), EpisodeEnded)
    srv.end_episode(2.0)
    assert bridge.phase is Phase.IDLE and srv.phase is Phase.IDLE
