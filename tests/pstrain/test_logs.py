"""Joining client and server rows: every RPC once, the rest counted by reason; order checks."""

from __future__ import annotations

import threading

import numpy as np
import polars as pl

from ddlscope.pstrain.logs import (
    CLIENT_RAW,
    SERVER_RAW,
    RowBuffer,
    UpdateCounter,
    join_rpc_rows,
    read_client_rows,
    read_key_updates,
    read_part,
    timestamp_order_violations,
    truncated_parts,
    write_table,
)
from ddlscope.rpc.schema import REQUIRED_COLUMNS, RPC_SCHEMA


def _client(rpc_id, status="OK", request_bytes=100, t0=1000):
    return {"rpc_id": rpc_id, "worker_id": 0, "server_id": 1, "connection_id": 7, "iteration": 3, "op": "push_sparse",
            "table_id": 0, "request_bytes": request_bytes, "response_bytes": 36, "num_keys": 2, "keys": [4, 6],
            "client_issue_ns": t0, "client_send_start_ns": t0 + 10, "client_send_end_ns": t0 + 20,
            "client_recv_end_ns": t0 + 90, "client_done_ns": t0 + 95, "connection_event": "reuse",
            "client_host": "a", "server_host": "b", "status": status}


def _server(rpc_id, t0=5000):
    return {"rpc_id": rpc_id, "srv_server_id": 1, "srv_worker_id": 0, "srv_op": "push_sparse", "server_thread": 2,
            "server_recv_start_ns": t0, "server_dispatch_ns": t0 + 5, "server_recv_end_ns": t0 + 10,
            "server_handler_start_ns": t0 + 12, "server_proc_start_ns": t0 + 15, "server_proc_end_ns": t0 + 30,
            "server_send_end_ns": t0 + 40, "server_call_end_ns": t0 + 50, "srv_request_bytes": 100,
            "srv_response_bytes": 36, "srv_status": "OK"}


def test_join_counts_what_it_leaves_out(tmp_path):
    client = pl.DataFrame([_client(1), _client(2), _client(3, status="UNAVAILABLE"), _client(4, request_bytes=99),
                           _client(5), _client(1)], schema=CLIENT_RAW)
    server = pl.DataFrame([_server(1), _server(3), _server(4), _server(5), _server(6)], schema=SERVER_RAW)
    log, excluded = join_rpc_rows(client, server)
    # rpc 1 and 5 complete; 2 client only; 3 failed; 4 sizes disagree; 6 server only; 1 seen twice by the client
    assert log["rpc_id"].to_list() == [1, 5]
    assert excluded == {"duplicate_client": 1, "client_only": 1, "server_only": 1, "failed": 1, "inconsistent": 1}
    assert log.columns[:len(REQUIRED_COLUMNS)] == list(REQUIRED_COLUMNS)
    for name, (dtype, _, _) in RPC_SCHEMA.items():
        assert log.schema[name] == dtype, name
    row = log.row(0, named=True)
    assert row["server_recv_end_ns"] == 5010 and row["client_done_ns"] == 1095 and row["keys"] == [4, 6]
    assert timestamp_order_violations(log) == {"client": 0, "server": 0}
    # CSV cannot hold lists: keys become "4;6"
    csv = pl.read_csv(write_table(log, tmp_path / "rpcs", "csv"))
    assert csv["keys"].to_list() == ["4;6", "4;6"]
    assert pl.read_ndjson(write_table(log, tmp_path / "rpcs", "jsonl"))["op"].to_list() == ["push_sparse"] * 2


def test_order_violations_are_counted_per_side():
    rows = [_client(1), _client(2), _client(3)]
    rows[1]["client_send_end_ns"] = rows[1]["client_send_start_ns"] - 1  # send ends before it starts
    rows[2]["client_connect_start_ns"], rows[2]["client_connect_end_ns"] = 1005, 1003
    servers = [_server(1), _server(2), _server(3)]
    servers[0]["server_proc_start_ns"] = servers[0]["server_handler_start_ns"] - 1
    log, _ = join_rpc_rows(pl.DataFrame(rows, schema=CLIENT_RAW), pl.DataFrame(servers, schema=SERVER_RAW))
    assert timestamp_order_violations(log) == {"client": 2, "server": 1}


def test_update_counts_add_up_across_part_files(tmp_path):
    counter = UpdateCounter(tmp_path / "updates-0")
    counter.add(0, 1, np.array([5, 7]))
    counter.add(0, 1, np.array([7]))
    counter.flush()
    counter.add(0, 1, np.array([7, 9]))  # iteration 0 continues in the next part file
    counter.add(1, 0, np.array([5]))
    counter.flush()
    assert counter.flush() is None  # nothing new
    updates = read_key_updates(tmp_path)
    # key 7 of table 1 in iteration 0: once in each of three pushes
    assert updates.rows() == [(0, 1, 5, 1), (0, 1, 7, 3), (0, 1, 9, 1), (1, 0, 5, 1)]


def test_part_file_keeps_every_flush_and_survives_a_cut_write(tmp_path):
    buf = RowBuffer(CLIENT_RAW, tmp_path / "client-0")
    buf.append(_client(1))
    buf.append({**_client(2), "keys": None, "table_id": None})
    assert buf.flush() == tmp_path / "client-0.rows"
    assert buf.flush() is None  # nothing new
    buf.append({**_client(3), "keys": np.array([9], dtype=np.int64)})
    buf.flush()
    rows = read_part(buf.path, CLIENT_RAW)
    assert rows.schema == pl.Schema(CLIENT_RAW)
    assert rows["rpc_id"].to_list() == [1, 2, 3] and rows["keys"].to_list() == [[4, 6], None, [9]]
    # a process killed in the middle of its next write leaves a short frame: the complete ones stay
    size = buf.path.stat().st_size
    buf.append(_client(4))
    buf.flush()
    with open(buf.path, "r+b") as fh:
        fh.truncate(size + 7)
    assert read_client_rows(tmp_path)["rpc_id"].to_list() == [1, 2, 3]
    assert truncated_parts(tmp_path) == ["client-0.rows"]
    # the last flush of a process seals the file: a flush racing with the exit writes nothing
    sealed = RowBuffer(CLIENT_RAW, tmp_path / "client-1")
    sealed.append(_client(5))
    sealed.flush(final=True)
    sealed.append(_client(6))
    assert sealed.flush() is None and read_part(sealed.path, CLIENT_RAW)["rpc_id"].to_list() == [5]


def test_concurrent_flushes_lose_no_row(tmp_path):
    """Rows appended by 4 threads that also flush, as gRPC callback threads and the main thread do."""
    buf = RowBuffer(CLIENT_RAW, tmp_path / "client-0")

    def work(base):
        for i in range(250):
            buf.append(_client(base + i))
            if i % 7 == 0:
                buf.flush()

    threads = [threading.Thread(target=work, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    buf.flush()
    ids = read_part(buf.path, CLIENT_RAW)["rpc_id"]
    assert ids.len() == 1000 and ids.n_unique() == 1000 and buf.written == 1000
