"""Fitting Zipf's law to per-key frequencies, with goodness of fit and a rival distribution.

Two exponents describe the same skew and are easy to confuse; ddlscope reports both, by name:

* **rank-frequency exponent** ``s``: the frequency of the ``r``-th most frequent key is
  ``f(r) ∝ r^-s`` (Zipf's law; ``s ≈ 1`` for word frequencies). Estimator
  (:func:`fit_zipf_ranks`): discrete maximum likelihood over ranks with a known, finite support
  ``N`` — every event is a draw of a rank ``r`` in ``1..N`` with ``P(r) = r^-s / H(N, s)``,
  ``H(N, s) = Σ_{r=1..N} r^-s``, and the observed count of the ``r``-th most frequent key is the
  number of draws of rank ``r``. Log-likelihood ``ℓ(s) = -s Σ_r f_r ln r - M ln H(N, s)``
  (``M`` events); the maximum solves ``Σ_r f_r ln r / M = E_s[ln r]``; standard error from the
  Fisher information ``M · Var_s[ln r]``. ``N`` is the number of distinct keys seen unless the
  caller knows the table size. Ranks come from the observed counts, which biases ``s`` where
  keys are seen only a few times; the fit is dominated by the head, where the bias is small.
  Goodness of fit: the Kolmogorov-Smirnov distance between the empirical and the fitted
  cumulative share of events over ranks (the coverage curve).
* **frequency-distribution exponent** ``alpha``: the fraction of keys updated ``k`` times is
  ``P(k) ∝ k^-alpha`` for ``k >= xmin``. Estimator (:func:`fit_discrete_power_law`): the
  Clauset-Shalizi-Newman procedure (SIAM Review 51(4), 2009, sections 3.1 and 3.3): the exact
  discrete MLE ``P(k) = k^-alpha / ζ(alpha, xmin)`` (Hurwitz zeta) for each candidate ``xmin``,
  and the ``xmin`` whose fit minimises the Kolmogorov-Smirnov distance ``D``. ``D`` here is the
  supremum over all integers ``k >= xmin`` of ``|S(k) - P(k)|`` (evaluated at each observed value
  and just below it, where the step function and the model differ most).
  Rival (:func:`fit_discrete_lognormal`): a log-normal discretised by rounding (the mass of
  ``[k - 1/2, k + 1/2)``) and truncated at ``xmin``, fitted by maximum likelihood on the same
  tail; the two are compared by the log-likelihood ratio ``R`` with Vuong's (Econometrica 57(2),
  1989) normalised statistic and two-sided p-value ``p = erfc(|R| / sqrt(2 n σ²))`` (CSN 2009,
  section 5.1 and appendix C): ``R > 0`` favours the power law, ``R < 0`` the log-normal, and
  the sign means nothing when ``p`` is large (we use ``p < 0.1`` as CSN do).

Relation used between the two: ``alpha = 1 + 1/s`` (Adamic & Huberman, Glottometrics 3, 2002;
Newman, Contemporary Physics 46(5), 2005, section 2.7) — exact for a continuous Pareto law and
asymptotic for the tail of a discrete one; :attr:`PowerLawFit.s_equivalent` gives ``1/(alpha-1)``.

The estimators are checked against the ``powerlaw`` package (Alstott, Bullmore & Plenz, PLoS ONE
2014) in the tests (same alpha at the same ``xmin``, same log-likelihood ratio); ddlscope keeps its
own vectorised implementation because ``powerlaw`` refits each ``xmin`` candidate with a Python
object and numerical optimiser (slow when the counts take thousands of distinct values) and by
default switches to an approximate estimator for ``xmin >= 10``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

# SciPy is imported inside the functions that use it, so that the CLI can import this package's
# constants (e.g. ddlscope.skew.frequency.DEFAULT_WINDOW_EVENTS) without paying for SciPy.

_ALPHA_BOUNDS = (1.0 + 1e-9, 12.0)
_MAX_SUPPORT = 50_000_000


def _as_counts(counts: np.ndarray | list[int]) -> np.ndarray:
    arr = np.asarray(counts)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"counts: expected a non-empty 1-D array, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError("counts: expected integer counts")
        arr = arr.astype(np.int64)
    if np.any(arr < 0):
        raise ValueError("counts: expected counts >= 0")
    return arr.astype(np.int64)


# -- rank-frequency: discrete MLE over ranks --------------------------------------------------------
@dataclass(frozen=True)
class ZipfRankFit:
    """The rank-frequency Zipf fit ``f(r) ∝ r^-s`` over ranks ``1..support``.

    Attributes:
        s: the rank-frequency exponent (MLE).
        s_stderr: its standard error, ``1 / sqrt(M · Var_s[ln r])``.
        support: ``N``, the number of ranks (keys) the law is normalised over.
        num_keys_observed: keys with a count > 0.
        num_events: ``M``, the total count.
        log_likelihood: ``ℓ(s)`` at the MLE (nats).
        ks_distance: ``max_r |C_emp(r) - C_fit(r)|`` over the cumulative share of events.
    """

    s: float
    s_stderr: float
    support: int
    num_keys_observed: int
    num_events: int
    log_likelihood: float
    ks_distance: float

    def as_dict(self) -> dict[str, float | int]:
        """The fields as a dict (for JSON summaries)."""
        return asdict(self)


def zipf_rank_probabilities(s: float, support: int) -> np.ndarray:
    """``P(r) = r^-s / H(N, s)`` for ``r = 1..N`` (shape ``(N,)``, sums to 1).

    Raises:
        ValueError: ``support < 1`` or above 50 M, or ``s < 0``.
    """
    if support < 1 or support > _MAX_SUPPORT:
        raise ValueError(f"support: expected 1..{_MAX_SUPPORT} ranks, got {support}")
    if s < 0:
        raise ValueError(f"s: expected >= 0, got {s}")
    w = np.exp(-s * np.log(np.arange(1, support + 1, dtype=np.float64)))
    return w / w.sum()


def fit_zipf_ranks(counts: np.ndarray | list[int], support: int | None = None) -> ZipfRankFit:
    """Fit ``f(r) ∝ r^-s`` to per-key counts by discrete maximum likelihood over ranks.

    Args:
        counts: one count per key (any order; zeros allowed), shape ``(K,)``.
        support: the number of ranks ``N`` (e.g. the embedding table's rows, when known);
            default: the number of keys with a count > 0. Keys never seen take the ranks after
            the observed ones with count 0.

    Returns:
        :class:`ZipfRankFit`. ``s`` solves ``Σ_r f_r ln r / M = E_s[ln r]`` (brentq on ``[0, 50]``).

    Raises:
        ValueError: no positive count, ``support`` smaller than the observed keys or above 50 M.
    """
    from scipy import optimize

    arr = _as_counts(counts)
    f = np.sort(arr[arr > 0])[::-1].astype(np.float64)
    if f.size == 0:
        raise ValueError("counts: no key has a positive count")
    n_obs = int(f.size)
    n = n_obs if support is None else int(support)
    if n < n_obs:
        raise ValueError(f"support: {n} ranks is fewer than the {n_obs} keys observed")
    if n > _MAX_SUPPORT:
        raise ValueError(f"support: at most {_MAX_SUPPORT} ranks, got {n}")
    m = float(f.sum())
    log_r = np.log(np.arange(1, n + 1, dtype=np.float64))
    target = float(f @ log_r[:n_obs]) / m  # mean ln(rank) of the events

    def moments(s: float) -> tuple[float, float, float]:
        w = np.exp(-s * log_r)
        h = w.sum()
        mean = float(w @ log_r) / h
        var = float(w @ (log_r * log_r)) / h - mean * mean
        return mean, max(var, 0.0), float(h)

    if n == 1 or target >= moments(0.0)[0] - 1e-15:
        s_hat = 0.0  # every key equally frequent (or one key): the flattest law fits
    else:
        s_hat = float(optimize.brentq(lambda s: moments(s)[0] - target, 0.0, 50.0, xtol=1e-12, rtol=1e-12))
    _, var, h = moments(s_hat)
    loglik = -s_hat * target * m - m * math.log(h)
    p = np.exp(-s_hat * log_r) / h
    emp = np.zeros(n)
    emp[:n_obs] = f / m
    ks = float(np.max(np.abs(np.cumsum(emp) - np.cumsum(p))))
    stderr = 1.0 / math.sqrt(m * var) if var > 0 else math.inf
    return ZipfRankFit(s_hat, stderr, n, n_obs, int(m), loglik, ks)


# -- frequency distribution: CSN discrete power law -----------------------------------------------
@dataclass(frozen=True)
class PowerLawFit:
    """The discrete power law ``P(k) = k^-alpha / ζ(alpha, xmin)`` for ``k >= xmin``.

    Attributes:
        alpha: the frequency-distribution exponent (exact discrete MLE).
        alpha_stderr: ``1 / sqrt(n · d²/dα² ln ζ(α, xmin))`` (observed Fisher information).
        xmin: the smallest count in the power-law tail (chosen by minimum KS distance unless given).
        n_tail: keys with a count >= xmin.
        tail_key_fraction: ``n_tail`` / all keys with a count > 0.
        ks_distance: the KS distance ``D`` of the tail fit.
        log_likelihood: of the tail data at the MLE (nats).
        s_equivalent: ``1 / (alpha - 1)``, the rank-frequency exponent the relation
            ``alpha = 1 + 1/s`` implies.
        xmin_candidates: how many ``xmin`` values were scanned (0 when ``xmin`` was given).
    """

    alpha: float
    alpha_stderr: float
    xmin: int
    n_tail: int
    tail_key_fraction: float
    ks_distance: float
    log_likelihood: float
    s_equivalent: float
    xmin_candidates: int

    def as_dict(self) -> dict[str, float | int]:
        """The fields as a dict (for JSON summaries)."""
        return asdict(self)


def power_law_logpmf(k: np.ndarray, alpha: float, xmin: int) -> np.ndarray:
    """``ln P(k) = -alpha ln k - ln ζ(alpha, xmin)`` for integer ``k >= xmin`` (nats)."""
    from scipy import special

    return -alpha * np.log(np.asarray(k, dtype=np.float64)) - math.log(float(special.zeta(alpha, xmin)))


def _golden_max(fun, lo: np.ndarray, hi: np.ndarray, iterations: int = 90) -> np.ndarray:
    """Vectorised golden-section search for the maximum of unimodal ``fun`` on ``[lo, hi]``."""
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo.copy(), hi.copy()
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = fun(c), fun(d)
    for _ in range(iterations):
        left = fc > fd  # maximum in [a, d]
        b = np.where(left, d, b)
        a = np.where(left, a, c)
        new_c = np.where(left, b - g * (b - a), d)
        new_d = np.where(left, c, a + g * (b - a))
        fd_keep, fc_keep = fc, fd
        c, d = new_c, new_d
        fc = np.where(left, fun(c), fc_keep)
        fd = np.where(left, fd_keep, fun(d))
    return (a + b) / 2.0


def _alpha_mle(sum_log: np.ndarray, n: np.ndarray, xmin: np.ndarray) -> np.ndarray:
    """Exact discrete MLE of alpha for several tails at once: maximise
    ``-alpha Σ ln k - n ln ζ(alpha, xmin)`` (concave in alpha, so golden section is exact)."""
    from scipy import special

    def loglik(alpha: np.ndarray) -> np.ndarray:
        return -alpha * sum_log - n * np.log(special.zeta(alpha, xmin))

    lo = np.full(sum_log.shape, _ALPHA_BOUNDS[0])
    hi = np.full(sum_log.shape, _ALPHA_BOUNDS[1])
    return _golden_max(loglik, lo, hi)


def _ks_discrete(values: np.ndarray, mult: np.ndarray, alpha: float, xmin: int) -> float:
    """sup over integers k >= xmin of |S(k) - P(k)|: at each observed value and just below it."""
    from scipy import special

    n = mult.sum()
    emp_le = np.cumsum(mult) / n
    emp_lt = np.concatenate(([0.0], emp_le[:-1]))
    z0 = special.zeta(alpha, xmin)
    model_le = 1.0 - special.zeta(alpha, values + 1.0) / z0
    model_lt = 1.0 - special.zeta(alpha, values.astype(np.float64)) / z0
    return float(max(np.max(np.abs(emp_le - model_le)), np.max(np.abs(emp_lt - model_lt))))


def fit_discrete_power_law(
    counts: np.ndarray | list[int], xmin: int | None = None, min_tail: int = 10, max_candidates: int = 1000,
) -> PowerLawFit:
    """Fit ``P(k) ∝ k^-alpha`` (``k >= xmin``) to per-key counts by the CSN procedure.

    Args:
        counts: one count per key, shape ``(K,)``; zeros are ignored (keys never seen).
        xmin: fix the tail start; default: scan the distinct count values that leave at least
            ``min_tail`` keys in the tail and take the one with the smallest KS distance.
        min_tail: the smallest tail the scan considers.
        max_candidates: at most this many ``xmin`` candidates (log-spaced over the sorted
            distinct values when there are more; all small values are kept).

    Raises:
        ValueError: fewer than ``min_tail`` positive counts, fewer than two distinct counts, or
            a given ``xmin`` with fewer than two keys at or above it.
    """
    from scipy import special

    arr = _as_counts(counts)
    data = arr[arr > 0]
    values, mult = np.unique(data, return_counts=True)
    n_pos = int(data.size)
    if xmin is not None:
        tail = values >= xmin
        if mult[tail].sum() < 2:
            raise ValueError(f"xmin: fewer than 2 keys have a count >= {xmin}")
        cand = np.array([int(np.argmax(tail))])
    else:
        if n_pos < min_tail or values.size < 2:
            raise ValueError(f"counts: need at least {min_tail} keys and two distinct counts to fit a "
                             f"power law, got {n_pos} keys and {values.size} distinct counts")
        n_tail_at = np.cumsum(mult[::-1])[::-1]
        cand = np.flatnonzero((n_tail_at >= min_tail) & (np.arange(values.size) < values.size - 1))
        if cand.size == 0:
            cand = np.array([0])
        if cand.size > max_candidates:
            pick = np.unique(np.round(np.geomspace(1, cand.size, max_candidates)).astype(np.int64) - 1)
            cand = cand[pick]
    logv = np.log(values.astype(np.float64))
    suffix_n = np.cumsum(mult[::-1])[::-1].astype(np.float64)
    suffix_log = np.cumsum((mult * logv)[::-1])[::-1]
    xmins = values[cand].astype(np.float64)
    alphas = _alpha_mle(suffix_log[cand], suffix_n[cand], xmins)
    dists = np.array([_ks_discrete(values[j:], mult[j:], float(a), int(values[j])) for j, a in zip(cand, alphas,
                                                                                                 strict=True)])
    best = int(np.argmin(dists))
    j, alpha = int(cand[best]), float(alphas[best])
    x0, n_tail = int(values[j]), float(suffix_n[j])
    loglik = -alpha * suffix_log[j] - n_tail * math.log(float(special.zeta(alpha, x0)))
    h = 1e-4
    lz = [math.log(float(special.zeta(alpha + d, x0))) for d in (-h, 0.0, h)]
    curvature = (lz[0] - 2 * lz[1] + lz[2]) / (h * h)
    stderr = 1.0 / math.sqrt(n_tail * curvature) if curvature > 0 else math.inf
    return PowerLawFit(
        alpha=alpha, alpha_stderr=stderr, xmin=x0, n_tail=int(n_tail), tail_key_fraction=n_tail / n_pos,
        ks_distance=float(dists[best]), log_likelihood=float(loglik), s_equivalent=1.0 / (alpha - 1.0),
        xmin_candidates=0 if xmin is not None else int(cand.size),
    )


# -- the rival: a discretised, truncated log-normal ------------------------------------------------
@dataclass(frozen=True)
class LogNormalFit:
    """A log-normal of ``ln k ~ Normal(mu, sigma)``, discretised by rounding and truncated at xmin.

    Attributes:
        mu, sigma: parameters of ``ln k`` (MLE).
        xmin: the truncation (the power law's tail start, so the two are compared on the same data).
        log_likelihood: of the tail data at the MLE (nats).
    """

    mu: float
    sigma: float
    xmin: int
    log_likelihood: float

    def as_dict(self) -> dict[str, float | int]:
        """The fields as a dict (for JSON summaries)."""
        return asdict(self)


def _log_interval_mass(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``ln(Φ(hi) - Φ(lo))`` for standard-normal bounds ``lo < hi``, accurate in both tails."""
    from scipy import special

    upper = lo > 0  # ln Φ(x) = log_ndtr(x), ln(1 - Φ(x)) = log_ndtr(-x)
    a = np.where(upper, special.log_ndtr(-lo), special.log_ndtr(hi))
    b = np.where(upper, special.log_ndtr(-hi), special.log_ndtr(lo))
    return a + np.log1p(-np.exp(np.minimum(b - a, 0.0)))


def lognormal_logpmf(k: np.ndarray, mu: float, sigma: float, xmin: int) -> np.ndarray:
    """``ln P(k)`` with ``P(k) = [Φ(z(k+½)) - Φ(z(k-½))] / [1 - Φ(z(xmin-½))]``,
    ``z(x) = (ln x - mu) / sigma``, for integer ``k >= xmin`` (nats)."""
    from scipy import special

    k = np.asarray(k, dtype=np.float64)
    lo = (np.log(k - 0.5) - mu) / sigma
    hi = (np.log(k + 0.5) - mu) / sigma
    norm = float(special.log_ndtr(-(math.log(xmin - 0.5) - mu) / sigma))
    return _log_interval_mass(lo, hi) - norm


def fit_discrete_lognormal(counts: np.ndarray | list[int], xmin: int) -> LogNormalFit:
    """Fit the discretised log-normal truncated at ``xmin`` to the counts ``>= xmin`` by maximum
    likelihood (Nelder-Mead over ``mu`` and ``ln sigma``, started at the moments of ``ln k``).

    Raises:
        ValueError: fewer than two keys with a count ``>= xmin``.
    """
    from scipy import optimize

    arr = _as_counts(counts)
    values, mult = np.unique(arr[arr >= max(xmin, 1)], return_counts=True)
    if mult.sum() < 2:
        raise ValueError(f"xmin: fewer than 2 keys have a count >= {xmin}")
    logv = np.log(values.astype(np.float64))
    mean = float(mult @ logv / mult.sum())
    std = float(math.sqrt(max(mult @ (logv - mean) ** 2 / mult.sum(), 1e-4)))

    def nll(theta: np.ndarray) -> float:
        mu, sigma = float(theta[0]), math.exp(float(theta[1]))
        val = -float(mult @ lognormal_logpmf(values, mu, sigma, xmin))
        return val if math.isfinite(val) else 1e300

    best = None
    for start in ((mean, math.log(std)), (mean - 2 * std, math.log(2 * std))):
        res = optimize.minimize(nll, np.array(start), method="Nelder-Mead",
                                options={"xatol": 1e-6, "fatol": 1e-6, "maxiter": 3000, "maxfev": 6000})
        if best is None or res.fun < best.fun:
            best = res
    assert best is not None
    return LogNormalFit(float(best.x[0]), math.exp(float(best.x[1])), int(xmin), -float(best.fun))


# -- Vuong's likelihood-ratio test --------------------------------------------------------------
@dataclass(frozen=True)
class LikelihoodRatioTest:
    """Vuong's test of two non-nested fits on the same data (CSN 2009, section 5.1).

    Attributes:
        first, second: the two candidates' names.
        log_likelihood_ratio: ``R = Σ_i [ln p_first(x_i) - ln p_second(x_i)]``.
        normalized_ratio: ``R / (σ sqrt(n))``, asymptotically standard normal when neither is better.
        p_value: two-sided, ``erfc(|R| / sqrt(2 n σ²))``.
        favoured: ``first`` or ``second`` when ``p_value < 0.1``, else ``inconclusive``.
        n: data points compared.
    """

    first: str
    second: str
    log_likelihood_ratio: float
    normalized_ratio: float
    p_value: float
    favoured: str
    n: int

    def as_dict(self) -> dict[str, float | int | str]:
        """The fields as a dict (for JSON summaries)."""
        return asdict(self)


def vuong_test(loglik_first: np.ndarray, loglik_second: np.ndarray, first: str = "power_law",
               second: str = "lognormal", significance: float = 0.1) -> LikelihoodRatioTest:
    """Vuong's normalised log-likelihood-ratio test from per-point log-likelihoods (shape ``(n,)``).

    Raises:
        ValueError: shapes differ or fewer than two points.
    """
    from scipy import special

    a, b = np.asarray(loglik_first, dtype=np.float64), np.asarray(loglik_second, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise ValueError(f"vuong_test: expected two equal 1-D arrays of >= 2 points, got {a.shape} and {b.shape}")
    diff = a - b
    n = diff.size
    r = float(diff.sum())
    sigma = float(np.std(diff))
    if sigma == 0.0:
        z, p = (0.0, 1.0) if r == 0 else (math.copysign(math.inf, r), 0.0)
    else:
        z = r / (sigma * math.sqrt(n))
        p = float(special.erfc(abs(r) / math.sqrt(2.0 * n * sigma * sigma)))
    favoured = "inconclusive" if p >= significance else (first if r > 0 else second)
    return LikelihoodRatioTest(first, second, r, z, p, favoured, n)


def compare_power_law_lognormal(counts: np.ndarray | list[int], fit: PowerLawFit
                                ) -> tuple[LogNormalFit, LikelihoodRatioTest]:
    """Fit the log-normal on ``fit``'s tail (counts ``>= fit.xmin``) and run Vuong's test of the
    power law against it (``R > 0`` favours the power law)."""
    arr = _as_counts(counts)
    tail = arr[arr >= fit.xmin]
    ln = fit_discrete_lognormal(tail, fit.xmin)
    test = vuong_test(power_law_logpmf(tail, fit.alpha, fit.xmin), lognormal_logpmf(tail, ln.mu, ln.sigma, fit.xmin))
    return ln, test
