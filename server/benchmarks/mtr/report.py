"""MTR reports in the terminal (DESIGN §12.4): the published main-table layout (feature × model,
"Round 1 → mean 1–R", latency), success per round, and ``gt − free`` per round."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.table import Table

from server.benchmarks.mtr.entry import MTREpisodeScore
from server.benchmarks.mtr.metrics import compute_metrics
from server.benchmarks.mtr.stats import analyses
from server.benchmarks.mtr.suite import FEATURES
from server.db import Database
from server.scoring.errors import NotScored
from server.scoring.results import get_scoring, latest_scoring
from server.scoring.store import ScoringStatus, load_entries


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def _val(q: dict[str, Any], name: str) -> float | None:
    cell = q.get(name)
    return None if cell is None else cell["value"]


def main_table(metrics: dict[str, Any], title: str = "") -> Table:
    """Success (%) in Round 1 → the mean over rounds 1–R, and the mean latency, per feature."""
    t = Table(title=title or "MTR-DuplexBench: success % (Round 1 → mean of rounds 1–R) and latency (s)")
    t.add_column("model · history")
    for f in FEATURES:
        t.add_column(f, justify="right")
    for model, modes in metrics.items():
        for mode, q in modes.items():
            cells = []
            for f in FEATURES:
                if f not in q:
                    cells.append("–")
                    continue
                lat = _val(q, f"{f}.latency_s")
                cells.append(f"{_pct(_val(q, f + '.r01'))} → {_pct(_val(q, f + '.mean_rounds'))}"
                             + ("" if lat is None else f"  {lat:.2f}s"))
            t.add_row(f"{model} · {mode}", *cells)
    return t


def rounds_table(metrics: dict[str, Any]) -> Table:
    """Success (%) per round, per model, history mode and feature: the degradation over rounds."""
    ks = sorted({int(k.rsplit(".r", 1)[1]) for modes in metrics.values() for q in modes.values() for k in q
                 if ".r" in k and k.rsplit(".r", 1)[1].isdigit()})
    t = Table(title="Success % per round")
    t.add_column("model · history · feature")
    for k in ks:
        t.add_column(f"R{k}", justify="right")
    for model, modes in metrics.items():
        for mode, q in modes.items():
            for f in FEATURES:
                if f in q:
                    t.add_row(f"{model} · {mode} · {f}", *(_pct(_val(q, f"{f}.r{k:02d}")) for k in ks))
    return t


def gap_table(an: dict[str, Any]) -> Table | None:
    """gt − free per round (percentage points) with the exact McNemar p."""
    rows = [(m, f, k, c) for m, fs in an.get("gt_vs_free", {}).items() for f, ks in fs.items() for k, c in ks.items()]
    if not rows:
        return None
    t = Table(title="gt − free per round (pp; McNemar p): the error accumulation ground-truth history hides")
    for col in ("model", "feature", "round", "n", "gt", "free", "gt − free", "p"):
        t.add_column(col, justify="left" if col in ("model", "feature") else "right")
    for m, f, k, c in rows:
        t.add_row(m, f, k, str(c["n"]), _pct(c["gt"]), _pct(c["free"]), f"{100 * c['diff']:+.1f}", f"{c['p']:.3g}")
    return t


def print_tables(metrics: dict[str, Any], console: Console, title: str = "") -> None:
    """The main table (what `mpe score` and the demo print)."""
    console.print(main_table(metrics, title))


def report_entries(db: Database, refs: Iterable[str]) -> list[MTREpisodeScore]:
    """The entries of the latest complete scoring of each run (or of each scoring id)."""
    out: list[MTREpisodeScore] = []
    for ref in dict.fromkeys(refs):
        row = latest_scoring(db, ref) or get_scoring(db, ref)
        if row is None or row.status != ScoringStatus.complete:
            raise NotScored(f"{ref!r} is not a scored run or a complete scoring; score it first with `mpe score {ref}`")
        out += load_entries(db, row.id, MTREpisodeScore)
    if not out:
        raise NotScored("nothing to report")
    return out


def print_report(entries: list[MTREpisodeScore], console: Console) -> dict[str, Any]:
    """Every MTR table (what `mpe report` prints); returns the metrics and analyses."""
    metrics = compute_metrics(entries)
    an = analyses(entries)
    console.print(main_table(metrics))
    console.print(rounds_table(metrics))
    gap = gap_table(an)
    if gap is not None:
        console.print(gap)
    return {"metrics": metrics, "analyses": an}
