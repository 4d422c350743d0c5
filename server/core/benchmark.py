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
from pydantic import BaseModel, ConfigDict, Field

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


class SuiteLike(Protocol):
    """What the engine needs of a loaded suite, whatever its benchmark."""

    def content_hash(self) -> str:
        """Identity of the suite's manifest files (the audio is pinned per episode)."""

    def clip_path(self, rel: str) -> Path:
        """A clip path of the manifest resolved under the suite root (refusing escapes)."""

    def load_clip(self, rel: str) -> np.ndarray:
        """A clip as int16 mono samples at 24 kHz."""


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode a run queues: which scenario version, and its manifest snapshot."""

    scenario_id: str
    pair_id: str
    condition: str
    scenario: dict[str, Any]


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


SuiteT = TypeVar("SuiteT", bound=SuiteLike)
EntryT = TypeVar("EntryT", bound=ScoreEntry)


class Benchmark(ABC, Generic[SuiteT, EntryT]):
    """Everything the engine, the pages and scoring need from one benchmark: ``SuiteT`` is the
    benchmark's loaded suite, ``EntryT`` its :class:`ScoreEntry` (its :attr:`entry_model`)."""

    name: ClassVar[str]
    #: run conditions a run may choose from (e.g. Duplex-MPE's addressing conditions)
    conditions: ClassVar[tuple[str, ...]]
    #: the model's duty as text: ``episode.start`` carries it as ``instructions`` only for runs
    #: created with a text prompt (§4); None: the benchmark has no text prompt to offer
    duty_text: ClassVar[str | None] = None
    #: the module with the benchmark's side of ``mpe dataset`` (generate, validate, stats, synthesize,
    #: build), imported by name; None: the Duplex-MPE commands themselves
    dataset_cli: ClassVar[str | None] = None
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
    def episodes(self, suite: SuiteT, conditions: Sequence[str], limit: int | None) -> list[EpisodeSpec]:
        """The episodes a run of this suite queues (``limit`` as the benchmark defines it)."""

    # --- running an episode ----------------------------------------------------------------

    @abstractmethod
    def clip_refs(self, suite: SuiteT, scenario: Mapping[str, Any]) -> dict[str | int, str]:
        """Clip key -> clip path (relative to the suite) of everything the episode may play."""

    @abstractmethod
    def scheduler(self, scenario: Mapping[str, Any], lengths: Mapping[str | int, int]) -> Scheduler:
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
    #: the benchmark's :class:`ScoreEntry`: what :meth:`score_episode` returns and scorings store
    entry_model: ClassVar[type[ScoreEntry]]

    @abstractmethod
    def make_judge(self, spec: str | None) -> JudgeBackend:
        """The benchmark's judge for ``--judge SPEC`` (None: its offline default); raises a
        :class:`MPEError` naming the choices on an unknown one."""

    @abstractmethod
    def score_episode(self, episode: EpisodeLike, asr: TranscriberLike, judge: JudgeBackend,
                      cache: VerdictCacheLike) -> EntryT:
        """One episode's scoring entry (``episode``: a :class:`server.scoring.loading.LoadedEpisode`)."""

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
