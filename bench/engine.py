#!/usr/bin/env python
"""Engine benchmark: lockstep throughput and realtime pacing, end to end.

The real server (``BackgroundServer``: FastAPI + uvicorn, the ``/v1/bridge`` WebSocket,
leasing, scheduler, speech detector, recording to the database) runs in this process; N
reference bridges (``clients.sdk.BridgeClient``) connect to it over loopback WebSockets,
from this process's event loop or (realtime ``--rt-hosts process``, and ``limits``) from one
process of their own. Nothing is mocked or switched off.

Parts (``--parts``):

``lockstep``
    Throughput in stream-seconds per wall-second (DESIGN §4 lockstep clock) with the
    ``silent`` and the ``always-talk`` bridge, for 1 and for 8 concurrent episodes, on
    SQLite and on PostgreSQL. Concurrency = N bridges connected at once serving a run of
    ``max(N × --ls-episodes-per-bridge, --ls-min-episodes)`` episodes. Wall time is the
    span from the first attempt's start to the last attempt's end (``attempts`` table).
``realtime``
    Pacing of the realtime clock (§4: room frame n at t0 + n·80 ms on absolute monotonic
    deadlines) with 1, 16 and 64 concurrent episodes: the send-time error of every room
    frame against its ideal time, ``sent_us - seq·80000`` from the ``frames`` table
    (p50/p99/max), and the cumulative drift after ``--rt-seconds`` of stream.
``bare``
    The pacing baseline of the realtime part: a bare WebSocket server that sends the same
    bridges room frames on the same deadlines and reads their answers, nothing else.
``limits``
    Lockstep per process (the bridge in a process of its own, SQLite): the ``silent`` bridge
    against the loopback round-trip limit (a bare server playing lockstep with it) and the
    ``always-talk`` bridge against the one-core detector limit (the detector alone on its
    speech), both measured in the same run.
``naive``
    The same measurement with the same server, bridges, suite and per-frame work, but the
    session's realtime loop replaced by the naive ``send; await asyncio.sleep(0.08)``
    loop that §11 warns against, as the baseline (ratio naive drift / ours).

Drift of one episode = median error of the 25 frames (2 s) centred on the frame at the
horizon (seq = rt_seconds / 0.08) minus the median error of its first 25 frames.

Usage::

    python bench/engine.py                       # everything (about 25 minutes)
    python bench/engine.py --quick               # smoke run, under a minute
    python bench/engine.py --parts realtime,naive --rt-concurrency 64 --json out.json

The TTS clip cache (piper, offline) lives in ``--cache-dir`` (default: the server's data
dir, ``.mpe``); databases, suites and PostgreSQL schemas are temporary and removed at
the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import logging
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

if __package__ in (None, ""):  # ``python bench/engine.py`` without an installed checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import soundfile as sf
import sqlalchemy as sa
from sqlalchemy import select

from clients.codec import STREAM_RATE, frame_samples
from clients.messages import EpisodeStart
from clients.sdk import BaseBridge, Bridge, BridgeClient, BridgeOptions
from server.app import BackgroundServer
from server.auth import create_token
from server.benchmarks.mpe.suite import Preamble, Scenario, SuiteMeta, Turn, write_suite
from server.core.status import RunStatus
from server.db import Attempt, BridgeRow, Database, Episode, FrameRow
from server.engine import bridge_ws
from server.engine.leasing import cancel_run, create_run
from server.engine.progress import run_progress
from server.engine.session import EpisodeSession
from server.settings import Settings
from server.tts import DEFAULT_VOICES, ClipCache, get_engine

FRAME = frame_samples(STREAM_RATE)  # 1920 samples = 80 ms
PERIOD_S = FRAME / STREAM_RATE  # 0.08
PERIOD_US = FRAME * 1_000_000 // STREAM_RATE  # 80_000
DEFAULT_PG_URL = os.environ.get("MPE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TEAM = "bench"
DRIFT_WINDOW = 25  # frames (2 s) whose median error stands for "the error at" a time

log = logging.getLogger("mpe.bench")


# --- the benchmark suite ----------------------------------------------------------------

PREAMBLE_TEXT = "You are Aria, the assistant in this room. Answer only when someone asks you something directly."
SENTENCES = [
    "I think we should leave a bit earlier tomorrow, the traffic on the bridge was terrible today.",
    "Did anyone remember to buy milk on the way home, or do I have to go out again?",
    "The meeting moved to Thursday afternoon, so the Wednesday slot is free again.",
    "Hmm, where did I put the charger for the camera, it was here a minute ago.",
    "My sister says the new bakery on the corner does the best bread in town.",
    "We still have to decide who is cooking on Saturday, I did it last week.",
    "Aria is on the shelf next to the radio, so the kitchen has coverage now.",
    "Could you pass me the blue folder, the one with the insurance papers in it?",
    "I wonder whether the garden centre is open on public holidays.",
    "The train was twenty minutes late again, third time this week.",
    "Let's put the plants on the balcony, they need more light than they get in here.",
    "Okay, so the plan is the museum in the morning and lunch by the harbour.",
]
T_TEXT = "Aria, how long does it take to boil an egg?"
SPEAKERS = ("A", "B", "C")


@dataclass
class SuiteInfo:
    path: Path
    n_pairs: int
    nominal_s: float  # stream length with a bridge that never speaks
    n_turns: int


def build_bench_suite(root: Path, cache_dir: Path, *, target_s: float, n_pairs: int, name: str) -> SuiteInfo:
    """A valid suite (DESIGN §2) whose scenarios last at least ``target_s`` of stream time.

    Real speech (piper, cached in ``cache_dir``). All ``n_pairs`` pairs share one set of
    clips: turn i is sentence i mod 12 spoken by speaker A/B/C in turn; T is the
    penultimate turn, so that with the silent bridge its 5 s no-response wait (§3) comes
    after the measured span; the last turn is an N2.
    """
    engine, cache = get_engine("piper"), ClipCache(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    clips: dict[tuple[str, str], tuple[str, float]] = {}

    def clip(text: str, speaker: str) -> tuple[str, float]:
        if (text, speaker) not in clips:
            pcm = cache.synthesize(engine, text, DEFAULT_VOICES[speaker])
            rel = f"clips/{len(clips):03d}.wav"
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            sf.write(str(root / rel), pcm, STREAM_RATE, subtype="PCM_16")
            clips[(text, speaker)] = (rel, len(pcm) / STREAM_RATE)
        return clips[(text, speaker)]

    pre_rel, pre_s = clip(PREAMBLE_TEXT, "B")
    t_rel, t_s = clip(T_TEXT, "C")
    # §3 with a bridge that never speaks: preamble + 0.5 s; every clip + 0.5 s, except T,
    # which is followed by the 5 s wait for an onset.
    lines: list[tuple[str, str, str, str, float]] = []  # speaker, label, text, clip, duration
    nominal = pre_s + 0.5 + t_s + 5.0
    i = 0
    while nominal < target_s or len(lines) < 2:
        speaker, text = SPEAKERS[i % 3], SENTENCES[i % len(SENTENCES)]
        rel, d = clip(text, speaker)
        lines.append((speaker, "N3" if i % 4 == 3 else "N2", text, rel, d))
        nominal += d + 0.5
        i += 1
    # T is penultimate: insert it before the last line.
    lines.insert(len(lines) - 1, ("C", "T", T_TEXT, t_rel, t_s))
    turns = [Turn(idx=k, speaker=s, label=lab, text=txt, clip=rel, duration_s=d,
                  addressee=("Aria" if lab == "T" else None if lab == "N3" else "group"))
             for k, (s, lab, txt, rel, d) in enumerate(lines)]
    scenarios = []
    for p in range(n_pairs):
        for cond in ("explicit", "implicit"):
            scenarios.append(Scenario(
                scenario_id=f"b{p:04d}", pair_id=f"bp{p:04d}", condition=cond, n_speakers=3, t_bucket="late",
                attributes={"setting": "benchmark"}, gold_answer="About seven minutes",
                answer_keys=[["seven", "7"]], turns=turns))
    meta = SuiteMeta(name=name, version="1", generator="bench/engine.py", seed=0,
                     voices={s: DEFAULT_VOICES[s] for s in SPEAKERS},
                     preamble=Preamble(text=PREAMBLE_TEXT, clip=pre_rel, duration_s=pre_s))
    write_suite(root, meta, scenarios)
    return SuiteInfo(root, n_pairs, round(nominal, 2), len(turns))


# --- databases and the in-process server ------------------------------------------------


@contextlib.contextmanager
def database_url(kind: str, workdir: Path, pg_url: str) -> Iterator[str]:
    """A fresh, empty database: a new SQLite file, or a new PostgreSQL schema dropped afterwards."""
    if kind == "sqlite":
        path = workdir / f"mpe-{uuid.uuid4().hex[:8]}.db"
        yield f"sqlite:///{path}"
        return
    schema = "bench_" + uuid.uuid4().hex[:12]
    admin = sa.create_engine(pg_url)
    try:
        with admin.begin() as c:
            c.execute(sa.text(f"CREATE SCHEMA {schema}"))
        sep = "&" if "?" in pg_url else "?"
        yield f"{pg_url}{sep}options=-csearch_path%3D{schema}"
    finally:
        try:
            with admin.begin() as c:
                c.execute(sa.text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        finally:
            admin.dispose()


@dataclass
class Env:
    db: Database
    server: BackgroundServer
    token: str
    db_kind: str


@contextlib.asynccontextmanager
async def bench_env(db_kind: str, workdir: Path, pg_url: str) -> AsyncIterator[Env]:
    with database_url(db_kind, workdir, pg_url) as url:
        data_dir = workdir / f"data-{uuid.uuid4().hex[:8]}"
        # defaults (or MPE_* from the environment), but room for every bridge of the largest case
        settings = Settings(data_dir=data_dir, DATABASE_URL=url)
        settings = settings.model_copy(update={"max_bridges_per_team": max(settings.max_bridges_per_team, 256)})
        db = await asyncio.to_thread(Database, url)
        try:
            token = await asyncio.to_thread(create_token, db, TEAM, label="bench")
            async with BackgroundServer(settings) as server:
                yield Env(db, server, token, db_kind)
        finally:
            db.dispose()


class Tracked(Bridge):
    """Wraps a reference bridge and remembers the last room frame it was given."""

    blocking = False

    def __init__(self, inner: BaseBridge):
        super().__init__()
        self.inner = inner
        self.name, self.revision = inner.name, inner.revision
        self.sample_rate, self.clocks = inner.sample_rate, inner.clocks
        self.last_seq = -1

    def reset(self, episode: EpisodeStart) -> None:
        self.last_seq = -1
        self.inner.episode = episode
        self.inner.reset(episode)

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        self.last_seq = seq
        return self.inner.step(seq, room)


def make_bridges(name: str, n: int, cache_dir: Path) -> list[Tracked]:
    from server.cli.bridges import create_bridge

    return [Tracked(create_bridge(name, data_dir=str(cache_dir))) for _ in range(n)]


@contextlib.asynccontextmanager
async def connected(url: str, token: str, bridges: list[Tracked]) -> AsyncIterator[list[asyncio.Task]]:
    clients = [BridgeClient(b, BridgeOptions(server=url, token=token, reconnect=False)) for b in bridges]
    tasks = [asyncio.create_task(c.run()) for c in clients]
    try:
        yield tasks
    finally:
        for c in clients:
            c.stop()
        await asyncio.gather(*tasks, return_exceptions=True)


async def bridge_host(server: str, token: str, n: int, name: str, cache_dir: Path, *, reconnect: bool = True,
                      progress: Path | None = None) -> None:
    """The bridge process: ``n`` bridges connected until SIGTERM. With ``progress``, every 0.25 s
    it writes there (JSON, atomically) how far the bridges still running have got (the smallest
    last room seq among them), how many are running and what stopped the others."""
    bridges = await asyncio.to_thread(make_bridges, name, n, cache_dir)
    clients = [BridgeClient(b, BridgeOptions(server=server, token=token, backoff_min_s=0.1, reconnect=reconnect))
               for b in bridges]
    tasks = [asyncio.create_task(c.run()) for c in clients]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    while not stop.is_set():
        if progress is not None:
            alive = [b for b, t in zip(bridges, tasks) if not t.done()]
            write_json(progress, {"alive": len(alive), "min_last_seq": min((b.last_seq for b in alive), default=-1),
                                  "errors": bridge_errors(tasks)})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.25)
    for c in clients:
        c.stop()
    await asyncio.gather(*tasks, return_exceptions=True)


class BridgeProcess:
    """``n`` reference bridges in a process of their own (``bridge_host``), connected to ``server``
    without reconnecting (a bridge that is disconnected is reported, not hidden)."""

    def __init__(self, server: str, token: str, n: int, name: str, cache_dir: Path, workdir: Path):
        self.progress_path = workdir / f"bridges-{uuid.uuid4().hex[:8]}.json"
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--bridge-host", "--server", server, "--bridges", str(n),
             "--bridge", name, "--cache-dir", str(cache_dir), "--progress", str(self.progress_path)],
            env=dict(os.environ, MPE_TOKEN=token), cwd=Path(__file__).resolve().parent.parent)

    def progress(self) -> dict[str, Any]:
        try:
            return json.loads(self.progress_path.read_text())
        except (OSError, ValueError):
            return {"alive": None, "min_last_seq": -1, "errors": []}

    def cpu_s(self) -> float:
        return process_cpu_s(self.proc.pid)

    def stop(self) -> None:
        stop_process(self.proc)


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (Linux /proc), 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 60 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def bridge_errors(tasks: list[asyncio.Task]) -> list[str]:
    """What ended the bridges that have stopped on their own (the benchmark carries on without them)."""
    return [repr(t.exception())[:300] for t in tasks if t.done() and not t.cancelled() and t.exception()]


def _machine_busy_s() -> float | None:
    """CPU-seconds all processes on the machine have used so far (Linux /proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU over a span of wall time: this process (all threads), its event-loop thread, and
    everything else on the machine (the machine is shared; other load skews the figures)."""

    def __enter__(self) -> "CpuMeter":
        self.wall0, self.main0, self.machine0 = time.monotonic(), time.thread_time(), _machine_busy_s()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        self.proc0 = ru.ru_utime + ru.ru_stime
        return self

    def __exit__(self, *exc) -> None:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        self.wall = time.monotonic() - self.wall0
        self.proc = ru.ru_utime + ru.ru_stime - self.proc0
        self.main = time.thread_time() - self.main0
        m = _machine_busy_s()
        self.others = None if m is None or self.machine0 is None else max(0.0, m - self.machine0 - self.proc)
        self.load = os.getloadavg()[0]

    def figures(self) -> dict[str, float | None]:
        w = max(self.wall, 1e-9)
        return {"cpu_process_pct": round(100 * self.proc / w, 1), "cpu_loop_thread_pct": round(100 * self.main / w, 1),
                "cpu_other_threads_pct": round(100 * (self.proc - self.main) / w, 1),
                "cpu_other_processes_pct": None if self.others is None else round(100 * self.others / w, 1),
                "loadavg_1min_at_end": round(self.load, 2)}


class LoopLag:
    """Event-loop responsiveness: how late a task that sleeps ``interval_s`` wakes up."""

    def __init__(self, interval_s: float = 0.01):
        self.interval_s = interval_s
        self.lags: list[float] = []
        self.task: asyncio.Task | None = None

    async def _probe(self) -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(self.interval_s)
            self.lags.append(time.monotonic() - t - self.interval_s)

    def __enter__(self) -> "LoopLag":
        self.task = asyncio.get_running_loop().create_task(self._probe())
        return self

    def __exit__(self, *exc) -> None:
        if self.task:
            self.task.cancel()

    def figures(self) -> dict[str, float | None]:
        if not self.lags:
            return {"loop_lag_p50_ms": None, "loop_lag_p99_ms": None, "loop_lag_max_ms": None}
        a = 1000 * np.array(self.lags)
        return {"loop_lag_p50_ms": round(float(np.percentile(a, 50)), 2),
                "loop_lag_p99_ms": round(float(np.percentile(a, 99)), 2), "loop_lag_max_ms": round(float(a.max()), 2)}


def attempt_rows(db: Database, run_id: str) -> list[Attempt]:
    with db.session() as s:
        return list(s.scalars(select(Attempt).join(Episode, Episode.id == Attempt.episode_id)
                              .where(Episode.run_id == run_id)))


def _span_s(rows: list[Attempt]) -> float:
    def utc(d: datetime) -> datetime:
        return d if d.tzinfo else d.replace(tzinfo=timezone.utc)

    start = min(utc(a.started_at) for a in rows)
    end = max(utc(a.ended_at) for a in rows if a.ended_at is not None)
    return (end - start).total_seconds()


# --- part 1: lockstep throughput --------------------------------------------------------


async def lockstep_case(env: Env, suite: SuiteInfo, bridge: str, n: int, episodes: int, cache_dir: Path,
                        timeout_s: float, *, host: str = "inprocess", args=None, workdir: Path | None = None
                        ) -> dict[str, Any]:
    """One lockstep run; the bridges in this process, or (``host="process"``, then ``args`` and
    ``workdir`` are needed) in one of their own, connected before the run is queued."""
    args = args or argparse.Namespace(cache_dir=cache_dir, rt_bridge=bridge)
    async with bridges_at(args, host, env.server.url, env.token, n, workdir or Path(tempfile.gettempdir()),
                          bridge=bridge) as progress:
        if host == "process":
            await wait_connected(env.db, n, progress)
        run_id = await asyncio.to_thread(create_run, env.db, team=TEAM, model=bridge, suite_path=str(suite.path),
                                         clock="lockstep", conditions=["explicit"], limit=episodes)
        with CpuMeter() as cpu:
            deadline = time.monotonic() + timeout_s
            while True:
                p = await asyncio.to_thread(run_progress, env.db, run_id)
                # Done when every episode is; the run's own status is reported, not waited for.
                if p.done == p.total:
                    break
                if not progress().alive or time.monotonic() > deadline:
                    await asyncio.to_thread(cancel_run, env.db, run_id)
                    raise TimeoutError(f"lockstep run {bridge} x{n} did not finish ({p}); "
                                       f"bridge errors: {progress().errors}")
                await asyncio.sleep(0.1)
            errors = progress().errors
    rows = await asyncio.to_thread(attempt_rows, env.db, run_id)
    await asyncio.sleep(0.5)
    run_status = (await asyncio.to_thread(run_progress, env.db, run_id)).status
    if run_status != RunStatus.finished:
        log.warning("lockstep %s %s x%d: every episode is done but the run is %s", env.db_kind, bridge, n, run_status)
    done = [a for a in rows if a.status == "completed"]
    stream_s = sum(a.n_frames for a in done) * PERIOD_S
    wall_s = _span_s(rows)
    return {
        "db": env.db_kind, "bridge": bridge, "concurrency": n, "episodes": len(done),
        "failed_attempts": len(rows) - len(done), "bridge_errors": errors, "run_status": run_status,
        "stream_s": round(stream_s, 1), "wall_s": round(wall_s, 2),
        "stream_s_per_wall_s": round(stream_s / wall_s, 1),
        "per_episode_x_realtime": round(stream_s / wall_s / n, 1),
        "frames_per_s": round(stream_s / PERIOD_S / wall_s),
        **cpu.figures(),
    }


def _episodes(args, n: int) -> int:
    return max(n * args.ls_episodes_per_bridge, args.ls_min_episodes)


async def run_lockstep(args, workdir: Path, out: list[dict], checkpoint) -> None:
    suite = await asyncio.to_thread(build_bench_suite, workdir / "suite-lockstep", args.cache_dir,
                                    target_s=args.ls_seconds,
                                    n_pairs=max(_episodes(args, n) for n in args.ls_concurrency),
                                    name="bench-lockstep")
    print(f"lockstep suite: {suite.n_turns} turns, {suite.nominal_s:.1f} s of stream per episode "
          f"(silent bridge), {suite.n_pairs} pairs", flush=True)
    for db_kind in args.ls_dbs:
        cases = [(bridge, n) for bridge in args.ls_bridges for n in args.ls_concurrency]
        try:
            async with bench_env(db_kind, workdir, args.pg_url) as env:
                while cases:
                    bridge, n = cases[0]
                    try:
                        row = await lockstep_case(env, suite, bridge, n, _episodes(args, n), args.cache_dir,
                                                  args.timeout)
                    except Exception as exc:  # one failed case must not lose the others
                        log.exception("lockstep %s %s x%d failed", db_kind, bridge, n)
                        row = {"db": db_kind, "bridge": bridge, "concurrency": n, "error": repr(exc)[:500]}
                    cases.pop(0)
                    row["nominal_episode_s"] = suite.nominal_s
                    out.append(row)
                    checkpoint()
                    if "error" in row:
                        print(f"  lockstep {db_kind:8s} {bridge:11s} x{n:<3d} FAILED: {row['error']}", flush=True)
                        continue
                    print(f"  lockstep {db_kind:8s} {bridge:11s} x{n:<3d} {row['stream_s_per_wall_s']:7.1f} "
                          f"stream-s/wall-s  ({row['episodes']} episodes, {row['stream_s']:.0f} s of stream "
                          f"in {row['wall_s']:.1f} s)", flush=True)
        except Exception as exc:  # e.g. PostgreSQL unreachable
            log.error("lockstep on %s: %r", db_kind, exc)
            out.extend({"db": db_kind, "bridge": b, "concurrency": n, "error": repr(exc)[:500]} for b, n in cases)
            checkpoint()


# --- lockstep per process: against the loopback and the detector limits ----------------------


def detector_limit(audio: np.ndarray, seconds: float) -> dict[str, Any]:
    """What one core can detect: the speech detector alone (this thread) on the always-talk
    bridge's speech, 80 ms frames, in stream seconds per wall second."""
    from server.core.detector import SpeechDetector

    det, frames, t0 = SpeechDetector(), 0, time.perf_counter()
    cpu0 = time.thread_time()
    while time.perf_counter() - t0 < seconds:
        start = (frames * FRAME) % (len(audio) - FRAME)
        det.push(audio[start: start + FRAME])
        frames += 1
    wall, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
    return {"limit": "detector", "frames": frames, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "stream_s_per_wall_s": round(frames * PERIOD_S / wall, 1),
            "stream_s_per_cpu_s": round(frames * PERIOD_S / max(cpu, 1e-9), 1)}


def detector_batches(audio: np.ndarray, sizes: tuple[int, ...] = (1, 4, 16, 64), seconds: float = 1.0
                     ) -> list[dict[str, Any]]:
    """What a row of a batch of the detector's model calls costs (server.engine.detection batches the
    calls of a process's sessions): ``sizes`` rows of the always-talk bridge's speech, one batch call
    after another for ``seconds`` each, in microseconds per row."""
    from server.core.detector import CHUNK_SAMPLES_16K, CONTEXT_SAMPLES_16K, ModelCall, run_model_calls

    chunk = np.asarray(audio[: CONTEXT_SAMPLES_16K + CHUNK_SAMPLES_16K], np.float32)[None, :] / 32768.0
    out = []
    for n in sizes:
        calls = [ModelCall(chunk.copy(), np.zeros((2, 1, 128), np.float32)) for _ in range(n)]
        run_model_calls(calls)  # warm
        k, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            run_model_calls(calls)
            k += 1
        out.append({"rows": n, "us_per_row": round((time.perf_counter() - t0) / (k * n) * 1e6, 1)})
    return out


async def loopback_limit(args, workdir: Path, seconds: float) -> dict[str, Any]:
    """What the loopback round trip allows: a bare WebSocket server (this process) plays lockstep
    with one ``silent`` bridge in a process of its own (room frame, wait for its answer, the next),
    nothing else; in stream seconds per wall second."""
    from websockets.asyncio.server import serve

    from clients.codec import KIND_ASSISTANT, KIND_ROOM, decode_frame, encode_frame
    from clients.messages import EpisodeEnd, Welcome, parse_bridge_message

    result: dict[str, Any] = {}
    done = asyncio.Event()

    async def episode(ws) -> None:
        hello = parse_bridge_message(await ws.recv())
        await ws.send(Welcome(bridge_id="loopback").dumps())
        rate, fs = hello.sample_rate, frame_samples(hello.sample_rate)
        await ws.send(EpisodeStart(episode_id="loopback", clock="lockstep", sample_rate=rate,
                                   frame_samples=fs).dumps())
        silence = np.zeros(fs, np.int16)
        t0, k = time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            await ws.send(encode_frame(KIND_ROOM, k, silence))
            while not isinstance(raw := await ws.recv(), bytes):
                pass
            decode_frame(raw, n_samples=fs, kind=KIND_ASSISTANT)
            k += 1
        wall = time.perf_counter() - t0
        result.update(limit="loopback", frames=k, wall_s=round(wall, 2), stream_s_per_wall_s=round(k * PERIOD_S / wall, 1))
        await ws.send(EpisodeEnd(episode_id="loopback", reason="completed").dumps())
        done.set()
        await ws.wait_closed()  # until the bridge is stopped

    async with serve(episode, "127.0.0.1", 0, compression=None, max_size=1 << 20) as server:
        port = server.sockets[0].getsockname()[1]
        async with bridges_at(args, "process", f"ws://127.0.0.1:{port}", "bare", 1, workdir, bridge="silent"):
            await asyncio.wait_for(done.wait(), seconds + 120)
    return result


async def run_limits(args, workdir: Path, out: dict[str, Any], checkpoint) -> None:
    """Lockstep per process, bridges out of process: the engine with one ``silent`` bridge against
    the loopback limit, with one ``always-talk`` bridge against the one-core detector limit, all
    measured here. Each limit is measured right before and right after its engine case, for half of
    ``--limit-seconds`` each time, and the share is of their mean: this machine's speed drifts by a
    fifth within minutes, and a limit measured at another moment than the engine moves the share
    as much as the engine does (both values are kept)."""
    suite = await asyncio.to_thread(build_bench_suite, workdir / "suite-lockstep", args.cache_dir,
                                    target_s=args.ls_seconds, n_pairs=args.limit_episodes, name="bench-lockstep")
    talk = (await asyncio.to_thread(make_bridges, "always-talk", 1, args.cache_dir))[0].inner.audio24
    out["detector_batches"] = await asyncio.to_thread(detector_batches, talk)
    print("  detector model calls in batches, µs per row: "
          + ", ".join(f"{b['rows']} rows {b['us_per_row']}" for b in out["detector_batches"]), flush=True)
    half = args.limit_seconds / 2
    measure = {"silent": lambda: loopback_limit(args, workdir, half),
               "always-talk": lambda: asyncio.to_thread(detector_limit, talk, half)}
    out["engine"] = []
    for bridge in ("silent", "always-talk"):
        before = await measure[bridge]()
        async with bench_env("sqlite", workdir, args.pg_url) as env:
            try:
                row = await lockstep_case(env, suite, bridge, 1, args.limit_episodes, args.cache_dir, args.timeout,
                                          host="process", args=args, workdir=workdir)
            except Exception as exc:
                log.exception("lockstep per process %s failed", bridge)
                row = {"bridge": bridge, "error": repr(exc)[:500]}
        after = await measure[bridge]()
        limit = out[before["limit"]] = {
            "limit": before["limit"], "before": before, "after": after,
            "stream_s_per_wall_s": round((before["stream_s_per_wall_s"] + after["stream_s_per_wall_s"]) / 2, 1)}
        row["limit"] = limit["limit"]
        row["limit_before_after"] = f"{before['stream_s_per_wall_s']:g} / {after['stream_s_per_wall_s']:g}"
        if "error" not in row:
            row["limit_stream_s_per_wall_s"] = limit["stream_s_per_wall_s"]
            row["share_of_limit_pct"] = round(100 * row["stream_s_per_wall_s"] / limit["stream_s_per_wall_s"], 1)
        row["loadavg_1min_at_end"] = round(os.getloadavg()[0], 2)
        out["engine"].append(row)
        checkpoint()
        print(f"  lockstep per process {bridge:11s} {_fmt(row.get('stream_s_per_wall_s'))} stream-s/wall-s = "
              f"{_fmt(row.get('share_of_limit_pct'))} % of the {limit['limit']} limit "
              f"({limit['stream_s_per_wall_s']}: {row['limit_before_after']} before / after); "
              f"load {row['loadavg_1min_at_end']}", flush=True)


# --- part 2 and 3: realtime pacing, ours and the naive baseline ----------------------------


class NaiveSleepSession(EpisodeSession):
    """Baseline only: the session with its realtime loop paced by ``sleep(0.08)`` per frame.

    Everything else is the real session: the same room mixing, resampling, encoding and
    send (``_send_room``), the same detector and scheduler feed, the same recording and
    lease renewal (``_maybe_flush``). Assistant frames that have arrived are taken after
    each sleep and placed at their seq (no realtime grace checks). §11 says never to pace
    like this; this class exists to show why.
    """

    async def _realtime(self) -> None:
        n, total, last_slot = 0, None, -1
        placed: dict[int, tuple[int, np.ndarray, float]] = {}
        while True:
            while (msg := await self.conn.next_inbound(0)) is not None:
                if msg.type != "frame":
                    self._on_side_message(msg)
                    continue
                slot = max(msg.frame.seq, last_slot + 1)
                placed[slot] = (msg.frame.seq, msg.frame.pcm, msg.arrived)
                last_slot = slot
            while self.core.assistant_slots < n and (total is None or self.core.assistant_slots < total):
                s = self.core.assistant_slots
                seq, pcm, arrived = placed.pop(s, (None, None, None))
                taken = self._take_assistant(s, seq if seq is not None else -1, pcm, arrived)
                if inspect.isawaitable(taken):  # a coroutine since the detector runs off the loop
                    await taken
            if total is not None and n >= total:
                break
            if not await self._send_room():
                total = self.room_sent
                continue
            n += 1
            await self._maybe_flush()
            await asyncio.sleep(PERIOD_S)  # the naive pacing: drift accumulates per frame


@contextlib.contextmanager
def session_class(cls: type[EpisodeSession]) -> Iterator[None]:
    """Make the bridge endpoint run ``cls`` for its episodes (restored afterwards)."""
    old = bridge_ws.EpisodeSession
    bridge_ws.EpisodeSession = cls
    try:
        yield
    finally:
        bridge_ws.EpisodeSession = old


def pacing_figures(errors_by_attempt: dict[str, np.ndarray], horizon_frames: int) -> dict[str, Any]:
    """Send-time error (ms) of room frames 0..horizon and per-episode drift at the horizon."""
    half = DRIFT_WINDOW // 2
    all_err = np.concatenate(list(errors_by_attempt.values())) if errors_by_attempt else np.zeros(0)
    drifts = []
    for err in errors_by_attempt.values():
        if len(err) > horizon_frames + half:
            end = float(np.median(err[horizon_frames - half: horizon_frames + half + 1]))
            drifts.append(end - float(np.median(err[:DRIFT_WINDOW])))
    scope = np.concatenate([e[: horizon_frames + 1] for e in errors_by_attempt.values()]) if errors_by_attempt \
        else all_err

    def r(x: float) -> float:
        return round(float(x), 3)

    if not len(scope):
        return {"frames": 0}
    return {
        "frames": int(len(scope)),
        "err_p50_ms": r(np.percentile(scope, 50)), "err_p99_ms": r(np.percentile(scope, 99)),
        "err_max_ms": r(scope.max()), "err_min_ms": r(scope.min()),
        "late_over_10ms_pct": r(100 * float((scope > 10).mean())),
        "episodes_with_drift": len(drifts),
        "drift_median_ms": r(statistics.median(drifts)) if drifts else None,
        "drift_max_ms": r(max(drifts, key=abs)) if drifts else None,
        "drift_per_episode_ms": [r(d) for d in drifts],
    }


def room_errors(db: Database, run_id: str, max_seq: int) -> dict[str, np.ndarray]:
    """``sent_us - seq·80000`` in ms for each attempt's room frames, in seq order."""
    with db.session() as s:
        rows = s.execute(
            select(FrameRow.attempt_id, FrameRow.seq, FrameRow.sent_us)
            .join(Attempt, Attempt.id == FrameRow.attempt_id).join(Episode, Episode.id == Attempt.episode_id)
            .where(Episode.run_id == run_id, FrameRow.direction == "room", FrameRow.seq <= max_seq)
            .order_by(FrameRow.attempt_id, FrameRow.seq)).all()
    by: dict[str, list[tuple[int, int]]] = {}
    for att, seq, sent in rows:
        by.setdefault(att, []).append((seq, sent))
    return {a: np.array([(sent - seq * PERIOD_US) / 1000.0 for seq, sent in v]) for a, v in by.items()}


@dataclass
class Progress:
    """How far the bridges of a realtime case have got: the bridges still running, the smallest
    last room seq among them, and what stopped the others."""

    alive: int
    min_last_seq: int
    errors: list[str]


@contextlib.asynccontextmanager
async def bridges_at(args, host: str, url: str, token: str, n: int, workdir: Path,
                     bridge: str | None = None) -> AsyncIterator[Any]:
    """``n`` reference bridges connected to ``url``, in this process or (``--rt-host process``) in a
    process of their own; yields a callable that returns their :class:`Progress`. ``bridge``: the
    reference bridge (default ``--rt-bridge``)."""
    bridge = bridge or args.rt_bridge
    if host == "process":
        proc = BridgeProcess(url, token, n, bridge, args.cache_dir, workdir)
        try:
            def progress() -> Progress:
                p = proc.progress()
                alive = n if p["alive"] is None else p["alive"]  # not written yet: still starting
                return Progress(alive if proc.proc.poll() is None else 0, p["min_last_seq"], p["errors"])

            progress.cpu_s = proc.cpu_s  # type: ignore[attr-defined]
            yield progress
        finally:
            await asyncio.to_thread(proc.stop)
        return
    bridges = await asyncio.to_thread(make_bridges, bridge, n, args.cache_dir)
    async with connected(url, token, bridges) as tasks:
        def progress() -> Progress:
            alive = [b for b, t in zip(bridges, tasks) if not t.done()]
            return Progress(len(alive), min((b.last_seq for b in alive), default=-1), bridge_errors(tasks))

        progress.cpu_s = None  # type: ignore[attr-defined]  # in this process: in cpu_process_pct
        yield progress


async def wait_for_horizon(progress, need: int, timeout_s: float) -> tuple[bool, Progress]:
    """Until every running bridge has got past frame ``need`` (True), all have stopped or the time is up."""
    deadline = time.monotonic() + timeout_s
    while True:
        p = progress()
        if p.alive and p.min_last_seq >= need:
            return True, p
        if not p.alive or time.monotonic() > deadline:
            return False, p
        await asyncio.sleep(0.25)


def _connected_bridges(db: Database) -> int:
    with db.session() as s:
        return s.scalar(select(sa.func.count()).select_from(BridgeRow).where(BridgeRow.disconnected_at.is_(None)))


async def wait_connected(db: Database, n: int, progress, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while await asyncio.to_thread(_connected_bridges, db) < n:
        if time.monotonic() > deadline or not progress().alive:
            p = progress()
            raise RuntimeError(f"{p.alive} bridges running, not all connected: {sorted(set(p.errors))[:3]}")
        await asyncio.sleep(0.1)


async def realtime_case(args, workdir: Path, suite: SuiteInfo, n: int, loop: str, host: str) -> dict[str, Any]:
    if loop == "bare":
        return await bare_case(args, workdir, suite, n, host)
    horizon = int(round(args.rt_seconds / PERIOD_S))
    need = horizon + DRIFT_WINDOW // 2 + 1  # last frame the drift window needs
    cls = NaiveSleepSession if loop == "naive" else EpisodeSession
    async with bench_env(args.rt_db, workdir, args.pg_url) as env:
        async with bridges_at(args, host, env.server.url, env.token, n, workdir) as progress:
            # all n connected first (as in the bare baseline), so that the episodes start together
            # and what is measured is serving them, not starting the bridges
            await wait_connected(env.db, n, progress)
            run_id = await asyncio.to_thread(create_run, env.db, team=TEAM, model=args.rt_bridge,
                                             suite_path=str(suite.path), clock="realtime", conditions=["explicit"],
                                             limit=n)
            with session_class(cls), CpuMeter() as cpu, LoopLag() as lag, DetectorBatches() as batches:
                bridge_cpu0 = progress.cpu_s() if progress.cpu_s else None
                # Stop as soon as every episode has streamed past the horizon (+ drift window).
                # A bridge that dies (its error is reported) no longer holds the others up.
                reached, p = await wait_for_horizon(progress, need, args.rt_seconds * 4 + 60)
                bridge_cpu = None if bridge_cpu0 is None else progress.cpu_s() - bridge_cpu0
            await asyncio.to_thread(cancel_run, env.db, run_id)
            for _ in range(150):  # sessions notice the cancel at their next flush (≤ flush_s)
                if not (await asyncio.to_thread(run_progress, env.db, run_id)).running:
                    break
                await asyncio.sleep(0.1)
        send_err = await asyncio.to_thread(room_errors, env.db, run_id, need)
        rows = await asyncio.to_thread(attempt_rows, env.db, run_id)
    server_stats = [(a.stats or {}).get("server", {}) for a in rows]
    bad = [a for a in rows if a.status != "completed" and a.error_code != "aborted"]
    return {
        "loop": loop, "host": host, "bridge": args.rt_bridge, "db": args.rt_db, "concurrency": n,
        "episodes": len(send_err), "horizon_s": args.rt_seconds, "reached_horizon": reached,
        "failed_attempts": len(bad),
        "failed_attempt_errors": sorted({f"{a.error_code}: {a.error_message}"[:200] for a in bad}),
        "bridge_errors": p.errors, "disconnects": n - p.alive,
        **pacing_figures(send_err, horizon),
        # §4 realtime: assistant frames placed after their own slot, and by how many frames
        # at most (the naive loop does not keep these counters).
        "late_assistant_frames": sum(s.get("late_frames", 0) for s in server_stats) if loop == "ours" else None,
        "assistant_lateness_max_frames": max((s.get("max_lateness_frames", 0) for s in server_stats), default=None)
        if loop == "ours" else None,
        "missing_assistant_slots": sum(s.get("missing_slots", 0) for s in server_stats) if loop == "ours" else None,
        **lag.figures(),
        **cpu.figures(),
        **batches.figures(),
        "cpu_bridges_pct": None if bridge_cpu is None else round(100 * bridge_cpu / cpu.wall, 1),
    }


class DetectorBatches:
    """How many sessions' model calls the speech detector's batches held (server.engine.detection)."""

    def __enter__(self) -> "DetectorBatches":
        from server.engine import detection

        # the code under test may be an earlier version (its batchers named otherwise, or none)
        self.sources = [d for d in vars(detection).values() if isinstance(d, detection.Detection)]
        self.start = [(d.batches, d.rows) for d in self.sources]
        return self

    def __exit__(self, *exc) -> None:
        self.end = [(d.batches, d.rows) for d in self.sources]

    def figures(self) -> dict[str, Any]:
        batches = sum(e[0] - s[0] for s, e in zip(self.start, self.end))
        rows = sum(e[1] - s[1] for s, e in zip(self.start, self.end))
        return {"detector_batches": batches, "detector_rows_per_batch": round(rows / batches, 2) if batches else None}


async def bare_case(args, workdir: Path, suite: SuiteInfo, n: int, host: str) -> dict[str, Any]:
    """The pacing baseline: a bare WebSocket server (``websockets``, this process's event loop) that
    greets the same bridges (``welcome``, ``episode.start``), sends each one room frames of real
    speech on the same absolute deadlines ``t0 + n·80 ms`` and reads their answers, and does
    nothing else: no scheduler, detector, recording or database. Its send error is what asyncio
    and the WebSocket stack alone cost on this machine, in this run."""
    import soxr
    from websockets.asyncio.server import serve

    from clients.codec import KIND_ASSISTANT, KIND_ROOM, decode_frame, encode_frame
    from clients.messages import EpisodeEnd, Welcome, parse_bridge_message

    horizon = int(round(args.rt_seconds / PERIOD_S))
    need = horizon + DRIFT_WINDOW // 2 + 1
    speech, _ = sf.read(str(next(iter(sorted((suite.path / "clips").glob("*.wav"))))), dtype="int16")
    errors: dict[str, np.ndarray] = {}
    answers: dict[str, int] = {}
    done, greeted = asyncio.Event(), asyncio.Event()

    async def episode(ws) -> None:
        hello = parse_bridge_message(await ws.recv())
        eid = uuid.uuid4().hex
        await ws.send(Welcome(bridge_id=eid).dumps())
        answers[eid] = 0
        if len(answers) == n:
            greeted.set()
        await greeted.wait()  # as the engine's case: every bridge connected, then all episodes start
        rate, fs = hello.sample_rate, frame_samples(hello.sample_rate)
        audio = speech if rate == STREAM_RATE else soxr.resample(speech, STREAM_RATE, rate).astype(np.int16)
        await ws.send(EpisodeStart(episode_id=eid, clock="realtime", sample_rate=rate, frame_samples=fs).dumps())
        t0 = time.monotonic()
        err = np.zeros(need + 1)

        async def reader() -> None:
            async for raw in ws:
                if isinstance(raw, bytes):
                    decode_frame(raw, n_samples=fs, kind=KIND_ASSISTANT)
                    answers[eid] += 1

        reading = asyncio.create_task(reader())
        try:
            for k in range(need + 1):
                delay = t0 + k * PERIOD_S - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                start = (k * fs) % (len(audio) - fs)
                await ws.send(encode_frame(KIND_ROOM, k, audio[start: start + fs]))
                err[k] = (time.monotonic() - t0 - k * PERIOD_S) * 1000.0
            errors[eid] = err
            if len(errors) == n:
                done.set()
            await ws.send(EpisodeEnd(episode_id=eid, reason="completed").dumps())
            await done.wait()
        finally:
            reading.cancel()

    with CpuMeter() as cpu, LoopLag() as lag:
        async with serve(episode, "127.0.0.1", 0, compression=None, max_size=1 << 20) as server:
            port = server.sockets[0].getsockname()[1]
            async with bridges_at(args, host, f"ws://127.0.0.1:{port}", "bare", n, workdir) as progress:
                bridge_cpu0 = progress.cpu_s() if progress.cpu_s else None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), args.rt_seconds * 4 + 60)
                p = progress()
                bridge_cpu = None if bridge_cpu0 is None else progress.cpu_s() - bridge_cpu0
    return {"loop": "bare", "host": host, "bridge": args.rt_bridge, "db": None, "concurrency": n,
            "episodes": len(errors), "horizon_s": args.rt_seconds, "reached_horizon": done.is_set(),
            "failed_attempts": n - len(errors), "bridge_errors": p.errors, "disconnects": n - p.alive,
            "answers_per_room_frame": round(sum(answers.values()) / max(1, len(errors) * (need + 1)), 3),
            **pacing_figures(errors, horizon), **lag.figures(), **cpu.figures(),
            "cpu_bridges_pct": None if bridge_cpu is None else round(100 * bridge_cpu / cpu.wall, 1)}


