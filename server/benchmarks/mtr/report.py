"""MTR reports in the terminal (DESIGN §12.4): the paper's feature table (feature × model, "Round 1 →
mean 1–R", latency, each feature from its single-feature set), its feature-combination table (S,
S+I, S+I+P, S+I+P+B), success per round, and ``gt − free`` per round; for suites with tasks, the
dimension table (§12.5) and the dimensions per round."""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from server.benchmarks.mtr.entry import MTREpisodeScore
from server.benchmarks.mtr.metrics import (
    ABLATION,
    DIMENSION_QUANTITIES,
    HEADLINE_SETS,
    NOT_IN_SUITE,
    SetFigure,
    ablation,
    compute_metrics,
    headline,
    published_tables,
)
from server.benchmarks.mtr.stats import analyses
from server.benchmarks.mtr.suite import FEATURES
from server.db import Database
from server.engine.progress import room_late_episodes, room_late_line
from server.scoring.errors import NotScored
from server.scoring.results import get_scoring, latest_scoring
from server.scoring.store import ScoringStatus, load_entries


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def _val(q: dict[str, Any], name: str) -> float | None:
    cell = q.get(name)
    return None if cell is None else cell["value"]


def _figure(c: SetFigure, *, latency: bool = True, sep: str = "  ") -> str:
    """One headline or ablation cell: Round 1 → mean of rounds 1–R (and the latency), or why there is none."""
    if not c.in_suite:
        return NOT_IN_SUITE
    lat = "" if not latency or c.latency_s is None else f"{sep}{c.latency_s:.2f} s"
    return f"{_pct(c.round1)} → {_pct(c.mean_rounds)}{lat}"


def _row_label(model: str, mode: str, q: dict[str, Any]) -> str:
    left_out = [f"{f} {q[f + '.excluded']['num']}" for f in FEATURES if f + ".excluded" in q]
    return f"{model} · {mode}" + (f" (excluded, moved in the recording: {', '.join(left_out)})" if left_out else "")


def main_table(metrics: dict[str, Any], title: str = "") -> Table:
    """The paper's feature table: per feature, success (%) in Round 1 → the mean over rounds 1–R and the
    mean latency, from the feature's single-feature set only (named in the header); "not in this suite"
    where the scored episodes have no dialogue of that set."""
    t = Table(title=title or "MTR-DuplexBench: success % (Round 1 → mean of rounds 1–R) and latency, "
              "from each feature's single-feature set")
    t.add_column("model · history")
    for f in FEATURES:
        t.add_column(f"{f} (set {HEADLINE_SETS[f]})", justify="right")
    for model, modes in metrics.items():
        for mode, q in modes.items():
            t.add_row(_row_label(model, mode, q), *(_figure(c) for c in headline(q)))
    return t


def ablation_table(metrics: dict[str, Any]) -> Table:
    """The paper's feature-combination table: the mean success over rounds 1–R per configuration."""
    t = Table(title="Feature combinations: success % (Round 1 → mean of rounds 1–R), each from its set")
    t.add_column("model · history")
    for label, set_name in ABLATION:
        t.add_column(label if label == set_name else f"{label} (set {set_name})", justify="right")
    for model, modes in metrics.items():
        for mode, q in modes.items():
            t.add_row(_row_label(model, mode, q), *(_figure(c, latency=False) for c in ablation(q)))
    return t


def _rounds(metrics: dict[str, Any], names: tuple[str, ...] | None = None) -> list[int]:
    """The round numbers of the per-round quantities (``NAME.rNN``), of ``names`` only if given."""
    return sorted({int(k.rsplit(".r", 1)[1]) for modes in metrics.values() for q in modes.values() for k in q
                   if ".r" in k and k.rsplit(".r", 1)[1].isdigit() and (names is None or k.split(".")[0] in names)})


def _per_round_table(title: str, first: str, ks: list[int]) -> Table:
    t = Table(title=title)
    t.add_column(first)
    for k in ks:
        t.add_column(f"R{k}", justify="right")
    return t


def rounds_table(metrics: dict[str, Any]) -> Table:
    """Success (%) per round, per model, history mode and feature: the degradation over rounds."""
    ks = _rounds(metrics)
    t = _per_round_table("Success % per round (each feature's rounds of every set)", "model · history · feature", ks)
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


#: the dimension table's columns: (header, quantity, a 0-5 score rather than a share)
DIMENSION_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("quality (0–5)", "quality", True), ("instruction following %", "instruction", False),
    ("correct %", "correct", False), ("safe % (harmful)", "safety", False),
    ("safe % · normal", "safety.normal", False), ("safe % · interruption", "safety.interruption", False),
    ("safe % (benign controls)", "safety.benign", False))


def _score(v: float | None, score: bool) -> str:
    return ("–" if v is None else f"{v:.2f}") if score else _pct(v)


