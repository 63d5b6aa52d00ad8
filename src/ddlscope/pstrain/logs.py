"""The run's logs: per-process row buffers, and the join of client and server rows into one RPC log.

Each worker writes *client rows* and each server *server rows* of the RPCs it took part in to its
own append-only part file under ``raw/`` (a worker after every iteration, a server every 0.2 s,
both again when stopped; see :class:`RowBuffer`); the launcher joins them by ``rpc_id`` (the id travels in the
gRPC metadata and in the payload header) into one table in the schema of
:mod:`ddlscope.rpc.schema`, plus three ps-train extras (``server_dispatch_ns``,
``server_handler_start_ns``, ``server_call_end_ns``; docs/pstrain.md, "Timestamps"). An RPC
enters the log only when both sides recorded it and it succeeded; any other is counted by reason,
never dropped silently.
"""

from __future__ import annotations

import itertools
import os
import struct
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import polars as pl
import pyarrow as pa

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


PART_SUFFIX = ".rows"
"""Suffix of a process's part files (``client-0.rows``, ``server-1.rows``, ``iterations-0.rows``,
``updates-1.rows``)."""

_FRAME = struct.Struct("<I")
_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder()


class _PartFile:
    """An append-only file of frames (4-byte little-endian length + MessagePack payload).

    Each flush appends one frame with a single ``write``: once it returns, the data is in the
    kernel's page cache and survives the process being killed (SIGKILL included). A process killed
    *during* a write leaves a short last frame, which readers detect and leave out
    (:func:`truncated_parts`). After :meth:`seal` nothing more is written (the process is exiting).
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._fd: int | None = None
        self._sealed = False
        self.lock = threading.Lock()  # held for the whole of one frame's encoding and write

    def write(self, payload: bytes) -> bool:
        """Append one frame (call with :attr:`lock` held); False once sealed."""
        if self._sealed:
            return False
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        view = memoryview(_FRAME.pack(len(payload)) + payload)
        while view:
            view = view[os.write(self._fd, view):]
        return True

    def seal(self) -> None:
        """Refuse later writes and close the file (call with :attr:`lock` held)."""
        self._sealed = True
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _frames(path: Path) -> tuple[list[memoryview], bool]:
    """The complete frames' payloads of a part file, and whether it ends with a truncated frame."""
    data = memoryview(Path(path).read_bytes())
    out, pos = [], 0
    while pos < len(data):
        if pos + _FRAME.size > len(data):
            return out, True
        (n,) = _FRAME.unpack_from(data, pos)
        if pos + _FRAME.size + n > len(data):
            return out, True
        out.append(data[pos + _FRAME.size:pos + _FRAME.size + n])
        pos += _FRAME.size + n
    return out, False


def _int64_lists(values: tuple, name: str) -> pl.Series:
    """A ``List(Int64)`` series from int64 buffers (None = null), built with one concatenation."""
    lengths = np.fromiter((0 if v is None else len(v) for v in values), dtype=np.int64, count=len(values)) // 8
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.frombuffer(b"".join(v for v in values if v is not None), dtype=np.int64)
    mask = pa.array(np.fromiter((v is None for v in values), dtype=bool, count=len(values)))
    arr = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.int64()), mask=mask)
    return pl.Series(name, arr, dtype=pl.List(pl.Int64))


class RowBuffer:
    """Thread-safe row collection of one process, appended to its part file ``{prefix}.rows`` at
    each :meth:`flush` (one frame per flush; :class:`_PartFile`).

    Appending never waits for a write in progress (rows are swapped out under a short lock).
    ``List(Int64)`` values (the keys of a sparse RPC) are stored as int64 buffers.

    Args:
        schema: column name -> dtype of the rows.
        prefix: the part file is ``{prefix}.rows``.
    """

    def __init__(self, schema: Mapping[str, pl.DataType], prefix: Path):
        self.schema = dict(schema)
        self._list_cols = frozenset(i for i, t in enumerate(self.schema.values()) if isinstance(t, pl.List))
        self.file = _PartFile(Path(prefix).with_name(Path(prefix).name + PART_SUFFIX))
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.written = 0

    @property
    def path(self) -> Path:
        """The part file."""
        return self.file.path

    def append(self, row: dict[str, Any]) -> None:
        """Add one row (a dict with the schema's keys; missing keys are null)."""
        with self._lock:
            self._rows.append(row)

    def __len__(self) -> int:
        return len(self._rows)

    def _encode(self, row: dict[str, Any]) -> list[Any]:
        out = [row.get(c) for c in self.schema]
        for i in self._list_cols:
            if out[i] is not None:
                out[i] = np.ascontiguousarray(out[i], dtype=np.int64).tobytes()
        return out

    def flush(self, final: bool = False) -> Path | None:
        """Append the buffered rows to the part file; returns its path (None if nothing was written).

        ``final``: this is the process's last flush (on its way out): later flushes write nothing,
        so no write can be cut short by the exit.
        """
        with self.file.lock:
            with self._lock:
                rows, self._rows = self._rows, []
            written = bool(rows) and self.file.write(_ENCODER.encode([self._encode(r) for r in rows]))
            if written:
                self.written += len(rows)
            if final:
                self.file.seal()
        return self.file.path if written else None


