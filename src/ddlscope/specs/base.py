"""What every spec shares: unknown fields, infinities and NaN are errors; specs are immutable."""

from __future__ import annotations

from pydantic import ConfigDict

SPEC_CONFIG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
"""The pydantic configuration of every spec (Workload, Architecture, System parts, Scenario)."""
