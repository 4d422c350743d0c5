#!/usr/bin/env python
"""Capacity benchmark: measure the per-episode-second costs here, then print what a full evaluation needs.

Four measurements in one run, each on the real parts (no part replaced):

``realtime``  per database (SQLite file, fresh PostgreSQL database): the real server as a process of
              its own (``mpe serve``) and ``--rt-episodes`` talking reference bridges (``always-talk``:
              both tracks carry speech, the detector runs on every frame) in a second process;
              a realtime run of that many episodes. Once all are streaming, a window of
              ``--rt-window-s`` seconds: the server process's CPU (``/proc``) per episode-second, and
              on PostgreSQL the committed transactions (``pg_stat_database`` of a database only this
              benchmark uses), the WAL flushes (``pg_stat_wal``: the whole PostgreSQL server's, so
              run it where nothing else writes) and PostgreSQL's CPU per episode-second. After the run is cancelled:
              rows and on-disk bytes of the tables that grow with the episodes
              (bench/storage.py's measure of a table) per recorded episode-second (room frames x 80 ms).
``pgwrite``   what PostgreSQL sustains in the server's per-second pattern: ``--pg-threads`` threads (server
              processes), each with ``--pg-group`` leased episodes (``lease_episode``; 1 by default),
              each writing one recorded second of all its episodes after another through the server's
              own write (``flush_group.commit``: one transaction of their frame rows, the two tracks'
              FLAC chunks, copied from the realtime recording, and their leases' renewal; a group of
              N is a process whose flushes fall due N at a time), for ``--pg-seconds``;
              episode-seconds per second, PostgreSQL backend CPU and WAL flushes per episode-second.
``scoring``   ``--score-episodes`` episodes of ``--score-bridge`` (``always-talk``: speech in every window,
              so the most ASR per second) recorded in lockstep, then scored (``score_run``:
              faster-whisper tiny.en + detector replay + rule judge, fresh, one worker) cold and
              warm; CPU seconds (this process and its children) per episode-second of distinct
              episodes (see ``scoring_part``).
``model``     bench/capacity_model.py on these figures and the plan's parameters (printed).

The machine is shared: every figure carries the 1-minute load average at its end. CPU seconds per
unit move less with load than wall-clock rates (a busy core slows a process without adding to its
CPU time much, apart from cache effects); the PostgreSQL write rate is a wall-clock rate and moves
with load most.

Usage::

    python bench/capacity.py --quick           # make bench: about 80 s
    python bench/capacity.py                   # about 3 minutes
    python bench/capacity.py --json out.json
    python bench/capacity.py --from-json out.json --gpu-hosts 8 --per-host 32   # another plan, no measuring
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import resource
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

if __package__ in (None, ""):  # ``python bench/capacity.py`` without an installed checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa
from sqlalchemy import func, select

from bench.capacity_model import Plan, UnitCosts, capacity
from bench.engine import (
    DEFAULT_PG_URL,
    PERIOD_S,
    TEAM,
    bench_env,
    build_bench_suite,
    database_url,
    lockstep_case,
    machine,
)
from bench.scoring import _cold
from bench.storage import PARTS, _on_disk
from bench.workers import Served, _cpu_s, _postgres_cpu, start_bridge_host
from server.auth import create_token
from server.core.status import AttemptStatus
from server.db import Attempt, AudioChunk, Database, Episode, FrameRow, Run
from server.engine.flush_group import commit
from server.engine.leasing import Lease, cancel_run, create_run, lease_episode
from server.engine.progress import run_progress
from server.engine.recorder import Batch
from server.scoring.runner import ScoreOptions, score_run

ROOT = Path(__file__).resolve().parent.parent


def _load() -> float:
    return round(os.getloadavg()[0], 2)


@contextlib.contextmanager
def private_pg(pg_url: str) -> Iterator[str]:
    """A fresh PostgreSQL database, dropped afterwards: its ``pg_stat_database`` row counts this
    benchmark's transactions alone (a schema in a shared database would count everyone's)."""
    name = "mpe_capacity_" + uuid.uuid4().hex[:10]
    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(sa.text(f"CREATE DATABASE {name}"))
        yield str(sa.make_url(pg_url).set(database=name).render_as_string(hide_password=False))
    finally:
        try:
            with admin.connect() as c:
                c.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        finally:
            admin.dispose()


def _pg_scalars(url: str, sql: str) -> list[int]:
    """A query's first column on a fresh connection to ``url`` (its own, not pooled)."""
    eng = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with eng.connect() as c:
            return [int(x) for x in c.execute(sa.text(sql)).scalars()]
    finally:
        eng.dispose()


