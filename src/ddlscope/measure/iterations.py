"""Training iterations: CPU spans from markers, and the windows the breakdown is computed over.

**CPU iterations.** The iteration markers of the rules are tried in order (``ProfilerStep#N``
first); the first that matches CPU events of a rank defines its iterations (see the
``[[iteration_marker]]`` section of the rules file for the ``span`` / ``start`` / ``end`` modes).
Markers of mode ``start`` and ``end`` (``enumerate(DataLoader)``, ``Optimizer.step``) are
*inferred* iterations, and a step may hold several of them (a model with two optimizers has two
``Optimizer.step`` events per step): the segments between marker events are folded by the period
with which they repeat (:func:`segment_period`). A rank where no marker matches, or where the
segments do not repeat, is analysed as one "whole trace" iteration. The rule used is the
``iteration_rule`` column: ``"ProfilerStep markers"``, ``"2 optimizer steps per iteration
(repeating structure)"``, ``"whole trace as one iteration"`` (:data:`WHOLE_TRACE`).

**Windows.** Iteration *k*'s window is its wall-clock span on the rank's clock, from its start to
the start of iteration *k+1* (the last one ends where its CPU span ends), so the windows tile the
timeline: every instant of a window is accounted for exactly once by the breakdown
(``window = components + idle``) and a window is as long as the iteration the user measures.
When the CPU runs ahead of the GPU, the GPU work inside window *k* may have been launched in an
earlier iteration; GPU work after the last window's end (also the part past it of work that starts
inside it) is not in the breakdown, and a note of the analysis gives its count and time. A
whole-trace rank has one window from its first to its last GPU activity.

**GPU span.** The temporal summary in Holistic Trace Analysis' terms covers the GPU work
*launched* during the iterations (launch call joined by ``correlation``, HTA's rule), over one
window per GPU from the first to the last of those activities: the kernels and span HTA's
``get_temporal_breakdown`` uses with ``include_last_profiler_step=True``.
"""

from __future__ import annotations

import polars as pl

from ddlscope.measure.rules import IterationMarker, TraceRules

c = pl.col
WHOLE_TRACE = "whole trace as one iteration"
"""The ``iteration_rule`` of a rank analysed as one window from its first to its last GPU activity."""
MATCH_SHARE = 0.8
"""Share of segments that must look like the segment one period earlier for the period to hold
(:func:`segment_period`, which also tolerates a single odd segment): a first segment holding set-up
work, a last one cut short, an iteration with a checkpoint save. A stated threshold."""
MAX_PERIOD = 16
"""Longest period tried (marker events per iteration, e.g. optimizers of one model)."""
_MARKER_CATS = ("cpu_op", "user_annotation", "python_function", "Operator", "user_anno")


def _spans(events: pl.DataFrame, marker: IterationMarker, cpu: pl.DataFrame) -> pl.DataFrame:
    """CPU iteration spans of one marker: ``rank, iteration, cpu_start_ns, cpu_end_ns``."""
    ev = events.sort("rank", "ts_ns", -c("end_ns"))
    if marker.mode == "span":
        # nested matches: keep the outermost (a span inside an earlier one is not an iteration)
        ev = ev.filter(
            (c("ts_ns") >= c("end_ns").cum_max().shift(1).over("rank")).fill_null(True)
        ).select("rank", "name", "tid", cpu_start_ns="ts_ns", cpu_end_ns="end_ns")
    elif marker.mode == "start":
        ends = (
            cpu.filter(c("name").str.contains(marker.end_pattern)).group_by("rank").agg(_last_end=c("end_ns").max())
            if marker.end_pattern else pl.DataFrame(schema={"rank": pl.Int64, "_last_end": pl.Int64})
        )
        thread_end = cpu.group_by("rank", "tid").agg(_thread_end=c("end_ns").max())
        ev = (
            ev.join(ends, on="rank", how="left").join(thread_end, on=["rank", "tid"], how="left")
            .with_columns(_next=c("ts_ns").shift(-1).over("rank"))
            .select("rank", "name", "tid", cpu_start_ns="ts_ns",
                    cpu_end_ns=pl.coalesce(
                        c("_next"),
                        pl.when(c("_last_end") > c("ts_ns")).then(c("_last_end")).otherwise(c("_thread_end"))))
        )
    else:  # "end"
        thread_start = cpu.group_by("rank", "tid").agg(_thread_start=c("ts_ns").min())
        ev = (
            ev.join(thread_start, on=["rank", "tid"], how="left")
            .with_columns(_prev=c("end_ns").shift(1).over("rank"))
            .select("rank", "name", "tid", cpu_start_ns=pl.coalesce(c("_prev"), c("_thread_start")),
                    cpu_end_ns="end_ns")
        )
    number = c("name").str.extract(r"#(\d+)$").cast(pl.Int64)
    ordinal = c("cpu_start_ns").rank("ordinal").over("rank").cast(pl.Int64) - 1
    # the number in the marker's name (ProfilerStep#12) when every marker has a distinct one
    numbered = number.is_not_null().all().over("rank") & (number.n_unique().over("rank") == pl.len().over("rank"))
    labelled = c("name").str.contains(marker.warmup_pattern) if marker.warmup_pattern else pl.lit(False)
    return ev.with_columns(
        iteration=pl.when(numbered).then(number).otherwise(ordinal),
        marker=pl.lit(marker.name),
        labelled_warmup=labelled,
    ).select("rank", "iteration", "marker", "cpu_start_ns", "cpu_end_ns", "labelled_warmup",
             _event="name", _tid="tid")


