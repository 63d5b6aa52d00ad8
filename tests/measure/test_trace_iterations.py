"""Iterations without ProfilerStep markers: a model with two optimizers has two Optimizer.step
events per step, found by the period with which the segments between them repeat (docs/trace.md,
"Iterations"); the rule used is in the output."""

from __future__ import annotations

import json

import polars as pl
import pytest

from ddlscope.measure.analysis import analyze_traces
from ddlscope.measure.iterations import WHOLE_TRACE, segment_period
from ddlscope.report.trace_notes import trace_notes
from ddlscope.report.trace_tables import summary

PID, TID = 100, 1
GEMM = "volta_sgemm_128x64_nn"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)"
STEP_US = 615_000  # one real training step: forward/backward (580 ms, ending with optimizer 1) + optimizer 2 (35 ms)


def _trace(steps: int, second: str = "Optimizer.step#Adam.step", lead_in: bool = False) -> dict:
    """``steps`` training steps of STEP_US each, times in us from T = k x STEP_US:
    aten::mm [T, T+10 ms) launching a GEMM [T+2, T+400) ms; Optimizer.step#SGD.step [T+500, T+580) ms
    launching an element-wise kernel [T+502, T+570) ms; ``second`` [T+580, T+615) ms launching one
    [T+582, T+600) ms. With ``lead_in``, the trace starts with a lone ``second`` step 35 ms before
    step 0 (the profiler started between the two optimizer steps)."""
    ev: list[dict] = []
    corr = 0

    def op(name, ts, dur, cat="cpu_op"):
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur, "args": {}})

    def kernel(name, launch, ts, dur):
        nonlocal corr
        corr += 1
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": PID, "tid": TID,
                   "ts": launch, "dur": 5, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                   "args": {"device": 0, "stream": 7, "correlation": corr}})

    base = 35_000 if lead_in else 0
    if lead_in:
        op(second, 0, 35_000, "user_annotation")
        kernel(ELEMENTWISE, 1_000, 2_000, 18_000)
    for k in range(steps):
        t = base + k * STEP_US
        op("aten::mm", t, 10_000)
        kernel(GEMM, t + 1_000, t + 2_000, 398_000)
        op("Optimizer.step#SGD.step", t + 500_000, 80_000, "user_annotation")
        kernel(ELEMENTWISE, t + 501_000, t + 502_000, 68_000)
        op(second, t + 580_000, 35_000, "user_annotation")
        kernel(ELEMENTWISE, t + 581_000, t + 582_000, 18_000)
    return {"deviceProperties": [{"id": 0, "name": "Tesla V100-SXM2-32GB"}], "traceEvents": ev}


def _run(tmp_path, **kw):
    path = tmp_path / "two_optimizers.json"
    path.write_text(json.dumps(_trace(**kw)))
    return analyze_traces([path], scenarios=None)


@pytest.mark.parametrize("second", ["Optimizer.step#Adam.step", "Optimizer.step#SGD.step"])
def test_two_optimizers_make_one_iteration(tmp_path, second):
    # 4 steps -> 8 Optimizer.step events. Each used to end an iteration: windows 580, 35, 580, 35, ... ms,
    # the first 580 ms flagged a slow-first warm-up (> 3 x the median 35 ms of the others) and a mean of
    # (3 x 580 + 4 x 35) / 7 = 268.6 ms. The segments repeat with period 2 (the marker names differ, or,
    # for two SGD optimizers, the top-level ops do: aten::mm only before the first): 4 iterations of 615 ms.
    a = _run(tmp_path, steps=4, second=second)
    bd = a.breakdown
    assert bd["iteration"].to_list() == [0, 1, 2, 3]
    assert bd["window_us"].to_list() == [615_000.0] * 4
    assert bd["warmup"].null_count() == 4 and a.warmup["slow_first_iteration"] is None
    # per step: GEMM 398 ms compute-bound; element-wise 68 + 18 = 86 ms memory-bound; idle 615 - 398 - 86 = 131
    assert bd["compute_bound_us"].to_list() == [398_000.0] * 4
    assert bd["memory_bound_us"].to_list() == [86_000.0] * 4 and bd["idle_us"].to_list() == [131_000.0] * 4
    rule = "2 optimizer steps per iteration (repeating structure)"
    assert a.ranks["iteration_rule"].to_list() == [rule]
    head = summary(a)
    assert head["iteration_rule"] == rule and head["mean_step_ms"] == 615.0
    marker = "Optimizer.step annotations (inferred: no ProfilerStep markers)"
    assert f"iterations of 1 rank(s): {rule} ({marker})" in trace_notes(a)