def _commits(url: str) -> int:
    """Committed transactions of the database ``url`` names (the statistics a backend reports
    reach the view within about a second)."""
    return _pg_scalars(url, "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")[0]


def _wal_syncs(url: str) -> int:
    """WAL flushes to disk of the whole PostgreSQL server (``pg_stat_wal.wal_sync``, PostgreSQL ≥ 14):
    what each committing write transaction waits for; a read-only one (the server's polls) makes none."""
    return _pg_scalars(url, "SELECT wal_sync FROM pg_stat_wal")[0]


def _backend_cpu_s(url: str, before: dict[int, float]) -> float:
    """CPU seconds the backends now connected to ``url``'s database used since ``before`` (a
    ``_postgres_cpu()`` snapshot; a backend not in it started since). The machine's PostgreSQL
    serves other databases too: only this benchmark's backends count (the WAL writer and the
    checkpointer, shared, are left out)."""
    pids = _pg_scalars(url, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                            "AND pid <> pg_backend_pid()")
    return sum(_cpu_s(p) - before.get(p, 0.0) for p in pids)


def _running(db: Database, run_id: str) -> int:
    with db.session() as s:
        return s.scalar(select(func.count()).select_from(Attempt).join(Episode, Episode.id == Attempt.episode_id)
                        .where(Episode.run_id == run_id, Attempt.status == AttemptStatus.running))


def _recorded(db: Database) -> dict[str, Any]:
    """Episode-seconds recorded (room frames x 80 ms) and each growing table's rows and bytes on disk."""
    dialect = db.engine.dialect.name
    with db.engine.connect() as conn:
        if dialect == "postgresql":
            conn.execute(sa.text("ANALYZE"))
        room = conn.execute(select(func.count()).select_from(FrameRow).where(FrameRow.direction == "room")).scalar()
        rows = {t: int(conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar()) for t in PARTS}
        disk = {t: _on_disk(conn, dialect, t) for t in PARTS}
    return {"episode_s": room * PERIOD_S, "rows": rows, "bytes": disk}


