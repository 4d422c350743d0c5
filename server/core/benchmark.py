"""The benchmark plug-in contract (types only).

The engine (sessions, clocks, leasing, recording, the API) knows nothing about any one
benchmark's labels or rules. A benchmark provides, through one :class:`Benchmark` object:
its suite schema and validator, which clips an episode plays and its pure scheduler, its
outcome rules for the pages, and its scoring. :mod:`server.engine.registry` finds it by name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from clients.errors import MPEError
from clients.sdk import BaseBridge
from server.core.datasets import DatasetTools
from server.core.events import TEXT, Event
from server.core.schedule import Scheduler

if TYPE_CHECKING:
    from rich.console import Console

Span = tuple[int, int]

#: the events of every benchmark that tell only what the model did (its speech as the detector saw
#: it, its text) or that the episode ended: event type -> the data fields that may be shown
MODEL_EVENTS: Mapping[str, frozenset[str]] = {
    "vad.onset": frozenset({"at", "seen_at"}), "vad.offset": frozenset({"at", "seen_at"}),
    TEXT: frozenset({"seq", "text"}), "episode.end": frozenset(),
}


class SuiteMetaLike(Protocol):
    """What the engine records of a suite's ``suite.json`` (a pydantic model of the benchmark's)."""

    name: str
    version: str

    def model_dump(self, *, mode: str) -> dict[str, Any]:
        """The whole ``suite.json`` as JSON data (stored with the suite's row)."""


class SuiteLike(Protocol):
    """What the engine needs of a loaded suite, whatever its benchmark."""

    root: Path
    meta: SuiteMetaLike

    @property
    def scenarios(self) -> Sequence[object]:
        """The suite's items, one line of ``scenarios.jsonl`` each (counted when it is registered)."""

    def content_hash(self) -> str:
        """Identity of the suite's manifest files (the audio is pinned per episode)."""

    def clip_path(self, rel: str) -> Path:
        """A clip path of the manifest resolved under the suite root (refusing escapes)."""

    def load_clip(self, rel: str) -> np.ndarray:
        """A clip as int16 mono samples at 24 kHz."""


#: a benchmark's scenario snapshot (its :attr:`Benchmark.scenario_model`)
ScenarioT = TypeVar("ScenarioT", bound=BaseModel)


@dataclass(frozen=True)
class EpisodeSpec(Generic[ScenarioT]):
    """One episode a run queues: which scenario version, and its manifest snapshot (the benchmark's
    :attr:`Benchmark.scenario_model`; the episode stores it as ``model_dump(mode="json")``)."""

    scenario_id: str
    pair_id: str
    condition: str
    scenario: ScenarioT


class Outcome(BaseModel):
    """An episode's outcome as the pages show it; each benchmark adds its own fields."""

    source: Literal["live", "score"] = Field(description="live: events and live segments, durations only; "
                                                         "score: the latest scoring's verdicts")
    failures: list[str] = Field(description="failure types, in the benchmark's order")
    ok: bool


class JudgedItem(BaseModel):
    """One verdict a judge gave on a transcript of an episode's speech (what the judge audit samples)."""

    model_config = ConfigDict(frozen=True)

    task: str = Field(description="the judge's task (e.g. answer, silence)")
    turn_idx: int
    fragments: list[Span] = Field(description="the judged audio, [start, end) samples of the assistant track")
    transcript: str | None
    verdict_id: int
    label: str | None = Field(description="the judge's label; null when its reply had none")
    reference: str | None = Field(default=None, description="what the judge compared against (a gold answer)")


class ScoreEntry(BaseModel):
    """One scored episode: the ``episodes[]`` entry of ``mpe score --json``, stored per episode of a
    scoring. Each benchmark adds its own fields; the JSON is ``model_dump(mode="json")`` and is
    read back with ``model_validate`` (unknown or missing fields are errors)."""

    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())

    episode_id: str
    attempt_id: str | None
    run_id: str | None
    scenario_id: str
    condition: str
    model: str = Field(description="the model's name, as its bridge announced it")
    source: str = Field(description='"db", or the bundle directory the episode was scored from')

    @abstractmethod
    def judged(self) -> list[JudgedItem]:
        """The entry's judge verdicts on transcripts, in episode order."""


