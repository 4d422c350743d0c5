"""Run-level MTR quantities (DESIGN §12.4): success and latency per feature, per round 1…R,
Round 1 vs the mean over rounds, and per feature set (``set:NAME`` with its rounds, mean over
rounds and latency: the paper's headline and ablation tables read these, :func:`headline`,
:func:`ablation`); ``metrics[model][mode][quantity] =
{"num", "den", "value"}`` like every benchmark's metrics. An excluded round (a recording whose
parts were moved, :func:`counted`) is left out of these and counted in ``FEATURE.excluded``.

The dimensions (§12.5), each over the rounds its verdict exists for (unparseable and unjudged
rounds left out, and counted in ``DIM.unparseable``): ``quality`` (the mean 0–5 score),
``instruction`` (the share attempted), ``correct`` (the share correct, rounds with reference
answers), ``safety`` (the safe rate on harmful requests), ``safety.benign`` (on the benign
controls); each also per round (``.rNN``), as the mean over rounds (``.mean_rounds``) and per
delivery (``.normal``, ``.interruption``, with their rounds)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from server.benchmarks.mtr.dataset.sets import COMBINATIONS
from server.benchmarks.mtr.dimensions import DimensionScore
from server.benchmarks.mtr.entry import MTREpisodeScore, RoundScore
from server.benchmarks.mtr.suite import DELIVERIES, FEATURES
from server.core.benchmark import Quantity


def _q(num: float, den: int) -> dict[str, Any]:
    return {"num": round(num, 6) if isinstance(num, float) else num, "den": den,
            "value": None if den == 0 else round(num / den, 6)}


def rounds_of(entries: Sequence[MTREpisodeScore]) -> list[tuple[MTREpisodeScore, RoundScore]]:
    """Every scored live round with its episode."""
    return [(e, r) for e in entries for r in e.rounds]


def counted(items: Sequence[tuple[MTREpisodeScore, RoundScore]]) -> list[tuple[MTREpisodeScore, RoundScore]]:
    """The rounds the feature scores count: all but the excluded ones (:attr:`RoundScore.excluded`)."""
    return [(e, r) for e, r in items if r.excluded is None]


def quantities(items: Sequence[tuple[MTREpisodeScore, RoundScore]]) -> dict[str, dict[str, Any]]:
    """One model × mode's quantities from its scored rounds."""
    out: dict[str, dict[str, Any]] = {}
    by_feature: dict[str, list[tuple[MTREpisodeScore, RoundScore]]] = defaultdict(list)
    for e, r in counted(items):
        for f in r.carried():  # an overlay round counts under each feature it carries, with that verdict
            by_feature[f].append((e, r))
    for f in FEATURES:
        left_out = sum(r.excluded is not None for _, r in items if f in r.carried())
        if left_out:
            out[f"{f}.excluded"] = _q(left_out, sum(f in r.carried() for _, r in items))
        rows = by_feature.get(f, [])
        if not rows:
            continue
        out[f] = _q(sum(r.ok_for(f) for _, r in rows), len(rows))
        lat = [r.latency_s for _, r in rows if r.latency_s is not None]
        out[f"{f}.latency_s"] = _q(float(sum(lat)), len(lat))
        per_round: dict[int, list[RoundScore]] = defaultdict(list)
        for _, r in rows:
            per_round[r.round].append(r)
        for k in sorted(per_round):
            out[f"{f}.r{k:02d}"] = _q(sum(r.ok_for(f) for r in per_round[k]), len(per_round[k]))
        rates = [sum(r.ok_for(f) for r in rs) / len(rs) for rs in per_round.values()]
        out[f"{f}.mean_rounds"] = _q(float(sum(rates)), len(rates))  # the paper's "mean over rounds 1-R"
        if f == "interruption":
            stops = [r.stop_latency_s for _, r in rows if r.stop_latency_s is not None]
            out[f"{f}.stop_latency_s"] = _q(float(sum(stops)), len(stops))
    project = [r for _, r in items if r.own_backchannels is not None]
    if project:
        speech_min = sum(r.user_speech_s for r in project) / 60
        own = sum(r.own_backchannels or 0 for r in project)
        out["own_backchannels_per_min"] = {"num": own, "den": round(speech_min, 6),
                                           "value": None if speech_min == 0 else round(own / speech_min, 6)}
    rates = [r.own_backchannel_rate for _, r in items if r.own_backchannel_rate is not None]
    if rates:  # the published frequency: per round (its file), averaged over the rounds
        out["own_backchannel_rate"] = _q(float(sum(rates)), len(rates))
    by_set: dict[str, list[RoundScore]] = defaultdict(list)
    for e, r in counted(items):
        by_set[e.set].append(r)
    for s, rs in sorted(by_set.items()):
        out[f"set:{s}"] = _q(sum(r.ok for r in rs), len(rs))
        set_rounds: dict[int, list[RoundScore]] = defaultdict(list)
        for r in rs:
            set_rounds[r.round].append(r)
        for k in sorted(set_rounds):
            out[f"set:{s}.r{k:02d}"] = _q(sum(r.ok for r in set_rounds[k]), len(set_rounds[k]))
        rates = [sum(r.ok for r in v) / len(v) for v in set_rounds.values()]
        out[f"set:{s}.mean_rounds"] = _q(float(sum(rates)), len(rates))
        lat = [r.latency_s for r in rs if r.latency_s is not None]
        out[f"set:{s}.latency_s"] = _q(float(sum(lat)), len(lat))
    out.update(dimension_quantities(items))
    return out


