"""Metrics and statistics against values computed independently (exact fractions, plain loops)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from server.benchmarks.mpe import stats
from server.benchmarks.mpe.metrics import METRICS, best_per_column, compute_metrics
from server.benchmarks.mpe.stats import bonferroni, mcnemar_exact
from tests.scoring_support import entry


def exact_mcnemar(b: int, c: int) -> float:
    """Two-sided exact McNemar from first principles: 2 * P(X <= min(b, c)), X ~ Bin(b + c, 1/2), capped."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(Fraction(math.comb(n, k), 2 ** n) for k in range(min(b, c) + 1))
    return float(min(Fraction(1), 2 * tail))


class TestMcNemarBonferroni:
    @pytest.mark.parametrize("b,c", [(0, 0), (0, 1), (0, 5), (1, 9), (3, 3), (7, 2), (10, 25), (40, 61), (0, 60)])
    def test_against_exact_binomial(self, b, c):
        assert mcnemar_exact(b, c) == pytest.approx(exact_mcnemar(b, c), rel=1e-12, abs=1e-15)

    def test_known_values(self):
        assert mcnemar_exact(0, 5) == pytest.approx(0.0625)
        assert mcnemar_exact(1, 9) == pytest.approx(22 / 1024)
        assert mcnemar_exact(4, 4) == 1.0
        assert mcnemar_exact(5, 0) == mcnemar_exact(0, 5)  # symmetric

    def test_bad_counts(self):
        with pytest.raises(ValueError):
            mcnemar_exact(-1, 2)

    def test_bonferroni(self):
        assert bonferroni(0.02, 3) == pytest.approx(0.06)
        assert bonferroni(0.5, 3) == 1.0
        assert bonferroni(0.0, 10) == 0.0
        with pytest.raises(ValueError):
            bonferroni(0.1, 0)


class TestMetrics:
    def test_six_quantities_with_their_denominators(self):
        eps = [
            entry(scenario="s1", fresh=True, correct=True, windows=[(True, 0), (False, 900)],
                  n4=[(True, "fresh_onset", True, "pass")]),
            entry(scenario="s2", present=True, correct=False, windows=[(True, 0)],
                  n4=[(True, "already_speaking", False, None)]),
            entry(scenario="s3", windows=[(True, 200), (True, 0)], n4=[(False, "no_speech", False, None)]),
        ]
        m = compute_metrics(eps)["m"]["explicit"]
        assert m["fresh_onset_rate"] == {"num": 1, "den": 3, "value": pytest.approx(1 / 3)}
        assert m["response_presence"] == {"num": 2, "den": 3, "value": pytest.approx(2 / 3)}
        assert m["answer_accuracy"] == {"num": 1, "den": 2, "value": 0.5}
        assert m["silence_preservation"] == {"num": 4, "den": 5, "value": 0.8}
        assert m["window_response"] == {"num": 2, "den": 3, "value": pytest.approx(2 / 3)}
        assert m["window_yield"] == {"num": 1, "den": 1, "value": None}  # below 30 eligible: no value
        assert set(m) == set(METRICS)

    def test_window_yield_needs_30_eligible_events(self):
        n4 = [(True, "fresh_onset", True, "pass")] * 20 + [(True, "fresh_onset", True, "still_voicing")] * 9
        eps = [entry(scenario="s1", n4=n4)]
        assert compute_metrics(eps)["m"]["explicit"]["window_yield"]["value"] is None
        eps = [entry(scenario="s1", n4=n4 + [(True, "fresh_onset", True, "resumed")])]
        assert compute_metrics(eps)["m"]["explicit"]["window_yield"] == {"num": 20, "den": 30,
                                                                          "value": pytest.approx(2 / 3)}

    def test_no_asr_leaves_accuracy_without_denominator(self):
        eps = [entry(present=True, correct=None)]
        assert compute_metrics(eps)["m"]["explicit"]["answer_accuracy"] == {"num": 0, "den": 0, "value": None}

    def test_best_per_column(self):
        eps = [entry("a", fresh=True, correct=True, windows=[(True, 0)]),
               entry("b", fresh=False, windows=[(True, 0)])]
        best = best_per_column(compute_metrics(eps), "explicit")
        assert best["fresh_onset_rate"] == {"a"}
        assert best["silence_preservation"] == set()  # everyone tied: nobody marked


def loop_bootstrap(num, den, *, n=10_000, seed=7):
    """Independent percentile bootstrap of sum(num)/sum(den) over clusters, one resample at a time."""
    rng = np.random.default_rng(seed)
    num, den = np.asarray(num), np.asarray(den)
    out = []
    for _ in range(n):
        idx = rng.integers(0, len(num), len(num))
        out.append(num[idx].sum() / den[idx].sum())
    return np.percentile(out, [2.5, 97.5])


