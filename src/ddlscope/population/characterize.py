"""Characterize a job population: every job under every scenario, then the aggregates.

:func:`characterize` is the whole computation behind ``ddlscope characterize``: one vectorised
:func:`~ddlscope.model.scenarios.whatif` pass over Jobs x Scenarios, the aggregates of
:mod:`ddlscope.population.aggregates`, and the headline figures the PAI study (IISWC 2019)
reports, measured on this population (reconstruction: the study's own numbers are 62 % average
communication share, 60 % of PS/Worker jobs sped up by porting to all-reduce over NVLink, 1.7x
average speedup from 25 to 100 Gb/s Ethernet).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import polars as pl

from ddlscope.model.jobs import check_jobs_frame
from ddlscope.model.scenarios import whatif_blocks
from ddlscope.model.step_time import OUTPUT_COLUMNS, breakdown_lazy, collect
from ddlscope.population.aggregates import bottleneck_mix, component_shares, scenario_speedups, weighted_mean
from ddlscope.specs.catalog import Catalog
from ddlscope.specs.scenario import Scenario

c = pl.col

RESULT_COLUMNS: tuple[str, ...] = (
    "job_id", "scenario", "scenario_applied", "baseline_architecture", "architecture", "num_workers",
    "gpus_per_worker", "num_ps", "num_servers", "workload", "batch_size", "precision", "system", "gpu", "nic",
    "nvlink", "gpu_time_s", "gpu_time_source", *OUTPUT_COLUMNS, "speedup",
)
"""Columns kept per job x scenario (with the input's identifying columns, e.g. ``trace_job_id``,
``model``, ``source``): what the report and the aggregates need, not every model input."""
ID_COLUMNS: tuple[str, ...] = ("trace_job_id", "source", "model", "trace_model", "num_steps", "duration_s",
                               "shared_gpu", "status")

PORT_SCENARIO = "ps-to-allreduce-nvlink"
NIC_SCENARIO = "ethernet-100g"


@dataclass
class Characterization:
    """Everything ``ddlscope characterize`` reports.

    Attributes:
        results: one row per job x scenario: the Jobs columns, the model's outputs, ``speedup``,
            ``baseline_architecture``, ``gpu_time_s`` and any job-identifying columns of the input.
        shares: :func:`~ddlscope.population.aggregates.component_shares` of the baseline.
        bottlenecks: :func:`~ddlscope.population.aggregates.bottleneck_mix` of the baseline.
        speedups: :func:`~ddlscope.population.aggregates.scenario_speedups`.
        headline: the study's three headline figures measured on this population (see
            :func:`headline_figures`), plus counts.
        notes: caveats to print with the report (reconstructions, assumptions).
        excluded: jobs left out because their model does not fit the GPU's memory in the baseline
            (``job_id``, ``reason``); empty when none.
    """

    results: pl.DataFrame
    shares: pl.DataFrame
    bottlenecks: pl.DataFrame
    speedups: pl.DataFrame
    headline: dict[str, float | int | None]
    notes: list[str] = field(default_factory=list)
    excluded: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema={"job_id": pl.Int64,
                                                                                "reason": pl.String}))

    @property
    def baseline(self) -> pl.DataFrame:
        """The baseline rows of :attr:`results` (the first block: results hold one block of rows per
        scenario, each in the jobs' order)."""
        n = self.results.filter(c("scenario") == "baseline").height if self.results.height else 0
        return self.results.head(n)

    def per_job(self) -> pl.DataFrame:
        """One row per job: the baseline breakdown plus, per scenario, ``speedup_<scenario>`` and
        ``applied_<scenario>`` (the results' blocks are aligned by position, so no pivot is needed)."""
        base = self.baseline
        n = base.height
        names = [str(x) for x in self.results["scenario"].cast(pl.String).unique(maintain_order=True)][1:]
        cols = {}
        for i, name in enumerate(names, start=1):
            block = self.results.slice(i * n, n)
            cols[f"speedup_{name}"] = block["speedup"]
            cols[f"applied_{name}"] = block["scenario_applied"]
        return base.drop("scenario", "scenario_applied", "speedup").with_columns(**cols)


def headline_figures(results: pl.DataFrame, speedups: pl.DataFrame) -> dict[str, float | int | None]:
    """The PAI study's three headline figures, measured on ``results`` (job-weighted unless the
    name says ``gpu_time``).

    - ``mean_comm_share``: mean over jobs of the exposed weight/gradient communication share of
      the step time (PAI study: about 62 %), and ``mean_comm_share_gpu_time``;
    - ``ps_worker_sped_up_by_allreduce_port``: fraction of PS/Worker jobs that the
      ``ps-to-allreduce-nvlink`` port speeds up (PAI study: about 60 %), null without that scenario;
    - ``mean_speedup_ethernet_25_to_100``: mean speedup of 25 -> 100 Gb/s Ethernet over the jobs
      that use the network (PAI study: about 1.7x), and over all jobs; null without that scenario.
    """
    base = results.filter(c("scenario") == "baseline")
    return _headline(base, results.filter(c("scenario") == NIC_SCENARIO), speedups)


def _headline(base: pl.DataFrame, nic: pl.DataFrame, speedups: pl.DataFrame) -> dict[str, float | int | None]:
    """:func:`headline_figures` from the baseline rows and the NIC scenario's rows (either may be
    aligned with the baseline by position or not: the NIC rows are matched by ``job_id``)."""
    out: dict[str, float | int | None] = {
        "jobs": base.height,
        "gpus": int(base["num_gpus"].sum()),
        **base.select(  # the same weighted mean as every aggregate of the report (aggregates.weighted_mean)
            mean_comm_share=weighted_mean(c("share_comm"), pl.lit(1.0)),
            mean_comm_share_gpu_time=weighted_mean(c("share_comm"), c("gpu_time_s")),
        ).row(0, named=True),
    }

    def pick(scenario: str, arch: str, column: str) -> float | None:
        row = speedups.filter((c("weight") == "jobs") & (c("scenario") == scenario) & (c("architecture") == arch))
        return row[column].item() if row.height else None

    out["ps_worker_jobs"] = base.filter(c("architecture") == "ps_worker").height
    out["ps_worker_sped_up_by_allreduce_port"] = pick(PORT_SCENARIO, "ps_worker", "sped_up_share")
    uses_network = base["network_s"] > 0
    out["network_jobs"] = int(uses_network.sum())
    if nic.height and out["network_jobs"]:
        aligned = nic.height == base.height and (nic["job_id"] == base["job_id"]).all()
        speedup = (nic["speedup"].filter(uses_network) if aligned else
                   nic.join(base.filter(uses_network).select("job_id"), on="job_id")["speedup"])
        out["mean_speedup_ethernet_25_to_100"] = speedup.mean()
    else:
        out["mean_speedup_ethernet_25_to_100"] = None
    out["mean_speedup_ethernet_25_to_100_all_jobs"] = pick(NIC_SCENARIO, "all", "mean_speedup")
    return out


def _fill_gpu_time(jobs: pl.DataFrame, baseline: pl.DataFrame) -> pl.DataFrame:
    """``gpu_time_s`` where the trace gives none: ``num_steps x baseline step_s x num_gpus`` when the
    trace gives the job's steps (Gavel), else 0 (no weight in GPU-time aggregates). Adds
    ``gpu_time_source``: ``trace``, ``steps x predicted step time`` or ``unknown``.

    ``baseline`` is the model's breakdown of ``jobs``, row for row."""
    known = c("gpu_time_s").fill_null(0) > 0
    steps = c("num_steps") if "num_steps" in jobs.columns else pl.lit(None, pl.Float64)
    est = steps * pl.lit(baseline["step_s"]) * pl.lit(baseline["num_gpus"])
    return jobs.with_columns(
        gpu_time_source=pl.when(known).then(pl.lit("trace"))
        .when(est.is_not_null()).then(pl.lit("steps x predicted step time")).otherwise(pl.lit("unknown")),
        gpu_time_s=pl.when(known).then(c("gpu_time_s")).otherwise(est.fill_null(0.0)),
    )


def check_population(jobs: pl.DataFrame) -> None:
    """The checks :func:`characterize` makes on the whole population before any job is evaluated.

    Raises:
        ValueError: missing columns, no ``gpu_time_s`` column, an empty population, duplicate job ids.
    """
    check_jobs_frame(jobs)
    if "gpu_time_s" not in jobs.columns:
        raise ValueError("jobs: a gpu_time_s column is required (GPU-seconds per job; the GPU-time weight)")
    if jobs.height == 0:
        raise ValueError("jobs: the population is empty; nothing to characterize")
    if jobs["job_id"].n_unique() != jobs.height:
        raise ValueError("jobs: job_id must be unique")


def prepare_jobs(jobs: pl.DataFrame, require_gpu_memory: bool = True) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per job, before the scenarios: fill ``gpu_time_s`` (:func:`_fill_gpu_time`) and, with
    ``require_gpu_memory``, set aside the jobs whose baseline replica does not fit the GPU's memory.
    Row-wise, so a chunk of the population gives the chunk of the whole's result
    (:mod:`ddlscope.population.streaming`).

    Returns:
        ``(jobs, excluded)``: the jobs kept (in their order) and ``excluded`` (``job_id``, ``reason``).
    """
    # only what the GPU-time fill and the memory check read: the lazy query skips the rest of the
    # model (shares, bottlenecks), which the baseline block of whatif_blocks computes in full
    baseline = collect(breakdown_lazy(jobs).select(
        "job_id", "step_s", "num_gpus", "fits_gpu_memory", "peak_memory_bytes", "gpu", "gpu_memory_bytes"
    ))
    jobs = _fill_gpu_time(jobs, baseline)
    excluded = pl.DataFrame(schema={"job_id": pl.Int64, "reason": pl.String})
    if require_gpu_memory:
        unfit = baseline["fits_gpu_memory"].fill_null(True).not_()
        excluded = baseline.filter(unfit).select("job_id", pl.format(
            "exceeds GPU memory: a replica needs {} GiB, the {} has {} GiB",  # both in GiB (2**30 bytes)
            (c("peak_memory_bytes") / 2**30).round(1), c("gpu"), (c("gpu_memory_bytes") / 2**30).round(1),
        ).alias("reason"))
        jobs = jobs.filter(unfit.not_())
    return jobs, excluded


def result_columns(jobs: pl.DataFrame) -> list[str]:
    """The columns kept per job x scenario: :data:`RESULT_COLUMNS` with the input's :data:`ID_COLUMNS`."""
    return [*RESULT_COLUMNS[:2], *(k for k in ID_COLUMNS if k in jobs.columns), *RESULT_COLUMNS[2:]]


def characterize(
    jobs: pl.DataFrame,
    scenarios: Sequence[Scenario],
    catalog: Catalog | None = None,
    notes: Sequence[str] = (),
    require_gpu_memory: bool = True,
) -> Characterization:
    """Run every job of ``jobs`` under the baseline and every scenario and aggregate.

    Args:
        jobs: a Jobs table (:data:`~ddlscope.model.jobs.JOB_SCHEMA`) with unique ``job_id`` and a
            ``gpu_time_s`` column (GPU-seconds of the job; 1 per GPU when unknown). Extra columns
            (model, source, ...) are carried into the results.
        scenarios: the what-ifs.
        catalog: the catalog scenarios resolve names in (default: built-in).
        notes: caveats to carry into the report.
        require_gpu_memory: leave out (and list in ``excluded``) jobs whose baseline replica does
            not fit the GPU's memory (``fits_gpu_memory`` false; jobs of unknown peak memory stay).

    Raises:
        ValueError: an empty population, missing columns, duplicate job ids or scenario names.
    """
    check_population(jobs)
    jobs, excluded = prepare_jobs(jobs, require_gpu_memory)
    if jobs.height == 0:
        raise ValueError("jobs: no job fits its GPU's memory; nothing to characterize")
    columns = result_columns(jobs)
    blocks = list(whatif_blocks(jobs, scenarios, catalog, columns=columns))
    speedups = scenario_speedups(blocks[0]) if len(blocks) == 1 else pl.concat(
        [scenario_speedups(pl.concat([blocks[0].head(0), b])) for b in blocks[1:]])
    results = pl.concat(blocks, how="vertical_relaxed")
    base = blocks[0]
    return Characterization(
        results=results,
        shares=component_shares(base),
        bottlenecks=bottleneck_mix(base),
        speedups=speedups,
        headline=_headline(base, next((b for b in blocks[1:] if b["scenario"][0] == NIC_SCENARIO), base.head(0)),
                           speedups),
        notes=list(notes),
        excluded=excluded,
    )
