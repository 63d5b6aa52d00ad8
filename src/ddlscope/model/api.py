"""One-job entry points: the vectorised model on a one-row table.

These are conveniences over :func:`ddlscope.model.step_time.breakdown` and
:func:`ddlscope.model.scenarios.whatif`. :func:`predict` without an op table evaluates the one job
with :func:`ddlscope.model.scalar.breakdown_one`, the same formulas on floats (equal to the
vectorised model to 1e-9 relative, ``tests/model/test_scalar.py``), because a one-row Polars query
spends its milliseconds planning; with an op table it runs the vectorised model on a one-row table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache

import polars as pl

from ddlscope.model.compute import price_jobs
from ddlscope.model.jobs import job_row, jobs_frame
from ddlscope.model.scalar import breakdown_one
from ddlscope.model.scenarios import whatif
from ddlscope.model.step_time import breakdown, breakdown_lazy
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import Catalog
from ddlscope.specs.efficiency import ComputeEfficiency
from ddlscope.specs.scenario import Scenario
from ddlscope.specs.system import System
from ddlscope.specs.workload import Workload


def predict(
    workload: Workload,
    architecture: Architecture,
    system: System,
    *,
    overlap: str | float = "scheduled",
    ops: pl.DataFrame | None = None,
    efficiencies: Mapping[str, ComputeEfficiency] | ComputeEfficiency | None = None,
    catalog: Catalog | None = None,
) -> pl.DataFrame:
    """The step-time breakdown of one job: a one-row DataFrame (columns: see
    :mod:`ddlscope.model.step_time`).

    Args:
        workload, architecture, system: the job.
        overlap: the overlap policy (``none``, ``full`` or a fraction).
        ops: the workload's op table (``ddlscope.profile.profile_model(...).ops``, profiled at the
            workload's batch and precision): compute is then priced op by op on the system's GPU
            (:mod:`ddlscope.model.compute`) and the row carries ``compute_efficiency_source``;
            without it the totals path (``eff_compute``, ``eff_memory``) prices it.
        efficiencies: overrides of the catalog's compute efficiencies (one object, or a mapping
            generation -> object), only with ``ops``.
        catalog: for the GPU's generation and default efficiencies (default: built-in).

    Raises:
        ValueError: the job does not fit its placement, or a bad overlap.
    """
    row = job_row(workload, architecture, system, overlap=overlap)
    if ops is None:  # the fast path: the same model on floats, one row built with breakdown's schema
        return pl.DataFrame([breakdown_one(row)], schema=_breakdown_schema(), orient="row")
    jobs = price_jobs(jobs_frame([row]), {workload.name: ops}, efficiencies, catalog,
                      gpus={system.gpu.name: system.gpu})
    return breakdown(jobs)


@cache
def _breakdown_schema() -> pl.Schema:
    """The columns and dtypes of :func:`breakdown` on a Jobs table (planned once, not evaluated)."""
    return breakdown_lazy(jobs_frame([])).collect_schema()


def predict_whatif(
    workload: Workload,
    architecture: Architecture,
    system: System,
    scenarios: Sequence[Scenario],
    *,
    overlap: str | float = "scheduled",
    catalog: Catalog | None = None,
) -> pl.DataFrame:
    """One job under the baseline and each scenario: one row each, with ``speedup`` over the
    baseline (see :func:`ddlscope.model.scenarios.whatif`).

    Raises:
        ValueError: the job does not fit, duplicate scenario names, a wrong link kind.
        CatalogError: a scenario names an unknown catalog entry.
    """
    jobs = jobs_frame([job_row(workload, architecture, system, overlap=overlap)])
    return whatif(jobs, scenarios, catalog)
