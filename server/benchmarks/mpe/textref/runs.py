"""Deciding a suite with a text reference and storing it as a run (``mpe reference``), and the
run-to-run agreement of two such runs (``mpe reference agreement``).

A reference run is a run like any other (:func:`server.engine.leasing.record_decided_run`): model
name ``text-ref:NAME``, clock ``text``, pinned to its suite's content, finished when created, one
completed attempt per scenario version whose ``stats["text_reference"]`` holds the decisions
(:class:`.prompt.TextReference`). ``mpe score`` then builds its entries (:mod:`.entry`) and every
metric, test and table is the one speech models get.

Only the script is needed: the suite is checked without its audio (a text-only suite will do).
Decisions are asked ``concurrency`` at a time; each is cached by content hash (backend, model,
prompt version, history, repeat), so an interrupted command resumes without asking again, and a
history shared by both conditions (the turns before T) is asked once. With a grader, every answered
T is then graded by a separate call (:mod:`.grading`), cached the same way, and the grade is stored
with its decision. ``repeat`` asks everything again as a new, independent run (for the run-to-run
agreement).
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping

from pydantic import BaseModel
from sqlalchemy import select

from server.benchmarks.mpe import BENCHMARK as DUPLEX_MPE
from server.benchmarks.mpe.judging import PASSING
from server.benchmarks.mpe.rules import RESPONSE_LABELS
from server.benchmarks.mpe.stats import addressee_kind
from server.benchmarks.mpe.suite import CONDITIONS, Scenario, validate_suite
from server.benchmarks.mpe.textref.backends import ReferenceBackend
from server.benchmarks.mpe.textref.grading import AnswerGrader, GradeQuery
from server.benchmarks.mpe.textref.prompt import (
    DECISIONS,
    STATS_KEY,
    TextDecision,
    TextGrade,
    TextReference,
    parse_reply,
    queries,
    text_reference_of,
)
from server.core.benchmark import EpisodeSpec
from server.db import Attempt, Database, Episode, Run
from server.engine.clips import load_suite
from server.engine.leasing import BadRequest, DecidedEpisode, NotFound, record_decided_run
from server.scoring.judges import Verdict
from server.scoring.statistics import cohens_kappa
from server.scoring.store import Cache

MODEL_PREFIX = "text-ref:"
RULE_BASELINE_NAME = MODEL_PREFIX + "rule-baseline"
BENCHMARK = "duplex-mpe"
UNPARSEABLE = "UNPARSEABLE"
# The paper's run-to-run agreement of its text reference (two runs): 97.2 % of 48,542 decisions.
PUBLISHED_AGREEMENT = {"agreement": 0.972, "decisions": 48_542}

Progress = Callable[[int, int], None]


def reference_model_name(name: str | None, backend: ReferenceBackend) -> str:
    """The run's model name: ``text-ref:NAME`` (the prefix is added when missing). The rule
    backend's name must say it is a rule baseline (default ``text-ref:rule-baseline``)."""
    if name is None:
        return RULE_BASELINE_NAME if backend.name == "rule" else MODEL_PREFIX + backend.model
    name = name.strip()
    if not name.startswith(MODEL_PREFIX):
        name = MODEL_PREFIX + name
    if len(name) == len(MODEL_PREFIX) or len(name) > 100 or any(c.isspace() for c in name):
        raise BadRequest(f"model name {name!r}: text-ref:NAME with a NAME of up to {100 - len(MODEL_PREFIX)} "
                         "characters and no spaces")
    if backend.name == "rule" and "rule" not in name[len(MODEL_PREFIX):]:
        raise BadRequest(f"model name {name!r}: the rule backend is a rule baseline and its name must say so "
                         f"(e.g. {RULE_BASELINE_NAME})")
    return name


