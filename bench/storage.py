#!/usr/bin/env python
"""Storage benchmark: database bytes per episode, split into audio chunks, frame log and events.

Recordings: the reference bridges (``silent``, ``always-talk``, ``oracle`` by default) run on the
built-in ``mini`` suite through the real server in lockstep, exactly as ``mpe demo`` does (with
its MTR-DuplexBench runs), into a fresh database: a SQLite file and a PostgreSQL schema. Then,
per Duplex-MPE run, every table that grows with the episodes is measured:

* **on disk**: what the table takes with its indexes (PostgreSQL ``pg_total_relation_size``, TOAST
  included; SQLite the ``dbstat`` pages of the table and its indexes), shared out over the runs in
  proportion to their rows' bytes (the database holds these runs only);
* **row bytes**: PostgreSQL ``pg_column_size`` of the rows; SQLite the sum of the columns'
  lengths.

Per episode, and per 100 s of stream (room frames × 80 ms): the ``always-talk`` bridge talks
through the whole episode, its episodes are the long talking ones (96 s of stream); the target is
under 5 MB per 100 s of talking episode.

Usage::

    python bench/storage.py                    # both databases, about 5 minutes on 2 cores
    python bench/storage.py --dbs sqlite --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.engine import database_url, machine  # noqa: E402
from server.db import Database  # noqa: E402
from server.settings import Settings  # noqa: E402

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
FRAME_S = 0.08
# the tables that grow with every episode, and the part of the split each one is
PARTS = {"audio_chunks": "audio", "frames": "frames", "events": "events", "segments": "segments"}
# SQLite row bytes: the sum of the columns' lengths
SQLITE_ROW = {"audio_chunks": "length(x.track) + 8 + 8 + 8 + length(x.codec) + length(x.data) + 8 + length(x.attempt_id)",
              "frames": "8 + length(x.attempt_id) + length(x.direction) + 8 + 8 + 8 + 8 + 1",
              "events": "8 + length(x.attempt_id) + 8 + length(x.type) + length(x.data)",
              "segments": "8 + length(x.attempt_id) + length(x.source) + 8 + 8 + length(x.detector)"}


def _row_bytes(conn, dialect: str, table: str) -> dict[tuple[str, str], int]:
    """(run id, part) -> bytes of the table's rows; audio is split into its room and assistant tracks."""
    size = "pg_column_size(x.*)" if dialect == "postgresql" else SQLITE_ROW[table]
    part = "'audio:' || x.track" if table == "audio_chunks" else f"'{PARTS[table]}'"
    rows = conn.execute(sa.text(
        f"SELECT e.run_id, {part} AS part, sum({size}) AS n FROM {table} x JOIN attempts a ON a.id = x.attempt_id "
        f"JOIN episodes e ON e.id = a.episode_id GROUP BY 1, 2")).all()
    return {(r.run_id, r.part): int(r.n) for r in rows}


def _on_disk(conn, dialect: str, table: str) -> int:
    if dialect == "postgresql":
        return int(conn.execute(sa.text(f"SELECT pg_total_relation_size('{table}')")).scalar())
    names = [table] + [r[0] for r in conn.execute(sa.text(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = :t"), {"t": table})]
    return int(conn.execute(sa.text(
        f"SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name IN ({', '.join(repr(n) for n in names)})")).scalar())


def measure(db: Database, runs: dict[str, str]) -> list[dict[str, Any]]:
    """Bytes per episode and per 100 s of stream, by part, for each run in ``runs`` (model -> run id)."""
    dialect = db.engine.dialect.name
    with db.engine.connect() as conn:
        rows: dict[tuple[str, str], int] = {}
        disk: dict[tuple[str, str], float] = {}
        for table in PARTS:
            rb = _row_bytes(conn, dialect, table)
            total = sum(rb.values()) or 1
            whole = _on_disk(conn, dialect, table)
            rows |= rb
            disk |= {k: whole * v / total for k, v in rb.items()}
        stream = dict(conn.execute(sa.text(
            "SELECT e.run_id, sum(a.n_frames) FROM attempts a JOIN episodes e ON e.id = a.episode_id "
            "WHERE a.status = 'completed' GROUP BY e.run_id")).all())
        episodes = dict(conn.execute(sa.text(
            "SELECT run_id, count(*) FROM episodes WHERE status = 'completed' GROUP BY run_id")).all())
    out = []
    for model, run_id in runs.items():
        n, stream_s = int(episodes.get(run_id, 0)), int(stream.get(run_id, 0)) * FRAME_S
        parts = sorted({p for r, p in rows if r == run_id})
        d = {p: disk.get((run_id, p), 0.0) for p in parts}
        r = {p: rows.get((run_id, p), 0) for p in parts}
        out.append({"db": dialect, "model": model, "episodes": n, "stream_s": stream_s,
                    "disk_per_episode": {p: v / n for p, v in d.items()},
                    "disk_per_100s": {p: v / stream_s * 100 for p, v in d.items()},
                    "rows_per_100s": {p: v / stream_s * 100 for p, v in r.items()},
                    "disk_total_per_100s": sum(d.values()) / stream_s * 100,
                    "disk_total_per_episode": sum(d.values()) / n})
    return out


async def record(kind: str, workdir: Path, data_dir: Path, models: list[str], pg_url: str,
                 console: Console) -> list[dict[str, Any]]:
    from server.cli.demo import run_demo

    with database_url(kind, workdir, pg_url) as url:
        settings = Settings(data_dir=data_dir, DATABASE_URL=url)
        settings.ensure_dirs()
        t0 = time.monotonic()
        demo = await run_demo(settings, models, console=console, score=False)
        console.print(f"{kind}: recorded {len(models)} runs in {time.monotonic() - t0:.0f} s")
        db = Database(url)
        try:
            return measure(db, demo["runs"])
        finally:
            db.dispose()


def mb(x: float) -> str:
    return f"{x / 1e6:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="silent,always-talk,oracle")
    ap.add_argument("--dbs", default="sqlite,postgres")
    ap.add_argument("--pg-url", default=PG_URL)
    ap.add_argument("--data-dir", type=Path, default=None, help="suites and speech caches (default: temporary)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    console = Console(stderr=True)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="mpe-bench-storage-") as tmp:
        data_dir = args.data_dir or Path(tmp) / "data"
        for kind in [k.strip() for k in args.dbs.split(",") if k.strip()]:
            got = asyncio.run(record(kind, Path(tmp), data_dir, models, args.pg_url, console))
            rows += got
            console.print(json.dumps(got))  # kept even if a later database fails
    parts = sorted({p for r in rows for p in r["disk_per_100s"]})
    table = Table(title="Database bytes per 100 s of stream, on disk with indexes (MB); per episode in the last column")
    for col in ("db", "model", "episodes", "stream s / episode", *parts, "all / 100 s", "all / episode"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["db"], r["model"], str(r["episodes"]), f"{r['stream_s'] / max(1, r['episodes']):.1f}",
                      *[mb(r["disk_per_100s"].get(p, 0.0)) for p in parts], f"[bold]{mb(r['disk_total_per_100s'])}[/bold]",
                      mb(r["disk_total_per_episode"]))
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