def test_a_lone_optimizer_step_before_the_first_iteration_is_left_out(tmp_path):
    # the trace starts with the second optimizer's step (35 ms): segments B A B A B A B A B, period 2,
    # 9 = 4 x 2 + 1: the first segment makes no whole iteration (markers that end an iteration are
    # counted from the trace's end) and its 18 ms kernel is GPU work before the first iteration
    a = _run(tmp_path, steps=4, lead_in=True)
    assert a.breakdown["window_us"].to_list() == [615_000.0] * 4
    r = a.ranks.row(0, named=True)
    assert (r["segments_left_out"], r["activities_before_first_iteration"]) == (1, 1)
    assert r["gpu_time_before_first_iteration_us"] == 18_000.0
    assert any(n.startswith("rank 0: 1 marker segment(s) make no whole iteration") for n in trace_notes(a))


def test_segments_that_do_not_repeat_make_one_whole_trace_iteration(tmp_path):
    # one step: 2 segments that differ; a period needs two repetitions -> the whole trace is one
    # iteration, from the first GPU activity (2 ms) to the last one's end (600 ms): 598 ms
    a = _run(tmp_path, steps=1)
    assert a.breakdown["window_us"].to_list() == [598_000.0]
    assert a.ranks["iteration_rule"].to_list() == [WHOLE_TRACE] and summary(a)["iteration_rule"] == WHOLE_TRACE
    assert "2 found, in segments that do not repeat" in a.ranks["marker"][0]


def test_segment_period():
    a, b, c = "A", "B", "C"
    assert segment_period([a]) == 1
    assert segment_period([a, a, a, a]) == 1
    assert segment_period([a, b] * 4) == 2
    assert segment_period([a, b, c] * 3) == 3
    assert segment_period([a, b]) is None and segment_period([a, b, a]) is None
    # an odd first segment (set-up work) does not hide the period: 5 of 6 pairs alike >= 80 %
    assert segment_period(["A0", b, a, b, a, b, a, b]) == 2
    # one checkpoint-save step among 20 alike: 18 of 19 pairs alike at period 1
    assert segment_period([a] * 10 + [c] + [a] * 9) == 1
    # from three comparisons on, one odd segment is tolerated: a last segment cut short (2 of 3 pairs
    # alike, under 80 %), a first one with set-up work at period 2 (3 of 4 pairs alike, 75 %)
    assert segment_period([a, a, a, "A_cut"]) == 1 and segment_period(["A0", b, a, b, a, b]) == 2
    # ... but not with fewer: two segments that differ, or A B A, have no period
    assert segment_period([a, a, "A_cut"]) is None


def test_real_trace_single_optimizer(shared_data):
    # param_dlrm/resnet_kineto (SOURCES.md: 30 x Optimizer.step#SGD.step, 30 x DataLoader __next__): the
    # DataLoader marker is tried first; either way one marker event per iteration, 30 iterations
    a = analyze_traces([f"{shared_data}/param_dlrm/resnet_kineto.json.gz"], scenarios=None)
    assert a.ranks["iteration_rule"].to_list() == ["1 DataLoader __next__ call per iteration (repeating structure)"]
    assert a.breakdown.height == 30
    steps = a.breakdown.filter(pl.col("in_means"))
    assert steps.height == 29
