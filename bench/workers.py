#!/usr/bin/env python
"""Multi-process serving benchmark: lockstep throughput of ``mpe serve --workers N`` on PostgreSQL.

Each case starts the real server as its own process tree (``python -m server.cli serve --workers
N``: a supervisor and N worker processes sharing one port with SO_REUSEPORT, server/workers.py)
on a fresh PostgreSQL schema, then one bridge process of its own with ``--bridges`` reference
bridges (``clients.sdk.BridgeClient``, each its own WebSocket to that port; the kernel spreads
them over the workers). Once every bridge is connected a lockstep run of ``--episodes`` episodes
is queued; the bridges lease and play them until none is left.

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
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python bench/workers.py`` without an installed checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import func, select

from bench.engine import (
    DEFAULT_PG_URL,
    PERIOD_S,
    TEAM,
    _machine_busy_s,
    _span_s,
    attempt_rows,
    bridge_host,
    build_bench_suite,
    database_url,
    machine,
    stop_process,
)
from bench.engine import process_cpu_s as _cpu_s
from server.auth import create_token
from server.db import BridgeRow, Database
from server.engine.leasing import create_run
from server.engine.progress import run_progress
from server.workers import STARTED_LOG

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


class Served:
    """``mpe serve --workers N`` on a free port against ``url``, its log in ``log``."""

    def __init__(self, url: str, data_dir: Path, workers: int, log: Path):
        self.port, self.log, self.workers = _free_port(), log, workers
        env = dict(os.environ, DATABASE_URL=url, MPE_DATA_DIR=str(data_dir))
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


async def case(args, workdir: Path, suite, workers: int, round_: int) -> dict[str, Any]:
    with database_url("postgres", workdir, args.pg_url) as url:
        db = await asyncio.to_thread(Database, url)
        try:
            token = await asyncio.to_thread(create_token, db, TEAM, label="bench")
            served = Served(url, workdir / "data", workers, workdir / f"serve-{workers}-{round_}.log")
            bridges = None
            try:
                await served.wait_ready()
                bridges = await start_bridge_host(db, served.port, token, args.bridges, args.bridge, args.cache_dir)
                pids = [*served.pids(), bridges.pid]
                cpu0, pg0, busy0 = [_cpu_s(p) for p in pids], _postgres_cpu(), _machine_busy_s()
                wall0 = time.monotonic()
                run_id = await asyncio.to_thread(create_run, db, team=TEAM, model=args.bridge,
                                                 suite_path=str(suite.path), clock="lockstep",
                                                 conditions=["explicit"], limit=args.episodes)
                while True:
                    p = await asyncio.to_thread(run_progress, db, run_id)
                    if p.done == p.total:
                        break
                    if time.monotonic() - wall0 > args.timeout_s or bridges.poll() is not None:
                        raise RuntimeError(f"the run did not finish: {p}")
                    await asyncio.sleep(0.1)
                wall = time.monotonic() - wall0
                cpu = [_cpu_s(p) - c for p, c in zip(pids, cpu0)]
                pg = sum(v - pg0.get(k, 0.0) for k, v in _postgres_cpu().items())
                busy = _machine_busy_s()
                load = os.getloadavg()[0]
            finally:
                if bridges is not None:
                    bridges.send_signal(signal.SIGTERM)
                    bridges.wait(60)
                served.stop()
            rows = await asyncio.to_thread(attempt_rows, db, run_id)
        finally:
            db.dispose()
    done = [a for a in rows if a.status == "completed"]
    stream_s = sum(a.n_frames for a in done) * PERIOD_S
    span = _span_s(rows)
    per_worker: dict[str, int] = {}
    for a in done:
        per_worker[a.server_id] = per_worker.get(a.server_id, 0) + 1
    servers, bridge_cpu = sum(cpu[:-1]), cpu[-1]
    others = None if busy is None or busy0 is None else max(0.0, busy - busy0 - sum(cpu) - pg)
    return {"workers": workers, "round": round_, "episodes": len(done), "failed_attempts": len(rows) - len(done),
            "stream_s": round(stream_s, 1), "wall_s": round(span, 2), "stream_s_per_wall_s": round(stream_s / span, 1),
            "episodes_per_worker": sorted(per_worker.values(), reverse=True),
            "cpu_servers_pct": round(100 * servers / wall, 1),
            "server_cpu_ms_per_stream_s": round(1000 * servers / stream_s, 2), "cpu_bridges_pct": round(100 * bridge_cpu / wall, 1),
            "cpu_postgres_pct": round(100 * pg / wall, 1),
            "cpu_others_pct": None if others is None else round(100 * others / wall, 1),
            "loadavg_1min_at_end": round(load, 2)}


def report(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [f"code {m['code']}; {m['cpus']} CPUs ({m['processor']}), load average at start "
             f"{m['loadavg_at_start']}", "",
             "| workers | round | episodes (per worker) | stream s | wall s | **stream-s / wall-s** | "
             "servers CPU | server CPU-ms per stream-s | bridges CPU | PostgreSQL CPU | others CPU | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["cases"]:
        others = "–" if r["cpu_others_pct"] is None else f"{r['cpu_others_pct']:.0f} %"
        lines.append(f"| {r['workers']} | {r['round']} | {r['episodes']} ({' + '.join(map(str, r['episodes_per_worker']))})"
                     f" | {r['stream_s']:.0f} | {r['wall_s']:.2f} | **{r['stream_s_per_wall_s']:.0f}** | "
                     f"{r['cpu_servers_pct']:.0f} % | {r['server_cpu_ms_per_stream_s']:.1f} | {r['cpu_bridges_pct']:.0f} % | {r['cpu_postgres_pct']:.0f} % | "
                     f"{others} | "
                     f"{r['loadavg_1min_at_end']} |")
    base = results["mean"].get(1)
    for w, v in sorted(results["mean"].items()):
        ratio = f" ({v / base:.2f}× one worker)" if base and w != 1 else ""
        lines.append(f"\n{w} worker(s): mean {v:.0f} stream-s / wall-s{ratio}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2],
                   help="worker counts to compare, in this order each round (default 1,2)")
    p.add_argument("--repeat", type=int, default=2, help="rounds (default 2)")
    p.add_argument("--bridges", type=int, default=8, help="bridges connected at once (default 8)")
    p.add_argument("--bridge", default="silent", help="reference bridge (default silent)")
    p.add_argument("--episodes", type=int, default=48, help="episodes per case (default 48)")
    p.add_argument("--seconds", type=float, default=20.0, help="stream length of an episode (default 20 s)")
    p.add_argument("--timeout-s", type=float, default=600.0)
    p.add_argument("--pg-url", default=DEFAULT_PG_URL, help="PostgreSQL server (a schema per case, dropped after)")
    p.add_argument("--cache-dir", type=Path, default=ROOT / ".mpe", help="TTS clip cache (default .mpe)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    p.add_argument("--bridge-host", action="store_true", help=argparse.SUPPRESS)  # the bridge process itself
    p.add_argument("--server", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


async def main(args) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()}, "cases": []}
    with tempfile.TemporaryDirectory(prefix="mpe-bench-workers-") as tmp:
        workdir = Path(tmp)
        suite = await asyncio.to_thread(build_bench_suite, workdir / "suite", args.cache_dir, target_s=args.seconds,
                                        n_pairs=args.episodes, name="bench-workers")
        for r in range(1, args.repeat + 1):
            for w in args.workers:
                results["cases"].append(res := await case(args, workdir, suite, w, r))
                print(json.dumps(res), file=sys.stderr)
    results["mean"] = {w: statistics.mean(c["stream_s_per_wall_s"] for c in results["cases"] if c["workers"] == w)
                       for w in args.workers}
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
