#!/usr/bin/env python
"""Multi-process serving benchmark: ``mpe serve --workers N`` on PostgreSQL, lockstep throughput or realtime pacing.

Each case starts the real server as its own process tree (``python -m server.cli serve --workers
N``: a supervisor and N worker processes sharing one port with SO_REUSEPORT, server/cli/supervisor.py)
on a fresh PostgreSQL schema, then one bridge process of its own with ``--bridges`` reference
bridges (``clients.sdk.BridgeClient``, each its own WebSocket to that port; the kernel spreads
them over the workers). Once every bridge is connected a lockstep run of ``--episodes`` episodes
is queued; the bridges lease and play them until none is left.

With ``--clock realtime`` the run is a realtime one of ``--bridges`` episodes, one per bridge,
all started together (``--bridge always-talk`` by default there), and the figures are the room
frames' send error against ``t0 + n·80 ms`` over the first ``--seconds`` of each episode (p50,
p99, max, drift: the same figures as ``bench/engine.py``'s realtime part, from the same frame
log), the failed attempts and the bridges that had to connect again. The run is cancelled once
every episode's room frames are recorded past that span (and the drift window), so a case lasts
about ``--seconds`` whatever the episodes' length. ``--bare`` adds the bare pacing baseline of
``bench/engine.py`` (no engine at all) with the same bridges in the same run, each round.

Throughput = stream seconds (room frames of the completed attempts × 80 ms) per wall second
(first attempt start to last attempt end, from the ``attempts`` table). The cases alternate
(1 worker, 2 workers, 1, 2, …) within one run of this script, so both see the same machine; the
ratio of their means is the figure. CPU per part over each case (from ``/proc``; 100 % = one
core): the workers (also per stream second: what a worker costs, whatever share of the cores it
gets), the bridge process, PostgreSQL (all its processes, other sessions' too) and
everything else on the machine, because a shared machine's cores limit what a second worker can add.

Usage::

    python bench/workers.py                          # 1 vs 2 workers, 2 rounds, about 3 minutes
    python bench/workers.py --workers 1,2,4 --repeat 3 --json out.json
    python bench/workers.py --clock realtime --bridges 64 --seconds 30 --bare   # realtime at 64 sessions
    python bench/workers.py --clock realtime --bridges 64 --workers 1/0,1,2/0,2  # without / with group commit
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python bench/workers.py`` without an installed checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import func, select

from bench.engine import (
    DEFAULT_PG_URL,
    DRIFT_WINDOW,
    PERIOD_S,
    TEAM,
    _machine_busy_s,
    _span_s,
    attempt_rows,
    bare_case,
    bridge_host,
    build_bench_suite,
    database_url,
    machine,
    pacing_figures,
    room_errors,
    stop_process,
)
from bench.engine import process_cpu_s as _cpu_s
from server.auth import create_token
from server.cli.supervisor import STARTED_LOG
from server.db import Attempt, BridgeRow, Database, Episode, FrameRow
from server.engine.leasing import cancel_run, create_run
from server.engine.progress import run_progress

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _postgres_cpu() -> dict[int, float]:
    """CPU seconds so far of every PostgreSQL process on the machine (other people's sessions too)."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "comm").read_text().strip() == "postgres":
                    out[int(d.name)] = _cpu_s(int(d.name))
            except OSError:
                continue
    return out


@dataclass(frozen=True)
class Server:
    """One server configuration of the comparison: ``workers`` processes, and the flush group's
    window (``None``: the default of server/settings.py)."""

    workers: int
    flush_group_s: float | None = None

    @classmethod
    def parse(cls, text: str) -> Server:
        n, _, window = text.partition("/")
        return cls(int(n), float(window) if window else None)

    def __str__(self) -> str:
        return str(self.workers) if self.flush_group_s is None else f"{self.workers}/{self.flush_group_s:g}"


class Served:
    """``mpe serve --workers N`` on a free port against ``url``, its log in ``log``."""

    def __init__(self, url: str, data_dir: Path, workers: int, log: Path, flush_group_s: float | None = None):
        self.port, self.log, self.workers = _free_port(), log, workers
        # room for every bridge of the largest case (as bench/engine.py's server)
        env = dict(os.environ, DATABASE_URL=url, MPE_DATA_DIR=str(data_dir), MPE_MAX_BRIDGES_PER_TEAM="256")
        if flush_group_s is not None:
            env["MPE_FLUSH_GROUP_S"] = str(flush_group_s)
        with log.open("wb") as f:
            self.proc = subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "--port", str(self.port),
                                          "--workers", str(workers)], env=env, cwd=ROOT,
                                         stdout=subprocess.DEVNULL, stderr=f)

    def pids(self) -> list[int]:
        """The processes that serve: the workers (or the one server process)."""
        if self.workers == 1:
            return [self.proc.pid]
        return [int(m[1]) for m in STARTED_LOG.findall(self.log.read_text(errors="replace"))]

    async def wait_ready(self, timeout_s: float = 120) -> None:
        t0 = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self.log.read_text(errors='replace')[-2000:]}")
            text = self.log.read_text(errors="replace")
            if (self.workers > 1 and "serving on" in text) or (self.workers == 1 and "startup complete" in text):
                return
            if time.monotonic() - t0 > timeout_s:
                raise TimeoutError("the server did not start")
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        stop_process(self.proc)


