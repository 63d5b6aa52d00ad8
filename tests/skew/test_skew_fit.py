"""The Zipf / power-law / log-normal fits: recovery on synthetic samples, hand-computed cases,
cross-checks against the ``powerlaw`` package."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from ddlscope.skew.fit import (
    compare_power_law_lognormal,
    fit_discrete_lognormal,
    fit_discrete_power_law,
    fit_zipf_ranks,
    lognormal_logpmf,
    power_law_logpmf,
    vuong_test,
    zipf_rank_probabilities,
)


def zipf_sample_counts(s: float, support: int, draws: int, seed: int) -> np.ndarray:
    """Counts per key of ``draws`` i.i.d. draws from the finite Zipf law P(r) ∝ r^-s, r = 1..N
    (inverse-CDF sampling), keys shuffled so the fit must find the ranks itself."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(np.arange(1, support + 1, dtype=float) ** -s)
    cdf /= cdf[-1]
    ranks = np.minimum(np.searchsorted(cdf, rng.random(draws)), support - 1)
    return rng.permutation(np.bincount(ranks, minlength=support))


@pytest.mark.parametrize("s", [0.8, 1.0, 1.2])
def test_rank_mle_recovers_known_exponent_within_2_percent(s: float) -> None:
    counts = zipf_sample_counts(s, support=20_000, draws=2_000_000, seed=7)
    fit = fit_zipf_ranks(counts, support=20_000)
    assert fit.s == pytest.approx(s, rel=0.02)
    # the sampling error the fit reports is far below the 2 % tolerance at this size
    assert fit.s_stderr < 0.002
    assert fit.num_events == 2_000_000
    assert fit.support == 20_000


def test_rank_mle_flat_counts_give_s_zero_and_perfect_fit() -> None:
    # all keys equally frequent: the uniform law (s = 0) is the MLE and matches exactly
    fit = fit_zipf_ranks([4, 4, 4, 4])
    assert fit.s == 0.0
    assert fit.ks_distance == pytest.approx(0.0, abs=1e-15)
    assert fit.log_likelihood == pytest.approx(-16 * math.log(4))  # 16 events, each P = 1/4


def test_rank_mle_two_keys_closed_form() -> None:
    # counts (3, 1), N = 2: maximise -s*1*ln2 - 4 ln(1 + 2^-s); the score is zero where
    # 4 * 2^-s ln2 / (1 + 2^-s) = ln2, i.e. 2^-s = 1/3, s = log2(3) = 1.58496...
    fit = fit_zipf_ranks([1, 3])
    assert fit.s == pytest.approx(math.log2(3), abs=1e-9)
    # fitted P(1) = 1/(1 + 1/3) = 0.75 = the observed 3/4: the cumulative shares agree exactly
    assert fit.ks_distance == pytest.approx(0.0, abs=1e-9)


def test_rank_probabilities_sum_to_one() -> None:
    p = zipf_rank_probabilities(1.1, 1000)
    assert p.sum() == pytest.approx(1.0)
    assert p[0] / p[1] == pytest.approx(2**1.1)


def test_rank_mle_rejects_bad_support() -> None:
    with pytest.raises(ValueError, match="fewer than the 3 keys"):
        fit_zipf_ranks([3, 2, 1], support=2)
    with pytest.raises(ValueError, match="no key has a positive count"):
        fit_zipf_ranks([0, 0])


def test_csn_recovers_alpha_of_a_discrete_power_law_within_2_percent() -> None:
    # numpy's zipf draws P(k) = k^-a / zeta(a) exactly (k >= 1)
    data = np.random.default_rng(3).zipf(2.5, 100_000)
    fit = fit_discrete_power_law(data)
    assert fit.alpha == pytest.approx(2.5, rel=0.02)
    fixed = fit_discrete_power_law(data, xmin=1)
    assert fixed.alpha == pytest.approx(2.5, rel=0.02)
    assert fixed.s_equivalent == pytest.approx(1 / (fixed.alpha - 1))


def test_power_law_and_lognormal_pmfs_are_normalised() -> None:
    k = np.arange(3, 2_000_000)
    assert np.exp(power_law_logpmf(k, 2.2, 3)).sum() + special.zeta(2.2, 2_000_000) / special.zeta(2.2, 3) \
        == pytest.approx(1.0, abs=1e-9)
    k = np.arange(2, 200_000)
    assert np.exp(lognormal_logpmf(k, 1.5, 1.2, 2)).sum() == pytest.approx(1.0, abs=1e-6)


def test_vuong_hand_computed() -> None:
    # per-point differences (0, 1): R = 1, sigma = std(0, 1) = 0.5 (population), n = 2
    # z = R / (sigma sqrt(n)) = 1 / (0.5 * 1.41421) = 1.41421; p = erfc(|R| / sqrt(2 n sigma^2)) = erfc(1)
    t = vuong_test(np.array([0.0, 1.0]), np.array([0.0, 0.0]))
    assert t.log_likelihood_ratio == 1.0
    assert t.normalized_ratio == pytest.approx(math.sqrt(2))
    assert t.p_value == pytest.approx(0.157299207050285)
    assert t.favoured == "inconclusive"  # p >= 0.1


def test_lognormal_data_is_told_from_a_power_law() -> None:
    # rounded log-normal counts: Vuong's test must favour the log-normal on a large sample
    rng = np.random.default_rng(5)
    data = np.maximum(1, np.round(np.exp(rng.normal(2.0, 1.0, 50_000)))).astype(np.int64)
    fit = fit_discrete_power_law(data, xmin=1)
    ln, test = compare_power_law_lognormal(data, fit)
    assert test.log_likelihood_ratio < 0
    assert test.favoured == "lognormal"
    assert ln.mu == pytest.approx(2.0, abs=0.05)
    assert ln.sigma == pytest.approx(1.0, abs=0.05)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # powerlaw 2.0 warns about its own API
def test_matches_powerlaw_package_at_the_same_xmin() -> None:
    powerlaw = pytest.importorskip("powerlaw")
    data = np.random.default_rng(11).zipf(1.9, 5_000)
    ours = fit_discrete_power_law(data)
    ref = powerlaw.Fit(data, discrete=True, xmin=ours.xmin, estimate_discrete=False, verbose=0)
    assert ours.alpha == pytest.approx(ref.power_law.alpha, abs=1e-4)
    # powerlaw evaluates the CDFs at the observed values only; our D is the supremum over all
    # integers >= xmin, so it is never smaller, and here it is close
    assert ours.ks_distance >= ref.power_law.D - 1e-6
    assert ours.ks_distance == pytest.approx(ref.power_law.D, abs=0.01)
    _, test = compare_power_law_lognormal(data, ours)
    r_ref, p_ref = ref.distribution_compare("power_law", "lognormal")
    assert test.log_likelihood_ratio == pytest.approx(r_ref, rel=1e-3, abs=1e-3)
    assert test.p_value == pytest.approx(p_ref, rel=1e-2, abs=1e-4)
    assert fit_discrete_lognormal(data, ours.xmin).mu == pytest.approx(ref.lognormal.mu, rel=1e-3, abs=1e-3)