async def realtime_part(args, kind: str, url: str, workdir: Path, suite) -> dict[str, Any]:
    """One database: the server and the bridges as processes of their own, a realtime run of
    ``args.rt_episodes`` talking episodes, a measured window, then what was recorded."""
    n, window = args.rt_episodes, args.rt_window_s
    db = await asyncio.to_thread(Database, url)
    try:
        token = await asyncio.to_thread(create_token, db, TEAM, label="bench")
        served = Served(url, workdir / "data", 1, workdir / f"serve-capacity-{kind}.log")
        bridges = None
        try:
            await served.wait_ready()
            bridges = await start_bridge_host(db, served.port, token, n, args.rt_bridge, args.cache_dir)
            run_id = await asyncio.to_thread(create_run, db, team=TEAM, model=args.rt_bridge,
                                             suite_path=str(suite.path), clock="realtime",
                                             conditions=["explicit"], limit=n)
            t0 = time.monotonic()
            while await asyncio.to_thread(_running, db, run_id) < n:
                if time.monotonic() - t0 > 60:
                    raise RuntimeError(f"{kind}: not all {n} episodes started")
                await asyncio.sleep(0.2)
            await asyncio.sleep(args.rt_warmup_s)  # past the start: connection and first flushes
            pid = served.pids()[0]
            pg = kind == "postgres"
            cpu0, pg0 = _cpu_s(pid), _postgres_cpu() if pg else {}
            x0, f0 = (_commits(url), _wal_syncs(url)) if pg else (0, 0)
            w0 = time.monotonic()
            await asyncio.sleep(window)
            wall = time.monotonic() - w0
            cpu = _cpu_s(pid) - cpu0
            pg_cpu = _backend_cpu_s(url, pg0) if pg else None
            still = await asyncio.to_thread(_running, db, run_id)
            await asyncio.sleep(1.5)  # the window's last statistics reach pg_stat_database
            xacts = _commits(url) - x0 if pg else None
            syncs = _wal_syncs(url) - f0 if pg else None
            load = _load()
            await asyncio.to_thread(cancel_run, db, run_id)
            for _ in range(150):
                if not (await asyncio.to_thread(run_progress, db, run_id)).running:
                    break
                await asyncio.sleep(0.1)
        finally:
            if bridges is not None:
                bridges.send_signal(signal.SIGTERM)
                bridges.wait(60)
            served.stop()
        rec = await asyncio.to_thread(_recorded, db)
    finally:
        db.dispose()
    ep_s = n * wall
    es = max(rec["episode_s"], 1e-9)
    return {"db": kind, "episodes": n, "window_s": round(wall, 2), "streaming_at_end": still,
            "server_cpu_ms_per_episode_s": 1000 * cpu / ep_s, "server_cpu_pct": 100 * cpu / wall,
            "pg_cpu_ms_per_episode_s": None if pg_cpu is None else 1000 * pg_cpu / ep_s,
            "xacts_per_episode_s": None if xacts is None else xacts / ep_s,
            "wal_syncs_per_episode_s": None if syncs is None else syncs / ep_s,
            "recorded_episode_s": round(rec["episode_s"], 1),
            "rows_per_episode_s": {t: v / es for t, v in rec["rows"].items()},
            "bytes_per_episode_s": {t: v / es for t, v in rec["bytes"].items()},
            "load": load}