def _connected(db: Database) -> int:
    with db.session() as s:
        return s.scalar(select(func.count()).select_from(BridgeRow).where(BridgeRow.disconnected_at.is_(None)))


async def start_bridge_host(db: Database, port: int, token: str, n: int, bridge: str,
                            cache_dir: Path) -> subprocess.Popen:
    """The bridge process (``n`` reference bridges ``bridge``) for the server on ``port``, once all
    ``n`` are connected (as the server's ``bridges`` table says)."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--bridge-host", "--server", f"ws://127.0.0.1:{port}",
         "--bridges", str(n), "--bridge", bridge, "--cache-dir", str(cache_dir)],
        env=dict(os.environ, MPE_TOKEN=token), cwd=ROOT)
    t0 = time.monotonic()
    while await asyncio.to_thread(_connected, db) < n:
        if time.monotonic() - t0 > 120 or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("the bridges did not connect")
        await asyncio.sleep(0.1)
    return proc


async def case(args, workdir: Path, suite, server: Server, round_: int) -> dict[str, Any]:
    realtime, workers = args.clock == "realtime", server.cli.supervisor
    with database_url("postgres", workdir, args.pg_url) as url:
        db = await asyncio.to_thread(Database, url)
        try:
            token = await asyncio.to_thread(create_token, db, TEAM, label="bench")
            served = Served(url, workdir / "data", workers,
                            (args.logs or workdir) / f"serve-{server}-{round_}.log".replace("/", "g"),
                            server.flush_group_s)
            bridges = None
            try:
                await served.wait_ready()
                bridges = await start_bridge_host(db, served.port, token, args.bridges, args.bridge, args.cache_dir)
                pids = [*served.pids(), bridges.pid]
                cpu0, pg0, busy0 = [_cpu_s(p) for p in pids], _postgres_cpu(), _machine_busy_s()
                wall0 = time.monotonic()
                run_id = await asyncio.to_thread(create_run, db, team=TEAM, model=args.bridge,
                                                 suite_path=str(suite.path), clock=args.clock,
                                                 conditions=["explicit"], limit=_episodes(args))
                # lockstep: until every episode is done; realtime: until every one has streamed
                # past the horizon (+ the drift window), then the run is cancelled
                while not await asyncio.to_thread(_measured, db, run_id, args):
                    if time.monotonic() - wall0 > args.timeout_s or bridges.poll() is not None:
                        raise RuntimeError(f"the run did not finish: {run_progress(db, run_id)}")
                    await asyncio.sleep(0.25)
                wall = time.monotonic() - wall0
                cpu = [_cpu_s(p) - c for p, c in zip(pids, cpu0)]
                pg = sum(v - pg0.get(k, 0.0) for k, v in _postgres_cpu().items())
                busy = _machine_busy_s()
                load = os.getloadavg()[0]
                if realtime:
                    await asyncio.to_thread(cancel_run, db, run_id)
                    for _ in range(150):  # sessions notice the cancel at their next flush
                        if not (await asyncio.to_thread(run_progress, db, run_id)).running:
                            break
                        await asyncio.sleep(0.1)
            finally:
                if bridges is not None:
                    bridges.send_signal(signal.SIGTERM)
                    bridges.wait(60)
                served.stop()
            rows = await asyncio.to_thread(attempt_rows, db, run_id)
            if realtime:
                errors = await asyncio.to_thread(room_errors, db, run_id, _need(args))
                pacing = {"episodes": len(errors), **pacing_figures(errors, _horizon(args))}
                reconnects = await asyncio.to_thread(_connections, db) - args.bridges
        finally:
            db.dispose()
    servers, bridge_cpu = sum(cpu[:-1]), cpu[-1]
    others = None if busy is None or busy0 is None else max(0.0, busy - busy0 - sum(cpu) - pg)
    common = {"workers": str(server), "round": round_,
              "cpu_servers_pct": round(100 * servers / wall, 1), "cpu_bridges_pct": round(100 * bridge_cpu / wall, 1),
              "cpu_postgres_pct": round(100 * pg / wall, 1),
              "cpu_others_pct": None if others is None else round(100 * others / wall, 1),
              "loadavg_1min_at_end": round(load, 2)}
    if realtime:  # the run was cancelled past the horizon: an attempt failed if it ended otherwise
        bad = [a for a in rows if a.status != "completed" and a.error_code != "aborted"]
        return {**common, "failed_attempts": len(bad),
                "failed_attempt_errors": sorted({f"{a.error_code}: {a.error_message}"[:200] for a in bad}),
                "episodes_per_worker": _per_worker(rows), "reconnects": reconnects, **pacing}
    done = [a for a in rows if a.status == "completed"]
    stream_s = sum(a.n_frames for a in done) * PERIOD_S
    span = _span_s(rows)
    return {**common, "episodes": len(done), "failed_attempts": len(rows) - len(done),
            "stream_s": round(stream_s, 1), "wall_s": round(span, 2), "stream_s_per_wall_s": round(stream_s / span, 1),
            "episodes_per_worker": _per_worker(done), "server_cpu_ms_per_stream_s": round(1000 * servers / stream_s, 2)}


def _per_worker(rows) -> list[int]:
    """How many of ``rows`` (attempts) each worker served, most first."""
    per: dict[str, int] = {}
    for a in rows:
        per[a.server_id] = per.get(a.server_id, 0) + 1
    return sorted(per.values(), reverse=True)


def _measured(db: Database, run_id: str, args) -> bool:
    """Lockstep: every episode of the run is done. Realtime: every episode's room frames have been
    recorded past the horizon and the drift window."""
    if args.clock == "lockstep":
        p = run_progress(db, run_id)
        return p.done == p.total
    with db.session() as s:
        last = (select(FrameRow.attempt_id, func.max(FrameRow.seq).label("last"))
                .join(Attempt, Attempt.id == FrameRow.attempt_id).join(Episode, Episode.id == Attempt.episode_id)
                .where(Episode.run_id == run_id, FrameRow.direction == "room")
                .group_by(FrameRow.attempt_id).subquery())
        return s.scalar(select(func.count()).select_from(last).where(last.c.last >= _need(args))) >= args.bridges


def _episodes(args) -> int:
    return args.bridges if args.clock == "realtime" else args.episodes


def _horizon(args) -> int:
    """Realtime: the last room frame whose send error is counted."""
    return int(round(args.seconds / PERIOD_S))


def _need(args) -> int:
    """Realtime: the last room frame the drift at the horizon needs."""
    return _horizon(args) + DRIFT_WINDOW // 2 + 1


def _connections(db: Database) -> int:
    with db.session() as s:
        return s.scalar(select(func.count()).select_from(BridgeRow))


async def bare(args, workdir: Path, suite) -> dict[str, Any]:
    """The bare pacing baseline of bench/engine.py (no engine) with the same bridges, in a process of their own."""
    ns = argparse.Namespace(rt_seconds=args.seconds, rt_bridge=args.bridge, cache_dir=args.cache_dir)
    t0 = time.monotonic()
    row = await bare_case(ns, workdir, suite, args.bridges, "process")
    return {"workers": "bare", "round": None, "wall_s": round(time.monotonic() - t0, 2),
            "loadavg_1min_at_end": round(os.getloadavg()[0], 2), **row}


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.0f} %"


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def report(results: dict[str, Any]) -> str:
    m = results["machine"]
    head = [f"code {m['code']}; {m['cpus']} CPUs ({m['processor']}), load average at start "
            f"{m['loadavg_at_start']}", ""]
    if results["clock"] == "realtime":
        return "\n".join(head + _realtime_report(results))
    lines = head + ["| workers | round | episodes (per worker) | stream s | wall s | **stream-s / wall-s** | "
                    "servers CPU | server CPU-ms per stream-s | bridges CPU | PostgreSQL CPU | others CPU | load |",
                    "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["cases"]:
        lines.append(f"| {r['workers']} | {r['round']} | {r['episodes']} ({' + '.join(map(str, r['episodes_per_worker']))})"
                     f" | {r['stream_s']:.0f} | {r['wall_s']:.2f} | **{r['stream_s_per_wall_s']:.0f}** | "
                     f"{r['cpu_servers_pct']:.0f} % | {r['server_cpu_ms_per_stream_s']:.1f} | {r['cpu_bridges_pct']:.0f} % | {r['cpu_postgres_pct']:.0f} % | "
                     f"{_pct(r['cpu_others_pct'])} | "
                     f"{r['loadavg_1min_at_end']} |")
    base = results["mean"].get("1")
    for w, v in results["mean"].items():
        ratio = f" ({v / base:.2f}× one worker)" if base and w != "1" else ""
        lines.append(f"\n{w} worker(s): mean {v:.0f} stream-s / wall-s{ratio}")
    return "\n".join(lines)


def _realtime_report(results: dict[str, Any]) -> list[str]:
    lines = ["| workers | round | episodes (per worker) | failed attempts | reconnects | p50 ms | **p99 ms** | max ms | "
             "> 10 ms % | drift median ms | drift worst ms | servers CPU | bridges CPU | PostgreSQL CPU | others CPU | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["cases"]:
        per = " + ".join(map(str, r.get("episodes_per_worker", [])))
        lines.append(f"| {r['workers']} | {r['round'] or ''} | {r['episodes']}{f' ({per})' if per else ''} | "
                     f"{r['failed_attempts']} | {r.get('reconnects', '–')} | {_ms(r.get('err_p50_ms'))} | "
                     f"**{_ms(r.get('err_p99_ms'))}** | {_ms(r.get('err_max_ms'))} | {_ms(r.get('late_over_10ms_pct'))} | "
                     f"{_ms(r.get('drift_median_ms'))} | {_ms(r.get('drift_max_ms'))} | "
                     f"{_pct(r.get('cpu_servers_pct', r.get('cpu_process_pct')))} | {_pct(r.get('cpu_bridges_pct'))} | "
                     f"{_pct(r.get('cpu_postgres_pct'))} | {_pct(r.get('cpu_others_pct'))} | {r['loadavg_1min_at_end']} |")
    base = results["mean"].get("bare")
    for w, v in results["mean"].items():
        ratio = f" ({v / base:.1f}× the bare baseline's)" if base and w != "bare" else ""
        lines.append(f"\n{w}{' worker(s)' if w != 'bare' else ''}: mean p99 send error {v:.1f} ms{ratio}")
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--workers", type=lambda s: [Server.parse(x) for x in s.split(",")], default="1,2",
                   help="servers to compare, in this order each round (default 1,2): a worker count, or N/W for N "
                        "workers whose flushes wait at most W s for a group (MPE_FLUSH_GROUP_S; 1/0 and 1: "
                        "without and with group commit)")
    p.add_argument("--repeat", type=int, default=2, help="rounds (default 2)")
    p.add_argument("--bridges", type=int, default=8, help="bridges connected at once (default 8)")
    p.add_argument("--clock", choices=["lockstep", "realtime"], default="lockstep",
                   help="lockstep throughput (default) or realtime pacing (one episode per bridge)")
    p.add_argument("--bare", action="store_true", help="realtime: also the bare pacing baseline, each round")
    p.add_argument("--bridge", default=None, help="reference bridge (default silent; realtime: always-talk)")
    p.add_argument("--episodes", type=int, default=48, help="episodes per case (default 48)")
    p.add_argument("--seconds", type=float, default=20.0,
                   help="stream length of an episode (default 20 s; realtime: the span measured, episodes 6 s longer)")
    p.add_argument("--timeout-s", type=float, default=600.0)
    p.add_argument("--pg-url", default=DEFAULT_PG_URL, help="PostgreSQL server (a schema per case, dropped after)")
    p.add_argument("--cache-dir", type=Path, default=ROOT / ".mpe", help="TTS clip cache (default .mpe)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    p.add_argument("--logs", type=Path, default=None,
                   help="keep the servers' logs in this folder (serve-<workers>-<round>.log); by default they go "
                        "with the temporary folder")
    p.add_argument("--bridge-host", action="store_true", help=argparse.SUPPRESS)  # the bridge process itself
    p.add_argument("--server", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.bridge = args.bridge or ("always-talk" if args.clock == "realtime" else "silent")
    if args.logs is not None:
        args.logs.mkdir(parents=True, exist_ok=True)
    return args


async def main(args) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()},
                               "clock": args.clock, "cases": []}
    realtime = args.clock == "realtime"
    with tempfile.TemporaryDirectory(prefix="mpe-bench-workers-") as tmp:
        workdir = Path(tmp)
        suite = await asyncio.to_thread(build_bench_suite, workdir / "suite", args.cache_dir,
                                        target_s=args.seconds + (6.0 if realtime else 0.0),
                                        n_pairs=_episodes(args), name="bench-workers")
        for r in range(1, args.repeat + 1):
            if realtime and args.bare:
                results["cases"].append(res := await bare(args, workdir, suite))
                print(json.dumps(res), file=sys.stderr)
            for w in args.workers:
                results["cases"].append(res := await case(args, workdir, suite, w, r))
                print(json.dumps(res), file=sys.stderr)
    figure = "err_p99_ms" if realtime else "stream_s_per_wall_s"
    kinds = (["bare"] if realtime and args.bare else []) + [str(w) for w in args.workers]
    results["mean"] = {w: statistics.mean(c[figure] for c in results["cases"] if c["workers"] == w and figure in c)
                       for w in kinds if any(c["workers"] == w and figure in c for c in results["cases"])}
    return results


if __name__ == "__main__":
    a = parse_args()
    if a.bridge_host:
        asyncio.run(bridge_host(a.server, os.environ["MPE_TOKEN"], a.bridges, a.bridge, a.cache_dir))
        sys.exit(0)
    out = asyncio.run(main(a))
    print(report(out))
    if a.json:
        a.json.write_text(json.dumps(out, indent=2, default=str) + "\n")
