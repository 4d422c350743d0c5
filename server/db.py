"""Storage (DESIGN §8): SQLAlchemy 2 models, engine and migrations.

SQLite by default, PostgreSQL when DATABASE_URL says so. The schema is owned by Alembic
(``migrations/``); :func:`upgrade` brings any database to head before use.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from enum import StrEnum
from pathlib import Path
from typing import Any, Iterator

import psycopg
from psycopg import sql
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    false,
    func,
    select,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker
from sqlalchemy.types import TypeDecorator

from server.core.limits import SlotKind
from server.core.status import AttemptStatus, ClaimStatus, EpisodeStatus, RunStatus, ScoringStatus

# What a database says when it is away or full (its connection refused or reset, the server
# restarting, SQLite's "database or disk is full" or "locked", PostgreSQL's disk_full): worth
# waiting out (server.engine.outage), unlike a violated constraint or a bug.
UNAVAILABLE = (OperationalError, InterfaceError)

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def new_id() -> str:
    return uuid.uuid4().hex[:16]


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class StatusType(TypeDecorator):
    """A status enum stored as its string value (the column stays ``VARCHAR(16)``): rows read
    back as the enum, and a value outside it is refused on write."""

    impl = String(16)
    cache_ok = True

    def __init__(self, enum: type[StrEnum]):
        super().__init__()
        self.enum = enum

    def process_bind_param(self, value: Any, dialect: Any) -> str | None:
        return None if value is None else self.enum(value).value

    def process_result_value(self, value: str | None, dialect: Any) -> StrEnum | None:
        return None if value is None else self.enum(value)


class UtcDateTime(TypeDecorator):
    """A point in time, read back aware in UTC from every database (the column stays
    ``TIMESTAMP WITH TIME ZONE``; SQLite keeps no offset and would give naive datetimes back), so
    every timestamp the server serves carries its offset. A naive value written is taken as UTC."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


#: the largest id an ``Integer`` primary key holds (PostgreSQL's integer; SQLite's go to 2**63 - 1):
#: an id from a request beyond it names nothing, and the database would refuse to compare with it
MAX_INT_ID = 2**31 - 1


class Token(Base):
    __tablename__ = "tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    team: Mapped[str] = mapped_column(String(64), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[str] = mapped_column(String(40), default="bridge,read")  # server.auth.Scope, comma-separated
    label: Mapped[str] = mapped_column(String(200), default="")
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class ServerSecret(Base):
    """A key that signs short-lived URLs (server.api.signed); the newest one is in use."""

    __tablename__ = "server_secrets"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    secret: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class Suite(Base):
    __tablename__ = "suites"
    __table_args__ = (UniqueConstraint("team", "content_hash"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    team: Mapped[str] = mapped_column(String(64), index=True)
    benchmark: Mapped[str] = mapped_column(String(40), server_default="duplex-mpe")
    name: Mapped[str] = mapped_column(String(200))
    version: Mapped[str] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(Text)
    content_hash: Mapped[str] = mapped_column(String(64))
    meta: Mapped[dict[str, Any]] = mapped_column(JSON)
    n_scenarios: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class Run(Base):
    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    team: Mapped[str] = mapped_column(String(64), index=True)
    model_name: Mapped[str] = mapped_column(String(100), index=True)
    benchmark: Mapped[str] = mapped_column(String(40), server_default="duplex-mpe")
    suite_id: Mapped[str] = mapped_column(ForeignKey("suites.id"))
    conditions: Mapped[list[Any]] = mapped_column(JSON)
    clock: Mapped[str] = mapped_column(String(16))
    limit_n: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_inflight: Mapped[int] = mapped_column(Integer, default=1)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    # §4: whether episode.start gives the bridge the benchmark's duty as text (default: no text prompt)
    text_prompt: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # realtime: the network impairment the server applies to the assistant stream (server.core.impairment)
    impair: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # a bridge check's run (server/bridgecheck): leased only to bridges that announce hello.check
    is_check: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    status: Mapped[RunStatus] = mapped_column(StatusType(RunStatus), default=RunStatus.queued, index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)  # why a run failed (e.g. its suite changed)


class Episode(Base):
    __tablename__ = "episodes"
    __table_args__ = (
        UniqueConstraint("run_id", "ordinal"),
        Index("ix_episodes_lease", "status", "lease_expires"),
    )
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    ordinal: Mapped[int] = mapped_column(Integer)
    # the order its run's episodes are leased in (server.engine.leasing.lease_ranks): a secret shuffle
    # of the ordinals, never served, so that the order a bridge is given its episodes in says nothing
    # of their places in the suite
    lease_rank: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    scenario_id: Mapped[str] = mapped_column(String(100))
    pair_id: Mapped[str] = mapped_column(String(100))
    condition: Mapped[str] = mapped_column(String(16))
    scenario: Mapped[dict[str, Any]] = mapped_column(JSON)  # snapshot of the manifest line
    audio_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)  # the clips it was created with
    status: Mapped[EpisodeStatus] = mapped_column(StatusType(EpisodeStatus), default=EpisodeStatus.queued)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(100), nullable=True)
    lease_expires: Mapped[float | None] = mapped_column(Float, nullable=True)  # epoch seconds
    current_attempt_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    completed_attempt_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow, onupdate=utcnow)


