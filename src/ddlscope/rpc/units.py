"""How durations read: one formatter for the RPC analyses' messages and the reports' sentences."""

from __future__ import annotations

import math


def human_us(x: float | None) -> str:
    """A duration in µs in the largest unit that keeps it at or above 1: ``476 µs``, ``2.19 ms``,
    ``1.5 s``, ``2.25 min``, ``37.5 h`` (hours up to 10 days), ``12.5 days``, ``31 years`` (a year of
    365.25 days; 3 significant digits; ``-`` when unknown)."""
    if x is None or not math.isfinite(x):
        return "-"
    sign = "-" if x < 0 else ""
    a = abs(x)
    for unit, size_us, least in (("years", 365.25 * 86_400e6, 1), ("days", 86_400e6, 10), ("h", 3_600e6, 1),
                                 ("min", 60e6, 1), ("s", 1e6, 1), ("ms", 1e3, 1)):
        if a >= least * size_us:
            return f"{sign}{a / size_us:.3g} {unit}"
    return f"{sign}{a:.3g} µs"
