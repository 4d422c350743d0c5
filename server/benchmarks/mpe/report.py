"""Reports: the paper's tables in the terminal (rich) and a self-contained HTML report.

Both draw the same tables (:mod:`server.benchmarks.mpe.tables`: the paper's Tables 3, 9, 10,
12-19 and 21, numbered as in the paper, then the extras: response decisions, ranking correlation
and the breakdowns; text references apart, in Tables 17 and 18). The HTML file has no
external resources: styles inline, charts as inline SVG. It adds sources and settings, bars
with bootstrap CIs, the sweep chart and per-episode timelines (human clips coloured by
label, model speech, windows and verdicts).
"""

from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from clients.codec import STREAM_RATE
from server.benchmarks.mpe.entry import EpisodeScore
from server.benchmarks.mpe.judging import PAPER_JUDGE_MODEL
from server.benchmarks.mpe.metrics import METRICS, compute_metrics
from server.benchmarks.mpe.stats import analyses as compute_analyses
from server.benchmarks.mpe.stats import reference_results, speech_entries
from server.benchmarks.mpe.tables import Cell, ReportTable, report_tables, results_table
from server.db import Database, Run
from server.engine.progress import room_late_episodes, room_late_line, run_labels
from server.scoring.asr import NO_ASR_NOTE, asr_disabled
from server.scoring.errors import NotScored
from server.scoring.results import get_scoring, latest_scoring
from server.scoring.store import ScoringStatus, load_entries

RATE = STREAM_RATE
LABEL_COLORS = {"T": "#1f77b4", "N1": "#9467bd", "N2": "#8c8c8c", "N3": "#bcbd22", "N4Q": "#ff7f0e", "N4R": "#2ca02c"}
MODEL_COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
                "#bab0ac"]
PASS, FAIL, SPEECH = "#2ca02c", "#d62728", "#17becf"
#: a source's text prompt as the report shows it (§4: audio only unless the run asked for the duty as text)
TEXT_PROMPT = {True: "duty text", False: "none (audio only)", None: "unknown"}
#: what every report says of text references (mpe reference) next to speech models
TEXT_REFERENCE_NOTE = ("decided on the script, no audio (clock 'text'). Reported apart (Tables 17 and 18), never in "
                       "the speech models' tables, test families or ranking pools; their fresh onset is not measured, "
                       "no N4 event of theirs is eligible for the yield (a decision has no duration).")
#: the models the paper's numbers come from (its judge and its ASR), and the scoring that uses them
PAPER_JUDGE = "Claude Opus"
PAPER_ASR = "Qwen3-ASR-1.7B"
PAPER_SCORING = f"mpe score RUN --judge claude:{PAPER_JUDGE_MODEL} --asr qwen3-asr:DIR"


def scorer_text(config: dict[str, Any], text_reference: bool = False) -> str:
    """Which judge and which ASR a scoring's numbers come from (its ``scorings.config``)."""
    asr, judge = config.get("asr") or {}, config.get("judge") or {}
    asr_text = "not used (decided on the script)" if text_reference else (
        "none (--asr none)" if asr_disabled(config) else
        " ".join(str(x) for x in (asr.get("backend"), asr.get("model")) if x) or "unknown")
    judge_text = " ".join(str(x) for x in (judge.get("backend"), judge.get("model")) if x) or "unknown"
    return f"judge {judge_text} · ASR {asr_text}"


def paper_models_note(config: dict[str, Any], text_reference: bool = False) -> str | None:
    """None where a scoring used the paper's judge and ASR; else what it used instead, said plainly."""
    asr, judge = config.get("asr") or {}, config.get("judge") or {}
    judge_paper = judge.get("backend") == "claude" and "opus" in str(judge.get("model", "")).lower()
    asr_paper = text_reference or asr.get("backend") == "qwen3-asr"
    if judge_paper and asr_paper:
        return None
    offline = judge.get("backend") == "rule" and (text_reference or (
        asr.get("backend") == "faster-whisper" and "tiny.en" in str(asr.get("model", ""))))
    what = "the offline defaults" if offline else "not the paper's models"
    return (f"{what}: not the paper's judge ({PAPER_JUDGE}) and ASR ({PAPER_ASR}), so the numbers are not "
            f"comparable with the paper's; the paper's: {PAPER_SCORING}")