#: the headline's source of each feature: its single-feature set (the paper's feature table; its Moshi
#: smooth average is the ablation's "S only" figure). Never the rounds of the combinations pooled in.
HEADLINE_SETS: dict[str, str] = {f: f for f in FEATURES}
#: the ablation's configurations, in order: (label, set); S is the ``smooth`` set
ABLATION: tuple[tuple[str, str], ...] = (("S", "smooth"), *((c, c) for c in COMBINATIONS))
NOT_IN_SUITE = "not in this suite"


class SetFigure(BaseModel):
    """One figure of the headline (a feature) or of the ablation (a configuration), taken from one
    feature set's rounds only; ``in_suite`` False: the scored episodes have no dialogue of that set."""

    label: str = Field(description="the feature (headline) or the configuration (ablation: S, S+I, ...)")
    set: str = Field(description="the feature set the figure comes from")
    in_suite: bool
    rounds: int = Field(description="the set's counted rounds")
    round1: float | None = Field(description="success rate in round 1")
    mean_rounds: float | None = Field(description="the mean of the per-round success rates, rounds 1-R")
    latency_s: float | None = Field(description="mean latency, the user's end -> the reply's onset")


def set_figure(q: dict[str, Any], label: str, set_name: str) -> SetFigure:
    """The figure of ``set_name`` from one model x mode's quantities (its ``set:`` keys)."""
    base = f"set:{set_name}"

    def val(key: str) -> float | None:
        cell = q.get(key)
        return None if cell is None else cell["value"]

    return SetFigure(label=label, set=set_name, in_suite=base in q, rounds=q[base]["den"] if base in q else 0,
                     round1=val(f"{base}.r01"), mean_rounds=val(f"{base}.mean_rounds"),
                     latency_s=val(f"{base}.latency_s"))


def headline(q: dict[str, Any]) -> list[SetFigure]:
    """The paper's feature table for one model x mode: per feature, from its single-feature set only."""
    return [set_figure(q, f, HEADLINE_SETS[f]) for f in FEATURES]


def ablation(q: dict[str, Any]) -> list[SetFigure]:
    """The paper's feature-combination table for one model x mode: S, S+I, S+I+P, S+I+P+B."""
    return [set_figure(q, label, s) for label, s in ABLATION]


def published_tables(metrics: dict[str, Any]) -> dict[str, Any]:
    """``{"headline"|"ablation": {model: {mode: [SetFigure as a dict]}}}`` (what ``--json`` carries)."""
    return {name: {m: {mode: [c.model_dump() for c in fn(q)] for mode, q in modes.items()}
                   for m, modes in metrics.items()} for name, fn in (("headline", headline), ("ablation", ablation))}


#: the reported dimension quantities: name -> (the rounds' dimension, harmful filter, value of one round)
DIMENSION_QUANTITIES: dict[str, tuple[str, bool | None, Any]] = {
    "quality": ("quality", None, lambda d: d.quality),
    "instruction": ("instruction", None, lambda d: d.attempted),
    "correct": ("instruction", None, lambda d: d.correct),
    "safety": ("safety", True, lambda d: d.safe),
    "safety.benign": ("safety", False, lambda d: d.safe),
}


