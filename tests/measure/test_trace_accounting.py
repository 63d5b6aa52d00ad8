"""GPU time the breakdown cannot hold is said, with its size: work after the last iteration, and
activities of one stream that overlap (docs/trace.md, "Windows" and "Overlapping activities")."""

from __future__ import annotations

import json

import polars as pl
from kineto_fixture import ELEMENTWISE, GEMM, _gpu, _launch, fixture_trace

from ddlscope.measure.analysis import analyze_traces
from ddlscope.report.trace_notes import trace_notes


def _run(tmp_path, extra: list[dict], name: str = "rank0.json"):
    doc = fixture_trace()
    doc["traceEvents"] += extra
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return analyze_traces([path], scenarios=None)


def test_gpu_work_after_the_last_iteration_is_noted(tmp_path):
    # window 2 ends at 200 us; a GEMM launched at 180 runs [190, 230) on stream 9: it starts inside
    # window 2 (so it is not "outside" any window), and its 230 - 200 = 30 us past the end are not in
    # the breakdown; a second kernel [240, 250) lies wholly after: 10 us more. Total 2 activities, 40 us.
    a = _run(tmp_path, [_launch(10, 180), _gpu(10, GEMM, 190, 40, 9), _launch(11, 181),
                        _gpu(11, ELEMENTWISE, 240, 10, 9)])
    r = a.ranks.row(0, named=True)
    assert (r["activities_after_last_iteration"], r["gpu_time_after_last_iteration_us"]) == (2, 40.0)
    assert r["last_iteration_end_us"] == 200.0
    assert [n for n in trace_notes(a) if "after the last iteration" in n] == [
        "2 GPU activities run after the last iteration's end: 0.040 ms of GPU time there is not in the breakdown "
        "(work launched in the last iteration still running when it ended, or work after the iterations the trace "
        "marks)"]
    # window 2 holds the first 10 us of the GEMM: [190, 200) is compute-bound now (was idle 'unknown')
    it2 = a.breakdown.filter(pl.col("iteration") == 2).row(0, named=True)
    assert (it2["window_us"], it2["compute_bound_us"]) == (100.0, 20.0 + 10.0)


def test_no_note_when_nothing_runs_past_the_end(tmp_path):
    a = _run(tmp_path, [])
    assert not [n for n in trace_notes(a) if "after the last iteration" in n]
    assert a.ranks["gpu_time_after_last_iteration_us"].to_list() == [0.0]


def test_an_over_long_kernel_is_clipped_to_the_next_start_of_its_stream(tmp_path):
    # K1 (the GEMM [25, 45) us on stream 7, traceEvents[18]) written with dur 3,000,000 us (a 3 s
    # "kernel" after a hardware stall); the next activity of stream 7 is K2 at 45 us: K1 ends there,
    # 20 us, as in the fixture, and 3,000,000 - 20 = 2,999,980 us = 2999.980 ms are clipped off
    doc = fixture_trace()
    assert doc["traceEvents"][18]["name"] == GEMM and doc["traceEvents"][18]["dur"] == 20
    doc["traceEvents"][18]["dur"] = 3_000_000
    path = tmp_path / "stall.json"
    path.write_text(json.dumps(doc))
    a = analyze_traces([path])
    clean = _run(tmp_path, [])
    cols = ["window_us", "compute_bound_us", "memory_bound_us", "comm_exposed_us", "idle_us", "busy_compute_bound_us"]
    assert a.breakdown.select(cols).rows() == clean.breakdown.select(cols).rows()
    assert a.breakdown["compute_bound_us"].to_list() == [20.0, 20.0]  # not 75 + 100 (K1 to the end of the trace)
    r = a.ranks.row(0, named=True)
    assert (r["activities_clipped"], r["clipped_us"]) == (1, 2_999_980.0)
    assert r["activities_after_last_iteration"] == 0
    assert [n for n in trace_notes(a) if "clipped" in n] == [
        "1 GPU activities ran past the start of the next activity of their stream, which cannot be (a stream runs "
        "its work in order): each end clipped to that start, 2999.980 ms removed (longest: "
        f"'{GEMM}' on device 0 stream 7, 3e+06 us -> 20 us)"]
    kernels = a.kernels.filter(pl.col("kind") == "gemm")
    assert kernels["time_us"].to_list() == [20.0 + 20.0]  # K1 and K6


def test_activities_of_different_streams_may_overlap(tmp_path):
    # the fixture's all-reduce (stream 20, [50, 80)) overlaps K2 (stream 7) and the copy (stream 8): not clipped
    a = _run(tmp_path, [])
    assert a.ranks["activities_clipped"].to_list() == [0] and not [n for n in trace_notes(a) if "clipped" in n]