def header_lines(sources: list[dict[str, Any]]) -> list[str]:
    """The report's header: per scoring, the judge and ASR its numbers come from, and whether they
    are the paper's."""
    out = []
    for s in sources:
        c, ref = s.get("config") or {}, bool(s.get("text_reference"))
        who = ", ".join((s.get("labels") or {}).values()) or ", ".join(s.get("models", []))
        note = paper_models_note(c, ref)
        out.append(f"{who}: {scorer_text(c, ref)}" + (f" ({note})" if note else " (the paper's judge and ASR)"))
    return out


@dataclass
class ReportData:
    sources: list[dict[str, Any]]
    entries: list[EpisodeScore]
    metrics: dict[str, Any]
    analyses: dict[str, Any]
    reference: dict[str, Any] = field(default_factory=dict)  # text references, apart (stats.reference_results)
    generated_at: str = field(default_factory=lambda: datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))

    @property
    def models(self) -> list[str]:
        return list(self.metrics)

    @property
    def conditions(self) -> list[str]:
        return sorted({c for m in self.metrics.values() for c in m})


def report_from_entries(entries: list[EpisodeScore], sources: list[dict[str, Any]]) -> ReportData:
    # Text references are reported apart: the speech models' metrics, families and pools are theirs alone.
    speech = speech_entries(entries)
    metrics = compute_metrics(speech)
    return ReportData(sources=sources, entries=entries, metrics=metrics, analyses=compute_analyses(speech, metrics),
                      reference=reference_results(entries))


def _bundle_label(model: str, entries: list[EpisodeScore], scoring_id: str) -> str:
    """A model scored from bundles, labelled like a run (model · clock · where from · short id)."""
    clocks = "/".join(sorted({e.clock or "?" for e in entries if e.model == model}))
    return f"{model} · {clocks} · bundles · {scoring_id[:8]}"


def collect_report(db: Database, refs: Iterable[str]) -> ReportData:
    """Entries of the latest complete scoring of each run (or of each scoring id), combined;
    metrics and analyses are recomputed over all of them (pairwise tests span the runs).

    Each source labels its models (a run: model · clock · suite · short id, as everywhere runs
    are listed); a model name found in more than one source is replaced by those labels in
    every table, so two runs of one model stay apart."""
    loaded = []
    for ref in dict.fromkeys(refs):  # the same run twice counts once
        row = latest_scoring(db, ref)
        if row is None:
            row = get_scoring(db, ref)
            if row is None:
                raise NotScored(f"{ref!r} is neither a scored run nor a scoring id; score it first with `mpe score {ref}`")
            if row.status != ScoringStatus.complete:
                raise NotScored(f"scoring {ref} is {row.status}; rerun `mpe score` to finish it")
        loaded.append((ref, row, load_entries(db, row.id, EpisodeScore)))
    run_names = run_labels(db, [row.run_id for _, row, _ in loaded if row.run_id])
    shared = Counter(m for _, _, es in loaded for m in {e.model for e in es})
    sources, entries = [], []
    for ref, row, es in loaded:
        labels = {m: run_names.get(row.run_id) or _bundle_label(m, es, row.id) for m in sorted({e.model for e in es})}
        es = [e.model_copy(update={"model": labels[e.model]}) if shared[e.model] > 1 else e for e in es]
        entries.extend(es)
        text_refs = {e.model: e.text_reference.describe() for e in es if e.text_reference is not None}
        sources.append({"ref": ref, "run_id": row.run_id, "scoring_id": row.id, "config": row.config,
                        "text_prompt": _text_prompt(db, row.run_id), "labels": labels,
                        "models": sorted({e.model for e in es}), "n_episodes": len(es),
                        "text_reference": text_refs or None,
                        "room_late": room_late_episodes(db, row.run_id) if row.run_id else []})
    if not entries:
        raise NotScored("nothing to report")
    return report_from_entries(entries, sources)


