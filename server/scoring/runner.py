"""The scoring runner: episodes in parallel across cores, progress, resumable.

A *scoring* is one pass over a run's completed episodes (or over a set of bundles) with
fixed settings (scoring version, detector, ASR and judge backends). Every scored episode is
written to the database as soon as it is done, so an interrupted scoring resumes where it
stopped: running ``mpe score`` again with the same settings reuses the scoring and only
does the episodes still missing. Transcripts and verdicts are cached across scorings by
content hash, so even a fresh scoring (``--fresh``) makes no new ASR or judge calls for
audio and inputs seen before.

The work is leased through the database (server/scoring/claims.py): every scorer, a worker
process of this ``mpe score`` or another ``mpe score`` of the same run on any machine, claims
the scoring's episodes one at a time with a lease it renews while it works, and stores each
entry in the transaction that marks its claim done. Scorers of one run therefore split its
episodes with none scored twice, and the episodes of a scorer that dies are taken over once
their lease expires. A scorer that runs out of work waits for the claims others still hold, so
every scorer ends with the scoring finished (or a claim failed).

Workers are separate processes (``spawn``), each with its own database engine and its own
ASR/judge instance loaded once; the parent only watches the claims for progress.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable

from sqlalchemy import select

from clients.errors import MPEError
from server.core.benchmark import Benchmark, JudgeBackend, ScoreEntry
from server.core.detector import DETECTOR_VERSION
from server.core.status import ACTIVE_RUN
from server.db import Database, Episode, Run, new_id
from server.engine.registry import DEFAULT, get_benchmark
from server.llm.usage import RUN_LEDGER, UsageLine, merged
from server.scoring.asr import make_asr
from server.scoring.claims import (
    Claim,
    ClaimCounts,
    WorkItem,
    claim_counts,
    claim_failures,
    claim_next,
    complete,
    fail,
    release,
    renew,
    seed_claims,
)
from server.scoring.errors import BadBundle, BadRules, ScoringError
from server.scoring.loading import find_bundles, load_bundle, load_db_episode, read_bundle
from server.scoring.store import Cache, ScoringStatus, finish_scoring, load_entries, open_scoring
from server.settings import Settings

Progress = Callable[[int, int], None]
#: how long a scorer holds an episode without renewing its lease (renewed every third of it)
LEASE_S: float = Settings.model_fields["scoring_lease_s"].default


@dataclass
class ScoreOptions:
    asr: str = "faster-whisper"
    judge: str = "rule"
    workers: int | None = None  # default: one per available core
    fresh: bool = False  # start a new scoring instead of resuming (caches still apply)
    lease_s: float = LEASE_S  # a killed scorer's episodes are taken over this long after its last renewal
    device: str | None = None  # ASR device: cpu | cuda | cuda:N | auto (None: the backend's default)
    rules: str | None = None  # the benchmark's rule set (Benchmark.rule_sets; None: its default)


@dataclass(frozen=True)
class Job:
    episode_id: str
    attempt_id: str | None
    path: str | None = None  # bundle directory; None = from the database
    benchmark: str = DEFAULT


@dataclass(frozen=True)
class JobResult:
    """What a worker reports of one episode: the ASR/judge calls it made, or why it failed."""

    episode_id: str
    error: str | None = None
    calls: dict[str, int] = field(default_factory=dict)
    entry: ScoreEntry | None = None
    llm: list[UsageLine] = field(default_factory=list)  # the LLM tokens it spent, per provider and model


@dataclass
class WorkReport:
    """What one scorer did in one scoring: episodes it stored, failed, or lost (its lease was taken
    over before it could store them), and its ASR/judge calls."""

    scored: int = 0
    failed: int = 0
    lost: int = 0
    calls: dict[str, int] = field(default_factory=lambda: {"asr": 0, "judge": 0, "asr_hits": 0, "judge_hits": 0})
    llm: list[UsageLine] = field(default_factory=list)

    def add(self, other: "WorkReport") -> None:
        self.scored, self.failed, self.lost = self.scored + other.scored, self.failed + other.failed, \
            self.lost + other.lost
        for k, v in other.calls.items():
            self.calls[k] = self.calls.get(k, 0) + v
        self.llm = merged(self.llm, other.llm)


@dataclass
class ScoringResult:
    scoring_id: str
    run_id: str | None
    config: dict[str, Any]
    metrics: dict[str, Any]
    analyses: dict[str, Any]
    episodes: list[ScoreEntry]
    failures: list[dict[str, str]] = field(default_factory=list)
    skipped: int = 0  # episodes found already scored (resumed)
    calls: dict[str, int] = field(default_factory=dict)
    llm_usage: list[UsageLine] = field(default_factory=list)  # LLM tokens and cost per provider and model
    scored_here: int = 0  # episodes this process's workers stored (the rest: other scorers, or before)
    claims: ClaimCounts = field(default_factory=ClaimCounts)
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The ``mpe score --json`` object."""
        return {"scoring_id": self.scoring_id, "run_id": self.run_id, "config": self.config,
                "metrics": self.metrics, "analyses": self.analyses,
                "episodes": [e.model_dump(mode="json") for e in self.episodes],
                "failures": self.failures, "warnings": self.warnings, "claims": self.claims.to_json(),
                "scored_here": self.scored_here,
                "llm_usage": [{**u.model_dump(), "cost_usd": u.cost_usd} for u in self.llm_usage]}


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def rule_set(bench: Benchmark, rules: str | None) -> str | None:
    """The rule set a scoring of ``bench`` judges by: ``rules``, or the benchmark's default (None for
    a benchmark without named rule sets); :class:`BadRules` naming the choices on another."""
    if not bench.rule_sets:
        if rules is not None:
            raise BadRules(f"--rules: {bench.name} has one fixed set of rules")
        return None
    if rules is None:
        return bench.rule_sets[0]
    if rules not in bench.rule_sets:
        raise BadRules(f"unknown rule set {rules!r} for {bench.name}; choose one of: {', '.join(bench.rule_sets)}")
    return rules


