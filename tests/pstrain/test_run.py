"""A real small run (2 workers x 2 servers over gRPC on loopback): loss, log completeness, timestamps,
per-key update counts, OTLP spans, and a clean shutdown."""

from __future__ import annotations

import itertools
import json

import numpy as np
import polars as pl
import pytest

from ddlscope.pstrain import logs
from ddlscope.pstrain.config import RunConfig
from ddlscope.pstrain.launcher import run
from ddlscope.rpc.schema import CLIENT_TIMESTAMPS, REQUIRED_COLUMNS, RPC_SCHEMA, SERVER_TIMESTAMPS

from .conftest import live_processes_mentioning

WORKERS, SERVERS, ITERATIONS, DIM = 2, 2, 30, 32


@pytest.fixture(scope="module")
def word_run(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("word")
    # the fewest server threads a sync run of 2 workers needs: (2 - 1) x (2 tables + 1) + 1 = 4 (a deadlock
    # would trip the stall watchdog and fail the run instead of hanging the tests)
    cfg = RunConfig(model="word", data=shared_data / "text" / "tinyshakespeare.txt", workers=WORKERS,
                    servers=SERVERS, iterations=ITERATIONS, batch_size=128, lr=0.5, dim=DIM, out=out, otlp=True,
                    keep_raw=True, server_threads=4, stall_timeout_s=30)
    return run(cfg)


def test_loss_falls_on_the_text(word_run):
    it = pl.read_parquet(word_run.files["iterations"])
    assert it.height == WORKERS * ITERATIONS
    per_iteration = it.group_by("iteration").agg(pl.col("loss").mean()).sort("iteration")["loss"]
    first, last = per_iteration.head(5).mean(), per_iteration.tail(5).mean()
    # negative sampling with K = 5 starts near (1 + K) ln 2 = 4.159 nats (all scores ~ 0)
    assert abs(first - 6 * np.log(2)) < 0.05
    assert last < first - 0.1


def test_every_rpc_once_with_ordered_timestamps(word_run):
    log = pl.read_parquet(word_run.files["rpcs"])
    # per worker and iteration: 2 tables x 2 servers pull_sparse (every shard holds keys of every batch),
    # 1 pull_dense per server (tensors {0, 2} on server 0, {1, 3} on server 1), and as many pushes:
    # (4 + 2) x 2 = 12 RPCs; 2 workers x 30 iterations x 12 = 720
    assert log.height == 720 == word_run.summary["rpcs"]
    assert log["rpc_id"].n_unique() == 720
    per_step = log.group_by("worker_id", "iteration", "op").len()
    expected = {"pull_sparse": 4, "pull_dense": 2, "push_sparse": 4, "push_dense": 2}
    assert per_step.height == WORKERS * ITERATIONS * 4
    assert all(expected[str(op)] == n for op, n in per_step.select("op", "len").rows())
    # the same RPCs as each side recorded, nothing left out
    raw = word_run.out / "raw"
    assert set(logs.read_client_rows(raw)["rpc_id"]) == set(log["rpc_id"]) == set(logs.read_server_rows(raw)["rpc_id"])
    assert word_run.summary["rpcs_excluded"] == {}
    # the schema of the RPC dissection
    assert log.columns[:len(REQUIRED_COLUMNS)] == list(REQUIRED_COLUMNS)
    assert all(log.schema[c] == RPC_SCHEMA[c][0] for c in RPC_SCHEMA)
    assert log.select(pl.col(REQUIRED_COLUMNS).null_count()).sum_horizontal().item() == 0
    for side in (CLIENT_TIMESTAMPS, ("server_recv_start_ns", "server_dispatch_ns", "server_recv_end_ns",
                                     "server_handler_start_ns", *SERVER_TIMESTAMPS[2:], "server_call_end_ns")):
        for a, b in itertools.pairwise(side):
            assert (log[a] <= log[b]).all(), f"{a} > {b}"
    # on one host both clocks are the same: causality holds across sides, so no stage is negative
    assert (log["client_send_end_ns"] <= log["server_recv_start_ns"]).all()
    assert (log["server_send_end_ns"] <= log["client_recv_end_ns"]).all()
    network = (pl.col("client_recv_end_ns") - pl.col("client_send_end_ns")) - (
        pl.col("server_send_end_ns") - pl.col("server_recv_start_ns"))
    assert log.select((network >= 0).all()).item()
    assert word_run.summary["timestamp_order_violations"] == {"client": 0, "server": 0}


def test_message_sizes_follow_the_framing(word_run):
    log = pl.read_parquet(word_run.files["rpcs"])
    n = pl.col("num_keys")
    # header 36 B; an array adds 8 B + 8 B per dimension + its data
    checks = {
        "pull_sparse": (36 + 16 + 8 * n, 36 + 24 + 4 * DIM * n),
        "push_sparse": (36 + 16 + 8 * n + 24 + 4 * DIM * n, pl.lit(36)),
    }
    for op, (req, resp) in checks.items():
        rows = log.filter(pl.col("op") == op)
        assert rows.select((pl.col("request_bytes") == req).all() & (pl.col("response_bytes") == resp).all()).item()
    # pull_dense of server 0: W1 (64 x 32) and W2 (32 x 64) = 36 + 2 x (8 + 16 + 8192) = 16468 B;
    # server 1: b1 (64) and b2 (32) = 36 + (8 + 8 + 256) + (8 + 8 + 128) = 452 B
    dense = log.filter(pl.col("op") == "pull_dense").group_by("server_id").agg(pl.col("response_bytes").unique())
    assert dict(dense.rows()) == {0: [16468], 1: [452]}


def test_key_update_counts_sum_to_keys_pushed(word_run):
    log = pl.read_parquet(word_run.files["rpcs"])
    updates = pl.read_parquet(word_run.files["key_updates"])
    pushed = log.filter(pl.col("op") == "push_sparse")
    assert updates["updates"].sum() == pushed["num_keys"].sum() == word_run.summary["keys_pushed"]
    from_log = (pushed.select("iteration", "table_id", "keys").explode("keys").rename({"keys": "key"})
                .group_by("iteration", "table_id", "key").len("updates").sort("iteration", "table_id", "key"))
    assert updates.equals(from_log.with_columns(pl.col("updates").cast(pl.Int64)))
    # with 2 workers each key is updated at most twice per iteration, the hottest word ("the", key 0) twice
    assert updates["updates"].max() == 2
    assert updates.filter((pl.col("key") == 0) & (pl.col("table_id") == 0))["updates"].to_list() == [2] * ITERATIONS


def test_connections_persist(word_run):
    log = pl.read_parquet(word_run.files["rpcs"])
    events = dict(log.group_by("connection_event").len().select(pl.col("connection_event").cast(pl.String),
                                                                  "len").rows())
    assert events == {"new": WORKERS * SERVERS, "reuse": 720 - WORKERS * SERVERS}
    opened = log.filter(pl.col("connection_event") == "new")
    assert (opened["client_connect_start_ns"] >= opened["client_issue_ns"]).all()
    assert (opened["client_connect_end_ns"] <= opened["client_send_start_ns"]).all()
    assert log["connection_id"].n_unique() == WORKERS * SERVERS


def test_otlp_spans_join_client_and_server(word_run):
    doc = json.loads(word_run.files["spans"].read_text())
    spans = [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    kinds = [s["kind"] for s in spans]
    assert kinds.count(3) == kinds.count(2) == 720 and kinds.count(1) == WORKERS * ITERATIONS
    by_id = {s["spanId"]: s for s in spans}
    assert len(by_id) == len(spans)
    for s in spans:
        assert len(s["traceId"]) == 32 and len(s["spanId"]) == 16
        assert int(s["startTimeUnixNano"]) <= int(s["endTimeUnixNano"])
        if s["kind"] == 2:
            parent = by_id[s["parentSpanId"]]
            assert parent["kind"] == 3 and parent["traceId"] == s["traceId"]
            attrs = {a["key"]: a["value"] for a in s["attributes"]}
            cattrs = {a["key"]: a["value"] for a in parent["attributes"]}
            assert attrs["ddlscope.rpc_id"] == cattrs["ddlscope.rpc_id"]
            assert attrs["rpc.system"] == {"stringValue": "grpc"}
        elif s["kind"] == 3:
            assert by_id[s["parentSpanId"]]["kind"] == 1
    services = {a["value"]["stringValue"] for rs in doc["resourceSpans"] for a in rs["resource"]["attributes"]
                if a["key"] == "service.instance.id"}
    assert services == {"worker-0", "worker-1", "server-0", "server-1"}


def test_clean_shutdown(word_run):
    assert word_run.summary["status"] == "ok" and word_run.summary["failures"] == []
    assert word_run.summary["effective"]["server_threads"] == word_run.summary["effective"]["min_server_threads"] == 4
    assert log_threads_used(word_run) <= 4
    assert all(p["exit_status"] == 0 for p in word_run.summary["processes"])
    assert live_processes_mentioning(str(word_run.out)) == []
    run_json = json.loads((word_run.out / "run.json").read_text())
    assert run_json["rpcs"] == 720 and run_json["train_wall_s"] > 0


def log_threads_used(result) -> int:
    """Distinct handler threads per server seen in the log (at most the pool size)."""
    log = pl.read_parquet(result.files["rpcs"])
    return int(log.group_by("server_id").agg(pl.col("server_thread").n_unique())["server_thread"].max())
