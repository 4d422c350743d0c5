"""The paper's tables (and a few more) as plain rows of cells, built once from a run's metrics
and analyses (:mod:`.metrics`, :mod:`.stats`) and drawn by both reports: the terminal
(:func:`server.benchmarks.mpe.report.print_report`) and the HTML file.

Each table of the paper carries its number in the paper (:data:`PAPER_TABLES`); the tables the
paper does not have are labelled as extras, never numbered. Shares carry their numerator and
denominator and are printed with two decimals (a 0.1 pp difference is visible); ★ marks the
best model of a condition, only on the four scored capabilities (:data:`.metrics.METRICS`).
p-values too small for a float print in scientific notation from their logarithm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from server.benchmarks.mpe.metrics import METRICS, best_per_column
from server.benchmarks.mpe.rules import N4_CATEGORIES, N4_OUTCOMES
from server.benchmarks.mpe.stats import SILENCE_STAGES, T_STATES, TERTILES

T_STATE_TITLES = {"fresh": "fresh onset", "already_speaking": "already active", "none": "none"}
STAGE_TITLES = {"no_speech": "no speech", "judged_backchannel": "judged backchannel",
                "judged_non_backchannel": "judged non-backchannel",
                "empty_transcript": "empty transcript",
                "unparseable": "no valid label", "duration": "decided on duration",
                "no_asr": "no ASR", "responded": "text reference: RESPOND"}
CATEGORY_TITLES = {"already_speaking": "already speaking", "started_during_q": "started during N4Q",
                   "fresh_onset": "fresh onset", "no_speech": "no speech"}
OUTCOME_TITLES = {"pass": "pass", "still_voicing": "still voicing", "resumed": "resumed"}
ADDRESSEE_TITLES = {"Aria": "Aria", "person": "another person", "group": "the group", "device": "another device",
                    "nobody": "nobody / not given"}
TASK_TITLES = {"silence": "silence preservation", "accuracy": "answer accuracy"}
TYPE_TITLES = {"device_request": "device request", "human_request": "human request", "statement": "statement",
               "self_talk": "self-talk"}
#: the paper's numbered tables that the report prints, in order (17: text references, 18: silence
#: by N label, 19: silence failures by utterance type); every other table is an extra
PAPER_TABLES: tuple[int, ...] = (3, 9, 10, 12, 13, 14, 15, 16, 17, 18, 19, 21)
EXTRA = "Extra (beyond the paper)"


@dataclass(frozen=True)
class Cell:
    """One table cell: its text, the counts behind a share (shown small), and its marks."""

    text: str
    sub: str = ""
    best: bool = False  # ★ best of its condition (scored quantities only)
    strong: bool = False  # significant after correction


@dataclass(frozen=True)
class ReportTable:
    key: str  # an anchor: table3, table9, ...
    title: str
    note: str
    head: list[str]
    rows: list[list[Cell]]
    empty: str = "nothing to show"  # said instead of an empty table
    keys: int = 2  # leading columns that name the row (left-aligned)


def pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.2f}%"


def p_text(v: float | None, log10: float | None = None) -> str:
    """A p-value; below 0.001 in scientific notation, from ``log10`` (computed in log space) where
    given, so a p under the smallest float still prints with its exponent (e.g. 3.1e-372)."""
    if v is None:
        return "–"
    if v >= 0.001 or log10 is None:
        return f"{v:.2g}" if v < 0.001 else f"{v:.4f}"
    exp = math.floor(log10)
    mant = round(10 ** (log10 - exp), 1)
    if mant >= 10:
        mant, exp = 1.0, exp + 1
    return f"{mant:.1f}e{exp:+03d}"


def pp(v: float | None) -> str:
    return "–" if v is None else f"{v:+.2f} pp"


def share(num: int, den: int) -> Cell:
    """num/den as a percentage with its counts (– without a denominator)."""
    return Cell(pct(num / den if den else None), f"{num}/{den}")


def _q(v: dict[str, Any], *, best: bool = False) -> Cell:
    return Cell(pct(v["value"]), f"{v['num']}/{v['den']}", best=best)


def _c(x: Any) -> Cell:
    return Cell(str(x))


def _rows(per_model: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(model, condition, value) in condition-then-model order (the paper's layout)."""
    conds = sorted({c for m in per_model.values() for c in m})
    return [(model, cond, v[cond]) for cond in conds for model, v in per_model.items() if cond in v]


