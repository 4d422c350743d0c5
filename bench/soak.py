#!/usr/bin/env python
"""Soak benchmark: many realtime episodes for minutes against one server process, watching it.

The server is a process of its own (the application of ``mpe serve``: ``create_app`` under the
same uvicorn configuration, plus one task that writes the event loop's asyncio task count to a
file every ``--sample-s``); the bridges are another process (``--episodes`` reference bridges,
each its own WebSocket, ``clients.sdk.BridgeClient`` with its reconnect). Once every bridge is
connected a realtime run of ``--episodes`` × ``--rounds`` episodes is queued, each about ``--seconds``
of stream (a suite built for it, real speech): ``--episodes`` run at once, and each bridge plays
``--rounds`` of them one after the other (one round: one long episode each for the whole soak;
more rounds of shorter episodes: what each episode leaves behind in the server shows as growth).

Every ``--sample-s`` the bench reads the server process from ``/proc``: resident memory
(``VmRSS``), threads, open file descriptors and how many of them are sockets, with the task
count the server wrote. At the end, from the database, per completed attempt:

- room frames: dropped (a seq missing from 0..n-1), duplicated, reordered (a seq not above the
  one logged before it) and late (sent more than 10 ms after ``seq × 80 ms``; the largest error);
- assistant frames: reordered, late (placed at a slot after their seq, §4) and missing slots
  (fed as silence because nothing arrived), from the attempt's ``stats.server``, and stalls (a
  frame placed further behind its seq than the one before it: a bridge that answers one frame per
  slot keeps a lag once it has one, so one stall makes every later frame late);
- bridge connections: one row per connection in ``bridges``; those that ended before the bench
  stopped the bridges are disconnects (the SDK connects again after each).

Memory and descriptors are compared with the same process's own figures at the start of the
soak (the ratio end / start, and the growth per minute), not with absolute thresholds.

Usage::

    python bench/soak.py                                  # 16 episodes, 10 minutes, PostgreSQL
    python bench/soak.py --seconds 60 --episodes 4        # a short one
    python bench/soak.py --seconds 60 --rounds 10         # 160 episodes of a minute, 16 at a time
    python bench/soak.py --db sqlite --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python bench/soak.py`` without an installed checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import func, select

from bench.engine import (
    DEFAULT_PG_URL,
    PERIOD_US,
    TEAM,
    attempt_rows,
    build_bench_suite,
    database_url,
    machine,
    stop_process,
)
from bench.workers import _free_port, bridge_host
from server.auth import create_token
from server.db import BridgeRow, Database, FrameRow
from server.engine.leasing import create_run
from server.engine.progress import run_progress

ROOT = Path(__file__).resolve().parent.parent
LATE_MS = 10.0  # a room frame sent later than this after its ideal time counts as late


# --- the server process -------------------------------------------------------------------


async def serve_with_task_counts(port: int, counts: Path, every_s: float) -> None:
    """The application of ``mpe serve`` on ``port``, writing ``{"t", "tasks"}`` lines to ``counts``."""
    import uvicorn

    from server.app import create_app, uvicorn_config
    from server.settings import load_settings

    s = load_settings()
    logging.getLogger("mpe").setLevel(logging.INFO)  # as ``mpe serve``
    server = uvicorn.Server(uvicorn_config(create_app(s), "127.0.0.1", port, s.http_idle_timeout_s,
                                           log_level="info"))

    async def sample() -> None:
        with counts.open("a") as f:
            while True:
                tasks = asyncio.all_tasks()
                by = Counter(getattr(t.get_coro(), "__qualname__", "?") for t in tasks)
                f.write(json.dumps({"t": time.time(), "tasks": len(tasks), "by": dict(by.most_common(8))}) + "\n")
                f.flush()
                await asyncio.sleep(every_s)

    sampler = asyncio.create_task(sample())
    try:
        await server.serve()
    finally:
        sampler.cancel()


# --- reading the server process -------------------------------------------------------------


def proc_figures(pid: int) -> dict[str, int]:
    """Resident memory (KiB), threads, open descriptors and sockets of process ``pid``."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    fds = sockets = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed while we looked
            continue
        fds += 1
        sockets += target.startswith("socket:")
    return {"rss_kib": int(status["VmRSS"].split()[0]), "threads": int(status["Threads"]), "fds": fds,
            "sockets": sockets}


