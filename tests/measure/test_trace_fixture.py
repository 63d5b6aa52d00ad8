"""The breakdown of the hand-written trace (kineto_fixture.py) against the hand count in its docstring."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest
from kineto_fixture import GEMM, MYSTERY, fixture_trace, write_fixture

from ddlscope.measure.analysis import analyze_traces
from ddlscope.measure.timeline import IDLE_CAUSES
from ddlscope.report.trace_notes import trace_notes

COMPONENTS = ["compute_bound_us", "memory_bound_us", "unclassified_us", "comm_exposed_us", "device_copy_us",
              "data_io_us", "idle_us"]


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    return analyze_traces([write_fixture(tmp_path_factory.mktemp("fx"))])


def _row(a, iteration: int) -> dict:
    return a.breakdown.filter(pl.col("iteration") == iteration).row(0, named=True)


def test_window_one_matches_hand_count(analysis):
    r = _row(analysis, 1)
    assert r["window_us"] == 100.0
    assert r["compute_bound_us"] == 20.0       # K1 [25,45)
    assert r["memory_bound_us"] == 10.0        # K2 [45,55), incl. [50,55) under the all-reduce
    assert r["unclassified_us"] == 4.0         # mystery_kernel [92,96)
    assert r["comm_exposed_us"] == 25.0        # all-reduce [55,80)
    assert r["comm_all_reduce_us"] == 25.0
    assert r["comm_busy_us"] == 30.0           # [50,80)
    assert r["comm_overlapped_us"] == 5.0      # [50,55) under K2
    assert r["data_io_us"] == 0.0              # the copy [60,70) runs under the all-reduce
    assert r["busy_data_io_us"] == 10.0
    assert r["device_copy_us"] == 0.0
    assert r["idle_us"] == 41.0                # 25 + 12 + 4
    assert r["idle_data_loader_us"] == 25.0
    assert r["idle_kernel_launch_us"] == 12.0
    assert r["idle_synchronisation_us"] == 4.0
    assert r["cpu_step_us"] == 100.0
    assert r["data_io_bytes"] == 1_000_000


def test_window_two_matches_hand_count(analysis):
    r = _row(analysis, 2)
    assert r["window_us"] == 100.0
    assert (r["compute_bound_us"], r["device_copy_us"], r["memory_bound_us"]) == (20.0, 2.0, 8.0)
    assert r["comm_busy_us"] == 0.0
    assert r["idle_us"] == 70.0                # 12 + 18 + 40
    assert (r["idle_synchronisation_us"], r["idle_kernel_launch_us"], r["idle_unknown_us"]) == (12.0, 18.0, 40.0)


def test_components_and_idle_add_up_exactly(analysis):
    bd = analysis.breakdown
    total = bd.select(pl.sum_horizontal(COMPONENTS)).to_series()
    assert (bd["window_us"] - total).abs().max() == 0.0
    causes = bd.select(pl.sum_horizontal([f"idle_{k}_us" for k in IDLE_CAUSES])).to_series()
    assert (bd["idle_us"] - causes).abs().max() == 0.0


def test_collective_size_and_bandwidth(analysis):
    call = analysis.calls.row(0, named=True)
    assert call["collective"] == "all_reduce"
    assert call["size_bytes"] == 1000 * 4       # nccl:all_reduce Input Dims [[1000]] float
    assert call["size_source"] == "nccl annotation shapes"
    assert call["group_size"] == 2              # distributedInfo.world_size
    # algbw = S / t = 4000 B / 30 us = 0.1333 GB/s; busbw = algbw * 2 (p-1)/p = algbw for p = 2
    assert call["algbw_gb_s"] == pytest.approx(4000 / 30e-6 / 1e9)
    assert call["busbw_gb_s"] == pytest.approx(4000 / 30e-6 / 1e9)


def test_unclassified_kernels_are_counted_and_listed(analysis):
    assert analysis.unclassified["name"].to_list() == [MYSTERY]
    assert analysis.unclassified["time_us"].to_list() == [4.0]
    kinds = analysis.kernels.filter(pl.col("class") == "unclassified")
    assert kinds["kernels"].to_list() == [1]
    assert any("matched no rule" in n for n in trace_notes(analysis))


def test_temporal_summary_in_hta_terms(analysis):
    # span: first to last activity launched in the iterations = [25, 160) = 135 us;
    # idle inside: [80,92) 12 + [96,112) 16 + [134,152) 18 = 46; computation (compute-bound +
    # memory-bound + unclassified) = 20 + 10 + 4 + 20 + 8 = 62; the rest 27 = 25 comm + 2 memset
    t = analysis.temporal.row(0, named=True)
    assert t["span_us"] == 135.0
    assert t["idle_pct"] == pytest.approx(100 * 46 / 135)
    assert t["compute_pct"] == pytest.approx(100 * 62 / 135)
    assert t["non_compute_pct"] == pytest.approx(100 * 27 / 135)
    assert t["comm_overlap_pct"] == pytest.approx(100 * 5 / 30)


def test_events_not_used_are_counted(analysis):
    note = next(n for n in trace_notes(analysis) if n.startswith("events not used"))
    assert "1 phase 'M'" in note and "1 phase 'i'" in note and "1 phase 's'" in note and "1 phase 'f'" in note


def test_gzip_and_array_format_read_the_same(tmp_path, analysis):
    gz = tmp_path / "rank0.json.gz"
    gz.write_bytes(gzip.compress(json.dumps(fixture_trace()).encode()))
    array = tmp_path / "array.json"  # Chrome's "JSON array format": the events alone
    array.write_text(json.dumps(fixture_trace()["traceEvents"]))
    for path in (gz, array):
        other = analyze_traces([path])
        assert other.breakdown.select(COMPONENTS).equals(analysis.breakdown.select(COMPONENTS))


def test_whole_trace_mode_is_one_window(tmp_path):
    a = analyze_traces([write_fixture(tmp_path)], whole_trace=True)
    r = a.breakdown.row(0, named=True)
    # first to last GPU activity: [25, 160)
    assert a.breakdown.height == 1 and r["window_us"] == 135.0
    assert r["idle_us"] == 46.0


def test_precision_and_gemm_class(analysis):
    assert analysis.precision == "fp32"  # volta_sgemm: FP32 SIMT GEMM
    gemm = analysis.kernels.filter(pl.col("kind") == "gemm").row(0, named=True)
    assert gemm["class"] == "compute_bound" and gemm["kernels"] == 2 and gemm["time_us"] == 40.0
    assert GEMM.startswith("volta_sgemm")
