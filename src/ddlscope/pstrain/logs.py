"""The run's logs: per-process row buffers, and the join of client and server rows into one RPC log.

Each worker writes *client rows* and each server *server rows* of the RPCs it took part in, as
Parquet part files under ``raw/``; the launcher joins them by ``rpc_id`` (the id travels in the
gRPC metadata and in the payload header) into one table in the schema of
:mod:`ddlscope.rpc.schema`, plus three ps-train extras (``server_dispatch_ns``,
``server_handler_start_ns``, ``server_call_end_ns``; docs/pstrain.md, "Timestamps"). An RPC
enters the log only when both sides recorded it and it succeeded; any other is counted by reason,
never dropped silently.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ddlscope.rpc.schema import (
    CLIENT_TIMESTAMPS,
    REQUIRED_COLUMNS,
    RPC_SCHEMA,
    SERVER_TIMESTAMPS,
)

CLIENT_RAW: dict[str, pl.DataType] = {
    "rpc_id": pl.Int64, "worker_id": pl.Int64, "server_id": pl.Int64, "connection_id": pl.Int64,
    "iteration": pl.Int64, "op": pl.String, "table_id": pl.Int64, "request_bytes": pl.Int64,
    "response_bytes": pl.Int64, "num_keys": pl.Int64, "keys": pl.List(pl.Int64),
    **{c: pl.Int64 for c in CLIENT_TIMESTAMPS},
    "connection_event": pl.String, "client_connect_start_ns": pl.Int64, "client_connect_end_ns": pl.Int64,
    "client_host": pl.String, "server_host": pl.String, "status": pl.String, "error": pl.String,
}
"""Columns of a worker's raw rows (one per RPC it issued; failed RPCs have ``status`` != OK)."""

SERVER_RAW: dict[str, pl.DataType] = {
    "rpc_id": pl.Int64, "srv_server_id": pl.Int64, "srv_worker_id": pl.Int64, "srv_op": pl.String,
    "server_thread": pl.Int64,
    "server_recv_start_ns": pl.Int64, "server_dispatch_ns": pl.Int64, "server_recv_end_ns": pl.Int64,
    "server_handler_start_ns": pl.Int64, "server_proc_start_ns": pl.Int64, "server_proc_end_ns": pl.Int64,
    "server_send_end_ns": pl.Int64, "server_call_end_ns": pl.Int64, "srv_request_bytes": pl.Int64,
    "srv_response_bytes": pl.Int64, "srv_status": pl.String,
}
"""Columns of a server's raw rows (one per RPC it handled)."""

UPDATES_RAW: dict[str, pl.DataType] = {
    "iteration": pl.Int64, "table_id": pl.Int64, "key": pl.Int64, "updates": pl.Int64,
}
"""Per-key update counts: gradient rows received for ``key`` of ``table_id`` in ``iteration``."""

ITERATIONS: dict[str, pl.DataType] = {
    "worker_id": pl.Int64, "iteration": pl.Int64, "loss": pl.Float64, "samples": pl.Int64,
    "rpcs": pl.Int64, "iteration_start_ns": pl.Int64, "pull_end_ns": pl.Int64, "compute_end_ns": pl.Int64,
    "iteration_end_ns": pl.Int64,
}
"""A worker's iterations: mean loss of the batch (nats/sample) and phase boundaries (worker clock)."""

EXTRA_COLUMNS: tuple[str, ...] = ("server_dispatch_ns", "server_handler_start_ns", "server_call_end_ns")
"""ps-train columns beyond the schema, kept in the joined log."""

LOG_FORMATS: tuple[str, ...] = ("parquet", "csv", "jsonl")


class RowBuffer:
    """Thread-safe row collection of one process, written as numbered Parquet part files.

    Args:
        schema: column name -> dtype of the rows.
        prefix: part files are ``{prefix}-{n:04d}.parquet``.
    """

    def __init__(self, schema: Mapping[str, pl.DataType], prefix: Path):
        self.schema = dict(schema)
        self.prefix = Path(prefix)
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._parts = 0
        self.written = 0

    def append(self, row: dict[str, Any]) -> None:
        """Add one row (a dict with the schema's keys; missing keys are null)."""
        with self._lock:
            self._rows.append(row)

    def __len__(self) -> int:
        return len(self._rows)

    def flush(self) -> Path | None:
        """Write the buffered rows as the next part file; returns its path (None if no rows)."""
        with self._lock:
            rows, self._rows = self._rows, []
        if not rows:
            return None
        frame = pl.DataFrame(rows, schema=self.schema)
        path = self.prefix.with_name(f"{self.prefix.name}-{self._parts:04d}.parquet")
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        frame.write_parquet(tmp)
        tmp.replace(path)
        self._parts += 1
        self.written += frame.height
        return path