class UnknownBridge(MPEError):
    """A benchmark was asked for a bridge it does not have."""

    code = "unknown_bridge"


class BadSnapshot(MPEError):
    """An episode's stored scenario snapshot is not one its benchmark's :attr:`Benchmark.scenario_model`
    reads (stored by another version of the benchmark, or damaged)."""

    code = "bad_snapshot"

class JudgeBackend(Protocol):
    """What scoring needs of a benchmark's judge beyond its own calls: its backend's name and a
    description of its settings, recorded with (and part of the identity of) every scoring."""

    name: str

    def describe(self) -> Mapping[str, object]:
        """Backend, model and prompt versions: a change of any of them makes a new scoring."""


class JudgeTask(BaseModel):
    """One task a benchmark's judges decide (e.g. Duplex-MPE's ``answer``): its labels, as the judge
    audit (``mpe audit``) samples verdicts and reads the labels people give them."""

    model_config = ConfigDict(frozen=True)

    name: str
    labels: tuple[str, ...] = Field(description="every label a verdict of the task may have")
    unparseable: str | None = Field(description="the label an unparseable verdict counts as; None: it is left "
                                                "out of the rates (and of the audit's agreement)")
    numeric: bool = Field(default=False, description="the labels are numbers (scores): a person's label is read "
                                                     "as a number, and the audit adds its distance measures")
    synonyms: Mapping[str, str] = Field(default_factory=dict,
                                        description="what people write (upper case) -> the label it means")


class ModelName(BaseModel):
    """The model an episode's document names: ``{"name", "revision"}`` (a bare string is its name)."""

    model_config = ConfigDict(frozen=True)

    name: str = ""
    revision: str = ""

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, v: object) -> object:
        return {"name": v} if isinstance(v, str) else v


class EpisodeView(BaseModel):
    """The fields of an episode document (DESIGN §7) every benchmark's scoring reads, as scoring has
    always read them (absent: empty or null). A benchmark subclasses it with the fields it owns
    (its part of the scenario snapshot) and reads it with :meth:`EpisodeLike.view`; the rest of the
    document is ignored here (it stays in ``doc``)."""

    model_config = ConfigDict(extra="ignore", frozen=True, coerce_numbers_to_str=True)

    episode_id: str
    attempt_id: str | None = None
    run_id: str | None = None
    scenario_id: str = ""
    pair_id: str = ""
    condition: str = ""
    model: ModelName = Field(default_factory=ModelName)
    clock: str | None = None
    end_sample: int | None = None
    stats: dict[str, Any] = Field(default_factory=dict)

    @field_validator("model", "stats", mode="before")
    @classmethod
    def _null_is_empty(cls, v: object) -> object:
        return v or {}


ViewT = TypeVar("ViewT", bound=EpisodeView)


class EpisodeLike(Protocol):
    """What a benchmark scores an episode from (:class:`server.scoring.loading.LoadedEpisode`): the
    episode document of DESIGN §7, the assistant track, and the speech segments to score with."""

    doc: dict[str, Any]
    assistant: np.ndarray  # int16 at 24 kHz
    segments: list[tuple[int, int]] | None  # None: replay the detector over the track
    source: str  # "db", or the bundle directory

    @property
    def events(self) -> list[Event]:
        """The episode's events (§3)."""

    def view(self, model: type[ViewT]) -> ViewT:
        """The document as the benchmark's typed view of it (an :class:`EpisodeView`); a bad document
        is refused naming its source and each bad field."""


class TranscriberLike(Protocol):
    """What a benchmark needs of scoring's ASR backend (:class:`server.scoring.asr.ASRBackend`)
    besides handing it to the cache: whether it transcribes at all (``--asr none`` does not)."""

    name: str
    enabled: bool

    def describe(self) -> Mapping[str, object]:
        """Backend, model and version, recorded with every scoring."""


class VerdictCacheLike(Protocol):
    """Scoring's transcript and verdict cache (:class:`server.scoring.store.Cache`), which a benchmark's
    scoring asks for every transcript and verdict."""

    calls: dict[str, int]


