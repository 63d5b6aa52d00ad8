"""Overlap policies: how much weight/gradient communication may hide behind computation."""

from __future__ import annotations

OVERLAP_POLICIES: dict[str, float] = {"none": 0.0, "full": 1.0}
"""Named overlap policies: ``none`` adds every component (the PAI study's additive model), ``full``
hides communication behind computation as far as computation lasts. A number in [0, 1] is the
fraction of communication that may overlap."""


def overlap_fraction(policy: str | float) -> float:
    """The overlap fraction of a named policy (``none``, ``full``) or a number in [0, 1].

    Raises:
        ValueError: an unknown name or a number outside [0, 1].
    """
    if isinstance(policy, str):
        key = policy.strip().lower()
        if key in OVERLAP_POLICIES:
            return OVERLAP_POLICIES[key]
        try:
            value = float(key)
        except ValueError:
            raise ValueError(
                f"overlap: expected 'none', 'full' or a fraction in [0, 1], got {policy!r}"
            ) from None
    else:
        value = float(policy)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"overlap: expected a fraction in [0, 1], got {value}")
    return value
