"""Key streams: the parameter keys a training job reads and writes, in time order.

Every source becomes one :class:`KeyStream`. Its ``events`` table has one row per key event:

==========  =========================  ==================================================
column      dtype                      meaning
==========  =========================  ==================================================
key         Int64                      dense key id ``0..N-1``, in order of first appearance
op          Enum(pull, push, access)   pull = a read of the row, push = an update (gradient)
                                       of it, access = a raw occurrence (a token or feature
                                       id: the row is looked up and then updated)
iteration   Int64 (nullable)           training iteration (step); null for raw streams
worker_id   Int64 (nullable)           worker that issued the event; null when unknown
count       Int64                      multiplicity (>= 1): how many updates the row stands for
rpc_id      Int64 (nullable)           the RPC that carried the key (RPC logs only); rpc ids
                                       may restart per worker, so (worker_id, rpc_id) names it
==========  =========================  ==================================================

and its ``keys`` table maps ``key`` to the original ``label`` (the word, the hashed feature id,
or ``table_id:key``) and ``table_id``.

Sources (:func:`load_stream` picks one from the file, or ``kind`` says which):

* ``text`` — the word tokens of a text file. Tokenisation: the text is lower-cased
  (``str.lower`` / Polars ``to_lowercase``) and every maximal run of the ASCII letters ``a``-``z``
  is one token; everything else (digits, apostrophes, punctuation, white space, non-ASCII
  letters) separates tokens. So ``"Don't, Citizen!"`` gives ``don``, ``t``, ``citizen``.
* ``column`` — one categorical column of a CSV or Parquet table (e.g. ``C1``..``C26`` of the
  Criteo sample): every non-empty value, in row order, is one event; empty cells are skipped
  and counted.
* ``rpc_log`` — an RPC log (Parquet or JSON lines, read by the RPC dissection's readers) with
  the ``keys`` list column of :data:`ddlscope.rpc.schema.RPC_SCHEMA`: every key of every
  ``pull_*``/``push_*`` RPC is one event, in order of ``client_issue_ns``; ``table_id`` (when
  present) and ``key`` together name a parameter row.
* ``update_table`` — a per-key update-count table (columns ``iteration``, ``key``, ``updates``,
  optional ``table_id``; the table ``ddlscope ps-train`` writes): every row is one push event of
  multiplicity ``updates``, in iteration order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from ddlscope.rpc.readers import RawRpcLog, RpcLog, read_raw_rpc_log
from ddlscope.rpc.schema import OPS, REQUIRED_COLUMNS
from ddlscope.tables import (
    EXTRA_FIELDS,
    TableFile,
    check_utf8,
    detect_format,
    read_table_file,
    read_text_bytes,
    table_columns,
)
from ddlscope.tables import csv_header as _csv_header

EVENT_OPS: tuple[str, ...] = ("pull", "push", "access")
"""Event operations: a read, an update, or a raw occurrence (read and update)."""
EventOpEnum = pl.Enum(list(EVENT_OPS))

SOURCE_KINDS: tuple[str, ...] = ("auto", "text", "column", "rpc_log", "update_table")

EVENT_SCHEMA: dict[str, pl.DataType] = {
    "key": pl.Int64,
    "op": EventOpEnum,
    "iteration": pl.Int64,
    "worker_id": pl.Int64,
    "count": pl.Int64,
    "rpc_id": pl.Int64,
}
"""Columns and dtypes of :attr:`KeyStream.events`."""

UPDATE_TABLE_COLUMNS: tuple[str, ...] = ("iteration", "key", "updates")
"""Required columns of a per-key update-count table (``table_id`` is optional)."""


@dataclass(frozen=True)
class KeyStream:
    """A stream of key events in time order (see the module docstring for the columns).

    Attributes:
        events: one row per key event, columns :data:`EVENT_SCHEMA`.
        keys: ``key`` (Int64 dense id), ``label`` (String, the original key or its name from a
            vocabulary), ``table_id`` (Int64, null when the source has no tables), ``raw_key``
            (Int64, the integer key of RPC logs and update tables; null for text and columns);
            one row per distinct key.
        source: the file (or a description) the stream came from.
        kind: ``text``, ``column``, ``rpc_log``, ``update_table`` or ``synthetic``.
        skipped: rows or values left out, by reason -> count.
        notes: what the reader assumed (tokenisation, ordering).
        used_rows: input rows (table rows, RPC log rows, cells; tokens for text) that gave events:
            with :attr:`skipped`, every input row is accounted for (``rows = used_rows +
            sum(skipped.values())``).
    """

    events: pl.DataFrame
    keys: pl.DataFrame
    source: str
    kind: str
    skipped: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    used_rows: int = 0

    @property
    def num_events(self) -> int:
        """Event rows (not weighted by ``count``)."""
        return self.events.height

    @property
    def num_keys(self) -> int:
        """Distinct keys."""
        return self.keys.height

    @property
    def has_iterations(self) -> bool:
        """Whether every event carries an iteration."""
        return self.events.height > 0 and self.events["iteration"].null_count() == 0


def skipped_text(skipped: dict[str, int]) -> str:
    """The rows or values a reader left out, for a message: ``"none"`` or ``"empty value: 3, ..."``
    (reasons with a count of 0 are not listed)."""
    listed = [f"{reason}: {n:,}" for reason, n in skipped.items() if n]
    return ", ".join(listed) if listed else "none"


def _finish(raw: pl.DataFrame, id_cols: list[str], label: pl.Expr, source: str, kind: str,
            skipped: dict[str, int], notes: tuple[str, ...], used_rows: int | None = None) -> KeyStream:
    """Dense key ids by first appearance; ``raw`` has ``id_cols`` plus event columns; ``used_rows``
    the input rows behind them (default one per event). Reasons with no row left out are dropped
    from ``skipped``."""
    skipped = {reason: n for reason, n in skipped.items() if n}
    if raw.height == 0:
        raise ValueError(f"{source}: no key events found (skipped: {skipped_text(skipped)})")
    used = raw.height if used_rows is None else used_rows
    uniq = (
        raw.select(id_cols).with_row_index("_pos")
        .group_by(id_cols).agg(pl.col("_pos").min())
        .sort("_pos").with_row_index("key").drop("_pos")
        .with_columns(pl.col("key").cast(pl.Int64))
    )
    events = raw.join(uniq, on=id_cols, how="left", maintain_order="left", nulls_equal=True)
    if events["key"].null_count():  # cannot happen with nulls_equal; guard the invariant the simulation needs
        raise ValueError(f"{source}: internal error: {events['key'].null_count()} events without a key id")
    for name, dtype in EVENT_SCHEMA.items():
        if name not in events.columns:
            events = events.with_columns(pl.lit(None, dtype=dtype).alias(name))
    events = events.select([pl.col(n).cast(t) for n, t in EVENT_SCHEMA.items()])
    table = pl.col("table_id").cast(pl.Int64) if "table_id" in id_cols else pl.lit(None, dtype=pl.Int64)
    raw = pl.col("raw_key").cast(pl.Int64, strict=False) if "raw_key" in id_cols else pl.lit(None, dtype=pl.Int64)
    keys = uniq.select("key", label.cast(pl.String).alias("label"), table.alias("table_id"), raw.alias("raw_key"))
    return KeyStream(events, keys, source, kind, {k: v for k, v in skipped.items() if v}, notes, used)


def stream_from_keys(keys: np.ndarray, source: str = "array") -> KeyStream:
    """A raw stream (``access`` events) from integer keys in order, shape ``(M,)``; key ids are
    re-assigned by first appearance and the original integers become the labels.

    Raises:
        ValueError: not a 1-D integer array, or empty.
    """
    arr = np.asarray(keys)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{source}: expected a non-empty 1-D integer array of keys, got {arr.dtype} {arr.shape}")
    raw = pl.DataFrame({"raw_key": arr.astype(np.int64)}).with_columns(
        pl.lit("access").alias("op"), pl.lit(1).alias("count"))
    return _finish(raw, ["raw_key"], pl.col("raw_key"), source, "synthetic", {}, ())


def read_text_tokens(path: str | Path) -> KeyStream:
    """The word tokens of a UTF-8 text file, one ``access`` event per token, in text order.

    Tokenisation (module docstring): lower-case, then maximal runs of ``a``-``z``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not UTF-8 text, or has no tokens.
    """
    path = Path(path)
    data, problems = check_utf8(read_text_bytes(path))
    if problems:
        p = problems[0]
        raise ValueError(f"{path}:{p.line}: not UTF-8 text: {p.describe()}")
    text = data.decode("utf-8")
    lines = pl.Series("line", text.splitlines(), dtype=pl.String)
    tokens = lines.str.to_lowercase().str.extract_all(r"[a-z]+").explode().drop_nulls()
    raw = pl.DataFrame({"token": tokens}).with_columns(pl.lit("access").alias("op"), pl.lit(1).alias("count"))
    return _finish(raw, ["token"], pl.col("token"), str(path), "text", {},
                   ("tokens: lower-cased text split into maximal runs of a-z",))


def _table_format(path: Path) -> str:
    """The reading layer's format of a table here (:func:`ddlscope.tables.detect_format` among
    CSV, TSV, Parquet and JSON lines, ``.json`` included); any other suffix is CSV."""
    return detect_format(path, among=("csv", "tsv", "parquet", "jsonl")) or "csv"


def read_table_file_of(path: str | Path, columns: list[str] | None = None) -> TableFile:
    """A table file as the reading layer reads it (:func:`ddlscope.tables.read_table_file`):
    Parquet (``.parquet``, only ``columns``, lazily), JSON lines (``.jsonl``/``.ndjson``/``.json``)
    or CSV (anything else; ``.tsv`` tab-separated; all columns as strings, short lines padded with
    nulls), optionally only ``columns``; its rejected lines counted by reason.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a missing column (the message lists the columns), an unreadable or damaged
            file, or a CSV line with more fields than the header (the message gives its line).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    fmt = _table_format(path)
    if columns is not None:
        header = _columns_of(path)
        if any(c not in header for c in columns):
            raise ValueError(f"{path}: no column {columns} (columns: {', '.join(header)})")
    if fmt == "parquet":
        tf = read_table_file(path, fmt, columns=columns)
    elif fmt == "jsonl":
        tf = read_table_file(path, fmt)
    else:
        tf = read_table_file(path, fmt, select=columns, short_lines="pad")
        extra = tf.rejected.filter(pl.col("reason") == EXTRA_FIELDS)
        if extra.height:
            line, detail = extra["line"][0], extra["detail"][0]
            expected, _, got = detail.removeprefix("expected ").partition(" fields, got ")
            raise ValueError(f"{path}:{line}: {got} fields, the header (line 1) has {expected}: not a CSV table "
                             "with one record per line")
    if columns is not None and fmt == "jsonl":
        tf = TableFile(tf.file, tf.format, tf.frame.select(*columns, "_line"), tf.rejected, tf.data_rows,
                       tf.blank_lines, tf.header, tf.notes)
    return tf