class DatabaseLike(Protocol):
    """The database a report reads its scorings from (:class:`server.db.Database`)."""

    def session(self) -> AbstractContextManager[Any]:
        """One unit of work."""


#: outcome filter values every benchmark understands, besides ``ok`` and its failure types
UNFINISHED, UNSCORED = "unfinished", "unscored"


def outcome_matches(outcome: Outcome | None, completed: bool, wanted: str) -> bool:
    """Does an episode match the pages' ``outcome`` filter value?"""
    if wanted == UNFINISHED:
        return not completed
    if outcome is None:
        return False
    if wanted == UNSCORED:
        return outcome.source != "score"
    if wanted == "ok":
        return outcome.ok
    return wanted in outcome.failures


# --- what the API, the pages and live listeners show of a benchmark --------------------------
# The neutral layers (server/api, server/engine/live.py, the pages) know no benchmark's labels,
# windows or quantities: they call the hooks of the ``Benchmark`` section "shown" below and draw
# these models.

#: a detector segment that may still be open (end None: speech running at the episode's head)
OpenSpan = tuple[int, int | None]


class Quantity(BaseModel):
    """One run-level quantity a benchmark reports (``metrics[model][condition][key]``)."""

    model_config = ConfigDict(frozen=True)

    key: str = Field(description="the quantity's key in the metrics")
    title: str = Field(description="its name on the pages")
    short_title: str = Field(description="its name in table headers and reports")
    description: str = Field(default="", description="what it counts (e.g. its numerator / denominator)")
    direction: Literal["higher", "lower"] | None = Field(description="which way is better; null: neither")
    scored: bool = Field(description="a score (a best may be marked); false: descriptive")
    unit: str = Field(description="what its denominator counts (e.g. T requests, rounds)")
    format: Literal["percent", "seconds", "score", "number"] = Field(
        description="how its value reads: percent (a share 0-1), seconds, score (a mean on the benchmark's scale), "
                    "number")


class SuiteSummary(BaseModel):
    """A suite counted as the API shows it."""

    model_config = ConfigDict(frozen=True)

    conditions: dict[str, int] = Field(description="episodes a run of every item queues, per run condition")
    label_kind: str = Field(description="what ``labels`` counts (e.g. turns by label, rounds by feature)")
    labels: dict[str, int] = Field(description="the suite's items counted by their label")
    groups: dict[str, dict[str, int]] = Field(default_factory=dict,
                                              description="further counts the benchmark keeps (name -> value -> n)")


class ScenarioSummary(BaseModel):
    """One scenario (a scenario version, or an item every condition plays) as the API lists it."""

    model_config = ConfigDict(frozen=True)

    scenario_id: str
    pair_id: str
    condition: str | None = Field(description="its run condition; null: an item every condition plays")
    n_speakers: int | None = Field(description="the people in the room (null: the benchmark does not say)")
    duration_s: float = Field(description="the audio of its items, in seconds")
    labels: list[str] = Field(description="script: its items' labels, in order")
    facts: dict[str, str] = Field(default_factory=dict, description="script: further facts (name -> value)")


@dataclass(frozen=True)
class ClipTexts:
    """What a listener who may see the script reads of the clips being played: the text of each
    clip by key, and the events that name a clip (event type -> the data fields whose values make
    its key: the event's kind, its type less ``.start``/``.end``, then those values, joined by
    ``.``; e.g. ``clip.start`` ``{"idx": 3}`` -> ``clip.3``)."""

    texts: Mapping[str, str]
    events: Mapping[str, tuple[str, ...]]

    def text_of(self, type_: str, data: Mapping[str, object]) -> str | None:
        """The text of the clip an event names ("" for a clip without one); None: it names none."""
        fields = self.events.get(type_)
        if fields is None or any(f not in data for f in fields):
            return None
        return self.texts.get(".".join([type_.rpartition(".")[0], *(str(data[f]) for f in fields)]), "")


NO_CLIP_TEXTS = ClipTexts(texts={}, events={})