def _text_prompt(db: Database, run_id: str | None) -> bool | None:
    """§4: whether the run gave its bridges the duty as a text prompt (None: not from a run)."""
    if run_id is None:
        return None
    with db.session() as s:
        run = s.get(Run, run_id)
        return None if run is None else run.text_prompt


# --- terminal ------------------------------------------------------------------------------------


def _rich_cell(c: Cell) -> str:
    txt = escape(c.text) + (f" [dim]({escape(c.sub)})[/dim]" if c.sub else "")
    if c.best:
        return f"[bold green]★ {txt}[/bold green]"
    return f"[bold]{txt}[/bold]" if c.strong else txt


def rich_table(t: ReportTable) -> Table:
    """One report table for the terminal."""
    rt = Table(title=escape(t.title), caption=escape(t.note) or None, title_justify="left", caption_justify="left")
    for i, h in enumerate(t.head):
        rt.add_column(escape(h), justify="left" if i < t.keys else "right", style="bold" if i == 0 else None)
    for row in t.rows:
        rt.add_row(*(_rich_cell(c) for c in row))
    return rt


def _print(t: ReportTable, console: Console) -> None:
    console.print(rich_table(t) if t.rows else f"[bold]{escape(t.title)}[/bold]: {escape(t.empty)}")


def print_tables(metrics: dict[str, Any], console: Console, title: str = "") -> None:
    """Table 3 alone (what `mpe score` and the demo print)."""
    _print(results_table(metrics, title), console)


def print_report(data: ReportData, console: Console) -> None:
    """The header (which judge and ASR made the numbers), every table of the report (what `mpe report`
    prints), then the sources by label."""
    header = header_lines(data.sources)
    if header:
        console.print("[bold]Scored with[/bold]")
        for line in header:
            console.print(f"  {escape(line)}", highlight=False)
    for t in report_tables(data.metrics, data.analyses, data.reference):
        _print(t, console)
    lines = source_lines(data.sources)
    if lines:
        console.print("[bold]Runs[/bold] (model · clock · suite · run id)")
        for line in lines:
            console.print(f"  {escape(line)}", highlight=False)
    for line in room_late_lines(data.sources):
        console.print(f"[bold]Room timing[/bold]: {escape(line)}", highlight=False)
    if any(s.get("text_reference") for s in data.sources):
        console.print(f"[bold]Text references[/bold]: {escape(TEXT_REFERENCE_NOTE)}", highlight=False)


def room_late_lines(sources: list[dict[str, Any]]) -> list[str]:
    """One line per run with realtime episodes whose room frames the server sent late
    (``stats.server.room_late``): the model heard them late, so their timing is not clean."""
    return [line for s in sources if (line := room_late_line(s["run_id"], s.get("room_late") or []))]


def source_lines(sources: list[dict[str, Any]]) -> list[str]:
    """One line per labelled model of each source: its label and the scoring its numbers come from (and,
    for a text reference, what it is)."""
    def what(s: dict[str, Any], model: str, label: str) -> str:  # keyed by the name the tables show
        refs = s.get("text_reference") or {}
        note = refs.get(model) or refs.get(label)
        return f": {note}" if note else ""

    return [f"{label}   (scoring {s['scoring_id']}){what(s, model, label)}"
            for s in sources for model, label in (s.get("labels") or {}).items()]


# --- HTML helpers ----------------------------------------------------------------------------------


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _pct(v: float | None, nd: int = 1) -> str:
    return "–" if v is None else f"{100 * v:.{nd}f}%"


