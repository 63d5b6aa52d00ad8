"""The named analyzers of ddlscope.measure.analysis, and the notes written from their record.

By hand: :func:`mark_warmup` on four windows. On the shared data: the HTA ``trace_filter`` traces
(two ranks of a 128-GPU job), whose figures the console prints (``ddlscope trace``).
"""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest

from ddlscope.measure.analysis import analyze_traces, kernel_shares, mark_warmup
from ddlscope.report.trace_notes import trace_notes, warmup_notes

MS = 1_000_000  # ns per ms


def _windows(ms: list[int]) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    starts = [sum(ms[:i]) * MS for i in range(len(ms))]
    n = len(ms)
    ends = [s + m * MS for s, m in zip(starts, ms, strict=True)]
    win = pl.DataFrame({"rank": [0] * n, "device": [0] * n, "iteration": list(range(n)),
                        "window_start_ns": starts, "window_end_ns": ends})
    its = pl.DataFrame({"rank": [0] * n, "iteration": list(range(n)), "labelled_warmup": [False] * n})
    bd = win.select("rank", "device", "iteration", window_us=pl.Series([m * 1e3 for m in ms]))
    return bd, win, its


def test_a_slow_first_window_is_left_out_of_the_means():
    # 400 ms, then 100, 110, 90 ms: median of the others 100 ms, ratio 4 > 3 -> a slow first iteration
    bd, win, its = _windows([400, 100, 110, 90])
    out, warm = mark_warmup(bd, win, its, 3.0, keep_warmup=False)
    assert out["warmup"].to_list() == ["slow first", None, None, None]
    assert out["in_means"].to_list() == [False, True, True, True]
    assert warm["slow_first_iteration"] == 0 and warm["slow_first_ratio"] == pytest.approx(4.0)
    assert warm["others_median_ns"] == 100 * MS and (warm["excluded"], warm["kept"]) == (1, 0)
    assert warmup_notes(warm, False) == [
        "warm-up: iteration 0 took 400.0 ms, 4.0x the median of the later iterations (100.0 ms; threshold 3x): "
        "one-off set-up (cuDNN autotuning, allocator growth, NCCL initialisation) is the usual cause (warmup = "
        "'slow first'): left out of the means, the rank skew, the model check and the what-if baseline "
        "(--keep-warmup keeps them)"]
    kept, warm = mark_warmup(bd, win, its, 3.0, keep_warmup=True)
    assert kept["in_means"].all() and (warm["excluded"], warm["kept"]) == (0, 1)
    # 250 ms is 2.5x: under the threshold, nothing is a warm-up
    _, warm = mark_warmup(*_windows([250, 100, 110, 90]), 3.0, keep_warmup=False)
    assert warm["slow_first_iteration"] is None and warmup_notes(warm, False) == []


def test_kernel_shares_by_hand():
    g = pl.DataFrame({"rank": [0, 0, 0, 1], "class": ["compute_bound", "compute_bound", "memory_bound", "comm"],
                      "kind": ["gemm", "gemm", "elementwise", "all_reduce"],
                      "dur_ns": [3_000, 1_000, 6_000, 500]})   # rank 0: 10 µs of kernels
    k = kernel_shares(g)
    assert k.select("rank", "class", "kernels", "time_us", "share").rows() == [
        (0, "memory_bound", 1, 6.0, 0.6), (0, "compute_bound", 2, 4.0, 0.4), (1, "comm", 1, 0.5, 1.0)]


@pytest.fixture(scope="module")
def hta(shared_data):
    return analyze_traces([shared_data / "hta_traces" / "trace_filter"])


def test_the_record_is_frozen_and_the_notes_are_the_ones_printed(hta):
    with pytest.raises(dataclasses.FrozenInstanceError):
        hta.breakdown = None
    with pytest.raises(TypeError):
        hta.warmup["excluded"] = 3
    assert trace_notes(hta) == [
        "iterations of 2 rank(s): ProfilerStep markers",
        "events not used (all ranks): 88 phase 'M' (not a complete event), 2 profiler span (cat 'Trace') - flow "
        "(s/f), metadata (M), instant (i) and counter (C) events carry no GPU time",
        "8 of 8 all-to-all calls have no complete split sizes in the trace ('In split size' / 'Out split size' "
        "missing, truncated or not matching the group): their bus bandwidth assumes even splits and is approximate "
        "(bw_approx)",
        "GPU: the trace has no deviceProperties; pass --gpu for the what-if and model check",
        "architecture: pearl with 128 GPU(s) (all-to-all collectives seen; world size 128)",
        "compute precision: tf32 (most compute-bound kernel time; from kernel names)",
    ]
    f = hta.facts
    assert f.executions == 0 and f.clipped.height == 0 and not f.flops_from_execution_trace
    assert [t.counts.get("phase 'M' (not a complete event)", 0) for t in f.skipped] == [44, 44]


def test_the_analyzers_tables_on_the_shared_traces(hta):
    # temporal shares (HTA's terms) per rank: idle + compute + non-compute tile the span
    t = hta.temporal
    assert t["span_us"].to_list() == pytest.approx([1_222_847.0, 1_231_186.0])
    assert t["idle_pct"].to_list() == pytest.approx([55.2146752619093, 52.886891176475366])
    assert (t["idle_pct"] + t["compute_pct"] + t["non_compute_pct"]).to_list() == pytest.approx([100.0, 100.0])
    # kernel shares of each rank sum to 1; the breakdown's exclusive parts tile each window
    assert hta.kernels.group_by("rank").agg(pl.col("share").sum())["share"].to_list() == pytest.approx([1.0, 1.0])
    bd = hta.breakdown
    parts = pl.sum_horizontal("compute_bound_us", "memory_bound_us", "unclassified_us", "comm_exposed_us",
                              "device_copy_us", "data_io_us", "idle_us")
    assert (bd.select((parts - pl.col("window_us")).abs().max()).item()) < 1e-6
    assert hta.ranks.height == 2 and hta.ranks["iteration_rule"].to_list() == ["ProfilerStep markers"] * 2
