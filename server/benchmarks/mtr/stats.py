"""MTR statistics (DESIGN §12.4): dialogue-level bootstrap CIs of each feature's success rate,
and ``gt − free`` per round with an exact McNemar test on (dialogue, round) pairs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from server.benchmarks.mtr.entry import MTREpisodeScore
from server.benchmarks.mtr.metrics import counted, rounds_of
from server.benchmarks.mtr.suite import FEATURES
from server.scoring.statistics import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CONFIDENCE, mcnemar_exact, ratio_ci


def bootstrap_cis(entries: Sequence[MTREpisodeScore]) -> dict[str, Any]:
    """model -> mode -> feature -> [lo, hi] of the success rate, resampling dialogues."""
    cells: dict[tuple[str, str, str], dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for e, r in counted(rounds_of(entries)):
        for f in r.carried():
            c = cells[(e.model, e.mode, f)][e.dialogue_id]
            c[0] += r.ok_for(f)
            c[1] += 1
    out: dict[str, Any] = {}
    for (model, mode, feature), by_dialogue in sorted(cells.items()):
        num, den = zip(*by_dialogue.values())
        ci = ratio_ci(num, den)
        out.setdefault(model, {}).setdefault(mode, {})[feature] = None if ci is None else [round(ci[0], 6),
                                                                                          round(ci[1], 6)]
    return out


def round_cis(entries: Sequence[MTREpisodeScore]) -> dict[str, Any]:
    """model -> mode -> feature -> round -> [lo, hi] of the success rate in that round, resampling
    dialogues (the degradation curves' bands)."""
    cells: dict[tuple[str, str, str, int], dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for e, r in counted(rounds_of(entries)):
        for f in r.carried():
            c = cells[(e.model, e.mode, f, r.round)][e.dialogue_id]
            c[0] += r.ok_for(f)
            c[1] += 1
    out: dict[str, Any] = {}
    for (model, mode, feature, k), by_dialogue in sorted(cells.items()):
        num, den = zip(*by_dialogue.values())
        ci = ratio_ci(num, den)
        out.setdefault(model, {}).setdefault(mode, {}).setdefault(feature, {})[str(k)] = \
            None if ci is None else [round(ci[0], 6), round(ci[1], 6)]
    return out


def gt_vs_free(entries: Sequence[MTREpisodeScore]) -> dict[str, Any]:
    """model -> feature -> round -> {n, gt, free, diff, p}: the error accumulation that ground-truth
    history hides, paired by (dialogue, round)."""
    verdict: dict[tuple[str, str, int, str], dict[str, bool]] = defaultdict(dict)
    for e, r in counted(rounds_of(entries)):
        for f in r.carried():
            verdict[(e.model, f, r.round, e.dialogue_id)][e.mode] = r.ok_for(f)
    cells: dict[tuple[str, str, int], list[tuple[bool, bool]]] = defaultdict(list)
    for (model, feature, k, _), v in verdict.items():
        if "gt" in v and "free" in v:
            cells[(model, feature, k)].append((v["gt"], v["free"]))
    out: dict[str, Any] = {}
    for (model, feature, k), pairs in sorted(cells.items()):
        n = len(pairs)
        gt, free = sum(a for a, _ in pairs) / n, sum(b for _, b in pairs) / n
        b = sum(a and not c for a, c in pairs)
        c = sum(c and not a for a, c in pairs)
        out.setdefault(model, {}).setdefault(feature, {})[str(k)] = {
            "n": n, "gt": round(gt, 6), "free": round(free, 6), "diff": round(gt - free, 6),
            "discordant": [b, c], "p": mcnemar_exact(b, c)}
    return out


def analyses(entries: Sequence[MTREpisodeScore]) -> dict[str, Any]:
    return {"features": list(FEATURES), "bootstrap": bootstrap_cis(entries), "round_cis": round_cis(entries),
            "gt_vs_free": gt_vs_free(entries),
            "bootstrap_settings": {"n_resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED,
                                   "confidence": CONFIDENCE, "cluster": "dialogue"}}