def _ask_all(asks: Mapping[str, tuple[BaseModel, Callable[[], Verdict]]], cache: Cache, concurrency: int,
             progress: Progress | None) -> dict[str, tuple[int, Verdict]]:
    """Every verdict of ``asks`` (content key -> (inputs, call)), ``concurrency`` calls in flight, from
    the cache when it holds it. An error stops it; what was answered is cached."""
    answers: dict[str, tuple[int, Verdict]] = {}
    if progress:
        progress(0, len(asks))
    with ThreadPoolExecutor(max(1, concurrency)) as pool:
        futures = {pool.submit(cache.cached, key, call, inputs): key for key, (inputs, call) in asks.items()}
        try:
            for f in as_completed(futures):
                answers[futures[f]] = f.result()
                if progress:
                    progress(len(answers), len(asks))
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    return answers


def grade_query(spec: EpisodeSpec[Scenario], d: TextDecision, repeat: int) -> GradeQuery | None:
    """The grading call's input for a decision: T answered with something; else None."""
    if d.label != "T" or d.decision != DECISIONS[0] or not (d.answer or "").strip():
        return None
    (t,) = [t for t in spec.scenario.turns if t.idx == d.turn_idx]
    return GradeQuery(question=t.text, gold_answer=spec.scenario.gold_answer, answer=d.answer or "",
                      repeat=repeat)


def decide_episodes(specs: list[EpisodeSpec[Scenario]], backend: ReferenceBackend, cache: Cache, *, repeat: int = 0,
                    concurrency: int = 1, progress: Progress | None = None) -> list[TextReference]:
    """Every decision of every scenario version, in turn order per version. Each distinct query is
    asked once (``concurrency`` in flight), from the cache when it holds it. A backend error (after
    the LLM layer's retries) stops it: what was answered is cached, so the same call resumes."""
    jobs = [(i, turn, q) for i, spec in enumerate(specs) for turn, q in queries(
        [t.model_dump(mode="json") for t in spec.scenario.turns], repeat)]
    answers = _ask_all({backend.cache_key(q): (q, lambda q=q: backend.decide(q)) for _, _, q in jobs}, cache,
                       concurrency, progress)
    per_spec: list[list[TextDecision]] = [[] for _ in specs]
    for i, turn, q in jobs:
        reply_id, v = answers[backend.cache_key(q)]
        per_spec[i].append(TextDecision(turn_idx=int(turn["idx"]), label=str(turn["label"]), decision=v.label,
                                        answer=parse_reply(v.raw)[1],
                                        reply_id=reply_id if cache.db is not None else None))
    info = backend.info()
    return [TextReference(info=info, repeat=repeat, decisions=ds) for ds in per_spec]


def grade_episodes(specs: list[EpisodeSpec[Scenario]], refs: list[TextReference], grader: AnswerGrader,
                   cache: Cache, *, concurrency: int = 1) -> list[TextReference]:
    """The decisions with the grading call's verdict on every answered T (:mod:`.grading`), each
    distinct grading query asked once, from the cache when it holds it; the grader named in their info."""
    graded = [(i, j, g) for i, (spec, ref) in enumerate(zip(specs, refs)) for j, d in enumerate(ref.decisions)
              if (g := grade_query(spec, d, ref.repeat)) is not None]
    grades = _ask_all({grader.cache_key(g): (g, lambda g=g: grader.grade(g)) for _, _, g in graded}, cache,
                      concurrency, None)
    decisions = [list(ref.decisions) for ref in refs]
    for i, j, g in graded:
        grade_id, v = grades[grader.cache_key(g)]
        decisions[i][j] = decisions[i][j].model_copy(update={"grade": TextGrade(
            label=v.label, verdict_id=grade_id if cache.db is not None else None)})  # type: ignore[arg-type]
    return [ref.model_copy(update={"info": ref.info.model_copy(update={"grader": grader.info()}), "decisions": ds})
            for ref, ds in zip(refs, decisions)]