def scoring_config(asr_spec: str, judge_spec: str, bench: Benchmark | None = None,
                   device: str | None = None, rules: str | None = None) -> tuple[dict[str, Any], str]:
    """Build both backends (cheap: models load on first use) and describe the settings (the ASR
    device is not part of them: scorers on CPUs and GPUs share a scoring; the rule set is, for a
    benchmark that has several)."""
    bench = bench or get_benchmark(None)
    asr, judge = make_asr(asr_spec, device=device), bench.make_judge(judge_spec)
    config = {"scoring_version": bench.scoring_version, "detector": DETECTOR_VERSION, "asr": asr.describe(),
              "judge": judge.describe()}
    chosen = rule_set(bench, rules)
    if chosen is not None:
        config["rules"] = chosen
    if bench.name != DEFAULT:  # scorings made before benchmarks were plug-ins keep their hash
        config["benchmark"] = bench.name
    return config, hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


# --- the unit of work --------------------------------------------------------------------------


class _Worker:
    """One process's database handle, backends and cache."""

    def __init__(self, db_url: str, asr_spec: str, judge_spec: str, device: str | None = None,
                 db: Database | None = None, rules: str | None = None):
        self.db = db or Database(db_url, migrate=False)
        self.rules = rules
        self.asr = make_asr(asr_spec, device=device)
        self.judge_spec = judge_spec
        self.judges: dict[str, JudgeBackend] = {}  # benchmark name -> its judge
        self.cache = Cache(self.db)

    def judge(self, bench: Benchmark) -> JudgeBackend:
        if bench.name not in self.judges:
            self.judges[bench.name] = bench.make_judge(self.judge_spec)
        return self.judges[bench.name]

    def run(self, job: Job) -> JobResult:
        """Score one episode; the entry carries the id the scoring knows the episode by."""
        before = dict(self.cache.calls)
        try:
            ep = load_bundle(Path(job.path)) if job.path else load_db_episode(self.db, job.episode_id, job.attempt_id)
            bench = get_benchmark(job.benchmark)
            entry = bench.score_episode(ep, self.asr, self.judge(bench), self.cache, rule_set(bench, self.rules))
            entry = entry.model_copy(update={"episode_id": job.episode_id})
        except MPEError as exc:
            return JobResult(job.episode_id, error=f"{exc.code}: {exc}")
        except Exception as exc:  # one broken episode must not stop the others
            return JobResult(job.episode_id, error=f"{type(exc).__name__}: {exc}")
        return JobResult(job.episode_id, calls={k: v - before[k] for k, v in self.cache.calls.items()}, entry=entry,
                         llm=RUN_LEDGER.drain())


def scorer_name() -> str:
    """A claim owner unique to this scorer: host, process, and a random part."""
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{new_id()[:8]}"


