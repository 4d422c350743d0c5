"""Suite accounting: composition and duration tables, in the spirit of a paper's data section.

:func:`suite_stats` is a pure function of a loaded suite and returns plain data (the
``--json`` output); :func:`render_stats` draws it as rich tables.

Durations per condition: a *scene* is one scenario version's human speech (the sum of its
clips); *turn* and *T* are single clips; the *minimum episode* adds what the scheduler
always plays around them (preamble, 0.5 s after every clip, 3 s after N4Q) and leaves out
the open-ended wait after T. Clip time is *distinct* when counted once per clip file and
*reused* for every further play of the same file (a turn shared by both conditions plays
twice, once per condition).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from server.benchmarks.mpe.suite import CONDITIONS, LABELS, T_BUCKETS, Suite, audio_pending

GAP_S = 0.5  # §3: silence after each clip
N4_GAP_S = 3.0  # §3: silence after N4Q


def _summary(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"n": 0}
    a = np.asarray(values, dtype=np.float64)
    return {
        "n": int(a.size),
        "mean_s": round(float(a.mean()), 3),
        "median_s": round(float(np.median(a)), 3),
        "p5_s": round(float(np.percentile(a, 5)), 3),
        "p95_s": round(float(np.percentile(a, 95)), 3),
        "min_s": round(float(a.min()), 3),
        "max_s": round(float(a.max()), 3),
        "total_h": round(float(a.sum()) / 3600.0, 4),
    }


def suite_stats(suite: Suite) -> dict[str, Any]:
    meta = suite.meta
    pairs = suite.pairs()
    first = {pid: next(iter(v.values())) for pid, v in pairs.items()}
    pending = audio_pending(meta)

    comp: dict[str, Any] = {
        "pairs": len(pairs),
        "scenario_versions": len(suite.scenarios),
        "speakers": {str(k): v for k, v in sorted(Counter(sc.n_speakers for sc in first.values()).items())},
        "t_buckets": {b: sum(sc.t_bucket == b for sc in first.values()) for b in T_BUCKETS},
        "n4_pairs": sum(any(t.label == "N4Q" for t in sc.turns) for sc in first.values()),
    }
    others = Counter(sc.t_bucket for sc in first.values() if sc.t_bucket not in T_BUCKETS)
    if others:
        comp["t_buckets"].update(dict(others))
    comp["n4_share"] = round(comp["n4_pairs"] / len(pairs), 4) if pairs else 0.0
    comp["turns_per_scenario"] = _counts(Counter(len(sc.turns) for sc in first.values()))
    comp["labels"] = {
        cond: {lab: sum(t.label == lab for sc in suite.scenarios if sc.condition == cond for t in sc.turns)
               for lab in sorted(LABELS)}
        for cond in CONDITIONS
    }
    # §2: an N4 event is an N4Q with its N4R; a pair may hold several.
    comp["n4_events"] = {cond: comp["labels"][cond]["N4Q"] for cond in CONDITIONS}
    # Implicit cue: in T alone, or with the turn before T revised too.
    revised = 0
    for p in pairs.values():
        if set(p) >= set(CONDITIONS):
            ex, im = p["explicit"], p["implicit"]
            try:  # §2: T is paired by label, not position (the versions may differ in length)
                te, ti = ex.t_index, im.t_index
            except ValueError:
                continue
            if te > 0 and ti > 0 and ex.turns[te - 1].text != im.turns[ti - 1].text:
                revised += 1
    comp["implicit_cue"] = {"in_t": len(pairs) - revised, "revised_turn_before_t": revised}
    comp["attributes"] = {
        key: dict(Counter(sc.attributes.get(key, "") for sc in first.values()).most_common())
        for key in ("setting", "activity", "relationship", "device_context", "register")
    }
    words = [len(t.text.split()) for sc in suite.scenarios for t in sc.turns]
    comp["words_per_turn"] = round(float(np.mean(words)), 2) if words else 0.0

    out: dict[str, Any] = {
        "name": meta.name,
        "version": meta.version,
        "generator": meta.generator,
        "seed": meta.seed,
        "audio": "pending" if pending else (meta.model_extra or {}).get("audio", "present"),
        "composition": comp,
    }
    if pending:
        return out

    durations: dict[str, Any] = {}
    for cond in CONDITIONS:
        scs = [sc for sc in suite.scenarios if sc.condition == cond]
        scene = [sum(t.duration_s for t in sc.turns) for sc in scs]
        episode = [meta.preamble.duration_s + GAP_S
                   + sum(t.duration_s + (N4_GAP_S if t.label == "N4Q" else GAP_S) for t in sc.turns) for sc in scs]
        durations[cond] = {
            "scene": _summary(scene),
            "turn": _summary([t.duration_s for sc in scs for t in sc.turns]),
            "t": _summary([t.duration_s for sc in scs for t in sc.turns if t.label == "T"]),
            "min_episode": _summary(episode),
        }
    played: dict[str, float] = {}
    plays: Counter = Counter()
    for sc in suite.scenarios:
        for t in sc.turns:
            played[t.clip] = t.duration_s
            plays[t.clip] += 1
    distinct = sum(played.values())
    total = sum(played[c] * n for c, n in plays.items())
    shared = sum(d for c, d in played.items() if plays[c] > 1)
    out["durations"] = durations
    out["clips"] = {
        "files": len(played),
        "distinct_h": round(distinct / 3600.0, 4),
        "played_h": round(total / 3600.0, 4),
        "reused_h": round((total - distinct) / 3600.0, 4),
        "shared_by_conditions_h": round(shared / 3600.0, 4),
        "preamble_s": meta.preamble.duration_s,
    }
    return out


def _counts(c: Counter) -> dict[str, int]:
    return {str(k): v for k, v in sorted(c.items())}


def render_stats(stats: dict[str, Any], console) -> None:
    """Rich tables for ``mpe dataset stats``."""
    from rich.table import Table

    comp = stats["composition"]
    console.print(f"[bold]{stats['name']}[/bold] v{stats['version']}  generator={stats['generator']} "
                  f"seed={stats['seed']}  audio={'pending' if stats['audio'] == 'pending' else 'synthesised'}")
    t = Table(title="Composition (per pair)")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_row("pairs", str(comp["pairs"]))
    t.add_row("scenario versions", str(comp["scenario_versions"]))
    for k, v in comp["speakers"].items():
        t.add_row(f"{k}-human scenarios", str(v))
    for k, v in comp["t_buckets"].items():
        t.add_row(f"T bucket {k}", str(v))
    t.add_row("pairs with an N4 event", f"{comp['n4_pairs']} ({100 * comp['n4_share']:.1f} %)")
    t.add_row("N4 events per condition", " / ".join(f"{c}: {v}" for c, v in comp["n4_events"].items()))
    t.add_row("implicit cue in T / revised turn before T",
              f"{comp['implicit_cue']['in_t']} / {comp['implicit_cue']['revised_turn_before_t']}")
    t.add_row("turns per scenario", ", ".join(f"{k}: {v}" for k, v in comp["turns_per_scenario"].items()))
    t.add_row("words per turn (mean)", str(comp["words_per_turn"]))
    console.print(t)

    lt = Table(title="Turn labels per condition")
    lt.add_column("label")
    for cond in comp["labels"]:
        lt.add_column(cond, justify="right")
    for lab in sorted(LABELS):
        lt.add_row(lab, *(str(comp["labels"][c][lab]) for c in comp["labels"]))
    console.print(lt)

    at = Table(title="Scene attributes (pairs)")
    at.add_column("attribute")
    at.add_column("values")
    for key, counts in comp["attributes"].items():
        at.add_row(key, "; ".join(f"{v} ({n})" for v, n in counts.items()))
    console.print(at)

    if "durations" not in stats:
        console.print("[yellow]audio pending[/yellow]: no duration tables (run mpe dataset synthesize)")
        return
    for cond, d in stats["durations"].items():
        dt = Table(title=f"Durations, {cond} condition (seconds; totals in hours)")
        for col in ("unit", "n", "mean", "median", "p5", "p95", "total h"):
            dt.add_column(col, justify="right" if col != "unit" else "left")
        for unit, label in (("scene", "scene (speech)"), ("turn", "turn"), ("t", "T turn"),
                            ("min_episode", "minimum episode")):
            s = d[unit]
            if s["n"] == 0:
                continue
            dt.add_row(label, str(s["n"]), f"{s['mean_s']:.2f}", f"{s['median_s']:.2f}", f"{s['p5_s']:.2f}",
                       f"{s['p95_s']:.2f}", f"{s['total_h']:.3f}")
        console.print(dt)
    c = stats["clips"]
    ct = Table(title="Clip time (hours)")
    for col in ("files", "distinct", "played", "reused", "shared by both conditions", "preamble s"):
        ct.add_column(col, justify="right")
    ct.add_row(str(c["files"]), f"{c['distinct_h']:.3f}", f"{c['played_h']:.3f}", f"{c['reused_h']:.3f}",
               f"{c['shared_by_conditions_h']:.3f}", f"{c['preamble_s']:.2f}")
    console.print(ct)
