"""Connection policies against a real in-process gRPC server: persistent, pool limit, per-RPC."""

from __future__ import annotations

import numpy as np
import pytest

from ddlscope.pstrain import wire
from ddlscope.pstrain.client import ConnectionPool, PsClient, RpcFailedError
from ddlscope.pstrain.logs import CLIENT_RAW, RowBuffer, read_part
from ddlscope.pstrain.models import word_model_spec
from ddlscope.pstrain.server import ServerConfig, start_server

SPEC = word_model_spec(vocab=20, dim=4, hidden=4, window=2, negatives=1)


@pytest.fixture
def two_servers(tmp_path):
    started = [start_server(ServerConfig(s, 2, 1, SPEC, "async", "sgd", 0.1, 0, 4, tmp_path, "h"), "127.0.0.1:0")
               for s in range(2)]
    yield [f"127.0.0.1:{port}" for _, _, port in started]
    for _, server, _ in started:
        server.stop(0).wait()


def _client(tmp_path, addresses, per_rpc=False, max_connections=None):
    pool = ConnectionPool(0, addresses, per_rpc, max_connections, connect_timeout_s=5)
    rows = RowBuffer(CLIENT_RAW, tmp_path / "client-0")
    return PsClient(0, pool, rows, 10.0, "h", ["h", "h"], log_keys=True), rows


def _pull_dense(client, server_id, iteration):
    call = client.issue(server_id, wire.PULL_DENSE, -1, iteration, (np.array(SPEC.dense_ids_of(server_id, 2)),))
    client.wait([call])
    return call


def _rows(rows):
    path = rows.flush()
    return read_part(path, CLIENT_RAW).sort("client_issue_ns")


def test_persistent_with_a_pool_of_one(tmp_path, two_servers):
    client, rows = _client(tmp_path, two_servers, max_connections=1)
    for it, server in enumerate([0, 0, 1, 0, 1]):
        _pull_dense(client, server, it)
    client.pool.close()
    log = _rows(rows)
    # one connection at a time: switching server closes the open one; a server seen before is a reconnect
    assert log["connection_event"].to_list() == ["new", "reuse", "new", "reconnect", "reconnect"]
    assert log["connection_id"].to_list() == [0, 0, 1, 2, 3]
    assert client.pool.opened == 4
    assert (log["status"] == "OK").all()


def test_per_rpc_connections(tmp_path, two_servers):
    client, rows = _client(tmp_path, two_servers, per_rpc=True)
    calls = [client.issue(s, wire.PULL_DENSE, -1, 0, (np.array(SPEC.dense_ids_of(s, 2)),)) for s in (0, 1, 0)]
    client.wait(calls)
    client.pool.close()
    log = _rows(rows)
    assert log["connection_event"].to_list() == ["new"] * 3 and log["connection_id"].n_unique() == 3
    assert (log["client_issue_ns"] <= log["client_connect_start_ns"]).all()
    assert (log["client_connect_start_ns"] < log["client_connect_end_ns"]).all()
    assert (log["client_connect_end_ns"] <= log["client_send_start_ns"]).all()


def test_unreachable_server_fails_fast(tmp_path, two_servers):
    pool = ConnectionPool(0, ["127.0.0.1:1"], per_rpc=False, max_connections=None, connect_timeout_s=0.5)
    with pytest.raises(RpcFailedError, match=r"server 0 .*not ready after 0\.5 s"):
        pool.acquire(0)
    pool.close()


def test_server_refusal_is_reported_with_the_op_and_status(tmp_path, two_servers):
    client, _ = _client(tmp_path, two_servers)
    call = client.issue(0, wire.PULL_SPARSE, 0, 0, (np.array([1]),))  # key 1 lives on server 1
    with pytest.raises(RpcFailedError, match=r"pull_sparse to server 0 .*INVALID_ARGUMENT: key 1 of table 0"):
        client.wait([call])
    client.pool.close()