def last_task_count(counts: Path) -> dict[str, Any]:
    """The server's last line: its task count, and the most common coroutines among them."""
    lines = counts.read_text().splitlines() if counts.exists() else []
    last = json.loads(lines[-1]) if lines else {}
    return {"asyncio_tasks": last.get("tasks"), "tasks_by_coroutine": last.get("by")}


def sample(pid: int, counts: Path, t0: float, phase: str) -> dict[str, Any]:
    return {"t_s": round(time.monotonic() - t0, 1), "phase": phase, **proc_figures(pid),
            **last_task_count(counts), "load_1min": os.getloadavg()[0]}


# --- the recordings -----------------------------------------------------------------------


def frame_figures(db: Database, attempt_id: str, n_frames: int) -> dict[str, int | float]:
    """Dropped, duplicated, reordered and late frames of one attempt, from its frame log (in the
    order it was written)."""
    with db.session() as s:
        rows = s.execute(select(FrameRow.direction, FrameRow.seq, FrameRow.slot, FrameRow.sent_us)
                         .where(FrameRow.attempt_id == attempt_id).order_by(FrameRow.id)).all()
    room = [(seq, sent) for d, seq, _, sent in rows if d == "room"]
    asst = [seq for d, seq, _, _ in rows if d == "assistant"]
    lag = [slot - seq for d, seq, slot, _ in rows if d == "assistant"]  # slots behind its own seq
    seqs = [seq for seq, _ in room]
    errors_ms = [(sent - seq * PERIOD_US) / 1000.0 for seq, sent in room if sent is not None]
    return {
        "room_dropped": len(set(range(n_frames)) - set(seqs)),
        "room_duplicated": len(seqs) - len(set(seqs)),
        "room_reordered": sum(b <= a for a, b in zip(seqs, seqs[1:])),
        "room_late": sum(e > LATE_MS for e in errors_ms),
        "room_err_max_ms": round(max(errors_ms, default=0.0), 2),
        "assistant_frames": len(asst),
        "assistant_reordered": sum(b <= a for a, b in zip(asst, asst[1:])),
        # a frame later than the one before it: a stall (a bridge that sends one frame per slot
        # keeps the lag it has, so every frame after a stall is late by as much, §4 placement)
        "assistant_stalls": sum(b > a for a, b in zip([0, *lag], lag)),
    }


def connections(db: Database) -> tuple[int, int]:
    """Bridge connections made so far, and how many of them have ended."""
    with db.session() as s:
        total = s.scalar(select(func.count()).select_from(BridgeRow))
        ended = s.scalar(select(func.count()).select_from(BridgeRow).where(BridgeRow.disconnected_at.is_not(None)))
    return total, ended


# --- the soak -------------------------------------------------------------------------------


async def soak(args) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mpe-bench-soak-") as tmp:
        workdir = Path(tmp)
        suite = await asyncio.to_thread(build_bench_suite, workdir / "suite", args.cache_dir, target_s=args.seconds,
                                        n_pairs=args.episodes * args.rounds, name="bench-soak")
        with database_url(args.db, workdir, args.pg_url) as url:
            db = await asyncio.to_thread(Database, url)
            try:
                return await _soak(args, workdir, suite, url, db)
            finally:
                db.dispose()