def one_second(db: Database) -> Batch:
    """A recorded second of a talking episode from the realtime recording: both tracks' FLAC
    chunks of one flush from the middle of an attempt (about a second each), and 25 frame rows."""
    with db.session() as s:
        att = s.scalar(select(AudioChunk.attempt_id).group_by(AudioChunk.attempt_id)
                       .order_by(func.count().desc()).limit(1))
        chunks = {}
        for track in ("room", "assistant"):
            idxs = s.scalars(select(AudioChunk.idx).where(AudioChunk.attempt_id == att, AudioChunk.track == track)
                             .order_by(AudioChunk.idx)).all()
            c = s.scalar(select(AudioChunk).where(AudioChunk.attempt_id == att, AudioChunk.track == track,
                                                  AudioChunk.idx == idxs[len(idxs) // 2]))
            chunks[track] = {"track": track, "codec": c.codec, "data": c.data, "n_samples": c.n_samples}
    frames = [{"direction": d, "silent": False, "sent_us": 0, "arrived_us": 0} for d in ("room", "assistant")] * 13
    return Batch(frames=frames[:25], chunks=list(chunks.values()))


OWNER = "bench-capacity"
LEASE_S = 30.0


def _writer(db: Database, leases: list[Lease], second: Batch, stop: threading.Event, done: list[int]) -> None:
    """What a server process does each second of its episodes, again and again: write ``second``
    as each attempt's next second, all in one transaction with their leases' renewal (§8)."""
    k = 0
    while not stop.is_set():
        seq0 = k * len(second.frames)
        batches = [Batch(frames=[{**f, "attempt_id": x.attempt_id, "seq": seq0 + i, "slot": seq0 + i}
                                 for i, f in enumerate(second.frames)],
                         chunks=[{**c, "attempt_id": x.attempt_id, "idx": k, "start_sample": c["n_samples"] * k}
                                 for c in second.chunks]) for x in leases]
        if len(commit(db, batches, leases, OWNER, LEASE_S)) != len(leases):
            raise RuntimeError("a lease of the benchmark was lost")
        k += 1
        done.append(len(leases))


def _leases(db: Database, suite, n: int) -> list[Lease]:
    """``n`` episodes of a fresh realtime run, leased as a server leases them."""
    create_run(db, team=TEAM, model="capacity-writer", suite_path=str(suite.path), clock="realtime",
               conditions=["explicit"], limit=n)
    leases = [lease_episode(db, team=TEAM, admin=False, model="capacity-writer", clocks=["realtime"], owner=OWNER,
                            bridge_id="bench", bridge_rate=24000, model_revision="", lease_s=LEASE_S)
              for _ in range(n)]
    if None in leases:
        raise RuntimeError("an episode could not be leased")
    return leases


def pgwrite_part(args, url: str, suite) -> list[dict[str, Any]]:
    """Episode-seconds per second PostgreSQL takes in a session's per-second pattern, for each
    writer-thread count."""
    db = Database(url)
    try:
        second = one_second(db)
        out = []
        for threads in args.pg_threads:
            g = args.pg_group
            leases = _leases(db, suite, threads * g)
            stop, done = threading.Event(), []
            workers = [threading.Thread(target=_writer, args=(db, leases[i * g:(i + 1) * g], second, stop, done))
                       for i in range(threads)]
            pg0, ru0, f0 = _postgres_cpu(), resource.getrusage(resource.RUSAGE_SELF), _wal_syncs(url)
            t0 = time.monotonic()
            for w in workers:
                w.start()
            time.sleep(args.pg_seconds)
            stop.set()
            for w in workers:
                w.join()
            wall = time.monotonic() - t0
            ru = resource.getrusage(resource.RUSAGE_SELF)
            pg_cpu = _backend_cpu_s(url, pg0)
            time.sleep(1.5)  # the last statistics reach pg_stat_wal
            syncs = _wal_syncs(url) - f0
            me = ru.ru_utime + ru.ru_stime - ru0.ru_utime - ru0.ru_stime
            n = sum(done)
            out.append({"threads": threads, "group": g, "episode_s": n, "wall_s": round(wall, 2),
                        "episode_s_per_s": n / wall, "pg_cpu_ms_per_episode_s": 1000 * pg_cpu / max(n, 1),
                        "client_cpu_ms_per_episode_s": 1000 * me / max(n, 1),
                        "wal_syncs_per_episode_s": syncs / max(n, 1),
                        "bytes_per_episode_s": sum(len(c["data"]) for c in second.chunks), "load": _load()})
            print(f"  pgwrite {threads} threads: {n / wall:.0f} episode-s / s", file=sys.stderr, flush=True)
        return out
    finally:
        db.dispose()


def _scored(db: Database, run_id: str) -> tuple[float, Any]:
    """CPU seconds (this process and its children) of one fresh scoring of the run, and its result."""
    ru0 = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    res = score_run(db, run_id, ScoreOptions(asr="faster-whisper", judge="rule", workers=1, fresh=True))
    ru = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime for a, b in zip(ru0, ru)), res


async def scoring_part(args, workdir: Path) -> dict[str, Any]:
    """Scoring CPU per episode-second of distinct episodes. The bench suite's episodes are alike
    (one set of clips), so the content-hash caches would answer all but the first: the run is
    scored once to load the ASR model, then cold (empty caches: one episode's ASR and judge
    computed, the rest found) and warm (everything found); cold - warm is one episode's ASR and
    judge, warm / N the rest of an episode's scoring (detector replay, rules, metrics, database).
    The model's loading, once per scorer process, is reported, not counted."""
    suite = await asyncio.to_thread(build_bench_suite, workdir / "suite-scoring", args.cache_dir,
                                    target_s=args.score_target_s, n_pairs=args.score_episodes, name="bench-capacity")
    async with bench_env("sqlite", workdir, args.pg_url) as env:
        await lockstep_case(env, suite, args.score_bridge, 1, args.score_episodes, args.cache_dir, timeout_s=600)
        with env.db.session() as s:
            run_id = s.scalar(select(Run.id))
            frames = s.scalar(select(func.sum(Attempt.n_frames)).where(Attempt.status == AttemptStatus.completed))
        await asyncio.to_thread(_cold, env.db)
        first, _ = await asyncio.to_thread(_scored, env.db, run_id)  # loads the ASR model
        await asyncio.to_thread(_cold, env.db)
        cold, res = await asyncio.to_thread(_scored, env.db, run_id)
        warm, again = await asyncio.to_thread(_scored, env.db, run_id)
    n, ep_s = len(res.episodes), frames * PERIOD_S
    per_ep = ep_s / n
    asr_judge = max(0.0, cold - warm)
    return {"bridge": args.score_bridge, "episodes": n, "episode_s": round(ep_s, 1),
            "asr_calls_cold": res.calls["asr"], "asr_calls_warm": again.calls["asr"], "failures": len(res.failures),
            "cpu_first_s": round(first, 2), "cpu_cold_s": round(cold, 2), "cpu_warm_s": round(warm, 2),
            "cpu_s_per_episode_s": asr_judge / per_ep + warm / ep_s, "load": _load()}


def pg_capacity(results: dict[str, Any]) -> dict[str, float] | None:
    """Realtime episode-seconds per second one PostgreSQL takes: the best rate measured in a
    server process's write pattern (flushes with their leases' renewal), divided by how much more
    a realtime episode-second of the whole server asks of PostgreSQL (its token checks and polls
    besides): in backend CPU, or in WAL flushes (what commits wait for), whichever is more. A
    figure not measured (results of an older bench) leaves its ratio out (None)."""
    rt = next((r for r in results["realtime"] if r["db"] == "postgres"), None)
    if not results["pgwrite"] or rt is None:
        return None
    best = max(results["pgwrite"], key=lambda r: r["episode_s_per_s"])
    cpu = rt["pg_cpu_ms_per_episode_s"] / best["pg_cpu_ms_per_episode_s"]
    rt_syncs, pattern_syncs = rt.get("wal_syncs_per_episode_s"), best.get("wal_syncs_per_episode_s")
    syncs = rt_syncs / pattern_syncs if rt_syncs is not None and pattern_syncs else None
    factor = max(1.0, cpu, syncs or 0.0)
    return {"pattern": best["episode_s_per_s"], "cpu_ratio": cpu, "sync_ratio": syncs,
            "realtime": best["episode_s_per_s"] / factor}


def costs_from(results: dict[str, Any], db: str) -> tuple[str, UnitCosts]:
    """The model's unit costs: server CPU, bytes and rows from the realtime part on ``db`` (or the
    one database measured), transactions from PostgreSQL's."""
    rt = {r["db"]: r for r in results["realtime"]}
    pick = rt.get(db) or next(iter(rt.values()))
    pg, cap = rt.get("postgres", {}), pg_capacity(results)
    return pick["db"], UnitCosts(
        server_cpu_s=pick["server_cpu_ms_per_episode_s"] / 1000,
        db_bytes=sum(pick["bytes_per_episode_s"].values()),
        db_rows=sum(pick["rows_per_episode_s"].values()),
        db_xacts=pg.get("xacts_per_episode_s") or 0.0,
        pg_write_capacity=cap["realtime"] if cap else None,
        scoring_cpu_s=results["scoring"]["cpu_s_per_episode_s"])


def _si(x: float, unit: str) -> str:
    for p, f in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= f:
            return f"{x / f:.2f} {p}{unit}"
    return f"{x:.2f} {unit}"


def report(results: dict[str, Any]) -> str:
    m = results["machine"]
    L = [f"code {m['code']}; {m['cpus']} CPUs ({m['processor']}); load average at start {m['loadavg_at_start']}", "",
         "### Measured per episode-second", "",
         "| db | episodes | window s | server CPU ms / ep-s | PG CPU ms / ep-s | transactions / ep-s | "
         "rows / ep-s | bytes / ep-s | MB / 100 s | load |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["realtime"]:
        b, rows = sum(r["bytes_per_episode_s"].values()), sum(r["rows_per_episode_s"].values())
        pgc = "–" if r["pg_cpu_ms_per_episode_s"] is None else f"{r['pg_cpu_ms_per_episode_s']:.2f}"
        xa = "–" if r["xacts_per_episode_s"] is None else f"{r['xacts_per_episode_s']:.2f}"
        L.append(f"| {r['db']} | {r['episodes']} ({r['streaming_at_end']} at end) | {r['window_s']} | "
                 f"{r['server_cpu_ms_per_episode_s']:.1f} | {pgc} | {xa} | {rows:.1f} | {b:,.0f} | "
                 f"{b * 100 / 1e6:.3f} | {r['load']} |")
    L += ["", "| PostgreSQL writers | episodes per transaction | episode-s written | wall s | **episode-s / s** | "
          "PG CPU ms / ep-s | client CPU ms / ep-s | load |", "|---|---|---|---|---|---|---|---|"]
    for r in results["pgwrite"]:
        L.append(f"| {r['threads']} | {r.get('group', 1)} | {r['episode_s']} | {r['wall_s']} | **{r['episode_s_per_s']:.0f}** | "
                 f"{r['pg_cpu_ms_per_episode_s']:.2f} | {r['client_cpu_ms_per_episode_s']:.2f} | {r['load']} |")
    cap = results["pg_capacity"]
    if cap:
        syncs = "WAL flushes not measured" if cap["sync_ratio"] is None else f"{cap['sync_ratio']:.2f}x its WAL flushes"
        L += ["", f"PostgreSQL capacity for realtime episodes: {cap['pattern']:.0f} episode-s / s in a server "
              f"process's write pattern (flushes with their leases' renewal); a realtime episode-second costs "
              f"{cap['cpu_ratio']:.2f}x its backend CPU and {syncs}: {cap['pattern']:.0f} / "
              f"{max(1.0, cap['cpu_ratio'], cap['sync_ratio'] or 0.0):.2f} = "
              f"**{cap['realtime']:.0f} concurrent realtime episodes**"]
    s = results["scoring"]
    L += ["", f"Scoring: {s['episodes']} alike {s['bridge']} episodes, {s['episode_s']} episode-s, {s['failures']} "
          f"failures; first (model loading) {s['cpu_first_s']} CPU s, cold {s['cpu_cold_s']} CPU s ({s['asr_calls_cold']} ASR calls), warm {s['cpu_warm_s']} CPU s "
          f"({s['asr_calls_warm']}): **{1000 * s['cpu_s_per_episode_s']:.1f} CPU ms per episode-second** of distinct "
          f"episodes (load {s['load']})"]
    plan, c = Plan(**results["plan"]), results["capacity"]
    L += ["", "### The model", "", "Plan: " + ", ".join(f"{k} = {v}" for k, v in results["plan"].items()),
          f"Unit costs ({results['model_db']}): " + ", ".join(f"{k} = {v:.4g}" for k, v in results["costs"].items() if v is not None), "",
          "| figure | value |", "|---|---|",
          f"| stream | {c['stream_hours']:,.0f} h ({plan.episodes} x {plan.models} x {plan.mean_episode_s} s) |",
          f"| concurrent realtime episodes (K x M) | {c['concurrent']} |",
          f"| wall time (with {plan.gap_s} s per episode between episodes) | {c['wall_hours']:,.1f} h |",
          f"| server CPU | {c['server_cores']:.2f} cores -> {c['server_processes']} server processes at "
          f"{plan.process_core_share:.0%} of a core each |",
          f"| PostgreSQL load | {c['pg_load_episode_s']:.0f} episode-s / s: {c['pg_rows_per_s']:,.0f} rows / s, "
          f"{c['pg_xacts_per_s']:,.0f} transactions / s, {_si(c['pg_bytes_per_s'], 'B')} / s |",
          f"| storage | {_si(c['storage_bytes'], 'B')} |",
          f"| scoring on {plan.scoring_cores} cores | {c['scoring_hours']:,.1f} h |", "",
          "| resource | plan's load | capacity | utilisation | full at K = |", "|---|---|---|---|---|"]
    for r in c["resources"]:
        cap = "scales (add processes)" if r["capacity"] is None else f"{r['capacity']:,.1f} {r['unit']}"
        util = "–" if not r["capacity"] else f"{r['load'] / r['capacity']:.0%}"
        k = "–" if r["saturates_at_hosts"] is None else f"{r['saturates_at_hosts']:,.1f}"
        L.append(f"| {r['name']} | {r['load']:,.2f} {r['unit']} | {cap} | {util} | {k} |")
    L += ["", f"**Next bottleneck: {c['bottleneck']}** (the first to fill as GPU hosts are added, "
          f"{plan.per_host} episodes each)"]
    return "\n".join(L)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--quick", action="store_true", help="small sizes for make bench (about 80 s)")
    p.add_argument("--dbs", default="sqlite,postgres", help="databases for the realtime part")
    p.add_argument("--rt-episodes", type=int, default=None, help="concurrent realtime episodes (16; quick 4)")
    p.add_argument("--rt-window-s", type=float, default=None, help="measured window (30 s; quick 8 s)")
    p.add_argument("--rt-warmup-s", type=float, default=3.0)
    p.add_argument("--rt-bridge", default="always-talk")
    p.add_argument("--pg-threads", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help="writer threads, comma-separated (1,4,8; quick 1,4)")
    p.add_argument("--pg-group", type=int, default=1,
                   help="episodes per writer thread, written in one transaction each second (default 1)")
    p.add_argument("--pg-seconds", type=float, default=None, help="per writer-thread count (15 s; quick 4 s)")
    p.add_argument("--score-episodes", type=int, default=None, help="episodes recorded and scored (6; quick 2)")
    p.add_argument("--score-bridge", default="always-talk",
                   help="the model scored (default always-talk: speech in every window, the most ASR)")
    p.add_argument("--score-target-s", type=float, default=8.0,
                   help="scripted length of a scored episode (always-talk adds T's 60 s wait)")
    p.add_argument("--model-db", default="postgres", help="the database the model's bytes and rows come from")
    for f in dataclasses.fields(Plan):
        p.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default,
                       help=f"plan: {f.name} (default {f.default})")
    p.add_argument("--pg-url", default=DEFAULT_PG_URL)
    p.add_argument("--cache-dir", type=Path, default=ROOT / ".mpe", help="TTS clip cache (default .mpe)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    p.add_argument("--from-json", type=Path, default=None,
                   help="measure nothing: the model on the figures of an earlier --json, with this plan")
    a = p.parse_args(argv)
    q = a.quick
    a.rt_episodes = a.rt_episodes or (4 if q else 16)
    a.rt_window_s = a.rt_window_s or (8.0 if q else 30.0)
    a.pg_threads = a.pg_threads or ([1, 4] if q else [1, 4, 8])
    a.pg_seconds = a.pg_seconds or (4.0 if q else 15.0)
    a.score_episodes = a.score_episodes or (2 if q else 6)
    return a


async def amain(args) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": machine(), "realtime": [], "pgwrite": []}
    with tempfile.TemporaryDirectory(prefix="mpe-bench-capacity-") as tmp:
        workdir = Path(tmp)
        # long enough that no episode ends in the window: always-talk holds T's wait to its 60 s cap
        suite = await asyncio.to_thread(build_bench_suite, workdir / "suite", args.cache_dir,
                                        target_s=args.rt_window_s + 10, n_pairs=max(args.rt_episodes, *(t * args.pg_group for t in args.pg_threads)), name="bench-capacity")
        for kind in [k.strip() for k in args.dbs.split(",") if k.strip()]:
            ctx = private_pg(args.pg_url) if kind == "postgres" else database_url("sqlite", workdir, args.pg_url)
            with ctx as url:
                results["realtime"].append(r := await realtime_part(args, kind, url, workdir, suite))
                print(f"  realtime {kind}: {json.dumps(r)}", file=sys.stderr, flush=True)
                if kind == "postgres":
                    results["pgwrite"] = await asyncio.to_thread(pgwrite_part, args, url, suite)
        results["scoring"] = await scoring_part(args, workdir)
    return modelled(results, args)


def modelled(results: dict[str, Any], args) -> dict[str, Any]:
    """The measured figures with the model of ``args``'s plan on them."""
    plan = Plan(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Plan)})
    model_db, costs = costs_from(results, args.model_db)
    results |= {"plan": dataclasses.asdict(plan), "model_db": model_db, "costs": dataclasses.asdict(costs),
                "pg_capacity": pg_capacity(results),
                "capacity": dataclasses.asdict(capacity(costs, plan))}
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json:  # the model again on figures measured before, for another plan
        results = modelled(json.loads(args.from_json.read_text()), args)
    else:
        results = asyncio.run(amain(args))
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
