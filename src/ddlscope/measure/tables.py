"""Split the per-rank event tables into the tables the analyzers share (parsed once).

:func:`build_tables` stacks the ranks (a ``rank`` column) and returns:

- ``gpu``: GPU activities (kernels, memcpy, memset) with their class from the rules and the CUDA
  runtime call that launched them (joined on ``correlation``);
- ``cpu``: CPU operators and user annotations (``cpu_op``, ``user_annotation``,
  ``python_function``) with their recorded shapes and collective arguments;
- ``runtime``: CUDA runtime/driver calls (``cuda_runtime``, ``cuda_driver``).

Every later step is a join or a group-by over these tables; :func:`enclosing` is the one
interval look-up they all use (which CPU span contains a time point on the same thread).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ddlscope.measure.reader import KinetoTrace
from ddlscope.measure.rules import TraceRules, classify_names

GPU_CATEGORIES: tuple[str, ...] = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
"""Kineto categories of GPU activities (current and pre-2022 spellings)."""
CPU_CATEGORIES: tuple[str, ...] = ("cpu_op", "user_annotation", "python_function", "Operator", "user_anno")
RUNTIME_CATEGORIES: tuple[str, ...] = ("cuda_runtime", "cuda_driver", "Runtime", "Driver")

c = pl.col


@dataclass
class TraceTables:
    """The shared tables of a set of ranks (see the module docstring).

    Attributes:
        gpu: ``rank, device, stream, cat, name, start_ns, end_ns, dur_ns, correlation, bytes,
            in_msg_nelems, out_msg_nelems, group_size, dtype, collective_name, in_split, out_split,
            pg_ranks, class, kind, precision, rule, launch_ns, launch_end_ns, launch_pid, launch_tid`` (launch columns
            null when the trace has no runtime call with the activity's correlation id).
        cpu: ``rank, cpu_id, cat, name, pid, tid, ts_ns, end_ns, input_dims, input_types,
            collective_name, in_msg_nelems, out_msg_nelems, group_size, dtype, in_split, out_split,
            pg_ranks``.
        runtime: ``rank, name, pid, tid, ts_ns, end_ns, correlation``.
        classes: the classification of every distinct GPU activity name (see
            :func:`ddlscope.measure.rules.classify_names`).
        clipped: the activities :func:`clip_stream_overlaps` shortened.
    """

    gpu: pl.DataFrame
    cpu: pl.DataFrame
    runtime: pl.DataFrame
    classes: pl.DataFrame
    clipped: pl.DataFrame


def build_tables(traces: list[KinetoTrace], rules: TraceRules) -> TraceTables:
    """The shared tables of ``traces`` (one per rank).

    Raises:
        ValueError: a trace without GPU activities (recorded without CUDA activities), naming it.
    """
    frames = []
    for t in traces:
        has_gpu = t.events.filter(c("cat").is_in(GPU_CATEGORIES)).height
        if not has_gpu:
            raise ValueError(f"{t.source}: no GPU kernel, memcpy or memset events; profile with "
                             "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")
        frames.append(t.events.with_columns(rank=pl.lit(t.rank, pl.Int64)))
    ev = pl.concat(frames)

    runtime = (
        ev.filter(c("cat").is_in(RUNTIME_CATEGORIES))
        .select("rank", "name", "pid", "tid", "ts_ns", "end_ns", "correlation")
    )
    launches = (
        runtime.filter(c("correlation").is_not_null())
        .unique(subset=["rank", "correlation"], keep="first")
        .select("rank", "correlation", launch_ns="ts_ns", launch_end_ns="end_ns", launch_pid="pid",
                launch_tid="tid")
    )
    gpu = ev.filter(c("cat").is_in(GPU_CATEGORIES))
    classes = classify_names(gpu["name"], rules)
    gpu = (
        gpu.select(
            "rank",
            device=pl.coalesce(c("device"), c("pid").cast(pl.Int64, strict=False)).fill_null(0),
            stream=c("stream"), cat=c("cat"), name=c("name"),
            start_ns=c("ts_ns"), end_ns=c("end_ns"), dur_ns=c("dur_ns"),
            correlation=c("correlation"), bytes=c("bytes"),
            in_msg_nelems=c("in_msg_nelems"), out_msg_nelems=c("out_msg_nelems"),
            group_size=c("group_size"), dtype=c("dtype"), collective_name=c("collective_name"),
            in_split=c("in_split"), out_split=c("out_split"), pg_ranks=c("pg_ranks"),
        )
        .join(classes, on="name", how="left")
        .join(launches, on=["rank", "correlation"], how="left")
        .sort("rank", "device", "start_ns", "end_ns")
    )
    gpu, clipped = clip_stream_overlaps(gpu)
    cpu = (
        ev.filter(c("cat").is_in(CPU_CATEGORIES))
        .select("rank", "cat", "name", "pid", "tid", "ts_ns", "end_ns", "input_dims", "input_types",
                "collective_name", "in_msg_nelems", "out_msg_nelems", "group_size", "dtype", "in_split",
                "out_split", "pg_ranks")
        .with_row_index("cpu_id")
        .with_columns(c("cpu_id").cast(pl.Int64))
    )
    return TraceTables(gpu=gpu, cpu=cpu, runtime=runtime, classes=classes, clipped=clipped)


def clip_stream_overlaps(gpu: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """End every GPU activity no later than the start of the next activity of its stream.

    The activities of one CUDA stream run one after the other (CUDA C++ Programming Guide,
    "Streams": operations in a stream execute in issue order), so an activity whose ``dur`` runs
    past the start of the next one on the same (rank, device, stream) has a wrong end: a
    timestamp error, seen after hardware stalls (a 3 s "kernel" of a 28 us one) and, by a few
    microseconds, as CUPTI clock jitter. Its end is clipped to the next start (``dur_ns`` with it).
    Activities without a stream, and the first of two that start at the same nanosecond, are left
    as they are.

    Args:
        gpu: ``rank, device, stream, name, start_ns, end_ns, dur_ns`` (and any other columns).

    Returns:
        ``(gpu, clipped)``: ``gpu`` with the ends clipped (same rows and order); ``clipped`` one row per
        clipped activity: ``rank, device, stream, name, start_ns, old_end_ns, end_ns, removed_ns``.
    """
    keys = ["rank", "device", "stream"]
    nxt = (
        gpu.with_row_index("_clip_row").filter(c("stream").is_not_null()).sort(*keys, "start_ns", "end_ns")
        .with_columns(_next=c("start_ns").shift(-1).over(keys))
        .filter((c("_next") > c("start_ns")) & (c("end_ns") > c("_next")))
        .select("_clip_row", *keys, "name", "start_ns", old_end_ns="end_ns", end_ns="_next")
        .with_columns(removed_ns=c("old_end_ns") - c("end_ns"))
    )
    if nxt.is_empty():
        return gpu, nxt.drop("_clip_row")
    out = (
        gpu.with_row_index("_clip_row").join(nxt.select("_clip_row", _clip_end="end_ns"), on="_clip_row", how="left")
        .with_columns(end_ns=pl.coalesce(c("_clip_end"), c("end_ns")))
        .with_columns(dur_ns=c("end_ns") - c("start_ns"))
        .sort("_clip_row").drop("_clip_row", "_clip_end")
    )
    return out, nxt.drop("_clip_row").sort(*keys, "start_ns")


def enclosing(
    points: pl.DataFrame,
    spans: pl.DataFrame,
    *,
    at: str,
    by: list[str],
    span_by: list[str] | None = None,
    span_start: str = "ts_ns",
    span_end: str = "end_ns",
    keep: list[str],
    suffix: str = "",
) -> pl.DataFrame:
    """For each row of ``points``, the innermost span of ``spans`` that contains time ``at``.

    The candidate is the span with the latest start at or before ``at`` on the same ``by`` keys
    (``span_by`` in ``spans``; default the same names), kept only if it ends at or after ``at``.
    For properly nested spans (a call stack on one thread) the latest-starting container is the
    innermost one; a latest-starting span that has already ended means the innermost container
    (if any) is an outer span, which this look-up reports as no match (null) rather than guess.

    Args:
        points: any frame with column ``at`` (ns) and the ``by`` columns.
        spans: frame with ``span_start``, ``span_end`` (ns), the ``span_by`` columns and ``keep``.
        keep: columns of ``spans`` to attach (renamed with ``suffix``).

    Returns:
        ``points`` (same rows, same order) with the ``keep`` columns added, null where no span
        contains the point.
    """
    span_by = span_by or by
    right = spans.select(
        *[c(s).alias(b) for s, b in zip(span_by, by, strict=True)],
        c(span_start).alias("_s_start"), c(span_end).alias("_s_end"),
        *[c(k).alias(k + suffix) for k in keep],
    ).drop_nulls("_s_start").sort("_s_start")
    left = points.with_row_index("_enc_row").with_columns(_at=c(at))
    matched = (
        left.filter(c("_at").is_not_null()).sort("_at")
        .join_asof(right, left_on="_at", right_on="_s_start", by=by, strategy="backward", check_sortedness=False)
        .filter(c("_s_end") >= c("_at"))
        .select("_enc_row", *[k + suffix for k in keep])
    )
    return left.join(matched, on="_enc_row", how="left").sort("_enc_row").drop("_enc_row", "_at")
