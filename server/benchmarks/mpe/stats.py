"""Run-level analyses of §6, with scipy doing the statistics (``scipy.stats.binomtest``,
``bootstrap`` with ``rng=``, ``spearmanr``: scipy >= 1.15, declared in pyproject.toml).

* paired explicit-vs-implicit response presence per model (Table 16, exact McNemar);
* pairwise model comparisons per condition (Table 21): exact McNemar on the silence windows
  both models share and on the T requests both answered, Bonferroni within each condition's
  family (model pairs x two metrics);
* scenario-level bootstrap 95% CIs (10,000 resamples, seed 20260902, percentile method;
  a scenario keeps all its windows) for every quantity and for pairwise differences;
* T onset partition (Table 9), silence-window stages (Table 10), N4 categories and eligibility
  (Table 14), outcomes (Table 15);
* duration-only silence sweep (Table 12: 0/100/200/300/500 ms, no semantic exemption);
* request-time tertiles (Table 13; boundaries from input timing only);
* silence failures by utterance type (Table 19: device request, human request, statement,
  self-talk; "not recorded" where the manifest gives no utterance types);
* response decisions by label and addressee (an extra, beyond the paper);
* Spearman correlation between the fresh-onset and the presence rankings, pooled over both
  conditions and per condition;
* breakdowns of the six quantities by T bucket and speaker count (extras), and of silence
  preservation by N label (Table 18);
* text references apart (Tables 17, 18: :func:`reference_results`), never in the speech
  models' families or pools (:func:`speech_entries`).

Public helpers: :func:`mcnemar_exact`, :func:`bonferroni`, and their log-space forms
:func:`mcnemar_log10`, :func:`bonferroni_log10` (p below the smallest float).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from typing import Any, Callable, Sequence

import numpy as np
from scipy import stats as sst
from scipy.special import logsumexp

from server.benchmarks.mpe.entry import EpisodeScore, SilenceScore
from server.benchmarks.mpe.judging import PASSING
from server.benchmarks.mpe.metrics import METRICS, compute_metrics, group, value
from server.benchmarks.mpe.outcome import t_state
from server.benchmarks.mpe.rules import N4_CATEGORIES, N4_OUTCOMES, RESPONSE_LABELS, SILENCE_LABELS
from server.benchmarks.mpe.suite import T_BUCKETS, UTTERANCE_TYPES
from server.scoring.statistics import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    bonferroni,
    mcnemar_exact,
    ratio_ci,
    ratio_diff_ci,
)

SWEEP_MS = (0, 100, 200, 300, 500)
TERTILES = ("early", "middle", "late")
T_STATES = ("fresh", "already_speaking", "none")  # Table 9: the partition of T (outcome.t_state)
# Table 10: how each N1-N3 window was decided (SilenceScore.reason, judged split by verdict; the paper
# counts an empty transcript and a reply without a valid label apart; responded: a text reference's RESPOND).
SILENCE_STAGES = ("no_speech", "judged_backchannel", "judged_non_backchannel", "empty_transcript", "unparseable",
                  "duration", "no_asr", "responded")


def _r(x: float | None, nd: int = 6) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), nd)


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


def mcnemar_log10(b: int, c: int) -> float:
    """log10 of the two-sided exact McNemar p (as :func:`mcnemar_exact`), computed in log space:
    the binomial tail of thousands of discordant pairs underflows a float (the paper prints
    p < 10^-371), its logarithm does not."""
    n, k = b + c, min(b, c)
    if n == 0 or 2 * k >= n:
        return 0.0
    # log P(X <= k) as a log-sum of the pmf terms (binom.logcdf itself underflows in the far tail)
    log_tail = float(logsumexp(sst.binom.logpmf(np.arange(k + 1), n, 0.5)))
    return min(0.0, (log_tail + math.log(2)) / math.log(10))


def bonferroni_log10(log10_p: float, m: int) -> float:
    """log10 of the Bonferroni-adjusted p (capped at 1), from log10 p."""
    return min(0.0, log10_p + math.log10(m))


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
            "log10_p_mcnemar": _r(mcnemar_log10(b, c), 6) if n else None,
        }
    return out


# --- pairwise model comparisons --------------------------------------------------------------


def _silence_items(eps: list[EpisodeScore]) -> dict[tuple, bool]:
    return {(e.scenario_id, w.turn_idx): w.passed for e in eps for w in e.silence_windows}


def _answer_items(eps: list[EpisodeScore]) -> dict[tuple, bool | None]:
    return {(e.scenario_id,): (e.t.correct if e.t.present else None) for e in eps}


def pairwise(entries: list[EpisodeScore]) -> dict[str, Any]:
    """Table 21: every model pair of a condition on both metrics, exact McNemar, Bonferroni.

    The paper corrects "for the 20 tests per addressing condition (ten model pairs x two
    metrics)": the family is one condition's tests, so each p is multiplied by
    m = C(k, 2) x 2 for the k models scored in that condition (20 for five models), not by
    the count of both conditions together. A test with nothing shared stays in its family
    (p = 1), so m does not depend on what the models happened to do."""
    grouped = group(entries)
    models = list(grouped)
    conditions = sorted({c for m in grouped.values() for c in m})
    tests: list[dict[str, Any]] = []
    families: dict[str, dict[str, Any]] = {}
    for cond in conditions:
        present = [m for m in models if grouped[m].get(cond)]
        m_family = len(list(itertools.combinations(present, 2))) * 2
        families[cond] = {"models": present, "m": m_family}
        family: list[dict[str, Any]] = []
        for m1, m2 in itertools.combinations(present, 2):
            e1, e2 = grouped[m1][cond], grouped[m2][cond]
            # Silence windows both models share (same scenario and turn).
            s1, s2 = _silence_items(e1), _silence_items(e2)
            shared = sorted(set(s1) & set(s2))
            t = _mcnemar_row(cond, m1, m2, "silence", [(s1[k], s2[k]) for k in shared])
            # Bootstrap CI of the difference in silence preservation over shared scenarios.
            scen = sorted({k[0] for k in shared})
            n1 = [sum(s1[k] for k in shared if k[0] == sc) for sc in scen]
            n2 = [sum(s2[k] for k in shared if k[0] == sc) for sc in scen]
            dn = [sum(1 for k in shared if k[0] == sc) for sc in scen]
            t["ci_diff_pp"] = _ci_pp(ratio_diff_ci(n1, dn, n2, dn) if shared else None)
            family.append(t)
            # T requests both models answered (correctness judged for both).
            a1, a2 = _answer_items(e1), _answer_items(e2)
            both = sorted(k for k in set(a1) & set(a2) if a1[k] is not None and a2[k] is not None)
            t = _mcnemar_row(cond, m1, m2, "accuracy", [(bool(a1[k]), bool(a2[k])) for k in both])
            t["ci_diff_pp"] = _ci_pp(ratio_diff_ci([int(bool(a1[k])) for k in both], [1] * len(both),
                                                   [int(bool(a2[k])) for k in both], [1] * len(both))
                                     if both else None)
            family.append(t)
        for t in family:
            t["m"] = m_family
            t["p_bonferroni"] = _r(bonferroni(t["p"], m_family), 8)
            t["log10_p_bonferroni"] = _r(bonferroni_log10(t["log10_p"], m_family), 6)
        tests += family
    return {"families": families, "tests": tests}


def _ci_pp(ci: tuple[float, float] | None) -> list[float | None] | None:
    return [_r(100 * ci[0], 3), _r(100 * ci[1], 3)] if ci else None


def _mcnemar_row(cond: str, m1: str, m2: str, task: str, pairs: list[tuple[bool, bool]]) -> dict[str, Any]:
    n = len(pairs)
    both = sum(x and y for x, y in pairs)
    b = sum(x and not y for x, y in pairs)
    c = sum(y and not x for x, y in pairs)
    return {"condition": cond, "model_a": m1, "model_b": m2, "task": task, "n_shared": n, "both": both,
            "a_only": b, "b_only": c, "neither": n - both - b - c,
            "rate_a": _r((both + b) / n) if n else None, "rate_b": _r((both + c) / n) if n else None,
            "diff_pp": _r(100.0 * (b - c) / n, 3) if n else None, "p": _r(mcnemar_exact(b, c), 8),
            "log10_p": _r(mcnemar_log10(b, c), 6)}


# --- T, silence windows and N4 events (Tables 9, 10, 12, 14, 15) --------------------------------


def t_partition(entries: list[EpisodeScore]) -> dict[str, Any]:
    """Table 9: every T is fresh, already active (speech running at e_T) or unanswered."""
    out: dict[str, Any] = {}
    for model, conds in group(entries).items():
        out[model] = {}
        for cond, eps in conds.items():
            states = [t_state(e.t.fresh, e.t.present) for e in eps]
            out[model][cond] = {"n": len(eps), **{k: states.count(k) for k in T_STATES}}
    return out


def silence_stage(w: SilenceScore) -> str:
    """Table 10: the stage that decided an N1-N3 window (one of :data:`SILENCE_STAGES`)."""
    if w.reason == "judged":
        return "judged_backchannel" if w.verdict == PASSING["silence"] else "judged_non_backchannel"
    return w.reason  # no_speech, empty_transcript, unparseable, duration, no_asr, responded


def silence_stages(entries: list[EpisodeScore]) -> dict[str, Any]:
    """Table 10: N1-N3 windows per deciding stage, with how many of them passed."""
    out: dict[str, Any] = {}
    for model, conds in group(entries).items():
        out[model] = {}
        for cond, eps in conds.items():
            ws = [w for e in eps for w in e.silence_windows]
            stages = [silence_stage(w) for w in ws]
            out[model][cond] = {"n": len(ws), "passed": sum(w.passed for w in ws),
                                "stages": {k: stages.count(k) for k in SILENCE_STAGES},
                                "duration_passed": sum(w.passed for w, k in zip(ws, stages) if k == "duration")}
    return out


#: why a row of Table 19 is empty
TYPES_NOT_RECORDED = "not recorded: the suite's manifest gives no utterance types"


def silence_failures_by_type(entries: list[EpisodeScore]) -> dict[str, Any]:
    """Table 19: the failed N1-N3 windows grouped by the turn's utterance type (the manifest's
    ``utterance_type``): per type the windows, the failures, and the type's share of all failures.
    A model and condition whose windows do not all carry a type is "not recorded" (never a guess)."""
    out: dict[str, Any] = {}
    for model, conds in group(entries).items():
        out[model] = {}
        for cond, eps in conds.items():
            ws = [w for e in eps for w in e.silence_windows]
            if not ws or any(w.utterance_type not in UTTERANCE_TYPES for w in ws):
                out[model][cond] = {"recorded": False, "note": TYPES_NOT_RECORDED if ws else "no silence windows"}
                continue
            failed = sum(not w.passed for w in ws)
            out[model][cond] = {"recorded": True, "n": len(ws), "failed": failed, "types": {
                k: {"n": sum(w.utterance_type == k for w in ws),
                    "failed": sum(w.utterance_type == k and not w.passed for w in ws)} for k in UTTERANCE_TYPES}}
    return {"types": list(UTTERANCE_TYPES), "values": out}


def n4_breakdown(entries: list[EpisodeScore]) -> dict[str, Any]:
    """Tables 12, 14, 15: onset categories of the N4 events, eligibility (fresh onset and still
    speaking at t_R) and the stopping outcome of the eligible ones."""
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
                "censored": sum(n.censored for n in ev if n.eligible),
            }
    return out


# --- sweep, tertiles, response decisions, rankings, breakdowns ----------------------------------


def silence_sweep(entries: list[EpisodeScore], thresholds_ms: Sequence[int] = SWEEP_MS) -> dict[str, Any]:
    """Table 12, duration only, no semantic exemption: a window passes with at most ``t`` ms of speech.
    Text references have no speech durations and are left out."""
    values: dict[str, Any] = {}
    for model, conds in group(e for e in entries if e.text_reference is None).items():
        values[model] = {}
        for cond, eps in conds.items():
            speech = [w.speech_ms for e in eps for w in e.silence_windows]
            values[model][cond] = [{"threshold_ms": t, "num": sum(s <= t for s in speech), "den": len(speech),
                                    "value": _r(sum(s <= t for s in speech) / len(speech)) if speech else None}
                                   for t in thresholds_ms]
    return {"thresholds_ms": list(thresholds_ms), "values": values}


def request_tertiles(entries: list[EpisodeScore]) -> dict[str, Any]:
    """Table 13. Request time = first human turn to the start of T; the boundaries come from the
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
                fresh = sum(e.t.fresh for e in es)
                judged = [e for e in present if e.t.correct is not None]
                correct = sum(bool(e.t.correct) for e in judged)
                row[b] = {"n": len(es), "fresh": fresh, "fresh_rate": _r(fresh / len(es)) if es else None,
                          "present": len(present), "presence": _r(len(present) / len(es)) if es else None,
                          "judged": len(judged), "correct": correct,
                          "accuracy": _r(correct / len(judged)) if judged else None}
            groups[model][cond] = row
    return {"boundaries_s": [_r(q1, 3), _r(q2, 3)], "groups": groups}


