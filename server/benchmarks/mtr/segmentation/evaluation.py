"""Turn F1 and boundary error of a segmentation against known turns (pure).

**Matching**: one-to-one. A found turn matches a true turn when *both* its start and its end lie
within ``tolerance`` of the true turn's; among all one-to-one matchings the one with the most
matched turns is taken, and of those the one with the least total boundary error (an assignment
problem, solved exactly with scipy's ``linear_sum_assignment``). **Turn F1** = 2 · matched /
(true turns + found turns); precision = matched / found, recall = matched / true. **Boundary
error**: the mean absolute error of the starts and ends of the matched turns (two boundaries each).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from server.benchmarks.mtr.segmentation.schema import Span
from server.core.timebase import STREAM_RATE

TOLERANCE = STREAM_RATE // 2  # 0.5 s
QUIET = int(32768 * 10 ** (-40 / 20))  # −40 dBFS: quieter samples at a clip's edges are not its speech


def audible_extent(clip: np.ndarray) -> tuple[int, int]:
    """(leading, trailing) samples of near-silence (under −40 dBFS) of a clip: placed at ``t``, its
    speech runs from ``t + leading`` to ``t + len(clip) − trailing`` (how known turns are timed)."""
    loud = np.flatnonzero(np.abs(clip.astype(np.int32)) >= QUIET)
    if len(loud) == 0:
        return 0, 0
    return int(loud[0]), int(len(clip) - 1 - loud[-1])


@dataclass(frozen=True)
class TurnScore:
    true: int
    found: int
    matched: int
    abs_errors: tuple[int, ...]  # |Δstart|, |Δend| of every matched turn, in samples
    pairs: tuple[tuple[int, int], ...]  # (true index, found index)

    @property
    def precision(self) -> float | None:
        return self.matched / self.found if self.found else None

    @property
    def recall(self) -> float | None:
        return self.matched / self.true if self.true else None

    @property
    def f1(self) -> float:
        total = self.true + self.found
        return 2 * self.matched / total if total else 1.0

    @property
    def mae_s(self) -> float | None:
        return float(np.mean(self.abs_errors)) / STREAM_RATE if self.abs_errors else None

    def __add__(self, other: "TurnScore") -> "TurnScore":
        return TurnScore(self.true + other.true, self.found + other.found, self.matched + other.matched,
                         self.abs_errors + other.abs_errors, ())


EMPTY = TurnScore(0, 0, 0, (), ())


def score_turns(true: Sequence[Span], found: Sequence[Span], tolerance: int = TOLERANCE) -> TurnScore:
    """Match ``found`` against ``true`` (module docstring)."""
    if not true or not found:
        return TurnScore(len(true), len(found), 0, (), ())
    ds = np.abs(np.array([[t.start - f.start for f in found] for t in true], dtype=np.int64))
    de = np.abs(np.array([[t.end - f.end for f in found] for t in true], dtype=np.int64))
    ok = (ds <= tolerance) & (de <= tolerance)
    # An infeasible pair costs more than all feasible errors together: more matches always win.
    big = int((ds + de)[ok].sum()) + 1
    cost = np.where(ok, ds + de, big)
    rows, cols = linear_sum_assignment(cost)
    pairs = [(int(r), int(c)) for r, c in zip(rows, cols) if ok[r, c]]
    errors = tuple(int(x) for r, c in pairs for x in (ds[r, c], de[r, c]))
    return TurnScore(len(true), len(found), len(pairs), errors, tuple(pairs))