async def _soak(args, workdir: Path, suite, url: str, db: Database) -> dict[str, Any]:
    at_start = machine()
    token = await asyncio.to_thread(create_token, db, TEAM, label="bench")
    port, counts, log = _free_port(), workdir / "tasks.jsonl", workdir / "serve.log"
    env = dict(os.environ, DATABASE_URL=url, MPE_DATA_DIR=str(workdir / "data"))
    me = str(Path(__file__).resolve())
    with log.open("wb") as f:
        server = subprocess.Popen([sys.executable, me, "--serve", "--port", str(port), "--counts", str(counts),
                                   "--sample-s", str(args.sample_s)], env=env, cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=f)
    bridges = None
    samples: list[dict[str, Any]] = []
    t0 = time.monotonic()
    try:
        while "startup complete" not in log.read_text(errors="replace"):
            if server.poll() is not None or time.monotonic() - t0 > 120:
                raise RuntimeError(f"the server did not start: {log.read_text(errors='replace')[-2000:]}")
            await asyncio.sleep(0.1)
        samples.append(sample(server.pid, counts, t0, "idle"))
        bridges = subprocess.Popen([sys.executable, me, "--bridge-host", "--server", f"ws://127.0.0.1:{port}",
                                    "--episodes", str(args.episodes), "--bridge", args.bridge,
                                    "--cache-dir", str(args.cache_dir)], env=dict(os.environ, MPE_TOKEN=token),
                                   cwd=ROOT)
        while (await asyncio.to_thread(connections, db))[0] < args.episodes:
            if bridges.poll() is not None or time.monotonic() - t0 > 180:
                raise RuntimeError("the bridges did not connect")
            await asyncio.sleep(0.1)
        samples.append(sample(server.pid, counts, t0, "connected"))
        run_id = await asyncio.to_thread(create_run, db, team=TEAM, model=args.bridge, suite_path=str(suite.path),
                                         clock="realtime", conditions=["explicit"], limit=args.episodes * args.rounds)
        started = time.monotonic()
        next_sample = started + args.sample_s
        while True:
            p = await asyncio.to_thread(run_progress, db, run_id)
            if p.done == p.total:
                break
            if time.monotonic() - started > args.seconds * args.rounds * 2 + 300 or bridges.poll() is not None:
                raise RuntimeError(f"the run did not finish: {p}")
            if time.monotonic() >= next_sample:
                samples.append(sample(server.pid, counts, t0, "running" if p.running else "starting"))
                next_sample += args.sample_s
            await asyncio.sleep(0.25)
        soak_s = time.monotonic() - started
        samples.append(sample(server.pid, counts, t0, "finished"))
        made, ended = await asyncio.to_thread(connections, db)
        bridges.send_signal(signal.SIGTERM)
        bridges.wait(60)
        bridges = None
        await asyncio.sleep(args.sample_s + 1.0)  # the server's next task count comes after they left
        samples.append(sample(server.pid, counts, t0, "bridges gone"))
        load = os.getloadavg()
    finally:
        if bridges is not None:
            bridges.kill()
            bridges.wait()
        stop_process(server)
    rows = await asyncio.to_thread(attempt_rows, db, run_id)
    done = [a for a in rows if a.status == "completed"]
    per = [await asyncio.to_thread(frame_figures, db, a.id, a.n_frames) for a in done]
    stats = [(a.stats or {}).get("server", {}) for a in done]
    total = {k: sum(f[k] for f in per) for k in per[0] if k != "room_err_max_ms"} if per else {}
    return {
        "machine": at_start, "args": {k: str(v) for k, v in vars(args).items()}, "loadavg_at_end": load,
        "soak_s": round(soak_s, 1), "episodes_completed": len(done), "attempts": len(rows),
        "failed_attempts": dict(Counter(f"{a.error_code}: {a.error_message}"[:200] for a in rows
                                        if a.status != "completed")),
        "stream_s_per_episode": round(sum(a.n_frames for a in done) * PERIOD_US / 1e6 / max(1, len(done)), 1),
        "room_frames": sum(a.n_frames for a in done), **total,
        "room_err_max_ms": max((f["room_err_max_ms"] for f in per), default=None),
        "assistant_late": sum(s.get("late_frames", 0) for s in stats),
        "assistant_max_lateness_frames": max((s.get("max_lateness_frames", 0) for s in stats), default=None),
        "assistant_missing_slots": sum(s.get("missing_slots", 0) for s in stats),
        "bridge_connections": made, "disconnects": ended,
        "samples": samples,
    }