def _series(out: dict[str, Any], name: str, rows: list[tuple[int, float]]) -> None:
    """``name``, its rounds and its mean over rounds, from (round, value) pairs."""
    if not rows:
        return
    out[name] = _q(float(sum(v for _, v in rows)), len(rows))
    per_round: dict[int, list[float]] = defaultdict(list)
    for k, v in rows:
        per_round[k].append(v)
    for k in sorted(per_round):
        out[f"{name}.r{k:02d}"] = _q(float(sum(per_round[k])), len(per_round[k]))
    means = [sum(vs) / len(vs) for vs in per_round.values()]
    out[f"{name}.mean_rounds"] = _q(float(sum(means)), len(means))


def dimension_quantities(items: Sequence[tuple[MTREpisodeScore, RoundScore]]) -> dict[str, dict[str, Any]]:
    """One model × mode's dimension quantities (see the module docstring)."""
    out: dict[str, dict[str, Any]] = {}
    dims: list[tuple[int, DimensionScore]] = [(r.round, r.dimension) for _, r in items if r.dimension is not None]
    for name, (dimension, harmful, value) in DIMENSION_QUANTITIES.items():
        rows = [(k, d) for k, d in dims if d.dimension == dimension and (harmful is None or d.harmful == harmful)]
        _series(out, name, [(k, float(value(d))) for k, d in rows if value(d) is not None])
        for delivery in DELIVERIES:
            _series(out, f"{name}.{delivery}", [(k, float(value(d))) for k, d in rows
                                                if d.delivery == delivery and value(d) is not None])
    for dimension in ("quality", "instruction", "safety"):
        rows = [d for _, d in dims if d.dimension == dimension and d.reason != "no_asr"]
        if rows:
            out[f"{dimension}.unparseable"] = _q(sum(d.reason == "unparseable" for d in rows), len(rows))
    return out


def compute_metrics(entries: Sequence[MTREpisodeScore]) -> dict[str, Any]:
    groups: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for e, r in rounds_of(entries):
        groups[e.model][e.mode].append((e, r))
    return {m: {mode: quantities(items) for mode, items in sorted(modes.items())} for m, modes in sorted(groups.items())}


def _quantities() -> tuple[Quantity, ...]:
    """The registry (``Benchmark.quantities``) of the quantities with a name of their own; the
    per-round (``.rNN``), per-set (``set:``) and bookkeeping (``.excluded``, ``.unparseable``) keys
    are read by their base quantity."""
    out: list[Quantity] = []
    for f in FEATURES:
        out += [Quantity(key=f, title=f"{f} success", short_title=f, description="passing live rounds / all",
                         direction="higher", scored=True, unit="rounds", format="percent"),
                Quantity(key=f"{f}.mean_rounds", title=f"{f} success, mean over rounds 1–R", short_title=f"{f} mean",
                         description="the mean of the per-round success rates", direction="higher", scored=True,
                         unit="rounds", format="percent"),
                Quantity(key=f"{f}.latency_s", title=f"{f} latency", short_title=f"{f} latency",
                         description="the user's end (published rules, interruption: the barge-in's end) -> the "
                         "reply's onset, mean", direction="lower", scored=True,
                         unit="replies", format="seconds")]
    out.append(Quantity(key="interruption.stop_latency_s", title="interruption stop latency",
                        short_title="stop latency", description="the barge-in's start -> the audible stop, mean",
                        direction="lower", scored=True, unit="interrupted replies", format="seconds"))
    out.append(Quantity(key="own_backchannels_per_min", title="own backchannels per minute",
                        short_title="own backchannels", description="the model's short segments over the user's "
                        "speech, per minute of it", direction=None, scored=False, unit="minutes", format="number"))
    out.append(Quantity(key="own_backchannel_rate", title="own backchannel frequency (published)",
                        short_title="own backchannel rate", description="the model's segments under 3 s of at most "
                        "2 words per second of its speech over the round's track, mean over rounds (--rules "
                        "published)", direction=None, scored=False, unit="rounds", format="number"))
    titles = {"quality": ("quality (0–5)", "the mean quality score", "score"),
              "instruction": ("instruction following", "attempted / judged", "percent"),
              "correct": ("correct", "correct / judged, rounds with reference answers", "percent"),
              "safety": ("safe (harmful requests)", "safe / judged harmful requests", "percent"),
              "safety.benign": ("safe (benign controls)", "safe / judged benign controls", "percent")}
    for name in DIMENSION_QUANTITIES:
        title, description, fmt = titles[name]
        out.append(Quantity(key=name, title=title, short_title=name, description=description, direction="higher",
                            scored=True, unit="judged rounds", format=fmt))
    return tuple(out)


QUANTITIES: tuple[Quantity, ...] = _quantities()
