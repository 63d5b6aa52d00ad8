"""The RPC log schema: one row per RPC between a worker and a parameter server.

This is the contract between producers of RPC logs (``ddlscope ps-train``, users' own PS
frameworks through a column mapping) and the RPC dissection. Timestamps are integer nanoseconds,
each on its *own side's* clock (``client_*`` on the worker's host, ``server_*`` on the server's
host); the two clocks may differ by any offset, so no analysis ever subtracts a client timestamp
from a server one.

Stages (:data:`STAGES`) and their definitions, each a difference on one clock:

====================  ======================================================  =======
stage                 definition                                              clock
====================  ======================================================  =======
client_queue          client_send_start - client_issue                       client
client_send           client_send_end - client_send_start                    client
network               (client_recv_end - client_send_end) - server residence  both, as
                                                                                  durations
server_receive        server_recv_end - server_recv_start                    server
server_queue          server_proc_start - server_recv_end                    server
server_processing     server_proc_end - server_proc_start                    server
server_send           server_send_end - server_proc_end                      server
client_completion     client_done - client_recv_end                          client
====================  ======================================================  =======

with server residence = ``server_send_end - server_recv_start``. The stages add up to the
client-observed latency ``client_done - client_issue`` exactly: the client-clock stages and the
network stage telescope to ``client_done - client_issue`` and the server stages to the server
residence, which the network stage subtracts again. A constant offset between the two clocks cancels
inside every difference, so the decomposition does not change with clock skew (clock *drift*, a
rate error, scales each duration by ``1 + drift``: 10 ppm on a 1 ms stage is 10 ns).

This decomposition (client/server timestamps, round trip minus server residence) is the
standard one of RPC tracing (Sigelman et al., "Dapper", Google TR 2010, section 2: client send/recv
and server recv/send annotations, and the round trip minus server time as network time); the
stage list follows the IMC 2020 study's question of which part of an RPC dominates
(reconstruction: the study's exact stage definitions are not available to us).
"""

from __future__ import annotations

import polars as pl

OPS: tuple[str, ...] = ("pull_sparse", "pull_dense", "push_sparse", "push_dense")
"""RPC operations: pulls read parameters from the server, pushes write gradients to it."""
OpEnum = pl.Enum(list(OPS))
READ_OPS: tuple[str, ...] = ("pull_sparse", "pull_dense")
"""Reads: the ops that fetch parameters (pulls)."""
WRITE_OPS: tuple[str, ...] = ("push_sparse", "push_dense")
"""Writes: the ops that send gradients (pushes)."""

CONNECTION_EVENTS: tuple[str, ...] = ("reuse", "new", "reconnect")
"""How the RPC got its connection: an open one reused, a new one, or a reconnect after a drop."""
ConnectionEventEnum = pl.Enum(list(CONNECTION_EVENTS))

CLIENT_TIMESTAMPS: tuple[str, ...] = (
    "client_issue_ns", "client_send_start_ns", "client_send_end_ns", "client_recv_end_ns", "client_done_ns",
)
"""Worker-side timestamps in the order they must occur (ns, client clock)."""
SERVER_TIMESTAMPS: tuple[str, ...] = (
    "server_recv_start_ns", "server_recv_end_ns", "server_proc_start_ns", "server_proc_end_ns", "server_send_end_ns",
)
"""Server-side timestamps in the order they must occur (ns, server clock)."""

#: column -> (dtype, required, meaning)
RPC_SCHEMA: dict[str, tuple[pl.DataType, bool, str]] = {
    "rpc_id": (pl.Int64, True, "id of the RPC, unique per worker: (worker_id, rpc_id) names an RPC"),
    "worker_id": (pl.Int64, True, "worker (client) id"),
    "server_id": (pl.Int64, True, "parameter-server shard id"),
    "connection_id": (pl.Int64, True, "connection (channel/socket) id, unique within the log"),
    "iteration": (pl.Int64, True, "training iteration (step) of the worker"),
    "op": (OpEnum, True, "pull_sparse | pull_dense | push_sparse | push_dense"),
    "request_bytes": (pl.Int64, True, "request message size, bytes"),
    "response_bytes": (pl.Int64, True, "response message size, bytes"),
    "num_keys": (pl.Int64, True, "parameter keys (embedding rows, or dense tensors) in the request"),
    **{name: (pl.Int64, True, "client clock, ns") for name in CLIENT_TIMESTAMPS},
    **{name: (pl.Int64, True, "server clock, ns") for name in SERVER_TIMESTAMPS},
    # optional
    "connection_event": (ConnectionEventEnum, False, "reuse | new | reconnect"),
    "client_connect_start_ns": (pl.Int64, False, "client clock, ns: connection set-up began (new/reconnect)"),
    "client_connect_end_ns": (pl.Int64, False, "client clock, ns: connection established"),
    "server_thread": (pl.Int64, False, "server thread (or core) that processed the RPC"),
    "client_host": (pl.String, False, "worker host name"),
    "server_host": (pl.String, False, "server host name"),
    "table_id": (pl.Int64, False, "embedding table of a sparse op"),
    "keys": (pl.List(pl.Int64), False, "the keys of the request (for update-skew analysis)"),
}
"""The RPC table's columns. Optional columns may be absent; extra columns are kept as they are."""