class _Heartbeat:
    """Renews a claim's lease every third of it while its episode is scored (a thread)."""

    def __init__(self, db: Database, claim: Claim, lease_s: float):
        self.db, self.claim, self.lease_s = db, claim, lease_s
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True, name=f"lease {claim.episode_id}")

    def _beat(self) -> None:
        while not self.stopped.wait(self.lease_s / 3):
            try:
                if not renew(self.db, self.claim, self.lease_s):
                    return  # taken over: the result will not be stored
            except Exception:  # a passing database error: the next beat tries again
                continue

    def __enter__(self) -> "_Heartbeat":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join()


def work_claims(w: _Worker, scoring_id: str, benchmark: str, *, owner: str, lease_s: float,
                on_progress: Callable[[], None] | None = None) -> WorkReport:
    """Score the scoring's episodes as one scorer until none is left: claim one, score it with the
    lease renewed, store it with the claim's release; when nothing is claimable but others still
    hold claims, wait for them (and take over any whose lease expires)."""
    report = WorkReport()
    poll_s = min(1.0, lease_s / 4)
    while True:
        claim = claim_next(w.db, scoring_id, owner, lease_s)
        if claim is None:
            counts = claim_counts(w.db, scoring_id)
            if not counts.open:
                return report
            if on_progress:
                on_progress()
            time.sleep(poll_s)  # others hold the rest; theirs become claimable if their leases expire
            continue
        job = Job(claim.episode_id, claim.attempt_id, claim.path, benchmark)
        try:
            with _Heartbeat(w.db, claim, lease_s):
                r = w.run(job)
        except BaseException:  # interrupted: give the episode back at once
            release(w.db, claim)
            raise
        if r.entry is not None:
            stored = complete(w.db, claim, r.entry)
            report.scored += stored
        else:
            stored = fail(w.db, claim, r.error or "failed")
            report.failed += stored
        report.lost += not stored
        for k, v in r.calls.items():
            report.calls[k] += v
        report.llm = merged(report.llm, r.llm)
        if on_progress:
            on_progress()


def _work_in_process(db_url: str, asr_spec: str, judge_spec: str, device: str | None, scoring_id: str,
                     benchmark: str, lease_s: float, rules: str | None = None) -> WorkReport:
    """A worker process's whole share of a scoring (the pool's one task per process)."""
    w = _Worker(db_url, asr_spec, judge_spec, device, rules=rules)
    try:
        return work_claims(w, scoring_id, benchmark, owner=scorer_name(), lease_s=lease_s)
    finally:
        w.db.dispose()


# --- entry points ------------------------------------------------------------------------------


def run_jobs(db: Database, run_id: str) -> tuple[list[Job], list[str]]:
    """Completed episodes of a run (completed attempts only), and warnings."""
    with db.session() as s:
        run = s.get(Run, run_id)
        if run is None:
            raise ScoringError(f"no run {run_id!r} in {_redact(db.url)}", code="not_found")
        rows = s.execute(select(Episode.id, Episode.completed_attempt_id, Episode.status)
                         .where(Episode.run_id == run_id).order_by(Episode.ordinal)).all()
        status, bench = run.status, run.benchmark
    jobs = [Job(r.id, r.completed_attempt_id, benchmark=bench) for r in rows
            if r.status == "completed" and r.completed_attempt_id]
    warnings = []
    if status in ACTIVE_RUN:
        warnings.append(f"run {run_id} is still {status}: scoring the {len(jobs)} episodes completed so far")
    failed = sum(r.status == "failed" for r in rows)
    if failed:
        warnings.append(f"{failed} episodes of run {run_id} failed and are not scored")
    if not jobs:
        raise ScoringError(f"run {run_id} has no completed episodes to score")
    return jobs, warnings


def bundle_jobs(paths: list[Path]) -> list[Job]:
    jobs: dict[str, Job] = {}
    for p in find_bundles(paths):
        bundle = read_bundle(p)
        eid = bundle.episode_id
        if eid in jobs:
            continue  # the same episode given twice
        jobs[eid] = Job(eid, bundle.attempt_id, str(p.resolve()), bundle.benchmark or DEFAULT)
    if len({j.benchmark for j in jobs.values()}) > 1:
        raise BadBundle("the bundles belong to different benchmarks; score each benchmark's bundles separately")
    return list(jobs.values())


