"""A worker's RPC client: connection management and its half of the RPC log.

Connections are gRPC channels, each with its own subchannel pool
(``grpc.use_local_subchannel_pool``) so that one channel is one TCP connection and closing it
really closes the connection (by default gRPC shares connections between channels to the same
address, which would hide connection management). Three policies (``connections`` and
``max_connections``):

* ``persistent`` (default): one connection per server, opened at the first RPC and kept.
* ``persistent`` with ``max_connections = K`` < servers: a pool of at most K open connections; an
  RPC to a server without one closes the least-recently-used idle connection (waiting for one to
  become idle if all are busy) and opens a new one (``connection_event = reconnect`` when this
  worker had been connected to that server before).
* ``per-rpc``: every RPC opens its own connection and closes it when done (at most K at once when
  ``max_connections`` is set).

``client_connect_start_ns``/``client_connect_end_ns`` bracket channel creation and
:func:`wait_until_ready` (TCP + HTTP/2 handshake) and lie inside the RPC's ``client_queue``
stage (``client_issue_ns`` .. ``client_send_start_ns``), as does any wait for a pool slot.

The client is driven by one thread (the worker's training loop) that issues calls with
``future()``; completions arrive on gRPC's channel threads.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import partial

import grpc
import numpy as np
from grpc._cython import cygrpc

from ddlscope.pstrain import wire
from ddlscope.pstrain.logs import RowBuffer
from ddlscope.pstrain.server import GRPC_OPTIONS
from ddlscope.rpc.schema import OPS

CLIENT_OPTIONS = (*GRPC_OPTIONS, ("grpc.use_local_subchannel_pool", 1))
"""Channel options: no size limit, and a private subchannel pool (one channel = one connection)."""

ID_STRIDE = 1_000_000_000
"""RPC and connection ids are ``worker_id * ID_STRIDE + sequence`` (unique within a run)."""


def wait_until_ready(channel: grpc.Channel, timeout_s: float) -> bool:
    """Connect ``channel`` now and wait until it is READY (True) or ``timeout_s`` passes (False).

    Uses the calls with which gRPC's own ``channel_ready_future`` polls (``check_connectivity_state``
    with try-to-connect, ``watch_connectivity_state``) on the calling thread: the public
    ``channel_ready_future`` leaves a connectivity-polling thread behind that makes a later
    ``channel.close()`` wait up to 200 ms (its poll period), which would bias per-RPC connections.
    Falls back to ``channel_ready_future`` where the private ``channel._channel`` is absent.
    """
    deadline = time.monotonic() + timeout_s
    core = getattr(channel, "_channel", None)
    if core is None or not hasattr(core, "watch_connectivity_state"):
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout_s)
            return True
        except grpc.FutureTimeoutError:
            return False
    state = core.check_connectivity_state(True)
    while state != cygrpc.ConnectivityState.ready:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        core.watch_connectivity_state(state, time.time() + min(remaining, 1.0))
        state = core.check_connectivity_state(True)
    return True


class RpcFailedError(RuntimeError):
    """An RPC that ended with a non-OK gRPC status (the message names op, server and status)."""


@dataclass
class Connection:
    """One open channel (= one TCP connection) to one server."""

    connection_id: int
    server_id: int
    channel: grpc.Channel
    methods: tuple
    in_use: int = 0


@dataclass
class Call:
    """An issued RPC; ``finished`` is set once its log row is written."""

    rpc_id: int
    server_id: int
    op: int
    table_id: int
    iteration: int
    num_keys: int
    keys: np.ndarray | None
    issue_ns: int
    connection: Connection
    connection_event: str
    connect_start_ns: int | None
    connect_end_ns: int | None
    request: wire.Message
    response: wire.Message | None = None
    status: str = "PENDING"
    error: str | None = None
    finished: threading.Event = field(default_factory=threading.Event)


class ConnectionPool:
    """A worker's connections to the servers under one policy (module docstring).

    Args:
        worker_id: for connection ids.
        addresses: ``host:port`` of each server.
        per_rpc: open a connection per RPC.
        max_connections: most connections open at once (None: unlimited).
        connect_timeout_s: how long to wait for a connection to become ready.

    Raises (from :meth:`acquire`):
        RpcFailedError: a connection that does not become ready in time.
    """

    def __init__(self, worker_id: int, addresses: list[str], per_rpc: bool, max_connections: int | None,
                 connect_timeout_s: float):
        self.worker_id = worker_id
        self.addresses = addresses
        self.per_rpc = per_rpc
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        self._cond = threading.Condition()
        self._open: OrderedDict[int, Connection] = OrderedDict()  # persistent: server -> connection, LRU order
        self._count = 0  # connections open or being opened/closed
        self._closing = 0  # connections handed to the closer, not yet closed
        self._ever: set[int] = set()
        self._seq = itertools.count()
        self._to_close: queue.Queue[Connection | None] = queue.Queue()
        self._closer = threading.Thread(target=self._close_loop, name="closer", daemon=True)
        self._closer.start()
        self.opened = 0

    def _close_loop(self) -> None:
        while (conn := self._to_close.get()) is not None:
            conn.channel.close()
            with self._cond:
                self._count -= 1
                self._closing -= 1
                self._cond.notify_all()

    def acquire(self, server_id: int) -> tuple[Connection, str, int | None, int | None]:
        """A connection to ``server_id``: (connection, event, connect_start_ns, connect_end_ns)."""
        with self._cond:
            while True:
                if not self.per_rpc and (conn := self._open.get(server_id)) is not None:
                    conn.in_use += 1
                    self._open.move_to_end(server_id)
                    return conn, "reuse", None, None
                if self.max_connections is None or self._count < self.max_connections:
                    self._count += 1
                    break
                victim = next((c for c in self._open.values() if c.in_use == 0), None)
                if victim is not None and self._closing == 0:
                    del self._open[victim.server_id]
                    self._closing += 1
                    self._to_close.put(victim)
                self._cond.wait()
        event = "reconnect" if (server_id in self._ever and not self.per_rpc) else "new"
        start = time.time_ns()
        channel = grpc.insecure_channel(self.addresses[server_id], options=CLIENT_OPTIONS)
        if not wait_until_ready(channel, self.connect_timeout_s):
            channel.close()
            with self._cond:
                self._count -= 1
                self._cond.notify_all()
            raise RpcFailedError(f"worker {self.worker_id}: connection to server {server_id} "
                                 f"({self.addresses[server_id]}) not ready after {self.connect_timeout_s} s")
        end = time.time_ns()
        methods = tuple(channel.unary_unary(path, request_serializer=wire.encode, response_deserializer=wire.decode)
                        for path in wire.METHOD_PATHS)
        conn = Connection(self.worker_id * ID_STRIDE + next(self._seq), server_id, channel, methods, in_use=1)
        self.opened += 1
        with self._cond:
            self._ever.add(server_id)
            if not self.per_rpc:
                self._open[server_id] = conn
        return conn, event, start, end

    def release(self, conn: Connection) -> None:
        """The RPC on ``conn`` is done (closes it in per-RPC mode)."""
        with self._cond:
            conn.in_use -= 1
            if self.per_rpc:
                self._closing += 1
                self._to_close.put(conn)
            self._cond.notify_all()

    def close(self) -> None:
        """Close every connection and stop the closer thread."""
        with self._cond:
            conns, self._open = list(self._open.values()), OrderedDict()
            self._closing += len(conns)
        for c in conns:
            self._to_close.put(c)
        self._to_close.put(None)
        self._closer.join(timeout=10)


class PsClient:
    """Issues a worker's RPCs and records their client rows.

    Args:
        worker_id, pool: the worker and its connections.
        rows: the worker's client-row buffer (:data:`~ddlscope.pstrain.logs.CLIENT_RAW`).
        rpc_timeout_s: gRPC deadline of each RPC.
        client_host: host label; server_hosts: host label of each server.
        log_keys: keep each sparse RPC's keys in the log.
    """

    def __init__(self, worker_id: int, pool: ConnectionPool, rows: RowBuffer, rpc_timeout_s: float,
                 client_host: str, server_hosts: list[str], log_keys: bool):
        self.worker_id = worker_id
        self.pool = pool
        self.rows = rows
        self.rpc_timeout_s = rpc_timeout_s
        self.client_host = client_host
        self.server_hosts = server_hosts
        self.log_keys = log_keys
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self.completed = 0
        self.issued = 0

    def issue(self, server_id: int, op: int, table_id: int, iteration: int,
              arrays: tuple[np.ndarray, ...]) -> Call:
        """Start one RPC (returns at once; wait on ``call.finished``)."""
        issue = time.time_ns()
        self.issued += 1  # only the training loop's thread issues
        conn, event, cstart, cend = self.pool.acquire(server_id)
        rpc_id = self.worker_id * ID_STRIDE + next(self._seq)
        sparse = op in (wire.PULL_SPARSE, wire.PUSH_SPARSE)
        first = arrays[0]
        msg = wire.Message(op, rpc_id, self.worker_id, iteration, table_id if sparse else -1, arrays)
        call = Call(rpc_id, server_id, op, table_id if sparse else -1, iteration, len(first),
                    first if (sparse and self.log_keys) else None, issue, conn, event, cstart, cend, msg)
        future = conn.methods[op].future(msg, timeout=self.rpc_timeout_s,
                                         metadata=((wire.RPC_ID_METADATA_KEY, str(rpc_id)),))
        future.add_done_callback(partial(self._done, call))
        return call

    def _done(self, call: Call, future: grpc.Future) -> None:
        try:
            self._record(call, future, time.time_ns())
        finally:
            call.finished.set()

    def _record(self, call: Call, future: grpc.Future, done: int) -> None:
        self.pool.release(call.connection)
        try:
            call.response = future.result()
            call.status = "OK"
        except grpc.RpcError as exc:
            call.status = exc.code().name
            call.error = exc.details()
        except Exception as exc:  # deserialization errors surface here
            call.status, call.error = "CLIENT_ERROR", repr(exc)
        resp = call.response
        self.rows.append({
            "rpc_id": call.rpc_id, "worker_id": self.worker_id, "server_id": call.server_id,
            "connection_id": call.connection.connection_id, "iteration": call.iteration, "op": OPS[call.op],
            "table_id": None if call.table_id < 0 else call.table_id,
            "request_bytes": call.request.nbytes, "response_bytes": resp.nbytes if resp else None,
            "num_keys": call.num_keys, "keys": call.keys,
            "client_issue_ns": call.issue_ns, "client_send_start_ns": call.request.codec_start_ns,
            "client_send_end_ns": call.request.codec_end_ns,
            "client_recv_end_ns": resp.codec_start_ns if resp else None, "client_done_ns": done,
            "connection_event": call.connection_event, "client_connect_start_ns": call.connect_start_ns,
            "client_connect_end_ns": call.connect_end_ns, "client_host": self.client_host,
            "server_host": self.server_hosts[call.server_id], "status": call.status, "error": call.error,
        })
        with self._lock:
            self.completed += 1

    def wait(self, calls: list[Call]) -> None:
        """Wait for ``calls``; raise :class:`RpcFailedError` naming the first that failed."""
        for c in calls:
            c.finished.wait()
        for c in calls:
            if c.status != "OK":
                raise RpcFailedError(f"worker {self.worker_id}: {OPS[c.op]} to server {c.server_id} "
                                 f"({self.pool.addresses[c.server_id]}) failed: {c.status}: {c.error}")
