"""Request and response models of the REST API (they make the OpenAPI schema)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SerializeAsAny, model_validator

from server.auth import Scope
from server.core.benchmark import (
    Cell,
    Column,
    Label,
    Outcome,  # each benchmark's outcome adds its own fields
    Quantity,
    Timeline,
)
from server.core.impairment import Impairment
from server.core.status import AttemptStatus, EpisodeStatus, RunStatus
from server.engine.registry import PLUGINS, get_benchmark
from server.settings import MAX_INFLIGHT

T = TypeVar("T")
Clock = Literal["lockstep", "realtime"]
RunClock = Literal["lockstep", "realtime", "text"]  # text: a text reference's run (mpe reference), no bridge
#: benchmark -> its run conditions, of every registered benchmark (a request names one of them; the
#: benchmark of its suite or run must know it, checked where that is known)
CONDITIONS: dict[str, tuple[str, ...]] = {name: get_benchmark(name).conditions for name in sorted(PLUGINS)}
KNOWN_CONDITIONS: frozenset[str] = frozenset(c for conds in CONDITIONS.values() for c in conds)
CONDITIONS_TEXT = "; ".join(f"{name}: {', '.join(conds)}" for name, conds in CONDITIONS.items())


def _known_condition(value: str) -> str:
    if value not in KNOWN_CONDITIONS:
        raise ValueError(f"unknown condition {value!r} ({CONDITIONS_TEXT})")
    return value


#: a run condition of a registered benchmark
Condition = Annotated[str, Field(min_length=1, max_length=32, description=f"a run condition ({CONDITIONS_TEXT})"),
                      AfterValidator(_known_condition)]
MODEL_RE = r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$"  # as bridges announce it (wire hello)
TEAM_RE = r"^[a-z0-9][a-z0-9_-]{0,63}$"


class ErrorBody(BaseModel):
    """An error: its stable code and a message."""

    code: str = Field(description="stable error code (unauthorized, forbidden, not_found, bad_request, ...)")
    message: str
    retry_after_s: float | None = Field(default=None, description="rate_limited: seconds until a retry can succeed "
                                                                  "(also the Retry-After header, rounded up)")


class ErrorResponse(BaseModel):
    """The body of every error response."""

    error: ErrorBody


# 403: a token without the route's scope (a bridge-only token on a read route) or a non-admin
# asking for what only an admin may do
ERRORS = {code: {"model": ErrorResponse} for code in (400, 401, 403, 404, 422, 429)}


class PageOf(BaseModel, Generic[T]):
    """One page of a list: its items, how many match the filters, and the paging used."""

    items: list[T]
    total: int = Field(description="items matching the filters")
    limit: int
    offset: int


class Principal(BaseModel):
    """Who a token belongs to: its team, its scopes and whether it is an admin token."""

    team: str
    admin: bool
    scopes: list[Scope] = Field(description="bridge: serve episodes; read: the team's REST API, pages and listen "
                                            "sockets; admin: everything, every team")


# --- runs ---------------------------------------------------------------------------------


class RunCreate(BaseModel):
    """A run to queue: the model, exactly one of `suite_id` and `suite`, and its settings."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=100, pattern=MODEL_RE,
                       description="model name the bridges announce in their hello")
    suite_id: str | None = Field(default=None, max_length=64, description="a suite registered to your team")
    suite: str | None = Field(default=None, min_length=1, max_length=300,
                              description="a suite directory relative to the server's suites root (MPE_SUITES_ROOT)")
    clock: Clock = "lockstep"
    conditions: list[Condition] | None = Field(
        default=None, min_length=1, max_length=2,
        description="the run's conditions (default: every condition of the suite's benchmark; "
                    f"{CONDITIONS_TEXT}). The suite's benchmark must know them.")
    limit: int | None = Field(default=None, ge=1, le=1_000_000,
                              description="only the first N pairs of the suite, as its benchmark counts them "
                                          "(a pair plays in every chosen condition: a scenario's versions, a "
                                          "dialogue)")
    max_attempts: int | None = Field(default=None, ge=1, le=10,
                                     description="attempts per episode (default: the server's MPE_MAX_ATTEMPTS)")
    max_inflight: int | None = Field(default=None, ge=1, le=MAX_INFLIGHT,
                                     description="lockstep: frames in flight (default: the server's MPE_MAX_INFLIGHT)")
    team: str | None = Field(default=None, pattern=TEAM_RE, description="admin only: create the run for this team")
    text_prompt: bool = Field(default=False, description="give the bridges the benchmark's duty as a text prompt "
                                                         "(episode.start instructions); default: audio only, no "
                                                         "text prompt")
    impair: Impairment | None = Field(default=None, description="realtime only: the network the assistant stream "
                                                                "goes through (latency, jitter, loss; "
                                                                "docs/protocol.md \"Network impairment\")")

    @model_validator(mode="after")
    def _one_suite(self) -> "RunCreate":
        if (self.suite_id is None) == (self.suite is None):
            raise ValueError("give exactly one of suite_id and suite")
        return self


