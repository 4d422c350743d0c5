"""Recording one attempt (DESIGN §8): buffer events, the frame log and both tracks, and write
them in small units of work while the episode runs, so a crash loses at most a flush interval."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from server.core.audio import encode_flac
from server.core.events import Event
from server.core.timebase import Segment
from server.db import AudioChunk, Database, EventRow, FrameRow, SegmentRow


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

    def add_events(self, events: Iterable[Event]) -> None:
        self.events.extend({"attempt_id": self.attempt_id, **e.to_json()} for e in events)

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

    def _write(self, events, frames, chunks, segments: Iterable[Segment] | None = None, detector: str = "") -> None:
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

    async def flush(self, segments: Iterable[Segment] | None = None, detector: str = "") -> None:
        events, frames, chunks = self._take()
        if events or frames or chunks or segments:
            await asyncio.to_thread(self._write, events, frames, chunks, segments, detector)