async def run_realtime(args, workdir: Path, loops: list[str], out: list[dict], checkpoint) -> None:
    suite = await asyncio.to_thread(build_bench_suite, workdir / "suite-realtime", args.cache_dir,
                                    target_s=args.rt_seconds + 6.0, n_pairs=max(args.rt_concurrency),
                                    name="bench-realtime")
    print(f"realtime suite: {suite.n_turns} turns, {suite.nominal_s:.1f} s of stream per episode "
          f"(silent bridge); measuring the first {args.rt_seconds:g} s", flush=True)
    for host in args.rt_hosts:
        for n in args.rt_concurrency:
            for loop in loops:
                what = f"{loop:5s} {host:9s} x{n:<3d}"
                try:
                    row = await realtime_case(args, workdir, suite, n, loop, host)
                except Exception as exc:
                    log.exception("realtime %s failed", what)
                    row = {"loop": loop, "host": host, "concurrency": n, "error": repr(exc)[:500]}
                row["loadavg_1min_at_end"] = round(os.getloadavg()[0], 2)
                out.append(row)
                checkpoint()
                if "error" in row:
                    print(f"  realtime {what} FAILED: {row['error']}", flush=True)
                    continue
                if row.get("bridge_errors"):
                    print(f"  realtime {what} {len(row['bridge_errors'])} bridge(s) failed: "
                          f"{row['bridge_errors'][0]}", flush=True)
                print(f"  realtime {what} err p50 {row.get('err_p50_ms', float('nan')):7.2f} ms  "
                      f"p99 {row.get('err_p99_ms', float('nan')):7.2f} ms  max {row.get('err_max_ms', float('nan')):8.2f}"
                      f" ms  drift@{args.rt_seconds:g}s {_fmt(row.get('drift_median_ms'))} ms  "
                      f"failed {row.get('failed_attempts')}  disconnects {row.get('disconnects')}  "
                      f"cpu {row['cpu_process_pct']:.0f}%  load {row['loadavg_1min_at_end']}", flush=True)


