"""Recording one attempt (DESIGN §8): buffer events, the frame log and both tracks, and write
them in small units of work while the episode runs, so a crash loses at most a flush interval;
a database that refuses writes for a while loses nothing (server.engine.outage)."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from clients.codec import STREAM_RATE
from server.core.audio import encode_flac
from server.core.events import Event
from server.core.timebase import Segment
from server.db import AudioChunk, Database, EventRow, FrameRow, SegmentRow, insert_rows
from server.engine.outage import UNAVAILABLE, Outage

#: once this much of a track waits to be written, it becomes a chunk whose FLAC is encoded at once, in
#: the background (ENCODER). Lockstep records far faster than real time (a flush every ``flush_s`` of
#: wall time holds minutes of audio): otherwise the attempt's last write would encode a whole flush's
#: audio while the bridge waits for ``episode.end`` (docs/benchmarks.md "Recording").
CHUNK_SAMPLES = 10 * STREAM_RATE
ENCODER = ThreadPoolExecutor(1, thread_name_prefix="mpe-flac")  # one: its CPU is bounded; libsndfile runs without the GIL


@dataclass
class Batch:
    """Rows not yet written: events, the frame log, audio chunks (encoded once), live segments."""

    events: list[dict] = field(default_factory=list)
    frames: list[dict] = field(default_factory=list)
    chunks: list[dict] = field(default_factory=list)
    segments: list[dict] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.events or self.frames or self.chunks or self.segments)


class Flush(enum.Enum):
    """What one flush of the recorder came to."""

    written = "written"
    refused = "refused"  # the database refused it: kept for the next flush
    lease_lost = "lease_lost"  # written, but the renewal in its transaction found the lease gone


def write_batches(s: Session, batches: Sequence[Batch]) -> None:
    """Insert ``batches`` in ``s``'s transaction, each table's rows of all of them in one
    statement. Audio is encoded here (or was, in the background: :data:`CHUNK_SAMPLES`), once: a
    refused batch keeps its FLAC."""
    for b in batches:
        for c in b.chunks:
            if "pcm" in c:
                encoding = c.get("encoding")
                c["codec"], c["data"] = "flac", encode_flac(c["pcm"]) if encoding is None else encoding.result()
                del c["pcm"]
                c.pop("encoding", None)
    for table, rows in ((EventRow, [r for b in batches for r in b.events]),
                        (FrameRow, [r for b in batches for r in b.frames]),
                        (AudioChunk, [r for b in batches for r in b.chunks]),
                        (SegmentRow, [r for b in batches for r in b.segments])):
        insert_rows(s, table, rows)


@dataclass
class Recorder:
    """Buffers everything of one attempt and writes it in small units of work (§8). What the
    database refuses stays buffered, in order, for the next flush (server.engine.outage)."""

    db: Database
    attempt_id: str
    outage: Outage
    events: list[dict] = field(default_factory=list)
    frames: list[dict] = field(default_factory=list)
    audio: dict[str, list[np.ndarray]] = field(default_factory=lambda: {"room": [], "assistant": []})
    waiting: dict[str, int] = field(default_factory=lambda: {"room": 0, "assistant": 0})  # samples in ``audio``
    cut: list[dict] = field(default_factory=list)  # chunks of CHUNK_SAMPLES, encoding, not yet taken
    written: dict[str, int] = field(default_factory=lambda: {"room": 0, "assistant": 0})
    chunk_idx: dict[str, int] = field(default_factory=lambda: {"room": 0, "assistant": 0})
    stats: dict[str, Any] = field(default_factory=dict)
    pending: Batch = field(default_factory=Batch)

    def add_events(self, events: Iterable[Event]) -> None:
        self.events.extend({"attempt_id": self.attempt_id, **e.to_json()} for e in events)

    def add_frame(self, direction: str, seq: int, slot: int, pcm: np.ndarray | None, *,
                  sent_us: int | None = None, arrived_us: int | None = None) -> None:
        silent = pcm is None or not pcm.any()
        self.frames.append({"attempt_id": self.attempt_id, "direction": direction, "seq": seq, "slot": slot,
                            "sent_us": sent_us, "arrived_us": arrived_us, "silent": silent})

    def add_audio(self, track: str, pcm: np.ndarray) -> None:
        self.audio[track].append(pcm)
        self.waiting[track] += len(pcm)
        if self.waiting[track] >= CHUNK_SAMPLES:
            chunk = self._chunk(track)
            chunk["encoding"] = ENCODER.submit(encode_flac, chunk["pcm"])
            self.cut.append(chunk)

    def _chunk(self, track: str) -> dict:
        """The track's waiting audio as the next chunk's row (its PCM not yet encoded)."""
        pcm = np.concatenate(self.audio[track])
        self.audio[track], self.waiting[track] = [], 0
        row = {"attempt_id": self.attempt_id, "track": track, "idx": self.chunk_idx[track],
               "start_sample": self.written[track], "n_samples": len(pcm), "pcm": pcm}
        self.chunk_idx[track] += 1
        self.written[track] += len(pcm)
        return row

    def _take(self, segments: Iterable[Segment] | None, detector: str) -> Batch:
        """Move what was added since the last flush behind what is still pending."""
        b = self.pending
        b.events.extend(self.events)
        b.frames.extend(self.frames)
        self.events, self.frames = [], []
        b.chunks.extend(self.cut)
        self.cut = []
        for track in [t for t, parts in self.audio.items() if parts]:  # _chunk empties self.audio[track]
            b.chunks.append(self._chunk(track))
        b.segments.extend({"attempt_id": self.attempt_id, "source": "live", "start": g.start, "end": g.end,
                           "detector": detector} for g in segments or ())
        return b

    def _write(self, b: Batch) -> None:
        with self.db.session() as s:
            write_batches(s, [b])

    async def flush(self, write: Callable[[Batch], Awaitable[bool]]) -> Flush:
        """Write what is buffered through ``write`` (the process's flush group: with the lease's
        renewal, in one transaction with other attempts' flushes; server.engine.flush_group).
        ``refused`` when the database refused it (kept for the next flush; StorageFailed once the
        outage has lasted the attempt's patience); ``lease_lost`` when it was written but the
        renewal found the lease gone."""
        b = self._take(None, "")
        try:
            renewed = await write(b)
        except UNAVAILABLE as exc:
            self.outage.refuse(exc)
            return Flush.refused
        self.pending = Batch()
        self.outage.ended()
        return Flush.written if renewed else Flush.lease_lost

    async def close(self, segments: Iterable[Segment] | None = None, detector: str = "") -> None:
        """The last write of the attempt: tried again until the database takes it or patience is spent."""
        b = self._take(segments, detector)
        if b:
            await self.outage.write(self._write, b)
            self.pending = Batch()
