"""The latency gain of offload from an RPC log's stage times (the RPC dissection's), by hand."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from ddlscope.rpc import decompose
from ddlscope.rpc.schema import STAGES
from ddlscope.skew.latency import estimate_latency_gain
from ddlscope.skew.offload import SwitchLayout, prepare_trace, simulate_offload
from ddlscope.skew.streams import read_rpc_log_keys

# one RPC's timestamps (ns); the server clock runs 1000 ns ahead of the client's
CLIENT = {"client_issue_ns": 0, "client_send_start_ns": 10, "client_send_end_ns": 30, "client_recv_end_ns": 200,
          "client_done_ns": 210}
SERVER = {"server_recv_start_ns": 1000, "server_recv_end_ns": 1020, "server_proc_start_ns": 1050,
          "server_proc_end_ns": 1100, "server_send_end_ns": 1120}


def _log(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame([{**r, **CLIENT, **SERVER} for r in rows])


def test_stage_times_by_hand() -> None:
    st = decompose(_log([{"rpc_id": 1, "op": "push_sparse"}])).row(0, named=True)
    # client_queue 10-0; client_send 30-10; server residence 1120-1000 = 120; network (200-30)-120 = 50;
    # receive 1020-1000; queue 1050-1020; processing 1100-1050; send 1120-1100; completion 210-200
    expected = {"client_queue": 10, "client_send": 20, "network": 50, "server_receive": 20, "server_queue": 30,
                "server_processing": 50, "server_send": 20, "client_completion": 10}
    assert {s: st[f"{s}_ns"] for s in STAGES} == expected
    assert sum(expected.values()) == st["latency_ns"] == 210


def test_latency_gain_by_hand() -> None:
    st = decompose(_log([{"rpc_id": 1, "op": "push_sparse"}, {"rpc_id": 2, "op": "push_sparse"}]))
    # server stages 20+30+50+20 = 120 of 210 ns. h = (0.5, 0): 210 - 60 = 150 and 210 -> mean 180
    g = estimate_latency_gain(st, [0.5, 0.0])
    assert g["latency_mean_us_before"] == pytest.approx(0.210)
    assert g["latency_mean_us_after"] == pytest.approx(0.180)
    assert g["latency_speedup"] == pytest.approx(210 / 180)
    assert g["server_time_share_before"] == pytest.approx(120 / 210)
    # the same stages given in microseconds under other column names give the same answer
    us = st.select("rpc_id", *[(pl.col(f"{s}_ns") / 1000).alias(f"{s}_us") for s in STAGES])
    assert estimate_latency_gain(us, [0.5, 0.0])["latency_speedup"] == pytest.approx(210 / 180)
    with pytest.raises(ValueError, match="no column for stage 'network'"):
        estimate_latency_gain(st.drop("network_ns"), 0.5)


def test_offload_latency_from_an_rpc_log(tmp_path: Path) -> None:
    rows = [
        {"rpc_id": 0, "worker_id": 0, "iteration": 0, "op": "push_sparse", "keys": [1, 2]},
        {"rpc_id": 1, "worker_id": 1, "iteration": 0, "op": "push_sparse", "keys": [1]},
        {"rpc_id": 2, "worker_id": 0, "iteration": 1, "op": "push_sparse", "keys": [1, 3]},
        {"rpc_id": 3, "worker_id": 1, "iteration": 1, "op": "push_sparse", "keys": [2]},
    ]
    log = _log(rows).with_columns(pl.Series("client_issue_ns", [0, 1, 2, 3]))  # issue order = file order
    path = tmp_path / "log.parquet"
    log.write_parquet(path)
    trace = prepare_trace(read_rpc_log_keys(path))
    layout = SwitchLayout(embedding_dim=2)
    res = simulate_offload(trace, layout, [layout.entry_bytes], ("static",), warmup_iterations=1,
                           stage_times=decompose(log)).table.row(0, named=True)
    # warm-up counts key 1: 2, key 2: 1 -> {1}. Evaluated RPCs: rpc 2 keys (1, 3) -> h = 1/2; rpc 3 (2) -> 0
    # client_issue moved to 2 and 3 ns: latencies 208 and 207 ns; server stages 120 ns each
    # after: 208 - 60 = 148 and 207 -> mean before 207.5, after 177.5
    assert res["push_aggregated_fraction"] == pytest.approx(1 / 3)
    assert res["latency_mean_us_before"] == pytest.approx(0.2075)
    assert res["latency_mean_us_after"] == pytest.approx(0.1775)
    assert res["latency_speedup"] == pytest.approx(207.5 / 177.5)


def test_offload_latency_names_an_rpc_by_worker_and_rpc_id(tmp_path: Path) -> None:
    """Two workers whose rpc ids both restart at 0 (legal: an RPC is (worker_id, rpc_id)): each
    RPC's handled share and stage times stay its own."""
    # worker 1's RPCs: server processing 200 ns longer, and the client waits 200 ns longer for the answer
    slow = {"client_recv_end_ns": 400, "client_done_ns": 410, "server_proc_end_ns": 1300, "server_send_end_ns": 1320}
    rows = [
        {"rpc_id": 0, "worker_id": 0, "iteration": 0, "op": "push_sparse", "keys": [1, 2]},
        {"rpc_id": 0, "worker_id": 1, "iteration": 0, "op": "push_sparse", "keys": [1], **slow},
        {"rpc_id": 1, "worker_id": 0, "iteration": 1, "op": "push_sparse", "keys": [1, 3]},
        {"rpc_id": 1, "worker_id": 1, "iteration": 1, "op": "push_sparse", "keys": [2], **slow},
    ]
    log = pl.DataFrame([{**CLIENT, **SERVER, **r} for r in rows])
    path = tmp_path / "log.parquet"
    log.write_parquet(path)
    trace = prepare_trace(read_rpc_log_keys(path))
    assert trace.rpcs.rows() == [(0, 0), (1, 0), (0, 1), (1, 1)]  # four RPCs, not two
    stages = decompose(log)
    # worker 0: server stages 20 + 30 + 50 + 20 = 120 of 210 ns (test_stage_times_by_hand).
    # worker 1: processing 1300 - 1050 = 250, send 1320 - 1300 = 20 -> server stages 20 + 30 + 250 + 20 = 320;
    # network (400 - 30) - (1320 - 1000) = 50; latency 410 - 0 = 410
    assert stages["latency_ns"].to_list() == [210, 410, 210, 410]
    layout = SwitchLayout(embedding_dim=2)
    res = simulate_offload(trace, layout, [layout.entry_bytes], ("static",), warmup_iterations=1,
                           stage_times=stages).table.row(0, named=True)
    # warm-up counts key 1: 2, key 2: 1 -> {1}. Evaluated: (w0, rpc 1) keys (1, 3) -> h = 1/2;
    # (w1, rpc 1) key (2) -> h = 0. After: 210 - 120/2 = 150 and 410 - 0 = 410.
    # (Joined by rpc_id alone, both would get h = 1/3 of keys (1, 3, 2): 170 and 303.3.)
    assert res["push_aggregated_fraction"] == pytest.approx(1 / 3)
    assert res["latency_mean_us_before"] == pytest.approx((210 + 410) / 2 / 1000)
    assert res["latency_mean_us_after"] == pytest.approx((150 + 410) / 2 / 1000)
    assert res["latency_speedup"] == pytest.approx(310 / 280)
    # p99 of two values (linear): 210 + 0.99 * (410 - 210) = 408; after 150 + 0.99 * (410 - 150) = 407.4
    assert res["latency_p99_us_before"] == pytest.approx(0.408)
    assert res["latency_p99_us_after"] == pytest.approx(0.4074)
    with pytest.raises(ValueError, match="worker_id and rpc_id"):
        simulate_offload(trace, layout, [layout.entry_bytes], ("static",), warmup_iterations=1,
                         stage_times=stages.drop("worker_id"))
