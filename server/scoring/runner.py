"""The scoring runner: episodes in parallel across cores, progress, resumable.

A *scoring* is one pass over a run's completed episodes (or over a set of bundles) with
fixed settings (scoring version, detector, ASR and judge backends). Every scored episode is
written to the database as soon as it is done, so an interrupted scoring resumes where it
stopped: running ``mpe score`` again with the same settings reuses the scoring and only
does the episodes still missing. Transcripts and verdicts are cached across scorings by
content hash, so even a fresh scoring (``--fresh``) makes no new ASR or judge calls for
audio and inputs seen before.

Workers are separate processes (``spawn``), each with its own database engine and its own
ASR/judge instance loaded once; the parent only hands out episode ids and gathers counts.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable

from sqlalchemy import select

from clients.errors import MPEError
from server.core.benchmark import Benchmark, ScoreEntry
from server.core.detector import DETECTOR_VERSION
from server.core.status import ACTIVE_RUN
from server.db import Database, Episode, Run
from server.engine.registry import DEFAULT, get_benchmark
from server.scoring.asr import make_asr
from server.scoring.errors import BadBundle, ScoringError
from server.scoring.judges import make_judge
from server.scoring.loading import find_bundles, load_bundle, load_db_episode, read_episode_json
from server.scoring.store import (
    Cache,
    ScoringStatus,
    done_episodes,
    finish_scoring,
    load_entries,
    open_scoring,
    save_episode,
)

Progress = Callable[[int, int], None]


@dataclass
class ScoreOptions:
    asr: str = "faster-whisper"
    judge: str = "rule"
    workers: int | None = None  # default: one per available core
    fresh: bool = False  # start a new scoring instead of resuming (caches still apply)


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
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The ``mpe score --json`` object."""
        return {"scoring_id": self.scoring_id, "run_id": self.run_id, "config": self.config,
                "metrics": self.metrics, "analyses": self.analyses,
                "episodes": [e.model_dump(mode="json") for e in self.episodes],
                "failures": self.failures, "warnings": self.warnings}


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def scoring_config(asr_spec: str, judge_spec: str, bench: Benchmark | None = None) -> tuple[dict[str, Any], str]:
    """Build both backends (cheap: models load on first use) and describe the settings."""
    bench = bench or get_benchmark(None)
    asr, judge = make_asr(asr_spec), make_judge(judge_spec)
    config = {"scoring_version": bench.scoring_version, "detector": DETECTOR_VERSION, "asr": asr.describe(),
              "judge": judge.describe()}
    if bench.name != DEFAULT:  # scorings made before benchmarks were plug-ins keep their hash
        config["benchmark"] = bench.name
    return config, hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


# --- the unit of work --------------------------------------------------------------------------


class _Worker:
    """One process's database handle, backends and cache."""

    def __init__(self, db_url: str, asr_spec: str, judge_spec: str, db: Database | None = None):
        self.db = db or Database(db_url, migrate=False)
        self.asr = make_asr(asr_spec)
        self.judge = make_judge(judge_spec)
        self.cache = Cache(self.db)

    def run(self, scoring_id: str, job: Job) -> JobResult:
        before = dict(self.cache.calls)
        try:
            ep = load_bundle(Path(job.path)) if job.path else load_db_episode(self.db, job.episode_id, job.attempt_id)
            entry = get_benchmark(job.benchmark).score_episode(ep, self.asr, self.judge, self.cache)
            # the id the scoring knows it by
            save_episode(self.db, scoring_id, entry.model_copy(update={"episode_id": job.episode_id}))
        except MPEError as exc:
            return JobResult(job.episode_id, error=f"{exc.code}: {exc}")
        except Exception as exc:  # one broken episode must not stop the others
            return JobResult(job.episode_id, error=f"{type(exc).__name__}: {exc}")
        return JobResult(job.episode_id, calls={k: v - before[k] for k, v in self.cache.calls.items()})


_worker: _Worker | None = None


def _init_worker(db_url: str, asr_spec: str, judge_spec: str) -> None:
    global _worker
    _worker = _Worker(db_url, asr_spec, judge_spec)


def _run_job(scoring_id: str, job: Job) -> JobResult:
    assert _worker is not None
    return _worker.run(scoring_id, job)


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
        doc = read_episode_json(p, ("episode_id",))
        eid = str(doc["episode_id"])
        if eid in jobs:
            continue  # the same episode given twice
        jobs[eid] = Job(eid, doc.get("attempt_id"), str(p.resolve()), str(doc.get("benchmark") or DEFAULT))
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
    config, config_hash = scoring_config(opts.asr, opts.judge, bench)
    scoring_id, _ = open_scoring(db, source_key=source_key, run_id=run_id, config=config, config_hash=config_hash,
                                 n_episodes=len(jobs), fresh=opts.fresh)
    done = done_episodes(db, scoring_id)
    todo = [j for j in jobs if j.episode_id not in done or done[j.episode_id] != j.attempt_id]
    skipped = len(jobs) - len(todo)
    total = len(jobs)
    if progress:
        progress(skipped, total)
    calls = {"asr": 0, "judge": 0, "asr_hits": 0, "judge_hits": 0}
    failures: list[dict[str, str]] = []

    def collect(r: JobResult, n_done: int) -> None:
        if r.error is not None:
            failures.append({"episode_id": r.episode_id, "error": r.error})
        for k, v in r.calls.items():
            calls[k] += v
        if progress:
            progress(n_done, total)

    n_workers = max(1, min(opts.workers or available_cores(), len(todo)))
    n_done = skipped
    if n_workers == 1:
        w = _Worker(db.url, opts.asr, opts.judge, db=db)
        for job in todo:
            n_done += 1
            collect(w.run(scoring_id, job), n_done)
    elif todo:
        with ProcessPoolExecutor(n_workers, mp_context=get_context("spawn"), initializer=_init_worker,
                                 initargs=(db.url, opts.asr, opts.judge)) as pool:
            pending: set[Future] = set()
            queue = list(todo)
            try:
                # Keep at most two jobs per worker queued, so an interrupt loses little.
                while queue or pending:
                    while queue and len(pending) < 2 * n_workers:
                        pending.add(pool.submit(_run_job, scoring_id, queue.pop(0)))
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in finished:
                        n_done += 1
                        collect(f.result(), n_done)
            except BaseException:
                for f in pending:
                    f.cancel()
                raise

    ids = {j.episode_id for j in jobs}
    entries = sorted(load_entries(db, scoring_id, bench.entry_model, ids),
                     key=lambda e: (e.model, e.scenario_id, e.condition, e.episode_id))
    if failures:
        finish_scoring(db, scoring_id, None, ScoringStatus.incomplete)
        metrics, an = {}, {}
    else:
        metrics = bench.metrics(entries)
        an = bench.analyses(entries, metrics)
        finish_scoring(db, scoring_id, {"metrics": metrics, "analyses": an}, ScoringStatus.complete)
    return ScoringResult(scoring_id=scoring_id, run_id=run_id, config=config, metrics=metrics, analyses=an,
                         episodes=entries, failures=failures, skipped=skipped, calls=calls,
                         seconds=time.monotonic() - t0)


def _redact(url: str) -> str:
    """A database URL without its password."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}@{host}"
    return url