class TestBootstrap:
    def test_cluster_ratio_ci_matches_an_independent_loop(self):
        rng = np.random.default_rng(1)
        den = rng.integers(2, 9, size=40)
        num = np.array([rng.binomial(d, 0.7) for d in den])
        lo, hi = stats.ratio_ci(num, den)
        ref_lo, ref_hi = loop_bootstrap(num, den)
        assert lo < num.sum() / den.sum() < hi
        assert lo == pytest.approx(ref_lo, abs=0.012) and hi == pytest.approx(ref_hi, abs=0.012)

    def test_fixed_seed_is_reproducible_and_clusters_are_kept_whole(self):
        num, den = [3, 0, 5, 2, 4], [4, 3, 5, 6, 4]
        assert stats.ratio_ci(num, den) == stats.ratio_ci(num, den)
        # Resampling whole clusters: a cluster with many windows moves the CI as a block, so the
        # CI differs from the one of the same windows split into single-window clusters.
        flat_num = [1] * sum(num) + [0] * (sum(den) - sum(num))
        assert stats.ratio_ci(num, den) != stats.ratio_ci(flat_num, [1] * sum(den))

    def test_difference_ci_is_paired(self):
        rng = np.random.default_rng(3)
        den = rng.integers(3, 7, size=30)
        n1 = np.array([rng.binomial(d, 0.8) for d in den])
        n2 = np.maximum(n1 - rng.integers(0, 2, size=30), 0)  # model 2 = model 1 minus a little
        lo, hi = stats.ratio_diff_ci(n1, den, n2, den)
        # Independent loop with the same scenarios drawn for both models.
        r = np.random.default_rng(11)
        diffs = []
        for _ in range(10_000):
            i = r.integers(0, 30, 30)
            diffs.append(n1[i].sum() / den[i].sum() - n2[i].sum() / den[i].sum())
        ref = np.percentile(diffs, [2.5, 97.5])
        assert lo == pytest.approx(ref[0], abs=0.01) and hi == pytest.approx(ref[1], abs=0.01)
        assert lo >= 0  # paired resampling sees that model 1 is never worse

    def test_single_scenario_has_no_ci(self):
        assert stats.ratio_ci([3], [4]) is None


