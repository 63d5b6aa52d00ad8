"""Hand-made RPC logs for the rpc tests: every stage is chosen, timestamps follow from it.

``rpc_row`` lays one RPC out on a *true* time line from its stage durations and writes the client
timestamps on the client host's clock (true + ``client_offset_ns``) and the server ones on the
server host's clock (true + ``server_offset_ns``). The network stage is split into the request
leg and the response leg (``network_request_ns``); only their sum is observable.
"""

from __future__ import annotations

import polars as pl

from ddlscope.rpc.schema import RPC_SCHEMA, STAGES


def rpc_row(
    rpc_id: int,
    *,
    issue_ns: int,
    stages: dict[str, int],
    worker_id: int = 0,
    server_id: int = 0,
    connection_id: int = 0,
    iteration: int = 0,
    op: str = "pull_sparse",
    request_bytes: int = 100,
    response_bytes: int = 200,
    num_keys: int = 3,
    client_offset_ns: int = 0,
    server_offset_ns: int = 0,
    network_request_ns: int | None = None,
    **extra: object,
) -> dict[str, object]:
    """One RPC as a dict of schema columns (stages missing from ``stages`` are 0)."""
    st = {s: int(stages.get(s, 0)) for s in STAGES}
    net_req = st["network"] // 2 if network_request_ns is None else network_request_ns
    net_resp = st["network"] - net_req
    t = issue_ns
    c_issue = t
    c_send_start = c_issue + st["client_queue"]
    c_send_end = c_send_start + st["client_send"]
    s_recv_start = c_send_end + net_req
    s_recv_end = s_recv_start + st["server_receive"]
    s_proc_start = s_recv_end + st["server_queue"]
    s_proc_end = s_proc_start + st["server_processing"]
    s_send_end = s_proc_end + st["server_send"]
    c_recv_end = s_send_end + net_resp
    c_done = c_recv_end + st["client_completion"]
    co, so = client_offset_ns, server_offset_ns
    return {
        "rpc_id": rpc_id, "worker_id": worker_id, "server_id": server_id, "connection_id": connection_id,
        "iteration": iteration, "op": op, "request_bytes": request_bytes, "response_bytes": response_bytes,
        "num_keys": num_keys,
        "client_issue_ns": c_issue + co, "client_send_start_ns": c_send_start + co,
        "client_send_end_ns": c_send_end + co, "client_recv_end_ns": c_recv_end + co, "client_done_ns": c_done + co,
        "server_recv_start_ns": s_recv_start + so, "server_recv_end_ns": s_recv_end + so,
        "server_proc_start_ns": s_proc_start + so, "server_proc_end_ns": s_proc_end + so,
        "server_send_end_ns": s_send_end + so,
        **extra,
    }


def rpc_frame(rows: list[dict[str, object]]) -> pl.DataFrame:
    """Rows as a table with the schema's dtypes for the columns present."""
    frame = pl.DataFrame(rows)
    return frame.with_columns(pl.col(c).cast(RPC_SCHEMA[c][0]) for c in frame.columns if c in RPC_SCHEMA)