# --- Table 3 -------------------------------------------------------------------------------------


def results_table(metrics: dict[str, Any], title: str = "") -> ReportTable:
    """Table 3: the six quantities per model and condition."""
    head = ["model", "condition"] + [m.title + (" (descriptive)" if not m.scored else " ↑" if m.higher_is_better
                                                else " ↓") for m in METRICS.values()]
    best = {c: best_per_column(metrics, c) for c in {c for m in metrics.values() for c in m}}
    rows = [[_c(model), _c(cond)] + [_q(qs[name], best=model in best[cond][name]) for name in METRICS]
            for model, cond, qs in _rows(metrics)]
    return ReportTable("table3", "Table 3: results per model and condition" + (f" · {title}" if title else ""),
                       "Each quantity on its own denominator (no aggregate score). Answering-window yield only with "
                       ">= 30 eligible events. ★ best in its condition, only on the four scored capabilities (response "
                       "presence and window response are descriptive).", head, rows)


# --- the other tables ---------------------------------------------------------------------------------


def paired_table(a: dict[str, Any]) -> ReportTable:
    rows = [[_c(model), _c(r["n_pairs"]), _c(r["both"]), _c(r["explicit_only"]), _c(r["implicit_only"]),
             _c(r["neither"]), Cell(pct(r["explicit_rate"])), Cell(pct(r["implicit_rate"])), Cell(pp(r["diff_pp"])),
             Cell(p_text(r["p_mcnemar"], r.get("log10_p_mcnemar")))]
            for model, r in a.get("paired_addressing", {}).items()]
    return ReportTable("table16", "Table 16: explicit vs implicit addressing, response presence over complete pairs",
                       "Exact two-sided McNemar on the discordant pairs.",
                       ["model", "pairs", "both", "explicit only", "implicit only", "neither", "explicit",
                        "implicit", "difference", "exact McNemar p"], rows, keys=1)


def t_partition_table(a: dict[str, Any]) -> ReportTable:
    rows = [[_c(model), _c(cond), _c(r["n"])] + [share(r[k], r["n"]) for k in T_STATES]
            for model, cond, r in _rows(a.get("t_partition", {}))]
    return ReportTable("table9", "Table 9: partition of T by onset",
                       "fresh: nothing active at the end of T and an onset within 5 s; already active: speech "
                       "running at the end of T; none: no response. Shares of all T.",
                       ["model", "condition", "T"] + [T_STATE_TITLES[k] for k in T_STATES], rows)


def silence_stage_table(a: dict[str, Any]) -> ReportTable:
    found = _rows(a.get("silence_stages", {}))
    # a text reference's own stage only where one is reported
    stages = [k for k in SILENCE_STAGES if k != "responded" or any(r["stages"].get(k) for _, _, r in found)]
    rows = [[_c(model), _c(cond), _c(r["n"])] + [share(r["stages"].get(k, 0), r["n"]) for k in stages]
            + [share(r["passed"], r["n"])] for model, cond, r in found]
    return ReportTable("table10", "Table 10: N1-N3 silence windows by deciding stage",
                       "No speech passes; judged windows pass only as a backchannel; an empty transcript or a "
                       "reply without a verdict fails; without ASR any speech fails; a text reference's RESPOND "
                       "(or unparseable decision) fails. Shares of all windows.",
                       ["model", "condition", "windows"] + [STAGE_TITLES[k] for k in stages] + ["passed"], rows)