# --- report -----------------------------------------------------------------------------


def _fmt(x: Any, nd: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def table(title: str, cols: list[tuple[str, str]], rows: list[dict]) -> str:
    """Plain-text table; cols = (header, key)."""
    cells = [[h for h, _ in cols]] + [[_fmt(r.get(k)) for _, k in cols] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(cols))]
    lines = [title, "  ".join(h.ljust(w) for h, w in zip(cells[0], widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))) for r in cells[1:]]
    return "\n".join(lines)


def comparison(realtime: list[dict]) -> list[dict]:
    """Per host and N: our loop against the bare WebSocket pacing baseline (ratio ours / bare: how
    much the engine adds to what asyncio and the socket cost) and against the naive loop (ratio
    naive / ours)."""
    rows = []
    for host, n in sorted({(r.get("host", "inprocess"), r["concurrency"]) for r in realtime}):
        def pick(loop: str) -> dict | None:
            return next((r for r in realtime if r.get("host", "inprocess") == host and r["concurrency"] == n
                         and r["loop"] == loop and "error" not in r), None)

        ours, naive, bare = pick("ours"), pick("naive"), pick("bare")
        if not ours:
            continue

        def ratio(a: dict | None, b: dict | None, key: str) -> float | None:
            x, y = (a or {}).get(key), (b or {}).get(key)
            if x is None or y is None:
                return None
            return round(abs(x) / max(abs(y), 0.001), 1)  # a figure can be ~0: floor at 1 µs

        rows.append({"host": host, "concurrency": n,
                     "p99_ours_ms": ours.get("err_p99_ms"), "p99_bare_ms": (bare or {}).get("err_p99_ms"),
                     "p99_vs_bare": ratio(ours, bare, "err_p99_ms"),
                     "drift_ours_ms": ours.get("drift_max_ms"), "drift_bare_ms": (bare or {}).get("drift_max_ms"),
                     "drift_naive_ms": (naive or {}).get("drift_median_ms"),
                     "drift_ratio": ratio(naive, ours, "drift_median_ms"),
                     "p99_naive_ms": (naive or {}).get("err_p99_ms"), "p99_ratio": ratio(naive, ours, "err_p99_ms")})
    return rows


