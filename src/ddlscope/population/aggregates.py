"""Aggregates over a population's per-job breakdowns, weighted by job count and by GPU-time.

Input: the output of :func:`ddlscope.model.scenarios.whatif` (one row per job x scenario) with a
``gpu_time_s`` column (the job's GPU-seconds in the trace: duration x GPUs; the GPU-time weight).
Every aggregate is computed for both weights; ``weight`` is ``jobs`` (each job counts 1) or
``gpu_time`` (each job counts its GPU-seconds).

Weighted mean ``sum(w x) / sum(w)`` (:func:`weighted_mean`, over the rows whose value and weight
are known; null, not NaN, when the weights sum to 0); weighted quantile q: the smallest x whose cumulative weight
share (rows sorted by x) reaches q (the inverse of the weighted empirical CDF, Hyndman & Fan 1996
type 1 with weights).
"""

from __future__ import annotations

import polars as pl

from ddlscope.model.step_time import COMPONENTS

c = pl.col
WEIGHTS: dict[str, pl.Expr] = {"jobs": c("_one"), "gpu_time": c("gpu_time_s")}
"""The two weightings of every aggregate."""
SPEEDUP_EPS = 1e-9
"""A job counts as sped up when its speedup exceeds 1 + SPEEDUP_EPS."""
MATERIAL_SPEEDUP = 1.05
"""A job counts as *materially* sped up when its speedup is at least 5 %."""


def weighted_mean(x: pl.Expr, w: pl.Expr) -> pl.Expr:
    """The weighted arithmetic mean ``sum(w x) / sum(w)``: the one helper behind every job-weighted
    and GPU-time-weighted mean of the population analysis.

    For an aggregation context (``group_by().agg``, ``select`` over a frame): one Float64 value.

    Args:
        x: the values (any numeric expression; a boolean one gives the weighted *share* of rows
            where it holds, e.g. of jobs sped up).
        w: non-negative weights (``jobs``: 1 per job; ``gpu_time``: the job's GPU-seconds).

    Returns:
        The mean over the rows where both ``x`` and ``w`` are known (a row with an unknown value
        or weight is left out of both sums, so it cannot bias the mean towards 0); null when
        those weights sum to 0 (e.g. GPU-time weighting of jobs none of which has a GPU time),
        never NaN.
    """
    known = x.is_not_null() & w.is_not_null()
    xf, wf = x.cast(pl.Float64), w.cast(pl.Float64)
    total = wf.filter(known).sum()
    return pl.when(total > 0).then((xf * wf).filter(known).sum() / total)


def weighted_quantile(x: pl.Expr, w: pl.Expr, q: float) -> pl.Expr:
    """The weighted quantile ``q`` of ``x`` (inverse weighted ECDF), for an aggregation context."""
    cum = w.sort_by(x).cum_sum() / w.sum()
    return x.sort().filter(cum >= q - 1e-12).first()


def _per_weight(frame: pl.DataFrame, by: list[str], make_aggs) -> pl.DataFrame:
    """Aggregate ``frame`` per ``by`` + ``architecture`` and per ``by`` alone (``architecture`` =
    ``all``), once for each weighting; long format with a ``weight`` column.

    ``make_aggs(w)`` returns the aggregation expressions for weight expression ``w``. Both
    weightings and both levels are four group-bys over the same frame (no copies of it).
    """
    lf = frame.lazy().with_columns(_one=pl.lit(1.0))  # the job-count weight, as a column
    parts = []
    for name, w in WEIGHTS.items():
        w = w.cast(pl.Float64).fill_null(0.0)
        aggs = [pl.len().alias("jobs"), *make_aggs(w)]
        parts.append(lf.group_by([*by, "architecture"]).agg(aggs).with_columns(weight=pl.lit(name)))
        parts.append(lf.group_by(by).agg(aggs).with_columns(weight=pl.lit(name), architecture=pl.lit("all")))
    # one after the other, not pl.collect_all: four concurrent group-bys each sort their weighted
    # quantile's column, four times the transient memory (streamed characterize at 10 M jobs)
    out = pl.concat([p.collect() for p in parts], how="diagonal")
    return out.select("weight", *by, "architecture", pl.exclude("weight", *by, "architecture"))


