"""Warm-up iterations: labelled ones and a slow first iteration stay in the per-iteration table,
marked, and out of the means and the what-if baseline (docs/trace.md, "Warm-up iterations")."""

from __future__ import annotations

import polars as pl
import pytest

from ddlscope.measure.iterations import LABELLED, SLOW_FIRST, warmup_iterations
from ddlscope.report.trace_notes import trace_notes

MS = 1_000_000  # ns


def _frames(steps_ms: list[float], labelled: list[bool] | None = None, ranks: int = 1):
    """Windows tiling each rank's timeline with the given step times, and their iterations."""
    rows, its = [], []
    for r in range(ranks):
        start = 0
        for i, ms in enumerate(steps_ms):
            ms = ms + r  # rank r is r ms slower: the job's step is the slowest rank's
            rows.append({"rank": r, "device": 0, "iteration": i, "window_start_ns": start,
                         "window_end_ns": start + int(ms * MS)})
            its.append({"rank": r, "iteration": i, "labelled_warmup": bool(labelled and labelled[i])})
            start += int(ms * MS)
    return pl.DataFrame(rows), pl.DataFrame(its)


def test_slow_first_iteration():
    # job steps (slowest of 2 ranks): 401, 101, 111, 91 ms; median of the others 101 ms;
    # 401 > 3 x 101 = 303 -> a warm-up, ratio 401 / 101
    flags, info = warmup_iterations(*_frames([400, 100, 110, 90], ranks=2))
    assert flags.filter(pl.col("warmup").is_not_null()).select("rank", "iteration", "warmup").rows() == [
        (0, 0, SLOW_FIRST), (1, 0, SLOW_FIRST)]
    assert info["slow_first_iteration"] == 0 and info["slow_first_ratio"] == pytest.approx(401 / 101)
    assert info["others_median_ns"] == 101 * MS


def test_first_iteration_under_the_threshold_stays():
    # 300 ms is not more than 3 x the median 100 ms; with factor 2.5 it is
    _, info = warmup_iterations(*_frames([300, 100, 110, 90]))
    assert info["slow_first_iteration"] is None
    _, info = warmup_iterations(*_frames([300, 100, 110, 90]), factor=2.5)
    assert info["slow_first_iteration"] == 0


def test_a_median_needs_two_other_iterations():
    _, info = warmup_iterations(*_frames([1000, 100]))
    assert info["slow_first_iteration"] is None


def test_labelled_warmup_and_a_slow_first_iteration_after_it():
    # iteration 0 labelled warm-up; of the rest, iteration 1 (500 ms) > 3 x median(100, 120) = 330
    flags, info = warmup_iterations(*_frames([9000, 500, 100, 120], labelled=[True, False, False, False]))
    assert flags.sort("iteration")["warmup"].to_list() == [LABELLED, SLOW_FIRST, None, None]
    assert info["labelled"] == 1 and info["slow_first_ratio"] == pytest.approx(500 / 110)


def test_shared_traces(shared_data):
    """alexnet (PARAM's '|warmup|' / '|measure|' annotations) and resnet (a 4.45 s first step)."""
    from ddlscope.measure.analysis import analyze_traces
    from ddlscope.specs.scenario import BUILTIN_SCENARIOS

    alexnet = f"{shared_data}/hta_traces/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
    h100 = [BUILTIN_SCENARIOS["gpu-h100"]]
    a = analyze_traces([alexnet], scenarios=h100)
    # '[param|...|warmup|forward]' starts at ts 1695835573027138 us, '[param|...|measure|forward]' at
    # 1695835585784481 us and lasts 79678 us: windows 12,757,343 us (labelled) and 79,678 us
    assert a.breakdown.select("iteration", "window_us", "warmup", "in_means").rows() == [
        (0, 1695835585784481 - 1695835573027138, LABELLED, False), (1, 79678.0, None, True)]
    assert a.whatif["measured_step_ms"].to_list() == [79.678, 79.678]
    assert any(n.startswith("warm-up: 1 iteration(s) labelled warm-up") and "left out of the means" in n
               for n in trace_notes(a))
    kept = analyze_traces([alexnet], scenarios=h100, keep_warmup=True)
    assert kept.whatif["measured_step_ms"][0] == pytest.approx((12_757_343 + 79_678) / 2 / 1e3)
    assert kept.breakdown["in_means"].all() and kept.breakdown["warmup"][0] == LABELLED

    r = analyze_traces([f"{shared_data}/param_dlrm/resnet_kineto.json.gz"])
    bd = r.breakdown
    assert bd.filter(~pl.col("in_means")).select("iteration", "warmup").rows() == [(0, SLOW_FIRST)]
    # the median of iterations 1..29 is iteration 2's window, 175.798 ms; iteration 0 took 4450.612 ms
    assert r.warmup["others_median_ns"] == 175_798_000 and r.warmup["slow_first_ratio"] == pytest.approx(
        4450.612 / 175.798)
    assert r.steady.height == 29 and r.skew["iterations"][0] == 29
    from ddlscope.report.trace_tables import sections, summary

    head = summary(r)
    assert (head["iterations"], head["iterations_in_means"]) == (30, 29)
    assert head["mean_step_ms"] == pytest.approx((bd["window_us"].sum() - 4_450_612) / 29 / 1e3)
    assert head["warmup_excluded"].startswith("iteration 0 (slow first): 4451 ms")
    table = dict((name, frame) for name, frame, *_ in sections(r))["breakdown"]
    assert table["warmup"].to_list()[:2] == [SLOW_FIRST, None]
