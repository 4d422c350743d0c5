"""Storage of scoring work (§8): the transcript and verdict caches and the scoring rows.

Transcripts are cached by the hash of (ASR backend description, audio samples), verdicts by
the hash of (task, judge backend, model, prompt version, inputs); a rescoring with the same
settings finds every result here and makes no new ASR or judge calls. Each unit of work
uses its own short session (§11).
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any, Callable, TypeVar

from pydantic import BaseModel, ValidationError
from sqlalchemy import delete, false, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from server.core.benchmark import ScoreEntry
from server.core.states import advance
from server.core.status import SCORING_TRANSITIONS, ScoringStatus
from server.db import (
    Database,
    EpisodeScoreRow,
    MetricValueRow,
    ScoringRow,
    TranscriptRow,
    VerdictRow,
    advisory_xact_lock,
    utcnow,
)
from server.scoring.asr import ASRBackend, ASRResult, TimedSegment, audio_hash, timed_segments
from server.scoring.errors import BadEntry
from server.scoring.judges import TaskJudge, Verdict

EntryT = TypeVar("EntryT", bound=ScoreEntry)


def transcript_key(asr: ASRBackend, a_hash: str) -> str:
    return hashlib.sha256(f"asr\0{asr.key()}\0{a_hash}".encode()).hexdigest()


class Cache:
    """Transcript and verdict cache. ``db=None`` keeps everything in memory (tests, tools). Safe to
    share between threads (the text reference asks several decisions at once)."""

    def __init__(self, db: Database | None = None):
        self.db = db
        self._mem_t: dict[str, tuple[int, str]] = {}
        self._mem_v: dict[str, tuple[int, Verdict]] = {}
        self._mem_w: dict[str, tuple[int, dict[str, Any]]] = {}  # word-timestamped transcripts' raw
        self.calls = {"asr": 0, "judge": 0, "asr_hits": 0, "judge_hits": 0}
        self._lock = threading.Lock()

    def _count(self, what: str) -> None:
        with self._lock:
            self.calls[what] += 1

    # -- transcripts

    def transcribe(self, asr: ASRBackend, pcm) -> tuple[int, str]:
        """(transcript id, text) of ``pcm`` by ``asr``; cached."""
        a_hash = audio_hash(pcm)
        key = transcript_key(asr, a_hash)
        found = self._get_transcript(key)
        if found is not None:
            self._count("asr_hits")
            return found
        self._count("asr")
        res: ASRResult = asr.transcribe(pcm)
        desc = asr.describe()
        row = dict(content_hash=key, audio_hash=a_hash, backend=str(desc.get("backend", asr.name)),
                   model=str(desc.get("model", ""))[:300], version=str(desc.get("version", ""))[:100], config=desc,
                   n_samples=int(len(pcm)), text=res.text, raw=res.raw)
        return self._put_transcript(key, row)

    def transcribe_words(self, asr: ASRBackend, pcm) -> tuple[int, list[TimedSegment]]:
        """(transcript id, segments with word timestamps) of ``pcm`` by ``asr``; cached under a key of
        its own (a word-timestamped transcript is another transcription of the same audio)."""
        a_hash = audio_hash(pcm)
        key = hashlib.sha256(f"asr-words\0{asr.key()}\0{a_hash}".encode()).hexdigest()
        found = self._get_raw(key)
        if found is not None:
            self._count("asr_hits")
            return found[0], timed_segments(found[1])
        self._count("asr")
        res: ASRResult = asr.transcribe_words(pcm)
        desc = asr.describe()
        row = dict(content_hash=key, audio_hash=a_hash, backend=str(desc.get("backend", asr.name)),
                   model=str(desc.get("model", ""))[:300], version=str(desc.get("version", ""))[:100],
                   config={**desc, "word_timestamps": True}, n_samples=int(len(pcm)), text=res.text, raw=res.raw)
        if self.db is None:
            with self._lock:
                self._mem_w.setdefault(key, (len(self._mem_w) + 1, res.raw))
                tid, raw = self._mem_w[key]
            return tid, timed_segments(raw)
        tid, _ = self._put_transcript(key, row)
        found = self._get_raw(key)
        assert found is not None
        return tid, timed_segments(found[1])

    def _get_raw(self, key: str) -> tuple[int, dict[str, Any]] | None:
        if self.db is None:
            return self._mem_w.get(key)
        with self.db.session() as s:
            r = s.execute(select(TranscriptRow.id, TranscriptRow.raw).where(TranscriptRow.content_hash == key)).first()
        return None if r is None else (r.id, dict(r.raw or {}))

    def _get_transcript(self, key: str) -> tuple[int, str] | None:
        if self.db is None:
            return self._mem_t.get(key)
        with self.db.session() as s:
            r = s.execute(select(TranscriptRow.id, TranscriptRow.text).where(TranscriptRow.content_hash == key)).first()
        return None if r is None else (r.id, r.text)

    def _put_transcript(self, key: str, row: dict[str, Any]) -> tuple[int, str]:
        if self.db is None:
            with self._lock:
                return self._mem_t.setdefault(key, (len(self._mem_t) + 1, row["text"]))
        try:
            with self.db.session() as s:
                obj = TranscriptRow(**row)
                s.add(obj)
                s.flush()
                return obj.id, obj.text
        except IntegrityError:  # another worker stored the same transcript first
            found = self._get_transcript(key)
            assert found is not None
            return found

    # -- verdicts

    def judge(self, judge: TaskJudge, task: str, inputs: BaseModel) -> tuple[int, Verdict]:
        return self.cached(judge.cache_key(task, inputs), lambda: judge.judge(task, inputs), inputs)

    def cached(self, key: str, decide: Callable[[], Verdict], inputs: BaseModel) -> tuple[int, Verdict]:
        """(verdict id, verdict) stored under ``key``, or ``decide()`` stored there first (a judge's
        verdict, or a text reference's decision: both keep their label or null and the raw reply)."""
        found = self._get_verdict(key)
        if found is not None:
            self._count("judge_hits")
            return found
        self._count("judge")
        return self._put_verdict(key, decide(), inputs)

    def _get_verdict(self, key: str) -> tuple[int, Verdict] | None:
        if self.db is None:
            return self._mem_v.get(key)
        with self.db.session() as s:
            r = s.scalar(select(VerdictRow).where(VerdictRow.content_hash == key))
            if r is None:
                return None
            return r.id, Verdict(task=r.task, label=r.label, raw=r.raw_reply, backend=r.backend, model=r.model,
                                 prompt_version=r.prompt_version)

    def _put_verdict(self, key: str, v: Verdict, inputs: BaseModel) -> tuple[int, Verdict]:
        if self.db is None:
            with self._lock:
                return self._mem_v.setdefault(key, (len(self._mem_v) + 1, v))
        try:
            with self.db.session() as s:
                obj = VerdictRow(content_hash=key, task=v.task, backend=v.backend, model=v.model[:200],
                                 prompt_version=v.prompt_version, label=v.label, raw_reply=v.raw,
                                 inputs=inputs.model_dump(mode="json"))
                s.add(obj)
                s.flush()
                return obj.id, v
        except IntegrityError:
            found = self._get_verdict(key)
            assert found is not None
            return found


# --- scorings ----------------------------------------------------------------------------------


def sqlite_write_lock(s: Session) -> None:
    """SQLite: take the database's one write lock now (a no-op UPDATE), so that what ``s`` reads next
    is not changed by another process before it commits. PostgreSQL: nothing (it locks rows)."""
    if s.get_bind().dialect.name == "sqlite":
        s.execute(update(ScoringRow).where(false()).values(status=ScoringRow.status)
                  .execution_options(synchronize_session=False))


def serialise(s: Session, key: str) -> None:
    """Units of work on ``key`` run one at a time until ``s`` commits: PostgreSQL, an advisory lock
    on the key; SQLite, its one write lock."""
    if s.get_bind().dialect.name == "sqlite":
        sqlite_write_lock(s)
    else:
        advisory_xact_lock(s, "mpe-scoring:" + key)


def latest_scoring(s: Session, source_key: str, config_hash: str) -> ScoringRow | None:
    """The latest scoring of this source (a run id, or the bundles' key) with these settings."""
    return s.scalar(select(ScoringRow).where(ScoringRow.source_key == source_key, ScoringRow.config_hash == config_hash)
                    .order_by(ScoringRow.created_at.desc()).limit(1))


def open_scoring(db: Database, *, source_key: str, run_id: str | None, config: dict[str, Any], config_hash: str,
                 n_episodes: int, fresh: bool) -> tuple[str, bool]:
    """The scoring row to work in: the latest one with the same source and settings (resumed),
    or a new one. Returns (scoring id, resumed). Serialised per source and settings, so that two
    scorers started at once on a run share one scoring (a ``fresh`` one starts a new scoring that
    scorers started after it join)."""
    with db.session() as s:
        serialise(s, f"{source_key}:{config_hash}")
        row = None if fresh else latest_scoring(s, source_key, config_hash)
        if row is None:
            row = ScoringRow(run_id=run_id, source_key=source_key, config_hash=config_hash, config=config,
                             status=ScoringStatus.running, n_episodes=n_episodes)
            s.add(row)
            s.flush()
            return row.id, False
        row.status = advance(SCORING_TRANSITIONS, row.status, ScoringStatus.running)
        row.n_episodes, row.finished_at = n_episodes, None
        return row.id, True


def done_episodes(db: Database, scoring_id: str) -> dict[str, str | None]:
    """episode id -> attempt id of the episodes already scored in this scoring."""
    with db.session() as s:
        return dict(s.execute(select(EpisodeScoreRow.episode_id, EpisodeScoreRow.attempt_id)
                              .where(EpisodeScoreRow.scoring_id == scoring_id)).all())


def save_episode(db: Database, scoring_id: str, entry: ScoreEntry) -> None:
    """Store (or replace) one episode's entry. Two scorers racing on the same episode compute
    the same entry from the same caches, so the loser of the race simply keeps the winner's."""
    try:
        with db.session() as s:
            put_entry(s, scoring_id, entry)
    except IntegrityError:
        pass


def put_entry(s: Session, scoring_id: str, entry: ScoreEntry) -> None:
    """Store (or replace) one episode's entry within the unit of work ``s``."""
    s.execute(delete(EpisodeScoreRow).where(EpisodeScoreRow.scoring_id == scoring_id,
                                            EpisodeScoreRow.episode_id == entry.episode_id))
    s.add(EpisodeScoreRow(scoring_id=scoring_id, episode_id=entry.episode_id, attempt_id=entry.attempt_id,
                          data=entry.model_dump(mode="json")))


def parse_entry(model: type[EntryT], data: Any, scoring_id: str, episode_id: str) -> EntryT:
    """A stored entry read back as its benchmark's model (the one place stored JSON is parsed)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BadEntry(f"scoring {scoring_id}: the stored entry of episode {episode_id} is not a valid "
                       f"{model.__name__}: {exc}") from None


def load_entries(db: Database, scoring_id: str, model: type[EntryT],
                 episode_ids: set[str] | None = None) -> list[EntryT]:
    """A scoring's entries in the order they were stored (all, or those of ``episode_ids``)."""
    with db.session() as s:
        rows = s.execute(select(EpisodeScoreRow.episode_id, EpisodeScoreRow.data)
                         .where(EpisodeScoreRow.scoring_id == scoring_id).order_by(EpisodeScoreRow.id)).all()
    return [parse_entry(model, r.data, scoring_id, r.episode_id) for r in rows
            if episode_ids is None or r.episode_id in episode_ids]


def finish_scoring(db: Database, scoring_id: str, results: dict[str, Any] | None, status: ScoringStatus) -> None:
    """Mark a scoring ``status`` with its results (None: no metrics), through its guarded transitions."""
    rows = [] if results is None else [
        {"scoring_id": scoring_id, "model": model, "condition": cond, "quantity": q,
         "num": v["num"], "den": v["den"], "value": v["value"]}
        for model, conds in results["metrics"].items() for cond, qs in conds.items() for q, v in qs.items()]
    with db.session() as s:
        serialise(s, "finish:" + scoring_id)  # several scorers of one scoring may finish it at once
        row = s.get(ScoringRow, scoring_id)
        row.status = advance(SCORING_TRANSITIONS, row.status, status)
        row.results, row.finished_at = results, utcnow()
        s.execute(delete(MetricValueRow).where(MetricValueRow.scoring_id == scoring_id))
        if rows:
            s.execute(MetricValueRow.__table__.insert(), rows)
