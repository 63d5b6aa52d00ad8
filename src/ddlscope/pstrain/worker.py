"""A data-parallel worker: pull, compute, push, one iteration after another.

Per iteration ``t``:

1. take the next mini-batch of the worker's data shard;
2. **pull** concurrently: for every table and server, the batch's keys held by that server
   (``pull_sparse``, skipped when there are none), and every dense tensor (``pull_dense``, one
   RPC per server holding any);
3. **compute** the loss and gradients (PyTorch, CPU, one thread);
4. **push** concurrently: the row gradients (``push_sparse``; in sync mode also with zero keys,
   as the servers count one push per table and worker) and dense gradients (``push_dense``);
5. wait for every push's acknowledgement, then go on with ``t + 1``.

A failed RPC stops the worker with :class:`~ddlscope.pstrain.client.RpcFailedError`.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ddlscope.pstrain import wire
from ddlscope.pstrain.client import Call, ConnectionPool, PsClient
from ddlscope.pstrain.logs import CLIENT_RAW, ITERATIONS, RowBuffer
from ddlscope.pstrain.models import Batch, ModelSpec, ctr_batches, word_batches


@dataclass(frozen=True)
class WorkerConfig:
    """What one worker process needs.

    Attributes:
        worker_id, num_workers, num_servers: this worker's id, N and M.
        spec: the model; mode: ``sync`` or ``async``.
        iterations: iterations to run; batch_size: samples per iteration; seed: data-order seed.
        data_path: the prepared data (``raw/data.npz``, the arrays of :class:`ddlscope.pstrain.launcher.RunInput`).
        raw_dir: where the part files go; host: host label written in the log.
        per_rpc: a connection per RPC; max_connections: connection limit (None: unlimited).
        rpc_timeout_s, connect_timeout_s: deadlines.
        log_keys: keep each sparse RPC's keys in the log.
        kill_at_iteration: SIGKILL this process when starting this iteration (failure injection);
            with ``kill_signal`` ``"STOP"`` it is frozen with SIGSTOP instead.
    """

    worker_id: int
    num_workers: int
    num_servers: int
    spec: ModelSpec
    mode: str
    iterations: int
    batch_size: int
    seed: int
    data_path: Path
    raw_dir: Path
    host: str
    per_rpc: bool = False
    max_connections: int | None = None
    rpc_timeout_s: float = 120.0
    connect_timeout_s: float = 30.0
    log_keys: bool = True
    kill_at_iteration: int | None = None
    kill_signal: str = "KILL"


def batches_of(cfg: WorkerConfig) -> Iterator[Batch]:
    """The worker's mini-batch stream from the prepared data."""
    data = np.load(cfg.data_path)
    if cfg.spec.kind == "word":
        return word_batches(data["tokens"], data["counts"], cfg.spec, cfg.worker_id, cfg.num_workers,
                            cfg.batch_size, cfg.seed)
    from ddlscope.pstrain.data import CtrSamples

    samples = CtrSamples(keys=data["keys"], dense=data["dense"], labels=data["labels"], fields=(), dense_fields=(),
                         rows=cfg.spec.tables[0].rows, format="", feature_map=None, source=cfg.data_path)  # type: ignore[arg-type]
    return ctr_batches(samples, cfg.worker_id, cfg.num_workers, cfg.batch_size, cfg.seed)