class Progress(BaseModel):
    """A run's episodes counted by status, and its failed attempts."""

    total: int
    queued: int
    running: int
    completed: int
    failed: int
    cancelled: int
    failed_attempts: int = Field(description="attempts that failed and were retried or gave up")


class SuiteRef(BaseModel):
    """The suite a run plays."""

    id: str
    name: str
    version: str


class RunOut(BaseModel):
    """A run: its model, suite, settings, status and progress."""

    id: str
    label: str = Field(description="model · clock · suite name and version · short id: how the pages and reports "
                                   "tell runs apart")
    team: str
    model: str
    benchmark: str = Field(description="the benchmark plug-in of the run's suite")
    suite: SuiteRef
    clock: RunClock = Field(description="lockstep | realtime; text: a text reference decided on the script "
                                        "(mpe reference), finished when created")
    conditions: list[str]
    limit: int | None
    max_attempts: int
    max_inflight: int
    text_prompt: bool = Field(default=False, description="whether the bridges were given the benchmark's duty as a "
                                                         "text prompt")
    impair: Impairment | None = Field(default=None, description="the network impairment of the assistant stream")
    status: RunStatus
    created_at: datetime
    finished_at: datetime | None
    error: str | None = Field(default=None, description="why a failed run stopped (e.g. its suite changed on disk)")
    progress: Progress
    live_episodes: list[str] = Field(default_factory=list, description="episodes streaming live on this server")
    scored: bool | None = Field(default=None, description="whether metrics exist (run detail only)")
    notes: list[str] = Field(default_factory=list, description="only in the answer to creating a run: what to know "
                             "before it can run, e.g. that some of its episodes start with assistant-context frames "
                             "and no connected bridge of the model sends \"accepts_context\": true in hello")


class BenchmarkOut(BaseModel):
    """A registered benchmark: its run conditions, failure types and the quantities it reports."""

    name: str
    conditions: list[str] = Field(description="the run conditions a run of its suites may choose")
    failure_types: list[str] = Field(description="its outcomes' failure types, in the order pages list them")
    quantities: list[Quantity] = Field(description="its run-level quantities in the order they are shown: the "
                                                   "title, direction, unit and format of each key of a run's metrics")
    labels: list[Label] = Field(description="its items' labels with what each means, in the timeline legend's order")
    failure_titles: dict[str, str] = Field(description="failure type -> its name on the pages (every failure type)")
    outcome_columns: list[Column] = Field(description="the run page's outcome columns of an episode (its `cells`), "
                                                      "between its length and its failures")
    script_columns: list[Column] = Field(description="the episode page's script columns (the `cells` of its "
                                                     "timeline's `rows`), between the start and the verdict")


class Metrics(BaseModel):
    """A run's scored metrics (null until it is scored)."""

    run_id: str
    scored: bool
    results: dict[str, Any] | None = Field(
        description="the scoring results (metrics[model][condition][quantity] = {num, den, value, ...}) or null")
    notes: dict[str, list[str]] = Field(default_factory=dict, description="model -> sentences the benchmark says "
                                                                      "of its analyses (shown under its metrics)")


# --- episodes -----------------------------------------------------------------------------


class EpisodeItem(BaseModel):
    """An episode in a run's list: its status, attempts, duration in seconds and outcome."""

    id: str
    run_id: str
    ordinal: int | None = Field(description="its place in the run; null while which scenario it plays is withheld "
                                            "(api.md \"What a team sees\")")
    scenario_id: str | None = Field(description="null while which scenario it plays is withheld")
    pair_id: str | None = Field(description="null while which scenario it plays is withheld")
    condition: str
    status: EpisodeStatus
    attempts: int
    live: bool
    duration_s: float | None
    outcome: SerializeAsAny[Outcome] | None
    cells: list[Cell] | None = Field(default=None, description="the outcome in the benchmark's `outcome_columns` "
                                                               "(null: no outcome)")
    updated_at: datetime | None


class AttemptOut(BaseModel):
    """One attempt at an episode: its status, error, frames played and times."""

    id: str
    number: int
    status: AttemptStatus
    error_code: str | None
    error_message: str | None
    n_frames: int
    started_at: datetime | None
    ended_at: datetime | None
    model_revision: str
    room_late: bool | None = Field(default=None, description="realtime: whether room frames went out a frame "
                                   "period or more after their deadline (the server stalled; the model heard them "
                                   "late, so its timing is not clean; stats.server.room_late, protocol.md §8); "
                                   "null: lockstep, or not recorded")
    room_late_frames: int | None = Field(default=None, description="realtime: how many room frames went out late")
    max_room_lateness_ms: float | None = Field(default=None, description="realtime: the largest delay of a room "
                                                                         "frame behind its deadline")