class Attempt(Base):
    __tablename__ = "attempts"
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    episode_id: Mapped[str] = mapped_column(ForeignKey("episodes.id"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    bridge_id: Mapped[str] = mapped_column(String(32))
    server_id: Mapped[str] = mapped_column(String(100))
    model_revision: Mapped[str] = mapped_column(String(200), default="")
    clock: Mapped[str] = mapped_column(String(16))
    bridge_rate: Mapped[int] = mapped_column(Integer)
    status: Mapped[AttemptStatus] = mapped_column(StatusType(AttemptStatus), default=AttemptStatus.running)
    error_code: Mapped[str | None] = mapped_column(String(64), nullable=True)
    error_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    end_sample: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    n_frames: Mapped[int] = mapped_column(Integer, default=0)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    stats: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class EventRow(Base):
    __tablename__ = "events"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    attempt_id: Mapped[str] = mapped_column(ForeignKey("attempts.id"), index=True)
    t: Mapped[int] = mapped_column(BigInteger)  # stream samples at 24 kHz
    type: Mapped[str] = mapped_column(String(40))
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class FrameRow(Base):
    """Frame log: one row per frame and direction; times in µs after the episode's t0."""

    __tablename__ = "frames"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    attempt_id: Mapped[str] = mapped_column(ForeignKey("attempts.id"), index=True)
    direction: Mapped[str] = mapped_column(String(10))  # room | assistant
    seq: Mapped[int] = mapped_column(BigInteger)
    slot: Mapped[int] = mapped_column(BigInteger)  # timeline slot the frame occupies
    sent_us: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    arrived_us: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    silent: Mapped[bool] = mapped_column(Boolean, default=False)


class AudioChunk(Base):
    __tablename__ = "audio_chunks"
    __table_args__ = (UniqueConstraint("attempt_id", "track", "idx"),)
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    attempt_id: Mapped[str] = mapped_column(ForeignKey("attempts.id"), index=True)
    track: Mapped[str] = mapped_column(String(10))  # room | assistant
    idx: Mapped[int] = mapped_column(Integer)
    start_sample: Mapped[int] = mapped_column(BigInteger)
    n_samples: Mapped[int] = mapped_column(Integer)
    codec: Mapped[str] = mapped_column(String(10), default="flac")
    data: Mapped[bytes] = mapped_column(LargeBinary)


class SegmentRow(Base):
    __tablename__ = "segments"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    attempt_id: Mapped[str] = mapped_column(ForeignKey("attempts.id"), index=True)
    source: Mapped[str] = mapped_column(String(16), default="live")
    start: Mapped[int] = mapped_column(BigInteger)
    end: Mapped[int] = mapped_column(BigInteger)
    detector: Mapped[str] = mapped_column(String(100))


class BridgeRow(Base):
    __tablename__ = "bridges"
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    team: Mapped[str] = mapped_column(String(64), index=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    model_name: Mapped[str] = mapped_column(String(100))
    model_revision: Mapped[str] = mapped_column(String(200), default="")
    sample_rate: Mapped[int] = mapped_column(Integer)
    clocks: Mapped[list[Any]] = mapped_column(JSON)
    accepts_context: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    is_check: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())  # hello.check
    server_id: Mapped[str] = mapped_column(String(100))
    connected_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    disconnected_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class ConnectionSlot(Base):
    """One open bridge or listen socket of a team, held by the server process ``server_id`` until
    ``expires_at`` (which that process renews while the socket is open): the per-team connection
    limits of every process on one PostgreSQL (server/engine/shared_slots.py). A process that dies
    stops renewing, and its rows stop counting once they expire."""

    __tablename__ = "connection_slots"
    __table_args__ = (Index("ix_connection_slots_team", "team", "kind", "expires_at"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    team: Mapped[str] = mapped_column(String(64))
    kind: Mapped[SlotKind] = mapped_column(StatusType(SlotKind))
    server_id: Mapped[str] = mapped_column(String(100))
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime())


# --- engine, sessions, migrations -------------------------------------------------------


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _ensure_sqlite_dir(url: str) -> None:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)


def make_engine(url: str) -> Engine:
    _ensure_sqlite_dir(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, hide_parameters=True)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # hide_parameters: a failed statement's log line never shows its values (a token hash, say)
    return create_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True, hide_parameters=True)


def insert_rows(s: Session, table: type[Base], rows: Sequence[dict[str, Any]]) -> None:
    """Insert ``rows`` (dicts with the same keys, named after ``table``'s columns) in ``s``'s
    transaction, in their order. On PostgreSQL by ``COPY``: psycopg runs an ``executemany`` as a
    pipeline of one ``INSERT`` per row, some 25 µs of the interpreter a row, which at 64 realtime
    sessions was 15 % of a core beside the event loop (docs/benchmarks.md). Elsewhere, and for a
    table with a binary column (few rows, large values: COPY's text format would escape them to
    twice their size, more work on both sides than it saves), one ``executemany``. A driver error
    is raised as SQLAlchemy's (``UNAVAILABLE`` when the database is away), and each value is
    converted by its column type's own bind processor (JSON, booleans), as for any other statement."""
    if not rows:
        return
    t, dialect = table.__table__, s.get_bind().dialect
    if dialect.name != "postgresql" or any(isinstance(c.type, LargeBinary) for c in t.columns):
        s.execute(t.insert(), rows)
        return
    cols = list(rows[0])
    bind = [t.c[c].type.dialect_impl(dialect).bind_processor(dialect) or (lambda v: v) for c in cols]
    copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(sql.Identifier(t.name),
                                                          sql.SQL(", ").join(map(sql.Identifier, cols)))
    try:
        with s.connection().connection.driver_connection.cursor() as cur, cur.copy(copy_sql) as copy:
            for r in rows:
                copy.write_row([f(r[c]) for c, f in zip(cols, bind)])
    except psycopg.Error as exc:
        raise DBAPIError.instance(f"COPY {t.name}", None, exc, psycopg.Error, hide_parameters=True) from exc


def upgrade(url: str) -> None:
    """`alembic upgrade head` on ``url`` (every command that touches the database calls this)."""
    from alembic import command
    from alembic.config import Config

    _ensure_sqlite_dir(url)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    command.upgrade(cfg, "head")


class Database:
    """An engine plus a session factory; one session per unit of work."""

    def __init__(self, url: str, *, migrate: bool = True):
        self.url = url
        if migrate:
            upgrade(url)
        self.engine = make_engine(url)
        self._factory = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def is_postgres(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._factory() as s:
            try:
                yield s
                s.commit()
            except BaseException:
                s.rollback()
                raise

    def dispose(self) -> None:
        self.engine.dispose()


def now() -> float:
    return time.time()


def advisory_xact_lock(s: Session, key: str) -> None:
    """PostgreSQL: hold the advisory lock of ``key`` until ``s`` commits (units of work on one key
    then run one at a time, in every process on the database). Nothing on SQLite."""
    if s.get_bind().dialect.name == "postgresql":
        s.execute(select(func.pg_advisory_xact_lock(func.hashtext(key))))


# --- scoring (DESIGN §6, §8): transcripts and verdicts cached by content hash ------------------


class TranscriptRow(Base):
    """One ASR transcript, keyed by the hash of (backend settings, audio)."""

    __tablename__ = "transcripts"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    content_hash: Mapped[str] = mapped_column(String(64), unique=True)
    audio_hash: Mapped[str] = mapped_column(String(64), index=True)
    backend: Mapped[str] = mapped_column(String(40))
    model: Mapped[str] = mapped_column(String(300))
    version: Mapped[str] = mapped_column(String(100))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)  # the backend's full description (prompt etc.)
    n_samples: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    raw: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class VerdictRow(Base):
    """One judge verdict, keyed by the hash of (task, backend, model, prompt version, inputs)."""

    __tablename__ = "verdicts"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    content_hash: Mapped[str] = mapped_column(String(64), unique=True)
    task: Mapped[str] = mapped_column(String(16))  # answer silence reference quality instruction safety
    backend: Mapped[str] = mapped_column(String(40))
    model: Mapped[str] = mapped_column(String(200))
    prompt_version: Mapped[str] = mapped_column(String(100))
    label: Mapped[str | None] = mapped_column(String(40), nullable=True)  # None: missing / unparseable
    raw_reply: Mapped[str] = mapped_column(Text)
    inputs: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class ScoringRow(Base):
    """One scoring of a run (or of a set of bundles) with fixed settings; resumable."""

    __tablename__ = "scorings"
    __table_args__ = (Index("ix_scorings_source", "source_key", "config_hash"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    run_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)  # None for bundles
    source_key: Mapped[str] = mapped_column(String(64))  # run id, or hash of the bundles' episode ids
    config_hash: Mapped[str] = mapped_column(String(64))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)  # scoring, detector, ASR and judge versions
    status: Mapped[ScoringStatus] = mapped_column(StatusType(ScoringStatus), default=ScoringStatus.running)
    n_episodes: Mapped[int] = mapped_column(Integer, default=0)
    results: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # metrics + analyses
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class EpisodeScoreRow(Base):
    """One episode's windows, transcripts and verdicts within a scoring (the ``episodes[]`` entry)."""

    __tablename__ = "episode_scores"
    __table_args__ = (UniqueConstraint("scoring_id", "episode_id"),)
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    scoring_id: Mapped[str] = mapped_column(ForeignKey("scorings.id", ondelete="CASCADE"), index=True)
    episode_id: Mapped[str] = mapped_column(String(100), index=True)
    attempt_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class ScoringClaim(Base):
    """One episode's scoring work within a scoring, leased to one scorer at a time (§10): scorers on
    any machine claim pending work with ``SELECT … FOR UPDATE SKIP LOCKED`` and a lease expiry, and
    store the entry in the same transaction that marks the claim done (server/scoring/claims.py)."""

    __tablename__ = "scoring_claims"
    __table_args__ = (Index("ix_scoring_claims_work", "scoring_id", "status", "ordinal"),)
    scoring_id: Mapped[str] = mapped_column(ForeignKey("scorings.id", ondelete="CASCADE"), primary_key=True)
    episode_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    ordinal: Mapped[int] = mapped_column(Integer)  # the order scorers take the work in
    attempt_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    path: Mapped[str | None] = mapped_column(Text, nullable=True)  # a bundle directory; None: from the database
    status: Mapped[ClaimStatus] = mapped_column(StatusType(ClaimStatus), default=ClaimStatus.pending)
    owner: Mapped[str | None] = mapped_column(String(100), nullable=True)  # the scorer holding or last holding it
    lease_expires: Mapped[float | None] = mapped_column(Float, nullable=True)  # epoch seconds
    claims: Mapped[int] = mapped_column(Integer, default=0)  # times claimed: more than one = taken over or retried
    error: Mapped[str | None] = mapped_column(Text, nullable=True)  # why it failed
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow, onupdate=utcnow)


class MetricValueRow(Base):
    """The six run-level quantities of a finished scoring, one row each (§6)."""

    __tablename__ = "metric_values"
    __table_args__ = (UniqueConstraint("scoring_id", "model", "condition", "quantity"),)
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    scoring_id: Mapped[str] = mapped_column(ForeignKey("scorings.id", ondelete="CASCADE"), index=True)
    model: Mapped[str] = mapped_column(String(200))
    condition: Mapped[str] = mapped_column(String(16))
    quantity: Mapped[str] = mapped_column(String(40))
    num: Mapped[int] = mapped_column(Integer)
    den: Mapped[int] = mapped_column(Integer)
    value: Mapped[float | None] = mapped_column(Float, nullable=True)
