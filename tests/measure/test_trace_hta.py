"""Agreement with Holistic Trace Analysis (HTA, a test dependency) on every shared trace.

HTA's ``get_temporal_breakdown`` (idle / compute / non-compute shares of the GPU span) and
``get_comm_comp_overlap`` against ``TraceAnalysis.temporal``: within 1 percentage point, with HTA's
defaults (its rounding of nanosecond timestamps to whole microseconds included) and
``include_last_profiler_step=True`` so both cover the same iterations. HTA filters kernels to the
profiled iterations only when a trace has two or more ProfilerStep markers; on the others (no
marker, or one) it analyses every kernel, which is ``ddlscope trace --whole-trace``.
The large files are marked ``slow`` because HTA takes 5-15 s on each (``pytest -m "not slow"``
skips them).
"""

from __future__ import annotations

import logging
import math
import tarfile
import warnings

import pytest

from ddlscope.measure.analysis import analyze_traces

hta_analysis = pytest.importorskip("hta.trace_analysis")

TOLERANCE_PP = 1.0

SETS: dict[str, tuple[tuple[str, ...], bool]] = {  # files, whole-trace mode (HTA does not filter)
    "nccl_data": (("hta_traces/nccl_parser_config/nccl_data.json.gz",), False),
    "df_index_resolver": (("hta_traces/df_index_resolver/df_index_resolver.json.gz",), False),
    "negative_queue": (("hta_traces/negative_queue_length_values_check/rank0.json.gz",), False),
    "trace_diff_control": (("hta_traces/trace_diff/control/control.json.gz",), False),
    "trace_diff_test": (("hta_traces/trace_diff/test/test.json.gz",), False),
    "trace_filter": (("hta_traces/trace_filter/sampled_rank-0.json.gz",
                      "hta_traces/trace_filter/sampled_rank-1.json.gz"), False),
    "alexnet": (("hta_traces/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",), True),
    "ns_resolution": (("hta_traces/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",), False),
    "resnet": (("param_dlrm/resnet_kineto.json.gz",), True),
    "dlrm": (("param_dlrm/dlrm_kineto.tar.gz",), True),
}


def _hta(files: list[str]) -> tuple[list[dict], list[float]]:
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ta = hta_analysis.TraceAnalysis(trace_files=dict(enumerate(files)), trace_dir="/",
                                            include_last_profiler_step=True)
            tb = ta.get_temporal_breakdown(visualize=False)
            ov = ta.get_comm_comp_overlap(visualize=False)
    finally:
        logging.disable(logging.NOTSET)
    return tb.to_dict("records"), ov["comp_comm_overlap_pctg"].tolist()


# HTA itself takes 5-15 s on each of these files (pandas, row-wise apply): marked slow
SLOW = {"df_index_resolver", "negative_queue", "trace_diff_control", "trace_diff_test", "resnet", "dlrm"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in SETS])
def test_temporal_breakdown_and_overlap_agree_with_hta(shared_data, tmp_path, name):
    rel, whole = SETS[name]
    files = [str(shared_data / p) for p in rel]
    if name == "dlrm":  # HTA reads files, not archives: unpack the per-rank traces
        with tarfile.open(files[0]) as tar:
            tar.extractall(tmp_path, filter="data")
        files = sorted(str(p) for p in tmp_path.rglob("*.json"))
    ours = analyze_traces(files, whole_trace=whole).temporal.sort("rank")
    hta_rows, hta_overlap = _hta(files)
    assert ours.height == len(hta_rows)
    for mine, theirs, overlap in zip(ours.iter_rows(named=True), hta_rows, hta_overlap, strict=True):
        assert mine["idle_pct"] == pytest.approx(theirs["idle_time_pctg"], abs=TOLERANCE_PP)
        assert mine["compute_pct"] == pytest.approx(theirs["compute_time_pctg"], abs=TOLERANCE_PP)
        assert mine["non_compute_pct"] == pytest.approx(theirs["non_compute_time_pctg"], abs=TOLERANCE_PP)
        if mine["comm_overlap_pct"] is None:  # no communication: HTA divides 0 by 0
            assert math.isnan(overlap)
        else:
            assert mine["comm_overlap_pct"] == pytest.approx(overlap, abs=TOLERANCE_PP)
