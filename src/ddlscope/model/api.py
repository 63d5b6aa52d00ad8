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

from ddlscope.model import arch_costs
from ddlscope.model.compute import price_jobs
from ddlscope.model.jobs import job_row, jobs_frame
from ddlscope.model.scalar import breakdown_one
from ddlscope.model.scenarios import OpPricing, whatif
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
    if ops is None and row["architecture"] not in arch_costs.costed_kinds():
        # the fast path: the same model on floats, one row built with breakdown's schema (the six
        # PAI-study architectures; fsdp/3d have their own cost functions in the vectorised model)
        return pl.DataFrame([breakdown_one(row)], schema=_breakdown_schema(), orient="row")
    jobs = jobs_frame([row])
    if ops is not None:
        jobs = price_jobs(jobs, {workload.name: ops}, efficiencies, catalog, gpus={system.gpu.name: system.gpu})
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
    ops: pl.DataFrame | Mapping[str, pl.DataFrame] | None = None,
    efficiencies: Mapping[str, ComputeEfficiency] | ComputeEfficiency | None = None,
    catalog: Catalog | None = None,
) -> pl.DataFrame:
    """One job under the baseline and each scenario: one row each, with ``speedup`` over the
    baseline (see :func:`ddlscope.model.scenarios.whatif`).

    Args:
        workload, architecture, system, scenarios: the job and the what-ifs.
        overlap: the overlap policy (as :func:`predict`).
        ops: the workload's op table (as :func:`predict`), or a mapping precision -> op table
            profiled at that precision (for scenarios that change it): the baseline and every
            scenario are then priced op by op on their own GPU and precision, so the baseline
            equals :func:`predict` with the same table and a GPU swap re-prices every op on the
            new GPU. A scenario whose precision has no table is priced from the totals.
        efficiencies: overrides of the catalog's compute efficiencies, only with ``ops``.
        catalog: for scenarios' hardware and the GPUs' generations (default: built-in).

    Raises:
        ValueError: the job does not fit, duplicate scenario names, a wrong link kind.
        CatalogError: a scenario names an unknown catalog entry.
    """
    jobs = jobs_frame([job_row(workload, architecture, system, overlap=overlap)])
    pricing = None
    if ops is not None:
        tables: dict[str | tuple[str, str], pl.DataFrame] = (
            {(workload.name, p): t for p, t in ops.items()} if isinstance(ops, Mapping)
            else {(workload.name, workload.precision): ops})
        pricing = OpPricing(tables, efficiencies, catalog, gpus={system.gpu.name: system.gpu})
    return whatif(jobs, scenarios, catalog, pricing=pricing)