def score_run(db: Database, run_id: str, opts: ScoreOptions = ScoreOptions(),
              progress: Progress | None = None) -> ScoringResult:
    jobs, warnings = run_jobs(db, run_id)
    res = _score(db, jobs, source_key=run_id, run_id=run_id, opts=opts, progress=progress)
    res.warnings = warnings + res.warnings
    return res


def score_bundles(db: Database, paths: list[Path], opts: ScoreOptions = ScoreOptions(),
                  progress: Progress | None = None) -> ScoringResult:
    jobs = bundle_jobs(paths)
    key = hashlib.sha256("\n".join(sorted(f"{j.episode_id}:{j.attempt_id}" for j in jobs)).encode()).hexdigest()
    return _score(db, jobs, source_key="bundles:" + key[:55], run_id=None, opts=opts, progress=progress)


def _score(db: Database, jobs: list[Job], *, source_key: str, run_id: str | None, opts: ScoreOptions,
           progress: Progress | None) -> ScoringResult:
    t0 = time.monotonic()
    bench = get_benchmark(jobs[0].benchmark if jobs else None)
    config, config_hash = scoring_config(opts.asr, opts.judge, bench, rules=opts.rules)
    scoring_id, _ = open_scoring(db, source_key=source_key, run_id=run_id, config=config, config_hash=config_hash,
                                 n_episodes=len(jobs), fresh=opts.fresh)
    skipped = seed_claims(db, scoring_id, [WorkItem(j.episode_id, j.attempt_id, j.path) for j in jobs])
    counts = claim_counts(db, scoring_id)

    def show() -> None:
        if progress:
            c = claim_counts(db, scoring_id)
            progress(c.finished, c.total)

    if progress:
        progress(counts.finished, counts.total)
    report = WorkReport()
    n_workers = max(1, min(opts.workers or available_cores(), counts.open))
    if n_workers == 1:  # also when the others' claims are all that is left: wait for them here
        w = _Worker(db.url, opts.asr, opts.judge, opts.device, db=db, rules=opts.rules)
        report = work_claims(w, scoring_id, bench.name, owner=scorer_name(), lease_s=opts.lease_s, on_progress=show)
    else:
        with ProcessPoolExecutor(n_workers, mp_context=get_context("spawn")) as pool:
            pending: set[Future] = {pool.submit(_work_in_process, db.url, opts.asr, opts.judge, opts.device,
                                                scoring_id, bench.name, opts.lease_s, opts.rules)
                                    for _ in range(n_workers)}
            try:
                while pending:
                    finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                    for f in finished:
                        report.add(f.result())
                    show()
            except BaseException:
                for f in pending:
                    f.cancel()
                raise

    ids = {j.episode_id for j in jobs}
    entries = sorted(load_entries(db, scoring_id, bench.entry_model, ids),
                     key=lambda e: (e.model, e.scenario_id, e.condition, e.episode_id))
    counts = claim_counts(db, scoring_id)
    failures = [f for f in claim_failures(db, scoring_id) if f["episode_id"] in ids]
    if failures or counts.open:
        finish_scoring(db, scoring_id, None, ScoringStatus.incomplete)
        metrics, an = {}, {}
    else:
        metrics = bench.metrics(entries)
        an = bench.analyses(entries, metrics)
        finish_scoring(db, scoring_id, {"metrics": metrics, "analyses": an}, ScoringStatus.complete)
    return ScoringResult(scoring_id=scoring_id, run_id=run_id, config=config, metrics=metrics, analyses=an,
                         episodes=entries, failures=failures, skipped=skipped, calls=report.calls,
                         llm_usage=report.llm, seconds=time.monotonic() - t0, scored_here=report.scored, claims=counts)


def scoring_state(db: Database, run_id: str, asr_spec: str, judge_spec: str,
                  rules: str | None = None) -> tuple[str, ClaimCounts] | None:
    """The latest scoring of a run with these settings and where its work stands, or None."""
    from server.scoring.store import latest_scoring

    with db.session() as s:
        run = s.get(Run, run_id)
        if run is None:
            raise ScoringError(f"no run {run_id!r} in {_redact(db.url)}", code="not_found")
        _, config_hash = scoring_config(asr_spec, judge_spec, get_benchmark(run.benchmark), rules=rules)
        row = latest_scoring(s, run_id, config_hash)
    return None if row is None else (row.id, claim_counts(db, row.id))


def _redact(url: str) -> str:
    """A database URL without its password."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}@{host}"
    return url