@dataclass(frozen=True)
class Grading:
    """What the grading calls of ``mpe reference`` did (:mod:`.grading`)."""

    grader: str  # backend:model
    prompt_version: str
    answers: int  # answered T decisions graded
    asked: int  # distinct grading queries asked of the grader now
    cached: int  # of them, found in the cache
    correct: int
    incorrect: int
    unparseable: int  # no label: counts as incorrect (§6)


@dataclass
class ReferenceRun:
    """What ``mpe reference`` made: the run, and what its decisions were."""

    run_id: str
    model: str
    episodes: int
    decisions: int
    queries: int  # distinct queries (a history both conditions share is one)
    asked: int  # of them, asked of the backend now
    cached: int  # of them, found in the cache
    by_label: dict[str, dict[str, int]] = field(default_factory=dict)  # label -> {n, respond, unparseable}
    grading: Grading | None = None  # None: no grading call (the scoring's judge grades the answers)

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "model": self.model, "episodes": self.episodes, "decisions": self.decisions,
                "queries": self.queries, "asked": self.asked, "cached": self.cached, "by_label": self.by_label,
                "grading": asdict(self.grading) if self.grading else None}


def create_reference_run(db: Database, *, suite_path: str, backend: ReferenceBackend, model_name: str | None = None,
                         conditions: list[str] | None = None, limit: int | None = None, team: str = "local",
                         repeat: int = 0, concurrency: int = 1, progress: Progress | None = None,
                         grader: AnswerGrader | None = None) -> ReferenceRun:
    """Decide every evaluated utterance of the suite's scenario versions, grade the answers on T with
    ``grader`` (None: the scoring's judge will), and store the run."""
    if limit is not None and limit < 1:
        raise BadRequest("limit must be at least 1")
    if repeat < 0:
        raise BadRequest("repeat must be at least 0")
    loaded = load_suite(suite_path)
    if loaded.benchmark.name != BENCHMARK:
        raise BadRequest(f"the text reference is Duplex-MPE's; {suite_path} is a {loaded.benchmark.name} suite")
    suite = loaded.suite
    conditions = conditions or list(CONDITIONS)
    if any(c not in CONDITIONS for c in conditions):
        raise BadRequest(f"conditions must be a subset of {', '.join(CONDITIONS)}")
    problems = validate_suite(suite, check_audio=False)  # the script is all the reference reads
    if problems:
        raise BadRequest(f"suite {suite_path} is invalid: " + "; ".join(problems[:5]))
    name = reference_model_name(model_name, backend)
    specs = loaded.benchmark.episodes(suite, conditions, limit)
    if not specs:
        raise BadRequest("the suite has no scenario versions for these conditions")
    cache = Cache(db)
    refs = decide_episodes(specs, backend, cache, repeat=repeat, concurrency=concurrency, progress=progress)
    asked, cached = cache.calls["judge"], cache.calls["judge_hits"]
    grading = None
    if grader is not None:
        refs = grade_episodes(specs, refs, grader, cache, concurrency=concurrency)
        grades = [d.grade for ref in refs for d in ref.decisions if d.grade is not None]
        grading = Grading(f"{grader.name}:{grader.model}", grader.prompt_version, len(grades),
                          cache.calls["judge"] - asked, cache.calls["judge_hits"] - cached,
                          sum(g.label == PASSING["answer"] for g in grades),
                          sum(g.label is not None and g.label != PASSING["answer"] for g in grades),
                          sum(g.label is None for g in grades))
    info = refs[0].info
    revision = (f"{info.backend} {info.model} {info.prompt_version}"
                + (f" graded by {info.grader.backend} {info.grader.model} {info.grader.prompt_version}"
                   if info.grader else "") + (f" repeat {repeat}" if repeat else ""))
    run_id = record_decided_run(db, team=team, model=name, benchmark=loaded.benchmark.name, suite=suite,
                                conditions=conditions, limit=limit, revision=revision,
                                episodes=[DecidedEpisode(spec, {STATS_KEY: ref.model_dump(mode="json")})
                                          for spec, ref in zip(specs, refs)])
    by_label: dict[str, dict[str, int]] = {}
    for lab in RESPONSE_LABELS:
        ds = [d for ref in refs for d in ref.decisions if d.label == lab]
        by_label[lab] = {"n": len(ds), "respond": sum(d.decision == DECISIONS[0] for d in ds),
                         "unparseable": sum(d.decision is None for d in ds)}
    return ReferenceRun(run_id, name, len(specs), sum(len(r.decisions) for r in refs), asked + cached, asked, cached,
                        by_label, grading)


