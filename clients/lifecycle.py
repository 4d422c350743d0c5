"""The lifecycle of wire protocol v1 as two pure state machines, one per side (DESIGN §4, §11).

Sans-I/O, as python-websockets and h11 do it: nothing here reads a socket or a clock. The
asyncio layers feed what arrived (with the time it arrived, where a rule needs it), act on what
comes back, and send the text or bytes the machine returns; a broken rule raises the error of
:mod:`clients.errors` whose code says which (so close codes stay mapped in one place).

- :class:`BridgeLifecycle`, the bridge's side (the SDK, ``clients/sdk.py``): ``hello`` first,
  ``welcome`` (or ``error``) before anything else; room frames only inside an episode, with
  consecutive seq from 0, each context frame right before the room frame of its seq in slots
  ``0 … context_frames − 1`` (docs/protocol.md §5.1); lockstep: one answer per room frame, with
  its seq, in order (§7.1); realtime: strictly increasing seq (§7.2).
- :class:`ServerLifecycle`, the server's side of one connection (``server/engine/bridge_ws.py``,
  ``server/engine/session.py``): the ``hello`` checked (§3 rule 1) and answered with ``welcome``;
  then per episode ``episode.start``, room frames in order (context before its room frame), the
  lockstep ``max_inflight`` rule, answers with the seq due, ``episode.end``; audio that arrived while
  no episode ran is a late answer to the last one within :data:`LATE_ANSWERS_S` of its end, passed
  over, and ``unexpected_message`` otherwise (§7.2). Where a realtime answer sits on the timeline
  is the server's slot placement (``server/core/slots.py``), not this module's.

Per frame both machines do a few integer comparisons and create nothing: the frames they hand
back are the codec's own :class:`~clients.codec.Frame` (kind room or context on the bridge's side)
and the server's :class:`AssistantFrame`, which the server's reader made anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from clients.codec import (
    KIND_ASSISTANT,
    KIND_CONTEXT,
    KIND_ROOM,
    PROTOCOL_VERSION,
    Frame,
    decode_frame,
    encode_frame,
    frame_samples,
    max_binary_size,
)
from clients.errors import MPEError, ProtocolError, RemoteError
from clients.messages import (
    MAX_TEXT_MESSAGE,
    EpisodeEnd,
    EpisodeStart,
    Error,
    Hello,
    Stats,
    Status,
    Text,
    Welcome,
    parse_bridge_message,
    parse_server_message,
)

#: audio frames this soon (seconds) after an episode ended are late answers to it, passed over (§7.2)
LATE_ANSWERS_S = 2.0
#: realtime: after the last room frame the server passes over late answers until the answer to it
#: arrives or the bridge has been quiet this long (seconds, §7.2)
LATE_QUIET_S = 1.0


class Phase(Enum):
    """Where a connection stands, on either side."""

    HELLO = "hello"  # bridge: hello not sent yet; server: not received yet
    WELCOME = "welcome"  # bridge: hello sent, welcome awaited; server: hello taken, welcome not sent
    IDLE = "idle"  # welcomed, no episode
    EPISODE = "episode"  # between episode.start and episode.end
    CLOSED = "closed"  # an error was sent or received: nothing more goes either way


# --- the bridge's side ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Welcomed:
    """The server accepted the hello."""

    bridge_id: str


@dataclass(frozen=True, slots=True)
class StatusChanged:
    """What work matches the bridge now (docs/protocol.md §4.5)."""

    status: Status


@dataclass(frozen=True, slots=True)
class EpisodeStarted:
    """An episode starts: reset the model to fresh state."""

    start: EpisodeStart


@dataclass(frozen=True, slots=True)
class EpisodeEnded:
    """The episode ended; no room frame of it follows."""

    end: EpisodeEnd


@dataclass(frozen=True, slots=True)
class ErrorReceived:
    """The server sent ``error`` (it closes the connection after it, or refuses it for now)."""

    error: Error


BridgeEvent = Welcomed | StatusChanged | EpisodeStarted | EpisodeEnded | ErrorReceived


class BridgeLifecycle:
    """The bridge's side of one connection. ``send_hello`` first; then feed every text message to
    :meth:`receive_text` (an event, or None for a server message of a type protocol 1 may add and
    this side does not know: skip it, §4) and every binary one to :meth:`receive_bytes` (a room or
    context frame); answer each room frame with the bytes of :meth:`send_answer`."""

    def __init__(self, hello: Hello):
        self.hello = hello
        self.phase = Phase.HELLO
        self.n_samples = frame_samples(hello.sample_rate)
        # the frame kinds the server may send (context only to a bridge that accepts it, §5.1)
        self.kinds = (KIND_ROOM, KIND_CONTEXT) if hello.accepts_context else (KIND_ROOM,)
        self.bridge_id: str | None = None
        self.episode: EpisodeStart | None = None
        self.lockstep = False
        self.max_inflight = 1
        self.context_frames = 0
        self.rooms = 0  # room frames of this episode received: the seq of the next one
        self.answered = 0  # lockstep: answers sent, the seq of the next; realtime: the last seq + 1
        self.context_seq = -1  # the seq of the context frame that waits for its room frame (-1: none)

    def send_hello(self) -> str:
        """The first message of the connection (docs/protocol.md §3 rule 1)."""
        if self.phase is not Phase.HELLO:
            raise ProtocolError("hello was already sent", code="unexpected_message")
        self.phase = Phase.WELCOME
        return self.hello.dumps()

    def receive_text(self, raw: str | bytes) -> BridgeEvent | None:
        """A text message of the server as an event; None for a type this side does not know (§4)."""
        try:
            msg = parse_server_message(raw)
        except ProtocolError as exc:
            if exc.code != "unknown_type":
                raise
            return None
        if isinstance(msg, Error):
            self.phase = Phase.CLOSED
            return ErrorReceived(msg)
        if self.phase is Phase.WELCOME:
            if not isinstance(msg, Welcome):
                raise ProtocolError(f"expected welcome, got {msg.type}", code="unexpected_message")
            self.phase, self.bridge_id = Phase.IDLE, msg.bridge_id
            return Welcomed(msg.bridge_id)
        if self.phase is Phase.HELLO or self.phase is Phase.CLOSED:
            raise ProtocolError(f"{msg.type} {'before hello' if self.phase is Phase.HELLO else 'after an error'}",
                                code="unexpected_message")
        if isinstance(msg, Status):
            return StatusChanged(msg)
        if isinstance(msg, EpisodeStart):
            return EpisodeStarted(self._start(msg))
        if isinstance(msg, EpisodeEnd):
            if self.episode is None or msg.episode_id != self.episode.episode_id:
                raise ProtocolError("episode.end of no episode in progress", code="unexpected_message")
            self.phase, self.episode = Phase.IDLE, None
            return EpisodeEnded(msg)
        raise ProtocolError(f"{msg.type} a second time", code="unexpected_message")  # welcome again

    def _start(self, start: EpisodeStart) -> EpisodeStart:
        if self.phase is Phase.EPISODE:
            raise ProtocolError("episode.start inside an episode", code="unexpected_message")
        hello = self.hello
        if start.clock not in hello.clocks or start.sample_rate != hello.sample_rate \
                or start.frame_samples != self.n_samples or (start.context_frames and not hello.accepts_context):
            raise ProtocolError("episode.start does not match the hello (clock, sample rate or context frames)",
                                code="bad_message")
        self.phase, self.episode = Phase.EPISODE, start
        self.lockstep, self.max_inflight, self.context_frames = start.clock == "lockstep", start.max_inflight, \
            start.context_frames
        self.rooms = self.answered = 0
        self.context_seq = -1
        return start

    def receive_bytes(self, data: bytes) -> Frame:
        """A binary message of the server: a room frame (``KIND_ROOM``) or a context frame
        (``KIND_CONTEXT``, only to a bridge that accepts them), checked against the episode."""
        if self.phase is not Phase.EPISODE:
            if self.phase is Phase.HELLO or self.phase is Phase.WELCOME:
                raise ProtocolError("binary message before welcome", code="unexpected_message")
            decode_frame(data, n_samples=self.n_samples, kind=self.kinds)  # a broken frame says so first
            raise ProtocolError("audio frame outside an episode", code="unexpected_message")
        frame = decode_frame(data, n_samples=self.n_samples, kind=self.kinds)
        seq = frame.seq
        if frame.kind == KIND_CONTEXT:  # §5.1: slots 0 … C−1, each right before its room frame
            if seq != self.rooms or self.context_seq >= 0 or seq >= self.context_frames:
                raise ProtocolError(f"context frame {seq} not right before its room frame", code="unexpected_message")
            self.context_seq = seq
            return frame
        if seq != self.rooms:  # §7: room frames 0, 1, 2, … in order
            raise ProtocolError(f"expected room frame seq {self.rooms}, got {seq}", code="bad_seq")
        if self.context_seq != (seq if seq < self.context_frames else -1):
            raise ProtocolError(f"room frame {seq} without its context frame", code="unexpected_message")
        if self.lockstep and seq - self.answered >= self.max_inflight:  # §7.1
            raise ProtocolError(f"room frame {seq} before the answer to frame {self.answered}",
                                code="unexpected_message")
        self.context_seq = -1
        self.rooms = seq + 1
        return frame

    def send_answer(self, seq: int, pcm: np.ndarray | None) -> bytes:
        """The assistant frame ``seq`` (None or zeros: SILENT). Lockstep: the answer to the oldest
        unanswered room frame, with its seq (§7.1); realtime: seq strictly increasing (§7.2)."""
        if self.phase is not Phase.EPISODE:
            raise ProtocolError("assistant frame outside an episode", code="unexpected_message")
        if self.lockstep:
            if seq != self.answered or seq >= self.rooms:
                raise ProtocolError(f"answer seq {seq}, but the room frame due an answer is {self.answered}",
                                    code="bad_seq")
        elif seq < self.answered:
            raise ProtocolError(f"answer seq {seq} does not increase", code="bad_seq")
        self.answered = seq + 1
        return encode_frame(KIND_ASSISTANT, seq, pcm)

    def send_error(self, exc: MPEError) -> str:
        """The ``error`` that tells the server why the bridge cannot go on (§4.8); nothing follows it."""
        self.phase = Phase.CLOSED
        return Error(code=exc.code[:64], message=str(exc)[:1000]).dumps()


# --- the server's side ------------------------------------------------------------------------


@dataclass(slots=True)
class AssistantFrame:
    """An assistant frame from the bridge and when it arrived (the connection's monotonic clock,
    seconds): what the server's reader queues for the episode."""

    frame: Frame
    arrived: float
    type: str = "frame"


