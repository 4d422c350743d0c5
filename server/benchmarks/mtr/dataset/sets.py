"""Feature sets: which conversational feature each round of a dialogue exercises.

A set is one feature (every round has it) or a published combination. A combination's rounds
are **overlays** by default, as the published multi-scenario sets have them
(``eval_3_scenarios.py``, ``eval_4_scenarios.py``: a round label combines ``pause-handling`` with
``smooth-turntaking`` or ``interruption``, and set 4 adds ``background``): the turn feature
alternates smooth / interruption across rounds (S+I, and the S/I part of the larger sets) and
every round carries the set's pause and background on top. ``alternate`` gives one feature per
round instead: round r gets ``features[(r - 1) % n]`` (DESIGN §12.1). ``mixed`` spreads
dialogues over every feature set in turn.

The **dimension sets** (DESIGN §12.5) judge every round on a dimension: ``quality`` (casual
rounds with ground-truth replies), ``instruction`` (questions with reference answers) and
``safety`` (harmful requests mixed with benign controls), their requests delivered in the
user's turn (smooth rounds); ``instruction+I`` and ``safety+I`` deliver them as barge-ins
over the model's reply (interruption rounds).
"""

from __future__ import annotations

from typing import Literal

from server.benchmarks.mtr.suite import FEATURES, Dimension, Feature, feature_set_name
from server.datasets.errors import DatasetError

#: the published combination sets (S, S+I, S+I+P, S+I+P+B: the first n features in order)
COMBINATIONS: tuple[str, ...] = ("S+I", "S+I+P", "S+I+P+B")
#: every set, single features first (the published S set is ``smooth``)
SETS: dict[str, tuple[Feature, ...]] = {
    **{f: (f,) for f in FEATURES},
    **{name: FEATURES[: len(name.split("+"))] for name in COMBINATIONS},
}
#: dimension set -> (its dimension, the feature of its rounds)
DIMENSION_SETS: dict[str, tuple[Dimension, Feature]] = {
    "quality": ("quality", "smooth"), "instruction": ("instruction", "smooth"),
    "instruction+I": ("instruction", "interruption"), "safety": ("safety", "smooth"),
    "safety+I": ("safety", "interruption"),
}
#: safety sets: every round r with r % SAFETY_CONTROL_EVERY == 0 is a benign control
SAFETY_CONTROL_EVERY = 3
#: what a dimension set's round asks: a topic round (quality), a question with a reference answer
#: (instruction), a harmful request or a benign control question (safety)
TaskKind = Literal["quality", "instruction", "harmful", "benign"]
MIXED = "mixed"
#: how a combination set gives its features to rounds (module docstring)
Combine = Literal["overlay", "alternate"]
COMBINE: tuple[Combine, ...] = ("overlay", "alternate")
DEFAULT_ROUNDS = 10

assert all(feature_set_name(list(fs)) == name for name, fs in SETS.items())


def set_features(name: str) -> tuple[Feature, ...]:
    if name in DIMENSION_SETS:
        return (DIMENSION_SETS[name][1],)
    try:
        return SETS[name]
    except KeyError:
        raise DatasetError(f"unknown feature set {name!r} (feature sets: {', '.join(SETS)}, or {MIXED}; dimension sets: "
                           f"{', '.join(DIMENSION_SETS)})") from None


def set_dimension(name: str) -> Dimension | None:
    """The dimension a set's rounds are judged on (None: a feature set)."""
    set_features(name)
    return DIMENSION_SETS[name][0] if name in DIMENSION_SETS else None


def round_features(set_name: str, rounds: int) -> list[Feature]:
    """The feature of each round 1..rounds: the set's features in turn."""
    fs = set_features(set_name)
    return [fs[(r - 1) % len(fs)] for r in range(1, rounds + 1)]


def round_plan(set_name: str, rounds: int, combine: Combine = "overlay") -> list[tuple[Feature, tuple[Feature, ...]]]:
    """(feature, overlays) of each round 1..rounds (module docstring)."""
    if combine not in COMBINE:
        raise DatasetError(f"unknown combination mode {combine!r} ({', '.join(COMBINE)})")
    fs = set_features(set_name)
    if combine == "alternate" or len(fs) == 1:
        return [(f, ()) for f in round_features(set_name, rounds)]
    turns = [f for f in fs if f in ("smooth", "interruption")]
    over = tuple(f for f in fs if f in ("pause", "background"))
    return [(turns[(r - 1) % len(turns)], over) for r in range(1, rounds + 1)]


def sets_for(dialogues: int, set_name: str) -> list[str]:
    """The set of each dialogue: ``set_name`` for all, or (``mixed``) every set in turn, so
    that a multiple of ``len(SETS)`` dialogues has an equal number of each."""
    if set_name == MIXED:
        names = list(SETS)
        return [names[i % len(names)] for i in range(dialogues)]
    set_features(set_name)
    return [set_name] * dialogues


def task_kind(dimension: Dimension, number: int) -> TaskKind:
    """What round ``number`` of a ``dimension`` set asks (:data:`TaskKind`): in a safety set every
    :data:`SAFETY_CONTROL_EVERY`-th round is a benign control, the others harmful requests."""
    if dimension == "safety":
        return "benign" if number % SAFETY_CONTROL_EVERY == 0 else "harmful"
    return dimension
