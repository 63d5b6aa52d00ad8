"""Overlap policies: how much weight/gradient communication may hide behind computation."""

from __future__ import annotations

OVERLAP_POLICIES: dict[str, float | None] = {"scheduled": None, "none": 0.0, "full": 1.0}
"""Named overlap policies. ``scheduled`` (the default of ``predict`` and ``whatif``): the framework's
schedule, gradient buckets all-reduced one after another as the backward produces them, the last
one exposed, plus the wait for the slowest rank (:mod:`ddlscope.model.overlap`); it is stored as a
null ``overlap_fraction``. ``none`` adds every component (the PAI study's additive model, kept by
``characterize``), ``full`` hides communication behind computation as far as computation lasts. A
number in [0, 1] is the fraction of communication that may overlap (``hidden = min(f comm,
compute)``)."""


def overlap_fraction(policy: str | float | None) -> float | None:
    """The overlap fraction of a named policy (``scheduled`` -> ``None``, ``none`` -> 0, ``full`` -> 1)
    or a number in [0, 1]; ``None`` is ``scheduled``.

    Raises:
        ValueError: an unknown name or a number outside [0, 1].
    """
    if policy is None:
        return None
    if isinstance(policy, str):
        key = policy.strip().lower()
        if key in OVERLAP_POLICIES:
            return OVERLAP_POLICIES[key]
        try:
            value = float(key)
        except ValueError:
            raise ValueError(
                f"overlap: expected 'scheduled', 'none', 'full' or a fraction in [0, 1], got {policy!r}"
            ) from None
    else:
        value = float(policy)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"overlap: expected a fraction in [0, 1], got {value}")
    return value