class ServerLifecycle:
    """The server's side of one bridge connection: :meth:`receive_hello` and :meth:`welcome`, then
    :meth:`receive_bytes` / :meth:`receive_text` for what the bridge sends and, per episode,
    :meth:`start_episode`, :meth:`send_context` / :meth:`send_room`, :meth:`receive_answer`
    (lockstep), :meth:`episode_end` and :meth:`end_episode`. Times are the connection's monotonic
    clock, in seconds, given by the caller."""

    def __init__(self) -> None:
        self.phase = Phase.HELLO
        self.hello: Hello | None = None
        self.n_samples = 0
        self.max_binary = 0
        self.episode: EpisodeStart | None = None
        self.lockstep = False
        self.max_inflight = 1
        self.context_frames = 0
        self.room_sent = 0  # room frames of this episode sent: the seq of the next one
        self.answered = 0  # lockstep: answers taken, the seq of the next one due
        self.context_seq = -1  # the context frame sent before its room frame (-1: none)
        self.episode_began: float | None = None  # when the episode in progress began (None: no episode)
        self.episode_ended: float | None = None  # when the last episode on this connection ended

    @classmethod
    def welcomed(cls, hello: Hello) -> ServerLifecycle:
        """The lifecycle of a connection whose ``hello`` was taken and answered."""
        life = cls()
        life._take_hello(hello)
        life.phase = Phase.IDLE
        return life

    def _take_hello(self, hello: Hello) -> None:
        self.hello, self.phase = hello, Phase.WELCOME
        self.n_samples = frame_samples(hello.sample_rate)
        self.max_binary = max_binary_size(hello.sample_rate)

    def receive_hello(self, data: str | bytes) -> Hello:
        """The first message of the bridge (``bytes`` for a binary one), which must be ``hello``
        (docs/protocol.md §3 rule 1)."""
        if self.phase is not Phase.HELLO:
            raise ProtocolError("hello was already received", code="unexpected_message")
        if isinstance(data, bytes):
            raise ProtocolError("binary message before hello", code="binary_before_hello")
        if len(data) > MAX_TEXT_MESSAGE:
            raise ProtocolError("text message too large", code="message_too_big")
        parsed = parse_bridge_message(data)
        if parsed.type != "hello":
            raise ProtocolError(f"expected hello, got {parsed.type}", code="unexpected_message")
        if parsed.protocol != PROTOCOL_VERSION:
            raise ProtocolError(f"protocol {parsed.protocol} is not supported (this server speaks "
                                f"{PROTOCOL_VERSION})", code="unsupported_version")
        self._take_hello(parsed)
        return parsed

    def welcome(self, bridge_id: str) -> str:
        """The answer to the hello."""
        if self.phase is not Phase.WELCOME:
            raise MPEError("welcome without a hello")
        self.phase = Phase.IDLE
        return Welcome(bridge_id=bridge_id).dumps()

    # What the bridge sends after its hello, in the order it arrived (the reader).

    def receive_bytes(self, data: bytes, arrived: float) -> AssistantFrame:
        """A binary message: one assistant frame (kind 2, §5). Whether it belongs to an episode is
        decided when it is taken (:meth:`passed_over`)."""
        if self.phase is Phase.HELLO:
            raise ProtocolError("binary message before hello", code="binary_before_hello")
        if len(data) > self.max_binary:
            raise ProtocolError(f"binary message of {len(data)} bytes exceeds one frame", code="message_too_big")
        return AssistantFrame(decode_frame(data, n_samples=self.n_samples, kind=KIND_ASSISTANT), arrived)

    def receive_text(self, text: str) -> Text | Stats:
        """A text message after the hello: ``text`` or ``stats``; a second ``hello`` is
        ``unexpected_message``, the bridge's ``error`` a :class:`RemoteError` (§4.8)."""
        parsed = parse_bridge_message(text)
        if parsed.type == "hello":
            raise ProtocolError("hello was already received", code="unexpected_message")
        if parsed.type == "error":
            raise RemoteError(f"bridge reported {parsed.code}: {parsed.message}", remote_code=parsed.code)
        return parsed

    def passed_over(self, msg: AssistantFrame) -> bool:
        """True for an audio frame that arrived while no episode was running: a late answer to the
        last one, within LATE_ANSWERS_S of its end (answers on their way when the server ended it,
        e.g. a cancelled run's, or sent before the next ``episode.start``: protocol.md §7.2), to be
        passed over. Any other such frame is ``unexpected_message``; a frame that arrived after the
        episode began is its own (False)."""
        if self.episode_began is not None and msg.arrived >= self.episode_began:
            return False
        if self.episode_ended is None or msg.arrived - self.episode_ended > LATE_ANSWERS_S:
            raise ProtocolError("audio frame outside an episode", code="unexpected_message")
        return True

    # One episode.

    def begin_episode(self, now: float) -> None:
        """An episode begins at ``now``: frames that arrived before are not its own (:meth:`passed_over`)."""
        self.episode_began = now

    def start_episode(self, start: EpisodeStart, now: float) -> str:
        """Begin the episode ``start`` at ``now`` (right before it is sent); returns its text."""
        if self.phase is not Phase.IDLE or self.hello is None:
            raise MPEError("episode.start outside the idle state")
        if start.context_frames and not self.hello.accepts_context:  # §5.1; leasing never lets this happen
            raise MPEError(f"episode {start.episode_id} has context frames, but the bridge did not accept them")
        self.phase, self.episode = Phase.EPISODE, start
        self.lockstep, self.max_inflight, self.context_frames = start.clock == "lockstep", start.max_inflight, \
            start.context_frames
        self.room_sent = self.answered = 0
        self.context_seq = -1
        self.begin_episode(now)
        return start.dumps()

    @property
    def may_send_room(self) -> bool:
        """Lockstep (§7.1): room frame n may go once the answers up to n − max_inflight are in."""
        return self.room_sent - self.answered < self.max_inflight

    @property
    def all_answered(self) -> bool:
        """Lockstep: every room frame sent has its answer."""
        return self.answered == self.room_sent

    def send_context(self, seq: int, pcm: np.ndarray | None) -> bytes:
        """The context frame of slot ``seq`` (§5.1), right before its room frame."""
        if self.phase is not Phase.EPISODE or seq != self.room_sent or seq >= self.context_frames \
                or self.context_seq >= 0:
            raise MPEError(f"context frame {seq} out of turn")
        self.context_seq = seq
        return encode_frame(KIND_CONTEXT, seq, pcm)

    def send_room(self, seq: int, pcm: np.ndarray | None) -> bytes:
        """Room frame ``seq``: the next in order, after its context frame in slots 0 … C−1, and in
        lockstep only while :attr:`may_send_room`."""
        if self.phase is not Phase.EPISODE or seq != self.room_sent \
                or self.context_seq != (seq if seq < self.context_frames else -1) \
                or (self.lockstep and seq - self.answered >= self.max_inflight):
            raise MPEError(f"room frame {seq} out of turn")
        self.context_seq = -1
        self.room_sent = seq + 1
        return encode_frame(KIND_ROOM, seq, pcm)

    def receive_answer(self, seq: int) -> None:
        """Lockstep (§7.1): the answer ``seq`` must be the one due, to a room frame sent (``bad_seq``)."""
        if seq != self.answered or seq >= self.room_sent:
            raise ProtocolError(f"expected assistant frame seq {self.answered}, got {seq}", code="bad_seq")
        self.answered = seq + 1

    def ends_tail(self, seq: int) -> bool:
        """Realtime, after the last room frame (§7.2): the answer ``seq`` is the one to the last room
        frame (or beyond), after which no late answer is waited for."""
        return seq >= self.room_sent - 1

    def episode_end(self, reason: str) -> str:
        """The ``episode.end`` of the episode in progress (``completed`` or ``aborted``, §4.4)."""
        if self.episode is None:
            raise MPEError("episode.end without an episode")
        return EpisodeEnd(episode_id=self.episode.episode_id, reason=reason).dumps()

    def end_episode(self, now: float) -> None:
        """The episode ended at ``now`` (whether or not its ``episode.end`` went out): audio frames
        from now on are late answers to it for LATE_ANSWERS_S, then ``unexpected_message``."""
        if self.phase is Phase.EPISODE:
            self.phase = Phase.IDLE
        self.episode, self.episode_began, self.episode_ended = None, None, now
