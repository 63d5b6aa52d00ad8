"""The decomposition into stages: hand-written RPCs with known stages, with and without clock skew."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rpclog_builders import rpc_frame, rpc_row

from ddlscope.rpc import decompose, stage_percentiles, stage_summary
from ddlscope.rpc.decompose import grouped_quantiles, quantile_label
from ddlscope.rpc.schema import LATENCY_COLUMN, STAGE_COLUMNS, STAGES
from ddlscope.rpc.synthetic import synthetic_rpc_log

# RPC 1: queue 10, send 20, network 90 (40 out + 50 back), server receive 8, queue 12, processing 50,
# send 10, completion 5  ->  latency 10+20+90+8+12+50+10+5 = 205 ns
RPC1 = {"client_queue": 10, "client_send": 20, "network": 90, "server_receive": 8, "server_queue": 12,
        "server_processing": 50, "server_send": 10, "client_completion": 5}
# RPC 2: a push that queues on the server: 3+40+200+30+700+400+2+1 = 1376 ns
RPC2 = {"client_queue": 3, "client_send": 40, "network": 200, "server_receive": 30, "server_queue": 700,
        "server_processing": 400, "server_send": 2, "client_completion": 1}


def _log(client_offset_ns: int = 0, server_offset_ns: int = 0) -> pl.DataFrame:
    return rpc_frame([
        rpc_row(1, issue_ns=1_000, stages=RPC1, network_request_ns=40, client_offset_ns=client_offset_ns,
                server_offset_ns=server_offset_ns),
        rpc_row(2, issue_ns=1_100, stages=RPC2, op="push_dense", network_request_ns=150,
                client_offset_ns=client_offset_ns, server_offset_ns=server_offset_ns),
    ])


def test_stages_of_hand_written_rpcs():
    out = decompose(_log())
    assert out.select(STAGE_COLUMNS).row(0) == tuple(RPC1[s] for s in STAGES)
    assert out.select(STAGE_COLUMNS).row(1) == tuple(RPC2[s] for s in STAGES)
    assert out.get_column(LATENCY_COLUMN).to_list() == [205, 1376]


def test_timestamps_of_the_builder_are_the_ones_written_by_hand():
    # the first RPC, on one clock: issue 1000, send 1010..1030, server 1070..1150, recv end 1200, done 1205
    row = _log().row(0, named=True)
    assert (row["client_issue_ns"], row["client_send_start_ns"], row["client_send_end_ns"]) == (1000, 1010, 1030)
    assert (row["server_recv_start_ns"], row["server_recv_end_ns"], row["server_proc_start_ns"],
            row["server_proc_end_ns"], row["server_send_end_ns"]) == (1070, 1078, 1090, 1140, 1150)
    assert (row["client_recv_end_ns"], row["client_done_ns"]) == (1200, 1205)


@pytest.mark.parametrize(("client_offset_s", "server_offset_s"), [(0, 3.7), (-2.0, 5.25), (86_400, -86_400)])
def test_clock_skew_between_hosts_does_not_change_the_decomposition(client_offset_s, server_offset_s):
    skewed = decompose(_log(int(client_offset_s * 1e9), int(server_offset_s * 1e9)))
    plain = decompose(_log())
    assert skewed.select(*STAGE_COLUMNS, LATENCY_COLUMN).equals(plain.select(*STAGE_COLUMNS, LATENCY_COLUMN))
    # the raw cross-clock difference is off by the skew: the decomposition never uses it
    cross = skewed.get_column("server_recv_start_ns")[0] - skewed.get_column("client_send_end_ns")[0]
    assert cross == 40 + int(server_offset_s * 1e9) - int(client_offset_s * 1e9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10**7), min_size=8, max_size=8), st.integers(-10**13, 10**13),
       st.integers(-10**13, 10**13))
def test_stages_sum_to_latency_under_any_skew(durations, client_offset, server_offset):
    stages = dict(zip(STAGES, durations, strict=True))
    row = rpc_row(7, issue_ns=1_700_000_000_000_000_000, stages=stages, client_offset_ns=client_offset,
                  server_offset_ns=server_offset)
    out = decompose(rpc_frame([row])).row(0, named=True)
    assert [out[c] for c in STAGE_COLUMNS] == durations
    assert out[LATENCY_COLUMN] == sum(durations)


def test_synthetic_stages_sum_exactly_to_latency():
    out = decompose(synthetic_rpc_log(5_000, seed=3))
    total = out.select(pl.sum_horizontal(STAGE_COLUMNS) - pl.col(LATENCY_COLUMN)).to_series()
    assert (total == 0).all()


def test_decompose_refuses_a_negative_stage():
    bad = _log().with_columns(pl.col("server_send_end_ns") + 10_000)  # residence longer than the round trip
    with pytest.raises(ValueError, match=r"negative or missing stage, first at <memory>:\?.*network_ns="):
        decompose(bad)
    assert decompose(bad, check=False).get_column("network_ns")[0] == 90 - 10_000


def test_decompose_names_missing_timestamps():
    with pytest.raises(ValueError, match=r"missing timestamp column.*client_done_ns"):
        decompose(_log().drop("client_done_ns"))


def test_percentiles_hand_computed():
    # latencies 100, 200, 300, 400 ns (type 7: h = (n-1) q)
    rows = [rpc_row(i, issue_ns=0, stages={"server_processing": v}) for i, v in enumerate([100, 200, 300, 400])]
    p = stage_percentiles(decompose(rpc_frame(rows)))
    lat = p.filter(pl.col("stage") == "latency").row(0, named=True)
    assert lat["rpcs"] == 4
    assert lat["p50_us"] == pytest.approx(0.250)   # h = 1.5: 200 + 0.5 * 100 = 250 ns
    assert lat["p90_us"] == pytest.approx(0.370)   # h = 2.7: 300 + 0.7 * 100 = 370 ns
    assert lat["p99_us"] == pytest.approx(0.397)   # h = 2.97: 300 + 0.97 * 100 = 397 ns
    assert lat["p99_9_us"] == pytest.approx(0.3997)  # h = 2.997
    assert lat["mean_us"] == pytest.approx(0.250)  # 1000 / 4
    assert lat["max_us"] == pytest.approx(0.400)
    queue = p.filter(pl.col("stage") == "client_queue").row(0, named=True)
    assert queue["p99_us"] == 0.0
    assert p.get_column("stage").to_list() == [*STAGES, "latency"]


def test_percentiles_per_group_match_numpy():
    frame = decompose(synthetic_rpc_log(4_000, seed=5))
    p = stage_percentiles(frame, by="op")
    for op in ("pull_sparse", "push_dense"):
        lat = frame.filter(pl.col("op") == op).get_column("server_queue_ns").to_numpy()
        row = p.filter((pl.col("op") == op) & (pl.col("stage") == "server_queue")).row(0, named=True)
        expect = np.quantile(lat, [0.5, 0.9, 0.99, 0.999]) / 1e3
        assert [row["p50_us"], row["p90_us"], row["p99_us"], row["p99_9_us"]] == pytest.approx(list(expect))
        assert row["rpcs"] == len(lat)


def test_grouped_quantiles_equal_numpy_and_handle_empty_groups():
    rng = np.random.default_rng(0)
    v, g = rng.integers(-50, 10_000, 3_000), rng.integers(0, 5, 3_000)
    q, count, mean, vmax = grouped_quantiles(v, g, 6, (0.0, 0.5, 0.999, 1.0))
    for k in range(5):
        x = v[g == k]
        assert q[k] == pytest.approx(np.quantile(x, [0.0, 0.5, 0.999, 1.0]))
        assert (count[k], vmax[k]) == (len(x), x.max())
        assert mean[k] == pytest.approx(x.mean())
    assert count[5] == 0 and np.isnan(q[5]).all()


def test_quantile_labels():
    assert [quantile_label(q) for q in (0.5, 0.9, 0.99, 0.999)] == ["p50", "p90", "p99", "p99_9"]


def test_stage_summary_shares_sum_to_one():
    s = stage_summary(decompose(_log()), by=None).row(0, named=True)
    # mean latency (205 + 1376) / 2 = 790.5 ns; server_queue mean (12 + 700) / 2 = 356 ns
    assert s["latency_mean_us"] == pytest.approx(0.7905)
    assert s["server_queue_share"] == pytest.approx(356 / 790.5)
    assert sum(s[f"{st}_share"] for st in STAGES) == pytest.approx(1.0)


def test_percentiles_us_by_hand() -> None:
    from ddlscope.rpc.decompose import percentiles_us

    frame = pl.DataFrame({"g": [0, 0, 0, 0, 1], "latency_ns": [3000, 1000, 5000, 2000, None],
                          "connect_ns": [10, 20, 30, 40, 50]})
    out = frame.group_by("g").agg(*percentiles_us("latency_ns"), *percentiles_us("connect_ns", (0.999,), "setup"))
    row = out.sort("g").row(0, named=True)
    # sorted 1000, 2000, 3000, 5000 ns; type 7: p50 at position 3 * 0.5 = 1.5 -> 2000 + 0.5 * 1000 = 2500 ns;
    # p99 at 3 * 0.99 = 2.97 -> 3000 + 0.97 * 2000 = 4940 ns; connect p99.9 at 2.997 -> 30 + 0.997 * 10 = 39.97 ns
    assert list(out.columns) == ["g", "latency_p50_us", "latency_p99_us", "setup_p99_9_us"]
    assert row["latency_p50_us"] == pytest.approx(2.5)
    assert row["latency_p99_us"] == pytest.approx(4.94)
    assert row["setup_p99_9_us"] == pytest.approx(0.03997)
    assert out.sort("g").row(1, named=True)["latency_p50_us"] is None  # only a null latency in group 1
    with pytest.raises(ValueError, match=r"quantiles: expected values in \[0, 1\], got \[99\]"):
        percentiles_us("latency_ns", (99,))
