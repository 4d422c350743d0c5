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

Assistant audio = the length of the recorded assistant tracks (all of each episode, also
its silence). Wall time = the whole ``score_run`` call (process pool start, database, and
the run-level statistics included). Scoring runs in ``--workers`` processes (default: one
per core).

Usage::

    python bench/scoring.py                    # about 5 minutes on 2 cores
    python bench/scoring.py --models always-talk --workers 2 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from sqlalchemy import delete  # noqa: E402

from server.db import Database, TranscriptRow, VerdictRow  # noqa: E402
from server.scoring.runner import ScoreOptions, available_cores, score_run  # noqa: E402
from server.settings import Settings  # noqa: E402

MODES = {"windows": ("none", "rule"), "asr": ("faster-whisper", "rule"), "asr-fast": ("faster-whisper", "rule:fast")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="silent,always-talk,oracle")
    ap.add_argument("--modes", default=",".join(MODES), help="scoring modes, comma-separated: " + ", ".join(MODES))
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--data-dir", type=Path, default=None, help="keep recordings here (default: temporary)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    args = ap.parse_args()
    console = Console(stderr=True)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    workers = args.workers or available_cores()
    modes = {m.strip(): MODES[m.strip()] for m in args.modes.split(",") if m.strip()}

    with tempfile.TemporaryDirectory(prefix="mpe-bench-scoring-") as tmp:
        data_dir = args.data_dir or Path(tmp)
        settings = Settings(data_dir=data_dir)
        settings.ensure_dirs()
        from server.demo import run_demo

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


if __name__ == "__main__":
    main()