class TestAnalyses:
    def test_paired_addressing(self):
        # 10 pairs: both 4, explicit only 5, implicit only 1, neither 0.
        present = [(True, True)] * 4 + [(True, False)] * 5 + [(False, True)] * 1
        eps = []
        for i, (ex, im) in enumerate(present):
            eps.append(entry(condition="explicit", scenario=f"s{i}", pair=f"p{i}", present=ex))
            eps.append(entry(condition="implicit", scenario=f"s{i}", pair=f"p{i}", present=im))
        eps.append(entry(condition="explicit", scenario="lonely", pair="p99", present=True))  # no partner: left out
        r = stats.paired_addressing(eps)["m"]
        assert (r["n_pairs"], r["both"], r["explicit_only"], r["implicit_only"], r["neither"]) == (10, 4, 5, 1, 0)
        assert r["diff_pp"] == pytest.approx(40.0)
        assert r["p_mcnemar"] == pytest.approx(exact_mcnemar(5, 1), rel=1e-6)

    def test_pairwise_with_bonferroni_over_the_table(self):
        eps = []
        for i in range(12):
            # silence: model a passes all 3 windows, model b fails the first window in 8 scenarios
            eps.append(entry("a", scenario=f"s{i}", present=True, correct=True, windows=[(True, 0)] * 3))
            eps.append(entry("b", scenario=f"s{i}", present=i < 10, correct=(i % 2 == 0) if i < 10 else None,
                             windows=[(i >= 8, 500)] + [(True, 0)] * 2))
            eps.append(entry("c", scenario=f"s{i}", windows=[(True, 0)] * 3))
        pw = stats.pairwise(eps)
        tests = {(t["model_a"], t["model_b"], t["task"]): t for t in pw["tests"]}
        # a-b silence: 36 shared windows, a only passes 8; a-b accuracy on the 10 both answered: a only 5.
        # a-c silence: no discordance; b-c silence; c never answers, so no accuracy tests with c.
        assert set(tests) == {("a", "b", "silence"), ("a", "b", "accuracy"), ("a", "c", "silence"),
                              ("b", "c", "silence")}
        assert pw["m"] == 4
        ab = tests[("a", "b", "silence")]
        assert (ab["n_shared"], ab["a_only"], ab["b_only"]) == (36, 8, 0)
        assert ab["p"] == pytest.approx(exact_mcnemar(8, 0), rel=1e-6)
        assert ab["p_bonferroni"] == pytest.approx(min(1, 4 * exact_mcnemar(8, 0)), rel=1e-6)
        acc = tests[("a", "b", "accuracy")]
        assert (acc["n_shared"], acc["a_only"], acc["b_only"]) == (10, 5, 0)
        lo, hi = ab["ci_diff_pp"]
        assert 0 < lo <= ab["diff_pp"] <= hi

    def test_silence_sweep(self):
        eps = [entry(windows=[(True, 0), (False, 50), (False, 150), (False, 250), (False, 400), (False, 600)])]
        vals = stats.silence_sweep(eps)["values"]["m"]["explicit"]
        assert [(v["threshold_ms"], v["num"], v["den"]) for v in vals] == [
            (0, 1, 6), (100, 2, 6), (200, 3, 6), (300, 4, 6), (500, 5, 6)]

    def test_request_time_tertiles_use_input_timing_only(self):
        eps = []
        for i in range(9):
            t = float(i + 1)  # 1..9 s
            eps.append(entry("a", scenario=f"s{i}", present=True, correct=i % 3 == 0, request_time_s=t))
            eps.append(entry("b", scenario=f"s{i}", present=i >= 6, correct=True if i >= 6 else None,
                             request_time_s=t))
        tt = stats.request_tertiles(eps)
        q1, q2 = np.quantile(np.arange(1, 10), [1 / 3, 2 / 3])
        assert tt["boundaries_s"] == [pytest.approx(q1, abs=1e-3), pytest.approx(q2, abs=1e-3)]
        a, b = tt["groups"]["a"]["explicit"], tt["groups"]["b"]["explicit"]
        assert [a[g]["n"] for g in ("early", "middle", "late")] == [3, 3, 3]
        assert [b[g]["presence"] for g in ("early", "middle", "late")] == [0.0, 0.0, 1.0]
        assert a["early"]["accuracy"] == pytest.approx(1 / 3) and b["late"]["accuracy"] == 1.0
        assert b["early"]["accuracy"] is None

    def test_spearman_against_ranks_by_hand(self):
        fresh = [0.1, 0.5, 0.3, 0.9, 0.5]
        presence = [0.2, 0.6, 0.7, 0.8, 0.4]
        eps = []
        for k, (f, p) in enumerate(zip(fresh, presence)):
            for i in range(10):
                eps.append(entry(f"m{k}", scenario=f"s{i}", fresh=i < round(10 * f), present=i < round(10 * p)))
        rc = stats.ranking_correlation(compute_metrics(eps))["explicit"]

        def ranks(xs):  # average ranks for ties
            order = sorted(xs)
            return [np.mean([j + 1 for j, y in enumerate(order) if y == x]) for x in xs]

        rf, rp = ranks(fresh), ranks(presence)
        rho = np.corrcoef(rf, rp)[0, 1]
        assert rc["n_models"] == 5 and rc["rho"] == pytest.approx(rho, abs=1e-6)

    def test_spearman_needs_three_models(self):
        eps = [entry("a", fresh=True), entry("b")]
        assert stats.ranking_correlation(compute_metrics(eps))["explicit"]["rho"] is None

    def test_n4_breakdown(self):
        eps = [entry(n4=[(True, "fresh_onset", True, "pass"), (True, "fresh_onset", True, "resumed"),
                         (True, "already_speaking", False, None), (False, "no_speech", False, None)])]
        b = stats.n4_breakdown(eps)["m"]["explicit"]
        assert b["n"] == 4 and b["eligible"] == 2 and b["window_response"] == 3
        assert b["categories"] == {"already_speaking": 1, "started_during_q": 0, "fresh_onset": 2, "no_speech": 1}
        assert b["outcomes"] == {"pass": 1, "still_voicing": 0, "resumed": 1}

    def test_bootstrap_cis_cover_the_values(self):
        eps = [entry(scenario=f"s{i}", fresh=i % 3 != 0, windows=[(i % 4 != 0, 0), (True, 0)]) for i in range(20)]
        m = compute_metrics(eps)
        b = stats.bootstrap_cis(eps, m)["m"]["explicit"]
        for q in ("fresh_onset_rate", "silence_preservation"):
            assert b[q]["lo"] <= m["m"]["explicit"][q]["value"] <= b[q]["hi"]
            assert b[q]["n_scenarios"] == 20
        assert b["window_yield"]["lo"] is None  # no value, no CI
