"""One episode attempt: a pure core (scheduler + detector + mixer) and its asyncio shells.

The core never reads a clock or a socket (§11). The shells move frames between the core
and a bridge connection: lockstep (wait for the bridge, max_inflight honoured) or realtime
(absolute monotonic deadlines, assistant frames placed at their arrival slot) (§4).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Protocol

import numpy as np

from clients.codec import KIND_ROOM, STREAM_RATE, encode_frame, frame_samples
from clients.errors import MPEError, ProtocolError
from clients.messages import EpisodeEnd, EpisodeStart, Reference
from .audio import FrameResampler, encode_flac
from .db import AudioChunk, Database, EventRow, FrameRow, SegmentRow
from .detector import DETECTOR_VERSION, SpeechDetector
from .runs import Lease, finish_attempt, renew_lease
from .scheduler import EpisodePlan, Event, Scheduler, TurnPlan
from .suite import Suite

FRAME = frame_samples(STREAM_RATE)


class AttemptAborted(MPEError):
    """The attempt ended early (lease lost, run cancelled, server shutting down)."""

    code = "aborted"


# --- the pure core -----------------------------------------------------------------------


@lru_cache(maxsize=8)
def load_suite(path: str) -> Suite:
    return Suite.load(path)


@lru_cache(maxsize=4096)
def load_clip(suite_path: str, rel: str) -> np.ndarray:
    clip = load_suite(suite_path).load_clip(rel)
    clip.setflags(write=False)
    return clip


def build_plan(scenario: dict[str, Any], suite_path: str) -> tuple[EpisodePlan, dict[str | int, np.ndarray]]:
    """Scheduler plan and clip audio for one scenario version (lengths from the audio itself)."""
    suite = load_suite(suite_path)
    clips: dict[str | int, np.ndarray] = {"preamble": load_clip(suite_path, suite.meta.preamble.clip)}
    turns = []
    for turn in scenario["turns"]:
        clips[turn["idx"]] = load_clip(suite_path, turn["clip"])
        turns.append(TurnPlan(idx=turn["idx"], label=turn["label"], n_samples=len(clips[turn["idx"]]),
                              speaker=turn["speaker"]))
    return EpisodePlan(preamble_samples=len(clips["preamble"]), turns=tuple(turns)), clips


class EpisodeCore:
    """Scheduler + causal detector + room mixer for one attempt (pure, stream time only)."""

    def __init__(self, plan: EpisodePlan, clips: dict[str | int, np.ndarray]):
        self.scheduler = Scheduler(plan, frame_samples=FRAME)
        self.detector = SpeechDetector()
        self.clips = clips
        self.assistant_slots = 0  # assistant frames fed to the detector so far

    def next_room(self) -> tuple[int, np.ndarray, tuple[Event, ...]] | None:
        plan = self.scheduler.next_frame()
        if plan is None:
            return None
        pcm = np.zeros(FRAME, dtype=np.int16)
        for p in plan.pieces:
            pcm[p.dst_start : p.dst_start + p.length] = self.clips[p.source][p.src_start : p.src_start + p.length]
        return plan.seq, pcm, plan.events

    def feed_assistant(self, pcm: np.ndarray) -> None:
        """The assistant frame for the next timeline slot (24 kHz) -> detector -> scheduler."""
        events = self.detector.push(pcm)
        self.assistant_slots += 1
        self.scheduler.observe(events, self.detector.known_until)

    def finish(self) -> None:
        self.detector.finish()


# --- recording ---------------------------------------------------------------------------


@dataclass
class Recorder:
    """Buffers everything of one attempt and writes it in small units of work (§8)."""

    db: Database
    attempt_id: str
    events: list[dict] = field(default_factory=list)
    frames: list[dict] = field(default_factory=list)
    audio: dict[str, list[np.ndarray]] = field(default_factory=lambda: {"room": [], "assistant": []})
    written: dict[str, int] = field(default_factory=lambda: {"room": 0, "assistant": 0})
    chunk_idx: dict[str, int] = field(default_factory=lambda: {"room": 0, "assistant": 0})
    stats: dict[str, Any] = field(default_factory=dict)

    def add_events(self, events) -> None:
        self.events.extend({"attempt_id": self.attempt_id, "t": e.t, "type": e.type, "data": e.data} for e in events)

    def add_frame(self, direction: str, seq: int, slot: int, pcm: np.ndarray | None, *,
                  sent_us: int | None = None, arrived_us: int | None = None) -> None:
        silent = pcm is None or not pcm.any()
        self.frames.append({"attempt_id": self.attempt_id, "direction": direction, "seq": seq, "slot": slot,
                            "sent_us": sent_us, "arrived_us": arrived_us, "silent": silent})

    def add_audio(self, track: str, pcm: np.ndarray) -> None:
        self.audio[track].append(pcm)

    def _take(self):
        events, frames = self.events, self.frames
        self.events, self.frames = [], []
        chunks = []
        for track, parts in self.audio.items():
            if parts:
                pcm = np.concatenate(parts)
                self.audio[track] = []
                chunks.append({"attempt_id": self.attempt_id, "track": track, "idx": self.chunk_idx[track],
                               "start_sample": self.written[track], "n_samples": len(pcm), "pcm": pcm})
                self.chunk_idx[track] += 1
                self.written[track] += len(pcm)
        return events, frames, chunks

    def _write(self, events, frames, chunks, segments=None, detector="") -> None:
        rows = [{k: v for k, v in c.items() if k != "pcm"} | {"codec": "flac", "data": encode_flac(c["pcm"])}
                for c in chunks]
        with self.db.session() as s:
            if events:
                s.execute(EventRow.__table__.insert(), events)
            if frames:
                s.execute(FrameRow.__table__.insert(), frames)
            if rows:
                s.execute(AudioChunk.__table__.insert(), rows)
            if segments:
                s.execute(SegmentRow.__table__.insert(), [
                    {"attempt_id": self.attempt_id, "source": "live", "start": g.start, "end": g.end,
                     "detector": detector} for g in segments])

    async def flush(self, segments=None, detector: str = "") -> None:
        events, frames, chunks = self._take()
        if events or frames or chunks or segments:
            await asyncio.to_thread(self._write, events, frames, chunks, segments, detector)


# --- the asyncio shells ------------------------------------------------------------------


class Connection(Protocol):
    """What a session needs from a bridge connection (see server.bridge_ws)."""

    bridge_rate: int
    admin: bool

    async def send_text(self, text: str) -> None: ...
    async def send_bytes(self, data: bytes) -> None: ...
    async def next_inbound(self, timeout: float | None) -> Any: ...  # Frame | Text | Stats, raises on error
    def clock(self) -> float: ...


class EpisodeObserver(Protocol):
    """Optional live view of an attempt (server.live). Calls never wait and never raise;
    the episode's timing must not depend on who watches (issue 5)."""

    def room(self, seq: int, pcm: np.ndarray, events: tuple[Event, ...], status: Callable[[], dict]) -> None: ...
    def assistant(self, slot: int, pcm: np.ndarray) -> None: ...
    def events(self, events: list[Event]) -> None: ...
    def end(self, reason: str) -> None: ...


