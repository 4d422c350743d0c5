"""The six run-level quantities of §6 as small registered functions, reduced per model and
condition. Each returns ``(numerator, denominator)`` over a list of scoring entries;
there is no aggregate score (each quantity stands on its own denominator).

Five are scores with a direction. Window response is descriptive: speech after an N4Q is
neither asked for nor forbidden (N4Q is addressed to Aria and then answered by someone
else); it only says how many events can be eligible for the yield. So no best is marked
for it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from server.benchmarks.mpe.entry import EpisodeScore
from server.core.benchmark import Quantity


@dataclass(frozen=True)
class Metric:
    name: str
    title: str
    higher_is_better: bool
    fn: Callable[[list[EpisodeScore]], tuple[int, int]]
    min_den: int = 1  # below this denominator the value is reported as null
    unit: str = "episodes"
    scored: bool = True  # false: descriptive, no best is marked
    long_title: str = ""  # its name on the pages (default: ``title``)
    description: str = ""  # numerator / denominator, in words

    def quantity(self) -> Quantity:
        """The quantity as the registry (``Benchmark.quantities``) lists it for pages and reports."""
        return Quantity(key=self.name, title=self.long_title or self.title, short_title=self.title,
                        description=self.description, unit=self.unit, format="percent", scored=self.scored,
                        direction=None if not self.scored else "higher" if self.higher_is_better else "lower")


METRICS: dict[str, Metric] = {}


def metric(name: str, title: str, *, higher_is_better: bool = True, min_den: int = 1, unit: str = "episodes",
           scored: bool = True, long_title: str = "", description: str = ""):
    def deco(fn):
        METRICS[name] = Metric(name, title, higher_is_better, fn, min_den, unit, scored, long_title, description)
        return fn

    return deco


@metric("fresh_onset_rate", "Fresh onset", unit="T requests", long_title="Fresh-onset response rate",
        description="fresh / all T")
def fresh_onset_rate(eps: list[EpisodeScore]) -> tuple[int, int]:
    """§6: fresh / all T; not measured for a text reference (a decision on the script has no onset
    time), whose T do not count: a reference run's rate has no denominator."""
    speech = [e for e in eps if e.text_reference is None]
    return sum(e.t.fresh for e in speech), len(speech)


# Descriptive, as in the paper: presence counts speech already running at the end of T, which is
# no capability of its own; the four scored capabilities are fresh onset, accuracy, silence and yield.
@metric("response_presence", "Response presence", unit="T requests", scored=False, description="present / all T")
def response_presence(eps: list[EpisodeScore]) -> tuple[int, int]:
    """§6: present / all T."""
    return sum(e.t.present for e in eps), len(eps)


@metric("answer_accuracy", "Answer accuracy", unit="answered T", long_title="Conditional answer accuracy",
        description="correct / present")
def answer_accuracy(eps: list[EpisodeScore]) -> tuple[int, int]:
    """§6: correct / present (empty transcript or unparseable verdict = incorrect).
    Without ASR (duration-only scoring) nothing is judged and the denominator is 0."""
    judged = [e for e in eps if e.t.present and e.t.correct is not None]
    return sum(bool(e.t.correct) for e in judged), len(judged)


@metric("silence_preservation", "Silence preservation", unit="N1-N3 windows",
        description="passing N1–N3 windows / all")
def silence_preservation(eps: list[EpisodeScore]) -> tuple[int, int]:
    """§6: passing N1-N3 windows / all of them."""
    ws = [w for e in eps for w in e.silence_windows]
    return sum(w.passed for w in ws), len(ws)


@metric("window_response", "Window response", unit="N4 events", scored=False, long_title="Window response (N4)",
        description="N4 windows with speech / all N4")
def window_response(eps: list[EpisodeScore]) -> tuple[int, int]:
    """§6: N4 windows with speech / all N4."""
    ev = [n for e in eps for n in e.n4]
    return sum(n.window_response for n in ev), len(ev)


@metric("window_yield", "Answering-window yield", min_den=30, unit="eligible N4 events",
        long_title="Answering-window yield (N4)", description="passes / eligible (shown from 30 eligible)")
def window_yield(eps: list[EpisodeScore]) -> tuple[int, int]:
    """§6: passes / eligible; reported only with >= 30 eligible events."""
    ev = [n for e in eps for n in e.n4 if n.eligible]
    return sum(n.outcome == "pass" for n in ev), len(ev)


def value(m: Metric, num: int, den: int) -> float | None:
    return num / den if den >= max(1, m.min_den) else None


def group(entries: Iterable[EpisodeScore]) -> dict[str, dict[str, list[EpisodeScore]]]:
    """model -> condition -> entries (insertion order kept, conditions sorted)."""
    out: dict[str, dict[str, list[EpisodeScore]]] = defaultdict(lambda: defaultdict(list))
    for e in entries:
        out[e.model][e.condition].append(e)
    return {m: {c: out[m][c] for c in sorted(out[m])} for m in out}


def compute_metrics(entries: Iterable[EpisodeScore]) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """``metrics[model][condition][quantity] = {"num", "den", "value"}``."""
    result: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for model, conds in group(entries).items():
        result[model] = {}
        for cond, eps in conds.items():
            result[model][cond] = {}
            for m in METRICS.values():
                num, den = m.fn(eps)
                result[model][cond][m.name] = {"num": num, "den": den, "value": value(m, num, den)}
    return result


def best_per_column(metrics: dict[str, dict[str, dict[str, dict[str, Any]]]], condition: str) -> dict[str, set[str]]:
    """quantity -> models with the best value in ``condition`` (by each metric's direction);
    descriptive quantities have none."""
    best: dict[str, set[str]] = {}
    for name, m in METRICS.items():
        if not m.scored:
            best[name] = set()
            continue
        vals = {model: conds[condition][name]["value"] for model, conds in metrics.items()
                if condition in conds and conds[condition][name]["value"] is not None}
        if len(vals) < 2:
            best[name] = set()
            continue
        top = max(vals.values()) if m.higher_is_better else min(vals.values())
        best[name] = {k for k, v in vals.items() if abs(v - top) < 1e-12}
        if len(best[name]) == len(vals):  # a tie of everyone marks nobody
            best[name] = set()
    return best


#: the registry of the six quantities (``Benchmark.quantities``), in the order they are shown
QUANTITIES: tuple[Quantity, ...] = tuple(m.quantity() for m in METRICS.values())
