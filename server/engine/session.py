"""One episode attempt: the asyncio shells around the pure episode core.

The core (:class:`server.core.episode.EpisodeCore`) never reads a clock or a socket (§11).
The shells move frames between the core and a bridge connection: lockstep (wait for the
bridge, max_inflight honoured) or realtime (absolute monotonic deadlines, assistant frames
placed at their arrival slot) (§4). In an episode with assistant-context frames (teacher
forcing, docs/protocol.md §5.1) each of the first slots sends its context frame right before its
room frame; the core puts that audio, not the bridge's answer, on the assistant track. The wire
protocol's rules (room frames in order, context before its room frame, lockstep ``max_inflight`` and
the seq due) are the connection's :class:`clients.lifecycle.ServerLifecycle`, which also gives the
bytes and text to send; realtime slot placement is :class:`server.core.slots.SlotPlacer`'s.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np
from starlette.websockets import WebSocketDisconnect

from clients.codec import STREAM_RATE, frame_samples
from clients.errors import MPEError, ProtocolError
from clients.lifecycle import LATE_QUIET_S, AssistantFrame, ServerLifecycle
from clients.messages import MAX_STATS_BYTES, MAX_TEXT_BYTES, MAX_TEXT_MESSAGES, EpisodeStart, Reference, Stats, Text
from server.core.audio import FrameResampler
from server.core.detector import DETECTOR_VERSION, ModelSteps
from server.core.episode import FRAME, EpisodeCore, FedSlot
from server.core.events import TEXT, Event
from server.core.impairment import ImpairedArrivals
from server.core.phases import FramePhases
from server.core.slots import SlotPlacer, SlotStats
from server.db import Database
from server.engine.detection import DETECTION, ON_LOOP, Detection
from server.engine.flush_group import FlushGroup
from server.engine.leasing import Lease, finish_attempt
from server.engine.outage import Outage, StorageFailed
from server.engine.recorder import Flush, Recorder
from server.settings import Settings


class AttemptAborted(MPEError):
    """The attempt ended early (lease lost, run cancelled, server shutting down)."""

    code = "aborted"


class SideDataBudget:
    """What one attempt stores of the bridge's ``text`` and ``stats`` messages is bounded
    (docs/protocol.md §11): at most MAX_TEXT_MESSAGES texts of MAX_TEXT_BYTES in all, and stats that,
    merged, take at most MAX_STATS_BYTES as compact JSON (a key sent again replaces its old value,
    and its size). A message that would go over is not stored: ``too_much_data``, fatal."""

    def __init__(self) -> None:
        self.texts = self.text_bytes = self.stats_bytes = 0
        self.stats_sizes: dict[str, int] = {}  # per key: the size of ``"key":value,`` in the merged JSON

    def take_text(self, text: str) -> None:
        n = len(text.encode("utf-8"))
        if self.texts >= MAX_TEXT_MESSAGES:
            raise ProtocolError(f"more than {MAX_TEXT_MESSAGES} text messages in one episode", code="too_much_data")
        if self.text_bytes + n > MAX_TEXT_BYTES:
            raise ProtocolError(f"the text messages of one episode exceed {MAX_TEXT_BYTES} bytes", code="too_much_data")
        self.texts, self.text_bytes = self.texts + 1, self.text_bytes + n

    def take_stats(self, data: dict[str, Any]) -> None:
        sizes = {k: len(json.dumps({k: v}, ensure_ascii=False, separators=(",", ":")).encode("utf-8")) - 1
                 for k, v in data.items()}
        total = self.stats_bytes + sum(n - self.stats_sizes.get(k, 0) for k, n in sizes.items())
        if total > MAX_STATS_BYTES:
            raise ProtocolError(f"the stats of one episode exceed {MAX_STATS_BYTES} bytes (merged, as JSON)",
                                code="too_much_data")
        self.stats_sizes.update(sizes)
        self.stats_bytes = total


ROOM_LATE_PERIODS = 1  # realtime: a room frame sent this many frame periods or more after its deadline is late


@dataclass(slots=True)
class RoomPacing:
    """Realtime: how late the room frames went out against their deadlines (docs/protocol.md §8).

    A room frame sent a whole frame period (``ROOM_LATE_PERIODS``) or more after its deadline
    was held up by the server (its event loop stalled): the bridge heard it late, so its answers
    are placed that many slots late for the rest of the episode. Such an attempt is marked
    (``stats.server.room_late``), never stored as if its timing were clean. Pure: times are passed in.
    """

    period: float  # seconds per frame
    late_frames: int = 0  # room frames sent ROOM_LATE_PERIODS or more after their deadline
    max_lateness_s: float = 0.0  # the largest delay of a room frame behind its deadline

    def sent(self, deadline: float, at: float) -> None:
        """Room frame due at ``deadline`` went out at ``at`` (the same clock)."""
        late = max(0.0, at - deadline)
        self.max_lateness_s = max(self.max_lateness_s, late)
        if late >= ROOM_LATE_PERIODS * self.period:
            self.late_frames += 1

    @property
    def late(self) -> bool:
        """Whether any room frame went out late beyond the bound."""
        return self.late_frames > 0

    def to_json(self) -> dict[str, int | float | bool]:
        return {"room_late": self.late, "room_late_frames": self.late_frames,
                "max_room_lateness_ms": round(self.max_lateness_s * 1000, 1)}


@dataclass(frozen=True)
class RoomTiming:
    """What an attempt's stats say of its room frames' timing (RoomPacing, as stored)."""

    late: bool
    late_frames: int
    max_lateness_ms: float

    @classmethod
    def of(cls, stats: Mapping[str, Any] | None) -> "RoomTiming | None":
        """From an attempt's ``stats`` (None: not recorded — a lockstep attempt, or an older one)."""
        server = (stats or {}).get("server")
        if not isinstance(server, Mapping) or not isinstance(server.get("room_late"), bool):
            return None
        return cls(server["room_late"], int(server.get("room_late_frames") or 0),
                   float(server.get("max_room_lateness_ms") or 0.0))