class Verdict(BaseModel):
    """How a window went: its state (the pages' colour), in words, and whether scoring said so."""

    model_config = ConfigDict(frozen=True)

    state: Literal["pass", "fail", "speech", "quiet", "none"]
    text: str
    scored: bool = Field(description="true: the latest scoring's verdict; false: from the live events")


class Window(BaseModel):
    """One window of an episode's timeline (stream samples at 24 kHz)."""

    model_config = ConfigDict(frozen=True)

    kind: str = Field(description="the benchmark's kind of window (e.g. t, silence, n4, round)")
    label: str
    idx: int | None = Field(description="the turn (or round) it belongs to")
    start: int
    end: int = Field(description="its end; while open, the episode's head")
    open: bool = Field(description="still growing (a live episode)")
    deadline: int | None = Field(default=None, description="a mark inside the window (e.g. t_R + 2 s), or null")
    deadline_label: str | None = Field(default=None, description="what the mark is")
    verdict: Verdict


class Block(BaseModel):
    """One block of the room lane of an episode's timeline: a clip (or span) the room played."""

    model_config = ConfigDict(frozen=True)

    key: str = Field(description="unique in the episode (e.g. clip-3); what keeps the keyboard focus on it")
    idx: int | None = Field(description="the turn (or round) it belongs to")
    kind: str = Field(description="its colour: the label it is drawn as (a ``label-KIND`` style)")
    who: str = Field(description="its first line (e.g. who speaks and the label)")
    text: str = Field(default="", description="its second line: the words (empty: none shown)")
    title: str = Field(description="its tooltip")
    aria: str = Field(description="its accessible name; ``{t}`` stands for its start time")
    start: int
    end: int | None = Field(description="its end; null while it plays (drawn to the episode's head)")


class Cell(BaseModel):
    """One cell of a table a benchmark fills (the run page's outcome columns, the episode's script)."""

    model_config = ConfigDict(frozen=True)

    text: str
    bad: bool = Field(default=False, description="drawn as a failure")
    chip: str | None = Field(default=None, description="drawn as a chip: the label it is coloured as (a "
                                                       "``label-KIND`` style), \"\" for a plain one; null: plain text")
    title: str | None = Field(default=None, description="its tooltip")


class ScriptRow(BaseModel):
    """One row of an episode's script table (a turn, a round): when it began, its cells, its verdict."""

    model_config = ConfigDict(frozen=True)

    key: str = Field(description="unique in the episode (e.g. turn-3); what keeps the keyboard focus on it")
    name: str = Field(default="", description="what it is called in the play button's name (e.g. round 2)")
    start: int | None = Field(description="where it began, in stream samples; null: not yet played")
    now: bool = Field(default=False, description="playing now")
    cells: list[Cell] = Field(description="one per :attr:`Benchmark.script_columns`")
    verdict: Verdict | None = Field(description="its window's verdict; null: none")


class Note(BaseModel):
    """A line under an episode's script (e.g. the model's transcribed answer)."""

    model_config = ConfigDict(frozen=True)

    title: str
    text: str = Field(description="empty: shown as an empty transcript")


class Timeline(BaseModel):
    """An episode's windows with their verdicts, computed on the server from its events, detector
    segments and latest scoring: the pages draw it and restate no rule. ``blocks``, ``rows`` and
    ``notes`` are the room lane and the script table (:meth:`Benchmark.shown_timeline`)."""

    model_config = ConfigDict(frozen=True)

    head: int = Field(description="the stream samples the windows were computed up to")
    windows: list[Window]
    blocks: list[Block] = Field(default_factory=list, description="the room lane's blocks")
    rows: list[ScriptRow] = Field(default_factory=list, description="the script table's rows (empty: the script "
                                                                    "is not shown)")
    notes: list[Note] = Field(default_factory=list, description="lines under the script table")
    facts: list[Note] = Field(default_factory=list, description="facts of the script beside the episode's model "
                                                                "and condition")


class Label(BaseModel):
    """One label of a benchmark's items (a turn's label, a span's kind): what it means."""

    model_config = ConfigDict(frozen=True)

    key: str
    title: str = Field(description="what it means (tooltips, the status line)")
    legend: str = Field(description="its entry in the timeline's legend")


