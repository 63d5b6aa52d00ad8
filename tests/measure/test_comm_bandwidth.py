"""measure.comm.collective_calls: algorithm and bus bandwidth per call by nccl-tests' definitions
(model.collectives.algbw / busbw), on hand-made kernels whose values are worked out below."""

from __future__ import annotations

import polars as pl
import pytest

from ddlscope.measure.comm import collective_calls
from ddlscope.report.trace_notes import trace_notes


def kernel(call_id, kind, start_ns, end_ns, size_bytes, group=4):
    return {"rank": 0, "device": 0, "iteration": 1, "call_id": call_id, "class": "communication", "kind": kind,
            "start_ns": start_ns, "end_ns": end_ns, "size_bytes": size_bytes, "group_size": group,
            "msg_dtype": "float", "size_source": "kernel args"}


def test_algbw_and_busbw_per_collective():
    gpu = pl.DataFrame([
        # one all-reduce call of two kernels: t = first start 0 to last end 1 ms
        kernel(1, "all_reduce", 0, 400_000, 8e6), kernel(1, "all_reduce", 600_000, 1_000_000, 8e6),
        kernel(2, "all_to_all", 2_000_000, 3_000_000, 4e6),
        kernel(3, "broadcast", 4_000_000, 5_000_000, 2e6),
        kernel(4, "other", 6_000_000, 7_000_000, 1e6),
        kernel(5, "all_reduce", 8_000_000, 8_000_000, 1e6),   # no time: no bandwidth
    ])
    calls = {r["call_id"]: r for r in collective_calls(gpu).iter_rows(named=True)}
    assert calls[1]["kernels"] == 2 and calls[1]["time_us"] == pytest.approx(1000.0)
    # algbw = S / t in GB/s (1e9 B/s); busbw = algbw x bus factor with p = 4:
    # all-reduce 2 (p-1)/p = 1.5: 8e6 B / 1e-3 s = 8 GB/s -> 12 GB/s
    assert (calls[1]["algbw_gb_s"], calls[1]["busbw_gb_s"]) == pytest.approx((8.0, 12.0))
    # all-to-all (p-1)/p = 0.75: 4 GB/s -> 3 GB/s
    assert (calls[2]["algbw_gb_s"], calls[2]["busbw_gb_s"]) == pytest.approx((4.0, 3.0))
    # broadcast: factor 1
    assert (calls[3]["algbw_gb_s"], calls[3]["busbw_gb_s"]) == pytest.approx((2.0, 2.0))
    # a communication kernel of no known collective: algbw only, nccl-tests defines no bus bandwidth for it
    assert calls[4]["algbw_gb_s"] == pytest.approx(1.0) and calls[4]["busbw_gb_s"] is None
    assert calls[5]["algbw_gb_s"] is None and calls[5]["busbw_gb_s"] is None


# -- uneven all-to-all: the split sizes, without the rank's own chunk (issue 13) ----------------------
SENDRECV = "ncclKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"


def _a2a_trace(tmp_path, **split_args):
    """The kineto fixture (rank 0) plus one all-to-all kernel of a 4-rank group on stream 21, [170, 180)
    us (10 us), launched at 165: 100 floats in, 100 out (400 bytes each way), NCCL metadata on the kernel."""
    import json

    from kineto_fixture import _gpu, _launch, fixture_trace

    doc = fixture_trace()
    args = {"Collective name": "all_to_all", "In msg nelems": 100, "Out msg nelems": 100, "Group size": 4,
            "dtype": "Float", **split_args}
    doc["traceEvents"] += [_launch(20, 165), _gpu(20, SENDRECV, 170, 10, 21, **args)]
    path = tmp_path / "a2a.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(("splits", "link_bytes", "approx"), [
    # rank 0 is 2nd in the group [3, 0, 1, 2]: own chunks 20/100 of 400 B in = 80 B (sends 320 B) and
    # 25/100 of 400 B out = 100 B (receives 300 B); the link's busier direction: 320 B
    ({"In split size": "[10, 20, 30, 40]", "Out split size": "[25, 25, 25, 25]",
      "Process Group Ranks": "[3, 0, 1, 2]"}, 320.0, False),
    # empty lists: all_to_all_single with even splits -> own = 400 / 4 = 100 B: 300 B, exact
    ({"In split size": "[]", "Out split size": "[]", "Process Group Ranks": "[0, 1, 2, 3]"}, 300.0, False),
    # truncated by Kineto (', ...]'): even splits assumed, approximate
    ({"In split size": "[10, 20, ...]", "Out split size": "[25, 25, ...]",
      "Process Group Ranks": "[3, 0, 1, 2]"}, 300.0, True),
    # no split sizes at all: even splits assumed, approximate
    ({}, 300.0, True),
    # splits as JSON arrays (not strings), rank 0 first: own in 10 B of 100 -> sends 360 B
    ({"In split size": [10, 20, 30, 40], "Out split size": [40, 30, 20, 10], "Process Group Ranks": [0, 1, 2, 3]},
     400 - 40.0, False),
])
def test_uneven_all_to_all_bus_bandwidth(tmp_path, splits, link_bytes, approx):
    from ddlscope.measure.analysis import analyze_traces

    a = analyze_traces([_a2a_trace(tmp_path, **splits)])
    call = a.calls.filter(pl.col("collective") == "all_to_all").row(0, named=True)
    assert call["size_bytes"] == 400.0 and call["time_us"] == 10.0
    assert call["algbw_gb_s"] == pytest.approx(400 / 10e-6 / 1e9)
    # busbw = link bytes / t: 320 B / 10 us = 0.032 GB/s (nccl-tests' even-split value: 0.04 x 3/4 = 0.03)
    assert (call["link_bytes"], call["bw_approx"]) == (link_bytes, approx)
    assert call["busbw_gb_s"] == pytest.approx(link_bytes / 10e-6 / 1e9)
    notes = [n for n in trace_notes(a) if "split sizes" in n]
    assert bool(notes) == approx
    coll = a.collectives.filter(pl.col("collective") == "all_to_all")
    assert coll["bw_approx"].to_list() == [approx]


def test_shared_all_to_all_without_splits_is_approximate(shared_data):
    # negative_queue (rank 0 of 16): 45 all-to-all calls sized from the nccl:all_to_all annotations, no
    # split sizes in the trace; e.g. 384 B: own chunk 384/16 = 24 B, 360 B cross the link
    from ddlscope.measure.analysis import analyze_traces

    a = analyze_traces([f"{shared_data}/hta_traces/negative_queue_length_values_check/rank0.json.gz"])
    a2a = a.calls.filter(pl.col("collective") == "all_to_all")
    assert a2a.height == 45 and a2a["bw_approx"].all()
    assert (a2a["link_bytes"] - a2a["size_bytes"] * 15 / 16).abs().max() < 1e-9
    assert any(n.startswith("45 of 45 all-to-all calls have no complete split sizes") for n in trace_notes(a))
