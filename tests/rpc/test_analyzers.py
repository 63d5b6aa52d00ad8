"""The analyzers on hand-made logs (tail, connections, phase, size) and the whole dissection."""

from __future__ import annotations

import polars as pl
import pytest
from rpclog_builders import rpc_frame, rpc_row

from ddlscope.report.rpc_findings import narrate
from ddlscope.rpc import decompose, dissect
from ddlscope.rpc.connections import add_connection_events, connection_summary, connections_per_server
from ddlscope.rpc.size_phase import add_iteration_phase, add_message_bytes, size_fits
from ddlscope.rpc.synthetic import synthetic_rpc_log
from ddlscope.rpc.tail import tail_attribution, tail_servers


def _tail_log() -> pl.DataFrame:
    # 198 RPCs of 200 ns (network 100 + processing 100), alternating servers 0/1; RPC 198 queues 1000 ns
    # on server 1 (latency 1200), RPC 199 has a 600 ns network stage on server 0 (latency 700)
    rows = [rpc_row(i, issue_ns=10_000 * i, stages={"network": 100, "server_processing": 100}, server_id=i % 2)
            for i in range(198)]
    rows.append(rpc_row(198, issue_ns=10_000 * 198, server_id=1,
                        stages={"network": 100, "server_processing": 100, "server_queue": 1_000}))
    rows.append(rpc_row(199, issue_ns=10_000 * 199, server_id=0, stages={"network": 600, "server_processing": 100}))
    return decompose(rpc_frame(rows))


def test_tail_attribution_hand_computed():
    t = tail_attribution(_tail_log(), by_op=False)
    one = {r["stage"]: r for r in t.filter(pl.col("tail") == "slowest 1%").iter_rows(named=True)}
    # slowest 1 % = ceil(200 * 0.01) = 2 RPCs: 198 (server_queue longest) and 199 (network longest)
    assert one["server_queue"]["tail_rpcs"] == 2
    assert one["server_queue"]["threshold_us"] == pytest.approx(0.7)
    assert one["server_queue"]["dominant_share"] == 0.5 and one["network"]["dominant_share"] == 0.5
    # tail means: queue 500, network 350, latency 950; rest: network 100, latency 200 -> excess 750
    assert one["server_queue"]["mean_tail_us"] == pytest.approx(0.5)
    assert one["server_queue"]["excess_share"] == pytest.approx(500 / 750)
    assert one["network"]["excess_share"] == pytest.approx(250 / 750)
    assert one["server_processing"]["excess_share"] == pytest.approx(0.0)
    tenth = {r["stage"]: r for r in t.filter(pl.col("tail") == "slowest 0.1%").iter_rows(named=True)}
    # slowest 0.1 % = ceil(0.2) = 1 RPC (198); rest latency (198 * 200 + 700) / 199, network (198*100+600)/199
    rest_lat, rest_net = (198 * 200 + 700) / 199, (198 * 100 + 600) / 199
    assert tenth["server_queue"]["dominant_share"] == 1.0
    assert tenth["server_queue"]["excess_share"] == pytest.approx(1_000 / (1_200 - rest_lat))
    assert tenth["network"]["excess_share"] == pytest.approx((100 - rest_net) / (1_200 - rest_lat))
    assert sum(r["excess_share"] for r in tenth.values()) == pytest.approx(1.0)


def test_tail_servers_hand_computed():
    ts = tail_servers(_tail_log())
    one = ts.filter(pl.col("tail") == "slowest 1%").sort("server_id")
    assert one.get_column("rpcs").to_list() == [100, 100]
    assert one.get_column("tail_rpcs").to_list() == [1, 1]
    assert one.get_column("over_representation").to_list() == pytest.approx([1.0, 1.0])
    assert one.get_column("dominant_stage").to_list() == ["network", "server_queue"]
    tenth = ts.filter(pl.col("tail") == "slowest 0.1%").row(0, named=True)
    assert (tenth["server_id"], tenth["share_of_tail"], tenth["over_representation"]) == (1, 1.0, 2.0)


def test_connection_events_inferred_and_what_they_add():
    q = {"network": 100}
    rows = [  # pull_sparse on two connections; the first RPC on each opens it
        rpc_row(0, issue_ns=0, connection_id=1, stages={**q, "client_queue": 900},
                client_connect_start_ns=100, client_connect_end_ns=900),
        rpc_row(1, issue_ns=10_000, connection_id=1, stages={**q, "client_queue": 100}),
        rpc_row(2, issue_ns=20_000, connection_id=1, stages={**q, "client_queue": 200}),
        rpc_row(3, issue_ns=5_000, connection_id=2, stages={**q, "client_queue": 1_400}),
        rpc_row(4, issue_ns=15_000, connection_id=2, stages={**q, "client_queue": 150}),
    ]
    frame, inferred = add_connection_events(decompose(rpc_frame(rows)))
    assert inferred == 5
    assert frame.sort("rpc_id").get_column("connection_event").cast(pl.String).to_list() == [
        "new", "reuse", "reuse", "new", "reuse"]
    assert frame.sort("rpc_id").get_column("connect_in_queue_ns").to_list() == [800, 0, 0, 0, 0]
    table, totals = connection_summary(frame)
    new = table.filter(pl.col("connection_event") == "new").row(0, named=True)
    # latencies: new 1000, 1500; reuse 200, 300, 250 -> p50 1250 vs 250: +1000 ns
    assert new["latency_p50_us"] == pytest.approx(1.25)
    assert new["added_p50_us"] == pytest.approx(1.0)
    assert new["share_of_op"] == pytest.approx(0.4)
    assert new["connect_p50_us"] == pytest.approx(0.8)
    assert totals["setup_rpcs"] == 2 and totals["reconnect_rpcs"] == 0
    assert totals["added_s"] == pytest.approx((1_000 - 250 + 1_500 - 250) / 1e9)
    assert totals["added_share"] == pytest.approx(2_000 / 3_250)
    assert totals["connect_s"] == pytest.approx(800e-9)


