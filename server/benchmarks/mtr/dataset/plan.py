"""Dialogue plans of a suite: ids, feature sets, per-round features and topics, from a seed."""

from __future__ import annotations

import random

from server.benchmarks.mtr.dataset.schema import DialoguePlan
from server.benchmarks.mtr.dataset.sets import Combine, round_plan, set_dimension, sets_for
from server.benchmarks.mtr.dataset.topics import TOPICS
from server.datasets.errors import DatasetError


def dialogue_id(i: int) -> str:
    return f"d{i:04d}"


def plan_dialogues(specs: list[tuple[str, int]], seed: int, combine: Combine = "overlay") -> list[DialoguePlan]:
    """One plan per (set, rounds) in ``specs``. Topics follow a seeded shuffle of the bank,
    reshuffled after each pass, so every topic is used before any repeats."""
    if not specs:
        raise DatasetError("a suite needs at least one dialogue")
    rng = random.Random(f"mtr-topics:{seed}")
    order: list[str] = []
    plans = []
    for i, (set_name, rounds) in enumerate(specs, start=1):
        if rounds < 1:
            raise DatasetError(f"a dialogue needs at least one round, not {rounds}")
        if not order:
            order = [t.title for t in TOPICS]
            rng.shuffle(order)
        per_round = round_plan(set_name, rounds, combine)
        overlays = tuple(o for _, o in per_round) if any(o for _, o in per_round) else ()
        plans.append(DialoguePlan(dialogue_id=dialogue_id(i), set=set_name, features=tuple(f for f, _ in per_round),
                                  overlays=overlays, topic=order.pop(0), seed=seed,
                                  dimension=set_dimension(set_name)))
    return plans


def plan_suite(dialogues: int, rounds: int, set_name: str, seed: int,
               combine: Combine = "overlay") -> list[DialoguePlan]:
    """``dialogues`` plans of ``rounds`` rounds, all of ``set_name`` or (``mixed``) each feature set in turn;
    a combination set's rounds as overlays or alternating (``combine``, :mod:`.sets`)."""
    if dialogues < 1:
        raise DatasetError("a suite needs at least one dialogue")
    return plan_dialogues([(s, rounds) for s in sets_for(dialogues, set_name)], seed, combine)
