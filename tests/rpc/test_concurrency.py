"""In-flight counts by the sorted sweep equal a brute-force count; the fit recovers known slopes."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rpclog_builders import rpc_frame, rpc_row

from ddlscope.rpc import add_concurrency, concurrency_fit, decompose
from ddlscope.rpc.concurrency import concurrency_profile, dense_codes, in_flight_at_start, stable_argsort


def brute_force(group, start, end, is_read):
    """O(n^2) reference: other intervals of the same group with start_j <= start_i < end_j."""
    n = len(start)
    reads, writes = np.zeros(n, int), np.zeros(n, int)
    for i in range(n):
        for j in range(n):
            if i != j and group[i] == group[j] and start[j] <= start[i] < end[j]:
                if is_read[j]:
                    reads[i] += 1
                else:
                    writes[i] += 1
    return reads, writes


def test_hand_made_intervals():
    # one server; intervals [start, end) and kind:
    #   a [0, 10) read, b [2, 5) write, c [5, 12) read, d [10, 10) read (empty), e [5, 6) write
    start = np.array([0, 2, 5, 10, 5])
    end = np.array([10, 5, 12, 10, 6])
    is_read = np.array([True, False, True, True, False])
    codes, n = dense_codes(np.zeros(5, np.int64))
    reads, writes = in_flight_at_start(codes, n, start, end, is_read)
    # a at 0: nothing else. b at 2: a (read). c at 5: a (read), e (write, starts at 5 too); b ended at 5.
    # d at 10: c (read); a ended at 10. e at 5: a, c (reads).
    assert reads.tolist() == [0, 1, 1, 1, 2]
    assert writes.tolist() == [0, 0, 1, 0, 0]
    bf = brute_force(np.zeros(5), start, end, is_read)
    assert reads.tolist() == bf[0].tolist() and writes.tolist() == bf[1].tolist()


def test_groups_do_not_mix():
    start = np.array([0, 0, 0, 1])
    end = np.array([5, 5, 5, 2])
    group = np.array([7, 7, 9, 9])
    codes, n = dense_codes(group)
    reads, writes = in_flight_at_start(codes, n, start, end, np.array([True, False, True, True]))
    assert reads.tolist() == [0, 1, 0, 1]   # in group 9, the RPC at 1 sees the read started at 0
    assert writes.tolist() == [1, 0, 0, 0]


intervals = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 30), st.integers(0, 8), st.booleans()), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(intervals)
def test_sweep_equals_brute_force(items):
    group = np.array([g for g, _, _, _ in items]) * 1_000_003  # sparse ids: dense_codes must compact them
    start = np.array([s for _, s, _, _ in items])
    end = start + np.array([d for _, _, d, _ in items])
    is_read = np.array([r for _, _, _, r in items])
    codes, n = dense_codes(group)
    reads, writes = in_flight_at_start(codes, n, start, end, is_read)
    bf_r, bf_w = brute_force(group, start, end, is_read)
    assert reads.tolist() == bf_r.tolist()
    assert writes.tolist() == bf_w.tolist()
    # the other paths give the same counts: 16-bit group codes, more groups than the radix sort takes,
    # and times ranked when group * time-span would overflow int64
    r1, w1 = in_flight_at_start(codes, 1_000, start, end, is_read)  # 16-bit radix sort on the group
    r2, w2 = in_flight_at_start(codes, 1 << 20, start, end, is_read)
    r3, w3 = in_flight_at_start(codes, 1 << 61, start, end, is_read)
    assert r1.tolist() == r2.tolist() == r3.tolist() == bf_r.tolist()
    assert w1.tolist() == w2.tolist() == w3.tolist() == bf_w.tolist()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(2**40), 2**40), max_size=50), st.booleans())
def test_stable_argsort_equals_numpy(values, wide):
    x = np.array(values, dtype=np.int64) * (2**20 if wide else 1)  # wide: the packed keys do not fit
    assert stable_argsort(x).tolist() == np.argsort(x, kind="stable").tolist()


def test_dense_codes_of_tuples():
    codes, n = dense_codes(np.array([5, 5, 9, 9, 5]), np.array([1, 2, 1, 1, 1]))
    assert n == 3
    assert codes.tolist() == [0, 1, 2, 2, 0]  # (5,1) (5,2) (9,1)
    big, nb = dense_codes(np.array([10**15, -(10**15), 10**15]))
    assert (big.tolist(), nb) == ([1, 0, 1], 2)


def _log(server_offset_ns: int = 0, client_offset_ns: int = 0):
    """Three workers on one server. Server clock residences and client clock lifetimes chosen by hand."""
    base = {"client_queue": 0, "client_send": 0, "network": 20, "server_receive": 0, "server_queue": 0,
            "server_processing": 100, "server_send": 0, "client_completion": 0}
    rows = [
        # worker 0, connection 0: a pull issued at 0 (server [10, 110)), a push at 50 on the same connection
        rpc_row(0, issue_ns=0, stages=base, worker_id=0, connection_id=0, op="pull_sparse"),
        rpc_row(1, issue_ns=50, stages=base, worker_id=0, connection_id=0, op="push_sparse"),
        # worker 1, connection 1: a push at 30 (server [40, 140))
        rpc_row(2, issue_ns=30, stages=base, worker_id=1, connection_id=1, op="push_dense"),
        # worker 2, connection 2: a pull at 200, after everything ended
        rpc_row(3, issue_ns=200, stages=base, worker_id=2, connection_id=2, op="pull_dense"),
    ]
    for r in rows:
        for k in r:
            if k.startswith("server_") and k.endswith("_ns"):
                r[k] += server_offset_ns
            elif k.startswith("client_") and k.endswith("_ns"):
                r[k] += client_offset_ns
    return rpc_frame(rows)


def test_add_concurrency_per_measure():
    out = add_concurrency(_log()).sort("rpc_id")
    # rpc 1 (server arrival 60): rpc 0 (read, same connection) and rpc 2 (write, other connection) resident
    assert out.get_column("server_in_flight_reads").to_list() == [0, 1, 1, 0]
    assert out.get_column("server_in_flight_writes").to_list() == [0, 1, 0, 0]
    assert out.get_column("server_other_conn_in_flight_reads").to_list() == [0, 0, 1, 0]
    assert out.get_column("server_other_conn_in_flight_writes").to_list() == [0, 1, 0, 0]
    # client clock: rpc 1 issued at 50 while rpc 0 ([0, 120)) is outstanding on the same connection and worker
    assert out.get_column("connection_in_flight_reads").to_list() == [0, 1, 0, 0]
    assert out.get_column("worker_in_flight_reads").to_list() == [0, 1, 0, 0]
    assert out.get_column("worker_in_flight_writes").to_list() == [0, 0, 0, 0]


def test_add_concurrency_unchanged_by_clock_skew():
    cols = [c for c in add_concurrency(_log()).columns if "in_flight" in c]
    a = add_concurrency(_log()).select(cols)
    b = add_concurrency(_log(server_offset_ns=7_000_000_000, client_offset_ns=-3_000_000_000)).select(cols)
    assert a.equals(b)


def test_concurrency_fit_recovers_known_slopes():
    # latency = op effect + 5 us per read + 2 us per write in flight, exactly (partial R^2 = 1)
    rng = np.random.default_rng(1)
    n = 400
    reads, writes = rng.integers(0, 6, n), rng.integers(0, 4, n)
    op = np.where(rng.random(n) < 0.5, "pull_sparse", "push_sparse")
    lat = np.where(op == "pull_sparse", 100_000, 300_000) + 5_000 * reads + 2_000 * writes
    frame = pl.DataFrame({"op": op, "latency_ns": lat, "server_queue_ns": 5_000 * reads,
                          **{f"{s}_ns": np.zeros(n, np.int64) for s in (
                              "client_queue", "client_send", "network", "server_receive", "server_processing",
                              "server_send", "client_completion")},
                          "server_in_flight_reads": reads, "server_in_flight_writes": writes})
    fit = concurrency_fit(frame, measures=("server",))
    lat_row = fit.filter(pl.col("stage") == "latency").row(0, named=True)
    assert lat_row["us_per_read"] == pytest.approx(5.0)
    assert lat_row["us_per_write"] == pytest.approx(2.0)
    assert lat_row["partial_r2"] == pytest.approx(1.0)
    q = fit.filter(pl.col("stage") == "server_queue").row(0, named=True)
    assert (q["us_per_read"], q["us_per_write"]) == (pytest.approx(5.0), pytest.approx(0.0, abs=1e-9))
    assert fit.filter(pl.col("stage") == "network").get_column("partial_r2").to_list() == [None]


def test_concurrency_profile_bins():
    frame = decompose(_log())
    frame = add_concurrency(frame).with_columns(
        (pl.col("server_in_flight_reads") + pl.col("server_in_flight_writes")).alias("total"))
    p = concurrency_profile(frame, "total")
    # totals per RPC: 0, 2, 1, 0 -> bins 0 (2 RPCs), 1, 2
    assert p.get_column("in_flight_lo").to_list() == [0, 1, 2]
    assert p.get_column("rpcs").to_list() == [2, 1, 1]
    assert p.get_column("server_processing_mean_us").to_list() == pytest.approx([0.1, 0.1, 0.1])
