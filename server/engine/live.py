"""Live listening hub: fans an episode's audio, events and scheduler state out to listeners.

The episode session publishes through an :class:`EpisodeChannel` (its observer) with plain
synchronous calls that never wait and never raise. Every listener owns bounded queues:

* audio: the newest ``audio_max`` frames; when full the oldest frame is dropped (counted);
* JSON (events, text): at most ``json_max`` messages; overflowing disconnects the listener;
* scheduler status: the latest value only (a slow listener simply skips states).

So a slow or vanished listener costs the episode one deque append per message and nothing
else: the model's timing comes first. The WebSocket side lives in ``server.api.listen``.

Listener messages: binary frames use the wire v1 header (kind 1 = room, 2 = assistant; the
seq is the timeline slot; SILENT for zeros) and JSON text messages have a ``type``:
``hello``, ``event``, ``status``, ``timeline``, ``levels``, ``end`` (see docs/api.md). What a
listener reads of the clips and the windows comes from the episode's benchmark
(``Benchmark.clip_texts``, ``Benchmark.timeline``): this module knows no benchmark.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections import deque
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

import numpy as np
from pydantic import BaseModel

from clients.codec import FRAME_SAMPLES, KIND_ASSISTANT, KIND_ROOM, STREAM_RATE, encode_frame
from server.core.benchmark import NO_CLIP_TEXTS, Benchmark, ClipTexts, OpenSpan
from server.core.events import Event
from server.engine.disclosure import PublicEvents, public_event, public_status
from server.engine.registry import benchmark_of_suite

log = logging.getLogger("mpe.live")

FRAME = FRAME_SAMPLES
AUDIO_MAX = 128  # frames per listener (room + assistant): about 5 s of audio
JSON_MAX = 2048  # queued JSON messages per listener before it is cut off
STATUS_EVERY = 3  # frames between scheduler status updates (240 ms of stream time)
LEVEL_FLOOR_DB = -60.0
#: the status line of a listener who may not see the script
WITHHELD_STATUS = "Playing (the scheduler's state is part of the script, withheld until the run ends)"


class ListenerOverflow(Exception):
    """A listener fell so far behind that its JSON queue overflowed."""


def _dumps(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"))


def levels(pcm: np.ndarray) -> list[int]:
    """The loudness of every whole frame of a track as 0..100 (RMS in dBFS mapped from -60..0 dB; 0 for
    digital silence)."""
    n = len(pcm) // FRAME
    frames = pcm[: n * FRAME].reshape(n, FRAME).astype(np.float64)
    rms = np.sqrt(np.mean(np.square(frames), axis=1)) / 32768.0
    db = 20.0 * np.log10(np.maximum(rms, 1e-9))
    out = np.round(100 * np.clip((db - LEVEL_FLOOR_DB) / -LEVEL_FLOOR_DB, 0.0, 1.0)).astype(int)
    out[~frames.any(axis=1)] = 0
    return out.tolist()


def event_message(t: int, type_: str, data: dict, texts: ClipTexts,
                  public: PublicEvents | None = None) -> str | None:
    """A listener's ``event`` message; the events that name a clip carry its text (the benchmark's
    :class:`ClipTexts`). For a listener who may not see the script (``public``: the benchmark's
    public events) only the public part of the event, without texts; None when none of it is public."""
    if public is not None:
        data = public_event(public, type_, data)
        if data is None:
            return None
    else:
        data = dict(data)
        if (text := texts.text_of(type_, data)) is not None:
            data["text"] = text
    return _dumps({"type": "event", "t": t, "t_s": round(t / STREAM_RATE, 3), "event": type_, "data": data})


def detector_segments(events: Iterable[tuple[int, str, dict]]) -> list[OpenSpan]:
    """The detector's segments as its ``vad.onset`` / ``vad.offset`` events tell them so far (the
    last one open while speech runs)."""
    out: list[OpenSpan] = []
    for _, type_, data in events:
        if type_ == "vad.onset" and "at" in data:
            out.append((int(data["at"]), None))
        elif type_ == "vad.offset" and "at" in data and out and out[-1][1] is None:
            out[-1] = (out[-1][0], int(data["at"]))
    return out


def timeline_message(bench: Benchmark, events: list[tuple[int, str, dict]], head: int,
                     scenario: BaseModel | None = None, public: PublicEvents | None = None) -> str:
    """A listener's ``timeline`` message: the benchmark's windows of a running attempt, from its
    events and detector events so far (open windows run to ``head``; nothing is scored yet), its room
    lane, and its script table from ``scenario`` (its snapshot; None: no script table). For a
    listener who may not see the script (``public``: the benchmark's public events) all of it comes
    from the public events alone, as the episode's document shows it to them."""
    if public is not None:  # what the listener may see: the public events, no script
        events = [(t, type_, d) for t, type_, data in events if (d := public_event(public, type_, data)) is not None]
        scenario = None
    head = max([head, *(t for t, _, _ in events)])
    end = next((t for t, type_, _ in reversed(events) if type_ == "episode.end"), None)
    tl = bench.shown_timeline([Event(t, type_, data) for t, type_, data in events], detector_segments(events),
                              head=head, end=end, entry=None, outcome=None, scenario=scenario)
    return _dumps({"type": "timeline", "t": head, "t_s": round(head / STREAM_RATE, 3), **tl.model_dump(mode="json")})


def _safe(method: Callable) -> Callable:
    """Observer calls come from the episode: a listener problem must never reach it."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception:  # pragma: no cover - defensive
            log.exception("live channel %s: %s failed", getattr(self, "episode_id", "?"), method.__name__)

    return wrapper


class _Levels:
    """The :func:`levels` history of one track, for listeners who join late, computed in blocks (when
    one fills or a listener joins): one frame's level alone costs the episode more than a block's
    does per frame."""

    BLOCK = 64

    def __init__(self) -> None:
        self.done: list[int] = []
        self.pending: list[np.ndarray] = []

    def add(self, pcm: np.ndarray) -> None:
        self.pending.append(pcm)
        if len(self.pending) >= self.BLOCK:
            self.all()

    def all(self) -> list[int]:
        if self.pending:
            self.done += levels(np.concatenate(self.pending))
            self.pending = []
        return self.done


class Listener:
    """One listener's bounded queues; the sender task drains them with :meth:`next_batch`."""

    def __init__(self, *, audio_max: int = AUDIO_MAX, json_max: int = JSON_MAX, public: PublicEvents | None = None):
        self.audio_max, self.json_max = audio_max, json_max
        self.public = public  # None: sees the script; else only these events (server.engine.disclosure)
        self.audio: deque[bytes] = deque()
        self.json: deque[str] = deque()
        self.status: str | None = None
        self.timeline: str | None = None
        self.final: str | None = None
        self.wake = asyncio.Event()
        self.dropped = 0  # audio frames dropped because this listener was slow
        self.sent = 0
        self.overflowed = False
        self.max_backlog = 0
        self.channel: EpisodeChannel | None = None  # set when attached

    # publisher side: synchronous, O(1), never waits

    def push_audio(self, data: bytes) -> None:
        if len(self.audio) >= self.audio_max:
            self.audio.popleft()
            self.dropped += 1
        self.audio.append(data)
        self.max_backlog = max(self.max_backlog, len(self.audio))
        self.wake.set()

    def push_json(self, text: str) -> None:
        if len(self.json) >= self.json_max:
            self.overflowed = True
        else:
            self.json.append(text)
        self.wake.set()

    def set_status(self, text: str) -> None:
        self.status = text
        self.wake.set()

    def set_timeline(self, text: str) -> None:
        self.timeline = text
        self.wake.set()

    def finish(self, text: str) -> None:
        self.final = text
        self.wake.set()

    # sender side

    async def next_batch(self) -> list[str | bytes] | None:
        """Everything queued (JSON first, then status and timeline, then audio); the final message after
        all else; None once that was delivered. Raises ListenerOverflow when cut off."""
        while True:
            if self.overflowed:
                raise ListenerOverflow()
            batch: list[str | bytes] = []
            while self.json:
                batch.append(self.json.popleft())
            if self.status is not None:
                batch.append(self.status)
                self.status = None
            if self.timeline is not None:
                batch.append(self.timeline)
                self.timeline = None
            while self.audio:
                batch.append(self.audio.popleft())
            if batch:
                self.sent += len(batch)
                return batch
            if self.final is not None:
                final, self.final = self.final, ""
                return [final] if final else None
            self.wake.clear()
            await self.wake.wait()


class EpisodeChannel:
    """The live side of one running attempt; implements the session's observer hooks."""

    def __init__(self, hub: "LiveHub", *, episode_id: str, attempt_id: str, run_id: str, clock: str,
                 texts: ClipTexts = NO_CLIP_TEXTS, benchmark: Benchmark | None = None,
                 scenario: BaseModel | None = None):
        self.hub = hub
        self.episode_id, self.attempt_id, self.run_id, self.clock = episode_id, attempt_id, run_id, clock
        self.texts = texts
        self.benchmark = benchmark  # None: no timeline messages
        self.scenario = scenario  # the script: the timeline's script table and the status in words
        self._timeline_at: int | None = None  # events + head of the last timeline message (None: none yet)
        self.listeners: set[Listener] = set()
        self.raw: list[tuple[int, str, dict]] = []  # every event so far, for late joiners
        self.history: list[str] = []  # ... as the listeners who see the script get them
        self._levels = {"room": _Levels(), "assistant": _Levels()}
        self._status: Callable[[], dict] | None = None  # the scheduler's status, once a room frame went out
        self.t = 0  # stream samples published so far (room)
        self.ended: str | None = None

    # --- listeners ----------------------------------------------------------------------

    def attach(self, listener: Listener) -> None:
        """Add a listener and queue what it needs to catch up (events and level history)."""
        listener.channel = self
        listener.push_json(_dumps({"type": "hello", "live": True, "episode_id": self.episode_id,
                                   "attempt_id": self.attempt_id, "run_id": self.run_id, "clock": self.clock,
                                   "sample_rate": STREAM_RATE, "frame_samples": FRAME, "t": self.t}))
        listener.push_json(_dumps({"type": "levels", "room": self._levels["room"].all(),
                                   "assistant": self._levels["assistant"].all()}))
        if listener.public is None:
            for text in self.history:
                listener.push_json(text)
        else:
            for t, type_, data in self.raw:
                if (text := event_message(t, type_, data, NO_CLIP_TEXTS, listener.public)) is not None:
                    listener.push_json(text)
        if self._status is not None:  # where the episode is now
            full, public = self._status_messages()
            listener.set_status(full if listener.public is None else public)
        if self.benchmark is not None and self.raw:
            listener.set_timeline(timeline_message(self.benchmark, self.raw, self.t, self.scenario, listener.public))
        if self.ended is not None:
            listener.finish(self.ended)
        else:
            self.listeners.add(listener)

    def detach(self, listener: Listener) -> None:
        self.listeners.discard(listener)

    # --- observer hooks (called by the episode session) ---------------------------------

    @_safe
    def room(self, seq: int, pcm: np.ndarray, events: Iterable[Any], status: Callable[[], dict]) -> None:
        """Room frame ``seq`` went out; ``events`` were decided while planning it."""
        self.t = (seq + 1) * FRAME
        self._levels["room"].add(pcm)
        for e in events:
            self._event(e.t, e.type, e.data)
        # §3 state for people: sent on a change of phase and every few frames otherwise; built only
        # when someone listens (a listener who joins gets it then: attach)
        self._status = status
        if self.listeners and (events or seq % STATUS_EVERY == 0):
            full, public = self._status_messages()
            for lst in self.listeners:
                lst.set_status(full if lst.public is None else public)
            self._send_timeline()
        if self.listeners:
            data = encode_frame(KIND_ROOM, seq, pcm)
            for lst in self.listeners:
                lst.push_audio(data)

    def _status_messages(self) -> tuple[str, str]:
        """The ``status`` message as of the last room frame: for listeners who see everything, and
        without the scheduler's state (disclosure)."""
        state = {"type": "status", "t": self.t, "t_s": round(self.t / STREAM_RATE, 3), **self._status()}
        full = dict(state)
        if self.benchmark is not None:
            full["text"] = self.benchmark.status_text(state, self.scenario)
        return _dumps(full), _dumps({**public_status(state), "text": WITHHELD_STATUS})

    @_safe
    def assistant(self, slot: int, pcm: np.ndarray) -> None:
        """The assistant audio placed at timeline ``slot`` (24 kHz, after resampling)."""
        self._levels["assistant"].add(pcm)
        if self.listeners:
            data = encode_frame(KIND_ASSISTANT, slot, pcm)
            for lst in self.listeners:
                lst.push_audio(data)

    @_safe
    def events(self, events: Iterable[Any]) -> None:
        for e in events:
            self._event(e.t, e.type, e.data)

    def _send_timeline(self) -> None:
        """The windows as of the last room frame, to every listener as they may see it (only when
        an event came or the stream moved on since the last message: built only while they listen)."""
        if self.benchmark is None:
            return
        mark = len(self.raw) * (1 << 40) + self.t
        if not self.listeners or mark == self._timeline_at:
            return
        self._timeline_at = mark
        texts: dict[int, str] = {}  # by the identity of what the listener may see (None: everything)
        for lst in self.listeners:
            key = id(lst.public)
            if key not in texts:
                texts[key] = timeline_message(self.benchmark, self.raw, self.t, self.scenario, lst.public)
            lst.set_timeline(texts[key])

    @_safe
    def end(self, reason: str) -> None:
        if self.ended is not None:  # idempotent: the session ends it, the shell makes sure
            return
        self._send_timeline()
        self.ended = _dumps({"type": "end", "reason": reason, "t": self.t})
        for lst in self.listeners:
            lst.finish(self.ended)
        self.listeners.clear()
        self.hub._remove(self)

    def _event(self, t: int, type_: str, data: dict) -> None:
        text = event_message(t, type_, data, self.texts)
        self.raw.append((t, type_, data))
        self.history.append(text)
        for lst in self.listeners:
            if lst.public is None:
                lst.push_json(text)
            elif (public := event_message(t, type_, data, NO_CLIP_TEXTS, lst.public)) is not None:
                lst.push_json(public)


class LiveHub:
    """Channels of the attempts running in this server process, by episode id."""

    def __init__(self, *, audio_max: int = AUDIO_MAX, json_max: int = JSON_MAX):
        self.audio_max, self.json_max = audio_max, json_max
        self.channels: dict[str, EpisodeChannel] = {}
        self.pending: dict[str, set[Listener]] = {}  # listeners waiting for an episode to start
        self._changed = asyncio.Event()

    def open(self, *, episode_id: str, attempt_id: str, run_id: str, clock: str,
             texts: ClipTexts = NO_CLIP_TEXTS, benchmark: Benchmark | None = None,
             scenario: BaseModel | None = None) -> EpisodeChannel:
        """A channel for a starting attempt (replaces a stale one of the same episode); ``texts``:
        what its listeners who see the script read of its clips; ``benchmark``: whose windows
        they are sent (None: none); ``scenario``: its snapshot (their script table, the status in words)."""
        old = self.channels.get(episode_id)
        ch = EpisodeChannel(self, episode_id=episode_id, attempt_id=attempt_id, run_id=run_id, clock=clock,
                            texts=texts, benchmark=benchmark, scenario=scenario)
        self.channels[episode_id] = ch
        if old is not None:
            old.end("superseded")
        for lst in self.pending.pop(episode_id, ()):  # waiting listeners hear it from frame 0
            ch.attach(lst)
        self._notify()
        return ch

    @contextmanager
    def attempt(self, lease: Any) -> Iterator[EpisodeChannel]:
        """The channel of one leased attempt (server.engine.leasing.Lease), closed on the way out."""
        bench = benchmark_of_suite(lease.suite_path)
        ch = self.open(episode_id=lease.episode_id, attempt_id=lease.attempt_id, run_id=lease.run_id,
                       clock=lease.clock, texts=bench.clip_texts(lease.scenario), benchmark=bench,
                       scenario=lease.scenario)
        try:
            yield ch
        finally:
            ch.end("error")  # no-op when the session already ended it

    def get(self, episode_id: str) -> EpisodeChannel | None:
        return self.channels.get(episode_id)

    def is_live(self, episode_id: str) -> bool:
        return episode_id in self.channels

    def new_listener(self, public: PublicEvents | None = None) -> Listener:
        """A listener who sees the script (``public`` None) or only the public events."""
        return Listener(audio_max=self.audio_max, json_max=self.json_max, public=public)

    def expect(self, episode_id: str, listener: Listener) -> None:
        """Attach ``listener`` the moment an attempt of this episode opens here."""
        self.pending.setdefault(episode_id, set()).add(listener)

    def unexpect(self, episode_id: str, listener: Listener) -> None:
        waiting = self.pending.get(episode_id)
        if waiting is not None:
            waiting.discard(listener)
            if not waiting:
                del self.pending[episode_id]

    async def wait_change(self, timeout: float) -> None:
        """Wait until a channel opens or closes (or ``timeout`` passes)."""
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    def _remove(self, ch: EpisodeChannel) -> None:
        if self.channels.get(ch.episode_id) is ch:
            del self.channels[ch.episode_id]
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()  # wakes every waiter of the old generation