# --- run-to-run agreement ------------------------------------------------------------------------


@dataclass(frozen=True)
class Decided:
    """One utterance's decision in a reference run, with what the manifest says of the utterance."""

    label: str
    addressee: str | None
    decision: str | None


Key = tuple[str, str, int]  # (scenario id, condition, turn idx)


def load_decisions(db: Database, run_id: str) -> dict[Key, Decided]:
    """Every decision of a reference run by (scenario, condition, turn)."""
    with db.session() as s:
        if s.get(Run, run_id) is None:
            raise NotFound(f"no run {run_id}")
        rows = s.execute(select(Episode.id, Episode.scenario_id, Episode.condition, Episode.scenario, Attempt.stats)
                         .join(Attempt, Attempt.id == Episode.completed_attempt_id)
                         .where(Episode.run_id == run_id).order_by(Episode.ordinal)).all()
    out: dict[Key, Decided] = {}
    for eid, scenario_id, condition, scenario, stats in rows:
        ref = text_reference_of({"episode_id": eid, "stats": stats})
        if ref is None:
            raise BadRequest(f"run {run_id} is not a text reference run (mpe reference)")
        addressees = {t.idx: t.addressee for t in DUPLEX_MPE.snapshot(scenario, eid).turns}
        for d in ref.decisions:
            out[(scenario_id, condition, d.turn_idx)] = Decided(d.label, addressees.get(d.turn_idx), d.decision)
    if not out:
        raise BadRequest(f"run {run_id} has no text reference decisions")
    return out


def _cell(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    n, agree = len(pairs), sum(a == b for a, b in pairs)
    return {"n": n, "agree": agree, "agreement": round(agree / n, 6) if n else None}


def agreement(a: Mapping[Key, Decided], b: Mapping[Key, Decided]) -> dict[str, Any]:
    """How often two reference runs decide an utterance alike: over the utterances both decided
    (an unparseable decision is its own value), overall with Cohen's kappa, by condition, by label
    and by the utterance's addressee (the response decisions' groups)."""
    shared = sorted(set(a) & set(b))
    rows = [(k, a[k], (a[k].decision or UNPARSEABLE, b[k].decision or UNPARSEABLE)) for k in shared]
    pairs = [p for _, _, p in rows]
    kappa = cohens_kappa(pairs, (*DECISIONS, UNPARSEABLE))
    by_condition = {c: _cell([p for k, _, p in rows if k[1] == c]) for c in sorted({k[1] for k in shared})}
    by_label = {lab: _cell([p for _, d, p in rows if d.label == lab]) for lab in RESPONSE_LABELS}
    by_addressee = {lab: {kind: _cell([p for _, d, p in rows if d.label == lab and addressee_kind(d.addressee) == kind])
                          for kind in sorted({addressee_kind(d.addressee) for _, d, _ in rows if d.label == lab})}
                    for lab in RESPONSE_LABELS}
    flips = Counter(f"{x}->{y}" for x, y in pairs if x != y)
    return {**_cell(pairs), "kappa": None if kappa is None else round(kappa, 6),
            "only_a": len(set(a) - set(b)), "only_b": len(set(b) - set(a)),
            "unparseable": {"a": sum(p[0] == UNPARSEABLE for p in pairs), "b": sum(p[1] == UNPARSEABLE for p in pairs)},
            "changes": dict(sorted(flips.items())), "by_condition": by_condition, "by_label": by_label,
            "by_addressee": by_addressee, "published": PUBLISHED_AGREEMENT}