def addressee_kind(addressee: str | None) -> str:
    """The response decisions' addressee groups: Aria, another person (a speaker letter), the group, another
    device, or nobody (thinking aloud, or no addressee in the manifest)."""
    if addressee is None:
        return "nobody"
    if len(addressee) == 1 and addressee.isupper():
        return "person"
    return addressee


def _decisions(eps: list[EpisodeScore]) -> list[tuple[str, str, bool, bool]]:
    """(label, addressee kind, spoke, responded) of every window a model may respond in: T is
    answered when a response is present; an N1-N3 window is responded to when its speech was
    not a backchannel (the window failed); an N4Q when there is a window response. A text
    reference speaks where it chose RESPOND."""
    rows = []
    for e in eps:
        rows.append(("T", addressee_kind(e.t.addressee), e.t.present, e.t.present))
        rows += [(w.label, addressee_kind(w.addressee), w.speech_ms > 0 or w.reason == "responded", not w.passed)
                 for w in e.silence_windows]
        rows += [("N4Q", addressee_kind(n.addressee), n.window_response, n.window_response) for n in e.n4]
    return rows


def _decision_cell(rows: list[tuple[str, str, bool, bool]]) -> dict[str, Any]:
    n, responded = len(rows), sum(r[3] for r in rows)
    return {"n": n, "spoke": sum(r[2] for r in rows), "responded": responded,
            "rate": _r(responded / n) if n else None}