class Worker:
    """One worker process's training loop (module docstring).

    Args:
        cfg: the worker's configuration.
        addresses: ``host:port`` of each server; server_hosts: their host labels.
    """

    def __init__(self, cfg: WorkerConfig, addresses: list[str], server_hosts: list[str]):
        import torch

        torch.set_num_threads(1)
        self.cfg = cfg
        self.batches = batches_of(cfg)
        self.rows = RowBuffer(CLIENT_RAW, cfg.raw_dir / f"client-{cfg.worker_id}")
        self.iterations = RowBuffer(ITERATIONS, cfg.raw_dir / f"iterations-{cfg.worker_id}")
        self.pool = ConnectionPool(cfg.worker_id, addresses, cfg.per_rpc, cfg.max_connections,
                                   cfg.connect_timeout_s)
        self.client = PsClient(cfg.worker_id, self.pool, self.rows, cfg.rpc_timeout_s, cfg.host, server_hosts,
                               cfg.log_keys)
        m = cfg.num_servers
        self.dense_ids = {s: np.array(cfg.spec.dense_ids_of(s, m), dtype=np.int64) for s in range(m)}
        self.dense_ids = {s: ids for s, ids in self.dense_ids.items() if len(ids)}
        self.iteration = 0

    def run(self, report: Callable[[int, float, int], None]) -> None:
        """Train ``cfg.iterations`` iterations; ``report(iterations_done, loss, rpcs)`` after each.

        The iteration's log rows are appended to the part files before the next one starts, so a
        worker killed at any moment loses the rows of at most the iteration it was in.

        Raises:
            RpcFailedError: an RPC failed (the message names op, server and status).
        """
        from ddlscope.pstrain.compute import loss_and_gradients

        cfg, client, m = self.cfg, self.client, self.cfg.num_servers
        sync = cfg.mode == "sync"
        for it in range(cfg.iterations):
            self.iteration = it
            if cfg.kill_at_iteration is not None and it == cfg.kill_at_iteration:
                os.kill(os.getpid(), getattr(signal, f"SIG{cfg.kill_signal}"))
            t_start = time.time_ns()
            rpcs_before = client.completed
            batch = next(self.batches)
            owners = [keys % m for keys in batch.keys]
            # 2. pull
            pulls: list[tuple[int, int, np.ndarray, Call]] = []
            for t, keys in enumerate(batch.keys):
                for s in range(m):
                    mask = owners[t] == s
                    if mask.any():
                        pulls.append((t, s, mask, client.issue(s, wire.PULL_SPARSE, t, it, (keys[mask],))))
            dense_pulls = {s: client.issue(s, wire.PULL_DENSE, -1, it, (ids,)) for s, ids in self.dense_ids.items()}
            client.wait([c for *_, c in pulls] + list(dense_pulls.values()))
            rows = [np.empty((len(keys), spec.dim), dtype=np.float32)
                    for keys, spec in zip(batch.keys, cfg.spec.tables, strict=True)]
            for t, _s, mask, call in pulls:
                rows[t][mask] = call.response.arrays[0]
            dense: list[np.ndarray] = [None] * len(cfg.spec.dense)  # type: ignore[list-item]
            for s, call in dense_pulls.items():
                for i, value in zip(self.dense_ids[s], call.response.arrays, strict=True):
                    dense[int(i)] = value
            t_pulled = time.time_ns()
            # 3. compute
            loss, row_grads, dense_grads = loss_and_gradients(cfg.spec, batch, rows, dense)
            t_computed = time.time_ns()
            # 4. push
            pushes: list[Call] = []
            for t, keys in enumerate(batch.keys):
                for s in range(m):
                    mask = owners[t] == s
                    if sync or mask.any():
                        pushes.append(client.issue(s, wire.PUSH_SPARSE, t, it, (keys[mask], row_grads[t][mask])))
            for s, ids in self.dense_ids.items():
                pushes.append(client.issue(s, wire.PUSH_DENSE, -1, it, (ids, *(dense_grads[int(i)] for i in ids))))
            client.wait(pushes)
            t_end = time.time_ns()
            self.iterations.append({
                "worker_id": cfg.worker_id, "iteration": it, "loss": loss, "samples": batch.samples,
                "rpcs": client.completed - rpcs_before, "iteration_start_ns": t_start, "pull_end_ns": t_pulled,
                "compute_end_ns": t_computed, "iteration_end_ns": t_end,
            })
            self.flush()
            report(it + 1, loss, client.completed)

    def flush(self, final: bool = False) -> None:
        """Append buffered rows to the part files (``final``: the process's last write)."""
        self.rows.flush(final)
        self.iterations.flush(final)

    def close(self) -> None:
        """Close the connections and write the remaining rows."""
        self.pool.close()
        self.flush()
