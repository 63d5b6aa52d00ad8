"""Server-side updates and the sync version check, driven in-process (no gRPC)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ddlscope.pstrain import wire
from ddlscope.pstrain.models import init_dense, init_table_shard, word_model_spec
from ddlscope.pstrain.server import ParameterServer, ServerConfig, _AbortError

SPEC = word_model_spec(vocab=10, dim=2, hidden=3, window=2, negatives=1)


def _server(tmp_path, mode="async", optimizer="adagrad", workers=1, servers=2, server_id=0):
    return ParameterServer(ServerConfig(server_id, servers, workers, SPEC, mode, optimizer, lr=0.5, seed=1,
                                        threads=4, raw_dir=tmp_path, host="h"))


def _msg(op, table_id, iteration, *arrays, worker=0):
    return wire.Message(op, 1, worker, iteration, table_id, tuple(arrays))


def test_async_adagrad_update(tmp_path):
    ps = _server(tmp_path)
    w0 = init_table_shard(SPEC.tables[1], 0, 2, seed=1)
    keys = np.array([2, 6], dtype=np.int64)  # local rows 1 and 3 of server 0
    g = np.array([[1.0, -2.0], [0.5, 0.0]], dtype=np.float32)
    ps.process(wire.PUSH_SPARSE, _msg(wire.PUSH_SPARSE, 1, 0, keys, g))
    # Adagrad: a = 0.1 + g^2; w = w0 - 0.5 * g / sqrt(a)
    expected = w0[[1, 3]] - 0.5 * g / np.sqrt(0.1 + g * g)
    (rows,), _, _ = ps.process(wire.PULL_SPARSE, _msg(wire.PULL_SPARSE, 1, 1, keys))
    np.testing.assert_allclose(rows, expected, rtol=1e-6)
    # a second push of the same gradient uses the grown accumulator: a = 0.1 + 2 g^2
    ps.process(wire.PUSH_SPARSE, _msg(wire.PUSH_SPARSE, 1, 1, keys, g))
    expected2 = expected - 0.5 * g / np.sqrt(0.1 + 2 * g * g)
    (rows2,), _, _ = ps.process(wire.PULL_SPARSE, _msg(wire.PULL_SPARSE, 1, 2, keys))
    np.testing.assert_allclose(rows2, expected2, rtol=1e-6)


def test_sgd_dense_update(tmp_path):
    ps = _server(tmp_path, optimizer="sgd")
    b1 = init_dense(SPEC.dense[2], seed=1)  # tensor 2 is on server 0 of 2
    g = np.full(b1.shape, 0.25, dtype=np.float32)
    ps.process(wire.PUSH_DENSE, _msg(wire.PUSH_DENSE, -1, 0, np.array([2]), g))
    (value,), _, _ = ps.process(wire.PULL_DENSE, _msg(wire.PULL_DENSE, -1, 1, np.array([2])))
    np.testing.assert_allclose(value, b1 - 0.5 * 0.25, rtol=1e-6)


def test_sync_mean_over_workers_and_version_check(tmp_path):
    ps = _server(tmp_path, mode="sync", optimizer="sgd", workers=2, servers=1)
    w0 = init_table_shard(SPEC.tables[0], 0, 1, seed=1)
    # a sync server expects per iteration 2 workers x (2 tables + 1 dense push) = 6 pushes
    assert ps.expected_pushes == 6
    key = np.array([4], dtype=np.int64)
    pulled = []
    reader = threading.Thread(target=lambda: pulled.append(
        ps.process(wire.PULL_SPARSE, _msg(wire.PULL_SPARSE, 0, 1, key))[0][0][0]))
    reader.start()  # a pull of iteration 1 waits until iteration 0 is applied
    g = {0: np.array([[1.0, 2.0]], np.float32), 1: np.array([[3.0, 0.0]], np.float32)}
    for w in (0, 1):
        ps.process(wire.PUSH_SPARSE, _msg(wire.PUSH_SPARSE, 0, 0, key, g[w], worker=w))
        ps.process(wire.PUSH_SPARSE, _msg(wire.PUSH_SPARSE, 1, 0, np.empty(0, np.int64),
                                          np.empty((0, 2), np.float32), worker=w))
    assert ps.version == 0 and reader.is_alive()
    dense_ids = np.array(SPEC.dense_ids_of(0, 1))
    zeros = [np.zeros(d.shape, np.float32) for d in SPEC.dense]
    for w in (0, 1):
        ps.process(wire.PUSH_DENSE, _msg(wire.PUSH_DENSE, -1, 0, dense_ids, *zeros, worker=w))
    reader.join(timeout=5)
    assert ps.version == 1 and not reader.is_alive()
    # SGD with the mean gradient ((1, 2) + (3, 0)) / 2 = (2, 1): w = w0 - 0.5 * (2, 1)
    np.testing.assert_allclose(pulled[0], w0[4] - 0.5 * np.array([2.0, 1.0]), rtol=1e-6)
    # a push of a past iteration is refused
    with pytest.raises(_AbortError, match="sync push of iteration 0 from worker 0 while the server is at iteration 1"):
        ps.process(wire.PUSH_SPARSE, _msg(wire.PUSH_SPARSE, 0, 0, key, g[0]))
    # a push of a future iteration waits until the shard gets there
    early = threading.Thread(target=ps.process, args=(wire.PUSH_SPARSE, _msg(wire.PUSH_SPARSE, 0, 2, key, g[0])))
    early.start()
    early.join(timeout=0.3)
    assert early.is_alive() and ps.version == 1
    for w in (0, 1):
        for t in (0, 1):
            ps.process(wire.PUSH_SPARSE, _msg(wire.PUSH_SPARSE, t, 1, key[:0], g[0][:0], worker=w))
        ps.process(wire.PUSH_DENSE, _msg(wire.PUSH_DENSE, -1, 1, dense_ids, *zeros, worker=w))
    early.join(timeout=5)
    assert not early.is_alive() and ps.version == 2


def test_requests_for_other_shards_are_refused(tmp_path):
    ps = _server(tmp_path)
    with pytest.raises(_AbortError, match="key 3 of table 0: not held by server 0"):
        ps.process(wire.PULL_SPARSE, _msg(wire.PULL_SPARSE, 0, 0, np.array([2, 3])))
    with pytest.raises(_AbortError, match="key 10"):
        ps.process(wire.PULL_SPARSE, _msg(wire.PULL_SPARSE, 0, 0, np.array([10])))
    with pytest.raises(_AbortError, match=r"dense tensor\(s\) \[1\]"):
        ps.process(wire.PULL_DENSE, _msg(wire.PULL_DENSE, -1, 0, np.array([1])))
    with pytest.raises(_AbortError, match="shape"):
        ps.process(wire.PUSH_SPARSE, _msg(wire.PUSH_SPARSE, 0, 0, np.array([0]), np.zeros((1, 3), np.float32)))
