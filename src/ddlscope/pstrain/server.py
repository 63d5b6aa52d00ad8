"""A parameter-server shard: gRPC service, optimizer updates, and its half of the RPC log.

The server is a ``grpc.server`` with one *generic* handler (no generated stubs): gRPC calls the
handler's ``service()`` on its polling thread when a new call (its headers) arrives, which is where
``server_recv_start_ns`` is taken; the request deserializer (the same thread, once the whole
message is in) gives ``server_recv_end_ns``; the method runs on a pool thread
(``server_proc_start_ns``/``server_proc_end_ns`` around the read or update); the response
serializer's exit (the response handed to gRPC core) gives ``server_send_end_ns``; the
RPC-termination callback (``context.add_callback``, run once gRPC core reports response and status
written) gives the extra ``server_call_end_ns``. docs/pstrain.md, "Timestamps", lists every one.

Updates (vectorised NumPy on the rows of a request):

* SGD: ``w <- w - lr * g``.
* Adagrad (Duchi, Hazan & Singer, JMLR 2011), TensorFlow's form with initial accumulator 0.1:
  ``a <- a + g^2; w <- w - lr * g / sqrt(a)``.

Modes:

* ``async``: each push is applied on arrival under the table's lock (Hogwild-style staleness
  across workers, as in TensorFlow's asynchronous PS training).
* ``sync``: pushes of iteration ``t`` are accumulated; when all ``N`` workers have sent theirs
  (``N x (tables + [1 if the shard holds dense tensors])`` pushes; workers send a push to every
  shard every iteration, possibly with zero keys), the mean over workers is applied once and the
  shard's version becomes ``t + 1``. A pull (or push) of iteration ``t`` waits at the server until
  the version is at least ``t`` (the version check), which makes every worker read the same weights.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import grpc
import numpy as np

from ddlscope.pstrain import wire
from ddlscope.pstrain.logs import SERVER_RAW, RowBuffer, UpdateCounter
from ddlscope.pstrain.models import ModelSpec, init_dense, init_table_shard
from ddlscope.rpc.schema import OPS

GRPC_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
)
"""Channel/server options shared by both sides: no message-size limit (gRPC's default is 4 MiB)."""

ADAGRAD_INITIAL_ACCUMULATOR = 0.1
"""TensorFlow's ``Adagrad`` default ``initial_accumulator_value``."""

_local = threading.local()


@dataclass(frozen=True)
class ServerConfig:
    """What one server process needs.

    Attributes:
        server_id, num_servers, num_workers: this shard's id, M and N.
        spec: the model (tables, dense tensors).
        mode: ``sync`` or ``async``; optimizer: ``adagrad`` or ``sgd``; lr: learning rate.
        seed: initial-value seed; threads: gRPC handler threads.
        raw_dir: where the part files go; host: host label written in the log.
        kill_after_rpcs: SIGKILL this process on its n-th RPC (failure injection), or None;
            with ``kill_signal`` ``"STOP"`` it is frozen with SIGSTOP instead.
    """

    server_id: int
    num_servers: int
    num_workers: int
    spec: ModelSpec
    mode: str
    optimizer: str
    lr: float
    seed: int
    threads: int
    raw_dir: Path
    host: str
    kill_after_rpcs: int | None = None
    kill_signal: str = "KILL"


class _AbortError(Exception):
    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(details)
        self.code, self.details = code, details


def _apply(values: np.ndarray, accum: np.ndarray | None, rows: np.ndarray | slice, grad: np.ndarray,
           lr: float) -> None:
    """SGD (``accum is None``) or Adagrad update of ``values[rows]`` by ``grad`` (rows unique)."""
    if accum is None:
        values[rows] -= lr * grad
    else:
        a = accum[rows] + grad * grad
        accum[rows] = a
        values[rows] -= lr * grad / np.sqrt(a)


class ParameterServer:
    """The state and request handling of one shard (see the module docstring for the semantics)."""

    def __init__(self, cfg: ServerConfig):
        self.cfg = cfg
        m, s = cfg.num_servers, cfg.server_id
        self.tables = [init_table_shard(t, s, m, cfg.seed) for t in cfg.spec.tables]
        self.dense = {i: init_dense(cfg.spec.dense[i], cfg.seed) for i in cfg.spec.dense_ids_of(s, m)}
        adagrad = cfg.optimizer == "adagrad"
        self.table_accum = [np.full_like(t, ADAGRAD_INITIAL_ACCUMULATOR) if adagrad else None for t in self.tables]
        self.dense_accum = {i: np.full_like(d, ADAGRAD_INITIAL_ACCUMULATOR) if adagrad else None
                            for i, d in self.dense.items()}
        self.table_locks = [threading.Lock() for _ in self.tables]
        self.dense_lock = threading.Lock()
        # sync mode
        self.cond = threading.Condition()
        self.version = 0
        self.expected_pushes = cfg.num_workers * (len(self.tables) + (1 if self.dense else 0))
        self._pending_sparse: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in self.tables]
        self._pending_dense: dict[int, list[np.ndarray]] = {i: [] for i in self.dense}
        self._pushes = 0
        self.stopping = False
        # logs
        self.rows = RowBuffer(SERVER_RAW, cfg.raw_dir / f"server-{s}")
        self.updates = UpdateCounter(cfg.raw_dir / f"updates-{s}")
        self._rpc_counter = itertools.count(1)
        self._thread_ids: dict[int, int] = {}
        self._thread_lock = threading.Lock()
        self.rpcs = 0

    # -- request handling -------------------------------------------------------------------------
    def _thread_index(self) -> int:
        ident = threading.get_ident()
        idx = self._thread_ids.get(ident)
        if idx is None:
            with self._thread_lock:
                idx = self._thread_ids.setdefault(ident, len(self._thread_ids))
        return idx

    def _check_keys(self, table_id: int, keys: np.ndarray) -> np.ndarray:
        if not 0 <= table_id < len(self.tables):
            raise _AbortError(grpc.StatusCode.INVALID_ARGUMENT, f"table {table_id}: this model has {len(self.tables)}")
        m, s = self.cfg.num_servers, self.cfg.server_id
        rows = self.cfg.spec.tables[table_id].rows
        bad = (keys < 0) | (keys >= rows) | (keys % m != s)
        if bad.any():
            k = int(keys[bad][0])
            raise _AbortError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"key {k} of table {table_id}: not held by server {s} of {m} (keys 0..{rows - 1}, "
                           f"server = key mod {m})")
        return keys // m

    def _check_dense(self, ids: np.ndarray) -> list[int]:
        out = [int(i) for i in ids]
        missing = [i for i in out if i not in self.dense]
        if missing:
            raise _AbortError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"dense tensor(s) {missing}: server {self.cfg.server_id} holds {sorted(self.dense)}")
        return out

    def _wait_version(self, iteration: int) -> None:
        with self.cond:
            while self.version < iteration and not self.stopping:
                self.cond.wait(timeout=1.0)
        if self.stopping:
            raise _AbortError(grpc.StatusCode.UNAVAILABLE, "server stopping")

    def process(self, op: int, req: wire.Message) -> tuple[tuple[np.ndarray, ...], int, int]:
        """Serve one request; returns (response arrays, proc_start_ns, proc_end_ns).

        Raises:
            _AbortError: a malformed request (wrong keys, tables or tensors for this shard).
        """
        sync = self.cfg.mode == "sync"
        if op == wire.PULL_SPARSE:
            (keys,) = req.arrays
            rows = self._check_keys(req.table_id, keys)
            if sync:
                self._wait_version(req.iteration)
            with self.table_locks[req.table_id]:
                t0 = time.time_ns()
                out = (self.tables[req.table_id][rows],)
                return out, t0, time.time_ns()
        if op == wire.PULL_DENSE:
            ids = self._check_dense(req.arrays[0])
            if sync:
                self._wait_version(req.iteration)
            with self.dense_lock:
                t0 = time.time_ns()
                out = tuple(self.dense[i].copy() for i in ids)
                return out, t0, time.time_ns()
        if op == wire.PUSH_SPARSE:
            keys, grads = req.arrays
            rows = self._check_keys(req.table_id, keys)
            if grads.shape != (len(keys), self.tables[req.table_id].shape[1]):
                raise _AbortError(grpc.StatusCode.INVALID_ARGUMENT,
                                  f"push_sparse gradients of shape {grads.shape}: expected ({len(keys)}, "
                                  f"{self.tables[req.table_id].shape[1]})")
            if sync:
                return self._sync_push(req, lambda: self._pending_sparse[req.table_id].append((rows, grads)))
            with self.table_locks[req.table_id]:
                t0 = time.time_ns()
                _apply(self.tables[req.table_id], self.table_accum[req.table_id], rows, grads, self.cfg.lr)
                self.updates.add(req.iteration, req.table_id, keys)
                return (), t0, time.time_ns()
        ids = self._check_dense(req.arrays[0])
        grads = req.arrays[1:]
        if len(grads) != len(ids) or any(g.shape != self.dense[i].shape for i, g in zip(ids, grads, strict=False)):
            raise _AbortError(grpc.StatusCode.INVALID_ARGUMENT, f"push_dense: gradients do not match tensors {ids}")
        if sync:
            return self._sync_push(req, lambda: [self._pending_dense[i].append(g) for i, g in zip(ids, grads,
                                                                                                  strict=True)])
        with self.dense_lock:
            t0 = time.time_ns()
            for i, g in zip(ids, grads, strict=True):
                _apply(self.dense[i], self.dense_accum[i], slice(None), g, self.cfg.lr)
            return (), t0, time.time_ns()

    def _sync_push(self, req: wire.Message, stash) -> tuple[tuple, int, int]:
        with self.cond:
            # a worker that had nothing to pull from this shard may push iteration t before the shard
            # has applied t - 1: the push waits, like a pull would have
            while self.version < req.iteration and not self.stopping:
                self.cond.wait(timeout=1.0)
            if self.stopping:
                raise _AbortError(grpc.StatusCode.UNAVAILABLE, "server stopping")
            t0 = time.time_ns()
            if req.iteration != self.version:
                raise _AbortError(grpc.StatusCode.FAILED_PRECONDITION,
                                  f"sync push of iteration {req.iteration} from worker {req.worker_id} while the "
                                  f"server is at iteration {self.version}")
            stash()
            if req.op == wire.PUSH_SPARSE:
                self.updates.add(req.iteration, req.table_id, req.arrays[0])
            self._pushes += 1
            if self._pushes == self.expected_pushes:
                self._apply_pending()
                self._pushes = 0
                self.version += 1
                self.cond.notify_all()
            return (), t0, time.time_ns()

    def _apply_pending(self) -> None:
        """Apply the mean over workers of the accumulated gradients (sync mode)."""
        n = self.cfg.num_workers
        for t, pending in enumerate(self._pending_sparse):
            pending_nonempty = [(r, g) for r, g in pending if len(r)]
            if pending_nonempty:
                rows = np.concatenate([r for r, _ in pending_nonempty])
                grads = np.concatenate([g for _, g in pending_nonempty])
                uniq, inv = np.unique(rows, return_inverse=True)
                summed = np.zeros((len(uniq), grads.shape[1]), dtype=np.float32)
                np.add.at(summed, inv, grads)
                with self.table_locks[t]:
                    _apply(self.tables[t], self.table_accum[t], uniq, summed / n, self.cfg.lr)
            pending.clear()
        with self.dense_lock:
            for i, grads in self._pending_dense.items():
                if grads:
                    _apply(self.dense[i], self.dense_accum[i], slice(None), np.sum(grads, axis=0) / n, self.cfg.lr)
                grads.clear()

    # -- gRPC glue ------------------------------------------------------------------------------
    def handle(self, request: wire.Message, context: grpc.ServicerContext, *, op: int, recv_start_ns: int,
               metadata_rpc_id: int | None) -> wire.Message:
        """The gRPC method body: timestamps, failure injection, :meth:`process`, and the log row."""
        handler_start = time.time_ns()
        dispatch = getattr(_local, "dispatch_ns", handler_start)
        n = next(self._rpc_counter)
        if self.cfg.kill_after_rpcs is not None and n == self.cfg.kill_after_rpcs:
            os.kill(os.getpid(), getattr(signal, f"SIG{self.cfg.kill_signal}"))
        if metadata_rpc_id is not None and metadata_rpc_id != request.rpc_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"rpc id {metadata_rpc_id} in metadata differs from {request.rpc_id} in the payload")
        if request.op != op:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"payload op {OPS[request.op]} sent to {OPS[op]}")
        try:
            arrays, proc_start, proc_end = self.process(op, request)
        except _AbortError as exc:
            context.abort(exc.code, exc.details)
        response = wire.Message(op, request.rpc_id, request.worker_id, request.iteration, request.table_id, arrays)
        row = {
            "rpc_id": request.rpc_id, "srv_server_id": self.cfg.server_id, "srv_worker_id": request.worker_id,
            "srv_op": OPS[op], "server_thread": self._thread_index(),
            "server_recv_start_ns": recv_start_ns, "server_dispatch_ns": dispatch,
            "server_recv_end_ns": request.codec_start_ns, "server_handler_start_ns": handler_start,
            "server_proc_start_ns": proc_start, "server_proc_end_ns": proc_end,
            "srv_request_bytes": request.nbytes,
        }
        if not context.add_callback(partial(self._finish, row, response)):
            row.update(srv_status="cancelled")
            self.rows.append(row)
        return response

    def _finish(self, row: dict, response: wire.Message) -> None:
        row["server_call_end_ns"] = time.time_ns()
        row["server_send_end_ns"] = response.codec_end_ns or None  # response serializer exit
        row["srv_response_bytes"] = response.nbytes
        row["srv_status"] = "OK" if response.nbytes else "not_sent"
        self.rows.append(row)
        self.rpcs += 1

    def flush(self, final: bool = False) -> None:
        """Append buffered log rows and update counts to the part files (``final``: the last write)."""
        self.rows.flush(final)
        self.updates.flush(final)

    def stop(self) -> None:
        """Release requests waiting at the sync barrier."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()


class _GenericHandler(grpc.GenericRpcHandler):
    """Routes the four methods to :meth:`ParameterServer.handle`, stamping ``server_recv_start_ns``."""

    def __init__(self, ps: ParameterServer):
        self.ps = ps

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        recv_start = time.time_ns()
        op = wire.OP_OF_PATH.get(handler_call_details.method)
        if op is None:
            return None
        rpc_id = None
        for key, value in handler_call_details.invocation_metadata or ():
            if key == wire.RPC_ID_METADATA_KEY:
                rpc_id = int(value)
        return grpc.unary_unary_rpc_method_handler(
            partial(self.ps.handle, op=op, recv_start_ns=recv_start, metadata_rpc_id=rpc_id),
            request_deserializer=wire.decode,
            response_serializer=wire.encode,
        )


class _DispatchStampingExecutor(ThreadPoolExecutor):
    """A thread pool that records when a pool thread picks a call up (``server_dispatch_ns``)."""

    def submit(self, fn, /, *args, **kwargs):
        return super().submit(_stamped, fn, *args, **kwargs)


def _stamped(fn, *args, **kwargs):
    _local.dispatch_ns = time.time_ns()
    return fn(*args, **kwargs)


def start_server(cfg: ServerConfig, bind: str) -> tuple[ParameterServer, grpc.Server, int]:
    """Create the shard and start its gRPC server on ``bind`` (``host:port``, port 0 = any).

    Returns (shard, server, bound port).

    Raises:
        RuntimeError: the address could not be bound.
    """
    ps = ParameterServer(cfg)
    server = grpc.server(
        _DispatchStampingExecutor(max_workers=cfg.threads, thread_name_prefix=f"ps{cfg.server_id}"),
        handlers=[_GenericHandler(ps)],
        options=GRPC_OPTIONS,
    )
    port = server.add_insecure_port(bind)
    if not port:
        raise RuntimeError(f"server {cfg.server_id}: could not bind {bind}")
    server.start()
    return ps, server, port
