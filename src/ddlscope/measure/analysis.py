"""``analyze_traces``: parse once, then run the independent analyzers, return every table.

The flow (each step a module of :mod:`ddlscope.measure`)::

    read (reader) -> tables (tables) -> collectives (comm) -> iterations and GPU windows
    (iterations) -> sweep -> breakdown, idle causes (timeline) -> collective calls (comm)
    -> kernels, temporal shares -> rank skew (skew) -> what-if and model check (baseline)

After the parse, each question is one named analyzer of this module (:func:`iteration_breakdown`,
:func:`mark_warmup`, :func:`kernel_shares`, :func:`unclassified_kernels`, :func:`temporal_shares`,
:func:`rank_accounting`, :func:`baseline_predictions`); :func:`analyze` runs them and returns one
frozen :class:`TraceAnalysis`. What they noticed about the input is kept in numbers
(:class:`TraceFacts`); the sentences (the notes) are written from it on the report side,
:func:`ddlscope.report.trace_notes.trace_notes`, once for the console, JSON, HTML and the Python API.

All times in the returned tables are microseconds (``_us``, floats holding whole nanoseconds),
bytes in ``_bytes``, bandwidths in GB/s (``_gb_s``, 1e9 bytes per second).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import polars as pl

from ddlscope.measure.baseline import (
    TraceHardware,
    comm_demand,
    dominant_precision,
    model_check,
    trace_hardware,
    whatif_from_trace,
    whatif_summary,
)
from ddlscope.measure.comm import collective_calls, collectives_per_iteration, resolve_collectives
from ddlscope.measure.flops import FLOP_OPERATORS, op_flops
from ddlscope.measure.iterations import (
    WARMUP_FACTOR,
    WHOLE_TRACE,
    assign_iteration,
    assign_window,
    cpu_iterations,
    gpu_span,
    gpu_windows,
    warmup_iterations,
)
from ddlscope.measure.reader import ExecutionTrace, KinetoTrace, read_traces
from ddlscope.measure.rules import TraceRules, load_rules
from ddlscope.measure.skew import rank_skew
from ddlscope.measure.tables import build_tables, enclosing
from ddlscope.measure.timeline import (
    COMM_CLASSES,
    COMPUTE_CLASSES,
    IDLE_CAUSES,
    LAUNCH_GAP_US,
    TIMELINE_CLASSES,
    breakdown_from_segments,
    idle_by_cause,
    idle_causes,
    sweep,
    timeline_class,
)
from ddlscope.specs.catalog import Catalog, builtin_catalog
from ddlscope.specs.scenario import Scenario

c = pl.col
_NS = 1000.0  # ns per us


@dataclass(frozen=True)
class TraceAnalysis:
    """Everything ``ddlscope trace`` reports (all frames Polars, times in microseconds).

    Attributes:
        ranks: one row per rank: ``rank, source, gpu, world_size, iterations, marker,
            iteration_rule, segments_left_out`` (:func:`ddlscope.measure.iterations.cpu_iterations`),
            ``gpu_activities, activities_outside_windows, busy_outside_windows_us`` (activities starting
            outside every window, their kernel time), ``activities_after_last_iteration,
            gpu_time_after_last_iteration_us`` (activities running past the last window's end and
            their time past it), ``activities_before_first_iteration,
            gpu_time_before_first_iteration_us``, ``last_iteration_end_us``, ``activities_clipped,
            clipped_us`` (activities whose end ran past the next start on their stream, and the time
            clipped off: :func:`ddlscope.measure.tables.clip_stream_overlaps`), ``events_used,
            events_skipped``.
        breakdown: one row per (rank, device, iteration): ``window_us`` and its exclusive parts
            ``compute_bound_us, memory_bound_us, unclassified_us, comm_exposed_us,
            device_copy_us, data_io_us, idle_us`` (they sum to ``window_us`` to the nanosecond);
            exposed time per collective ``comm_<collective>_us``; idle per cause
            ``idle_<cause>_us`` (sum to ``idle_us``); ``comm_busy_us`` = ``comm_exposed_us +
            comm_overlapped_us``; busy (union) time per class ``busy_<class>_us``;
            ``cpu_step_us`` (the iteration marker's CPU duration), ``data_io_bytes`` (host<->device),
            ``window_start_us`` (relative to the rank's first event); ``warmup`` (``"labelled"``,
            ``"slow first"`` or null: :func:`ddlscope.measure.iterations.warmup_iterations`) and
            ``in_means`` (whether the row counts in the means, the rank skew, the model check and
            the what-if baseline: every row that is not a warm-up, or all rows with
            ``keep_warmup`` or when every row is one). :attr:`steady` is the rows in the means.
        collectives: per (rank, device, iteration, collective): calls, sizes, time, busy and exposed
            time, algorithm and bus bandwidth (:func:`ddlscope.measure.comm.collectives_per_iteration`).
        calls: one row per collective call (:func:`ddlscope.measure.comm.collective_calls`).
        kernels: per (rank, class, kind): ``kernels``, ``time_us`` (sum of durations), ``share``
            of the rank's kernel time.
        unclassified: per kernel name no rule matched: ``name, kernels, time_us, ranks``.
        temporal: per rank over all its iterations, in Holistic Trace Analysis' terms:
            ``idle_pct, compute_pct, non_compute_pct, comm_overlap_pct, span_us`` over the GPU span
            of the iterations (:func:`ddlscope.measure.iterations.gpu_span`).
        skew, skew_summary: :func:`ddlscope.measure.skew.rank_skew`.
        whatif, whatif_rows: :func:`ddlscope.measure.baseline.whatif_summary` and the per-row
            predictions (None when the GPU is unknown).
        model_check: :func:`ddlscope.measure.baseline.model_check` (None when the GPU is unknown).
        hardware: the resolved hardware.
        precision: the dominant compute precision.
        warmup: what :func:`ddlscope.measure.iterations.warmup_iterations` found (``labelled``,
            ``slow_first_iteration``, ``slow_first_ratio``, ...) plus ``excluded`` (rows left out
            of the means) and ``kept`` (warm-up rows kept in, by ``keep_warmup`` or because every row
            is one).
        facts: what the analyzers noticed about the input (:class:`TraceFacts`); the report words
            it, with the hardware's notes, as the notes (:func:`ddlscope.report.trace_notes.trace_notes`).

    Nothing in it changes after :func:`analyze` returns (a frozen record; the mappings read-only).
    """

    ranks: pl.DataFrame
    breakdown: pl.DataFrame
    collectives: pl.DataFrame
    calls: pl.DataFrame
    kernels: pl.DataFrame
    unclassified: pl.DataFrame
    temporal: pl.DataFrame
    skew: pl.DataFrame
    skew_summary: Mapping[str, Any]
    whatif: pl.DataFrame | None
    whatif_rows: pl.DataFrame | None
    model_check: pl.DataFrame | None
    hardware: TraceHardware | None
    precision: str
    warmup: Mapping[str, Any]
    facts: TraceFacts

    @property
    def steady(self) -> pl.DataFrame:
        """The rows of :attr:`breakdown` that count in the means (``in_means``)."""
        return self.breakdown.filter(c("in_means"))


def analyze_traces(
    paths: Sequence[str | Path],
    *,
    rules_files: Sequence[str | Path] = (),
    scenarios: Sequence[Scenario] | None = None,
    catalog: Catalog | None = None,
    server: str | None = None,
    gpu: str | None = None,
    launch_gap_us: float = LAUNCH_GAP_US,
    whole_trace: bool = False,
    keep_warmup: bool = False,
    warmup_factor: float = WARMUP_FACTOR,
) -> TraceAnalysis:
    """Read the traces in ``paths`` (one per rank; files, archives, folders) and analyse them.

    Args:
        rules_files: user rules tried before the built-in ones (:func:`ddlscope.measure.rules.load_rules`).
        scenarios: what-if scenarios (None: none; the CLI passes the built-ins by default).
        catalog: hardware catalog (default: built-in).
        server, gpu: hardware overrides (catalog names) for the what-if and model check.
        launch_gap_us: threshold of :func:`ddlscope.measure.timeline.idle_causes`.
        whole_trace: ignore iteration markers and analyse each rank as one window.
        keep_warmup: keep warm-up iterations in the means and the what-if baseline.
        warmup_factor: a first iteration longer than this times the median of the others is a
            warm-up (:func:`ddlscope.measure.iterations.warmup_iterations`).

    Raises:
        TraceReadError: unreadable, truncated, non-JSON or wrong-schema input (naming the file).
        RulesError: a bad rules file.
        ValueError: a trace without GPU activities; bad scenarios.
        CatalogError: unknown ``server``/``gpu`` or a scenario naming unknown hardware.
    """
    rules = load_rules(*rules_files)
    if whole_trace:
        rules = dataclasses.replace(rules, markers=())
    read_notes: list[str] = []
    kineto, executions = read_traces(list(paths), read_notes)
    return analyze(kineto, executions, rules, input_notes=read_notes, scenarios=scenarios, catalog=catalog,
                   server=server, gpu=gpu, launch_gap_us=launch_gap_us, keep_warmup=keep_warmup,
                   warmup_factor=warmup_factor)


def _us(ns: pl.Expr) -> pl.Expr:
    return ns / _NS


@dataclass(frozen=True)
class SkippedEvents:
    """The events of one trace that were not used (:attr:`KinetoTrace.skipped
    <ddlscope.measure.reader.KinetoTrace.skipped>`).

    Attributes:
        source: the trace's file.
        counts: events left out per reason.
        examples: for the reasons that mean bad data (bad times), the first such event.
    """

    source: str
    counts: Mapping[str, int]
    examples: Mapping[str, str]


@dataclass(frozen=True)
class TraceFacts:
    """What the analyzers noticed about the input, in numbers (the report words them:
    :func:`ddlscope.report.trace_notes.trace_notes`).

    Attributes:
        input_notes: what the reader assumed or skipped (files in a folder, each trace's own notes).
        keep_warmup: warm-up iterations were kept in the means on request (``--keep-warmup``).
        clipped: the GPU activities clipped to the next start on their stream
            (:func:`ddlscope.measure.tables.clip_stream_overlaps`: ``rank, device, stream, name,
            start_ns, end_ns, old_end_ns, removed_ns``).
        skipped: one :class:`SkippedEvents` per trace.
        executions: execution traces read (op shapes for the FLOPs).
        flops_from_execution_trace: the model check took FLOPs from an execution trace for some rank.
    """

    input_notes: tuple[str, ...]
    keep_warmup: bool
    clipped: pl.DataFrame
    skipped: tuple[SkippedEvents, ...]
    executions: int
    flops_from_execution_trace: bool


def analyze(
    kineto: list[KinetoTrace],
    executions: list[ExecutionTrace],
    rules: TraceRules,
    *,
    input_notes: Sequence[str] = (),
    scenarios: Sequence[Scenario] | None = None,
    catalog: Catalog | None = None,
    server: str | None = None,
    gpu: str | None = None,
    launch_gap_us: float = LAUNCH_GAP_US,
    keep_warmup: bool = False,
    warmup_factor: float = WARMUP_FACTOR,
) -> TraceAnalysis:
    """:func:`analyze_traces` on traces already read (see there); ``input_notes`` (e.g. the files
    :func:`~ddlscope.measure.reader.read_traces` skipped in a folder) head the notes.

    Parse once into tables (activities with their iteration and window, the timeline sweep), then
    the named analyzers of this module, each answering one question from those tables:
    :func:`iteration_breakdown`, :func:`mark_warmup`, :func:`kernel_shares`,
    :func:`unclassified_kernels`, :func:`temporal_shares`, :func:`rank_accounting`,
    :func:`~ddlscope.measure.skew.rank_skew` and :func:`baseline_predictions`.
    """
    catalog = catalog or builtin_catalog()
    world_size = kineto[0].world_size
    tb = build_tables(kineto, rules)
    g = resolve_collectives(tb.gpu, tb.cpu, rules, world_size)
    its = cpu_iterations(tb.cpu, g, rules)
    g = assign_iteration(g, its)
    win = gpu_windows(g, its)
    g = assign_window(g, win, "start_ns")
    acts = g.select("rank", "device", "start_ns", "end_ns", tclass=timeline_class(c("class"), c("kind")))
    seg = sweep(acts, win)
    bd_ns = breakdown_from_segments(seg, win)
    idle = idle_causes(seg, g, tb.cpu, tb.runtime, rules.host, launch_gap_us)
    by_cause = idle_by_cause(idle, win)
    calls = collective_calls(g)
    collectives = collectives_per_iteration(calls, bd_ns)
    h2d = host_device_bytes(g)

    breakdown, warm = mark_warmup(iteration_breakdown(bd_ns, by_cause, its, h2d), win, its, warmup_factor,
                                  keep_warmup)
    skew, skew_summary = rank_skew(breakdown.filter(c("in_means")))
    precision = dominant_precision(g)
    first = kineto[0]
    device_id = g.filter(c("rank") == first.rank)["device"].mode().first()
    has_a2a = bool(calls.filter(c("collective") == "all_to_all").height)
    hw = trace_hardware(first.devices, device_id, world_size, has_a2a, catalog, server=server, gpu=gpu)
    steady_keys = breakdown.filter(c("in_means")).select(_KEYS)
    whatif_table, whatif_rows, check, from_et = baseline_predictions(
        g, tb.cpu, its, bd_ns, h2d, calls, steady_keys, executions, hw, precision, scenarios, catalog)
    return TraceAnalysis(
        ranks=rank_accounting(kineto, g, its, win, tb.clipped), breakdown=breakdown, collectives=collectives,
        calls=calls, kernels=kernel_shares(g), unclassified=unclassified_kernels(g), temporal=temporal_shares(g, its),
        skew=skew, skew_summary=MappingProxyType(skew_summary), whatif=whatif_table, whatif_rows=whatif_rows,
        model_check=check, hardware=hw, precision=precision, warmup=MappingProxyType(warm),
        facts=TraceFacts(
            input_notes=(*input_notes, *(n for t in kineto for n in t.notes)), keep_warmup=keep_warmup,
            clipped=tb.clipped,
            skipped=tuple(SkippedEvents(t.source, MappingProxyType(dict(t.skipped)),
                                        MappingProxyType(dict(t.skipped_examples))) for t in kineto),
            executions=len(executions), flops_from_execution_trace=from_et),
    )


_KEYS = ["rank", "device", "iteration"]


def host_device_bytes(g: pl.DataFrame) -> pl.DataFrame:
    """Host<->device copy bytes per (rank, device, iteration): ``h2d_bytes`` (Float64)."""
    return (
        g.filter((c("class") == "data_io") & c("iteration").is_not_null())
        .group_by(*_KEYS).agg(h2d_bytes=c("bytes").sum().cast(pl.Float64))
    )


def iteration_breakdown(bd_ns: pl.DataFrame, by_cause: pl.DataFrame, its: pl.DataFrame,
                        h2d: pl.DataFrame) -> pl.DataFrame:
    """Where each window's time goes, in µs: :attr:`TraceAnalysis.breakdown` without the warm-up
    columns (the exclusive components and idle sum to ``window_us``; see there).

    Args:
        bd_ns: :func:`~ddlscope.measure.timeline.breakdown_from_segments` (ns).
        by_cause: :func:`~ddlscope.measure.timeline.idle_by_cause` (ns).
        its: :func:`~ddlscope.measure.iterations.cpu_iterations` (``cpu_step_ns``).
        h2d: :func:`host_device_bytes`.
    """
    bd = (
        bd_ns.join(by_cause, on=_KEYS, how="left")
        .join(its.select("rank", "iteration", "cpu_step_ns"), on=["rank", "iteration"], how="left")
        .join(h2d, on=_KEYS, how="left")
        .with_columns(c("h2d_bytes").fill_null(0.0))
    )
    out_cols = [
        *_KEYS,
        _us(c("window_start_ns")).alias("window_start_us"),
        _us(c("window_ns")).alias("window_us"),
        *(_us(c(f"{k}_ns")).alias(f"{k}_us") for k in COMPUTE_CLASSES),
        _us(c("comm_exposed_ns")).alias("comm_exposed_us"),
        _us(c("device_copy_ns")).alias("device_copy_us"),
        _us(c("data_io_ns")).alias("data_io_us"),
        _us(c("idle_ns")).alias("idle_us"),
        _us(c("comm_busy_ns")).alias("comm_busy_us"),
        _us(c("comm_overlapped_ns")).alias("comm_overlapped_us"),
        *(_us(c(f"{k}_ns")).alias(f"{k}_us") for k in COMM_CLASSES),
        *(_us(c(f"idle_{k}_ns")).alias(f"idle_{k}_us") for k in IDLE_CAUSES),
        c("idle_gaps"),
        *(_us(c(f"busy_{k}_ns")).alias(f"busy_{k}_us") for k in TIMELINE_CLASSES),
        _us(c("cpu_step_ns")).alias("cpu_step_us"),
        c("h2d_bytes").alias("data_io_bytes"),
    ]
    return bd.select(out_cols).sort(*_KEYS)


def mark_warmup(breakdown: pl.DataFrame, win: pl.DataFrame, its: pl.DataFrame, warmup_factor: float,
                keep_warmup: bool) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Which rows are warm-up iterations, and which count in the means.

    Returns:
        ``(breakdown, info)``: ``breakdown`` plus ``warmup`` as
        :func:`~ddlscope.measure.iterations.warmup_iterations` flags it; ``in_means`` every row that
        is not a warm-up, or every row with ``keep_warmup`` or when every row is one; ``info`` that
        function's info plus ``excluded`` (rows left out of the means) and ``kept`` (warm-up rows kept
        in).
    """
    flags, warm = warmup_iterations(win, its, warmup_factor)
    breakdown = breakdown.join(flags, on=["rank", "iteration"], how="left")
    n_warm = breakdown["warmup"].is_not_null().sum()
    keep_all = keep_warmup or n_warm == breakdown.height
    breakdown = breakdown.with_columns(in_means=c("warmup").is_null() | pl.lit(keep_all))
    warm = {**warm, "excluded": int(breakdown.height - breakdown["in_means"].sum()),
            "kept": int(n_warm) if keep_all else 0}
    return breakdown, warm


def kernel_shares(g: pl.DataFrame) -> pl.DataFrame:
    """:attr:`TraceAnalysis.kernels`: per (rank, class, kind) the kernels, their time (µs) and
    share of the rank's kernel time, longest first."""
    return (
        g.group_by("rank", "class", "kind").agg(kernels=pl.len(), time_us=_us(c("dur_ns").sum()))
        .with_columns(share=c("time_us") / c("time_us").sum().over("rank"))
        .sort("rank", "time_us", descending=[False, True])
    )


def unclassified_kernels(g: pl.DataFrame) -> pl.DataFrame:
    """:attr:`TraceAnalysis.unclassified`: per kernel name no rule matched, its kernels, time (µs)
    and ranks, longest first."""
    return (
        g.filter(c("class") == "unclassified").group_by("name")
        .agg(kernels=pl.len(), time_us=_us(c("dur_ns").sum()), ranks=c("rank").n_unique())
        .sort("time_us", descending=True)
    )


def temporal_shares(g: pl.DataFrame, its: pl.DataFrame) -> pl.DataFrame:
    """:attr:`TraceAnalysis.temporal`: per rank, idle / compute / non-compute shares of the GPU span
    of its iterations and the overlapped share of communication, in Holistic Trace Analysis' terms
    (percent; the work launched in an iteration, :func:`~ddlscope.measure.iterations.gpu_span`)."""
    span = gpu_span(g, its)
    whole_ranks = its.filter(c("iteration_rule") == WHOLE_TRACE)["rank"].implode()
    launched = (c("launch_iteration").is_not_null() | c("rank").is_in(whole_ranks))
    span_acts = g.filter(launched).select("rank", "device", "start_ns", "end_ns",
                                         tclass=timeline_class(c("class"), c("kind")))
    span_bd = breakdown_from_segments(sweep(span_acts, span), span)
    return span_bd.group_by("rank").agg(
        window_ns=c("window_ns").sum(), idle_ns=c("idle_ns").sum(),
        compute_ns=pl.sum_horizontal(*(c(f"{k}_ns") for k in COMPUTE_CLASSES)).sum(),
        comm_busy_ns=c("comm_busy_ns").sum(), comm_overlapped_ns=c("comm_overlapped_ns").sum(),
    ).select(
        "rank",
        idle_pct=100 * c("idle_ns") / c("window_ns"),
        compute_pct=100 * c("compute_ns") / c("window_ns"),
        non_compute_pct=100 * (c("window_ns") - c("idle_ns") - c("compute_ns")) / c("window_ns"),
        comm_overlap_pct=pl.when(c("comm_busy_ns") > 0).then(100 * c("comm_overlapped_ns") / c("comm_busy_ns")),
        span_us=_us(c("window_ns")),
    ).sort("rank")


def rank_accounting(kineto: list[KinetoTrace], g: pl.DataFrame, its: pl.DataFrame, win: pl.DataFrame,
                    clipped: pl.DataFrame) -> pl.DataFrame:
    """:attr:`TraceAnalysis.ranks`: per rank, where its events went (iterations found and how,
    activities and GPU time outside every window, before the first and after the last, clipped
    activities, events used and skipped; see there)."""
    outside = g.filter(c("iteration").is_null()).group_by("rank").agg(
        activities_outside_windows=pl.len(), busy_outside_windows_us=_us(c("dur_ns").sum()))
    # GPU time before the first and after the last window of each (rank, device): not in the breakdown,
    # whether the activity lies wholly outside or only runs past the end (starts inside the last window)
    extent = win.group_by("rank", "device").agg(_first=c("window_start_ns").min(), _last=c("window_end_ns").max())
    edges = (
        g.join(extent, on=["rank", "device"], how="inner")
        .with_columns(_after=(c("end_ns") - pl.max_horizontal(c("start_ns"), c("_last"))).clip(0),
                      _before=(pl.min_horizontal(c("end_ns"), c("_first")) - c("start_ns")).clip(0))
        .group_by("rank").agg(
            activities_after_last_iteration=(c("_after") > 0).sum().cast(pl.Int64),
            gpu_time_after_last_iteration_us=_us(c("_after").sum()),
            activities_before_first_iteration=(c("_before") > 0).sum().cast(pl.Int64),
            gpu_time_before_first_iteration_us=_us(c("_before").sum()),
            last_iteration_end_us=_us(c("_last").max()),
        )
    )
    meta = pl.DataFrame([{
        "rank": t.rank, "source": t.source, "world_size": t.world_size,
        "gpu": next((str(d.get("name")) for d in t.devices if d.get("name")), None),
        "events_used": t.events.height, "events_skipped": sum(t.skipped.values()),
    } for t in kineto], schema={"rank": pl.Int64, "source": pl.String, "world_size": pl.Int64, "gpu": pl.String,
                                 "events_used": pl.Int64, "events_skipped": pl.Int64})
    return (
        meta.join(its.group_by("rank").agg(iterations=pl.len(), marker=c("marker").first(),
                                           iteration_rule=c("iteration_rule").first(),
                                           segments_left_out=c("segments_left_out").first()), on="rank", how="left")
        .join(g.group_by("rank").agg(gpu_activities=pl.len()), on="rank", how="left")
        .join(outside, on="rank", how="left").join(edges, on="rank", how="left")
        .join(clipped.group_by("rank").agg(activities_clipped=pl.len().cast(pl.Int64),
                                           clipped_us=_us(c("removed_ns").sum())), on="rank", how="left")
        .with_columns(c("activities_outside_windows").fill_null(0), c("busy_outside_windows_us").fill_null(0.0),
                      c("activities_clipped").fill_null(0), c("clipped_us").fill_null(0.0),
                      *(c(k).fill_null(0) for k in ("activities_after_last_iteration",
                                                    "activities_before_first_iteration")),
                      *(c(k).fill_null(0.0) for k in ("gpu_time_after_last_iteration_us",
                                                      "gpu_time_before_first_iteration_us")))
    )


def baseline_predictions(
    g: pl.DataFrame, cpu: pl.DataFrame, its: pl.DataFrame, bd_ns: pl.DataFrame, h2d: pl.DataFrame,
    calls: pl.DataFrame, steady_keys: pl.DataFrame, executions: list[ExecutionTrace], hw: TraceHardware,
    precision: str, scenarios: Sequence[Scenario] | None, catalog: Catalog,
) -> tuple[pl.DataFrame | None, pl.DataFrame | None, pl.DataFrame | None, bool]:
    """What the model predicts from the measured baseline (the rows in the means): the what-if
    table and rows (:func:`~ddlscope.measure.baseline.whatif_from_trace`, None without scenarios)
    and the model check (:func:`~ddlscope.measure.baseline.model_check`), all None when the GPU is
    unknown; and whether the check took FLOPs from an execution trace."""
    if hw.system is None:
        return None, None, None, False
    demand = comm_demand(calls)
    measured = (
        bd_ns.join(steady_keys, on=_KEYS, how="semi").join(demand, on=_KEYS, how="left")
        .join(h2d, on=_KEYS, how="left")
        .select(
            *_KEYS,
            window_s=c("window_ns") / 1e9, idle_s=c("idle_ns") / 1e9,
            compute_bound_s=c("compute_bound_ns") / 1e9, memory_bound_s=c("memory_bound_ns") / 1e9,
            unclassified_s=c("unclassified_ns") / 1e9, device_copy_s=c("device_copy_ns") / 1e9,
            data_io_s=c("data_io_ns") / 1e9, comm_busy_s=c("comm_busy_ns") / 1e9,
            data_io_busy_s=c("busy_data_io_ns") / 1e9,
            comm_overlap_fraction=pl.when(c("comm_busy_ns") > 0)
            .then(c("comm_overlapped_ns") / c("comm_busy_ns")).otherwise(0.0),
            compute_bound_busy_s=c("busy_compute_bound_ns") / 1e9,
            memory_busy_s=(c("busy_memory_bound_ns") + c("busy_device_copy_ns")) / 1e9,
            h2d_bytes=c("h2d_bytes").fill_null(0.0),
            dense_bytes=c("dense_bytes").fill_null(0.0), messages=c("messages").fill_null(0),
            sparse_bytes=c("sparse_bytes").fill_null(0.0), unknown_calls=c("unknown_calls").fill_null(0),
            unknown_messages=c("unknown_messages").fill_null(0), comm_calls=c("comm_calls").fill_null(0),
            sized_time_s=c("sized_time_s").fill_null(0.0), calls_time_s=c("calls_time_s").fill_null(0.0),
        )
    )
    whatif_table = whatif_rows = None
    if scenarios:
        whatif_rows = whatif_from_trace(measured, hw, precision, scenarios, catalog)
        whatif_table = whatif_summary(whatif_rows, scenarios)
    steady_its = its.join(steady_keys.select("rank", "iteration").unique(), on=["rank", "iteration"], how="semi")
    inputs, from_et = _model_inputs(g, cpu, steady_its, measured, executions)
    return whatif_table, whatif_rows, model_check(inputs, hw, precision), from_et


def _model_inputs(
    g: pl.DataFrame, cpu: pl.DataFrame, its: pl.DataFrame, measured: pl.DataFrame,
    executions: list[ExecutionTrace],
) -> tuple[pl.DataFrame, bool]:
    """Per rank, means per iteration, the inputs of :func:`ddlscope.measure.baseline.model_check`
    (``its`` and ``measured``: the iterations in the means), and whether some rank's FLOPs come
    from an execution trace (its Kineto trace has no op shapes)."""
    counted = op_flops(cpu.filter(c("name").is_in(FLOP_OPERATORS)))
    counted = counted.filter(c("flops").is_not_null())
    # FLOPs per CPU iteration (operators whose start lies in the iteration span)
    spans = its.select("rank", "iteration", "cpu_start_ns", "cpu_end_ns").sort("cpu_start_ns")
    ops_it = (
        counted.sort("ts_ns").join_asof(spans, left_on="ts_ns", right_on="cpu_start_ns", by="rank",
                                        strategy="backward", check_sortedness=False)
        .filter(c("ts_ns") < c("cpu_end_ns"))
    )
    n_it = its.group_by("rank").agg(_n=pl.len())
    flops = ops_it.group_by("rank").agg(_flops=c("flops").sum(), _ops=pl.len()).join(n_it, on="rank")
    # compute-bound kernels launched by a counted operator (the innermost counted op around the launch)
    cb = g.filter(c("class") == "compute_bound").join(
        its.select("rank", launch_iteration="iteration"), on=["rank", "launch_iteration"], how="semi")
    attributed = enclosing(cb, counted, at="launch_ns", by=["rank", "launch_pid", "launch_tid"],
                           span_by=["rank", "pid", "tid"], keep=["cpu_id"], suffix="_op")
    cover = attributed.group_by("rank").agg(
        _covered_ns=c("dur_ns").filter(c("cpu_id_op").is_not_null()).sum(), _cb_ns=c("dur_ns").sum())
    et_rows = []
    for et in executions:
        f = op_flops(et.ops)["flops"].sum()
        if et.rank is not None and f:
            et_rows.append({"rank": et.rank, "_et_flops": float(f)})
    et = pl.DataFrame(et_rows, schema={"rank": pl.Int64, "_et_flops": pl.Float64})
    per_rank = (
        measured.group_by("rank").agg(
            h2d_bytes=c("h2d_bytes").mean(), data_io_busy_s=pl.lit(None, pl.Float64),
            dense_bytes=c("dense_bytes").mean(), messages=c("messages").mean(),
            sparse_bytes=c("sparse_bytes").mean(), unknown_calls=c("unknown_calls").sum(),
            unknown_messages=c("unknown_messages").mean(), comm_calls=c("comm_calls").sum(),
            sized_share=pl.when(c("calls_time_s").sum() > 0)
            .then(c("sized_time_s").sum() / c("calls_time_s").sum()).otherwise(1.0),
            comm_busy_s=c("comm_busy_s").mean(),
            # what the exposed-communication check reads: the GPU's compute (busy, overlapped or
            # not), the exposed communication and the rank's own time (step - exposed communication)
            compute_busy_s=(c("compute_bound_busy_s") + c("memory_busy_s")).mean(),
            comm_exposed_s=(c("comm_busy_s") * (1 - c("comm_overlap_fraction"))).mean(),
            own_s=(c("window_s") - c("comm_busy_s") * (1 - c("comm_overlap_fraction"))).mean(),
        )
        .join(n_it, on="rank", how="left").join(flops.drop("_n"), on="rank", how="left")
        .join(cover, on="rank", how="left").join(et, on="rank", how="left")
    )
    busy_io = measured.group_by("rank").agg(_io=c("data_io_busy_s").mean())
    use_et = c("_flops").is_null() & c("_et_flops").is_not_null()
    per_rank = per_rank.join(busy_io, on="rank", how="left").with_columns(
        data_io_busy_s=c("_io"),
        flops=pl.when(use_et).then(c("_et_flops")).otherwise(c("_flops") / c("_n")),
        covered_compute_s=pl.when(use_et).then(c("_cb_ns") / c("_n") / 1e9)
        .otherwise(c("_covered_ns") / c("_n") / 1e9),
        compute_coverage=pl.when(use_et).then(pl.lit(1.0)).otherwise(c("_covered_ns") / c("_cb_ns")),
        flops_source=pl.when(use_et).then(pl.lit("the execution trace's op shapes (all compute-bound kernels)"))
        .otherwise(pl.format("{} mm/addmm/bmm/attention ops", (c("_ops") / c("_n")).round(0).cast(pl.Int64))),
    )
    return per_rank, bool(executions and per_rank.select(use_et.any()).item())