REQUIRED_COLUMNS: tuple[str, ...] = tuple(k for k, (_, req, _) in RPC_SCHEMA.items() if req)

STAGES: tuple[str, ...] = (
    "client_queue", "client_send", "network", "server_receive", "server_queue",
    "server_processing", "server_send", "client_completion",
)
"""The stages of an RPC, in time order (definitions in the module docstring)."""

STAGE_BOUNDS: dict[str, tuple[str, str]] = {
    "client_queue": ("client_issue_ns", "client_send_start_ns"),
    "client_send": ("client_send_start_ns", "client_send_end_ns"),
    "server_receive": ("server_recv_start_ns", "server_recv_end_ns"),
    "server_queue": ("server_recv_end_ns", "server_proc_start_ns"),
    "server_processing": ("server_proc_start_ns", "server_proc_end_ns"),
    "server_send": ("server_proc_end_ns", "server_send_end_ns"),
    "client_completion": ("client_recv_end_ns", "client_done_ns"),
}
"""Single-clock stages as ``stage -> (start column, end column)``: duration = end - start.
``network`` is not here: it is ``(client_recv_end - client_send_end) - (server_send_end -
server_recv_start)``, two durations each on one clock."""

SUBSTAGES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "server_receive": (("server_thread_wait", "server_recv_start_ns", "server_dispatch_ns"),
                       ("server_read", "server_dispatch_ns", "server_recv_end_ns")),
    "server_queue": (("server_decode", "server_recv_end_ns", "server_handler_start_ns"),
                     ("server_sync_wait", "server_handler_start_ns", "server_proc_start_ns")),
}
"""Finer server stages, as ``stage -> ((part, start column, end column), ...)``, used when a log
has the optional server timestamps ``server_dispatch_ns`` (a server thread picked the request up)
and ``server_handler_start_ns`` (the method started, after decoding), as ``ddlscope ps-train``
writes them (docs/pstrain.md, "Timestamps"). The parts add up to their stage exactly:

====================  ==============================================  ===============================
part                  definition                                      in ps-train (gRPC Python)
====================  ==============================================  ===============================
server_thread_wait    server_dispatch - server_recv_start             waiting for a free pool thread
server_read           server_recv_end - server_dispatch               the request body arriving
server_decode         server_handler_start - server_recv_end          decoding the request
server_sync_wait      server_proc_start - server_handler_start        the sync barrier (a pull or push
                                                                      of iteration t waits until every
                                                                      worker pushed t - 1) and table
                                                                      locks; locks only in async mode
====================  ==============================================  ===============================
"""

SUBSTAGE_COLUMNS: tuple[str, ...] = ("server_dispatch_ns", "server_handler_start_ns")
"""The optional server timestamps that split :data:`SUBSTAGES` (server clock, ns)."""

ALL_STAGES: tuple[str, ...] = (*STAGES, *(part for parts in SUBSTAGES.values() for part, _, _ in parts))
"""Every stage name: :data:`STAGES` and the parts of :data:`SUBSTAGES`."""

LATENCY_COLUMN = "latency_ns"
"""The client-observed latency ``client_done_ns - client_issue_ns`` (ns), added by the decomposition."""


def stage_column(stage: str) -> str:
    """The column holding ``stage``'s duration in the decomposed table: ``<stage>_ns`` (int64 ns).

    Raises:
        ValueError: ``stage`` is not one of :data:`ALL_STAGES`.
    """
    if stage not in ALL_STAGES:
        raise ValueError(f"stage: expected one of {', '.join(ALL_STAGES)}, got {stage!r}")
    return f"{stage}_ns"


def stages_of(frame: pl.DataFrame) -> tuple[str, ...]:
    """The stages a decomposed table resolves, in time order: :data:`STAGES` with each stage of
    :data:`SUBSTAGES` replaced by its parts where ``frame`` has every part's ``<part>_ns`` column
    (added by :func:`~ddlscope.rpc.decompose.decompose` when the log has the timestamps). The
    stages of the result add up to the latency exactly."""
    out: list[str] = []
    for stage in STAGES:
        parts = [part for part, _, _ in SUBSTAGES.get(stage, ())]
        out.extend(parts if parts and all(f"{p}_ns" in frame.columns for p in parts) else [stage])
    return tuple(out)


STAGE_COLUMNS: tuple[str, ...] = tuple(f"{s}_ns" for s in STAGES)
"""``<stage>_ns`` for every stage, in :data:`STAGES` order."""