def n4_tables(a: dict[str, Any], metrics: dict[str, Any]) -> list[ReportTable]:
    """Table 14 (onset categories and eligibility, one table as in the paper) and Table 15."""
    rows = _rows(a.get("n4_breakdown", {}))
    cats = [[_c(model), _c(cond), _c(r["n"]), share(r["window_response"], r["n"])]
            + [share(r["categories"][c], r["n"]) for c in N4_CATEGORIES]
            + [share(r["eligible"], r["n"]), share(r["eligible"], r["categories"]["fresh_onset"])]
            for model, cond, r in rows]
    outs = [[_c(model), _c(cond), _c(r["eligible"])] + [share(r["outcomes"][o], r["eligible"]) for o in N4_OUTCOMES]
            + [_q(metrics[model][cond]["window_yield"]), _c(r["censored"])] for model, cond, r in rows]
    return [
        ReportTable("table14", "Table 14: N4 events by onset category, and eligibility for the yield",
                    "Window response: speech in [start of N4Q, end of N4Q + 3 s]. Eligible: a fresh onset after "
                    "N4Q and still speaking at t_R (the start of N4R). Shares of all N4 events (last column: of "
                    "the fresh onsets).",
                    ["model", "condition", "N4 events", "window response"]
                    + [CATEGORY_TITLES[c] for c in N4_CATEGORIES]
                    + ["eligible (of events)", "eligible (of fresh onsets)"], cats),
        ReportTable("table15", "Table 15: stopping outcomes of eligible N4 events",
                    "pass: silent at t_R + 2 s and until t_E; still voicing: speaking at t_R + 2 s; resumed: "
                    "speech again before t_E. Yield reported only with >= 30 eligible events; censored: the "
                    "recording ends before the deadline.",
                    ["model", "condition", "eligible"] + [OUTCOME_TITLES[o] for o in N4_OUTCOMES]
                    + ["answering-window yield", "censored"], outs),
    ]


def sweep_table(a: dict[str, Any], metrics: dict[str, Any]) -> ReportTable:
    sw = a.get("silence_sweep", {})
    rows = [[_c(model), _c(cond)] + [share(p["num"], p["den"]) for p in pts]
            + [_q(metrics[model][cond]["silence_preservation"])]
            for model, cond, pts in _rows(sw.get("values", {}))]
    return ReportTable("table12", "Table 12: duration-only silence sweep",
                       "A window passes when the model's speech in it lasts at most the threshold; no semantic "
                       "exemption. Last column: silence preservation as scored. Text references have no speech "
                       "durations and are not in this table.",
                       ["model", "condition"] + [f"≤ {t} ms" for t in sw.get("thresholds_ms", [])]
                       + ["scored"], rows)


def tertile_table(a: dict[str, Any]) -> ReportTable:
    tt = a.get("request_time_tertiles", {})
    rows, note = [], tt.get("note", "")
    if tt.get("boundaries_s"):
        q1, q2 = tt["boundaries_s"]
        note = (f"Request time = first human turn to the start of T (input timing only): early ≤ {q1:.2f} s "
                f"< middle ≤ {q2:.2f} s < late. Accuracy over answered T.")
        for model, cond, g in _rows(tt.get("groups", {})):
            row = [_c(model), _c(cond)]
            for b in TERTILES:
                x = g[b]
                row += [_c(x["n"]), share(x["fresh"], x["n"]), share(x["present"], x["n"]),
                        share(x["correct"], x["judged"])]
            rows.append(row)
    head = ["model", "condition"] + [f"{b}: {h}" for b in TERTILES for h in ("T", "fresh onset", "presence",
                                                                           "accuracy")]
    return ReportTable("table13", "Table 13: request-time tertiles", note, head, rows,
                       empty=tt.get("note", "not available"))


