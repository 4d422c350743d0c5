"""Benchmark-neutral statistics: the exact McNemar test, Bonferroni, Cohen's kappa, and cluster
bootstrap CIs of ratios (clusters: scenarios or dialogues, resampled with replacement; seeded)."""

from __future__ import annotations

import math
import warnings
from typing import Callable, Sequence

import numpy as np
from scipy import stats as sst

BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 20260902
CONFIDENCE = 0.95


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


def cohens_kappa(pairs: Sequence[tuple[str, str]], labels: Sequence[str]) -> float | None:
    """Cohen's kappa of two raters' labels (one pair per item; None when chance agreement is 1)."""
    n = len(pairs)
    if not n:
        return None
    po = sum(a == b for a, b in pairs) / n
    pe = sum((sum(p[0] == lab for p in pairs) / n) * (sum(p[1] == lab for p in pairs) / n) for lab in labels)
    return None if pe >= 1 else (po - pe) / (1 - pe)


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


