"""Episode bundles (DESIGN §7): episode.json + room.wav + assistant.wav + frames.csv (+ segments.json),
and the frame log they and the REST API share."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import func, select

from clients.codec import STREAM_RATE
from server.core.audio import decode_audio, write_wav
from server.core.status import EpisodeStatus
from server.db import Attempt, AudioChunk, Database, Episode, EventRow, FrameRow, Run, SegmentRow
from server.db import Suite as SuiteRow
from server.engine.leasing import NotFound

BUNDLE_VERSION = 1
EPISODE_FILE = "episode.json"
FRAMES_FILE = "frames.csv"
Direction = Literal["room", "assistant"]


class EpisodeBundle(BaseModel):
    """A bundle's ``episode.json`` (DESIGN §7), the one model export writes and scoring reads.

    The fields every reader needs are typed here; the rest of the document (run, model, clock,
    settings, live segments, stats, and each benchmark's own part of the scenario snapshot) is kept
    as it was written (``extra="allow"``) and read by whoever owns it. A bundle without
    ``bundle_version`` was written before the field existed: version 1. A newer version than this
    code knows is refused."""

    model_config = ConfigDict(extra="allow")

    bundle_version: int = Field(default=1, ge=1, le=BUNDLE_VERSION,
                                description="the bundle format's version; absent in the first bundles (1)")
    episode_id: str
    attempt_id: str | None = Field(default=None, description="null for a recording made elsewhere")
    benchmark: str | None = Field(default=None, description="the benchmark plug-in; absent: Duplex-MPE (§2)")
    events: list[dict[str, Any]] = Field(description="§3's events: {t, t_s, type, data}, in stream samples")
    turns: list[Any] = Field(description="the script's turns (each benchmark's own form)")

    @field_validator("episode_id", "attempt_id", mode="before")
    @classmethod
    def _id_as_text(cls, v: object) -> object:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v

    def document(self) -> dict[str, Any]:
        """The whole document (what ``episode.json`` holds)."""
        return self.model_dump()

    def write(self, directory: Path) -> Path:
        """Write ``episode.json`` into ``directory``."""
        path = directory / EPISODE_FILE
        path.write_text(json.dumps(self.document(), indent=2))
        return path


@dataclass(frozen=True)
class FrameLogRow:
    """One frame of an attempt's frame log (§8), as the protocol document describes it: room
    frames with the time they were handed to the socket, assistant frames with their arrival
    time and the timeline slot they were placed in (``slot - seq`` is their lateness). Times in
    µs after the episode's t0; ``silent`` is true for a frame of digital silence."""

    direction: Direction
    seq: int
    slot: int
    sent_us: int | None
    arrived_us: int | None
    silent: bool


FRAME_COLUMNS = tuple(f.name for f in fields(FrameLogRow))
FRAME_BATCH = 5000  # rows per query when a whole log is read


def _frame_query(attempt_id: str, direction: Direction | None):
    q = select(FrameRow.direction, FrameRow.seq, FrameRow.slot, FrameRow.sent_us, FrameRow.arrived_us,
               FrameRow.silent).where(FrameRow.attempt_id == attempt_id)
    return q.where(FrameRow.direction == direction) if direction else q


def count_frames(db: Database, attempt_id: str, direction: Direction | None = None) -> int:
    """How many frames the attempt's log holds (of one direction, when given)."""
    with db.session() as s:
        return s.scalar(select(func.count()).select_from(_frame_query(attempt_id, direction).subquery()))


def frame_log(db: Database, attempt_id: str, direction: Direction | None = None, *,
              limit: int | None = None, offset: int = 0) -> list[FrameLogRow]:
    """The attempt's frame log in the order it was written (each direction in seq order)."""
    q = _frame_query(attempt_id, direction).order_by(FrameRow.id).offset(offset)
    if limit is not None:
        q = q.limit(limit)
    with db.session() as s:
        return [FrameLogRow(*r) for r in s.execute(q)]


def iter_frame_log(db: Database, attempt_id: str, direction: Direction | None = None) -> Iterator[FrameLogRow]:
    """The whole frame log, read in batches (one short unit of work each)."""
    offset = 0
    while True:
        rows = frame_log(db, attempt_id, direction, limit=FRAME_BATCH, offset=offset)
        yield from rows
        if len(rows) < FRAME_BATCH:
            return
        offset += len(rows)


def frames_csv(rows: Iterator[FrameLogRow] | list[FrameLogRow], *, header: bool = True) -> Iterator[str]:
    """The frame log as CSV text, a line at a time (§7 ``frames.csv``): the columns of
    :class:`FrameLogRow`, empty for a time that does not apply, ``silent`` as 0/1."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if header:
        w.writerow(FRAME_COLUMNS)
    for r in rows:
        w.writerow(["" if v is None else int(v) if isinstance(v, bool) else v for v in astuple(r)])
        if buf.tell() > 1 << 16:
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue()


def load_track(db: Database, attempt_id: str, track: str) -> np.ndarray:
    """An attempt's ``room`` or ``assistant`` track as recorded (int16 samples at 24 kHz); empty when
    nothing was recorded."""
    with db.session() as s:
        rows = s.execute(
            select(AudioChunk.data, AudioChunk.start_sample)
            .where(AudioChunk.attempt_id == attempt_id, AudioChunk.track == track)
            .order_by(AudioChunk.idx)
        ).all()
    parts = [decode_audio(r.data) for r in rows]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)


def episode_document(db: Database, episode_id: str, attempt_id: str | None = None) -> dict[str, Any]:
    """The ``episode.json`` document of an episode (§7) for ``attempt_id`` (default: the completed
    attempt, else the current one); raises :class:`NotFound` for an unknown episode."""
    with db.session() as s:
        ep = s.get(Episode, episode_id)
        if ep is None:
            raise NotFound("no such episode")
        run = s.get(Run, ep.run_id)
        suite = s.get(SuiteRow, run.suite_id)
        att = s.get(Attempt, attempt_id or ep.completed_attempt_id or ep.current_attempt_id or "")
        events = [] if att is None else [
            {"t": e.t, "t_s": round(e.t / STREAM_RATE, 6), "type": e.type, "data": e.data}
            for e in s.scalars(select(EventRow).where(EventRow.attempt_id == att.id).order_by(EventRow.id))
        ]
        segments = [] if att is None else [
            {"start": g.start, "end": g.end, "detector": g.detector}
            for g in s.scalars(select(SegmentRow).where(SegmentRow.attempt_id == att.id).order_by(SegmentRow.start))
        ]
    sc = ep.scenario
    doc = {
        "bundle_version": BUNDLE_VERSION,
        "episode_id": ep.id,
        "attempt_id": att.id if att else None,
        "attempt": att.number if att else None,
        "status": ep.status,
        "run_id": run.id,
        "team": run.team,
        "benchmark": run.benchmark,
        "scenario_id": ep.scenario_id,
        "pair_id": ep.pair_id,
        "condition": ep.condition,
        "model": {"name": run.model_name, "revision": att.model_revision if att else ""},
        "clock": run.clock,
        "suite": {"name": suite.name, "version": suite.version, "content_hash": suite.content_hash},
        "settings": {"sample_rate": STREAM_RATE, "frame_samples": 1920, "bridge_rate": att.bridge_rate if att else None,
                     "max_inflight": run.max_inflight, "text_prompt": run.text_prompt, "impair": run.impair},
        "gold_answer": sc.get("gold_answer"),
        "answer_keys": sc.get("answer_keys"),
        "attributes": sc.get("attributes", {}),
        "turns": sc.get("turns", []),
        "end_sample": att.end_sample if att else None,
        "events": events,
        "live_segments": segments,
        "stats": att.stats if att else {},
    }
    for k, v in sc.items():  # the rest of the scenario snapshot (e.g. a dialogue and its live round)
        doc.setdefault(k, v)
    return doc


def export_run(db: Database, run_id: str, out: Path, *, progress: Callable[[int, int], None] | None = None) -> list[Path]:
    """Write one bundle per completed episode (partial attempts are never exported as results):
    ``episode.json``, ``room.wav``, ``assistant.wav`` and the frame log ``frames.csv``."""
    with db.session() as s:
        if s.get(Run, run_id) is None:
            raise NotFound(f"no run {run_id}")
        eps = s.execute(
            select(Episode.id, Episode.completed_attempt_id, Episode.scenario_id, Episode.condition)
            .where(Episode.run_id == run_id, Episode.status == EpisodeStatus.completed).order_by(Episode.ordinal)
        ).all()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for i, (eid, aid, scenario_id, condition) in enumerate(eps):
        d = out / f"{scenario_id}-{condition}-{eid}"
        d.mkdir(parents=True, exist_ok=True)
        doc = episode_document(db, eid, aid)
        room, assistant = load_track(db, aid, "room"), load_track(db, aid, "assistant")
        n = max(len(room), len(assistant))  # §7: both tracks the same length
        write_wav(d / "room.wav", np.pad(room, (0, n - len(room))))
        write_wav(d / "assistant.wav", np.pad(assistant, (0, n - len(assistant))))
        EpisodeBundle.model_validate(doc).write(d)
        with open(d / FRAMES_FILE, "w", encoding="utf-8", newline="") as f:
            f.writelines(frames_csv(iter_frame_log(db, aid)))
        written.append(d)
        if progress:
            progress(i + 1, len(eps))
    return written