class UpdateCounter:
    """Per-key update counts of one server: the keys of every sparse push, grouped at flush.

    Keys are appended as arrays (one per push, no per-key Python work) and counted with one
    ``group_by`` per flush.
    """

    def __init__(self, prefix: Path):
        self.prefix = Path(prefix)
        self._chunks: list[tuple[int, int, np.ndarray]] = []
        self._lock = threading.Lock()
        self._parts = 0

    def add(self, iteration: int, table_id: int, keys: np.ndarray) -> None:
        """Count one update for each of ``keys`` (int64, unique within the push)."""
        with self._lock:
            self._chunks.append((iteration, table_id, keys))

    def flush(self) -> Path | None:
        """Write the counts so far as the next part file; returns its path (None if nothing)."""
        with self._lock:
            chunks, self._chunks = self._chunks, []
        if not chunks:
            return None
        lengths = np.array([len(k) for _, _, k in chunks], dtype=np.int64)
        frame = pl.DataFrame({
            "iteration": np.repeat(np.array([c[0] for c in chunks], dtype=np.int64), lengths),
            "table_id": np.repeat(np.array([c[1] for c in chunks], dtype=np.int64), lengths),
            "key": np.concatenate([c[2] for c in chunks]).astype(np.int64),
        })
        counts = frame.group_by("iteration", "table_id", "key").agg(pl.len().cast(pl.Int64).alias("updates"))
        path = self.prefix.with_name(f"{self.prefix.name}-{self._parts:04d}.parquet")
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        counts.write_parquet(path)
        self._parts += 1
        return path


