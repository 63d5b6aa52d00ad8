"""Fitting the alpha-beta (Hockney) model to measured collective timings.

A collective of ``S`` bytes over ``p`` ranks moves ``n = f(p) * S`` bytes over each rank's link in
``k(p)`` sequential steps, so with a per-step latency ``alpha`` and a link bandwidth ``beta``

    t(S) = k(p) * alpha + f(p) * S / beta                         (Hockney 1994; Thakur et al. 2005)

``f(p)`` is nccl-tests' bus-bandwidth factor (``busbw = algbw * f(p)``, nccl-tests
doc/PERFORMANCE.md): ``2 (p-1)/p`` for all-reduce, ``(p-1)/p`` for all-gather, reduce-scatter and
all-to-all (``S`` the total size), 1 for broadcast, reduce and send/receive; ``k(p)`` the ring's
steps. Both, and the collective names, are :mod:`ddlscope.model.collectives`' (:func:`bus_factor`,
:func:`collective_steps`, :data:`~ddlscope.model.collectives.COLLECTIVES`). ``beta`` is therefore
the *bus bandwidth* the collective approaches for large messages, the per-link figure the step-time
model's ``bytes / B`` uses, and ``alpha`` the per-step latency its ``messages * a`` uses
(:mod:`ddlscope.model.step_time`: a ring all-reduce is ``2 (p-1)`` messages per tensor).

Real timings are not one alpha-beta line: NCCL switches protocol with the size (LL for small
messages, LL128, then Simple) and its pipeline fills over the middle sizes, so the middle of a
sweep (about 64 KB to 64 MB) runs *above* any line through its two ends. A fit that weighs every
point alike (the earlier relative-residual fit of this module) lets those middle points pull
``beta`` 15-20 % below the bus bandwidth the file itself prints for large messages. The fit here
(our construction) is weighted least squares in log space,

    minimise  sum_i w_i (log(A + n_i / beta) - log t_i)^2       over A >= 0, 1/beta >= 0

(SciPy ``least_squares``; log residuals are relative errors, so microsecond and second timings
count alike), with the weights chosen so that *both ends* of the sweep count: the
**latency-bound** points (``t_i <= 1.25 t_min``: the flat start of the curve) share a weight of
1, the **bandwidth-bound** points (the 3 largest sizes whose measured busbw ``n_i / t_i`` is at
least 0.9 of the largest: the plateau) share a weight of 1, and the points between them share a
weight of 0.02 (they still decide where an end has no point). On sweeps shaped like NCCL's
(tests/calibrate/nccl_samples.py) both ends are then reproduced within about 1 %. Noise-free
timings of the model are recovered exactly.

The fit is then checked against the data it came from (:attr:`AlphaBetaFit.warnings`):

- the fitted bus bandwidth at the largest sizes (``n / (A + n / beta)``, median of the 3 largest)
  must be within 5 % of the measured one there (:data:`LARGE_BUSBW_TOLERANCE`);
- the fitted time of the smallest sizes (median of the 3 smallest) within 25 % of the measured
  (:data:`SMALL_TIME_TOLERANCE`);
- a latency at its bound 0 (no latency-bound point, or times that fall with size), a latency
  smaller than the bandwidth term of the smallest size (a sweep without small sizes: the latency is
  not measured) and a ``beta`` more than 5 % above every measured bus bandwidth (a sweep that
  never reaches the plateau) are degenerate fits.

Each failed check is one sentence in ``warnings`` (the CLI prints them); the fit is still returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import least_squares, lsq_linear

from ddlscope.model.collectives import bus_factor, canonical_collective, collective_steps


@dataclass(frozen=True)
class AlphaBetaFit:
    """A fitted ``t = k * alpha + n / beta`` for one collective on one link.

    Attributes:
        collective: canonical collective name.
        ranks: ``p``.
        steps: ``k``, the latency terms per collective.
        alpha_s: per-step latency (s), the link's alpha.
        beta_bytes_per_s: link (bus) bandwidth (bytes/s), the link's beta.
        latency_s: the fitted intercept ``k * alpha`` (s), the collective's latency.
        points: timings used.
        min_size_bytes, max_size_bytes: the range of collective sizes used.
        rms_rel_residual, max_rel_residual: of ``(fit - t) / t`` over the points.
        measured_large_busbw_gb_s, fitted_large_busbw_gb_s: bus bandwidth ``n / t`` at the largest
            sizes (median of the 3 largest), measured and fitted (GB/s).
        measured_small_time_us, fitted_small_time_us: time at the smallest sizes (median of the 3
            smallest), measured and fitted (us).
        warnings: the failed checks of the module docstring, one sentence each (empty: a good fit).
    """

    collective: str
    ranks: int
    steps: int
    alpha_s: float
    beta_bytes_per_s: float
    latency_s: float
    points: int
    min_size_bytes: float
    max_size_bytes: float
    rms_rel_residual: float
    max_rel_residual: float
    measured_large_busbw_gb_s: float = float("nan")
    fitted_large_busbw_gb_s: float = float("nan")
    measured_small_time_us: float = float("nan")
    fitted_small_time_us: float = float("nan")
    warnings: tuple[str, ...] = ()

    @property
    def latency_us(self) -> float:
        """``alpha_s`` in microseconds (the catalog's ``latency_us``)."""
        return self.alpha_s * 1e6

    @property
    def bandwidth_gb_s(self) -> float:
        """``beta`` in GB/s (1e9 bytes/s; the catalog's ``bandwidth_gb_s``)."""
        return self.beta_bytes_per_s / 1e9

    def predict_s(self, size_bytes: float | np.ndarray) -> float | np.ndarray:
        """Time (s) of the collective of ``size_bytes``: ``latency_s + f(p) S / beta``."""
        return self.latency_s + bus_factor(self.collective, self.ranks) * np.asarray(size_bytes) / self.beta_bytes_per_s

    def as_dict(self) -> dict[str, float | int | str]:
        """The fields plus ``latency_us`` and ``bandwidth_gb_s`` (JSON/TOML-ready)."""
        return {**asdict(self), "warnings": list(self.warnings), "latency_us": self.latency_us,
                "bandwidth_gb_s": self.bandwidth_gb_s}


LATENCY_BOUND_FACTOR = 1.25
"""Points with ``t <= 1.25 t_min`` are latency-bound (the flat start of a sweep; module docstring)."""
BANDWIDTH_BOUND_FRACTION = 0.9
"""The bandwidth-bound points are the 3 largest sizes whose measured bus bandwidth is at least 0.9
of the largest (the plateau; a last size that falls off it does not count)."""
MIDDLE_WEIGHT = 0.02
"""Total weight of the points between the two regimes (each regime has total weight 1)."""
LARGE_BUSBW_TOLERANCE = 0.05
"""Largest allowed relative gap between fitted and measured bus bandwidth at the largest sizes."""
SMALL_TIME_TOLERANCE = 0.25
"""Largest allowed relative gap between fitted and measured time at the smallest sizes."""
END_POINTS = 3
"""How many sizes make up each end for the checks (median over them)."""


def regime_weights(n: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The weights of the fit (module docstring): the latency-bound points (``t <= 1.25 t_min``)
    share 1; the bandwidth-bound points, the 3 largest sizes among those whose measured bus
    bandwidth ``n / t`` is at least 0.9 of the largest, share 1; the others share 0.02; a point in
    both regimes gets both shares. ``n`` in bytes (per link), ``t`` in seconds; returns one weight
    per point."""
    lat = t <= LATENCY_BOUND_FACTOR * t.min()
    rate = n / t
    near_peak = np.flatnonzero(rate >= BANDWIDTH_BOUND_FRACTION * rate.max())
    band = np.zeros(len(t), dtype=bool)
    band[near_peak[np.argsort(n[near_peak], kind="stable")[-END_POINTS:]]] = True
    mid = ~(lat | band)
    w = np.zeros_like(t)
    w[lat] += 1.0 / lat.sum()
    w[band] += 1.0 / band.sum()
    if mid.any():
        w[mid] += MIDDLE_WEIGHT / mid.sum()
    return w


def fit_line_weighted_log(x: Sequence[float] | np.ndarray, t: Sequence[float] | np.ndarray,
                          w: Sequence[float] | np.ndarray | None = None) -> tuple[float, float]:
    """Least squares of ``t = a + b x`` on log residuals ``sqrt(w_i) (log(a + b x_i) - log t_i)``,
    ``a, b >= 0`` (SciPy ``least_squares``, trust-region reflective). ``w`` defaults to
    :func:`regime_weights`.

    Returns ``(a, b)`` (units of ``t`` and ``t / x``).

    Raises:
        ValueError: fewer than 2 points, lengths differ, a non-positive or non-finite time, or
            fewer than 2 distinct ``x``.
    """
    x, t = np.asarray(x, dtype=float), np.asarray(t, dtype=float)
    if x.shape != t.shape or x.ndim != 1:
        raise ValueError(f"fit: sizes and times must be equal-length 1-D arrays, got {x.shape} and {t.shape}")
    if len(x) < 2 or len(np.unique(x)) < 2:
        raise ValueError(f"fit: expected at least 2 distinct sizes, got {len(np.unique(x))}")
    if not (np.all(np.isfinite(t)) and np.all(t > 0) and np.all(np.isfinite(x)) and np.all(x >= 0)):
        raise ValueError("fit: times must be positive and finite, sizes non-negative and finite")
    w = regime_weights(np.maximum(x, 1e-300), t) if w is None else np.asarray(w, dtype=float)
    sw = np.sqrt(w)
    # unknowns scaled to O(1): a in units of t_min, b in units of t_max / x_max
    ta, tb = t.min(), t.max() / x.max()
    logt = np.log(t)

    def residuals(p: np.ndarray) -> np.ndarray:
        return sw * (np.log(np.maximum(p[0] * ta + p[1] * tb * x, 1e-300)) - logt)

    # start from the unweighted relative fit's least-squares line (non-negative), nudged inside the bounds
    start = np.array([max(0.5, 1e-3), 0.5])
    design = np.column_stack([np.ones_like(x) * ta, x * tb]) / t[:, None]
    lin = lsq_linear(design, np.ones_like(t), bounds=(0.0, np.inf), method="bvls", tol=1e-14).x
    if np.all(np.isfinite(lin)):
        start = np.maximum(lin, 1e-6)
    sol = least_squares(residuals, start, bounds=(0.0, np.inf), method="trf", x_scale=1.0,
                        ftol=1e-15, xtol=1e-15, gtol=1e-15, max_nfev=2000)
    a, b = float(sol.x[0] * ta), float(sol.x[1] * tb)
    # a term below 1e-9 of the times it is part of is the bound, not a measurement
    if a < 1e-9 * ta:
        a = 0.0
    if b * x.max() < 1e-9 * t.max():
        b = 0.0
    return a, b


def _fit_warnings(c: str, s: np.ndarray, n: np.ndarray, t: np.ndarray, a: float, b: float) -> tuple[dict, list[str]]:
    """The checks of the module docstring: figures and warning sentences."""
    order = np.argsort(s, kind="stable")
    k = min(END_POINTS, len(s))
    big, small = order[-k:], order[:k]
    model = a + b * n
    meas_bw = float(np.median(n[big] / t[big]))
    fit_bw = float(np.median(n[big] / model[big]))
    meas_small, fit_small = float(np.median(t[small])), float(np.median(model[small]))
    figures = {"measured_large_busbw_gb_s": meas_bw / 1e9, "fitted_large_busbw_gb_s": fit_bw / 1e9,
               "measured_small_time_us": meas_small * 1e6, "fitted_small_time_us": fit_small * 1e6}
    warn = []
    if abs(fit_bw / meas_bw - 1) > LARGE_BUSBW_TOLERANCE:
        warn.append(f"{c}: the fit's bus bandwidth at the largest sizes, {fit_bw / 1e9:.3g} GB/s, is "
                    f"{100 * (fit_bw / meas_bw - 1):+.0f} % off the measured {meas_bw / 1e9:.3g} GB/s "
                    f"(tolerance {100 * LARGE_BUSBW_TOLERANCE:.0f} %): the timings do not follow t = alpha + n / beta")
    if abs(fit_small / meas_small - 1) > SMALL_TIME_TOLERANCE:
        warn.append(f"{c}: the fit's time at the smallest sizes, {fit_small * 1e6:.3g} us, is "
                    f"{100 * (fit_small / meas_small - 1):+.0f} % off the measured {meas_small * 1e6:.3g} us "
                    f"(tolerance {100 * SMALL_TIME_TOLERANCE:.0f} %)")
    if a == 0.0:
        warn.append(f"{c}: latency fitted as 0 (no latency-bound sizes, smallest {s.min():.0f} B takes "
                    f"{t[order[0]] * 1e6:.3g} us): include small sizes (nccl-tests -b 8)")
    elif b * n[order[0]] > a:
        warn.append(f"{c}: even the smallest size ({s.min():.0f} B) is bandwidth-bound, so the latency "
                    f"({a * 1e6:.3g} us) is not measured: include small sizes (nccl-tests -b 8)")
    if b > 0 and 1.0 / b > 1.05 * float((n / t).max()):
        warn.append(f"{c}: bus bandwidth fitted as {1 / b / 1e9:.3g} GB/s, above every measured point "
                    f"(at most {(n / t).max() / 1e9:.3g} GB/s)")
    return figures, warn


def fit_alpha_beta(
    size_bytes: Sequence[float] | np.ndarray,
    time_s: Sequence[float] | np.ndarray,
    *,
    collective: str = "all_reduce",
    ranks: int = 2,
    weights: Sequence[float] | np.ndarray | None = None,
) -> AlphaBetaFit:
    """Fit alpha and beta of a link from timings of ``collective`` on ``ranks`` ranks.

    Args:
        size_bytes: collective sizes ``S`` (nccl-tests' ``size`` column: the total size for
            all-gather/reduce-scatter/all-to-all), bytes.
        time_s: the measured time of each, seconds.
        collective: a name :func:`ddlscope.model.collectives.canonical_collective` accepts
            (``all_reduce``, ``alltoall``, ``all_gather_perf``...).
        ranks: ``p`` (>= 2).
        weights: one weight per point; default :func:`regime_weights` (both ends of the sweep
            count; module docstring). ``numpy.ones`` weighs every point alike.

    Returns:
        :class:`AlphaBetaFit`, with ``alpha = A / k`` and ``beta`` from ``t = A + f(p) S / beta``
        (module docstring).

    Raises:
        ValueError: fewer than 2 ranks, bad timings (see :func:`fit_line_weighted_log`), or timings
            that do not grow with size (no bandwidth term to fit).
    """
    if ranks < 2:
        raise ValueError(f"ranks: a collective on {ranks} rank(s) moves nothing; expected >= 2")
    c = canonical_collective(collective)
    s = np.asarray(size_bytes, dtype=float)
    t = np.asarray(time_s, dtype=float)
    n = bus_factor(c, ranks) * s
    a, b = fit_line_weighted_log(n, t, weights)
    if b <= 0:
        raise ValueError(
            f"fit: {c} times do not grow with size over {s.min():.0f}-{s.max():.0f} B; no bandwidth to fit "
            "(include larger sizes)"
        )
    k = collective_steps(c, ranks)
    rel = (a + b * n - t) / t
    figures, warn = _fit_warnings(c, s, n, t, a, b)
    return AlphaBetaFit(
        collective=c, ranks=ranks, steps=k, alpha_s=a / k, beta_bytes_per_s=1.0 / b, latency_s=a,
        points=len(t), min_size_bytes=float(s.min()), max_size_bytes=float(s.max()),
        rms_rel_residual=float(np.sqrt(np.mean(rel**2))), max_rel_residual=float(np.max(np.abs(rel))),
        **figures, warnings=tuple(warn),
    )