def response_decisions(entries: list[EpisodeScore]) -> dict[str, Any]:
    """Extra (beyond the paper): how often each model responds, per utterance type and per addressee."""
    by_label: dict[str, Any] = {}
    by_addressee: dict[str, Any] = {}
    for model, conds in group(entries).items():
        by_label[model], by_addressee[model] = {}, {}
        for cond, eps in conds.items():
            rows = _decisions(eps)
            by_label[model][cond] = {lab: _decision_cell([r for r in rows if r[0] == lab]) for lab in RESPONSE_LABELS}
            by_addressee[model][cond] = {
                lab: {k: _decision_cell([r for r in rows if r[0] == lab and r[1] == k])
                      for k in sorted({r[1] for r in rows if r[0] == lab})}
                for lab in RESPONSE_LABELS}
    with_addressee = any(x.addressee is not None for e in entries
                         for x in [e.t, *e.silence_windows, *e.n4])
    return {"labels": list(RESPONSE_LABELS), "by_label": by_label, "by_addressee": by_addressee,
            "addressees_given": with_addressee}


def _spearman(rows: list[tuple[str, str, float, float]]) -> dict[str, Any]:
    entry: dict[str, Any] = {"n": len(rows), "entries": [f"{r[0]} / {r[1]}" for r in rows], "rho": None, "p": None}
    if len(rows) < 3:
        entry["note"] = "needs at least 3 entries"
    elif len({r[2] for r in rows}) < 2 or len({r[3] for r in rows}) < 2:
        entry["note"] = "a ranking is constant (all tied)"
    else:
        res = sst.spearmanr([r[2] for r in rows], [r[3] for r in rows])
        entry["rho"], entry["p"] = _r(res.statistic), _r(res.pvalue)
    return entry


