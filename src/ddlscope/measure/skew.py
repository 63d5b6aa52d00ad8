"""Rank skew: per-rank step times, the straggler rank and the component that makes it slow.

In synchronous data-parallel training every rank waits for the slowest one inside the
collectives: a straggler's peers show *longer* communication kernels (NCCL kernels spin while a
peer is late), the straggler itself the shortest. So the straggler is the rank with the most time
*outside* exposed communication, ``own_us = window_us - comm_exposed_us`` (its computation, copies
and idle time), averaged over iterations. The component that makes it slow is the non-communication
component (compute-bound, memory-bound, unclassified, device copies, data I/O, idle) whose mean
exceeds the median over ranks by the most. This is the reasoning of Holistic Trace Analysis'
straggler analysis (late-arriving ranks at collectives), applied to the measured breakdown.
"""

from __future__ import annotations

import polars as pl

c = pl.col

OWN_COMPONENTS: tuple[str, ...] = (
    "compute_bound_us", "memory_bound_us", "unclassified_us", "device_copy_us", "data_io_us", "idle_us",
)


def rank_skew(breakdown: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, object]]:
    """Per-rank means and the straggler.

    Args:
        breakdown: the per-iteration breakdown in microseconds (columns ``rank``, ``window_us``,
            ``cpu_step_us``, ``comm_exposed_us`` and :data:`OWN_COMPONENTS`).

    Returns:
        ``(per_rank, summary)``: ``per_rank`` has ``rank, iterations, step_us, cpu_step_us,
        own_us, comm_exposed_us``, the components, and ``own_excess_us`` (own time minus the
        median over ranks); ``summary`` has ``ranks``, ``straggler_rank``, ``straggler_excess_us``
        (its own time over the median), ``slow_component`` and ``slow_component_excess_us``,
        ``step_spread`` ((max - min) / mean step time). With one rank the summary says so and
        names no straggler.
    """
    per_rank = (
        breakdown.group_by("rank").agg(
            pl.len().alias("iterations"),
            c("window_us").mean().alias("step_us"),
            c("cpu_step_us").mean(),
            c("comm_exposed_us").mean(),
            *(c(k).mean() for k in OWN_COMPONENTS),
        )
        .with_columns(own_us=c("step_us") - c("comm_exposed_us"))
        .with_columns(own_excess_us=c("own_us") - c("own_us").median())
        .sort("rank")
    )
    summary: dict[str, object] = {"ranks": per_rank.height}
    if per_rank.height < 2:
        summary["note"] = "one rank: no skew to report"
        return per_rank, summary
    top = per_rank.sort("own_us", descending=True).row(0, named=True)
    medians = per_rank.select(c(k).median() for k in OWN_COMPONENTS).row(0, named=True)
    excess = {k: top[k] - medians[k] for k in OWN_COMPONENTS}
    slow = max(excess, key=lambda k: excess[k])
    steps = per_rank["step_us"]
    summary.update({
        "straggler_rank": top["rank"],
        "straggler_excess_us": top["own_excess_us"],
        "slow_component": slow.removesuffix("_us"),
        "slow_component_excess_us": excess[slow],
        "step_spread": (steps.max() - steps.min()) / steps.mean() if steps.mean() else None,
    })
    return per_rank, summary