class EpisodeOut(BaseModel):
    """One episode in full: events and segments (samples at 24 kHz), attempts, outcome and scores."""

    model_config = ConfigDict(extra="allow")

    episode_id: str
    run_id: str
    status: EpisodeStatus
    live: bool
    attempts: list[AttemptOut]
    turns: list[dict[str, Any]]
    events: list[dict[str, Any]]
    segments: list[dict[str, Any]] = Field(description="detector segments of the assistant track, in samples")
    duration_s: float | None
    outcome: SerializeAsAny[Outcome] | None = Field(description="the benchmark's outcome (its own fields "
                                                                "besides source, failures and ok)")
    scores: dict[str, Any] | None = Field(description="the latest scoring's entry for the episode (the "
                                                      "benchmark's `episodes[]` entry of `mpe score --json`: "
                                                      "windows, transcripts and verdicts) plus its "
                                                      "`scoring_id`; null when not scored")
    timeline: Timeline | None = Field(default=None, description="the episode's windows and their verdicts, computed "
                                                                "by its benchmark from the events, segments and "
                                                                "scores shown here (null: no attempt yet)")


class FrameItem(BaseModel):
    """One frame of an attempt's frame log: room frames with their send time, assistant frames
    with their arrival time and timeline slot (µs after the episode's t0)."""

    direction: Literal["room", "assistant"]
    seq: int = Field(description="the frame's seq on the wire")
    slot: int = Field(description="the timeline slot it occupies (room: its seq; assistant: see protocol.md §8; "
                                  "slot - seq is its lateness)")
    sent_us: int | None = Field(description="room frames: when it was handed to the socket")
    arrived_us: int | None = Field(description="assistant frames: when it arrived")
    silent: bool = Field(description="all samples zero (or a SILENT frame)")


class FrameLog(PageOf[FrameItem]):
    """One page of an attempt's frame log, in the order it was written (each direction in seq order)."""

    attempt: int | None = Field(description="the attempt number (null: the episode has no attempt yet)")
    attempt_id: str | None


class AudioUrl(BaseModel):
    """A signed URL and when it expires."""

    url: str = Field(description="a URL that plays in <audio> without headers (signed, expires)")
    expires_at: int = Field(description="epoch seconds")


# --- suites -------------------------------------------------------------------------------


class SuiteOut(BaseModel):
    """A suite registered to a team, pinned by its content hash."""

    id: str
    team: str
    benchmark: str = Field(description="the benchmark that owns the suite")
    run_conditions: list[str] = Field(description="the conditions a run of this suite may choose")
    name: str
    version: str
    generator: str | None
    n_scenarios: int
    content_hash: str
    created_at: datetime


class SuiteDetail(SuiteOut):
    """One suite with its metadata and its items counted by run condition and by label, as its
    benchmark counts them."""

    meta: dict[str, Any]
    available: bool = Field(description="whether the suite's files are readable on this server")
    conditions: dict[str, int] = Field(description="episodes a run of the whole suite queues, per run condition "
                                                   "(empty when the files are not available)")
    label_kind: str = Field(default="", description="what `labels` counts (e.g. turns by label, rounds by feature)")
    labels: dict[str, int] = Field(description="the suite's items counted by their label")
    groups: dict[str, dict[str, int]] = Field(default_factory=dict,
                                              description="further counts of the benchmark (name -> value -> n)")


class ScenarioItem(BaseModel):
    """One scenario of a suite (a scenario version, or an item every condition plays): pair,
    condition, speakers, labels and duration in seconds. The benchmark's further script facts
    follow as fields of their own (e.g. where T lies, `t_bucket`), null while the script is
    withheld."""

    model_config = ConfigDict(extra="allow")

    scenario_id: str
    pair_id: str
    condition: str | None = Field(description="its run condition; null: every condition of the run plays it")
    n_speakers: int | None
    labels: list[str] | None = Field(description="its items' labels (turn labels, round features); null while the "
                                                 "script is withheld (api.md)")
    duration_s: float


class SuiteDir(BaseModel):
    """A suite directory below the server's suites root."""

    path: str = Field(description="relative to the suites root; pass as `suite` when creating a run")
    benchmark: str = Field(description=f"the benchmark that owns the suite ({', '.join(CONDITIONS)})")
    run_conditions: list[str] = Field(description="the conditions a run of this suite may choose")
    name: str
    version: str
    n_scenarios: int = Field(description="lines of scenarios.jsonl: scenario versions, or MTR dialogues")


# --- tokens -------------------------------------------------------------------------------


class TokenCreate(BaseModel):
    """A token to create: its team, whether it is an admin token, and a label."""

    model_config = ConfigDict(extra="forbid")

    team: str = Field(pattern=TEAM_RE)
    admin: bool = Field(default=False, description="the scope admin (the same as scopes: [admin])")
    scopes: list[Scope] | None = Field(default=None, min_length=1,
                                       description="bridge, read, admin (default: bridge and read)")
    expires_in_s: int | None = Field(default=None, ge=60, le=10 * 365 * 86400,
                                     description="lifetime in seconds (default: until revoked)")
    label: str = Field(default="", max_length=200)


class TokenOut(BaseModel):
    """An API token (never its secret)."""

    id: int
    team: str
    admin: bool
    scopes: list[Scope]
    label: str
    revoked: bool
    expires_at: datetime | None
    created_at: datetime


class TokenCreated(TokenOut):
    """A token just created, with its secret."""

    token: str = Field(description="the secret, shown only this once")