def test_connections_per_thread():
    rows = [rpc_row(i, issue_ns=1_000 * i, connection_id=c, server_thread=t, stages={"server_queue": 10 * i})
            for i, (c, t) in enumerate([(1, 0), (2, 0), (3, 1), (1, 0)])]
    per_server, per_thread = connections_per_server(decompose(rpc_frame(rows)))
    s = per_server.row(0, named=True)
    assert (s["connections"], s["threads"], s["connections_per_thread"], s["rpcs"]) == (3, 2, 1.5, 4)
    assert per_thread.get_column("connections").to_list() == [2, 1]


def test_iteration_phase_hand_computed():
    rows = [
        rpc_row(0, issue_ns=0, iteration=0, stages={"network": 100}),
        rpc_row(1, issue_ns=600, iteration=0, op="push_sparse", stages={"network": 100}),
        rpc_row(2, issue_ns=1_000, iteration=1, stages={"network": 100}),
        rpc_row(3, issue_ns=1_500, iteration=1, op="push_sparse", stages={"network": 200}),  # done at 1700
    ]
    out = add_iteration_phase(rpc_frame(rows)).sort("rpc_id")
    # iteration 0 ends where iteration 1 starts (1000); iteration 1 is the last: it ends at its last done, 1700
    assert out.get_column("iteration_phase").to_list() == pytest.approx([0.0, 0.6, 0.0, 500 / 700])
    assert out.get_column("iteration_phase_bin").cast(pl.String).to_list() == ["0-25%", "50-75%", "0-25%", "50-75%"]


def test_size_fit_recovers_an_alpha_beta_network():
    # network = 50 us + bytes / 1.25 GB/s exactly (0.8 ns per byte)
    rows = [rpc_row(i, issue_ns=0, request_bytes=b, response_bytes=0, stages={"network": 50_000 + 4 * b // 5})
            for i, b in enumerate([1_000, 2_000, 3_000, 5_000, 8_000])]
    fits = size_fits(add_message_bytes(decompose(rpc_frame(rows))), pairs=(("network", "message_bytes"),))
    row = fits.row(0, named=True)
    assert (row["alpha_us"], row["ns_per_unit"]) == (pytest.approx(50.0), pytest.approx(0.8))
    assert row["effective_gb_s"] == pytest.approx(1.25)
    assert row["r2"] == pytest.approx(1.0)


def test_dissect_recovers_the_synthetic_generator_s_known_truths():
    d = dissect(synthetic_rpc_log(60_000, seed=11))
    t = narrate(d)
    # the generator's network is 2 x 25 us + bytes / 1.25 GB/s + jitter: the fit finds 1.25 GB/s
    net = d.size_fits.filter((pl.col("stage") == "network") & (pl.col("op") == "pull_sparse")).row(0, named=True)
    assert net["effective_gb_s"] == pytest.approx(1.25, rel=0.02)
    # server 0 holds the hot embedding rows: it is over-represented in the tail
    assert d.summary["tail"]["slowest 1%"]["top_server"] == 0
    # queueing grows with writes in flight at the server
    q = d.concurrency_fit.filter((pl.col("measure") == "server") & (pl.col("stage") == "server_queue"))
    assert q.get_column("us_per_write").item() > 0
    # the synthetic log has no bad rows, and every RPC is kept
    assert d.rejected.height == 0 and d.rpcs.height == 60_000
    assert d.summary["connections_management"]["setup_rpcs"] == d.rpcs.filter(
        pl.col("connection_event") != "reuse").height
    assert len(t.findings) >= 7


def test_dissect_takes_an_in_memory_frame_and_reports_bad_rows():
    frame = synthetic_rpc_log(3_000, seed=2)
    frame = frame.with_columns(pl.when(pl.col("rpc_id") == 5).then(pl.col("client_issue_ns") + 10**9)
                               .otherwise(pl.col("client_issue_ns")).alias("client_issue_ns"))
    d = dissect(frame)
    t = narrate(d)
    assert d.rpcs.height == 2_999
    assert d.summary["rejected_by_reason"] == {"reversed_client_order": 1}
    assert t.findings[-1].startswith("1 input row(s) rejected")


def test_dissect_with_no_valid_row_says_why():
    frame = synthetic_rpc_log(10, seed=2).with_columns(pl.col("client_done_ns") - 10**9)
    with pytest.raises(ValueError, match=r"no valid RPC rows.*10 rejected as reversed_client_order"):
        dissect(frame)