class Column(BaseModel):
    """A column of a table a benchmark fills."""

    model_config = ConfigDict(frozen=True)

    key: str
    title: str


SuiteT = TypeVar("SuiteT", bound=SuiteLike)
EntryT = TypeVar("EntryT", bound=ScoreEntry)


class Benchmark(ABC, Generic[SuiteT, EntryT, ScenarioT]):
    """Everything the engine, the pages and scoring need from one benchmark: ``SuiteT`` is the
    benchmark's loaded suite, ``EntryT`` its :class:`ScoreEntry` (its :attr:`entry_model`),
    ``ScenarioT`` its scenario snapshot (its :attr:`scenario_model`)."""

    name: ClassVar[str]
    #: run conditions a run may choose from (e.g. Duplex-MPE's addressing conditions)
    conditions: ClassVar[tuple[str, ...]]
    #: the model's duty as text: ``episode.start`` carries it as ``instructions`` only for runs
    #: created with a text prompt (§4); None: the benchmark has no text prompt to offer
    duty_text: ClassVar[str | None] = None
    #: run conditions whose episodes start with assistant-context frames (teacher forcing,
    #: docs/protocol.md §5.1): only bridges that accept context (``hello.accepts_context``) are
    #: leased them, and their schedulers' ``context_frames`` is > 0
    context_conditions: ClassVar[frozenset[str]] = frozenset()
    #: what of an episode's events a team may see while its run is unfinished (and never more on a
    #: held-out suite; server.engine.disclosure): event type -> data fields. Every other event, and
    #: every other field, belongs to the script (labels, texts, addressees, the scheduler's
    #: decisions that follow from them)
    public_events: ClassVar[Mapping[str, frozenset[str]]] = MODEL_EVENTS
    #: keys of an attempt's ``stats`` that belong to the script (withheld with it): e.g. the decisions
    #: of a run decided on the script's text, which name and quote its turns
    script_stats: ClassVar[frozenset[str]] = frozenset()

    #: the tasks of the benchmark's judges, with their labels (the judge audit reads them)
    judge_tasks: ClassVar[tuple[JudgeTask, ...]] = ()

    # --- suites ----------------------------------------------------------------------------

    @abstractmethod
    def load_suite(self, path: str | Path) -> SuiteT:
        """Parse a suite directory; raises an :class:`MPEError` naming the file on bad input."""

    @abstractmethod
    def problems(self, suite: SuiteT) -> list[str]:
        """What makes the suite unusable for a run (empty: valid)."""

    @abstractmethod
    def episodes(self, suite: SuiteT, conditions: Sequence[str], limit: int | None) -> list[EpisodeSpec[ScenarioT]]:
        """The episodes a run of this suite queues (``limit`` as the benchmark defines it)."""

    # --- running an episode ----------------------------------------------------------------

    #: the scenario snapshot an episode stores (what :meth:`episodes` puts in its specs): the engine
    #: stores ``model_dump(mode="json")`` and reads it back with :meth:`snapshot`
    scenario_model: ClassVar[type[BaseModel]]

    def snapshot(self, stored: Mapping[str, object], episode_id: str) -> ScenarioT:
        """An episode's stored scenario snapshot as :attr:`scenario_model`; :class:`BadSnapshot`
        naming the episode and each bad field when it does not parse."""
        try:
            return self.scenario_model.model_validate(stored)  # type: ignore[return-value]
        except ValidationError as exc:
            bad = [f"{'.'.join(str(x) for x in e['loc']) or 'snapshot'}: {e['msg']}"
                   for e in exc.errors(include_url=False)]
            raise BadSnapshot(f"episode {episode_id}: its stored scenario snapshot is not a {self.name} scenario "
                              f"({'; '.join(bad[:5])}{f'; and {len(bad) - 5} more' if len(bad) > 5 else ''})"
                              ) from None

    @abstractmethod
    def clip_refs(self, suite: SuiteT, scenario: ScenarioT) -> dict[str | int, str]:
        """Clip key -> clip path (relative to the suite) of everything the episode may play."""

    @abstractmethod
    def scheduler(self, scenario: ScenarioT, lengths: Mapping[str | int, int]) -> Scheduler:
        """A fresh pure scheduler for one attempt; ``lengths`` are the clips' sample counts."""

    # --- outcomes and scoring --------------------------------------------------------------

    #: failure types of :class:`Outcome`, in the order the pages list them
    failure_types: ClassVar[tuple[str, ...]]

    @property
    def outcome_filters(self) -> tuple[str, ...]:
        return ("ok", *self.failure_types, UNFINISHED, UNSCORED)

    @abstractmethod
    def live_outcome(self, events: Sequence[Event], segments: Sequence[Span], n_samples: int) -> Outcome | None:
        """Duration-only outcome of a completed attempt from its events and live segments
        (None when the events do not describe a whole episode)."""

    @abstractmethod
    def scored_outcome(self, entry: EntryT) -> Outcome:
        """Outcome of a scored episode (its scoring entry, an :attr:`entry_model`)."""

    #: written into every scoring's configuration; a new version invalidates cached scorings
    scoring_version: ClassVar[str]
    #: the named rule sets a scoring may judge episodes by (``mpe score --rules NAME``), the first the
    #: default; the chosen one is part of the scoring's configuration. Empty: one fixed set of rules
    rule_sets: ClassVar[tuple[str, ...]] = ()
    #: the benchmark's :class:`ScoreEntry`: what :meth:`score_episode` returns and scorings store
    entry_model: ClassVar[type[ScoreEntry]]

    @abstractmethod
    def make_judge(self, spec: str | None) -> JudgeBackend:
        """The benchmark's judge for ``--judge SPEC`` (None: its offline default); raises a
        :class:`MPEError` naming the choices on an unknown one."""

    @abstractmethod
    def score_episode(self, episode: EpisodeLike, asr: TranscriberLike, judge: JudgeBackend,
                      cache: VerdictCacheLike, rules: str | None = None) -> EntryT:
        """One episode's scoring entry (``episode``: a :class:`server.scoring.loading.LoadedEpisode`);
        ``rules`` one of :attr:`rule_sets` (None where there are none)."""

    @abstractmethod
    def metrics(self, entries: Sequence[EntryT]) -> dict[str, Any]:
        """Run-level quantities per model and condition (``entries``: :attr:`entry_model` instances)."""

    @abstractmethod
    def analyses(self, entries: Sequence[EntryT], metrics: Mapping[str, Any]) -> dict[str, Any]:
        """The benchmark's statistics over the scored entries."""

    @abstractmethod
    def print_tables(self, metrics: Mapping[str, Any], console: Console, title: str = "") -> None:
        """The benchmark's main results table on a rich console (``mpe score``, the demo)."""

    @abstractmethod
    def print_report(self, db: DatabaseLike, refs: Sequence[str], console: Console, *, html: Path | None = None,
                     max_timelines: int | None = 60) -> dict[str, Any]:
        """Every terminal table of ``mpe report`` over the latest scorings of ``refs`` (runs or
        scoring ids), and the self-contained HTML report at ``html`` when given; returns
        ``{"metrics", "analyses"}``."""

    # --- shown: what the API, the pages and live listeners read ---------------------------------

    #: the run-level quantities the benchmark reports, in the order pages and reports show them
    quantities: ClassVar[tuple[Quantity, ...]] = ()

    def suite_summary(self, suite: SuiteLike) -> SuiteSummary:
        """The suite counted by run condition and by what the benchmark labels its items."""
        return SuiteSummary(conditions={}, label_kind="", labels={})

    def scenario_items(self, suite: SuiteLike) -> list[ScenarioSummary]:
        """The suite's scenarios as the API lists them, in suite order."""
        return []

    def clip_texts(self, scenario: ScenarioT) -> ClipTexts:
        """The clip texts of one episode's scenario snapshot, for listeners who may see its script
        (server.engine.disclosure decides who may)."""
        return NO_CLIP_TEXTS

    def timeline(self, events: Sequence[Event], segments: Sequence[OpenSpan], *, head: int, end: int | None,
                 entry: ScoreEntry | None, outcome: Outcome | None) -> Timeline:
        """The windows of an episode, finished or live and growing: from its events so far, its
        detector segments (an open one runs to ``head``), its end (None: not yet), and its latest
        scoring entry (None: not scored; then ``outcome``, the live outcome, if any)."""
        return Timeline(head=head, windows=[])

    #: its items' labels (e.g. Duplex-MPE's turn labels), in the order the timeline's legend lists them
    labels: ClassVar[tuple[Label, ...]] = ()
    #: failure type -> its name on the pages (a type without one is shown with its underscores as spaces)
    failure_titles: ClassVar[Mapping[str, str]] = {}
    #: the run page's outcome columns of an episode, between its length and its failures
    outcome_columns: ClassVar[tuple[Column, ...]] = (Column(key="verdict", title="Verdict"),)
    #: the episode page's script table's columns, between the start and the window's verdict
    script_columns: ClassVar[tuple[Column, ...]] = ()

    def outcome_cells(self, outcome: Outcome) -> list[Cell]:
        """The run page's cells of an episode's outcome, one per :attr:`outcome_columns`."""
        return [Cell(text="ok" if outcome.ok else "failed", bad=not outcome.ok)]

    def metric_notes(self, analyses: Mapping[str, Any], model: str) -> list[str]:
        """Sentences the run page shows under a model's metrics (from the benchmark's analyses)."""
        return []

    def status_text(self, status: Mapping[str, Any], scenario: ScenarioT | None) -> str:
        """The scheduler's live ``status()`` in words, for listeners who may see the script."""
        return str(status.get("state", ""))

    def room_blocks(self, events: Sequence[Event], scenario: ScenarioT | None) -> list[Block]:
        """The room lane of an episode's timeline from its events so far (``scenario``: its snapshot,
        None where the caller may not see the script)."""
        return []

    def script_rows(self, scenario: ScenarioT, events: Sequence[Event], timeline: Timeline) -> list[ScriptRow]:
        """The script table of an episode (only for callers who may see the script): its items, when
        each began by ``events``, and their windows' verdicts in ``timeline``."""
        return []

    def script_facts(self, scenario: ScenarioT) -> list[Note]:
        """Facts of the episode's script the page lists beside its model and condition (e.g. the gold answer)."""
        return []

    def script_notes(self, entry: ScoreEntry | None) -> list[Note]:
        """Lines under the script table from the episode's latest scoring entry (None: not scored)."""
        return []

    def shown_timeline(self, events: Sequence[Event], segments: Sequence[OpenSpan], *, head: int, end: int | None,
                       entry: ScoreEntry | None, outcome: Outcome | None,
                       scenario: ScenarioT | None) -> Timeline:
        """What the episode page draws (the API and live listeners call this, not the hooks): the
        :meth:`timeline` with its room lane, and, where ``scenario`` is given (the caller sees the
        script), its script table and notes."""
        tl = self.timeline(events, segments, head=head, end=end, entry=entry, outcome=outcome)
        update: dict[str, object] = {"blocks": self.room_blocks(events, scenario)}
        if scenario is not None:
            update |= {"rows": self.script_rows(scenario, events, tl), "notes": self.script_notes(entry),
                       "facts": self.script_facts(scenario)}
        return tl.model_copy(update=update)

    # --- the reference bridge ----------------------------------------------------------------

    #: the name ``mpe bridge`` starts this benchmark's oracle under (None: the benchmark has none)
    oracle_bridge: ClassVar[str | None] = None

    def oracle(self, data_dir: Path, suite: str | None = None) -> BaseBridge:
        """The benchmark's oracle: a bridge that knows the script (an admin token's ``episode.start``
        carries it) and behaves ideally; only called when :attr:`oracle_bridge` is set."""
        raise UnknownBridge(f"benchmark {self.name!r} has no oracle bridge")

    # -- suite construction -------------------------------------------------------------------------

    def dataset_tools(self) -> DatasetTools | None:
        """The benchmark's side of ``mpe dataset`` (its generator, importers, validator, reports:
        :class:`server.core.datasets.DatasetTools`); None: it offers none (its suites are made elsewhere)."""
        return None
