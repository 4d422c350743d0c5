"""Judge audit: a stratified sample of verdicts for people to label, and the agreement.

``mpe audit sample RUN`` draws, per model × condition × task, up to ``per_label`` verdicts
of every label (balanced across labels, seeded; a label with fewer verdicts leaves its places
to the other labels, :func:`draw`) from the run's latest scoring and writes
a review directory: ``sheet.csv`` (one row per item, ``human_label`` left empty),
``clips/<item>.wav`` (exactly the audio that was transcribed) and ``index.html`` (the same
sheet with players). ``mpe audit import SHEET`` reads the filled sheet and reports, per
judge and task, how often the judge agrees with the people (share, Cohen's kappa,
confusion counts).

The tasks and their labels are the benchmarks' (:attr:`server.core.benchmark.Benchmark.judge_tasks`):
a verdict with no label counts as its task's ``unparseable`` label (Duplex-MPE's failing labels,
§6), or, for a task whose unparseable verdicts are left out of the rates (MTR-DuplexBench's), its
rows are left out of the agreement and counted as ``excluded``. A numeric task (MTR's quality score)
also reports the share within one point and the mean absolute difference.
"""

from __future__ import annotations

import csv
import html
import random
from collections import defaultdict
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from sqlalchemy import select

from server.core.audio import write_wav
from server.core.benchmark import JudgedItem, JudgeTask, ScoreEntry
from server.db import Database, VerdictRow
from server.engine.registry import PLUGINS, get_benchmark
from server.scoring.asr import join_fragments
from server.scoring.errors import NotScored, ScoringError
from server.scoring.results import benchmark_of, get_scoring, latest_scoring
from server.scoring.statistics import cohens_kappa
from server.scoring.store import ScoringStatus, load_entries

AUDIT_SEED = 20260902
FIELDS = ["item_id", "run_id", "scoring_id", "episode_id", "model", "condition", "task", "turn_idx", "clip",
          "transcript", "gold_answer", "judge", "judge_model", "prompt_version", "judge_label", "judge_effective",
          "human_label", "notes"]
UNPARSEABLE = "UNPARSEABLE"
T = TypeVar("T")


def judge_tasks() -> dict[str, JudgeTask]:
    """Every registered benchmark's judge tasks by name (a task two benchmarks share is one object)."""
    return {t.name: t for name in PLUGINS for t in get_benchmark(name).judge_tasks}


def effective(task: JudgeTask, label: str) -> str:
    """The label a verdict counts as: its own, or for a missing or unknown one the task's unparseable label."""
    return label if label in task.labels else task.unparseable or UNPARSEABLE


def _label(item: JudgedItem) -> str:
    return item.label or "UNPARSEABLE"


def _track(db: Database, entry: ScoreEntry, cache: dict[str, np.ndarray]) -> np.ndarray:
    key = entry.attempt_id or entry.episode_id
    if key not in cache:
        if entry.source == "db":
            from server.engine.bundles import load_track

            cache[key] = load_track(db, entry.attempt_id, "assistant")
        else:
            import soundfile as sf

            cache[key], _ = sf.read(str(Path(entry.source) / "assistant.wav"), dtype="int16")
    return cache[key]


def draw(pools: dict[str, list[T]], per_label: int, rng: random.Random) -> list[T]:
    """One stratum's sample: up to ``per_label`` items of every label, and where a label has fewer,
    the places it leaves filled from the other labels' remaining items (the paper's audit keeps each
    stratum's size when a label is rare), all seeded by ``rng``, labels in sorted order."""
    chosen: list[T] = []
    rest: list[T] = []
    for label in sorted(pools):
        pool = pools[label]
        picked = set(rng.sample(range(len(pool)), min(per_label, len(pool))))
        chosen.extend(pool[i] for i in sorted(picked))
        rest.extend(x for i, x in enumerate(pool) if i not in picked)
    short = per_label * len(pools) - len(chosen)
    return chosen + rng.sample(rest, min(short, len(rest)))


def sample(db: Database, ref: str, out: Path, *, per_label: int = 5, seed: int = AUDIT_SEED) -> dict[str, Any]:
    row = latest_scoring(db, ref) or get_scoring(db, ref)
    if row is None or row.status != ScoringStatus.complete:
        raise NotScored(f"{ref!r} has no complete scoring; run `mpe score {ref}` first")
    bench = benchmark_of(row)
    tasks = {t.name: t for t in bench.judge_tasks}
    items = [(e, it) for e in load_entries(db, row.id, bench.entry_model) for it in e.judged()]
    if not items:
        raise NotScored(f"scoring {row.id} holds no judge verdicts to audit (no speech was judged)")
    strata: dict[tuple[str, str, str], dict[str, list[tuple[ScoreEntry, JudgedItem]]]] = defaultdict(
        lambda: defaultdict(list))
    for e, it in items:
        strata[(e.model, e.condition, it.task)][_label(it)].append((e, it))
    rng = random.Random(seed)
    chosen: list[tuple[ScoreEntry, JudgedItem]] = []
    for key in sorted(strata):
        pools = {label: sorted(pool, key=lambda p: (p[0].episode_id, p[1].turn_idx))
                 for label, pool in strata[key].items()}
        chosen.extend(draw(pools, per_label, rng))
    with db.session() as s:
        vrows = {v.id: v for v in s.scalars(select(VerdictRow).where(
            VerdictRow.id.in_([it.verdict_id for _, it in chosen])))}
    out = Path(out)
    (out / "clips").mkdir(parents=True, exist_ok=True)
    tracks: dict[str, np.ndarray] = {}
    rows = []
    for n, (e, it) in enumerate(chosen, start=1):
        item_id = f"a{n:04d}"
        clip = f"clips/{item_id}.wav"
        write_wav(out / clip, join_fragments(_track(db, e, tracks), it.fragments))
        v = vrows.get(it.verdict_id)
        label = _label(it)
        rows.append({
            "item_id": item_id, "run_id": e.run_id or "", "scoring_id": row.id, "episode_id": e.episode_id,
            "model": e.model, "condition": e.condition, "task": it.task, "turn_idx": it.turn_idx,
            "clip": clip, "transcript": it.transcript or "", "gold_answer": it.reference or "",
            "judge": v.backend if v else "", "judge_model": v.model if v else "",
            "prompt_version": v.prompt_version if v else "", "judge_label": label,
            "judge_effective": effective(tasks[it.task], label),
            "human_label": "", "notes": ""})
    with open(out / "sheet.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    (out / "index.html").write_text(_sheet_html(rows, [tasks[t] for t in dict.fromkeys(r["task"] for r in rows)]),
                                    encoding="utf-8")
    return {"scoring_id": row.id, "items": len(rows), "strata": len(strata), "sheet": str(out / "sheet.csv")}


