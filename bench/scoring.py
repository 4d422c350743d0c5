#!/usr/bin/env python
"""Scoring benchmark: assistant-audio hours scored per wall-clock minute, without and with ASR.

Recordings: the reference bridges (``silent``, ``always-talk``, ``oracle`` by default) run
on the built-in suite through the real server in lockstep, exactly as ``mpe demo`` does
(into a temporary data dir, or ``--data-dir``). Then every run is scored from the
database, once per mode, as a fresh scoring with empty transcript and verdict caches:

``windows``   ``--asr none``: detector replay (Silero) + window rules + metrics + analyses
``asr``       ``--asr faster-whisper`` (tiny.en int8, beam 5) + rule judge: the full offline path,
              every window with speech transcribed (the default)
``asr-fast``  the same with ``--judge rule:fast``: speech over the length limits decided on
              its duration, without ASR (the speed option)

``--parts workers`` measures scale-out instead: one run (``--workers-model``, default
``oracle``) scored in the ``asr`` mode, as a fresh scoring with cold caches, by one ``mpe score
RUN --workers 1`` process, then by two such processes started together (the distributed path:
they split the run through the database's claims), then by one ``mpe score RUN --workers 2``
(one process, a pool of two). Episodes per second of wall time, from the launch to the last
exit (process start and model loading included), and the ratio to one scorer, in the same run.
``--db postgres`` records and scores in a fresh PostgreSQL schema.

Assistant audio = the length of the recorded assistant tracks (all of each episode, also
its silence). Wall time = the whole ``score_run`` call (process pool start, database, and
the run-level statistics included). Scoring runs in ``--workers`` processes (default: one
per core).

Usage::

    python bench/scoring.py                    # about 5 minutes on 2 cores
    python bench/scoring.py --models always-talk --workers 2 --json out.json
    python bench/scoring.py --parts workers --db postgres   # 1 vs 2 scorers
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from sqlalchemy import delete  # noqa: E402

from bench.engine import database_url  # noqa: E402
from server.db import Database, TranscriptRow, VerdictRow  # noqa: E402
from server.scoring.runner import ScoreOptions, available_cores, score_run, scoring_config  # noqa: E402
from server.scoring.store import open_scoring  # noqa: E402
from server.settings import Settings  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"

MODES = {"windows": ("none", "rule"), "asr": ("faster-whisper", "rule"), "asr-fast": ("faster-whisper", "rule:fast")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="silent,always-talk,oracle")
    ap.add_argument("--modes", default=",".join(MODES), help="scoring modes, comma-separated: " + ", ".join(MODES))
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--data-dir", type=Path, default=None, help="keep recordings here (default: temporary)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    ap.add_argument("--parts", default="speed", help="speed (the modes above) and/or workers (1 vs 2 scorers)")
    ap.add_argument("--workers-model", default="oracle", help="workers part: the run to score")
    ap.add_argument("--db", default="sqlite", help="sqlite | postgres")
    ap.add_argument("--pg-url", default=PG_URL)
    args = ap.parse_args()
    if "workers" in args.parts:
        return bench_workers(args)
    console = Console(stderr=True)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    workers = args.workers or available_cores()
    modes = {m.strip(): MODES[m.strip()] for m in args.modes.split(",") if m.strip()}

    with tempfile.TemporaryDirectory(prefix="mpe-bench-scoring-") as tmp:
        data_dir = args.data_dir or Path(tmp)
        settings = Settings(data_dir=data_dir)
        settings.ensure_dirs()
        from server.cli.demo import run_demo

        t0 = time.monotonic()
        demo = asyncio.run(run_demo(settings, models, console=console, score=False))
        console.print(f"recorded {len(models)} runs in {time.monotonic() - t0:.0f} s")
        db = Database(settings.db_url)
        rows = []
        for mode, (asr, judge) in modes.items():
            for model, run_id in demo["runs"].items():
                with db.session() as s:  # cold caches: every transcript and verdict is computed
                    s.execute(delete(TranscriptRow))
                    s.execute(delete(VerdictRow))
                t = time.monotonic()
                res = score_run(db, run_id, ScoreOptions(asr=asr, judge=judge, workers=workers, fresh=True))
                wall = time.monotonic() - t
                audio_s = sum(e.duration_s for e in res.episodes)
                speech_s = sum(e.speech_ms for e in res.episodes) / 1000
                rows.append({"mode": mode, "model": model, "episodes": len(res.episodes), "audio_h": audio_s / 3600,
                             "speech_h": speech_s / 3600, "wall_s": wall, "asr_calls": res.calls["asr"],
                             "h_per_min": (audio_s / 3600) / (wall / 60), "failures": len(res.failures)})
                console.print(f"{mode:8s} {model:12s} {audio_s / 60:6.1f} min of assistant audio in {wall:6.1f} s")
        db.dispose()

    table = Table(title=f"Scoring speed ({workers} workers)")
    for col in ("mode", "model", "episodes", "assistant audio h", "of which speech h", "ASR calls", "wall s",
                "audio h / wall min"):
        table.add_column(col, justify="right")
    for mode in modes:
        sel = [r for r in rows if r["mode"] == mode]
        for r in sel:
            table.add_row(mode, r["model"], str(r["episodes"]), f"{r['audio_h']:.3f}", f"{r['speech_h']:.3f}",
                          str(r["asr_calls"]), f"{r['wall_s']:.1f}", f"{r['h_per_min']:.3f}")
        tot_a, tot_w = sum(r["audio_h"] for r in sel), sum(r["wall_s"] for r in sel)
        table.add_row(mode, "[bold]all[/bold]", str(sum(r["episodes"] for r in sel)), f"{tot_a:.3f}",
                      f"{sum(r['speech_h'] for r in sel):.3f}", str(sum(r["asr_calls"] for r in sel)),
                      f"{tot_w:.1f}", f"[bold]{tot_a / (tot_w / 60):.3f}[/bold]")
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps({"workers": workers, "rows": rows}, indent=2))


def _cold(db: Database) -> None:
    with db.session() as s:  # cold caches: every transcript and verdict is computed
        s.execute(delete(TranscriptRow))
        s.execute(delete(VerdictRow))


def _scorers(db: Database, settings: Settings, run_id: str, asr: str, judge: str, n: int, workers: int) -> float:
    """Wall seconds for ``n`` ``mpe score RUN --workers W`` processes, started together, to score a
    fresh scoring of the run (opened first, so that they all join it)."""
    _cold(db)
    config, config_hash = scoring_config(asr, judge)
    open_scoring(db, source_key=run_id, run_id=run_id, config=config, config_hash=config_hash, n_episodes=0,
                 fresh=True)
    env = dict(os.environ, DATABASE_URL=settings.db_url, MPE_DATA_DIR=str(settings.data_dir), PYTHONPATH=str(ROOT))
    t = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "server.cli", "score", run_id, "--asr", asr, "--judge", judge,
                               "--workers", str(workers), "--json"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True) for _ in range(n)]
    outs = [p.communicate()[0] for p in procs]
    wall = time.monotonic() - t
    if any(p.returncode for p in procs):
        raise SystemExit("a scorer failed")
    here = [json.loads(o)["scored_here"] for o in outs]
    print(f"  {n} scorer(s) x --workers {workers}: {wall:.1f} s, episodes per scorer {here}", file=sys.stderr)
    return wall


def bench_workers(args) -> None:
    console = Console(stderr=True)
    asr, judge = MODES["asr"]
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="mpe-bench-scoring-") as tmp, \
            database_url(args.db, Path(tmp), args.pg_url) as url:
        settings = Settings(data_dir=args.data_dir or Path(tmp), DATABASE_URL=url)
        settings.ensure_dirs()
        from server.cli.demo import run_demo

        demo = asyncio.run(run_demo(settings, [args.workers_model], console=console, score=False))
        db = Database(settings.db_url)
        run_id = demo["runs"][args.workers_model]
        cases = [("1 scorer", 1, 1), ("2 scorers (two processes)", 2, 1), ("1 scorer, --workers 2", 1, 2)]
        rows = []
        n = None
        for label, procs, workers in cases:
            wall = _scorers(db, settings, run_id, asr, judge, procs, workers)
            res = score_run(db, run_id, ScoreOptions(asr=asr, judge=judge, workers=1))  # resumes: all done
            n = len(res.episodes)
            rows.append({"case": label, "processes": procs, "workers": workers, "episodes": n, "wall_s": wall,
                         "episodes_per_s": n / wall})
        db.dispose()
    base = rows[0]["episodes_per_s"]
    table = Table(title=f"Scoring scale-out: {args.workers_model} run, {n} episodes, mode asr, {args.db}; "
                        f"load average {load0[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end, "
                        f"{available_cores()} cores")
    for col in ("case", "wall s", "episodes / s", "vs 1 scorer"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["case"], f"{r['wall_s']:.1f}", f"{r['episodes_per_s']:.3f}", f"{r['episodes_per_s'] / base:.2f}x")
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps({"loadavg": [load0, os.getloadavg()], "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