def _table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    th = "".join(f"<th>{h}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>'


def _html_cell(c: Cell) -> str:
    txt = _e(c.text) + (f" <span class='muted small'>{_e(c.sub)}</span>" if c.sub else "")
    if c.best:
        return f"<span class='best'>★ {txt}</span>"
    return f"<b>{txt}</b>" if c.strong else txt


def _html_table(t: ReportTable) -> str:
    note = f"<p class='small muted'>{_e(t.note)}</p>" if t.note else ""
    body = (_table([_e(h) for h in t.head], [[_html_cell(c) for c in row] for row in t.rows]) if t.rows
            else f"<p class='muted'>{_e(t.empty)}</p>")
    return f"<h2 id='{_e(t.key)}'>{_e(t.title)}</h2>{note}{body}"


def _model_color(models: list[str], m: str) -> str:
    return MODEL_COLORS[models.index(m) % len(MODEL_COLORS)] if m in models else "#666"


# --- charts ------------------------------------------------------------------------------------------


def _bars_svg(data: ReportData, quantity: str) -> str:
    """Grouped bars (condition groups, one bar per model) with bootstrap CI whiskers."""
    boot = data.analyses.get("bootstrap", {})
    models, conds = data.models, data.conditions
    bw, gap, pad_l, h, top = 26, 28, 40, 150, 14
    width = pad_l + len(conds) * (len(models) * bw + gap) + 10
    out = [f'<svg width="{width}" height="{h + top + 34}" role="img" aria-label="{_e(METRICS[quantity].title)}">']
    for k in range(0, 101, 25):
        y = top + h - h * k / 100
        out.append(f'<line x1="{pad_l}" x2="{width - 5}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e5e5"/>'
                   f'<text x="{pad_l - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{k}%</text>')
    x = pad_l + gap / 2
    for cond in conds:
        x0 = x
        for m in models:
            cell = boot.get(m, {}).get(cond, {}).get(quantity)
            val = data.metrics.get(m, {}).get(cond, {}).get(quantity, {}).get("value")
            if val is not None:
                bh = h * val
                out.append(f'<rect x="{x:.1f}" y="{top + h - bh:.1f}" width="{bw - 4}" height="{bh:.1f}" '
                           f'fill="{_model_color(models, m)}"><title>{_e(m)} {cond}: {_pct(val)}</title></rect>')
                if cell and cell.get("lo") is not None:
                    y1, y2 = top + h - h * cell["lo"], top + h - h * cell["hi"]
                    cx = x + (bw - 4) / 2
                    out.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y1:.1f}" y2="{y2:.1f}" stroke="#222"/>'
                               f'<line x1="{cx - 4:.1f}" x2="{cx + 4:.1f}" y1="{y1:.1f}" y2="{y1:.1f}" stroke="#222"/>'
                               f'<line x1="{cx - 4:.1f}" x2="{cx + 4:.1f}" y1="{y2:.1f}" y2="{y2:.1f}" stroke="#222"/>')
            else:
                out.append(f'<text x="{x + (bw - 4) / 2:.1f}" y="{top + h - 3}" font-size="9" '
                           f'text-anchor="middle" fill="#999">n/a</text>')
            x += bw
        out.append(f'<text x="{(x0 + x) / 2:.1f}" y="{top + h + 16}" font-size="11" text-anchor="middle">'
                   f'{_e(cond)}</text>')
        x += gap
    out.append("</svg>")
    return "".join(out)


def _legend(models: list[str]) -> str:
    return "".join(f'<span class="key"><i style="background:{_model_color(models, m)}"></i>{_e(m)}</span>'
                   for m in models)