class Hearing:
    """Whether the bridge has heard the episode (docs/protocol.md §8): whether it was sent room
    audio with sound in it after the first stretch of sound and a silent frame behind it — for the
    built-in benchmarks, past the preamble or the first utterance. From then on an attempt is a
    start even if the bridge never answered: it counts as one of the episode's attempts, and as a
    failure if the bridge leaves, so that no bridge hears an episode for free, again and again.
    Benchmark-neutral (it looks only at the room frames sent) and pure: frames are passed in."""

    def __init__(self) -> None:
        self.sounded = False  # a room frame with sound went out
        self.paused = False  # then a silent one
        self.heard = False  # then one with sound again

    def sent(self, pcm: np.ndarray) -> None:
        """A room frame went out to the bridge."""
        if self.heard:
            return
        loud = bool(pcm.any())
        if loud and self.paused:
            self.heard = True
        elif loud:
            self.sounded = True
        elif self.sounded:
            self.paused = True


class Disconnected(Exception):
    """The bridge closed its WebSocket (a departure, not a failure of the server)."""


def attempt_error(err: BaseException) -> tuple[str, str]:
    """The code and message a failed attempt is stored with: an MPEError's own (the bridge's code
    when it reported the error, e.g. endpoint_rate_limited); ``disconnected`` when the bridge left;
    anything else is the server's fault, ``internal``, with the exception's text, so that it is never
    blamed on the bridge and can be told apart without the server's log."""
    if isinstance(err, MPEError):
        return getattr(err, "remote_code", None) or err.code, str(err)
    if isinstance(err, (Disconnected, WebSocketDisconnect, ConnectionError)):
        return "disconnected", "the bridge closed the connection"
    if not isinstance(err, Exception):  # cancelled: the server's task was stopped (a shutdown)
        return "disconnected", type(err).__name__
    return "internal", f"{type(err).__name__}: {err}"