def _has_dimensions(metrics: dict[str, Any]) -> bool:
    return any(n in q for modes in metrics.values() for q in modes.values() for n in DIMENSION_QUANTITIES)


def dimension_cells(q: dict[str, Any]) -> list[str]:
    """One model · mode's dimension cells: Round 1 → mean of rounds 1–R (n rounds judged)."""
    return ["–" if name not in q else
            f"{_score(_val(q, name + '.r01'), score)} → {_score(_val(q, name + '.mean_rounds'), score)} "
            f"(n={q[name]['den']})" for _, name, score in DIMENSION_COLUMNS]


def dimensions_table(metrics: dict[str, Any]) -> Table:
    """The published dimension table: Round 1 → mean of rounds 1–R, per model · history mode."""
    t = Table(title="MTR-DuplexBench dimensions (Round 1 → mean of rounds 1–R; n = rounds judged)")
    t.add_column("model · history")
    for head, _, _ in DIMENSION_COLUMNS:
        t.add_column(head, justify="right")
    for model, modes in metrics.items():
        for mode, q in modes.items():
            unparsed = [f"{d} {q[d + '.unparseable']['num']}" for d in ("quality", "instruction", "safety")
                        if q.get(d + ".unparseable", {}).get("num")]
            t.add_row(f"{model} · {mode}" + (f" (unparseable: {', '.join(unparsed)})" if unparsed else ""),
                      *dimension_cells(q))
    return t


def dimension_rounds_table(metrics: dict[str, Any]) -> Table:
    """Each dimension per round (quality as its mean score, the others in %)."""
    ks = _rounds(metrics, ("quality", "instruction", "correct", "safety"))
    t = _per_round_table("Dimensions per round (quality 0–5; the others %)", "model · history · dimension", ks)
    for model, modes in metrics.items():
        for mode, q in modes.items():
            for head, name, score in DIMENSION_COLUMNS:
                if name in q:
                    t.add_row(f"{model} · {mode} · {head}", *(_score(_val(q, f"{name}.r{k:02d}"), score) for k in ks))
    return t


def print_tables(metrics: dict[str, Any], console: Console, title: str = "") -> None:
    """The main table, and the dimension table where rounds have tasks (what `mpe score` and the demo print)."""
    console.print(main_table(metrics, title))
    console.print(ablation_table(metrics))
    if _has_dimensions(metrics):
        console.print(dimensions_table(metrics))


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


def room_timing_lines(db: Database, refs: Iterable[str]) -> list[str]:
    """One line per reported run with realtime episodes whose room frames the server sent late
    (``stats.server.room_late``): their timing is not clean."""
    run_ids = [row.run_id for ref in dict.fromkeys(refs)
               if (row := latest_scoring(db, ref) or get_scoring(db, ref)) is not None and row.run_id]
    return [line for r in dict.fromkeys(run_ids) if (line := room_late_line(r, room_late_episodes(db, r)))]


#: what each rule set is, as the reports say it
RULES_TEXT = {"project": "project (the detector-based rules, DESIGN §12.4; docs/mtr.md \"Rule sets\")",
              "published": "published (the published scripts' rules on Whisper word timestamps; docs/mtr.md "
                           "\"Rule sets\")"}


def rules_of(entries: Iterable[MTREpisodeScore]) -> list[str]:
    """The rule sets the entries were judged by (one, unless scorings of both are reported together)."""
    return sorted({e.rules for e in entries})


def rules_line(entries: Iterable[MTREpisodeScore]) -> str:
    names = rules_of(entries)
    return ("rules: " + RULES_TEXT[names[0]]) if len(names) == 1 else \
        f"rules: mixed ({', '.join(names)}): the scorings reported judged their rounds by different rule sets"


def print_report(entries: list[MTREpisodeScore], console: Console, room_timing: Iterable[str] = ()) -> dict[str, Any]:
    """Every MTR table (what `mpe report` prints) and the runs' :func:`room_timing_lines`;
    returns the metrics and analyses."""
    metrics = compute_metrics(entries)
    an = analyses(entries)
    console.print(rules_line(entries), highlight=False)
    console.print(main_table(metrics))
    console.print(ablation_table(metrics))
    console.print(rounds_table(metrics))
    if _has_dimensions(metrics):
        console.print(dimensions_table(metrics))
        console.print(dimension_rounds_table(metrics))
    gap = gap_table(an)
    if gap is not None:
        console.print(gap)
    late = list(room_timing)
    for line in late:
        console.print(f"[bold]Room timing[/bold]: {escape(line)}", highlight=False)
    return {"rules": rules_of(entries), "metrics": metrics, **published_tables(metrics), "analyses": an,
            "room_timing": late}


# --- HTML --------------------------------------------------------------------------------------

