"""The notes of ``ddlscope trace``: what was assumed, inferred or left out, one sentence each.

Written once from a :class:`~ddlscope.measure.analysis.TraceAnalysis` (its tables and
:class:`~ddlscope.measure.analysis.TraceFacts`) for the console, the JSON output, the HTML report
and the Python API (:attr:`ddlscope.api.TraceResult.notes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from ddlscope.measure.analysis import TraceAnalysis
from ddlscope.measure.iterations import LABELLED, SLOW_FIRST, WHOLE_TRACE

c = pl.col

LEFT_OUT = "left out of the means, the rank skew, the model check and the what-if baseline"


def trace_notes(a: TraceAnalysis) -> list[str]:
    """Every note of ``a``, in this order: the reader's notes; how the iterations were found per
    rank; marker segments left out; warm-up iterations; GPU work before the first and after the
    last iteration; clipped activities; events not used; bad events; execution traces; kernels no
    rule matched; all-to-all calls without split sizes; collectives without a message size; the
    hardware's notes; the compute precision; FLOPs from an execution trace."""
    f = a.facts
    ranks = a.ranks
    notes: list[str] = list(f.input_notes)
    for rule, marker, n in ranks.group_by("iteration_rule", "marker", maintain_order=True).agg(pl.len()).iter_rows():
        notes.append(f"iterations of {n} rank(s): {rule}" + (f" ({marker})" if marker != rule else "")
                     + (" - one window from the first to the last GPU activity" if rule == WHOLE_TRACE else ""))
    for r, left, rule in ranks.filter(c("segments_left_out") > 0).select(
            "rank", "segments_left_out", "iteration_rule").iter_rows():
        notes.append(f"rank {r}: {left} marker segment(s) make no whole iteration ({rule}): left out of the "
                     "iterations (at the trace's start for markers that end an iteration, at its end for markers "
                     "that start one; their GPU work is noted as before the first or after the last iteration)")
    notes.extend(warmup_notes(a.warmup, f.keep_warmup))
    for side, where in (("after_last", "after the last iteration's end"),
                        ("before_first", "before the first iteration's start")):
        n_out = int(ranks[f"activities_{side}_iteration"].sum())
        if n_out:
            per = "" if ranks.height == 1 else " (" + ", ".join(
                f"rank {r}: {n}" for r, n in ranks.filter(c(f"activities_{side}_iteration") > 0)
                .select("rank", f"activities_{side}_iteration").iter_rows()) + ")"
            why = (" (work launched in the last iteration still running when it ended, or work after the "
                   "iterations the trace marks)" if side == "after_last" else "")
            notes.append(f"{n_out} GPU activities{per} run {where}: "
                         f"{ranks[f'gpu_time_{side}_iteration_us'].sum() / 1e3:.3f} ms of GPU time there is not in "
                         f"the breakdown{why}")
    if f.clipped.height:
        cl = f.clipped
        per = "" if ranks.height == 1 else " (" + ", ".join(
            f"rank {r}: {n}" for r, n in cl.group_by("rank").len().sort("rank").iter_rows()) + ")"
        top = cl.sort("removed_ns", descending=True).row(0, named=True)
        name = top["name"] if len(top["name"]) <= 60 else top["name"][:57] + "..."
        notes.append(f"{cl.height} GPU activities{per} ran past the start of the next activity of their stream, "
                     "which cannot be (a stream runs its work in order): each end clipped to that start, "
                     f"{cl['removed_ns'].sum() / 1e6:.3f} ms removed (longest: {name!r} on device {top['device']} "
                     f"stream {top['stream']}, {(top['old_end_ns'] - top['start_ns']) / 1e3:g} us -> "
                     f"{(top['end_ns'] - top['start_ns']) / 1e3:g} us)")
    skipped: dict[str, int] = {}
    for t in f.skipped:
        for k, v in t.counts.items():
            if k not in t.examples:  # bad data: one note per file below
                skipped[k] = skipped.get(k, 0) + v
    if skipped:
        notes.append("events not used (all ranks): " + ", ".join(f"{v} {k}" for k, v in sorted(skipped.items()))
                     + " - flow (s/f), metadata (M), instant (i) and counter (C) events carry no GPU time")
    for t in f.skipped:
        for reason, example in t.examples.items():
            notes.append(f"{t.source}: {t.counts[reason]} {reason} left out, its time is missing from the "
                         f"breakdown (first: {example})")
    if f.executions:
        notes.append(f"{f.executions} execution trace(s) read: they give op shapes (FLOPs) for ranks whose "
                     "profiler trace has none")
    if a.unclassified.height:
        notes.append(f"{a.unclassified.height} kernel name(s) matched no rule: counted as 'unclassified' "
                     f"({a.unclassified['time_us'].sum() / 1e3:.3f} ms); add rules with --rules")
    calls = a.calls
    approx = calls.filter(c("bw_approx"))
    if approx.height:
        n_a2a = calls.filter(c("collective") == "all_to_all").height
        notes.append(f"{approx.height} of {n_a2a} all-to-all calls have no complete split sizes in the trace "
                     "('In split size' / 'Out split size' missing, truncated or not matching the group): their bus "
                     "bandwidth assumes even splits and is approximate (bw_approx)")
    unknown = calls.filter(c("size_bytes").is_null()).height
    if unknown:
        notes.append(f"{unknown} of {calls.height} collective calls have no message size in the trace (no "
                     "'In msg nelems' args and no recorded shapes): their bandwidth is unknown")
    if a.hardware is not None:
        notes.extend(a.hardware.notes)
    notes.append(f"compute precision: {a.precision} (most compute-bound kernel time; from kernel names)")
    if f.flops_from_execution_trace:
        notes.append("model check: FLOPs from the execution trace(s) where the Kineto trace has no op shapes")
    return notes


def warmup_notes(warm: Mapping[str, Any], keep_warmup: bool) -> list[str]:
    """One line per kind of warm-up iteration found (:attr:`TraceAnalysis.warmup
    <ddlscope.measure.analysis.TraceAnalysis.warmup>`), saying what was done with it."""
    out: list[str] = []
    kept = keep_warmup or (warm["kept"] and not warm["excluded"])
    fate = ("kept in the means (--keep-warmup)" if keep_warmup
            else "kept in the means: every iteration is a warm-up" if kept
            else f"{LEFT_OUT} (--keep-warmup keeps them)")
    if warm["labelled"]:
        out.append(f"warm-up: {warm['labelled']} iteration(s) labelled warm-up by their marker (warmup = "
                   f"'{LABELLED}' in the per-iteration table): {fate}")
    if warm["slow_first_iteration"] is not None:
        out.append(f"warm-up: iteration {warm['slow_first_iteration']} took {warm['slow_first_step_ns'] / 1e6:.1f} ms, "
                   f"{warm['slow_first_ratio']:.1f}x the median of the later iterations "
                   f"({warm['others_median_ns'] / 1e6:.1f} ms; threshold {warm['factor']:g}x): one-off set-up (cuDNN "
                   f"autotuning, allocator growth, NCCL initialisation) is the usual cause (warmup = '{SLOW_FIRST}'): "
                   f"{fate}")
    return out
