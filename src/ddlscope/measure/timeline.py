"""The temporal breakdown: every instant of a GPU window attributed to exactly one state.

GPU activities overlap (several CUDA streams), so the breakdown is an *exclusive* attribution by
priority, computed with a vectorised sweep line:

1. the activities of each timeline class are merged into disjoint busy intervals;
2. their starts (+1) and ends (-1), plus the window boundaries, become edges sorted by time, and
   a running sum per class says which classes are busy between consecutive edges;
3. each segment between edges goes to the highest-priority busy class
   (:data:`TIMELINE_CLASSES`, computation first), or to ``idle`` when none is busy.

Hence, per window, ``window = sum(exclusive components) + idle`` exactly (integer nanoseconds),
and communication splits into *exposed* (no computation kernel running) and *overlapped*
(``comm_busy = comm_exposed + comm_overlapped``). The same sweep gives each class's busy time
(union of its intervals, not exclusive).

The two shares Holistic Trace Analysis reports map onto these: HTA's "computation" kernels are all
kernels except NCCL/memcpy/memset, i.e. our compute-bound + memory-bound + unclassified kernels
(the top three priorities), so HTA's compute time is their exclusive sum, its non-compute time the
exclusive sum of the rest, and its communication/computation overlap is
``comm_overlapped / comm_busy`` (HTA, ``BreakdownAnalysis.get_temporal_breakdown`` and
``CommunicationAnalysis.get_comm_comp_overlap``).

Idle segments are given the *visible cause* the trace shows (:func:`idle_causes`).
"""

from __future__ import annotations

import polars as pl

from ddlscope.measure.rules import COLLECTIVES

c = pl.col

COMPUTE_CLASSES: tuple[str, ...] = ("compute_bound", "memory_bound", "unclassified")
COMM_CLASSES: tuple[str, ...] = tuple(f"comm_{k}" for k in COLLECTIVES)
TIMELINE_CLASSES: tuple[str, ...] = (*COMPUTE_CLASSES, *COMM_CLASSES, "device_copy", "data_io")
"""Timeline classes in priority order: computation, then communication per collective, then
copies inside device memory, then host-device copies (data I/O)."""
IDLE_CAUSES: tuple[str, ...] = ("data_loader", "synchronisation", "kernel_launch", "dependency", "unknown")
"""Visible causes of GPU idle time; see :func:`idle_causes`."""
LAUNCH_GAP_US = 10.0
"""Idle gaps before work that was already queued are GPU-side launch latency when shorter than this
(microseconds; back-to-back kernel launches leave gaps of a few microseconds), otherwise a wait on
a dependency. A stated threshold, not a measured constant; ``ddlscope trace --launch-gap-us``."""

_KEYS = ["rank", "device"]


def timeline_class(cls: pl.Expr, kind: pl.Expr) -> pl.Expr:
    """Expression: the timeline class of an activity from its rule ``class`` and ``kind``."""
    return pl.when(cls == "communication").then(pl.lit("comm_") + kind).otherwise(cls)


