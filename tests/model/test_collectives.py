"""model.collectives: collective names, nccl-tests' bus factor, ring step counts and bus bandwidth,
on Python numbers, NumPy arrays and Polars expressions.

Expected values are hand-computed from NVIDIA nccl-tests doc/PERFORMANCE.md (``algbw = S / t``;
``busbw = algbw * 2 (p-1)/p`` all-reduce, ``* (p-1)/p`` all-gather and reduce-scatter, ``* 1``
broadcast and reduce) and nccl-tests' ``getBw`` of src/alltoall.cu (``(p-1)/p``) and
src/sendrecv.cu (1); step counts from Thakur, Rabenseifner and Gropp (IJHPCA 2005).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from ddlscope.model.collectives import (
    COLLECTIVE_ALIASES,
    COLLECTIVES,
    algbw,
    bus_factor,
    busbw,
    canonical_collective,
    collective_steps,
)


def test_canonical_names_and_nccl_tests_aliases():
    assert COLLECTIVES == ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
                           "send_recv")
    spellings = {"alltoall_perf": "all_to_all", "sendrecv": "send_recv", "AllReduce": "all_reduce",
                 "all-gather": "all_gather", "reducescatter": "reduce_scatter", "all_reduce_perf_mpi": "all_reduce",
                 "bcast": "broadcast", "reduce_perf": "reduce", " ALL_TO_ALL ": "all_to_all",
                 "all_to_all_single": "all_to_all", "all_gather_into_tensor": "all_gather",
                 "reduce_scatter_tensor": "reduce_scatter", "alltoallv": "all_to_all"}
    assert {k: canonical_collective(k) for k in spellings} == spellings
    assert all(canonical_collective(c) == c for c in COLLECTIVES)
    assert set(COLLECTIVE_ALIASES.values()) == set(COLLECTIVES)


def test_unknown_collective_and_bad_ranks_raise():
    with pytest.raises(ValueError, match="collective: unknown 'gather_all'; expected one of all_reduce, all_gather"):
        canonical_collective("gather_all")
    for fn in (bus_factor, collective_steps):
        with pytest.raises(ValueError, match="unknown 'scatter'"):
            fn("scatter", 4)
        with pytest.raises(ValueError, match="ranks: expected >= 1, got 0"):
            fn("all_reduce", 0)
    with pytest.raises(ValueError, match="unknown 'allscatter'"):
        busbw("allscatter", 1e6, 1e-3, 4)


def test_bus_factor_and_steps_on_numbers():
    # PERFORMANCE.md: all-reduce 2 (p-1)/p; p = 8: 2 * 7 / 8 = 1.75
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    # all-gather, reduce-scatter (p-1)/p: p = 4: 3/4; p = 2: 1/2; all-to-all (getBw) p = 8: 7/8
    assert bus_factor("all_gather", 4) == pytest.approx(0.75)
    assert bus_factor("reduce_scatter_perf", 2) == pytest.approx(0.5)
    assert bus_factor("alltoall", 8) == pytest.approx(0.875)
    # broadcast, reduce: busbw = algbw; send/receive (getBw): 1
    assert bus_factor("broadcast", 16) == 1.0 and bus_factor("reduce", 3) == 1.0
    assert bus_factor("sendrecv_perf", 2) == 1.0
    # one rank moves nothing over a link: 2 * 0 / 1 = 0
    assert bus_factor("all_reduce", 1) == 0.0
    # ring steps: all-reduce 2 (p-1) = 14 at p = 8; all-gather p-1 = 7; all-to-all p-1 = 3 at p = 4;
    # broadcast (pipelined chain) p-1 = 15 at p = 16; send/receive 1
    assert collective_steps("all_reduce", 8) == 14 and collective_steps("all_gather", 8) == 7
    assert collective_steps("all_to_all", 4) == 3 and collective_steps("bcast", 16) == 15
    assert collective_steps("send_recv", 8) == 1


def test_busbw_on_numbers():
    # S = 8e9 bytes in t = 0.1 s: algbw = 8e10 bytes/s
    assert algbw(8e9, 0.1) == pytest.approx(8e10)
    # all-reduce on 8 ranks: 8e10 * 1.75 = 1.4e11 bytes/s
    assert busbw("all_reduce", 8e9, 0.1, 8) == pytest.approx(1.4e11)
    # all-gather on 4 ranks, S the total size: 8e10 * 3/4 = 6e10
    assert busbw("allgather", 8e9, 0.1, 4) == pytest.approx(6e10)
    # all-to-all on 8 ranks: 8e10 * 7/8 = 7e10; broadcast: 8e10
    assert busbw("alltoall_perf", 8e9, 0.1, 8) == pytest.approx(7e10)
    assert busbw("broadcast", 8e9, 0.1, 8) == pytest.approx(8e10)
    # nccl-tests prints GB/s: 1 GiB all-reduced by 8 ranks in 5 ms: 2^30 / 5e-3 = 214.748 GB/s algbw,
    # x 1.75 = 375.81 GB/s busbw
    assert busbw("all_reduce_perf", 2**30, 5e-3, 8) / 1e9 == pytest.approx(2**30 / 5e-3 * 1.75 / 1e9)
    assert busbw("all_reduce_perf", 2**30, 5e-3, 8) / 1e9 == pytest.approx(375.809, rel=1e-5)


def test_numpy_arrays_elementwise():
    ranks = np.array([1, 2, 4, 8])
    # 2 (p-1)/p: 0, 1, 1.5, 1.75
    np.testing.assert_allclose(bus_factor("all_reduce", ranks), [0.0, 1.0, 1.5, 1.75])
    # (p-1)/p: 0, 0.5, 0.75, 0.875
    np.testing.assert_allclose(bus_factor("all_to_all", ranks), [0.0, 0.5, 0.75, 0.875])
    # a constant factor keeps the array's shape
    out = bus_factor("send_recv", ranks)
    assert isinstance(out, np.ndarray) and out.tolist() == [1.0, 1.0, 1.0, 1.0]
    assert collective_steps("all_reduce", ranks).tolist() == [0, 2, 6, 14]
    assert collective_steps("broadcast", np.array([2, 4])).tolist() == [1, 3]
    assert collective_steps("send_recv", ranks).tolist() == [1, 1, 1, 1]
    # busbw over arrays of sizes and times: S/t = 1e9 each, x 2 (p-1)/p
    sizes, times = np.array([1e6, 2e6, 4e6, 8e6]), np.array([1e-3, 2e-3, 4e-3, 8e-3])
    np.testing.assert_allclose(busbw("all_reduce", sizes, times, ranks), [0.0, 1e9, 1.5e9, 1.75e9])


def test_polars_expressions_per_row():
    frame = pl.DataFrame({
        "collective": ["all_reduce", "alltoall", "sendrecv", "broadcast", "reduce_scatter", "AllGather", "other"],
        "ranks": [4, 8, 2, 4, 2, 4, 4],
        "size_bytes": [1e6] * 7,
        "time_s": [1e-3] * 7,
    })
    out = frame.select(f=bus_factor(pl.col("collective"), pl.col("ranks")),
                       k=collective_steps(pl.col("collective"), pl.col("ranks")),
                       busbw=busbw(pl.col("collective"), pl.col("size_bytes"), pl.col("time_s"), pl.col("ranks")))
    # 2*3/4, 7/8, 1, 1, 1/2, 3/4; an unknown name has no factor (null, not an error)
    assert out["f"].to_list() == [1.5, 0.875, 1.0, 1.0, 0.5, 0.75, None]
    # 2*(4-1), 8-1, 1, 4-1, 2-1, 4-1
    assert out["k"].to_list() == [6, 7, 1, 3, 1, 3, None]
    # S/t = 1e6 / 1e-3 = 1e9 bytes/s times the factor
    assert out["busbw"].to_list() == [1.5e9, 0.875e9, 1e9, 1e9, 0.5e9, 0.75e9, None]
    # a column accepts every spelling canonical_collective accepts (nccl-tests binary names included)
    names = ["all_reduce_perf", "alltoall_perf", "AllReduce", "all-to-all", "sendrecv_perf_mpi", "Reduce_Scatter",
             "gather_all"]
    col = pl.DataFrame({"c": names}).select(pl.col("c"), f=bus_factor(pl.col("c"), 4))
    assert col["f"].to_list()[:-1] == [bus_factor(n, 4) for n in names[:-1]] == [1.5, 0.75, 1.5, 0.75, 1.0, 0.75]
    assert col["f"][-1] is None
    # a name column with a constant rank count, and a name with a rank column
    assert frame.select(bus_factor(pl.col("collective"), 8)).to_series().to_list()[:2] == [1.75, 0.875]
    ranks = pl.DataFrame({"p": [2, 4, 8]})
    assert ranks.select(bus_factor("all_reduce", pl.col("p"))).to_series().to_list() == [1.0, 1.5, 1.75]
    assert ranks.select(collective_steps("send_recv", pl.col("p"))).to_series().to_list() == [1, 1, 1]