def read_table(path: str | Path, columns: list[str] | None = None) -> pl.DataFrame:
    """The rows of :func:`read_table_file_of` without the line numbers (``_line``); lines the
    reader rejected are left out (:func:`_rejected_skipped` counts them).

    Raises:
        FileNotFoundError, ValueError: as :func:`read_table_file_of`.
    """
    return read_table_file_of(path, columns).frame.drop("_line")


def _rejected_skipped(tf: TableFile) -> dict[str, int]:
    """The lines the reading layer rejected, by reason -> count (``rejected line (<reason>)``)."""
    return {f"rejected line ({r})": n for r, n in tf.rejected_counts().items()}


def _columns_of(path: Path) -> list[str]:
    """Column names of a Parquet, JSON-lines or CSV table.

    Raises:
        ValueError: the file cannot be read as that kind of table.
    """
    return table_columns(path, _table_format(path))


def read_categorical_column(path: str | Path, column: str) -> KeyStream:
    """One categorical column of a CSV (any extension but ``.parquet``/``.jsonl``) or Parquet
    table: each non-empty value, in row order, is one ``access`` event.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the column is missing (the message lists the columns), or has no values.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    header = _columns_of(path)
    if column not in header:
        raise ValueError(f"{path}: no column {column!r} (columns: {', '.join(header)})")
    tf = read_table_file_of(path, [column])
    values = tf.frame[column].cast(pl.String)
    empty = values.is_null() | (values.str.strip_chars() == "")
    raw = pl.DataFrame({"value": values.filter(~empty)}).with_columns(
        pl.lit("access").alias("op"), pl.lit(1).alias("count"))
    return _finish(raw, ["value"], pl.col("value"), f"{path}:{column}", "column",
                   {"empty value": int(empty.sum()), **_rejected_skipped(tf)},
                   (f"column {column!r}: one event per non-empty cell",))


def rpc_log_key_stream(log: pl.DataFrame, source: str, skipped: dict[str, int] | None = None) -> KeyStream:
    """The key stream of an RPC log table in memory (:data:`~ddlscope.rpc.schema.RPC_SCHEMA`
    columns as read, before the dissection's checks; see :func:`read_rpc_log_keys`).

    Args:
        log: the table: ``op`` (String or Enum), ``keys`` (list of integers), ``iteration``,
            optional ``rpc_id``, ``worker_id``, ``table_id``, ``client_issue_ns``; ``log_file`` and
            ``log_line`` (as :class:`~ddlscope.rpc.readers.RawRpcLog` adds them) name bad rows.
        source: how errors and the stream name the input (the file).
        skipped: rows already left out by the reader, by reason -> count (added to the stream's).

    Raises:
        ValueError: a required column (``op``, ``keys``, ``iteration``) is missing, an ``op``
            value is not one of :data:`~ddlscope.rpc.schema.OPS` (the file and line are named),
            ``keys`` is not a list of integers, or ``iteration``, ``worker_id``, ``rpc_id`` or
            ``table_id`` holds a value that is not a whole number within Int64 (file and line named).
    """
    columns = [c for c in log.columns if c not in ("log_file", "log_line")]
    missing = [c for c in ("op", "keys", "iteration") if c not in log.columns]
    if missing:
        dropped = f"; skipped {', '.join(f'{r}: {n:,}' for r, n in skipped.items())}" if skipped else ""
        raise ValueError(f"{source}: an RPC log needs columns {missing} for key analysis "
                         f"(columns: {', '.join(columns)}{dropped})")
    if not isinstance(log.schema["keys"], pl.List) or not log.schema["keys"].inner.is_integer():
        csv_input = source.lower().endswith((".csv", ".tsv"))
        hint = ("; CSV cannot hold lists: write the log as Parquet or JSON lines" if csv_input else
                "; some line's 'keys' is not a list of integers, so the column was read as text")  \
            if log.schema["keys"] == pl.String else ""
        raise ValueError(f"{source}: column 'keys' must be a list of integers, got {log.schema['keys']}{hint}")
    for name in ("iteration", "worker_id", "rpc_id", "table_id"):
        if name in log.columns:
            log = log.with_columns(_integer_column(log, name, source))
    op = log["op"].cast(pl.String)
    bad = ~op.is_in(list(OPS)) | op.is_null()
    if bad.any():
        row = int(bad.arg_max())
        where = (f"{log['log_file'][row]}:{log['log_line'][row]}" if "log_line" in log.columns
                 else f"{source}: row {row}")
        raise ValueError(f"{where}: op {op[row]!r} is not one of {', '.join(OPS)}")
    log = log.with_row_index("_row").with_columns(
        pl.when(op.str.starts_with("pull")).then(pl.lit("pull")).otherwise(pl.lit("push")).alias("_op"))
    if "client_issue_ns" in log.columns:
        log = log.sort("client_issue_ns", "_row", maintain_order=True)
    no_keys = log["keys"].is_null() | (log["keys"].list.len() == 0)
    if "rpc_id" not in log.columns:
        log = log.with_columns(pl.col("_row").cast(pl.Int64).alias("rpc_id"))
    if "table_id" not in log.columns:
        log = log.with_columns(pl.lit(None, dtype=pl.Int64).alias("table_id"))
    worker = pl.col("worker_id") if "worker_id" in log.columns else pl.lit(None, dtype=pl.Int64)
    raw = (
        log.filter(~no_keys)
        .select(pl.col("keys").alias("raw_key"), pl.col("table_id").cast(pl.Int64), pl.col("_op").alias("op"),
                pl.col("iteration"), worker.alias("worker_id"), pl.col("rpc_id"))
        .explode("raw_key")
        .with_columns(pl.lit(1).alias("count"))
    )
    label = pl.when(pl.col("table_id").is_null()).then(pl.col("raw_key").cast(pl.String)).otherwise(
        pl.format("{}:{}", pl.col("table_id"), pl.col("raw_key")))
    return _finish(raw, ["table_id", "raw_key"], label, source, "rpc_log",
                   {**(skipped or {}), "RPC without keys (null or empty 'keys', e.g. dense ops)": int(no_keys.sum())},
                   ("one event per key of each RPC, ordered by client_issue_ns",), log.height - int(no_keys.sum()))


def _integer_column(log: pl.DataFrame, name: str, source: str) -> pl.Series:
    """Column ``name`` of an RPC log as Int64.

    Raises:
        ValueError: a value that is not a whole number within Int64 (NaN, inf, 1.5, 1e300, text),
            naming ``file:line`` (or the row) and the value.
    """
    col = log[name]
    if col.dtype == pl.Int64:
        return col
    cast = col.cast(pl.Int64, strict=False)
    if col.dtype.is_float():
        as_float = cast.cast(pl.Float64)
        bad = (cast.is_null() & col.is_not_null()) | (as_float != col).fill_null(False)
    else:
        bad = cast.is_null() & col.is_not_null()
    if bad.any():
        row = int(bad.arg_max())
        where = (f"{log['log_file'][row]}:{log['log_line'][row]}" if "log_line" in log.columns
                 else f"{source}: row {row}")
        raise ValueError(f"{where}: {name} {col[row]!r} is not a whole number (expected an integer id)")
    return cast


def _reader_skipped(raw: RawRpcLog) -> dict[str, int]:
    """The lines the RPC log readers rejected, by reason -> count."""
    counts = raw.rejected["reason"].value_counts(sort=True)
    return {f"rejected line ({r})": int(n) for r, n in counts.iter_rows()}


def read_rpc_log_keys(path: str | Path) -> KeyStream:
    """The keys of an RPC log (Parquet, JSON lines, OTLP JSON or CSV — any other suffix is read as
    CSV — by the RPC dissection's readers, :func:`~ddlscope.rpc.readers.read_raw_rpc_log`;
    :data:`~ddlscope.rpc.schema.RPC_SCHEMA`).

    Every key of every RPC is one event: ``pull_*`` -> ``pull``, ``push_*`` -> ``push``. Events
    are ordered by ``client_issue_ns`` when present (file order otherwise), keys within an RPC in
    list order. Rows whose ``keys`` is null or empty (e.g. dense ops) and lines the reader cannot
    parse are skipped and counted. The RPC of an event is (``worker_id``, ``rpc_id``);
    without an ``rpc_id`` column, the row number.

    Raises:
        FileNotFoundError: no such file.
        ValueError: an unknown file type, a required column (``op``, ``keys``, ``iteration``)
            missing, an ``op`` value not one of :data:`~ddlscope.rpc.schema.OPS` (the file and
            line are named), or ``keys`` not a list of integers.
    """
    return read_rpc_log_with_keys(path, check=False).stream


@dataclass(frozen=True)
class RpcLogKeys:
    """An RPC log read once for both of its uses here.

    Attributes:
        stream: its key stream (:func:`read_rpc_log_keys`).
        log: its rows as the RPC dissection checks them (:class:`~ddlscope.rpc.readers.RpcLog`,
            e.g. for :func:`ddlscope.rpc.decompose` stage times); None when not checked or when
            the log lacks what the dissection needs.
        log_error: why ``log`` is None after a check (the checker's message), else None.
    """

    stream: KeyStream
    log: RpcLog | None = None
    log_error: str | None = None


def read_rpc_log_with_keys(path: str | Path, check: bool = True) -> RpcLogKeys:
    """Read an RPC log once: its key stream, and (``check``) its checked RPC table.

    Raises:
        FileNotFoundError, ValueError: as :func:`read_rpc_log_keys`. A log the dissection's checks
        refuse (e.g. missing timestamp columns) is not an error: :attr:`RpcLogKeys.log_error` says why.
    """
    path = Path(path)
    known = path.suffix.lower() in (".parquet", ".pq", ".jsonl", ".ndjson", ".json", ".csv", ".tsv")
    raw = read_raw_rpc_log(path, input_format="auto" if known else "csv")  # other suffixes: CSV, as read_table
    table = raw.raw if raw.raw is not None else pl.DataFrame()
    stream = rpc_log_key_stream(table, str(path), _reader_skipped(raw))
    if not check:
        return RpcLogKeys(stream)
    try:
        return RpcLogKeys(stream, raw.check())
    except ValueError as exc:
        return RpcLogKeys(stream, None, str(exc))


def read_update_table(path: str | Path) -> KeyStream:
    """A per-key update-count table (``iteration``, ``key``, ``updates``, optional ``table_id``).

    Every row with ``updates > 0`` is one ``push`` event of multiplicity ``updates``, ordered by
    iteration (file order within an iteration). Rows with ``updates == 0``, a null ``updates``
    or a null key are skipped and counted (a null ``updates`` used to be dropped uncounted).

    Raises:
        ValueError: a required column is missing, or ``updates`` is negative or not an integer
            (the row is named).
    """
    path = Path(path)
    tf = read_table_file_of(path)
    table = tf.frame.drop("_line")
    missing = [c for c in UPDATE_TABLE_COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"{path}: an update-count table needs columns {list(UPDATE_TABLE_COLUMNS)}; "
                         f"missing {missing} (columns: {', '.join(table.columns)})")
    try:
        updates = table["updates"].cast(pl.Int64, strict=True)
        iteration = table["iteration"].cast(pl.Int64, strict=True)
    except pl.exceptions.InvalidOperationError as exc:
        raise ValueError(f"{path}: 'iteration' and 'updates' must be integers: {exc}") from exc
    if (updates < 0).any():
        row = int((updates < 0).arg_max())
        raise ValueError(f"{path}: row {row}: updates must be >= 0, got {updates[row]}")
    if "table_id" not in table.columns:
        table = table.with_columns(pl.lit(None, dtype=pl.Int64).alias("table_id"))
    table = table.with_columns(updates.alias("updates"), iteration.alias("iteration"))
    null_key = table["key"].is_null()
    no_updates = table["updates"].is_null() & ~null_key
    zero = (table["updates"] == 0).fill_null(False) & ~null_key
    raw = (
        table.filter(~null_key & ~zero & ~no_updates).with_row_index("_row")
        .sort("iteration", "_row", maintain_order=True)
        .select(pl.col("key").alias("raw_key"), pl.col("table_id").cast(pl.Int64), pl.lit("push").alias("op"),
                "iteration", pl.col("updates").alias("count"))
    )
    label = pl.when(pl.col("table_id").is_null()).then(pl.col("raw_key").cast(pl.String)).otherwise(
        pl.format("{}:{}", pl.col("table_id"), pl.col("raw_key")))
    return _finish(raw, ["table_id", "raw_key"], label, str(path), "update_table",
                   {"null key": int(null_key.sum()), "zero updates": int(zero.sum()),
                    "null updates": int(no_updates.sum()), **_rejected_skipped(tf)},
                   ("one push event of multiplicity 'updates' per row, ordered by iteration",))


VOCABULARY_LABEL_COLUMNS: tuple[str, ...] = ("label", "feature", "token", "word", "name")
"""Columns a vocabulary may name its keys with (the first present is used)."""


def with_vocabulary(stream: KeyStream, path: str | Path) -> KeyStream:
    """``stream`` with its integer keys named from a vocabulary table (e.g. the
    ``vocabulary.parquet`` of ``ddlscope ps-train``): columns ``key``, optional ``table_id``, and
    one of :data:`VOCABULARY_LABEL_COLUMNS`. Keys the vocabulary lacks keep their label; how many
    is added to the notes.

    Raises:
        ValueError: the stream has no integer keys (text, columns), or the table lacks ``key`` or a
            label column.
    """
    path = Path(path)
    if stream.keys["raw_key"].null_count() == stream.keys.height:
        raise ValueError(f"{path}: a vocabulary names integer keys; {stream.source} ({stream.kind}) has none")
    vocab = read_table(path)
    label_col = next((c for c in VOCABULARY_LABEL_COLUMNS if c in vocab.columns), None)
    if "key" not in vocab.columns or label_col is None:
        raise ValueError(f"{path}: a vocabulary needs 'key' and one of {', '.join(VOCABULARY_LABEL_COLUMNS)} "
                         f"(columns: {', '.join(vocab.columns)})")
    on = ["table_id", "raw_key"] if "table_id" in vocab.columns else ["raw_key"]
    vocab = vocab.select(
        *([pl.col("table_id").cast(pl.Int64)] if "table_id" in vocab.columns else []),
        pl.col("key").cast(pl.Int64).alias("raw_key"), pl.col(label_col).cast(pl.String).alias("_name"),
    ).unique(subset=on, keep="first")
    keys = stream.keys.join(vocab, on=on, how="left", maintain_order="left", nulls_equal=True)
    missing = int(keys["_name"].null_count())
    keys = keys.with_columns(pl.coalesce("_name", "label").alias("label")).drop("_name")
    note = f"labels from {path}" + (f" ({missing:,} keys not in it keep their number)" if missing else "")
    return KeyStream(stream.events, keys, stream.source, stream.kind, stream.skipped, (*stream.notes, note),
                     stream.used_rows)


RPC_LOG_MIN_SCHEMA_COLUMNS = 3
"""A table with at least this many required RPC-log columns (or ``keys`` and ``op``) is an RPC log."""


def csv_header(path: str | Path) -> list[str]:
    """The column names on the first line of a CSV (``.tsv``: tab-separated) file, RFC 4180
    quoting, trailing carriage returns dropped; ``[]`` for an empty file
    (:func:`ddlscope.tables.csv_header`).

    Raises:
        FileNotFoundError: no such file.
    """
    return _csv_header(path)


def table_kind(columns: list[str] | set[str]) -> str | None:
    """``rpc_log`` for a header with ``keys`` and ``op`` or at least
    :data:`RPC_LOG_MIN_SCHEMA_COLUMNS` required RPC-log columns
    (:data:`~ddlscope.rpc.schema.REQUIRED_COLUMNS`); ``update_table`` for one with
    :data:`UPDATE_TABLE_COLUMNS`; None otherwise."""
    cols = set(columns)
    if {"keys", "op"} <= cols or len(cols & set(REQUIRED_COLUMNS)) >= RPC_LOG_MIN_SCHEMA_COLUMNS:
        return "rpc_log"
    if set(UPDATE_TABLE_COLUMNS) <= cols:
        return "update_table"
    return None


def detect_kind(path: str | Path, column: str | None = None) -> str:
    """The source kind of ``path``: ``column`` when a column is named; for Parquet, JSON lines
    and CSV/TSV, :func:`table_kind` of the columns (header): ``rpc_log`` or ``update_table``; a
    CSV/TSV that is neither, and anything else, is read as ``text`` (:func:`table_warning` says
    when that looks wrong).

    Raises:
        ValueError: a Parquet/JSON-lines table that is neither an RPC log nor an update table,
            without ``column``.
    """
    path = Path(path)
    if column is not None:
        return "column"
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        return table_kind(csv_header(path)) or "text"
    if suffix in (".parquet", ".jsonl", ".ndjson"):
        cols = set(_columns_of(path))
        if (kind := table_kind(cols)) is not None:
            return kind
        raise ValueError(f"{path}: a table with neither 'keys'+'op' (RPC log) nor "
                         f"{'+'.join(UPDATE_TABLE_COLUMNS)} (update-count table); name a key column "
                         f"with --column (columns: {', '.join(sorted(cols))})")
    return "text"


def table_warning(path: str | Path) -> str | None:
    """A warning when a ``.csv``/``.tsv`` file with a header of two or more fields is read as
    text (its column names and cells would be counted as words); None otherwise."""
    path = Path(path)
    if path.suffix.lower() not in (".csv", ".tsv"):
        return None
    header = csv_header(path)
    if len(header) < 2:
        return None
    shown = ", ".join(header[:6]) + (", ..." if len(header) > 6 else "")
    return (f"{path} looks like a table (header: {shown}) but is read as text, its words counted as keys; "
            "use --kind (rpc_log, update_table) or --column NAME")


def resolve_kind(path: str | Path, kind: str = "auto", column: str | None = None) -> str:
    """The source kind ``path`` is read as: ``kind`` itself, or :func:`detect_kind` for ``auto``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: unknown ``kind``, or :func:`detect_kind`'s errors.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if kind not in SOURCE_KINDS:
        raise ValueError(f"kind: expected one of {', '.join(SOURCE_KINDS)}, got {kind!r}")
    return detect_kind(path, column) if kind == "auto" else kind


def load_stream(path: str | Path, kind: str = "auto", column: str | None = None) -> KeyStream:
    """Read ``path`` as a key stream of ``kind`` (one of :data:`SOURCE_KINDS`; ``auto`` uses
    :func:`detect_kind`).

    Raises:
        FileNotFoundError: no such file.
        ValueError: unknown ``kind``, ``column`` missing for ``kind='column'``, or any reader error.
    """
    path = Path(path)
    kind = resolve_kind(path, kind, column)
    if kind == "text":
        return read_text_tokens(path)
    if kind == "column":
        if column is None:
            raise ValueError(f"{path}: kind 'column' needs a column name (--column)")
        return read_categorical_column(path, column)
    if kind == "rpc_log":
        return read_rpc_log_keys(path)
    return read_update_table(path)


def select_events(stream: KeyStream, events: str = "updates") -> pl.DataFrame:
    """The events the frequency model counts: ``updates`` (push and access), ``accesses`` (pull
    and access) or ``all``.

    Raises:
        ValueError: unknown ``events``, or no event of that kind in the stream.
    """
    ops = {"updates": ["push", "access"], "accesses": ["pull", "access"], "all": list(EVENT_OPS)}
    if events not in ops:
        raise ValueError(f"events: expected one of {', '.join(ops)}, got {events!r}")
    out = stream.events.filter(pl.col("op").is_in(ops[events]))
    if out.height == 0:
        present = stream.events["op"].unique().cast(pl.String).to_list()
        raise ValueError(f"{stream.source}: no {events} events (ops present: {', '.join(sorted(present))})")
    return out


DEFAULT_REPLAY_WORKERS = 8
"""Workers of :func:`emulate_training` by default (a small data-parallel job)."""
DEFAULT_REPLAY_BATCH_EVENTS = 1024
"""Events per worker mini-batch of :func:`emulate_training` by default."""


def emulate_training(stream: KeyStream, workers: int = DEFAULT_REPLAY_WORKERS,
                     batch_events: int = DEFAULT_REPLAY_BATCH_EVENTS) -> KeyStream:
    """A raw stream (``access`` events) replayed as data-parallel sparse training.

    Iteration ``i`` takes the next ``workers * batch_events`` events; worker ``w`` gets the
    ``w``-th block of ``batch_events`` of them (its mini-batch). Each worker de-duplicates its
    batch's keys, as sparse PS training does before a look-up, and for each distinct key issues
    one ``pull`` (read the row) and, after the backward pass, one ``push`` (its gradient). Within
    an iteration all pulls come before all pushes, each worker's keys in first-appearance order.
    The last iteration may be partial. Streams that already have ``pull``/``push`` events and
    iterations are returned unchanged.

    Raises:
        ValueError: ``workers`` or ``batch_events`` < 1, or a stream with pushes/pulls but
            without iterations.
    """
    if workers < 1 or batch_events < 1:
        raise ValueError(f"workers and batch_events must be >= 1, got {workers} and {batch_events}")
    ops = set(stream.events["op"].cast(pl.String).unique().to_list())
    if "access" not in ops:
        if not stream.has_iterations:
            raise ValueError(f"{stream.source}: pull/push events need an iteration for the offload simulation")
        return stream
    ev = stream.events.with_row_index("_pos").with_columns(
        (pl.col("_pos") // (workers * batch_events)).cast(pl.Int64).alias("iteration"),
        ((pl.col("_pos") % (workers * batch_events)) // batch_events).cast(pl.Int64).alias("worker_id"),
    )
    first = (
        ev.group_by("iteration", "worker_id", "key").agg(pl.col("_pos").min())
        .sort("_pos").with_columns(pl.lit(1).alias("count"))
    )
    pulls = first.with_columns(pl.lit(0).alias("_phase"), pl.lit("pull").alias("op"))
    pushes = first.with_columns(pl.lit(1).alias("_phase"), pl.lit("push").alias("op"))
    events = (
        pl.concat([pulls, pushes]).sort("iteration", "_phase", "_pos")
        .with_columns(pl.lit(None, dtype=pl.Int64).alias("rpc_id"))
        .select([pl.col(n).cast(t) for n, t in EVENT_SCHEMA.items()])
    )
    return KeyStream(events, stream.keys, stream.source, stream.kind, stream.skipped,
                     (*stream.notes, replay_note(stream.num_events, workers, batch_events)), stream.used_rows)


def replay_note(num_events: int, workers: int, batch_events: int) -> str:
    """The note :func:`emulate_training` adds for ``num_events`` raw events replayed by ``workers``
    workers of ``batch_events`` events per mini-batch (``ceil(M / (workers * batch_events))``
    iterations)."""
    n_iter = math.ceil(num_events / (workers * batch_events))
    return (f"replayed as training: {workers} workers x {batch_events} events per mini-batch = "
            f"{n_iter} iterations; per worker and iteration one pull and one push per distinct key")


def replay_hint(stream: KeyStream, workers: int, batch_events: int, target_iterations: int = 10) -> str | None:
    """Why a raw stream replayed by :func:`emulate_training` gives fewer than 2 iterations (the
    offload simulation needs a warm-up and an evaluated one), with ``--workers``/``--batch-events``
    that give about ``target_iterations``; None when the replay gives 2 or more, or the stream
    already has iterations.

    The suggestion keeps ``workers`` and takes ``batch_events = floor(M / (workers * T))`` for
    ``M`` events and ``T = min(target_iterations, M)``; when that is below 1, one event per
    mini-batch and ``floor(M / T)`` workers (at least 1).
    """
    if (stream.events["op"] != "access").all():
        return None
    return replay_hint_events(stream.num_events, workers, batch_events, target_iterations)


def replay_hint_events(m: int, workers: int, batch_events: int, target_iterations: int = 10) -> str | None:
    """:func:`replay_hint` for a raw stream of ``m`` events (the streamed offload simulation knows
    only the count): the hint, or None when the replay gives 2 or more iterations."""
    iterations = math.ceil(m / (workers * batch_events))
    if iterations >= 2:
        return None
    if m < 2:
        return f"the stream has {m} event(s); at least 2 are needed"
    t = min(target_iterations, m)
    w, b = workers, m // (workers * t)
    if b < 1:
        w, b = max(1, m // t), 1
    return (f"{m:,} events at {workers} worker(s) x {batch_events} events per mini-batch make {iterations} "
            f"iteration; lower --workers or --batch-events, e.g. --workers {w} --batch-events {b} gives "
            f"{math.ceil(m / (w * b))} iterations")