def code_version() -> str:
    """The commit of the checkout being measured (plus "+dirty" for local changes to the engine);
    ``MPE_BENCH_CODE_VERSION`` names it where there is no git checkout (an exported tree)."""
    import subprocess

    if os.environ.get("MPE_BENCH_CODE_VERSION"):
        return os.environ["MPE_BENCH_CODE_VERSION"]
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "server", "clients", "model_bridges"],
                               cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        return None


def machine() -> dict[str, Any]:
    import importlib.metadata as md

    return {
        "code": code_version(),
        "cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
        "processor": _cpu_model() or platform.processor() or platform.machine(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "uvicorn": md.version("uvicorn"), "websockets": md.version("websockets"),
        "sqlalchemy": md.version("sqlalchemy"),
    }


def report(results: dict[str, Any], args) -> str:
    parts = []
    m = results["machine"]
    parts.append(f"code {m['code']}; machine: {m['cpus']} CPUs, {m['platform']}, Python {m['python']}; "
                 f"load average at start {m['loadavg_at_start']} (other load on the machine skews the figures: "
                 f"see the 'others %' column)")
    if results["lockstep"]:
        parts.append(table(
            "\nLockstep throughput (stream-seconds per wall-second; end to end, detection + DB logging on)",
            [("db", "db"), ("bridge", "bridge"), ("N", "concurrency"), ("episodes", "episodes"),
             ("stream s", "stream_s"), ("wall s", "wall_s"), ("stream-s/wall-s", "stream_s_per_wall_s"),
             ("per episode xRT", "per_episode_x_realtime"), ("frames/s", "frames_per_s"),
             ("cpu %", "cpu_process_pct"), ("loop thread %", "cpu_loop_thread_pct"),
             ("others %", "cpu_other_processes_pct"), ("failed", "failed_attempts")], results["lockstep"]))
    if results["limits"].get("engine"):
        lim = results["limits"]
        parts.append(table(
            "\nLockstep per process, the bridge in a process of its own (SQLite): against the loopback "
            "round-trip limit and the one-core detector limit, each measured right before and right after "
            "its case (the share is of their mean)",
            [("bridge", "bridge"), ("episodes", "episodes"), ("stream-s/wall-s", "stream_s_per_wall_s"),
             ("limit", "limit"), ("limit stream-s/wall-s", "limit_stream_s_per_wall_s"),
             ("before / after", "limit_before_after"),
             ("% of limit", "share_of_limit_pct"), ("cpu %", "cpu_process_pct"),
             ("others %", "cpu_other_processes_pct"), ("failed", "failed_attempts"), ("load", "loadavg_1min_at_end")],
            lim["engine"]))
    if results["realtime"]:
        h = args.rt_seconds
        parts.append(table(
            f"\nRealtime pacing: room-frame send error vs t0 + n*80 ms (ms), frames 0..{h:g} s; "
            f"drift = error at {h:g} s - error at start",
            [("loop", "loop"), ("bridges", "host"), ("N", "concurrency"), ("episodes", "episodes"),
             ("frames", "frames"),
             ("p50", "err_p50_ms"), ("p99", "err_p99_ms"), ("max", "err_max_ms"), (">10ms %", "late_over_10ms_pct"),
             ("drift med", "drift_median_ms"), ("drift worst", "drift_max_ms"),
             ("asst late max", "assistant_lateness_max_frames"), ("loop lag p99", "loop_lag_p99_ms"),
             ("det rows/batch", "detector_rows_per_batch"),
             ("cpu %", "cpu_process_pct"), ("loop thread %", "cpu_loop_thread_pct"),
             ("bridges cpu %", "cpu_bridges_pct"), ("others %", "cpu_other_processes_pct"),
             ("failed", "failed_attempts"), ("disconnects", "disconnects"), ("load", "loadavg_1min_at_end")],
            results["realtime"]))
    if results["comparison"]:
        parts.append(table(
            "\nBaselines: the bare WebSocket pacing server (ratio ours / bare) and the naive sleep(0.08) loop "
            "(ratio naive / ours); drift ours/bare = worst episode",
            [("bridges", "host"), ("N", "concurrency"), ("p99 ours ms", "p99_ours_ms"), ("p99 bare ms", "p99_bare_ms"),
             ("p99 ours/bare", "p99_vs_bare"), ("drift ours ms", "drift_ours_ms"), ("drift bare ms", "drift_bare_ms"),
             ("drift naive ms", "drift_naive_ms"), ("drift naive/ours", "drift_ratio"),
             ("p99 naive ms", "p99_naive_ms"), ("p99 naive/ours", "p99_ratio")], results["comparison"]))
    problems = [r for r in results["lockstep"] + results["realtime"] if r.get("error") or r.get("bridge_errors")]
    if problems:
        parts.append("\nProblems:")
        for r in problems:
            what = f"{r.get('db') or r.get('loop')} {r.get('host', '')} {r.get('bridge', '')} x{r['concurrency']}"
            if r.get("error"):
                parts.append(f"  {what}: case failed: {r['error']}")
            if r.get("bridge_errors"):
                parts.append(f"  {what}: {len(r['bridge_errors'])} bridge(s) stopped: {r['bridge_errors'][0]}")
    return "\n".join(parts)


# --- CLI --------------------------------------------------------------------------------


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def _words(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--parts", type=_words, default=["lockstep", "limits", "realtime", "naive", "bare"],
                   help="comma list of lockstep, limits, realtime, naive, bare (default: all)")
    p.add_argument("--limit-seconds", type=float, default=10.0,
                   help="limits: how long the loopback and the detector limits are measured (half before, "
                        "half after their engine case)")
    p.add_argument("--limit-episodes", type=int, default=4, help="limits: lockstep episodes per engine case")
    p.add_argument("--quick", action="store_true",
                   help="smoke run (< 1 min): short episodes, N = 1,2 lockstep and 1,4 realtime, 5 s horizon")
    p.add_argument("--ls-bridges", type=_words, default=["silent", "always-talk"], help="lockstep bridges")
    p.add_argument("--ls-concurrency", type=_ints, default=[1, 8], help="bridges connected at once (comma list)")
    p.add_argument("--ls-dbs", type=_words, default=["sqlite", "postgres"], help="sqlite and/or postgres")
    p.add_argument("--ls-seconds", type=float, default=40.0,
                   help="stream length of a lockstep scenario with the silent bridge (always-talk adds up to "
                        "60 s: the T wait runs to its cap)")
    p.add_argument("--ls-episodes-per-bridge", type=int, default=2, help="episodes per bridge in a lockstep run")
    p.add_argument("--ls-min-episodes", type=int, default=8, help="at least this many episodes per lockstep run")
    p.add_argument("--rt-concurrency", type=_ints, default=[1, 16, 64],
                   help="concurrent realtime episodes (comma list)")
    p.add_argument("--rt-seconds", type=float, default=100.0, help="realtime horizon (drift measured here)")
    p.add_argument("--rt-bridge", default="always-talk", choices=["silent", "always-talk"],
                   help="realtime bridge (always-talk: the detector and both audio directions are busy)")
    p.add_argument("--rt-hosts", type=_words, default=["process", "inprocess"],
                   help="where the realtime bridges run: process (one process of their own), inprocess (this "
                        "process's event loop, beside the server)")
    p.add_argument("--rt-db", default="sqlite", choices=["sqlite", "postgres"], help="database for realtime")
    p.add_argument("--pg-url", default=DEFAULT_PG_URL, help="PostgreSQL server (a schema per run, dropped after)")
    p.add_argument("--cache-dir", type=Path, default=None, help="TTS clip cache (default: the server data dir)")
    p.add_argument("--workdir", type=Path, default=None, help="keep databases and suites here (default: a temp dir)")
    p.add_argument("--timeout", type=float, default=600.0, help="per lockstep run")
    p.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    args = p.parse_args(argv)
    if args.quick:
        given = set(a.split("=")[0] for a in (argv if argv is not None else sys.argv[1:]))
        quick = {"--ls-concurrency": ("ls_concurrency", [1, 2]), "--ls-seconds": ("ls_seconds", 8.0),
                 "--ls-episodes-per-bridge": ("ls_episodes_per_bridge", 1), "--ls-min-episodes": ("ls_min_episodes", 1),
                 "--rt-concurrency": ("rt_concurrency", [1, 4]), "--rt-seconds": ("rt_seconds", 5.0)}
        for flag, (attr, value) in quick.items():
            if flag not in given:
                setattr(args, attr, value)
    bad = set(args.parts) - {"lockstep", "limits", "realtime", "naive", "bare"}
    if bad:
        p.error(f"unknown parts: {', '.join(sorted(bad))}")
    if set(args.rt_hosts) - {"process", "inprocess"}:
        p.error("--rt-hosts takes process and/or inprocess")
    if set(args.ls_dbs) - {"sqlite", "postgres"}:
        p.error("--ls-dbs takes sqlite and/or postgres")
    if args.rt_seconds < 3:
        p.error("--rt-seconds must be at least 3 (the drift window is 2 s)")
    args.cache_dir = (args.cache_dir or Settings().data_dir).resolve()
    return args


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": machine(), "config": {k: (str(v) if isinstance(v, Path) else v)
                                                                for k, v in vars(args).items()},
                               "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                               "lockstep": [], "limits": {}, "realtime": [], "comparison": []}
    with contextlib.ExitStack() as stack:
        if args.workdir:
            workdir = args.workdir.resolve()
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mpe-bench-",
                                                                          ignore_cleanup_errors=True)))
        t0 = time.monotonic()

        def checkpoint() -> None:  # partial figures survive a crash or ^C
            results["comparison"] = comparison(results["realtime"])
            results["elapsed_s"] = round(time.monotonic() - t0, 1)
            results["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
            if args.json:
                write_json(args.json, results)

        if "lockstep" in args.parts:
            await run_lockstep(args, workdir, results["lockstep"], checkpoint)
        if "limits" in args.parts:
            await run_limits(args, workdir, results["limits"], checkpoint)
        loops = [x for x in ("bare", "realtime", "naive") if x in args.parts]
        if loops:
            await run_realtime(args, workdir, ["ours" if x == "realtime" else x for x in loops], results["realtime"],
                               checkpoint)
        checkpoint()
    return results


def write_json(path: Path, results: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=2, default=str) + "\n")
    tmp.replace(path)


def bridge_host_main(argv: list[str]) -> int:
    """``--bridge-host``: the bridge process of a realtime case (see :class:`BridgeProcess`)."""
    p = argparse.ArgumentParser()
    p.add_argument("--bridge-host", action="store_true")
    p.add_argument("--server", required=True)
    p.add_argument("--bridges", type=int, required=True)
    p.add_argument("--bridge", required=True)
    p.add_argument("--cache-dir", type=Path, required=True)
    p.add_argument("--progress", type=Path, default=None)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(bridge_host(a.server, os.environ["MPE_TOKEN"], a.bridges, a.bridge, a.cache_dir, reconnect=False,
                            progress=a.progress))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--bridge-host" in argv:
        return bridge_host_main(argv)
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    results = asyncio.run(amain(args))
    print()
    print(report(results, args))
    print(f"\ntotal {results['elapsed_s']:.0f} s")
    if args.json:
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
