"""Run-level analyses of §6, with scipy doing the statistics.

* paired explicit-vs-implicit response presence per model (exact McNemar);
* pairwise model comparisons per condition: exact McNemar on the silence windows both
  models share and on the T requests both answered, Bonferroni over all tests of the table;
* scenario-level bootstrap 95% CIs (10,000 resamples, seed 20260902, percentile method;
  a scenario keeps all its windows) for every quantity and for pairwise differences;
* duration-only silence sweep (0/100/200/300/500 ms, no semantic exemption);
* request-time tertiles (boundaries from input timing only);
* Spearman correlation between the fresh-onset and the presence rankings.

Public helpers: :func:`mcnemar_exact`, :func:`bonferroni`.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections import defaultdict
from typing import Any, Callable, Sequence

import numpy as np
from scipy import stats as sst

from server.benchmarks.mpe.entry import EpisodeScore
from server.benchmarks.mpe.metrics import METRICS, group
from server.benchmarks.mpe.rules import N4_CATEGORIES, N4_OUTCOMES

BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 20260902
CONFIDENCE = 0.95
SWEEP_MS = (0, 100, 200, 300, 500)
TERTILES = ("early", "middle", "late")


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p from the two discordant counts (binomial test, p = 1/2)."""
    b, c = int(b), int(c)
    if b < 0 or c < 0:
        raise ValueError("discordant counts must be >= 0")
    if b + c == 0:
        return 1.0
    return float(min(1.0, sst.binomtest(min(b, c), b + c, 0.5, alternative="two-sided").pvalue))


def bonferroni(p: float, m: int) -> float:
    """Bonferroni-adjusted p for ``m`` tests, capped at 1."""
    if m < 1:
        raise ValueError("m must be >= 1")
    return float(min(1.0, p * m))


def _r(x: float | None, nd: int = 6) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), nd)


# --- bootstrap -------------------------------------------------------------------------------


def _bootstrap(data: tuple[np.ndarray, ...], statistic: Callable, n_resamples: int, seed: int) -> tuple[float, float] | None:
    if len(data[0]) < 2:
        return None  # one scenario: no resampling distribution
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate samples (all equal) are fine for percentiles
        res = sst.bootstrap(data, statistic, paired=True, vectorized=True, n_resamples=n_resamples,
                            confidence_level=CONFIDENCE, method="percentile", batch=1000,
                            rng=np.random.default_rng(seed))
    lo, hi = res.confidence_interval
    if math.isnan(lo) or math.isnan(hi):
        return None
    return float(lo), float(hi)


def ratio_ci(num: Sequence[int], den: Sequence[int], *, n_resamples: int = BOOTSTRAP_RESAMPLES,
             seed: int = BOOTSTRAP_SEED) -> tuple[float, float] | None:
    """Percentile CI of sum(num)/sum(den) resampling clusters (scenarios) with replacement.
    Clusters with den = 0 carry no windows and are left out."""
    n, d = np.asarray(num, float), np.asarray(den, float)
    keep = d > 0
    n, d = n[keep], d[keep]

    def stat(a, b, axis=-1):
        return a.sum(axis=axis) / b.sum(axis=axis)

    return _bootstrap((n, d), stat, n_resamples, seed)