def _sweep_svg(data: ReportData, cond: str) -> str:
    sweep = data.analyses.get("silence_sweep", {})
    ths = sweep.get("thresholds_ms", [])
    if not ths:
        return ""
    w, h, pl, top = 300, 140, 40, 10
    xmax = max(ths) or 1

    def px(t):
        return pl + (w - pl - 10) * t / xmax

    out = [f'<svg width="{w}" height="{h + top + 30}">']
    for k in range(0, 101, 25):
        y = top + h - h * k / 100
        out.append(f'<line x1="{pl}" x2="{w - 10}" y1="{y}" y2="{y}" stroke="#e5e5e5"/>'
                   f'<text x="{pl - 4}" y="{y + 4}" font-size="10" text-anchor="end">{k}%</text>')
    for t in ths:
        out.append(f'<text x="{px(t):.1f}" y="{top + h + 14}" font-size="10" text-anchor="middle">{t}</text>')
    out.append(f'<text x="{(pl + w) / 2}" y="{top + h + 27}" font-size="10" text-anchor="middle">'
               f'speech allowed per window (ms), {_e(cond)}</text>')
    for m in data.models:
        pts = sweep.get("values", {}).get(m, {}).get(cond)
        if not pts:
            continue
        xy = [(px(p["threshold_ms"]), top + h - h * p["value"]) for p in pts if p["value"] is not None]
        col = _model_color(data.models, m)
        out.append(f'<polyline fill="none" stroke="{col}" stroke-width="2" points="'
                   + " ".join(f"{a:.1f},{b:.1f}" for a, b in xy) + '"/>')
        out.extend(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{col}"/>' for a, b in xy)
    out.append("</svg>")
    return "".join(out)


def _timeline_svg(e: EpisodeScore) -> str:
    tl = e.timeline
    end = max(tl.end, tl.n_samples, 1)
    clips = tl.clips
    # The view starts a second before the first turn: the preamble is the same in every episode.
    v0 = max(0, clips[0][3] - RATE) if clips else 0
    width, pl = 1000, 70
    scale = (width - pl - 10) / max(1, end - v0)

    def x(s: float) -> float:
        return pl + max(0.0, s - v0) * scale

    def wd(s: float, t: float) -> float:
        return max(1.0, (min(t, end) - max(s, v0)) * scale)

    lanes = {"humans": 8, "model": 34, "windows": 60}
    out = [f'<svg width="{width}" height="104" class="tl">']
    for name, y in lanes.items():
        out.append(f'<text x="4" y="{y + 13}" font-size="11">{name}</text>')
    first = int(-(-v0 // (5 * RATE))) * 5
    for sec in range(first, int(end / RATE) + 1, 5):
        xx = x(sec * RATE)
        out.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="4" y2="84" stroke="#eee"/>'
                   f'<text x="{xx:.1f}" y="98" font-size="9" text-anchor="middle">{sec}s</text>')
    for idx, label, speaker, s, t in clips:
        col = LABEL_COLORS.get(label, "#888")
        out.append(f'<rect x="{x(s):.1f}" y="{lanes["humans"]}" width="{wd(s, t):.1f}" height="18" '
                   f'fill="{col}"><title>turn {idx} {label} ({_e(speaker)})</title></rect>'
                   f'<text x="{x(s) + 2:.1f}" y="{lanes["humans"] + 13}" font-size="10" fill="#fff">{label}</text>')
    if tl.t_wait:
        s, t, reason = tl.t_wait
        out.append(f'<rect x="{x(s):.1f}" y="{lanes["humans"]}" width="{wd(s, t):.1f}" height="18" '
                   f'fill="none" stroke="{LABEL_COLORS["T"]}" stroke-dasharray="3,2"><title>T wait ({_e(reason)})'
                   f'</title></rect>')
    for s, t in tl.speech:
        if t <= v0:
            continue
        out.append(f'<rect x="{x(s):.1f}" y="{lanes["model"]}" width="{wd(s, t):.1f}" height="18" '
                   f'fill="{SPEECH}"><title>model speech {s / RATE:.2f}-{t / RATE:.2f} s</title></rect>')
    for w in e.silence_windows:
        s, t = w.start_s * RATE, w.end_s * RATE
        col = PASS if w.passed else FAIL
        tip = f"{w.label} turn {w.turn_idx}: {'pass' if w.passed else 'fail'}, {w.speech_ms} ms speech"
        if w.verdict:
            tip += f", {w.verdict}"
        if w.transcript:
            tip += f": “{w.transcript[:200]}”"
        out.append(f'<rect x="{x(s):.1f}" y="{lanes["windows"]}" width="{max(1.0, wd(s, t) - 1):.1f}" '
                   f'height="18" fill="{col}" opacity="0.75"><title>{_e(tip)}</title></rect>')
    t = e.t
    col = PASS if t.present and t.correct else FAIL if t.present else "#999"
    s, wend = t.e_t_s * RATE, t.wait_end_s * RATE
    tip = f"T: {'fresh onset' if t.fresh else 'present' if t.present else 'no response'}"
    if t.transcript:
        tip += f"; {t.verdict or t.reason}: “{t.transcript[:200]}”"
    out.append(f'<rect x="{x(s):.1f}" y="{lanes["windows"]}" width="{wd(s, wend):.1f}" '
               f'height="18" fill="{col}" opacity="0.35" stroke="{col}"><title>{_e(tip)}</title></rect>'
               f'<text x="{x(s) + 2:.1f}" y="{lanes["windows"] + 13}" font-size="10">T</text>')
    for n in e.n4:
        for name, at, dash in (("t_R", n.t_R_s, ""), ("deadline", n.deadline_s, "2,2")):
            xx = x(at * RATE)
            out.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{lanes["model"] - 2}" y2="{lanes["windows"] + 20}" '
                       f'stroke="#000" stroke-dasharray="{dash}"><title>N4 {name}</title></line>')
        label = n.outcome or n.category.replace("_", " ")
        col = PASS if n.outcome == "pass" else FAIL if n.outcome else "#666"
        tip = (f"N4 turn {n.q_idx}: {n.category.replace('_', ' ')}; "
               f"{'eligible' if n.eligible else 'not eligible'}; outcome {n.outcome or '-'}")
        out.append(f'<text x="{x(n.t_R_s * RATE) + 3:.1f}" y="{lanes["windows"] + 13}" font-size="10" '
                   f'fill="{col}"><title>{_e(tip)}</title>N4 {_e(label)}</text>')
    out.append("</svg>")
    return "".join(out)


# --- HTML document --------------------------------------------------------------------------------

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 12px}
h1{font-size:22px}h2{font-size:18px;margin-top:34px;border-bottom:1px solid #ddd;padding-bottom:4px}h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0 14px}th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f5f5f5}td:first-child,th:first-child{text-align:left}
.best{font-weight:700;background:#e8f6e8}.muted{color:#777}.small{font-size:12px}
.key{display:inline-block;margin-right:14px}.key i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
.charts{display:flex;flex-wrap:wrap;gap:20px}.chart{border:1px solid #eee;padding:6px}
details{margin:6px 0}summary{cursor:pointer}code{background:#f4f4f4;padding:0 3px}
"""


def render_html(data: ReportData, *, max_timelines: int | None = 60, title: str = "Duplex-MPE report") -> str:
    a = data.analyses
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
             f"<style>{CSS}</style></head><body><h1>{_e(title)}</h1>"
             f"<p class='muted'>generated {data.generated_at} · {len(data.entries)} episodes · "
             f"models: {_e(', '.join(data.models))}</p>"]
    header = header_lines(data.sources)
    if header:
        parts.append("<p><b>Scored with</b><br>" + "<br>".join(_e(line) for line in header) + "</p>")

    # Sources and settings (every number is traceable to a scoring and its backend versions).
    rows = []
    for s in data.sources:
        c = s.get("config") or {}
        asr, judge = c.get("asr", {}), c.get("judge", {})
        labels = "<br>".join(_e(v) for v in (s.get("labels") or {}).values()) or _e(", ".join(s["models"]))
        text_refs = s.get("text_reference") or {}
        models = "<br>".join(_e(m) + (f" <span class='muted small'>({_e(text_refs[m])})</span>" if m in text_refs
                                      else "") for m in s["models"])
        rows.append([f"{labels}<br><span class='muted small'>{_e(s.get('run_id') or 'bundles')}</span>",
                     f"<code>{_e(s['scoring_id'])}</code>", models,
                     str(s["n_episodes"]),
                     "not used (text)" if text_refs else _e(f"{asr.get('backend')} {asr.get('model', '')}"),
                     _e(f"{judge.get('backend')} ({judge.get('model', '')}; "
                       + ", ".join(f"{k}: {v}" for k, v in (judge.get('prompt_versions') or {}).items()) + ")"),
                     _e(c.get("detector", "")), _e(TEXT_PROMPT[s.get("text_prompt")])])
    parts.append("<h2>Sources</h2>" + _table(["run (model · clock · suite · id)", "scoring", "models", "episodes", "ASR", "judge", "detector",
                                              "text prompt"], rows,
                                            "small"))
    if any(asr_disabled(s.get("config") or {}) and not s.get("text_reference") for s in data.sources):
        parts.append(f"<p><b>Note:</b> {_e(NO_ASR_NOTE)}.</p>")
    parts += [f"<p><b>Room timing:</b> {_e(line)}</p>" for line in room_late_lines(data.sources)]
    if any(s.get("text_reference") for s in data.sources):
        parts.append(f"<p><b>Text references:</b> {_e(TEXT_REFERENCE_NOTE)}</p>")

    # The paper's tables (the same as in the terminal), the bootstrap bars after Table 3 and
    # the sweep chart before Table 12.
    bs = a.get("bootstrap_settings", {})
    for t in report_tables(data.metrics, a, data.reference):
        if t.key == "table12":
            parts.append("<div class='charts'>" + "".join(f"<div class='chart'>{_sweep_svg(data, cond)}</div>"
                                                          for cond in data.conditions) + "</div>")
        parts.append(_html_table(t))
        if t.key == "table3":
            parts.append(f"<h2>Quantities with 95% bootstrap CIs</h2><p class='small muted'>Scenario-level percentile "
                         f"bootstrap ({bs.get('n_resamples')} resamples, seed {bs.get('seed')}; a scenario keeps all "
                         f"its windows).</p><p>{_legend(data.models)}</p><div class='charts'>")
            for name, m in METRICS.items():
                parts.append(f"<div class='chart'><b class='small'>{_e(m.title)}</b><br>{_bars_svg(data, name)}</div>")
            parts.append("</div>")

    # Timelines.
    entries = data.entries if max_timelines is None else data.entries[:max_timelines]
    parts.append("<h2>Episode timelines</h2><p class='small'>"
                 + "".join(f"<span class='key'><i style='background:{c}'></i>{lab}</span>"
                           for lab, c in LABEL_COLORS.items())
                 + f"<span class='key'><i style='background:{SPEECH}'></i>model speech</span>"
                 f"<span class='key'><i style='background:{PASS}'></i>pass / correct</span>"
                 f"<span class='key'><i style='background:{FAIL}'></i>fail / incorrect</span>"
                 "· dashed box: T wait · vertical lines: N4 t_R and t_R + 2 s · hover for transcripts</p>")
    if len(entries) < len(data.entries):
        parts.append(f"<p class='muted'>first {len(entries)} of {len(data.entries)} episodes "
                     f"(<code>--timelines all</code> shows every one)</p>")
    for e in entries:
        t = e.t
        head = (f"{_e(e.model)} · {_e(e.scenario_id)} · {_e(e.condition)} · T "
                f"{'fresh' if t.fresh else 'present' if t.present else 'no response'}"
                f"{'' if t.correct is None else (' · correct' if t.correct else ' · incorrect')} · silence "
                f"{sum(w.passed for w in e.silence_windows)}/{len(e.silence_windows)}")
        detail = ""
        if t.transcript:
            detail += f"<p class='small'>T answer: “{_e(t.transcript[:600])}” ({_e(t.verdict or t.reason)})</p>"
        parts.append(f"<details open><summary>{head} <span class='muted small'>{_e(e.episode_id)}</span></summary>"
                     f"{_timeline_svg(e)}{detail}</details>")
    parts.append("</body></html>")
    return "".join(parts)
