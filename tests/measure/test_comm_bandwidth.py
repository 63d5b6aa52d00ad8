"""measure.comm.collective_calls: algorithm and bus bandwidth per call by nccl-tests' definitions
(model.collectives.algbw / busbw), on hand-made kernels whose values are worked out below."""

from __future__ import annotations

import polars as pl
import pytest

from ddlscope.measure.comm import collective_calls


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