def ratio_diff_ci(n1: Sequence[int], d1: Sequence[int], n2: Sequence[int], d2: Sequence[int], *,
                  n_resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> tuple[float, float] | None:
    """Percentile CI of ratio1 - ratio2 with the same scenarios drawn for both (paired)."""
    arrs = [np.asarray(x, float) for x in (n1, d1, n2, d2)]
    keep = (arrs[1] > 0) & (arrs[3] > 0)
    arrs = [a[keep] for a in arrs]

    def stat(a, b, c, d, axis=-1):
        return a.sum(axis=axis) / b.sum(axis=axis) - c.sum(axis=axis) / d.sum(axis=axis)

    return _bootstrap(tuple(arrs), stat, n_resamples, seed)


def _by_scenario(eps: list[EpisodeScore]) -> dict[str, list[EpisodeScore]]:
    out: dict[str, list[EpisodeScore]] = defaultdict(list)
    for e in eps:
        out[e.scenario_id].append(e)
    return dict(sorted(out.items()))


def bootstrap_cis(entries: list[EpisodeScore], metrics: dict) -> dict[str, Any]:
    """model -> condition -> quantity -> {value, lo, hi, n_scenarios} (CI only where the value is reported)."""
    out: dict[str, Any] = {}
    for model, conds in group(entries).items():
        out[model] = {}
        for cond, eps in conds.items():
            scen = _by_scenario(eps)
            out[model][cond] = {}
            for name, m in METRICS.items():
                pairs = [m.fn(es) for es in scen.values()]
                val = metrics[model][cond][name]["value"]
                ci = ratio_ci([p[0] for p in pairs], [p[1] for p in pairs]) if val is not None else None
                out[model][cond][name] = {"value": _r(val), "lo": _r(ci[0]) if ci else None,
                                          "hi": _r(ci[1]) if ci else None,
                                          "n_scenarios": sum(1 for p in pairs if p[1] > 0)}
    return out


# --- paired addressing -----------------------------------------------------------------------


def paired_addressing(entries: list[EpisodeScore]) -> dict[str, Any]:
    """Per model: explicit vs implicit response presence over complete pairs (exact McNemar)."""
    out: dict[str, Any] = {}
    for model, conds in group(entries).items():
        by_pair: dict[str, dict[str, bool]] = defaultdict(dict)
        for cond, eps in conds.items():
            for e in eps:
                by_pair[e.pair_id][cond] = e.t.present
        pairs = [p for p in by_pair.values() if "explicit" in p and "implicit" in p]
        a = sum(p["explicit"] and p["implicit"] for p in pairs)
        b = sum(p["explicit"] and not p["implicit"] for p in pairs)
        c = sum(p["implicit"] and not p["explicit"] for p in pairs)
        d = sum(not p["explicit"] and not p["implicit"] for p in pairs)
        n = len(pairs)
        out[model] = {
            "n_pairs": n, "both": a, "explicit_only": b, "implicit_only": c, "neither": d,
            "explicit_rate": _r((a + b) / n) if n else None, "implicit_rate": _r((a + c) / n) if n else None,
            "diff_pp": _r(100.0 * (b - c) / n, 3) if n else None,
            "p_mcnemar": _r(mcnemar_exact(b, c), 8) if n else None,
        }
    return out


# --- pairwise model comparisons --------------------------------------------------------------


def _silence_items(eps: list[EpisodeScore]) -> dict[tuple, bool]:
    return {(e.scenario_id, w.turn_idx): w.passed for e in eps for w in e.silence_windows}


def _answer_items(eps: list[EpisodeScore]) -> dict[tuple, bool | None]:
    return {(e.scenario_id,): (e.t.correct if e.t.present else None) for e in eps}


def pairwise(entries: list[EpisodeScore]) -> dict[str, Any]:
    grouped = group(entries)
    models = list(grouped)
    conditions = sorted({c for m in grouped.values() for c in m})
    tests: list[dict[str, Any]] = []
    for cond in conditions:
        for m1, m2 in itertools.combinations(models, 2):
            e1, e2 = grouped[m1].get(cond, []), grouped[m2].get(cond, [])
            if not e1 or not e2:
                continue
            # Silence windows both models share (same scenario and turn).
            s1, s2 = _silence_items(e1), _silence_items(e2)
            shared = sorted(set(s1) & set(s2))
            if shared:
                t = _mcnemar_row(cond, m1, m2, "silence", [(s1[k], s2[k]) for k in shared])
                # Bootstrap CI of the difference in silence preservation over shared scenarios.
                scen = sorted({k[0] for k in shared})
                n1 = [sum(s1[k] for k in shared if k[0] == sc) for sc in scen]
                n2 = [sum(s2[k] for k in shared if k[0] == sc) for sc in scen]
                dn = [sum(1 for k in shared if k[0] == sc) for sc in scen]
                ci = ratio_diff_ci(n1, dn, n2, dn)
                t["ci_diff_pp"] = [_r(100 * ci[0], 3), _r(100 * ci[1], 3)] if ci else None
                tests.append(t)
            # T requests both models answered (correctness judged for both).
            a1, a2 = _answer_items(e1), _answer_items(e2)
            both = sorted(k for k in set(a1) & set(a2) if a1[k] is not None and a2[k] is not None)
            if both:
                t = _mcnemar_row(cond, m1, m2, "accuracy", [(bool(a1[k]), bool(a2[k])) for k in both])
                ci = ratio_diff_ci([int(bool(a1[k])) for k in both], [1] * len(both),
                                   [int(bool(a2[k])) for k in both], [1] * len(both))
                t["ci_diff_pp"] = [_r(100 * ci[0], 3), _r(100 * ci[1], 3)] if ci else None
                tests.append(t)
    m = len(tests)
    for t in tests:
        t["p_bonferroni"] = _r(bonferroni(t["p"], m), 8)
    return {"m": m, "tests": tests}


def _mcnemar_row(cond: str, m1: str, m2: str, task: str, pairs: list[tuple[bool, bool]]) -> dict[str, Any]:
    n = len(pairs)
    both = sum(x and y for x, y in pairs)
    b = sum(x and not y for x, y in pairs)
    c = sum(y and not x for x, y in pairs)
    return {"condition": cond, "model_a": m1, "model_b": m2, "task": task, "n_shared": n, "both": both,
            "a_only": b, "b_only": c, "neither": n - both - b - c, "rate_a": _r((both + b) / n),
            "rate_b": _r((both + c) / n), "diff_pp": _r(100.0 * (b - c) / n, 3), "p": _r(mcnemar_exact(b, c), 8)}


# --- sweep, tertiles, rankings, N4 breakdown ---------------------------------------------------


def silence_sweep(entries: list[EpisodeScore], thresholds_ms: Sequence[int] = SWEEP_MS) -> dict[str, Any]:
    """Duration only, no semantic exemption: a window passes with at most ``t`` ms of speech."""
    values: dict[str, Any] = {}
    for model, conds in group(entries).items():
        values[model] = {}
        for cond, eps in conds.items():
            speech = [w.speech_ms for e in eps for w in e.silence_windows]
            values[model][cond] = [{"threshold_ms": t, "num": sum(s <= t for s in speech), "den": len(speech),
                                    "value": _r(sum(s <= t for s in speech) / len(speech)) if speech else None}
                                   for t in thresholds_ms]
    return {"thresholds_ms": list(thresholds_ms), "values": values}


def request_tertiles(entries: list[EpisodeScore]) -> dict[str, Any]:
    """Request time = first human turn to the start of T; the boundaries come from the
    scenarios' input timing only (one value per scenario version, whatever the models did)."""
    times = {(e.scenario_id, e.condition): e.request_time_s for e in entries}
    if len(times) < 3:
        return {"boundaries_s": None, "groups": {}, "note": "needs at least 3 scenario versions"}
    q1, q2 = (float(x) for x in np.quantile(np.array(sorted(times.values())), [1 / 3, 2 / 3]))

    def bucket(t: float) -> str:
        return "early" if t <= q1 else "middle" if t <= q2 else "late"

    groups: dict[str, Any] = {}
    for model, conds in group(entries).items():
        groups[model] = {}
        for cond, eps in conds.items():
            row = {}
            for b in TERTILES:
                es = [e for e in eps if bucket(e.request_time_s) == b]
                present = [e for e in es if e.t.present]
                judged = [e for e in present if e.t.correct is not None]
                correct = sum(bool(e.t.correct) for e in judged)
                row[b] = {"n": len(es), "present": len(present), "presence": _r(len(present) / len(es)) if es else None,
                          "fresh": sum(e.t.fresh for e in es),
                          "judged": len(judged), "correct": correct,
                          "accuracy": _r(correct / len(judged)) if judged else None}
            groups[model][cond] = row
    return {"boundaries_s": [_r(q1, 3), _r(q2, 3)], "groups": groups}


def ranking_correlation(metrics: dict) -> dict[str, Any]:
    """Per condition: Spearman's rho between the models' fresh-onset and presence rankings."""
    out: dict[str, Any] = {}
    conditions = sorted({c for m in metrics.values() for c in m})
    for cond in conditions:
        rows = [(model, conds[cond]["fresh_onset_rate"]["value"], conds[cond]["response_presence"]["value"])
                for model, conds in metrics.items() if cond in conds]
        rows = [r for r in rows if r[1] is not None and r[2] is not None]
        entry: dict[str, Any] = {"n_models": len(rows), "models": [r[0] for r in rows], "rho": None, "p": None}
        if len(rows) < 3:
            entry["note"] = "needs at least 3 models"
        elif len({r[1] for r in rows}) < 2 or len({r[2] for r in rows}) < 2:
            entry["note"] = "a ranking is constant (all tied)"
        else:
            res = sst.spearmanr([r[1] for r in rows], [r[2] for r in rows])
            entry["rho"], entry["p"] = _r(res.statistic), _r(res.pvalue)
        out[cond] = entry
    return out


def n4_breakdown(entries: list[EpisodeScore]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for model, conds in group(entries).items():
        out[model] = {}
        for cond, eps in conds.items():
            ev = [n for e in eps for n in e.n4]
            out[model][cond] = {
                "n": len(ev),
                "window_response": sum(n.window_response for n in ev),
                "categories": {c: sum(n.category == c for n in ev) for c in N4_CATEGORIES},
                "speaking_at_t_R": sum(n.speaking_at_t_R for n in ev),
                "eligible": sum(n.eligible for n in ev),
                "outcomes": {o: sum(n.outcome == o for n in ev if n.eligible) for o in N4_OUTCOMES},
            }
    return out


def analyses(entries: list[EpisodeScore], metrics: dict) -> dict[str, Any]:
    return {
        "paired_addressing": paired_addressing(entries),
        "pairwise": pairwise(entries),
        "bootstrap": bootstrap_cis(entries, metrics),
        "bootstrap_settings": {"n_resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED, "confidence": CONFIDENCE,
                               "method": "percentile", "unit": "scenario"},
        "silence_sweep": silence_sweep(entries),
        "request_time_tertiles": request_tertiles(entries),
        "ranking_correlation": ranking_correlation(metrics),
        "n4_breakdown": n4_breakdown(entries),
    }