def ranking_correlation(metrics: dict) -> dict[str, Any]:
    """Spearman's rho between the fresh-onset and the presence rankings. As in the paper the
    models' explicit and implicit results are pooled (ten entries for five models); the
    per-condition values (five entries each) are an extra."""
    rows = [(model, cond, qs["fresh_onset_rate"]["value"], qs["response_presence"]["value"])
            for model, conds in metrics.items() for cond, qs in conds.items()]
    rows = [r for r in rows if r[2] is not None and r[3] is not None]
    return {"pooled": _spearman(rows),
            "per_condition": {c: _spearman([r for r in rows if r[1] == c]) for c in sorted({r[1] for r in rows})}}


def _by(entries: list[EpisodeScore], key: Callable[[EpisodeScore], Any], order: Sequence[str]) -> dict[str, Any]:
    """model -> condition -> group -> the six quantities over that group's entries."""
    keyed = [(None if key(e) is None else str(key(e)), e) for e in entries]
    groups = [g for g in order if any(k == g for k, _ in keyed)]
    out: dict[str, Any] = {}
    for g in groups:
        for model, conds in compute_metrics([e for k, e in keyed if k == g]).items():
            for cond, qs in conds.items():
                out.setdefault(model, {}).setdefault(cond, {})[g] = qs
    return {"groups": groups, "values": out}


