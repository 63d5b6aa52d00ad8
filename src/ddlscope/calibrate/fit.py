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

The fit is linear least squares for ``(A, 1/beta)`` in ``t_i = A + n_i / beta`` with both unknowns
constrained to be non-negative, each residual divided by its ``t_i`` (relative residuals): timings
span five decades from 8 B to GBs, and an unweighted fit would let the largest messages decide
alone, leaving ``A`` to rounding. Noise-free timings of the model are recovered exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import lsq_linear

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
        return {**asdict(self), "latency_us": self.latency_us, "bandwidth_gb_s": self.bandwidth_gb_s}


def fit_line_relative(x: Sequence[float] | np.ndarray, t: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Non-negative least squares of ``t = a + b x`` on relative residuals ``(a + b x_i - t_i) / t_i``.

    Returns ``(a, b)``.

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
    # scale columns to O(1) for a well-conditioned solve
    xs = x.max()
    design = np.column_stack([np.ones_like(x), x / xs]) / t[:, None]
    sol = lsq_linear(design, np.ones_like(t), bounds=(0.0, np.inf), method="bvls", tol=1e-14)
    a, b = float(sol.x[0]), float(sol.x[1] / xs)
    return a, b


def fit_alpha_beta(
    size_bytes: Sequence[float] | np.ndarray,
    time_s: Sequence[float] | np.ndarray,
    *,
    collective: str = "all_reduce",
    ranks: int = 2,
) -> AlphaBetaFit:
    """Fit alpha and beta of a link from timings of ``collective`` on ``ranks`` ranks.

    Args:
        size_bytes: collective sizes ``S`` (nccl-tests' ``size`` column: the total size for
            all-gather/reduce-scatter/all-to-all), bytes.
        time_s: the measured time of each, seconds.
        collective: a name :func:`ddlscope.model.collectives.canonical_collective` accepts
            (``all_reduce``, ``alltoall``, ``all_gather_perf``...).
        ranks: ``p`` (>= 2).

    Returns:
        :class:`AlphaBetaFit`, with ``alpha = A / k`` and ``beta`` from ``t = A + f(p) S / beta``
        (module docstring).

    Raises:
        ValueError: fewer than 2 ranks, bad timings (see :func:`fit_line_relative`), or timings
            that do not grow with size (no bandwidth term to fit).
    """
    if ranks < 2:
        raise ValueError(f"ranks: a collective on {ranks} rank(s) moves nothing; expected >= 2")
    c = canonical_collective(collective)
    s = np.asarray(size_bytes, dtype=float)
    t = np.asarray(time_s, dtype=float)
    n = bus_factor(c, ranks) * s
    a, b = fit_line_relative(n, t)
    if b <= 0:
        raise ValueError(
            f"fit: {c} times do not grow with size over {s.min():.0f}-{s.max():.0f} B; no bandwidth to fit "
            "(include larger sizes)"
        )
    k = collective_steps(c, ranks)
    rel = (a + b * n - t) / t
    return AlphaBetaFit(
        collective=c, ranks=ranks, steps=k, alpha_s=a / k, beta_bytes_per_s=1.0 / b, latency_s=a,
        points=len(t), min_size_bytes=float(s.min()), max_size_bytes=float(s.max()),
        rms_rel_residual=float(np.sqrt(np.mean(rel**2))), max_rel_residual=float(np.max(np.abs(rel))),
    )
