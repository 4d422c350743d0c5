"""Run-level MTR quantities (DESIGN §12.4): success and latency per feature, per round 1…R,
Round 1 vs the mean over rounds, and per feature set; ``metrics[model][mode][quantity] =
{"num", "den", "value"}`` like every benchmark's metrics."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from server.benchmarks.mtr.entry import MTREpisodeScore, RoundScore
from server.benchmarks.mtr.suite import FEATURES


def _q(num: float, den: int) -> dict[str, Any]:
    return {"num": round(num, 6) if isinstance(num, float) else num, "den": den,
            "value": None if den == 0 else round(num / den, 6)}


def rounds_of(entries: Sequence[MTREpisodeScore]) -> list[tuple[MTREpisodeScore, RoundScore]]:
    """Every scored live round with its episode."""
    return [(e, r) for e in entries for r in e.rounds]


def quantities(items: Sequence[tuple[MTREpisodeScore, RoundScore]]) -> dict[str, dict[str, Any]]:
    """One model × mode's quantities from its scored rounds."""
    out: dict[str, dict[str, Any]] = {}
    by_feature: dict[str, list[tuple[MTREpisodeScore, RoundScore]]] = defaultdict(list)
    for e, r in items:
        by_feature[r.feature].append((e, r))
    for f in FEATURES:
        rows = by_feature.get(f, [])
        if not rows:
            continue
        out[f] = _q(sum(r.ok for _, r in rows), len(rows))
        lat = [r.latency_s for _, r in rows if r.latency_s is not None]
        out[f"{f}.latency_s"] = _q(float(sum(lat)), len(lat))
        per_round: dict[int, list[RoundScore]] = defaultdict(list)
        for _, r in rows:
            per_round[r.round].append(r)
        for k in sorted(per_round):
            out[f"{f}.r{k:02d}"] = _q(sum(r.ok for r in per_round[k]), len(per_round[k]))
        rates = [sum(r.ok for r in rs) / len(rs) for rs in per_round.values()]
        out[f"{f}.mean_rounds"] = _q(float(sum(rates)), len(rates))  # the paper's "mean over rounds 1-R"
        if f == "interruption":
            stops = [r.stop_latency_s for _, r in rows if r.stop_latency_s is not None]
            out[f"{f}.stop_latency_s"] = _q(float(sum(stops)), len(stops))
    speech_min = sum(r.user_speech_s for _, r in items) / 60
    own = sum(r.own_backchannels for _, r in items)
    out["own_backchannels_per_min"] = {"num": own, "den": round(speech_min, 6),
                                       "value": None if speech_min == 0 else round(own / speech_min, 6)}
    by_set: dict[str, list[RoundScore]] = defaultdict(list)
    for e, r in items:
        by_set[e.set].append(r)
    for s, rs in sorted(by_set.items()):
        out[f"set:{s}"] = _q(sum(r.ok for r in rs), len(rs))
    return out


def compute_metrics(entries: Sequence[MTREpisodeScore]) -> dict[str, Any]:
    groups: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for e, r in rounds_of(entries):
        groups[e.model][e.mode].append((e, r))
    return {m: {mode: quantities(items) for mode, items in sorted(modes.items())} for m, modes in sorted(groups.items())}