def response_tables(a: dict[str, Any]) -> list[ReportTable]:
    rd = a.get("response_decisions", {})
    labels = rd.get("labels", [])
    rows = [[_c(model), _c(cond)] + [share(r[lab]["responded"], r[lab]["n"]) for lab in labels]
            for model, cond, r in _rows(rd.get("by_label", {}))]
    out = [ReportTable("response-decisions", f"{EXTRA}: response decision by label",
                       "Responded: T with a response present; N1-N3 with speech that was not a backchannel (the "
                       "window failed); N4Q with a window response. Shares of the windows of each type.",
                       ["model", "condition"] + labels, rows)]
    rows = []
    if rd.get("addressees_given"):
        for model, cond, r in _rows(rd.get("by_addressee", {})):
            for lab in labels:
                for kind, x in r[lab].items():
                    rows.append([_c(model), _c(cond), _c(lab), _c(ADDRESSEE_TITLES.get(kind, kind)),
                                 share(x["spoke"], x["n"]), share(x["responded"], x["n"])])
    out.append(ReportTable("response-decisions-addressee", f"{EXTRA}: response decision by label "
                           "and addressee", "Addressees from the manifest; spoke: any detected speech.",
                           ["model", "condition", "type", "addressee", "spoke", "responded"], rows,
                           empty="the manifest gives no addressees", keys=4))
    return out


