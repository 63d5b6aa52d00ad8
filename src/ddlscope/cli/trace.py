"""``ddlscope trace``: the measured step breakdown of PyTorch profiler traces, and what-if from it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import polars as pl
import typer

from ddlscope.cli.common import CatalogFiles, FormatOpt, err_console, parse_scenarios, user_catalog, user_errors
from ddlscope.measure.analysis import TraceAnalysis, analyze_traces
from ddlscope.measure.timeline import IDLE_CAUSES, LAUNCH_GAP_US
from ddlscope.report.console import emit_sections
from ddlscope.specs.scenario import BUILTIN_SCENARIOS

c = pl.col


def _ms(col: str, alias: str | None = None) -> pl.Expr:
    return (c(col) / 1e3).alias(alias or col.removesuffix("_us") + "_ms")


def _weighted(col: str) -> pl.Expr:
    """Time-weighted mean of a bandwidth column over the rows where it is known."""
    known = c(col).is_not_null()
    return (c(col) * c("time_us")).filter(known).sum() / c("time_us").filter(known).sum()


def sections(a: TraceAnalysis) -> list[tuple[str, pl.DataFrame, str, str | None]]:
    """The tables ``ddlscope trace`` prints, in order: ``(name, frame, title, caption)``.

    Times are shown in milliseconds (``_ms``); ``--format json`` prints the same tables.
    """
    bd = a.breakdown
    multi = bd.group_by("rank").agg(c("device").n_unique()).select(c("device").max()).item() > 1
    keys = ["rank", "device", "iteration"] if multi else ["rank", "iteration"]  # a rank driving several GPUs
    out: list[tuple[str, pl.DataFrame, str, str | None]] = []
    out.append(("breakdown", bd.select(
        *keys,
        _ms("window_us", "step_ms"), _ms("compute_bound_us"), _ms("memory_bound_us"), _ms("unclassified_us"),
        _ms("comm_exposed_us"), _ms("device_copy_us"), _ms("data_io_us"), _ms("idle_us"),
        _ms("comm_busy_us", "comm_total_ms"),
        comm_overlap=pl.when(c("comm_busy_us") > 0).then(c("comm_overlapped_us") / c("comm_busy_us")),
        cpu_step_ms=c("cpu_step_us") / 1e3,
    ), "Per-iteration breakdown (ms): exclusive components + idle = step",
        "comm_exposed = communication with no computation kernel running; comm_total = all communication "
        "time, comm_overlap = the share of it hidden under computation; cpu_step = the iteration marker's duration"))
    out.append(("idle", bd.select(
        *keys, _ms("idle_us"), *(_ms(f"idle_{k}_us", f"{k}_ms") for k in IDLE_CAUSES),
        gaps=c("idle_gaps"),
    ), "GPU idle time by visible cause (ms)",
        "data_loader / synchronisation / kernel_launch: the host was late launching the next GPU work "
        "(waiting on the input pipeline, after a blocking CUDA call, or busy elsewhere); dependency: queued "
        "work waited on an event or another stream"))
    n_it = bd.group_by("rank").agg(_n=pl.len())
    coll = (
        a.collectives.join(n_it, on="rank")
        .group_by("rank", "collective").agg(
            calls=c("calls").sum() / c("_n").first(),
            msg_size_bytes=c("size_bytes").sum() / c("calls").sum(),
            time_ms=c("time_us").sum() / c("_n").first() / 1e3,
            exposed_ms=c("exposed_us").sum() / c("_n").first() / 1e3,
            algbw_gb_s=_weighted("algbw_gb_s"),
            busbw_gb_s=_weighted("busbw_gb_s"),
            size_source=c("size_source").mode().first(),
        )
        .with_columns(msg_size_bytes=pl.when(c("size_source") != "unknown").then(c("msg_size_bytes")),
                      algbw_gb_s=pl.when(c("algbw_gb_s").is_finite()).then(c("algbw_gb_s")),
                      busbw_gb_s=pl.when(c("busbw_gb_s").is_finite()).then(c("busbw_gb_s")))
        .sort("rank", "time_ms", descending=[False, True])
    )
    if coll.height:
        out.append(("collectives", coll, "Collectives per iteration (means)",
                    "msg_size = nccl-tests S per call; bandwidths from kernel time (includes waiting for peers)"))
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
            "own = step - exposed communication: a straggler's peers wait for it inside the collectives"))
    if a.whatif is not None:
        out.append(("whatif", a.whatif.drop("description"), "What-if from the measured baseline",
                    "each measured component rescaled by the step-time model's ratio scenario/baseline; "
                    "idle time unchanged; speedup = measured / predicted step"))
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


def summary(a: TraceAnalysis) -> dict[str, Any]:
    """The headline values and notes printed after the tables (and written as ``summary.json``)."""
    s: dict[str, Any] = {
        "ranks": a.ranks.height,
        "iterations": a.breakdown.height,
        "mean_step_ms": a.breakdown["window_us"].mean() / 1e3,
        "precision": a.precision,
    }
    if a.skew.height > 1:
        sk = a.skew_summary
        s["straggler"] = (f"rank {sk['straggler_rank']}: {sk['straggler_excess_us'] / 1e3:.3f} ms more "
                          f"non-communication time than the median rank, mostly {sk['slow_component']} "
                          f"(+{sk['slow_component_excess_us'] / 1e3:.3f} ms)")
        s["step_spread"] = sk["step_spread"]
    s["notes"] = a.notes
    return s


def register(app: typer.Typer) -> None:
    """Add ``trace`` to ``app``."""

    @app.command()
    @user_errors
    def trace(
        traces: Annotated[list[Path], typer.Argument(
            help="PyTorch profiler traces (Kineto/Chrome JSON, .json.gz, .tar/.tar.gz archives, or folders); "
                 "one per rank. Execution traces among them add op shapes.")],
        rules: Annotated[list[Path] | None, typer.Option(
            "--rules", help="extra classification rules (TOML like the built-in trace_rules.toml, or CSV "
                            "pattern,class,kind); tried before the built-in ones")] = None,
        scenario: Annotated[list[str] | None, typer.Option(
            "--scenario", help="what-if scenario: built-in name, scenario file, or inline 'name:key=value,...' "
                               f"(repeatable; default all built-ins: {', '.join(BUILTIN_SCENARIOS)})")] = None,
        no_whatif: Annotated[bool, typer.Option("--no-whatif", help="skip the what-if")] = False,
        system: Annotated[str | None, typer.Option(
            "--system", "-s",
            help="server type from the catalog (default: the usual server of the traced GPU)")] = None,
        gpu: Annotated[str | None, typer.Option(
            "--gpu", help="GPU (catalog name) when the trace has no deviceProperties, or to override it")] = None,
        catalog: CatalogFiles = None,
        launch_gap_us: Annotated[float, typer.Option(
            "--launch-gap-us", help="idle gaps before already-queued work shorter than this are launch latency, "
                                    "longer ones a dependency wait")] = LAUNCH_GAP_US,
        whole_trace: Annotated[bool, typer.Option(
            "--whole-trace", help="ignore iteration markers: one window per rank over all its GPU activity")] = False,
        out: Annotated[Path | None, typer.Option("--out", help="write an HTML report folder here")] = None,
        fmt: FormatOpt = "table",
    ) -> None:
        """Where each iteration's GPU time goes, measured from PyTorch profiler traces.

        Per iteration (ProfilerStep#N, or inferred from DataLoader / Optimizer.step annotations) and
        rank: compute-bound, memory-bound and unclassified kernels, exposed communication per
        collective, device copies, host-device copies (data I/O) and idle time with its visible
        cause; collectives with message size and algorithm/bus bandwidth; rank skew; what-if from
        the measured baseline; the analytical model's prediction beside the measurement.
        """
        cat = user_catalog(catalog)
        scenarios = [] if no_whatif else parse_scenarios(scenario)
        a = analyze_traces(traces, rules_files=rules or [], scenarios=scenarios, catalog=cat, server=system,
                           gpu=gpu, launch_gap_us=launch_gap_us, whole_trace=whole_trace)
        secs = sections(a)
        head = summary(a)
        if fmt == "json":  # every table whole, times in microseconds, plus the per-rank details
            full = [("breakdown_us", a.breakdown, "", None), ("collective_calls", a.calls, "", None),
                    ("kernels", a.kernels, "", None), ("ranks_detail", a.ranks, "", None)]
            emit_sections(secs + full, fmt, summary={**head, "skew_summary": a.skew_summary})
        else:
            emit_sections(secs, fmt, summary=head)
        if out is not None:
            from ddlscope.report.trace_report import write_trace_report

            index = write_trace_report(a, out, secs, head, "ddlscope trace: measured step breakdown")
            err_console.print(f"report written to {index}")