class UpdateCounter:
    """Per-key update counts of one server: the keys of every sparse push, appended to the part
    file ``{prefix}.rows`` at each :meth:`flush` and counted when the run's logs are joined
    (:func:`read_key_updates`, one ``group_by``). No per-key Python work while serving.
    """

    def __init__(self, prefix: Path):
        self.file = _PartFile(Path(prefix).with_name(Path(prefix).name + PART_SUFFIX))
        self._chunks: list[tuple[int, int, np.ndarray]] = []
        self._lock = threading.Lock()

    def add(self, iteration: int, table_id: int, keys: np.ndarray) -> None:
        """Count one update for each of ``keys`` (int64, unique within the push)."""
        with self._lock:
            self._chunks.append((iteration, table_id, keys))

    def flush(self, final: bool = False) -> Path | None:
        """Append the keys added since the last flush; returns the path (None if nothing was written)."""
        with self.file.lock:
            with self._lock:
                chunks, self._chunks = self._chunks, []
            payload = [[it, t, np.ascontiguousarray(k, dtype=np.int64).tobytes()] for it, t, k in chunks]
            written = bool(chunks) and self.file.write(_ENCODER.encode(payload))
            if final:
                self.file.seal()
        return self.file.path if written else None


def read_part(path: Path, schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    """The rows of one :class:`RowBuffer` part file as a DataFrame of ``schema`` (a truncated last
    frame is left out; see :func:`truncated_parts`)."""
    frames, _ = _frames(path)
    rows = [row for f in frames for row in _DECODER.decode(f)]
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    series = [
        _int64_lists(values, name) if isinstance(dtype, pl.List)
        else pl.Series(name, list(values), dtype=dtype, strict=False)
        for (name, dtype), values in zip(schema.items(), columns, strict=True)
    ]
    return pl.DataFrame(series)


def truncated_parts(raw_dir: Path) -> list[str]:
    """Names of the part files under ``raw_dir`` whose last frame is incomplete (the process was
    killed while writing it; that frame's rows are not in the joined log)."""
    return sorted(p.name for p in Path(raw_dir).glob(f"*{PART_SUFFIX}") if _frames(p)[1])


def _read_parts(raw_dir: Path, pattern: str, schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    files = sorted(Path(raw_dir).glob(pattern))
    if not files:
        return pl.DataFrame(schema=dict(schema))
    return pl.concat([read_part(f, schema) for f in files], how="vertical")


def read_client_rows(raw_dir: Path) -> pl.DataFrame:
    """All workers' raw rows (:data:`CLIENT_RAW`)."""
    return _read_parts(raw_dir, f"client-*{PART_SUFFIX}", CLIENT_RAW)


def read_server_rows(raw_dir: Path) -> pl.DataFrame:
    """All servers' raw rows (:data:`SERVER_RAW`)."""
    return _read_parts(raw_dir, f"server-*{PART_SUFFIX}", SERVER_RAW)


def read_iterations(raw_dir: Path) -> pl.DataFrame:
    """All workers' iteration rows (:data:`ITERATIONS`), sorted by worker and iteration."""
    return _read_parts(raw_dir, f"iterations-*{PART_SUFFIX}", ITERATIONS).sort("worker_id", "iteration")


def read_key_updates(raw_dir: Path) -> pl.DataFrame:
    """Per-key update counts of all servers (:data:`UPDATES_RAW`), sorted by iteration, table, key."""
    chunks = [c for p in sorted(Path(raw_dir).glob(f"updates-*{PART_SUFFIX}")) for f in _frames(p)[0]
              for c in _DECODER.decode(f)]
    if not chunks:
        return pl.DataFrame(schema=UPDATES_RAW)
    iterations, tables, keys = zip(*chunks, strict=True)
    lengths = np.fromiter((len(k) // 8 for k in keys), dtype=np.int64, count=len(keys))
    frame = pl.DataFrame({
        "iteration": np.repeat(np.array(iterations, dtype=np.int64), lengths),
        "table_id": np.repeat(np.array(tables, dtype=np.int64), lengths),
        "key": np.frombuffer(b"".join(keys), dtype=np.int64),
    })
    return (frame.group_by("iteration", "table_id", "key").agg(pl.len().cast(pl.Int64).alias("updates"))
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