@dataclass
class SessionConfig:
    lease_s: float = 20.0
    flush_s: float = 1.0
    lockstep_timeout_s: float = 30.0
    realtime_grace_frames: int = 25


class EpisodeSession:
    def __init__(self, db: Database, conn: Connection, lease: Lease, owner: str, config: SessionConfig,
                 observer: EpisodeObserver | None = None):
        self.db, self.conn, self.lease, self.owner, self.config = db, conn, lease, owner, config
        self.observer = observer
        plan, clips = build_plan(lease.scenario, lease.suite_path)
        self.core = EpisodeCore(plan, clips)
        self.rec = Recorder(db, lease.attempt_id)
        rate = conn.bridge_rate
        self.bridge_frame = frame_samples(rate)
        self.to_bridge = FrameResampler(STREAM_RATE, rate, self.bridge_frame)
        self.from_bridge = FrameResampler(rate, STREAM_RATE, FRAME)
        self.t0 = 0.0
        self.last_flush = 0.0
        self.room_sent = 0
        self.flushing: asyncio.Task | None = None
        self.frames_in = 0  # assistant frames received
        self.timing = {"late_frames": 0, "max_lateness_frames": 0, "missing_slots": 0}

    def _us(self, t: float) -> int:
        return int(round((t - self.t0) * 1e6))

    async def run(self) -> None:
        lease = self.lease
        ref = None
        if self.conn.admin:  # only admin bridges ever learn what they are playing
            sc = lease.scenario
            ref = Reference(scenario_id=sc["scenario_id"], condition=sc["condition"])
        start = EpisodeStart(episode_id=lease.attempt_id, clock=lease.clock, sample_rate=self.conn.bridge_rate,
                             frame_samples=self.bridge_frame, max_inflight=lease.max_inflight, reference=ref)
        ok, reason, err = False, "error", None
        try:
            await self.conn.send_text(start.dumps())
            self.t0 = self.last_flush = self.conn.clock()
            if lease.clock == "lockstep":
                await self._lockstep()
            else:
                await self._realtime()
            ok, reason = True, "completed"
        except AttemptAborted as exc:
            reason, err = "aborted", exc
        except BaseException as exc:
            err = exc
            raise
        finally:
            await self._close(ok, reason, err)

    async def _close(self, ok: bool, reason: str, err: BaseException | None) -> None:
        if self.flushing is not None:
            try:
                await self.flushing
            except Exception as exc:
                ok, reason, err = False, "aborted" if isinstance(exc, AttemptAborted) else "error", err or exc
        self.core.finish()
        self.rec.stats["server"] = self.timing
        end = self.core.scheduler.end_sample
        try:
            await self.rec.flush(segments=self.core.detector.segments if ok else None, detector=DETECTOR_VERSION)
        finally:
            # the bridge's own code when it reported the error (e.g. endpoint_rate_limited)
            code = None if ok else (getattr(err, "remote_code", None) or err.code if isinstance(err, MPEError)
                                    else "disconnected")
            message = None if ok else (str(err) if isinstance(err, MPEError) else type(err).__name__)
            try:
                await asyncio.to_thread(finish_attempt, self.db, self.lease, ok=ok, end_sample=end,
                                        n_frames=self.room_sent, error_code=code, error_message=message,
                                        stats=self.rec.stats,
                                        # only a silent departure (no error of the bridge's own) is "unstarted"
                                        answered=self.frames_in > 0 or isinstance(err, MPEError))
            finally:
                if self.observer is not None:
                    self.observer.end(reason)
        if ok or reason == "aborted":
            try:
                await self.conn.send_text(EpisodeEnd(episode_id=self.lease.attempt_id, reason=reason).dumps())
            except Exception:
                pass

    async def _flush_and_renew(self) -> None:
        await self.rec.flush()
        if not await asyncio.to_thread(renew_lease, self.db, self.lease, self.owner, self.config.lease_s):
            raise AttemptAborted("lease lost or run cancelled")

    async def _maybe_flush(self) -> None:
        """§8: write what we have about once per flush_s, in the background so that the
        database never delays a frame; one flush at a time, in order."""
        if self.flushing is not None and self.flushing.done():
            self.flushing, done = None, self.flushing
            done.result()  # surfaces a lost lease or a database error
        t = self.conn.clock()
        if self.flushing is None and t - self.last_flush >= self.config.flush_s:
            self.last_flush = t
            self.flushing = asyncio.create_task(self._flush_and_renew())

    async def _send_room(self) -> bool:
        item = self.core.next_room()
        if item is None:
            return False
        seq, pcm, events = item
        self.rec.add_events(events)
        out = self.to_bridge(pcm)
        await self.conn.send_bytes(encode_frame(KIND_ROOM, seq, out))
        self.rec.add_frame("room", seq, seq, pcm, sent_us=self._us(self.conn.clock()))
        self.rec.add_audio("room", pcm)
        self.room_sent += 1
        if self.observer is not None:
            self.observer.room(seq, pcm, events, self.core.scheduler.status)
        return True

    def _take_assistant(self, slot: int, seq: int, pcm: np.ndarray | None, arrived: float | None) -> None:
        self.frames_in += pcm is not None
        pcm24 = self.from_bridge(pcm if pcm is not None else np.zeros(self.bridge_frame, np.int16))
        self.core.feed_assistant(pcm24)
        self.rec.add_audio("assistant", pcm24)
        if self.observer is not None:
            self.observer.assistant(slot, pcm24)
        if pcm is None:
            self.timing["missing_slots"] += 1
            return
        self.rec.add_frame("assistant", seq, slot, pcm24, arrived_us=None if arrived is None else self._us(arrived))
        if slot > seq:  # realtime: arrival lateness in frames (§4)
            self.timing["late_frames"] += 1
            self.timing["max_lateness_frames"] = max(self.timing["max_lateness_frames"], slot - seq)

    def _on_side_message(self, msg) -> None:
        if msg.type == "text":
            ev = Event(t=msg.seq * FRAME, type="text", data={"seq": msg.seq, "text": msg.text})
            self.rec.add_events([ev])
            if self.observer is not None:
                self.observer.events([ev])
        elif msg.type == "stats":
            self.rec.stats.update(msg.data)

    async def _lockstep(self) -> None:
        """§4 lockstep: room frame n goes out only once assistant frames up to n - max_inflight are in."""
        inflight = self.lease.max_inflight
        next_recv = 0
        ended = False
        while True:
            while not ended and self.room_sent - next_recv < inflight:
                ended = not await self._send_room()
            if ended and next_recv == self.room_sent:
                break
            msg = await self.conn.next_inbound(self.config.lockstep_timeout_s)
            if msg is None:
                raise ProtocolError(f"no assistant frame within {self.config.lockstep_timeout_s:g} s", code="timeout")
            if msg.type != "frame":
                self._on_side_message(msg)
                continue
            frame, arrived = msg.frame, msg.arrived
            if frame.seq != next_recv:
                raise ProtocolError(f"expected assistant frame seq {next_recv}, got {frame.seq}", code="bad_seq")
            self._take_assistant(frame.seq, frame.seq, frame.pcm, arrived)
            next_recv += 1
            await self._maybe_flush()

    async def _realtime(self) -> None:
        """§4 realtime: room frame n at t0 + n·80 ms on absolute deadlines; never wait for the bridge."""
        period = FRAME / STREAM_RATE
        grace = self.config.realtime_grace_frames
        placed: dict[int, tuple[int, np.ndarray, float]] = {}
        last_slot = -1
        last_seq = -1
        clock = self.conn.clock
        n = 0
        total = None
        while True:
            deadline = self.t0 + n * period  # absolute: no cumulative drift
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
                frame, arrived = msg.frame, msg.arrived
                if frame.seq <= last_seq:
                    raise ProtocolError(f"assistant frame seq {frame.seq} not after {last_seq}", code="bad_seq")
                if frame.seq >= self.room_sent + grace:
                    raise ProtocolError(f"assistant frame seq {frame.seq} is ahead of the room stream", code="bad_seq")
                arrival_slot = math.floor((arrived - self.t0) / period)
                slot = max(arrival_slot, last_slot + 1)  # §4: placed at its arrival slot
                if slot - arrival_slot > grace:
                    raise ProtocolError("assistant frames arrive faster than real time", code="bad_seq")
                placed[slot] = (frame.seq, frame.pcm, arrived)
                last_slot, last_seq = slot, frame.seq
            # Slots before n are in the past: feed them (silence where nothing arrived).
            while self.core.assistant_slots < n and (total is None or self.core.assistant_slots < total):
                s = self.core.assistant_slots
                seq, pcm, arrived = placed.pop(s, (None, None, None))
                self._take_assistant(s, seq if seq is not None else -1, pcm, arrived)
            if total is not None and n >= total:
                break
            if not await self._send_room():
                total = self.room_sent
                if n >= total:
                    continue
            n += 1
            await self._maybe_flush()
        await self._drain_late_answers(total)

    async def _drain_late_answers(self, total: int) -> None:
        """Realtime: a slow bridge still answers the last room frames after the episode ended.

        Those answers are discarded (the timeline is closed) until the answer to the last
        frame arrives or the bridge stays quiet for a second.
        """
        while True:
            msg = await self.conn.next_inbound(1.0)
            if msg is None or (msg.type == "frame" and msg.frame.seq >= total - 1):
                return
            if msg.type != "frame":
                self._on_side_message(msg)  # late stats and text still count