def sweep(activities: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Segments of the GPU timeline with their state.

    Args:
        activities: ``rank, device, tclass, start_ns, end_ns`` (``tclass`` in
            :data:`TIMELINE_CLASSES`).
        windows: ``rank, device, iteration, window_start_ns, window_end_ns``
            (:func:`ddlscope.measure.iterations.gpu_windows`).

    Returns:
        One row per segment inside a window: ``rank, device, iteration, t_ns, end_ns, dur_ns``,
        one boolean ``busy_<class>`` per class, and ``state`` (the winning class, or ``idle``).
    """
    idx = {name: i for i, name in enumerate(TIMELINE_CLASSES)}
    a = (
        activities.filter(c("end_ns") > c("start_ns"))
        .select(*_KEYS, k=c("tclass").replace_strict(idx, return_dtype=pl.Int32), s=c("start_ns"), e=c("end_ns"))
        .sort(*_KEYS, "k", "s")
        .with_columns(_prev=c("e").cum_max().shift(1).over(*_KEYS, "k"))
        .with_columns(_grp=(c("_prev").is_null() | (c("s") > c("_prev"))).cum_sum().over(*_KEYS, "k"))
        .group_by(*_KEYS, "k", "_grp").agg(s=c("s").min(), e=c("e").max())
    )
    edges = pl.concat([
        a.select(*_KEYS, "k", t=c("s"), d=pl.lit(1, pl.Int32)),
        a.select(*_KEYS, "k", t=c("e"), d=pl.lit(-1, pl.Int32)),
        windows.select(*_KEYS, k=pl.lit(None, pl.Int32), t=c("window_start_ns"), d=pl.lit(0, pl.Int32)),
        windows.select(*_KEYS, k=pl.lit(None, pl.Int32), t=c("window_end_ns"), d=pl.lit(0, pl.Int32)),
    ]).sort(*_KEYS, "t")
    # running busy count per class; every (rank, device) group's +1s and -1s cancel, so a plain
    # cumulative sum over the sorted edges restarts at 0 at each group (no per-group window needed)
    running = [
        (pl.when(c("k") == i).then(c("d")).otherwise(0)).cum_sum().alias(f"busy_{name}")
        for name, i in idx.items()
    ]
    same_gpu = pl.all_horizontal([c(k) == c(k).shift(-1) for k in _KEYS])
    seg = (
        edges.with_columns(running)
        .unique(subset=[*_KEYS, "t"], keep="last", maintain_order=True)
        .with_columns(end_ns=pl.when(same_gpu).then(c("t").shift(-1)))
        .filter(c("end_ns").is_not_null())
        .with_columns(*(c(f"busy_{n}") > 0 for n in TIMELINE_CLASSES))
        .with_columns(
            state=pl.coalesce([pl.when(c(f"busy_{n}")).then(pl.lit(n)) for n in TIMELINE_CLASSES]).fill_null("idle"),
            dur_ns=c("end_ns") - c("t"),
        )
        .rename({"t": "t_ns"})
        .drop("k", "d")
    )
    w = windows.sort("window_start_ns")
    return (
        seg.sort("t_ns")
        .join_asof(w, left_on="t_ns", right_on="window_start_ns", by=_KEYS, strategy="backward", check_sortedness=False)
        .filter(c("t_ns") < c("window_end_ns"))
        .drop("window_start_ns", "window_end_ns")
        .sort(*_KEYS, "t_ns")
    )


def breakdown_from_segments(segments: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, device, iteration): exclusive time per class, idle, busy (union) time per class,
    and exposed/overlapped communication, all in integer nanoseconds (``*_ns``).

    Columns: ``rank, device, iteration, window_start_ns, window_end_ns, window_ns``, ``<class>_ns``
    (exclusive) for every timeline class, ``idle_ns``, ``busy_<class>_ns`` (union),
    ``compute_busy_ns``, ``comm_busy_ns``, ``comm_exposed_ns``, ``comm_overlapped_ns``.
    Invariant: ``window_ns == sum(<class>_ns) + idle_ns``.
    """
    comm_any = pl.any_horizontal([c(f"busy_{n}") for n in COMM_CLASSES])
    compute_any = pl.any_horizontal([c(f"busy_{n}") for n in COMPUTE_CLASSES])
    d = c("dur_ns")
    agg = segments.group_by(*_KEYS, "iteration").agg(
        *(d.filter(c("state") == n).sum().alias(f"{n}_ns") for n in TIMELINE_CLASSES),
        idle_ns=d.filter(c("state") == "idle").sum(),
        **{f"busy_{n}_ns": d.filter(c(f"busy_{n}")).sum() for n in TIMELINE_CLASSES},
        compute_busy_ns=d.filter(compute_any).sum(),
        comm_busy_ns=d.filter(comm_any).sum(),
        comm_overlapped_ns=d.filter(comm_any & compute_any).sum(),
    )
    out = (
        windows.join(agg, on=[*_KEYS, "iteration"], how="left")
        .with_columns(window_ns=c("window_end_ns") - c("window_start_ns"))
        .with_columns(pl.exclude("rank", "device", "iteration").fill_null(0))
        .with_columns(comm_exposed_ns=pl.sum_horizontal([c(f"{n}_ns") for n in COMM_CLASSES]))
        .sort(*_KEYS, "window_start_ns")
    )
    return out


def idle_causes(
    segments: pl.DataFrame,
    gpu: pl.DataFrame,
    cpu: pl.DataFrame,
    runtime: pl.DataFrame,
    host: dict[str, str],
    launch_gap_us: float = LAUNCH_GAP_US,
) -> pl.DataFrame:
    """The visible cause of every idle segment.

    For an idle gap ``[a, b)`` the *next* GPU activity (the first to start at or after ``b``) and
    its launch call (``launch_ns`` on thread ``launch_tid``) decide:

    - the launch came after the GPU went idle (``launch_ns > a``): the host was late.
      ``data_loader`` if a data-loader span (``host.data_loader`` pattern) overlaps
      ``[a, launch_ns]``; else ``synchronisation`` if a blocking CUDA call
      (``host.synchronisation`` pattern) on the launching thread overlaps ``[a, launch_ns]``
      (the host had drained the GPU and was just resuming); else ``kernel_launch`` (the host was
      busy elsewhere: framework and Python overhead, launch-bound code);
    - the work was already queued (``launch_ns <= a``): ``kernel_launch`` (GPU-side launch
      latency) when the gap is shorter than ``launch_gap_us``, else ``dependency`` (the queued
      work waited on an event, another stream or a host callback);
    - ``unknown`` when the next activity has no launch record.

    This is the classification of Holistic Trace Analysis' idle-time breakdown (host wait /
    kernel wait / other), refined with the host events that explain a host wait.

    Returns:
        ``segments``' idle rows: ``rank, device, iteration, t_ns, end_ns, dur_ns, cause``.
    """
    idle = segments.filter(c("state") == "idle").select(*_KEYS, "iteration", "t_ns", "end_ns", "dur_ns")
    nxt = (
        gpu.select(*_KEYS, _next_start=c("start_ns"), _launch=c("launch_ns"), _pid=c("launch_pid"),
                   _tid=c("launch_tid"))
        .sort("_next_start")
    )
    idle = (
        idle.sort("end_ns")
        .join_asof(nxt, left_on="end_ns", right_on="_next_start", by=_KEYS, strategy="forward", check_sortedness=False)
    )
    # data-loader spans of each rank, merged into disjoint intervals
    dl = cpu.filter(c("name").str.contains(host["data_loader"])).select("rank", s="ts_ns", e="end_ns").sort("rank", "s")
    dl = (
        dl.with_columns(_prev=c("e").cum_max().shift(1).over("rank"))
        .with_columns(_g=(c("_prev").is_null() | (c("s") > c("_prev"))).cum_sum().over("rank"))
        .group_by("rank", "_g").agg(_dl_s=c("s").min(), _dl_e=c("e").max()).drop("_g").sort("_dl_s")
    )
    sync = (
        runtime.filter(c("name").str.contains(host["synchronisation"]))
        .select("rank", _pid=c("pid"), _tid=c("tid"), _sy_s=c("ts_ns"), _sy_e=c("end_ns")).sort("_sy_s")
    )
    late = c("_launch") > c("t_ns")
    idle = (
        idle.with_columns(_probe=pl.when(late).then(c("_launch")))
        .sort("_probe")
        .join_asof(dl, left_on="_probe", right_on="_dl_s", by="rank", strategy="backward",
                   check_sortedness=False)
        .join_asof(sync, left_on="_probe", right_on="_sy_s", by=["rank", "_pid", "_tid"], strategy="backward",
                   check_sortedness=False)
    )
    gap_ns = launch_gap_us * 1000.0
    cause = (
        pl.when(c("_launch").is_null()).then(pl.lit("unknown"))
        .when(late & (c("_dl_e") >= c("t_ns"))).then(pl.lit("data_loader"))
        .when(late & (c("_sy_e") >= c("t_ns"))).then(pl.lit("synchronisation"))
        .when(late).then(pl.lit("kernel_launch"))
        .when(c("dur_ns") < gap_ns).then(pl.lit("kernel_launch"))
        .otherwise(pl.lit("dependency"))
    )
    return idle.with_columns(cause=cause).select(*_KEYS, "iteration", "t_ns", "end_ns", "dur_ns", "cause").sort(
        *_KEYS, "t_ns")


def idle_by_cause(idle: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Idle time per (rank, device, iteration) and cause: ``idle_<cause>_ns`` columns (one per
    :data:`IDLE_CAUSES`) and ``idle_gaps`` (number of idle segments)."""
    agg = idle.group_by(*_KEYS, "iteration").agg(
        *(c("dur_ns").filter(c("cause") == k).sum().alias(f"idle_{k}_ns") for k in IDLE_CAUSES),
        idle_gaps=pl.len(),
    )
    return (
        windows.select(*_KEYS, "iteration").join(agg, on=[*_KEYS, "iteration"], how="left")
        .with_columns(pl.exclude("rank", "device", "iteration").fill_null(0))
    )