_COLORS = ("#2b6cd4", "#d0543b", "#1c8c86", "#8549c7", "#c98a00", "#c2408f", "#5a6b7d", "#2f9e6e")
_SPAN_COLORS = {"user": "#2b6cd4", "pause": "#c9ced8", "barge_in": "#d0543b", "background": "#8549c7",
                "backchannel": "#1c8c86"}


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _curve(feature: str, metrics: dict[str, Any], cis: dict[str, Any], *, top: float = 1.0,
           caption: str = "success % per round (95 % CI, dialogues resampled)") -> str:
    """Success per round (one line per model · history mode) with the dialogue-bootstrap 95 % band;
    ``top`` 5: a 0–5 score (the quality dimension) rather than a share."""
    series = []
    for model, modes in metrics.items():
        for mode, q in modes.items():
            pts = sorted((int(k.rsplit(".r", 1)[1]), v["value"]) for k, v in q.items()
                         if k.startswith(f"{feature}.r") and v["value"] is not None)
            if pts:
                series.append((f"{model} · {mode}", pts, cis.get(model, {}).get(mode, {}).get(feature, {})))
    if not series:
        return ""
    rounds = sorted({k for _, pts, _ in series for k, _ in pts})
    w, h, left, bottom = 420, 220, 40, 28
    kx = (w - left - 10) / max(1, len(rounds) - 1)

    def x(k: int) -> float:
        return left + (rounds.index(k) * kx if len(rounds) > 1 else (w - left) / 2)

    def y(v: float) -> float:
        return 8 + (1 - v / top) * (h - bottom - 8)

    parts = [f'<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{_e(feature)} per round">']
    for v in (0, top / 2, top):
        tick = f"{v:g}" if top != 1.0 else f"{int(v * 100)}"
        parts.append(f'<line x1="{left}" x2="{w - 10}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e3e6eb"/>'
                     f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="10">{tick}</text>')
    for k in rounds:
        parts.append(f'<text x="{x(k):.1f}" y="{h - 10}" text-anchor="middle" font-size="10">R{k}</text>')
    legend = []
    for i, (name, pts, band) in enumerate(series):
        c = _COLORS[i % len(_COLORS)]
        for k, _ in pts:
            ci = band.get(str(k))
            if ci:
                parts.append(f'<line x1="{x(k):.1f}" x2="{x(k):.1f}" y1="{y(ci[0]):.1f}" y2="{y(ci[1]):.1f}" '
                             f'stroke="{c}" stroke-opacity="0.45" stroke-width="5"/>')
        path = " ".join(f"{x(k):.1f},{y(v):.1f}" for k, v in pts)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
        parts += [f'<circle cx="{x(k):.1f}" cy="{y(v):.1f}" r="3" fill="{c}"><title>{_e(name)} R{k}: '
                  f'{f"{v:.2f}" if top != 1.0 else f"{100 * v:.1f}%"}</title></circle>' for k, v in pts]
        legend.append(f'<span style="color:{c}">■</span> {_e(name)}')
    parts.append("</svg>")
    return f"<figure><figcaption><b>{_e(feature)}</b> — {_e(caption)}" \
           f"</figcaption>{''.join(parts)}<div class='legend'>{' &nbsp; '.join(legend)}</div></figure>"


def _timeline(e: MTREpisodeScore) -> str:
    """One episode: its live rounds (verdicts), what played in the room, the model's speech."""
    end = max([b for *_, b in e.room] + [b for _, b in e.speech] + [1])
    start = min([a for k, _, a, _ in e.room if k == "round"] + [0])
    w, scale = 1000, 1000 / max(1, end - start)

    def bx(a: int, b: int, yy: int, hh: int, color: str, title: str, opacity: float = 1.0) -> str:
        return (f'<rect x="{(a - start) * scale:.1f}" y="{yy}" width="{max(1.0, (b - a) * scale):.1f}" height="{hh}" '
                f'fill="{color}" fill-opacity="{opacity}"><title>{_e(title)}</title></rect>')

    verdict = {r.round: r for r in e.rounds}
    parts = [f'<svg viewBox="0 0 {w} 64" width="100%" height="64" role="img" aria-label="timeline">']
    for kind, n, a, b in e.room:
        if kind == "round":
            r = verdict.get(n)
            ok = r is not None and r.ok
            label = f"R{n} {r.feature if r else ''}: " + ("pass" if ok else (r.failure or "?") if r else "")
            parts.append(bx(a, b, 0, 14, "#2f9e6e" if ok else "#d0543b", label, 0.35))
            parts.append(f'<text x="{(a - start) * scale + 3:.1f}" y="11" font-size="10">{_e(label)}</text>')
        else:
            parts.append(bx(a, b, 18, 18, _SPAN_COLORS[kind], f"R{n} {kind}"))
    parts += [bx(a, b, 42, 18, "#2f9e6e", "model speech") for a, b in e.speech if b > start]
    parts.append("</svg>")
    return (f"<div class='tl'><div class='muted'>{_e(e.model)} · {_e(e.mode)} · {_e(e.scenario_id)} "
            f"(set {_e(e.set)})</div>{''.join(parts)}</div>")


def render_html(entries: list[MTREpisodeScore], *, max_timelines: int | None = 60,
                title: str = "MTR-DuplexBench report", room_timing: Iterable[str] = ()) -> str:
    """A self-contained HTML report: the main table, the per-round degradation curves per feature
    with CIs, gt − free per round, and episode timelines (rounds, barge-ins, pauses marked)."""
    metrics = compute_metrics(entries)
    an = analyses(entries)
    def _table(head: list[str], rows: list[list[str]]) -> str:
        return ("<table><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead><tbody>"
                + "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows) + "</tbody></table>")

    table = _table(["model · history", *(f"{f} (set {HEADLINE_SETS[f]})" for f in FEATURES)],
                   [[_row_label(m, mode, q), *(_figure(c, sep=" · ") for c in headline(q))]
                    for m, modes in metrics.items() for mode, q in modes.items()])
    combos = _table(["model · history", *(lb if lb == sn else f"{lb} (set {sn})" for lb, sn in ABLATION)],
                    [[_row_label(m, mode, q), *(_figure(c, latency=False) for c in ablation(q))]
                     for m, modes in metrics.items() for mode, q in modes.items()])
    curves = "".join(_curve(f, metrics, an["round_cis"]) for f in FEATURES)
    gap_rows = [(m, f, k, c) for m, fs in an["gt_vs_free"].items() for f, ks in fs.items() for k, c in ks.items()]
    gap = "" if not gap_rows else (
        "<h2>gt − free per round</h2><table><thead><tr><th>model</th><th>feature</th><th>round</th><th>n</th>"
        "<th>gt</th><th>free</th><th>gt − free (pp)</th><th>McNemar p</th></tr></thead><tbody>" + "".join(
            f"<tr><td>{_e(m)}</td><td>{_e(f)}</td><td>{_e(k)}</td><td>{c['n']}</td><td>{_pct(c['gt'])}</td>"
            f"<td>{_pct(c['free'])}</td><td>{100 * c['diff']:+.1f}</td><td>{c['p']:.3g}</td></tr>"
            for m, f, k, c in gap_rows) + "</tbody></table>")
    dims = ""
    if _has_dimensions(metrics):
        dhead = ["model · history", *(h for h, _, _ in DIMENSION_COLUMNS)]
        drows = [[f"{model} · {mode}", *dimension_cells(q)] for model, modes in metrics.items()
                 for mode, q in modes.items()]
        dims = ("<h2>Dimensions</h2><p>Round 1 → the mean over rounds 1–R (n = rounds judged; DESIGN §12.5).</p>"
                "<table><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in dhead) + "</tr></thead><tbody>"
                + "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in drows)
                + "</tbody></table><h2>Dimensions per round</h2>"
                + "".join(_curve(name, metrics, {}, top=5.0 if score else 1.0,
                                 caption=f"{head} per round" + (" (mean score)" if score else ""))
                          for head, name, score in DIMENSION_COLUMNS))
    shown = entries if max_timelines is None else entries[:max_timelines]
    timelines = "".join(_timeline(e) for e in shown)
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:24px;color:#1d2330}} table{{border-collapse:collapse;margin:8px 0}}
td,th{{border:1px solid #d5d9e0;padding:3px 8px;text-align:right}} td:first-child,th:first-child{{text-align:left}}
figure{{display:inline-block;margin:8px 16px 8px 0}} .legend,.muted{{font-size:12px;color:#5a6b7d}} .tl{{margin:6px 0}}
</style></head><body><h1>{_e(title)}</h1>
<p class="rules">{_e(rules_line(entries))}</p>
{"".join(f"<p><b>Room timing:</b> {_e(line)}</p>" for line in room_timing)}
<p>Success % in Round 1 → the mean over rounds 1–R, and the mean latency, per feature, from the feature's
single-feature set only (DESIGN §12.4).</p>
{table}<h2>Feature combinations</h2><p>Success % in Round 1 → the mean over rounds 1–R of each published
configuration, from its set.</p>{combos}<h2>Success per round</h2><p class="muted">Each feature's rounds of
every set.</p>{curves}{gap}{dims}
<h2>Episode timelines</h2><p class="muted">Top: live rounds (green pass, red fail). Middle: user turns (blue),
pauses (grey), barge-ins (red), background voices (purple), backchannels (teal). Bottom: the model's speech.
{len(shown)} of {len(entries)} episodes.</p>{timelines}</body></html>"""