class Connection(Protocol):
    """What a session needs from a bridge connection (see server.engine.bridge_ws)."""

    bridge_rate: int
    reference: bool  # an admin bridge that asked (hello.wants_reference): episode.start carries the reference
    accepts_context: bool  # hello.accepts_context: only then may an episode have context frames
    protocol: ServerLifecycle  # the connection's protocol state: the episode's rules (clients.lifecycle)

    async def send_text(self, text: str) -> None: ...
    async def send_bytes(self, data: bytes) -> None: ...
    # raises on error; late answers to an earlier episode are passed over (ServerLifecycle.passed_over)
    async def next_inbound(self, timeout: float | None) -> AssistantFrame | Text | Stats | None: ...
    def clock(self) -> float: ...


class EpisodeObserver(Protocol):
    """Optional live view of an attempt (server.engine.live). Calls never wait and never raise;
    the episode's timing must not depend on who watches."""

    def room(self, seq: int, pcm: np.ndarray, events: tuple[Event, ...], status: Callable[[], dict]) -> None: ...
    def assistant(self, slot: int, pcm: np.ndarray) -> None: ...
    def events(self, events: list[Event]) -> None: ...
    def end(self, reason: str) -> None: ...


class EpisodeSession:
    """One attempt at an episode over a bridge connection (§4): drives the episode core on the
    lease's clock (lockstep or realtime), records both tracks and the events, renews the
    lease, and finishes the attempt (aborted when the lease is lost or the run cancelled)."""

    slots: SlotPlacer | None = None  # realtime only: set when the episode starts (§4)
    pacing: RoomPacing | None = None  # realtime only: how late the room frames went out

    def __init__(self, db: Database, conn: Connection, lease: Lease, flushes: FlushGroup, phases: FramePhases,
                 settings: Settings, core: EpisodeCore, observer: EpisodeObserver | None = None):
        self.db, self.conn, self.lease, self.flushes, self.settings = db, conn, lease, flushes, settings
        self.wire = conn.protocol  # the wire protocol's rules (sans I/O): this class moves frames and keeps time
        self.phases = phases
        self.phase: float | None = None  # realtime: the phase of the frame period this attempt holds
        self.observer = observer
        self.core = core
        self.rec = Recorder(db, lease.attempt_id, Outage(settings.storage_patience_s, conn.clock))
        rate = conn.bridge_rate
        self.bridge_frame = frame_samples(rate)
        self.to_bridge = FrameResampler(STREAM_RATE, rate, self.bridge_frame)
        self.context_to_bridge = FrameResampler(STREAM_RATE, rate, self.bridge_frame)  # its own stream, as the room's
        self.from_bridge = FrameResampler(rate, STREAM_RATE, FRAME)
        self.t0 = 0.0
        self.last_flush = 0.0
        self.room_sent = 0
        self.flushing: asyncio.Task | None = None
        self.detecting: asyncio.Future | None = None  # the core's detector work in flight
        self.later: ModelSteps[None] | None = None  # lockstep: the last slot's deferred detector work (DESIGN §5)
        self.frames_in = 0  # assistant frames received
        self.hearing = Hearing()  # past the first stretch of room sound the attempt counts (§8)
        # realtime: the run's network impairment, drawn the same way in every attempt
        self.impaired = None if lease.impair is None or lease.clock != "realtime" else \
            ImpairedArrivals(lease.impair, f"{lease.scenario_id}:{lease.condition}")
        self.context_replies_nonsilent = 0  # bridge frames with sound in teacher-forced slots (ignored there)
        self.side = SideDataBudget()  # §11: the bridge's text and stats this attempt stores are bounded

    def _us(self, t: float) -> int:
        return int(round((t - self.t0) * 1e6))

    async def run(self) -> None:
        lease = self.lease
        ref = None
        if self.conn.reference:  # only admin bridges that asked ever learn what they are playing
            ref = Reference(scenario_id=lease.scenario_id, condition=lease.condition)
        # §4: the duty as text only when the run asked for a text prompt (the lease carries it)
        start = EpisodeStart(episode_id=lease.attempt_id, clock=lease.clock, sample_rate=self.conn.bridge_rate,
                             frame_samples=self.bridge_frame, max_inflight=lease.max_inflight, reference=ref,
                             instructions=lease.instructions, context_frames=self.core.context_frames,
                             context_turns=list(self.core.context_turns))
        ok, reason, err = False, "error", None
        try:
            if lease.clock == "realtime":  # deadlines apart from the process's other sessions'
                delay, self.phase = self.phases.reserve(self.conn.clock())
                await asyncio.sleep(delay)
            await self.conn.send_text(self.wire.start_episode(start, self.conn.clock()))
            self.t0 = self.last_flush = self.conn.clock()
            if lease.clock == "lockstep":
                await self._lockstep()
            else:
                await self._realtime()
            ok, reason = True, "completed"
        except (AttemptAborted, StorageFailed) as exc:  # the bridge stays; the episode is retried
            reason, err = "aborted", exc
        except BaseException as exc:
            err = exc
            raise
        finally:
            await self._close(ok, reason, err)

    async def _close(self, ok: bool, reason: str, err: BaseException | None) -> None:
        if self.phase is not None:
            self.phases.release(self.phase)
        if self.flushing is not None:
            self.flushes.hurry()  # its group need not wait for others any longer
            try:
                await self.flushing
            except Exception as exc:
                ok, err = False, err or exc
                reason = "aborted" if isinstance(exc, (AttemptAborted, StorageFailed)) else "error"
        if self.detecting is not None:  # interrupted while the detector had the core: let it finish first
            await asyncio.wait([self.detecting])
        self.core.finish()
        self.rec.stats["server"] = (self.slots.stats if self.slots is not None else SlotStats()).to_json()
        if self.pacing is not None:  # realtime: room frames the server itself sent late are never hidden
            self.rec.stats["server"] |= self.pacing.to_json()
        if self.impaired is not None:  # what the run's network impairment did to this attempt
            self.rec.stats["server"]["impairment"] = self.impaired.stats()
        if self.core.context_frames:  # §5.1: the teacher-forced slots, and how often the bridge spoke in them
            self.rec.stats["server"] |= {"context_frames": self.core.context_frames,
                                         "context_replies_nonsilent": self.context_replies_nonsilent}
        self.rec.stats["detector"] = DETECTOR_VERSION  # scoring reuses the live segments of this version (§5)
        end = self.core.scheduler.end_sample
        try:
            await self.rec.close(segments=self.core.detector.segments if ok else None, detector=DETECTOR_VERSION)
        except StorageFailed as exc:  # what was refused is lost with the attempt, which is retried
            ok, reason, err = False, "aborted", err or exc
            self.rec.outage.ended()  # closing the attempt gets patience of its own
        finally:
            code, message = (None, None) if ok else attempt_error(err)
            if self.rec.outage.refused:  # writes the database refused and this attempt wrote again later
                self.rec.stats["server"]["storage_refused"] = self.rec.outage.refused
            try:
                await self.rec.outage.write(finish_attempt, self.db, self.lease, ok=ok, end_sample=end,
                                            n_frames=self.room_sent, error_code=code, error_message=message,
                                            stats=self.rec.stats,
                                            # "unstarted": a silent departure (no error of the bridge's
                                            # own) before it answered or heard past the first sound
                                            answered=self.frames_in > 0 or self.hearing.heard
                                            or isinstance(err, MPEError))
            finally:
                if self.observer is not None:
                    self.observer.end(reason)
        if ok or reason == "aborted":
            try:
                await self.conn.send_text(self.wire.episode_end(reason))
            except Exception:
                pass

    async def _flush_and_renew(self) -> None:
        write = functools.partial(self.flushes.write, lease=self.lease)
        if await self.rec.flush(write) is Flush.lease_lost:  # refused: kept, tried again next time
            raise AttemptAborted("lease lost or run cancelled")

    async def _maybe_flush(self) -> None:
        """§8: write what we have about once per flush_s, in the background so that the
        database never delays a frame; one flush at a time, in order."""
        if self.flushing is not None and self.flushing.done():
            self.flushing, done = None, self.flushing
            done.result()  # surfaces a lost lease or a database error
        t = self.conn.clock()
        if self.flushing is None and t - self.last_flush >= self.settings.flush_s:
            self.last_flush = t
            self.flushing = asyncio.create_task(self._flush_and_renew())

    async def _send_room(self, deadline: float | None = None) -> bool:
        item = self.core.next_room()
        if item is None:
            return False
        seq, pcm, events, context = item
        self.rec.add_events(events)
        if context is not None:  # §5.1: the context frame of slot seq goes right before its room frame
            await self.conn.send_bytes(self.wire.send_context(seq, self.context_to_bridge(context)))
        await self.conn.send_bytes(self.wire.send_room(seq, self.to_bridge(pcm)))
        sent = self.conn.clock()
        if self.pacing is not None and deadline is not None:
            self.pacing.sent(deadline, sent)
        self.rec.add_frame("room", seq, seq, pcm, sent_us=self._us(sent))
        self.rec.add_audio("room", pcm)
        self.hearing.sent(pcm)
        self.room_sent += 1
        if self.observer is not None:
            self.observer.room(seq, pcm, events, self.core.scheduler.status)
        return True

    async def _take_assistant(self, slot: int, seq: int | None, pcm: np.ndarray | None,
                              arrived: float | None, by: float | None = None) -> None:
        """Feed timeline slot ``slot``: the frame ``seq`` placed there, or silence (``pcm`` None), for
        the core to decide on by ``by`` (the connection's clock; None: now). In a teacher-forced slot
        the core takes the context audio instead (§5.1), and that is recorded. The detector's model
        calls are batched with the other sessions' (server.engine.detection); in lockstep those that
        can change no decision are left for after the next room frame (``self.later``, DESIGN §5)."""
        self.frames_in += pcm is not None
        pcm24 = self.from_bridge(pcm if pcm is not None else np.zeros(self.bridge_frame, np.int16))
        wait_s = 0.0 if by is None else by - self.conn.clock()
        await self._heard()
        defer = self.lease.clock == "lockstep"
        self.detecting = self._detection.run(self.core.feed_assistant_calls(pcm24, defer=defer), wait_s)
        fed = await self._heard()
        self.later = fed.later
        if fed.forced and pcm is not None and pcm.any():
            self.context_replies_nonsilent += 1
        self.rec.add_audio("assistant", fed.pcm)
        if self.observer is not None:
            self.observer.assistant(slot, fed.pcm)
        if pcm is not None:
            self.rec.add_frame("assistant", seq, slot, pcm24, arrived_us=None if arrived is None else self._us(arrived))

    @property
    def _detection(self) -> Detection:
        return DETECTION if self.settings.detector_worker else ON_LOOP

    async def _heard(self) -> FedSlot | None:
        """Wait for the core's detector work in flight, if any: a slot's feed (its FedSlot) or a
        slot's deferred work (None)."""
        if self.detecting is None:
            return None
        out = await asyncio.shield(self.detecting)  # cancelled, the core is still busy: _close waits
        self.detecting = None
        return out

    def _hear_later(self) -> None:
        """Lockstep: start the last slot's deferred detector work (FedSlot.later), now that the room
        frame it did not hold back is out; the next slot waits for it (_heard)."""
        if self.later is not None:
            self.detecting, self.later = self._detection.run(self.later), None

    def _on_side_message(self, msg: Text | Stats) -> None:
        if msg.type == "text":
            self.side.take_text(msg.text)
            ev = Event(t=msg.seq * FRAME, type=TEXT, data={"seq": msg.seq, "text": msg.text})
            self.rec.add_events([ev])
            if self.observer is not None:
                self.observer.events([ev])
        elif msg.type == "stats":
            self.side.take_stats(msg.data)
            self.rec.stats.update(msg.data)

    async def _lockstep(self) -> None:
        """§4 lockstep: room frame n goes out only once assistant frames up to n - max_inflight are in
        (the rule and the seq due are the lifecycle's: ServerLifecycle.may_send_room, receive_answer)."""
        wire = self.wire
        ended = False
        while True:
            while not ended and wire.may_send_room:
                ended = not await self._send_room()
            self._hear_later()  # while the bridge works on its answer
            if ended and wire.all_answered:
                break
            msg = await self.conn.next_inbound(self.settings.lockstep_timeout_s)
            if msg is None:
                raise ProtocolError(f"no assistant frame within {self.settings.lockstep_timeout_s:g} s", code="timeout")
            if msg.type != "frame":
                self._on_side_message(msg)
                continue
            frame = msg.frame
            wire.receive_answer(frame.seq)  # bad_seq unless it is the answer due
            await self._take_assistant(frame.seq, frame.seq, frame.pcm, msg.arrived)
            await self._maybe_flush()
        await self._heard()

    async def _realtime(self) -> None:
        """§4 realtime: room frame n at t0 + n·80 ms on absolute deadlines; never wait for the bridge.

        Where each assistant frame goes, and which arrivals are ``bad_seq``, is the pure
        :class:`server.core.slots.SlotPlacer`'s business; this loop only keeps time.
        """
        slots = self.slots = SlotPlacer(self.t0, FRAME / STREAM_RATE, self.settings.realtime_grace_frames)
        self.pacing = RoomPacing(FRAME / STREAM_RATE)
        clock = self.conn.clock
        n = 0
        total = None
        while True:
            deadline = slots.start(n)  # absolute: no cumulative drift
            # Drain inbound messages until the deadline.
            while True:
                timeout = deadline - clock()
                if timeout <= 0:
                    msg = await self.conn.next_inbound(0)
                else:
                    msg = await self.conn.next_inbound(timeout)
                if msg is None:
                    break
                if msg.type != "frame":
                    self._on_side_message(msg)
                    continue
                arrived = msg.arrived if self.impaired is None else self.impaired(msg.arrived)
                slot = slots.arrive(msg.frame.seq, msg.frame.pcm, arrived, self.room_sent)
                if slot < self.room_sent:
                    # Its room frame is out and later arrivals only go after it: the slots up to
                    # this one are final, so feed them now, to be decided on by the deadline (the
                    # detector batches them with other sessions' meanwhile). The core sees the same
                    # slots in the same order, each after its room frame and before the next.
                    for f in slots.due(slot + 1):
                        await self._take_assistant(f.slot, f.seq, f.pcm, f.arrived, by=deadline)
                # One frame's work per loop turn: a session working off a backlog (its queue
                # never empty, the detector on the loop) must not hold every other session's
                # deadline for the whole backlog.
                await asyncio.sleep(0)
            # Slots before n are in the past: feed them (silence where nothing arrived); the
            # timeline closes at the last room frame (§4: frames placed after it are discarded).
            for f in slots.due(n if total is None else min(n, total)):
                await self._take_assistant(f.slot, f.seq, f.pcm, f.arrived)
            if total is not None and n >= total:
                break
            if not await self._send_room(deadline):
                total = self.room_sent
                if n >= total:
                    continue
            n += 1
            await self._maybe_flush()
        await self._drain_late_answers()

    async def _drain_late_answers(self) -> None:
        """Realtime: a slow bridge still answers the last room frames after the episode ended.

        Those answers are discarded (the timeline is closed) until the answer to the last
        frame arrives (ServerLifecycle.ends_tail) or the bridge stays quiet for LATE_QUIET_S.
        """
        while True:
            msg = await self.conn.next_inbound(LATE_QUIET_S)
            if msg is None or (msg.type == "frame" and self.wire.ends_tail(msg.frame.seq)):
                return
            if msg.type != "frame":
                self._on_side_message(msg)  # late stats and text still count
