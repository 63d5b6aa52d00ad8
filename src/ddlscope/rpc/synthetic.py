"""SYNTHETIC parameter-server RPC logs, for tests, benchmarks and demos -- not measurements.

The generator draws a plausible asynchronous PS training: ``workers`` workers, each at its own
step period, issue a pull burst (``pull_sparse`` and ``pull_dense`` to every server) at the start
of each iteration and a push burst (``push_sparse``, ``push_dense``) after computing. Every stage
has a simple cost model (a fixed cost plus bytes over a bandwidth, log-normal jitter), the server
queue is a FIFO queue per server (the Lindley recursion ``W_n = max(0, W_(n-1) + S_(n-1) -
(A_n - A_(n-1)))``, Lindley 1952, with the service time divided by the server threads), one
server holds hot embedding rows (more keys per request), the first RPC on a connection and rare
reconnects pay a connection set-up inside the client queue, and each host's clock is offset by up to
``clock_skew_s`` seconds. All constants below are illustrative choices, not measured values.

Its rows follow :data:`~ddlscope.rpc.schema.RPC_SCHEMA` exactly, plus ``synthetic`` (= True) so no
one mistakes it for a real log.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ddlscope.rpc.schema import OPS, ConnectionEventEnum, OpEnum

EPOCH_NS = 1_700_000_000_000_000_000
"""Wall-clock origin of the synthetic timestamps (2023-11-14, ns since the Unix epoch)."""


def synthetic_rpc_log(
    num_rpcs: int = 100_000,
    *,
    workers: int = 16,
    servers: int = 4,
    server_threads: int = 4,
    step_ms: float = 15.0,
    sparse_keys_median: float = 800.0,
    dense_bytes: int = 256 * 1024,
    hot_server_factor: float = 3.0,
    reconnect_rate: float = 0.002,
    clock_skew_s: float = 5.0,
    seed: int = 0,
) -> pl.DataFrame:
    """A synthetic RPC log (SYNTHETIC data; see the module docstring for the model).

    Args:
        num_rpcs: rows to generate (the last iteration is cut to fit).
        workers, servers: counts; each (worker, server) pair has two connections (sparse ops on
            one, dense on the other).
        server_threads: threads per server; each connection is served by a thread drawn at random,
            so threads carry unequal numbers of connections, each thread a FIFO queue.
        step_ms: mean step period of a worker (each worker +-10 %).
        sparse_keys_median: median keys of a sparse request (log-normal, sigma 0.7).
        dense_bytes: dense parameter bytes per server shard.
        hot_server_factor: keys multiplier for server 0 (hot embedding rows).
        reconnect_rate: probability that an RPC on an open connection reconnects first.
        clock_skew_s: each host's clock offset is uniform in ``[-clock_skew_s, clock_skew_s]``.
        seed: random seed.

    Returns:
        A table with every :data:`~ddlscope.rpc.schema.RPC_SCHEMA` column (``keys`` excluded)
        and ``synthetic`` (Boolean, True).
    """
    rng = np.random.default_rng(seed)
    per_iter = workers * servers * 4
    iters = -(-num_rpcs // per_iter)
    idx = np.arange(num_rpcs, dtype=np.int64)
    it = idx // per_iter
    rem = idx % per_iter
    w = rem // (servers * 4)
    s = (rem // 4) % servers
    op = rem % 4  # 0 pull_sparse, 1 pull_dense, 2 push_sparse, 3 push_dense
    is_push = op >= 2
    is_sparse = (op % 2) == 0

    us = 1_000.0  # ns per microsecond
    period = step_ms * 1e6 * (1 + 0.1 * rng.uniform(-1, 1, workers))
    offset = rng.uniform(0, step_ms * 1e6, workers)
    jitter = rng.normal(0, 0.02 * step_ms * 1e6, (workers, iters))
    t_iter = offset[w] + it * period[w] + jitter[w, it]
    rank_in_burst = (op % 2) * servers + (s + it) % servers
    issue = t_iter + np.where(is_push, 0.6 * period[w], 0.0) + rank_in_burst * 15 * us

    # sizes: sparse keys log-normal (hot rows on server 0), dense shards of fixed size
    keys = np.exp(rng.normal(np.log(sparse_keys_median), 0.7, num_rpcs)) * np.where(s == 0, hot_server_factor, 1.0)
    keys = np.clip(np.rint(keys), 1, 200_000).astype(np.int64)
    num_keys = np.where(is_sparse, keys, 4)
    dense = np.full(num_rpcs, dense_bytes, np.int64)
    row_bytes = 64  # a 16-float embedding row
    req = np.select([op == 0, op == 1, op == 2], [64 + 8 * keys, np.full(num_rpcs, 64), 64 + 72 * keys], 64 + dense)
    resp = np.select([op == 0, op == 1], [64 + row_bytes * keys, 64 + dense], 32)

    # connections: two per (worker, server); first use is "new", rare reconnects later
    conn = (w * servers + s) * 2 + np.where(is_sparse, 0, 1)
    first_use = it == 0
    reconnect = (~first_use) & (rng.random(num_rpcs) < reconnect_rate)
    event = np.where(first_use, 1, np.where(reconnect, 2, 0))  # reuse, new, reconnect
    setup = (event > 0)
    connect = np.where(setup, np.exp(rng.normal(np.log(800 * us), 0.5, num_rpcs)), 0.0)

    def lognormal(median_us: float, sigma: float) -> np.ndarray:
        return np.exp(rng.normal(np.log(median_us * us), sigma, num_rpcs))

    client_queue = lognormal(4, 0.5) + connect
    client_send = 3 * us + req / 3.0  # 3 bytes/ns serialisation + write
    net_req = 25 * us + req / 1.25 + lognormal(3, 1.0)  # 10 Gb/s = 1.25 bytes/ns
    retrans = rng.random(num_rpcs) < 0.0005
    net_req += np.where(retrans, rng.uniform(200 * us, 1000 * us, num_rpcs), 0.0)
    server_receive = 1 * us + req / 4.0
    processing = np.select(
        [op == 0, op == 1, op == 2],
        [2 * us + 0.05 * us * keys, 2 * us + dense / 8.0, 3 * us + 0.2 * us * keys],
        3 * us + dense / 2.0,
    ) * lognormal(1, 0.2) / us
    pause = rng.random(num_rpcs) < 0.0002
    processing += np.where(pause, rng.uniform(2_000 * us, 8_000 * us, num_rpcs), 0.0)
    server_send = 1 * us + resp / 4.0
    net_resp = 25 * us + resp / 1.25 + lognormal(3, 1.0)
    client_completion = 2 * us + resp / 3.0

    # server queue: each server thread is a FIFO queue for the connections it serves (Lindley recursion)
    thread = rng.integers(0, server_threads, workers * servers * 2)[conn]
    arrive = issue + client_queue + client_send + net_req + server_receive
    service = processing
    q = s * server_threads + thread
    order = np.lexsort((arrive, q))
    a, sv, ss = arrive[order], service[order], q[order]
    first = np.ones(num_rpcs, np.bool_)
    first[1:] = ss[1:] != ss[:-1]
    x = np.zeros(num_rpcs)
    x[1:] = sv[:-1] - (a[1:] - a[:-1])
    x[first] = 0.0
    p = np.cumsum(x)
    p -= p[np.maximum.accumulate(np.where(first, np.arange(num_rpcs), 0))]  # restart the sum at each server
    run_min = pl.DataFrame({"p": p, "g": ss}).select(pl.col("p").cum_min().over("g")).to_series().to_numpy()
    wait_sorted = p - np.minimum(run_min, 0.0)
    server_queue = np.empty(num_rpcs)
    server_queue[order] = wait_sorted

    stages = [client_queue, client_send, net_req, server_receive, server_queue, processing, server_send, net_resp,
              client_completion]
    ns = [np.rint(x).astype(np.int64) for x in stages]
    cq, cs, nq, sr, sq, sp, ssd, nr, cc = ns
    c_off = np.rint(rng.uniform(-clock_skew_s, clock_skew_s, workers) * 1e9).astype(np.int64)
    s_off = np.rint(rng.uniform(-clock_skew_s, clock_skew_s, servers) * 1e9).astype(np.int64)
    c_issue = EPOCH_NS + np.rint(issue).astype(np.int64) + c_off[w]
    c_send_start = c_issue + cq
    c_send_end = c_send_start + cs
    true_recv_start = c_send_end - c_off[w] + nq  # on the true clock
    s_recv_start = true_recv_start + s_off[s]
    s_recv_end = s_recv_start + sr
    s_proc_start = s_recv_end + sq
    s_proc_end = s_proc_start + sp
    s_send_end = s_proc_end + ssd
    c_recv_end = s_send_end - s_off[s] + c_off[w] + nr
    c_done = c_recv_end + cc
    connect_start = np.where(setup, c_issue + 1_000, 0)
    connect_end = connect_start + np.rint(connect).astype(np.int64)
    return pl.DataFrame({
        "rpc_id": idx,
        "worker_id": w,
        "server_id": s,
        "connection_id": conn,
        "iteration": it,
        "op": pl.Series(np.asarray(OPS)[op], dtype=OpEnum),
        "request_bytes": req.astype(np.int64),
        "response_bytes": resp.astype(np.int64),
        "num_keys": num_keys.astype(np.int64),
        "client_issue_ns": c_issue,
        "client_send_start_ns": c_send_start,
        "client_send_end_ns": c_send_end,
        "client_recv_end_ns": c_recv_end,
        "client_done_ns": c_done,
        "server_recv_start_ns": s_recv_start,
        "server_recv_end_ns": s_recv_end,
        "server_proc_start_ns": s_proc_start,
        "server_proc_end_ns": s_proc_end,
        "server_send_end_ns": s_send_end,
        "connection_event": pl.Series(np.asarray(["reuse", "new", "reconnect"])[event], dtype=ConnectionEventEnum),
        "client_connect_start_ns": connect_start,
        "client_connect_end_ns": connect_end,
        "server_thread": thread.astype(np.int64),
        "synthetic": np.ones(num_rpcs, np.bool_),
    }).with_columns(
        pl.when(pl.col("connection_event") != "reuse").then(pl.col(c)).alias(c)
        for c in ("client_connect_start_ns", "client_connect_end_ns")
    )