def component_shares(baseline: pl.DataFrame) -> pl.DataFrame:
    """Mean share of each step-time component per architecture (and ``all``), per weighting.

    Args:
        baseline: per-job breakdown rows of one scenario (usually the baseline); columns
            ``architecture``, ``gpu_time_s``, ``share_<component>``, ``share_comm``.

    Returns:
        Columns ``weight``, ``architecture`` (string; ``all`` for the whole population), ``jobs``
        (row count), ``gpu_time_s`` (sum), ``mean_share_<component>`` for the six components,
        ``mean_share_comm`` and the weighted ``p10/p50/p90_share_comm``.
    """
    def aggs(w: pl.Expr) -> list[pl.Expr]:
        return [
            c("gpu_time_s").sum(),
            *(weighted_mean(c(f"share_{k}"), w).alias(f"mean_share_{k}") for k in COMPONENTS),
            weighted_mean(c("share_comm"), w).alias("mean_share_comm"),
            *(weighted_quantile(c("share_comm"), w, q).alias(f"p{int(q * 100)}_share_comm") for q in (0.1, 0.5, 0.9)),
        ]

    df = baseline.select("architecture", "gpu_time_s", *(f"share_{k}" for k in COMPONENTS), "share_comm")
    return _per_weight(df.with_columns(c("architecture").cast(pl.String)), [], aggs).sort("weight", "architecture")


def bottleneck_mix(baseline: pl.DataFrame) -> pl.DataFrame:
    """Share of jobs (by each weighting) whose bottleneck is each component, per architecture.

    Returns:
        Columns ``weight``, ``architecture`` (``all`` included), ``bottleneck``, ``share`` (the
        weighted fraction of the architecture's jobs; sums to 1 per weight and architecture).
    """
    df = baseline.select(c("architecture").cast(pl.String), c("bottleneck").cast(pl.String), "gpu_time_s")
    out = _per_weight(df, ["bottleneck"], lambda w: [w.sum().alias("_sum")])
    return (
        out.with_columns(share=c("_sum") / c("_sum").sum().over("weight", "architecture"))
        .select("weight", "architecture", "bottleneck", "share").sort("weight", "architecture", "bottleneck")
    )


def scenario_speedups(results: pl.DataFrame) -> pl.DataFrame:
    """Per scenario and baseline architecture (and ``all``): how many jobs a change speeds up.

    Args:
        results: :func:`~ddlscope.model.scenarios.whatif` output with ``gpu_time_s``.

    Returns:
        Columns ``weight``, ``scenario``, ``architecture`` (the job's *baseline* architecture,
        ``all`` included), ``jobs``, ``applied_share`` (weighted fraction of jobs the scenario
        applies to), ``sped_up_share`` (speedup > 1), ``materially_sped_up_share`` (speedup >=
        1.05), ``slowed_share`` (speedup < 1), ``mean_speedup``, ``median_speedup`` (weighted,
        unapplied jobs count with speedup 1), ``mean_speedup_applied`` (over applied jobs only).
    """
    s = c("speedup")

    def aggs(w: pl.Expr) -> list[pl.Expr]:
        applied = c("scenario_applied")
        return [
            weighted_mean(applied, w).alias("applied_share"),
            weighted_mean(s > 1 + SPEEDUP_EPS, w).alias("sped_up_share"),
            weighted_mean(s >= MATERIAL_SPEEDUP, w).alias("materially_sped_up_share"),
            weighted_mean(s < 1 - SPEEDUP_EPS, w).alias("slowed_share"),
            weighted_mean(s, w).alias("mean_speedup"),
            weighted_quantile(s, w, 0.5).alias("median_speedup"),
            weighted_mean(s, w * applied).alias("mean_speedup_applied"),  # weight 0 for unapplied jobs
        ]

    not_base = results.get_column("scenario") != "baseline"  # no filtered copy when no row is a baseline one
    df = (results if not_base.all() and not not_base.null_count() else results.filter(not_base)).select(
        c("scenario").cast(pl.String), c("baseline_architecture").cast(pl.String).alias("architecture"),
        "gpu_time_s", "speedup", "scenario_applied")
    out = _per_weight(df, ["scenario"], aggs)
    dtype = results.schema["scenario"]
    names = list(dtype.categories) if isinstance(dtype, pl.Enum) else results["scenario"].unique(maintain_order=True)
    order = {name: i for i, name in enumerate(names)}
    return out.sort(c("scenario").replace_strict(order, return_dtype=pl.Int64), "weight", "architecture")