def by_n_label(entries: list[EpisodeScore]) -> dict[str, Any]:
    """Silence preservation of the N1, N2 and N3 windows apart."""
    m = METRICS["silence_preservation"]
    out: dict[str, Any] = {}
    for model, conds in group(entries).items():
        out[model] = {}
        for cond, eps in conds.items():
            out[model][cond] = {}
            for lab in SILENCE_LABELS:
                num, den = m.fn([e.model_copy(update={"silence_windows": [w for w in e.silence_windows
                                                                          if w.label == lab]}) for e in eps])
                out[model][cond][lab] = {"num": num, "den": den, "value": value(m, num, den)}
    return {"groups": list(SILENCE_LABELS), "values": out}


def breakdowns(entries: list[EpisodeScore]) -> dict[str, Any]:
    """Beyond the paper: the quantities by T bucket and by speaker count, silence by N label."""
    speakers = sorted({str(e.n_speakers) for e in entries if e.n_speakers is not None}, key=int)
    return {"t_bucket": _by(entries, lambda e: e.t_bucket, T_BUCKETS),
            "n_speakers": _by(entries, lambda e: e.n_speakers, speakers),
            "n_label": by_n_label(entries)}


def analyses(entries: list[EpisodeScore], metrics: dict) -> dict[str, Any]:
    return {
        "paired_addressing": paired_addressing(entries),
        "pairwise": pairwise(entries),
        "bootstrap": bootstrap_cis(entries, metrics),
        "bootstrap_settings": {"n_resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED, "confidence": CONFIDENCE,
                               "method": "percentile", "unit": "scenario"},
        "t_partition": t_partition(entries),
        "silence_stages": silence_stages(entries),
        "silence_failures_by_type": silence_failures_by_type(entries),
        "n4_breakdown": n4_breakdown(entries),
        "silence_sweep": silence_sweep(entries),
        "request_time_tertiles": request_tertiles(entries),
        "response_decisions": response_decisions(entries),
        "ranking_correlation": ranking_correlation(metrics),
        "breakdowns": breakdowns(entries),
    }


#: why a text reference has no fresh-onset rate (the paper: not measured)
FRESH_NOT_MEASURED = "not measured: a decision on the script has no onset time"


def n4q_addressee(eps: list[EpisodeScore]) -> dict[str, Any]:
    """Table 17's N4 Q addressee diagnostic: of the N4 questions addressed to Aria, the share a
    model responded to (window response); not measured where the manifest gives no N4Q addressee."""
    events = [n for e in eps for n in e.n4]
    to_aria = [n for n in events if n.addressee == "Aria"]
    if not any(n.addressee is not None for n in events):
        return {"num": None, "den": None, "value": None,
                "note": "not measured: the manifest gives no N4Q addressee" if events else "not measured: no N4 events"}
    num = sum(n.window_response for n in to_aria)
    return {"num": num, "den": len(to_aria), "value": _r(num / len(to_aria)) if to_aria else None}


def reference_results(entries: list[EpisodeScore]) -> dict[str, Any]:
    """Text references (``mpe reference``), reported apart from the speech models and never in
    their families or pools (Tables 17, 18): their quantities (fresh onset not measured), the
    N4 Q addressee diagnostic, silence by N label, paired addressing and response decisions."""
    refs = [e for e in entries if e.text_reference is not None]
    if not refs:
        return {}
    metrics = compute_metrics(refs)
    for conds in metrics.values():
        for qs in conds.values():
            qs["fresh_onset_rate"] = {"num": None, "den": None, "value": None, "note": FRESH_NOT_MEASURED}
    return {"metrics": metrics,
            "n4q_addressee": {model: {cond: n4q_addressee(eps) for cond, eps in conds.items()}
                              for model, conds in group(refs).items()},
            "n_label": by_n_label(refs),
            "paired_addressing": paired_addressing(refs),
            "response_decisions": response_decisions(refs)}


def speech_entries(entries: list[EpisodeScore]) -> list[EpisodeScore]:
    """The entries of speech models: every family, pool and sweep of the analyses is theirs alone."""
    return [e for e in entries if e.text_reference is None]

