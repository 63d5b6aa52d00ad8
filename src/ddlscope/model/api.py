"""One-job entry points: the vectorised model on a one-row table.

These are conveniences over :func:`ddlscope.model.step_time.breakdown` and
:func:`ddlscope.model.scenarios.whatif`; a single job goes through exactly the same code as ten
million.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from ddlscope.model.jobs import job_row, jobs_frame
from ddlscope.model.scenarios import whatif
from ddlscope.model.step_time import breakdown
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import Catalog
from ddlscope.specs.scenario import Scenario
from ddlscope.specs.system import System
from ddlscope.specs.workload import Workload


def predict(
    workload: Workload,
    architecture: Architecture,
    system: System,
    *,
    overlap: str | float = "scheduled",
) -> pl.DataFrame:
    """The step-time breakdown of one job: a one-row DataFrame (columns: see
    :mod:`ddlscope.model.step_time`).

    Raises:
        ValueError: the job does not fit its placement, or a bad overlap.
    """
    return breakdown(jobs_frame([job_row(workload, architecture, system, overlap=overlap)]))


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