def summary(res: dict[str, Any]) -> dict[str, Any]:
    """Start, middle and end of the running soak, and the growth (end / start, per minute)."""
    running = [s for s in res["samples"] if s["phase"] == "running"] or res["samples"]
    first, mid, last = running[0], running[len(running) // 2], running[-1]
    minutes = max((last["t_s"] - first["t_s"]) / 60, 1e-9)
    out: dict[str, Any] = {}
    for k in ("rss_kib", "fds", "sockets", "threads", "asyncio_tasks"):
        if first[k] is None or last[k] is None:
            continue
        out[k] = {"start": first[k], "middle": mid[k], "end": last[k], "min": min(s[k] for s in running),
                  "max": max(s[k] for s in running), "end_over_start": round(last[k] / first[k], 3) if first[k] else None,
                  "growth_per_min": round((last[k] - first[k]) / minutes, 2)}
    return out


def report(res: dict[str, Any]) -> str:
    m, s = res["machine"], res["summary"]
    lines = [f"code {m['code']}; {m['cpus']} CPUs, load average at start {m['loadavg_at_start']}, at end "
             f"{' '.join(f'{x:.2f}' for x in res['loadavg_at_end'])}",
             f"{res['episodes_completed']} realtime episodes of {res['stream_s_per_episode']} s, "
             f"{res['args']['episodes']} at a time, "
             f"{res['soak_s']} s of soak, {res['attempts']} attempts, failed: {res['failed_attempts'] or 'none'}",
             f"room frames {res['room_frames']}: dropped {res.get('room_dropped')}, duplicated "
             f"{res.get('room_duplicated')}, reordered {res.get('room_reordered')}, late (> {LATE_MS:g} ms) "
             f"{res.get('room_late')}, largest send error {res['room_err_max_ms']} ms",
             f"assistant frames {res.get('assistant_frames')}: reordered {res.get('assistant_reordered')}, late "
             f"{res['assistant_late']} (at most {res['assistant_max_lateness_frames']} slots), stalls "
             f"{res.get('assistant_stalls')}, missing slots {res['assistant_missing_slots']}",
             f"bridge connections {res['bridge_connections']} for {res['args']['episodes']} bridges, disconnects "
             f"{res['disconnects']}", "",
             "| server process | start | middle | end | min | max | end / start | growth per minute |",
             "|---|---|---|---|---|---|---|---|"]
    for k, v in s.items():
        lines.append(f"| {k} | {v['start']} | {v['middle']} | {v['end']} | {v['min']} | {v['max']} | "
                     f"{v['end_over_start']} | {v['growth_per_min']} |")
    idle = next(x for x in res["samples"] if x["phase"] == "idle")
    gone = res["samples"][-1]
    loads = [x["load_1min"] for x in res["samples"]]
    lines.append(f"\nmachine load (1 min) over the soak: {min(loads):.2f} to {max(loads):.2f}, "
                 f"median {sorted(loads)[len(loads) // 2]:.2f}")
    lines.append(f"\nserver tasks by coroutine after the bridges left: {gone.get('tasks_by_coroutine')}")
    lines.append(f"\nidle before the bridges: {idle['rss_kib']} KiB, {idle['fds']} fds ({idle['sockets']} sockets), "
                 f"{idle['asyncio_tasks']} tasks; after they left: {gone['rss_kib']} KiB, {gone['fds']} fds "
                 f"({gone['sockets']} sockets), {gone['asyncio_tasks']} tasks")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--episodes", type=int, default=16, help="realtime episodes at once, one bridge each (default 16)")
    p.add_argument("--seconds", type=float, default=600.0, help="stream length of each episode (default 600 s)")
    p.add_argument("--rounds", type=int, default=1, help="episodes each bridge plays one after the other (default 1)")
    p.add_argument("--sample-s", type=float, default=10.0, help="seconds between samples of the server (default 10)")
    p.add_argument("--bridge", default="echo", help="reference bridge (default echo: it talks whenever the room does)")
    p.add_argument("--db", default="postgres", choices=["sqlite", "postgres"])
    p.add_argument("--pg-url", default=DEFAULT_PG_URL, help="PostgreSQL server (a schema of its own, dropped after)")
    p.add_argument("--cache-dir", type=Path, default=ROOT / ".mpe", help="TTS clip cache (default .mpe)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures and samples as JSON here")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the server process itself
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--counts", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--bridge-host", action="store_true", help=argparse.SUPPRESS)  # the bridge process itself
    p.add_argument("--server", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


if __name__ == "__main__":
    a = parse_args()
    if a.serve:
        asyncio.run(serve_with_task_counts(a.port, a.counts, a.sample_s))
        sys.exit(0)
    if a.bridge_host:
        asyncio.run(bridge_host(a.server, os.environ["MPE_TOKEN"], a.episodes, a.bridge, a.cache_dir))
        sys.exit(0)
    out = asyncio.run(soak(a))
    out["summary"] = summary(out)
    print(report(out))
    if a.json:
        a.json.write_text(json.dumps(out, indent=2, default=str) + "\n")