def _read_parts(raw_dir: Path, pattern: str, schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    files = sorted(Path(raw_dir).glob(pattern))
    if not files:
        return pl.DataFrame(schema=dict(schema))
    return pl.concat([pl.read_parquet(f) for f in files], how="vertical")


def read_client_rows(raw_dir: Path) -> pl.DataFrame:
    """All workers' raw rows (:data:`CLIENT_RAW`)."""
    return _read_parts(raw_dir, "client-*.parquet", CLIENT_RAW)


def read_server_rows(raw_dir: Path) -> pl.DataFrame:
    """All servers' raw rows (:data:`SERVER_RAW`)."""
    return _read_parts(raw_dir, "server-*.parquet", SERVER_RAW)


def read_iterations(raw_dir: Path) -> pl.DataFrame:
    """All workers' iteration rows (:data:`ITERATIONS`), sorted by worker and iteration."""
    return _read_parts(raw_dir, "iterations-*.parquet", ITERATIONS).sort("worker_id", "iteration")


def read_key_updates(raw_dir: Path) -> pl.DataFrame:
    """Per-key update counts of all servers, summed over part files, sorted (:data:`UPDATES_RAW`)."""
    parts = _read_parts(raw_dir, "updates-*.parquet", UPDATES_RAW)
    return (parts.group_by("iteration", "table_id", "key").agg(pl.col("updates").sum())
            .sort("iteration", "table_id", "key"))


def join_rpc_rows(client: pl.DataFrame, server: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """Join client and server rows by ``rpc_id`` into the RPC log.

    Args:
        client: :data:`CLIENT_RAW` rows; server: :data:`SERVER_RAW` rows.

    Returns:
        (log, excluded): the log, one row per RPC that both sides recorded and that succeeded,
        with the columns of :data:`ddlscope.rpc.schema.RPC_SCHEMA` (required first, then the
        optional ones, then :data:`EXTRA_COLUMNS`), sorted by ``client_issue_ns``; and the count
        of excluded rows by reason: ``client_only`` (the server never finished it, e.g. it died),
        ``server_only`` (the worker died before recording it), ``failed`` (an RPC error status),
        ``duplicate_client``/``duplicate_server`` (an rpc_id seen twice on one side), and
        ``inconsistent`` (the two sides disagree on server, op or bytes).
    """
    excluded: dict[str, int] = {}
    for name, frame in (("client", client), ("server", server)):
        dup = frame.height - frame["rpc_id"].n_unique()
        if dup:
            excluded[f"duplicate_{name}"] = dup
    client = client.unique("rpc_id", keep="first", maintain_order=True)
    server = server.unique("rpc_id", keep="first", maintain_order=True)
    joined = client.join(server, on="rpc_id", how="full", coalesce=True)
    has_client = pl.col("worker_id").is_not_null()
    has_server = pl.col("srv_server_id").is_not_null()
    ok = (pl.col("status") == "OK") & (pl.col("srv_status") == "OK")
    consistent = (
        (pl.col("server_id") == pl.col("srv_server_id")) & (pl.col("op") == pl.col("srv_op"))
        & (pl.col("worker_id") == pl.col("srv_worker_id"))
        & (pl.col("request_bytes") == pl.col("srv_request_bytes"))
        & (pl.col("response_bytes") == pl.col("srv_response_bytes"))
    )
    counts = joined.select(
        (has_client & ~has_server).sum().alias("client_only"),
        (~has_client & has_server).sum().alias("server_only"),
        (has_client & has_server & ~ok).sum().alias("failed"),
        (has_client & has_server & ok & ~consistent).sum().alias("inconsistent"),
    ).row(0, named=True)
    excluded.update({k: int(v) for k, v in counts.items() if v})
    complete = joined.filter(has_client & has_server & ok & consistent)
    optional = [c for c, (_, req, _) in RPC_SCHEMA.items() if not req]
    log = complete.select(
        *[pl.col(c).cast(RPC_SCHEMA[c][0]) for c in (*REQUIRED_COLUMNS, *optional)],
        *[pl.col(c) for c in EXTRA_COLUMNS],
    ).sort("client_issue_ns", "rpc_id")
    return log, excluded


def timestamp_order_violations(log: pl.DataFrame) -> dict[str, int]:
    """Rows whose timestamps are out of order, per side.

    Client: ``issue <= [connect_start <= connect_end <=] send_start <= send_end <= recv_end <= done``;
    server: ``recv_start <= dispatch <= recv_end <= handler_start <= proc_start <= proc_end <= send_end
    <= call_end`` (the bracketed/extra ones where present). Returns ``{"client": n, "server": n}``.
    """
    def chain(cols: list[str]) -> pl.Expr:
        present = [c for c in cols if c in log.columns]
        ok = pl.lit(True)
        for a, b in itertools.pairwise(present):
            ok = ok & (pl.col(a).is_null() | pl.col(b).is_null() | (pl.col(a) <= pl.col(b)))
        return (~ok).sum()

    client = ["client_issue_ns", "client_connect_start_ns", "client_connect_end_ns", *CLIENT_TIMESTAMPS[1:]]
    server = ["server_recv_start_ns", "server_dispatch_ns", "server_recv_end_ns", "server_handler_start_ns",
              *SERVER_TIMESTAMPS[2:], "server_call_end_ns"]
    out = log.select(chain(client).alias("client"), chain(server).alias("server"),
                     chain(list(CLIENT_TIMESTAMPS)).alias("_c"), chain(list(SERVER_TIMESTAMPS)).alias("_s"))
    row = out.row(0, named=True)
    return {"client": int(max(row["client"], row["_c"])), "server": int(max(row["server"], row["_s"]))}


def write_table(frame: pl.DataFrame, path: Path, fmt: str) -> Path:
    """Write ``frame`` as ``path`` with the suffix of ``fmt`` (parquet, csv, jsonl); returns the path.

    CSV cannot hold list columns: ``keys`` is written as the keys joined by ``;``.

    Raises:
        ValueError: an unknown format.
    """
    path = Path(path)
    if fmt == "parquet":
        out = path.with_suffix(".parquet")
        frame.write_parquet(out)
    elif fmt == "csv":
        out = path.with_suffix(".csv")
        flat = frame.with_columns(
            pl.col(c).cast(pl.List(pl.String)).list.join(";") for c, t in frame.schema.items() if isinstance(t, pl.List)
        ).with_columns(pl.selectors.enum().cast(pl.String))
        flat.write_csv(out)
    elif fmt == "jsonl":
        out = path.with_suffix(".jsonl")
        frame.with_columns(pl.selectors.enum().cast(pl.String)).write_ndjson(out)
    else:
        raise ValueError(f"log format {fmt!r}: expected one of {LOG_FORMATS}")
    return out
