"""The tables and headline values ``ddlscope trace`` prints (and writes into its report).

Times are shown in milliseconds (``_ms``); ``--format json`` prints the same tables plus the full
per-iteration table in microseconds. Means over iterations are over the iterations in the means
(:attr:`ddlscope.measure.analysis.TraceAnalysis.steady`: warm-up iterations left out).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ddlscope.measure.analysis import TraceAnalysis
from ddlscope.measure.timeline import IDLE_CAUSES
from ddlscope.report.trace_notes import trace_notes

c = pl.col


def _ms(col: str, alias: str | None = None) -> pl.Expr:
    return (c(col) / 1e3).alias(alias or col.removesuffix("_us") + "_ms")


def _weighted(col: str) -> pl.Expr:
    """Time-weighted mean of a bandwidth column over the rows where it is known."""
    known = c(col).is_not_null()
    return (c(col) * c("time_us")).filter(known).sum() / c("time_us").filter(known).sum()


def sections(a: TraceAnalysis, compact: bool = False) -> list[tuple[str, pl.DataFrame, str, str | None]]:
    """The tables ``ddlscope trace`` prints, in order: ``(name, frame, title, caption)``.

    Times are shown in milliseconds (``_ms``); ``--format json`` prints the same tables. With
    ``compact`` (the console table), the communication columns of the breakdown are left out when
    the trace has no communication at all (the caption says so); JSON and CSV keep every column.
    """
    bd = a.breakdown
    multi = bd.group_by("rank").agg(c("device").n_unique()).select(c("device").max()).item() > 1
    keys = ["rank", "device", "iteration"] if multi else ["rank", "iteration"]  # a rank driving several GPUs
    warm = bd["warmup"].is_not_null().any()
    flag = ["warmup"] if warm else []
    out: list[tuple[str, pl.DataFrame, str, str | None]] = []
    warm_caption = ("; warmup: labelled = the trace marks the iteration as warm-up, slow first = the first "
                    f"iteration took over {a.warmup.get('factor', 3):g}x the median of the others"
                    + ("; kept in the means" if bd["in_means"].all() else "; not in the means, the skew or the "
                       "what-if baseline") + " (see the notes)") if warm else ""
    no_comm = compact and not (bd["comm_busy_us"] > 0).any()
    comm_cols = [] if no_comm else [
        _ms("comm_busy_us", "comm_total_ms"),
        pl.when(c("comm_busy_us") > 0).then(c("comm_overlapped_us") / c("comm_busy_us")).alias("comm_overlap")]
    comm_caption = ("no communication kernels in the trace (comm_exposed = 0)" if no_comm else
                    "comm_exposed = communication with no computation kernel running; comm_total = all communication "
                    "time, comm_overlap = the share of it hidden under computation")
    out.append(("breakdown", bd.select(
        *keys, *flag,
        _ms("window_us", "step_ms"), _ms("compute_bound_us"), _ms("memory_bound_us"), _ms("unclassified_us"),
        _ms("comm_exposed_us"), _ms("device_copy_us"), _ms("data_io_us"), _ms("idle_us"),
        *comm_cols,
        cpu_step_ms=c("cpu_step_us") / 1e3,
    ), "Per-iteration breakdown (ms): exclusive components + idle = step",
        comm_caption + "; cpu_step = the iteration marker's duration" + warm_caption))
    out.append(("idle", bd.select(
        *keys, *flag, _ms("idle_us"), *(_ms(f"idle_{k}_us", f"{k}_ms") for k in IDLE_CAUSES),
        gaps=c("idle_gaps"),
    ), "GPU idle time by visible cause (ms)",
        "data_loader / synchronisation / kernel_launch: the host was late launching the next GPU work "
        "(waiting on the input pipeline, after a blocking CUDA call, or busy elsewhere); dependency: queued "
        "work waited on an event or another stream"))
    steady = a.steady
    n_it = steady.group_by("rank").agg(_n=pl.len())
    coll = (
        a.collectives.join(steady.select("rank", "device", "iteration"), on=["rank", "device", "iteration"],
                           how="semi")
        .join(n_it, on="rank")
        .group_by("rank", "collective").agg(
            calls=c("calls").sum() / c("_n").first(),
            msg_size_bytes=c("size_bytes").sum() / c("calls").sum(),
            time_ms=c("time_us").sum() / c("_n").first() / 1e3,
            exposed_ms=c("exposed_us").sum() / c("_n").first() / 1e3,
            algbw_gb_s=_weighted("algbw_gb_s"),
            busbw_gb_s=_weighted("busbw_gb_s"),
            size_source=c("size_source").mode().first(),
            bw_approx=c("bw_approx").any(),
        )
        .with_columns(msg_size_bytes=pl.when(c("size_source") != "unknown").then(c("msg_size_bytes")),
                      algbw_gb_s=pl.when(c("algbw_gb_s").is_finite()).then(c("algbw_gb_s")),
                      busbw_gb_s=pl.when(c("busbw_gb_s").is_finite()).then(c("busbw_gb_s")))
        .sort("rank", "time_ms", descending=[False, True])
    )
    if coll.height:
        out.append(("collectives", coll, "Collectives per iteration (means)",
                    "msg_size = nccl-tests S per call; bandwidths from kernel time (includes waiting for peers); "
                    "bw_approx = an all-to-all without (complete) split sizes: busbw assumes even splits"
                    + ("; warm-up iterations not in the means" if a.warmup.get("excluded") else "")))
    out.append(("temporal", a.temporal.select(
        "rank", "idle_pct", "compute_pct", "non_compute_pct", "comm_overlap_pct", _ms("span_us")),
        "Temporal breakdown in Holistic Trace Analysis' terms (% of the GPU span of the iterations)",
        "compute = compute-bound + memory-bound + unclassified kernels; comm_overlap = share of communication "
        "time overlapped by computation"))
    if a.skew.height > 1:
        out.append(("skew", a.skew.select(
            "rank", "iterations", _ms("step_us"), _ms("cpu_step_us"), _ms("own_us"), _ms("comm_exposed_us"),
            _ms("compute_bound_us"), _ms("memory_bound_us"), _ms("data_io_us"), _ms("idle_us"),
            _ms("own_excess_us")),
            "Rank skew (means per iteration, ms)",
            "own = step - exposed communication: a straggler's peers wait for it inside the collectives; the "
            "straggler is the rank with the most own time" + ("; warm-up iterations not in the means"
                                                               if a.warmup.get("excluded") else "")))
    if a.whatif is not None:
        out.append(("whatif", a.whatif.drop("description"), "What-if from the measured baseline",
                    "each measured component rescaled by the step-time model's ratio scenario/baseline; "
                    "idle time unchanged; speedup = measured / predicted step; baseline = the mean over the "
                    f"{a.steady.height} (rank, iteration) rows in the means"
                    + (f", {a.warmup['excluded']} warm-up row(s) left out" if a.warmup.get("excluded") else "")))
    if a.model_check is not None:
        mc = a.model_check
        if mc["rank"].n_unique() > 1:  # one row per component: means over ranks
            mc = mc.group_by("component", maintain_order=True).agg(
                ranks=pl.len(), measured_us=c("measured_us").mean(), predicted_us=c("predicted_us").mean(),
                basis=c("basis").first(),
            ).with_columns(error=c("predicted_us") / c("measured_us") - 1.0)
            first = ["component", "ranks"]
        else:
            first = ["rank", "component"]
        out.append(("model_check", mc.select(
            *first, _ms("measured_us"), _ms("predicted_us"), "error", "basis"),
            "Model check: the analytical model for the traced workload and hardware (per iteration)",
            "error = predicted / measured - 1" + ("; means over ranks (--format json for each rank)"
                                                  if "ranks" in first else "")))
    if a.unclassified.height:
        out.append(("unclassified", a.unclassified.head(15).with_columns(_ms("time_us")).drop("time_us"),
                    "Kernels no rule classifies (counted as unclassified)", "add rules with --rules FILE"))
    return out


def _iteration_rule(ranks: pl.DataFrame) -> str:
    """How iterations were found: the rule when all ranks share it, else ``rank 0: ...; rank 1: ...``."""
    rules = ranks.sort("rank").select("rank", "iteration_rule")
    if rules["iteration_rule"].n_unique() == 1:
        return str(rules["iteration_rule"][0])
    return "; ".join(f"rank {r}: {rule}" for r, rule in rules.iter_rows())


def straggler_ms(excess_us: float) -> str:
    """A straggler's excess time (microseconds) as the report writes it everywhere (headline,
    summary, console, figure): milliseconds to three decimals, the microsecond (``"0.123 ms"``)."""
    return f"{excess_us / 1e3:.3f} ms"


_SLOW_LABELS = {"data_io": "data I/O", "device_copy": "device copies"}


def straggler_sentence(skew_summary: dict[str, Any]) -> str:
    """The straggler in one sentence, without a final full stop, written once for the console,
    ``summary.json`` and the HTML headline: ``"rank 3: 0.123 ms more non-communication time per
    iteration than the median rank, mostly compute-bound (+0.100 ms)"``. With two ranks the median
    is their mean, and the sentence says so. "mostly" is said where the component carries at least
    half of the excess, otherwise the sentence names the largest component; what the other
    components add together (negative where they are below the median) is said beside it unless it
    is within 5 % of the excess.

    Args:
        skew_summary: :func:`ddlscope.measure.skew.rank_skew`'s summary of two or more ranks
            (``ranks``, ``straggler_rank``, ``straggler_excess_us``, ``slow_component``,
            ``slow_component_excess_us``).

    Raises:
        KeyError: a one-rank summary (it names no straggler).
    """
    slow = str(skew_summary["slow_component"])
    label = _SLOW_LABELS.get(slow, slow.replace("_", "-"))
    total, part = float(skew_summary["straggler_excess_us"]), float(skew_summary["slow_component_excess_us"])
    median = ("the mean of the 2 ranks (their median)" if skew_summary.get("ranks") == 2
              else "the median rank")
    rest = total - part
    others = f"the others {'+' if rest >= 0 else '-'}{straggler_ms(abs(rest))} together"
    if part >= 0.5 * total:
        where = f"mostly {label} (+{straggler_ms(part)}" + (f"; {others})" if abs(rest) > 0.05 * abs(total) else ")")
    else:
        where = f"the largest component {label} (+{straggler_ms(part)}; {others})"
    return (f"rank {skew_summary['straggler_rank']}: {straggler_ms(total)} more non-communication time per "
            f"iteration than {median}, {where}")


def summary(a: TraceAnalysis) -> dict[str, Any]:
    """The headline values and notes printed after the tables (and written as ``summary.json``).

    ``iterations`` counts every (rank, iteration) row, ``iterations_in_means`` those in the means;
    ``mean_step_ms`` is over the latter; ``iteration_rule`` says how the iterations were found
    (``"ProfilerStep markers"``, ``"2 optimizer steps per iteration (repeating structure)"``,
    ``"whole trace as one iteration"``; per rank when the ranks differ); ``warmup_excluded`` (when
    warm-up rows were left out) names them.
    """
    steady = a.steady
    s: dict[str, Any] = {
        "ranks": a.ranks.height,
        "iterations": a.breakdown.height,
        "iterations_in_means": steady.height,
        "mean_step_ms": steady["window_us"].mean() / 1e3,
        "iteration_rule": _iteration_rule(a.ranks),
        "precision": a.precision,
    }
    if a.warmup.get("excluded"):
        left = a.breakdown.filter(~c("in_means")).group_by("warmup", maintain_order=True).agg(
            c("iteration").unique(maintain_order=True), rows=pl.len(), step_ms=c("window_us").mean() / 1e3)
        s["warmup_excluded"] = "; ".join(
            f"iteration {', '.join(map(str, its))} ({kind}): {ms:.4g} ms"
            + (f" (mean of {rows} rank rows)" if rows > len(its) else "")
            for kind, its, rows, ms in left.iter_rows()
        ) + "; not in mean_step_ms"
    if a.skew.height > 1:
        s["straggler"] = straggler_sentence(a.skew_summary)
        s["step_spread"] = a.skew_summary["step_spread"]
    s["notes"] = trace_notes(a)
    return s