def pairwise_table(a: dict[str, Any]) -> ReportTable:
    pw = a.get("pairwise", {})
    rows = []
    for t in pw.get("tests", []):
        ci = t.get("ci_diff_pp")
        rows.append([_c(t["condition"]), _c(t["model_a"]), _c(t["model_b"]), _c(TASK_TITLES.get(t["task"], t["task"])),
                     _c(t["n_shared"]), _c(f"{t['a_only']} / {t['b_only']}"), Cell(pct(t["rate_a"])),
                     Cell(pct(t["rate_b"])), Cell(pp(t["diff_pp"])),
                     Cell("–" if not ci else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"), Cell(p_text(t["p"], t.get("log10_p"))),
                     Cell(p_text(t["p_bonferroni"], t.get("log10_p_bonferroni")), strong=t["p_bonferroni"] < 0.05),
                     _c(t["m"])])
    fams = ", ".join(f"{c}: m = {f['m']}" for c, f in pw.get("families", {}).items())
    return ReportTable("table21", "Table 21: pairwise model comparisons",
                       "Exact McNemar on the silence windows both models share and on the T requests both answered; "
                       f"Bonferroni within each condition's family of model pairs x two metrics ({fams or 'none'}); "
                       "bold: corrected p < 0.05. CI: 95% scenario bootstrap of A − B.",
                       ["condition", "model A", "model B", "metric", "shared", "A only / B only", "A", "B", "A − B",
                        "95% CI", "p", "p (Bonferroni)", "m"], rows, empty="needs at least two models", keys=4)


def ranking_table(a: dict[str, Any]) -> ReportTable:
    rc = a.get("ranking_correlation", {})
    items = [("pooled (both conditions)", rc["pooled"])] if "pooled" in rc else []
    items += list(rc.get("per_condition", {}).items())
    rows = [[_c(name), _c(r["n"]), Cell("–" if r["rho"] is None else f"{r['rho']:.3f}"), Cell(p_text(r["p"])),
             _c(r.get("note", ""))] for name, r in items]
    return ReportTable("ranking", f"{EXTRA}: fresh-onset vs presence rankings (Spearman; the paper gives it in its text)",
                       "Pooled as in the paper: each model's explicit and implicit results are entries (ten for five "
                       "models); per condition as an extra.", ["entries", "n", "Spearman ρ", "p", "note"], rows,
                       keys=1)


def breakdown_tables(a: dict[str, Any]) -> list[ReportTable]:
    b = a.get("breakdowns", {})
    out = []
    for key, title in (("t_bucket", "By T position bucket"), ("n_speakers", "By speaker count")):
        part = b.get(key, {})
        rows = [[_c(model), _c(cond), _c(g)] + [_q(g_qs[name]) for name in METRICS]
                for model, cond, per in _rows(part.get("values", {})) for g, g_qs in per.items()]
        out.append(ReportTable(f"by-{key}", f"{EXTRA}: {title.lower()}", "The six quantities within each group.",
                               ["model", "condition", key.replace("_", " ")] + [m.title for m in METRICS.values()],
                               rows, keys=3))
    return out


def n_label_table(a: dict[str, Any]) -> ReportTable:
    """Table 18: silence preservation of the N1, N2 and N3 windows apart."""
    part = a.get("breakdowns", {}).get("n_label", {})
    rows = [[_c(model), _c(cond)] + [_q(per[lab]) for lab in part.get("groups", [])]
            for model, cond, per in _rows(part.get("values", {}))]
    return ReportTable("table18", "Table 18: silence preservation by N label", "",
                       ["model", "condition"] + part.get("groups", []), rows)


def failure_type_table(a: dict[str, Any]) -> ReportTable:
    """Table 19: the failed N1-N3 windows by utterance type."""
    part = a.get("silence_failures_by_type", {})
    types = part.get("types", [])
    rows = []
    for model, cond, r in _rows(part.get("values", {})):
        if not r["recorded"]:
            rows.append([_c(model), _c(cond), Cell("not recorded", r["note"].removeprefix("not recorded: "))]
                        + [Cell("–") for _ in types])
            continue
        rows.append([_c(model), _c(cond), share(r["failed"], r["n"])]
                    + [Cell(share(x["failed"], r["failed"]).text, f"{x['failed']}/{r['failed']}; {x['n']} windows")
                       for x in (r["types"][k] for k in types)])
    return ReportTable("table19", "Table 19: silence failures by utterance type",
                       "Failed N1-N3 windows grouped by the turn's utterance type in the manifest: each type's share "
                       "of all failures (failures of the type / all failures; the type's windows). Not recorded where "
                       "the suite's manifest gives no utterance types (never guessed).",
                       ["model", "condition", "failed windows"] + [TYPE_TITLES.get(k, k) for k in types], rows,
                       empty="no silence windows")


def _measured(v: dict[str, Any]) -> Cell:
    """A share, or "not measured" with its reason."""
    if v.get("den") is None:
        return Cell("not measured", v.get("note", "").removeprefix("not measured: "))
    return _q(v)


def reference_tables(ref: dict[str, Any]) -> list[ReportTable]:
    """Tables 17 and 18 of the text references (``mpe reference``), apart from the speech models."""
    if not ref:
        return []
    metrics, diag = ref.get("metrics", {}), ref.get("n4q_addressee", {})
    rows = [[_c(model), _c(cond)] + [_q(qs[k]) for k in ("response_presence", "answer_accuracy",
                                                          "silence_preservation", "window_response")]
            + [_measured(qs["fresh_onset_rate"]), _measured(diag.get(model, {}).get(cond, {}))]
            for model, cond, qs in _rows(metrics)]
    t17 = ReportTable("table17", "Table 17: text references (decided on the script)",
                      "Reported apart: never in the speech models' tables, test families or ranking pools. Fresh "
                      "onset is not measured (a decision has no onset time). N4 Q addressee diagnostic: of the N4 "
                      "questions addressed to Aria, the share the reference responded to.",
                      ["model", "condition", "response presence", "answer accuracy", "silence preservation",
                       "window response", "fresh onset", "N4 Q addressed to Aria: responded"], rows)
    part = ref.get("n_label", {})
    rows = [[_c(model), _c(cond)] + [_q(per[lab]) for lab in part.get("groups", [])]
            for model, cond, per in _rows(part.get("values", {}))]
    t18 = ReportTable("table18-reference", "Table 18: silence preservation by N label · text references", "",
                      ["model", "condition"] + part.get("groups", []), rows)
    return [t17, t18]


def report_tables(metrics: dict[str, Any], analyses: dict[str, Any],
                  reference: dict[str, Any] | None = None) -> list[ReportTable]:
    """Every table of the report, in the paper's order, then the extras; text references apart."""
    a = analyses
    t14, t15 = n4_tables(a, metrics)
    t17_18 = reference_tables(reference or {})
    return [results_table(metrics), t_partition_table(a), silence_stage_table(a), sweep_table(a, metrics),
            tertile_table(a), t14, t15, paired_table(a), *t17_18[:1], n_label_table(a), *t17_18[1:],
            failure_type_table(a), pairwise_table(a), *response_tables(a), ranking_table(a), *breakdown_tables(a)]