def segment_period(signatures: list, share: float = MATCH_SHARE, max_period: int = MAX_PERIOD) -> int | None:
    """The smallest period with which a sequence of segment signatures repeats.

    ``p`` holds when at least ``share`` of the ``n - p`` segments ``i >= p`` equal segment ``i - p``,
    or, from three such comparisons on, when only one differs (one odd segment: a first one holding
    set-up work, a last one cut short by the profiler's stop); tried for ``p = 1 .. min(n // 2,
    max_period)`` (at least two repetitions seen). One segment has period 1. Autocorrelation of a
    symbol sequence at lag ``p``, with a tolerance for odd segments.

    Returns:
        The period, or None when the sequence does not repeat.
    """
    n = len(signatures)
    if n == 1:
        return 1
    for p in range(1, min(n // 2, max_period) + 1):
        same = sum(signatures[i] == signatures[i - p] for i in range(p, n))
        if same >= share * (n - p) or (n - p >= 3 and same >= n - p - 1):
            return p
    return None


def _signatures(spans: pl.DataFrame, cpu: pl.DataFrame) -> dict[int, list[tuple[str, tuple[str, ...]]]]:
    """Per rank, per segment (in time order): the marker event's name and the sorted distinct names
    (digits replaced by ``#``) of the top-level CPU operators that start in the segment on the
    marker's thread."""
    thread = spans.group_by("rank").agg(tid=c("_tid").mode().first())
    ops = (
        cpu.join(thread, on=["rank", "tid"], how="inner")
        .sort("rank", "ts_ns", -c("end_ns"))
        .filter((c("ts_ns") >= c("end_ns").cum_max().shift(1).over("rank")).fill_null(True))
        .select("rank", "ts_ns", name=c("name").str.replace_all(r"\d+", "#"))
    )
    seg = spans.sort("cpu_start_ns").with_columns(_seg=c("cpu_start_ns").rank("ordinal").over("rank") - 1)
    hit = (
        ops.sort("ts_ns")
        .join_asof(seg.select("rank", "cpu_start_ns", "cpu_end_ns", "_seg"), left_on="ts_ns",
                   right_on="cpu_start_ns", by="rank", strategy="backward", check_sortedness=False)
        .filter(c("ts_ns") < c("cpu_end_ns"))
        .group_by("rank", "_seg").agg(names=c("name").unique().sort())
    )
    full = seg.join(hit, on=["rank", "_seg"], how="left").sort("rank", "_seg")
    out: dict[int, list[tuple[str, tuple[str, ...]]]] = {}
    for rank, event, names in full.select("rank", "_event", "names").iter_rows():
        out.setdefault(rank, []).append((event, tuple(names or ())))
    return out


def _fold(spans: pl.DataFrame, cpu: pl.DataFrame, marker: IterationMarker) -> tuple[pl.DataFrame, dict[int, str]]:
    """Inferred iterations (``start``/``end`` markers): the segments of each rank folded by their
    period. Returns the iterations of the ranks where the segments repeat, with ``iteration_rule``
    and ``segments_left_out`` (segments at the start, for ``end`` markers, or the end, for ``start``
    markers, that make no whole iteration), and for the other ranks why not."""
    sigs = _signatures(spans, cpu)
    folded: list[pl.DataFrame] = []
    failed: dict[int, str] = {}
    for (rank,), part in spans.sort("cpu_start_ns").group_by(["rank"], maintain_order=True):
        n = part.height
        p = segment_period(sigs.get(rank, [("", ())] * n))
        if p is None:
            failed[rank] = (f"{marker.name}: {n} found, in segments that do not repeat (no period up to "
                            f"{min(n // 2, MAX_PERIOD)} with {MATCH_SHARE:.0%} of the segments alike)")
            continue
        if p == 1:
            rule = f"1 {marker.event} per iteration (" + (
                "repeating structure)" if n > 1 else "the only one in the trace)")
            folded.append(part.with_columns(iteration_rule=pl.lit(rule), segments_left_out=pl.lit(0, pl.Int64)))
            continue
        k, left = n // p, n % p
        offset = left if marker.mode == "end" else 0
        groups = part.with_row_index("_i").with_columns(_g=(c("_i").cast(pl.Int64) - offset) // p).filter(
            (c("_i") >= offset) & (c("_g") < k))
        folded.append(
            groups.group_by("_g", maintain_order=True).agg(
                rank=c("rank").first(), marker=c("marker").first(), cpu_start_ns=c("cpu_start_ns").min(),
                cpu_end_ns=c("cpu_end_ns").max(), labelled_warmup=c("labelled_warmup").any(),
                _event=c("_event").first(), _tid=c("_tid").first())
            .select("rank", iteration=c("_g"), marker="marker", cpu_start_ns="cpu_start_ns",
                    cpu_end_ns="cpu_end_ns", labelled_warmup="labelled_warmup", _event="_event", _tid="_tid",
                    iteration_rule=pl.lit(f"{p} {marker.event}s per iteration (repeating structure)"),
                    segments_left_out=pl.lit(left, pl.Int64))
        )
    schema = {**dict(spans.schema), "iteration_rule": pl.String, "segments_left_out": pl.Int64}
    return (pl.concat(folded, how="diagonal_relaxed") if folded else pl.DataFrame(schema=schema)), failed


def cpu_iterations(cpu: pl.DataFrame, gpu: pl.DataFrame, rules: TraceRules) -> pl.DataFrame:
    """The CPU iteration spans of every rank.

    Args:
        cpu: the ``cpu`` table of :class:`~ddlscope.measure.tables.TraceTables`.
        gpu: the ``gpu`` table (for the whole-trace fallback's extent).

    Returns:
        ``rank, iteration, marker, iteration_rule, segments_left_out, cpu_start_ns, cpu_end_ns,
        labelled_warmup, cpu_step_ns``: ``marker`` names the marker rule that found the iterations
        (for a whole-trace rank: why no marker did); ``iteration_rule`` the rule in words (the
        marker's name for ``span`` markers, e.g. ``"ProfilerStep markers"``; ``"2 optimizer steps
        per iteration (repeating structure)"`` for folded ones; :data:`WHOLE_TRACE`);
        ``segments_left_out``: marker segments that make no whole iteration (folded markers);
        ``labelled_warmup``: the marker event's name matches the marker's ``warmup_pattern``.
    """
    markable = cpu.filter(c("cat").is_in(_MARKER_CATS))
    ranks = gpu.select("rank").unique()
    found: list[pl.DataFrame] = []
    done = pl.DataFrame(schema={"rank": pl.Int64})
    why: dict[int, list[str]] = {}
    for marker in rules.markers:
        hits = markable.filter(c("name").str.contains(marker.pattern)).join(done, on="rank", how="anti")
        if hits.height:
            spans = _spans(hits, marker, cpu)
            if marker.mode == "span":
                spans = spans.with_columns(iteration_rule=pl.lit(marker.name), segments_left_out=pl.lit(0, pl.Int64))
            else:
                spans, failed = _fold(spans, cpu, marker)
                for r, reason in failed.items():
                    why.setdefault(r, []).append(reason)
            if spans.height:
                found.append(spans.drop("_event", "_tid"))
                done = pl.concat([done, spans.select("rank").unique()])
    rest = ranks.join(done, on="rank", how="anti")
    if rest.height:
        extent = (
            pl.concat([cpu.select("rank", "ts_ns", "end_ns"),
                       gpu.select("rank", ts_ns=c("start_ns"), end_ns=c("end_ns"))])
            .join(rest, on="rank").group_by("rank").agg(cpu_start_ns=c("ts_ns").min(), cpu_end_ns=c("end_ns").max())
        )
        none = "no iteration marker rules (--whole-trace)" if not rules.markers else "no iteration markers found"
        reason = pl.DataFrame({"rank": list(why), "_why": ["; ".join(v) for v in why.values()]},
                              schema={"rank": pl.Int64, "_why": pl.String})
        found.append(extent.join(reason, on="rank", how="left").select(
            "rank", iteration=pl.lit(0, pl.Int64), marker=pl.coalesce(c("_why"), pl.lit(none)),
            cpu_start_ns="cpu_start_ns", cpu_end_ns="cpu_end_ns", labelled_warmup=pl.lit(False),
            iteration_rule=pl.lit(WHOLE_TRACE), segments_left_out=pl.lit(0, pl.Int64)))
    return (
        pl.concat(found, how="diagonal_relaxed").sort("rank", "cpu_start_ns")
        .select("rank", "iteration", "marker", "iteration_rule", "segments_left_out", "cpu_start_ns", "cpu_end_ns",
                "labelled_warmup")
        .with_columns(cpu_step_ns=c("cpu_end_ns") - c("cpu_start_ns"))
    )


WARMUP_FACTOR = 3.0
"""A first iteration longer than this many times the median of the others is a warm-up iteration."""
MIN_OTHERS = 2
"""Iterations besides the first needed for a median to judge it by."""
LABELLED, SLOW_FIRST = "labelled", "slow first"


def warmup_iterations(
    windows: pl.DataFrame, iterations: pl.DataFrame, factor: float = WARMUP_FACTOR,
) -> tuple[pl.DataFrame, dict[str, object]]:
    """Which iterations are warm-up iterations.

    Two kinds: iterations the trace labels as warm-up (the marker's ``warmup_pattern``, e.g.
    PARAM's ``|warmup|``), and a *slow first iteration*: the first unlabelled iteration is a
    warm-up when the job's step time of it exceeds ``factor`` times the median of the job's later
    unlabelled iterations (at least :data:`MIN_OTHERS` of them). The job's step time of an
    iteration is its longest window over ranks and devices (in synchronous training every rank
    waits for the slowest). The first iterations of a training run are slow for one-off work:
    cuDNN algorithm search (``torch.backends.cudnn.benchmark``), the caching allocator growing,
    NCCL communicator set-up, lazy initialisation and compilation; this is why
    ``torch.profiler.schedule`` has ``warmup`` steps and benchmarks discard warm-up iterations. The
    factor 3 is a stated threshold (it flags the 4.45 s first step of ``param_dlrm/resnet_kineto``,
    25.3x the median of the others, 175.8 ms). Only the first iteration is judged: later slow iterations (the
    300-800 ms data-loader stalls of the same trace) are the job's own behaviour and stay in.

    Args:
        windows: :func:`gpu_windows` (``rank, device, iteration, window_start_ns, window_end_ns``).
        iterations: :func:`cpu_iterations` (``rank, iteration, labelled_warmup``).
        factor: the threshold (> 1).

    Returns:
        ``(flags, info)``: ``flags`` has ``rank, iteration, warmup`` (``"labelled"``,
        ``"slow first"`` or null); ``info`` has ``factor``, ``labelled`` (count of labelled (rank,
        iteration) rows), ``slow_first_iteration`` (its number or None), ``slow_first_ratio`` (its step over the
        median of the others, or None), ``slow_first_step_ns`` and ``others_median_ns``.
    """
    labels = iterations.select("rank", "iteration", "labelled_warmup")
    steps = (
        windows.join(labels, on=["rank", "iteration"], how="left")
        .filter(~c("labelled_warmup").fill_null(False))
        .group_by("iteration").agg(step_ns=(c("window_end_ns") - c("window_start_ns")).max())
        .sort("iteration")
    )
    info: dict[str, object] = {"factor": factor, "labelled": int(labels["labelled_warmup"].sum()),
                               "slow_first_iteration": None,
                               "slow_first_ratio": None, "slow_first_step_ns": None, "others_median_ns": None}
    if steps.height >= 1 + MIN_OTHERS:
        first, median = int(steps["step_ns"][0]), float(steps["step_ns"].slice(1).median())
        if median > 0 and first > factor * median:
            info.update(slow_first_iteration=int(steps["iteration"][0]), slow_first_ratio=first / median,
                        slow_first_step_ns=first, others_median_ns=median)
    flags = labels.select(
        "rank", "iteration",
        warmup=pl.when(c("labelled_warmup")).then(pl.lit(LABELLED))
        .when(c("iteration") == info["slow_first_iteration"] if info["slow_first_iteration"] is not None
              else pl.lit(False)).then(pl.lit(SLOW_FIRST))
        .otherwise(pl.lit(None, pl.String)),
    )
    return flags, info


def assign_iteration(gpu: pl.DataFrame, iterations: pl.DataFrame) -> pl.DataFrame:
    """``gpu`` with ``launch_iteration``: the CPU iteration whose span holds the activity's launch
    call (null when the launch is unknown or outside every iteration)."""
    spans = iterations.select("rank", "iteration", "cpu_start_ns", "cpu_end_ns").sort("cpu_start_ns")
    left = gpu.with_row_index("_it_row")
    hit = (
        left.filter(c("launch_ns").is_not_null()).select("_it_row", "rank", "launch_ns").sort("launch_ns")
        .join_asof(spans, left_on="launch_ns", right_on="cpu_start_ns", by="rank", strategy="backward",
                   check_sortedness=False)
        .filter(c("launch_ns") < c("cpu_end_ns"))
        .select("_it_row", launch_iteration="iteration")
    )
    return left.join(hit, on="_it_row", how="left").sort("_it_row").drop("_it_row")


def gpu_windows(gpu: pl.DataFrame, iterations: pl.DataFrame) -> pl.DataFrame:
    """The window of every (rank, device, iteration); see the module docstring.

    Args:
        gpu: GPU activities (``rank``, ``device``, ``start_ns``, ``end_ns``).
        iterations: :func:`cpu_iterations`.

    Returns:
        ``rank, device, iteration, window_start_ns, window_end_ns`` sorted by time.
    """
    devices = gpu.select("rank", "device").unique()
    timed = (
        iterations.filter(c("iteration_rule") != WHOLE_TRACE).sort("rank", "cpu_start_ns")
        .with_columns(window_start_ns=c("cpu_start_ns"),
                      window_end_ns=pl.coalesce(c("cpu_start_ns").shift(-1).over("rank"), c("cpu_end_ns")))
        .join(devices, on="rank")
    )
    whole = iterations.filter(c("iteration_rule") == WHOLE_TRACE).select("rank", "iteration")
    whole_w = (
        gpu.join(whole, on="rank").group_by("rank", "device", "iteration")
        .agg(window_start_ns=c("start_ns").min(), window_end_ns=c("end_ns").max())
    )
    cols = ["rank", "device", "iteration", "window_start_ns", "window_end_ns"]
    return (
        pl.concat([timed.select(cols), whole_w.select(cols)])
        .filter(c("window_end_ns") > c("window_start_ns"))
        .sort("rank", "device", "window_start_ns")
    )


def gpu_span(gpu: pl.DataFrame, iterations: pl.DataFrame) -> pl.DataFrame:
    """One window per (rank, device) from the first to the last GPU activity launched during the
    iterations (``launch_iteration`` not null; all activities of a whole-trace rank).

    Returns:
        ``rank, device, iteration`` (always 0), ``window_start_ns, window_end_ns``.
    """
    whole = iterations.filter(c("iteration_rule") == WHOLE_TRACE).select("rank").unique()
    inside = gpu.filter(c("launch_iteration").is_not_null() | c("rank").is_in(whole["rank"].implode()))
    return (
        inside.group_by("rank", "device")
        .agg(iteration=pl.lit(0, pl.Int64), window_start_ns=c("start_ns").min(), window_end_ns=c("end_ns").max())
        .sort("rank", "device")
    )


def assign_window(frame: pl.DataFrame, windows: pl.DataFrame, at: str) -> pl.DataFrame:
    """``frame`` with ``iteration``: the window of the same (rank, device) holding time ``at``
    (null outside every window)."""
    w = windows.sort("window_start_ns")
    left = frame.with_row_index("_it_row")
    hit = (
        left.filter(c(at).is_not_null()).select("_it_row", "rank", "device", c(at).alias("_at")).sort("_at")
        .join_asof(w, left_on="_at", right_on="window_start_ns", by=["rank", "device"], strategy="backward",
                   check_sortedness=False)
        .filter(c("_at") < c("window_end_ns"))
        .select("_it_row", "iteration")
    )
    return left.join(hit, on="_it_row", how="left").sort("_it_row").drop("_it_row")