def _label_hint(task: JudgeTask) -> str:
    labels = f"a score {task.labels[0]}-{task.labels[-1]}" if task.numeric else " / ".join(task.labels)
    return f"{labels} for {task.name}"


def _sheet_html(rows: list[dict[str, Any]], tasks: list[JudgeTask]) -> str:
    e = html.escape
    trs = "".join(
        f"<tr><td>{e(r['item_id'])}</td><td>{e(r['model'])}</td><td>{e(r['condition'])}</td><td>{e(r['task'])}</td>"
        f"<td><audio controls preload='none' src='{e(r['clip'])}'></audio></td><td>{e(r['transcript'])}</td>"
        f"<td>{e(r['gold_answer'])}</td><td>{e(r['judge_label'])}</td></tr>"
        for r in rows)
    return ("<!doctype html><meta charset='utf-8'><title>Judge audit</title><style>body{font:14px system-ui;margin:20px}"
            "td,th{border:1px solid #ddd;padding:4px;vertical-align:top}table{border-collapse:collapse}</style>"
            "<h1>Judge audit</h1><p>Listen, then write your label into the <code>human_label</code> column of "
            "sheet.csv: " + e("; ".join(_label_hint(t) for t in tasks)) + ". "
            "Then run <code>mpe audit import sheet.csv</code>.</p><table><tr><th>item</th><th>model</th>"
            "<th>condition</th><th>task</th><th>audio</th><th>transcript</th><th>gold answer</th><th>judge</th></tr>"
            + trs + "</table>")


def _norm_label(x: str, task: JudgeTask) -> str:
    k = x.strip().upper().replace("-", "_").replace(" ", "_")
    if task.numeric:
        try:
            return f"{float(k):g}"
        except ValueError:
            return k
    return task.synonyms.get(k, k)


def import_sheet(path: Path) -> dict[str, Any]:
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise ScoringError(f"{path}: cannot read ({exc.strerror})") from None
    if not rows:
        raise ScoringError(f"{path}: empty sheet")
    missing = {"task", "judge_effective", "human_label"} - set(rows[0])
    if missing:
        raise ScoringError(f"{path}: not an audit sheet (columns {sorted(missing)} missing)")
    tasks = judge_tasks()
    bad = []
    groups: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    unlabeled = excluded = 0
    for i, r in enumerate(rows, start=2):  # line numbers as a spreadsheet shows them
        task = r["task"].strip()
        if task not in tasks:
            bad.append(f"line {i}: unknown task {task!r}")
            continue
        if not r["human_label"].strip():
            unlabeled += 1
            continue
        human = _norm_label(r["human_label"], tasks[task])
        if human not in tasks[task].labels:
            bad.append(f"line {i}: label {r['human_label']!r} is not one of {'/'.join(tasks[task].labels)}")
            continue
        if r["judge_effective"].strip() == UNPARSEABLE:
            excluded += 1
            continue
        judge = f"{r.get('judge', '')}:{r.get('judge_model', '')}:{r.get('prompt_version', '')}"
        groups[(judge, task)].append((r["judge_effective"].strip(), human))
    if bad:
        raise ScoringError(f"{path}: {len(bad)} bad rows: " + "; ".join(bad[:10]) + (" ..." if len(bad) > 10 else ""))
    results = []
    for (judge, task), pairs in sorted(groups.items()):
        n = len(pairs)
        agree = sum(a == b for a, b in pairs)
        labels = tasks[task].labels
        confusion = {f"judge={a}|human={b}": sum(p == (a, b) for p in pairs) for a in labels for b in labels}
        po = agree / n
        kappa = cohens_kappa(pairs, labels)
        result = {"judge": judge, "task": task, "n": n, "agree": agree, "agreement": round(po, 4),
                  "kappa": None if kappa is None else round(kappa, 4), "confusion": confusion}
        if tasks[task].numeric:
            diffs = [abs(float(a) - float(b)) for a, b in pairs]
            result.update(within_1=round(sum(d <= 1 for d in diffs) / n, 4),
                          mean_abs_diff=round(sum(diffs) / n, 4))
        results.append(result)
    return {"sheet": str(path), "labeled": sum(len(p) for p in groups.values()), "unlabeled": unlabeled,
            "excluded": excluded, "results": results}
