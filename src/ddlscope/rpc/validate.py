"""Normalise a raw RPC log table to :data:`~ddlscope.rpc.schema.RPC_SCHEMA` and sort out bad rows.

Every reader (CSV, Parquet, JSON lines, OTLP) produces a *raw* table: the file's own columns plus
``log_file`` and ``log_line`` (where the row came from). :func:`normalize` renames columns through a
:class:`ColumnMapping`, casts them to the schema's types and checks every row; rows that fail are
moved to a *rejected* table with the first failing reason (in the order of :data:`REJECT_REASONS`),
a detail naming the column(s) and value(s), and the row's ``log_file``/``log_line``. Nothing is
dropped silently.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ddlscope.rpc.schema import (
    CLIENT_TIMESTAMPS,
    CONNECTION_EVENTS,
    OPS,
    REQUIRED_COLUMNS,
    RPC_SCHEMA,
    SERVER_TIMESTAMPS,
    ConnectionEventEnum,
    OpEnum,
)
from ddlscope.specs.files import parse_pairs, read_toml_or_json

TIME_UNITS: dict[str, int] = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
"""Nanoseconds per unit of the input timestamps (``--time-unit``)."""

REJECT_REASONS: dict[str, str] = {
    "truncated_last_line": "the file ends without a newline inside its last line (fewer CSV fields than the header, "
    "or a JSON object that does not close): the file was cut short",
    "invalid_utf8": "the line holds bytes that are not UTF-8 (the detail gives the byte offset)",
    "unparseable_line": "the line is not valid JSON (JSON lines / OTLP)",
    "extra_fields": "a CSV line with more fields than the header",
    "unmatched_client_span": "OTLP client span without a server span (same traceId, parentSpanId = its spanId)",
    "unmatched_server_span": "OTLP server span without its client span",
    "duplicate_server_span": "OTLP: a second server span under the same client span (retry/hedge); first kept",
    "duplicate_client_span": "OTLP: a second client span with the same traceId and spanId; the first is kept",
    "malformed_span": "OTLP: a resourceSpans, scopeSpans or spans element that is not a JSON object",
    "bad_value": "a value that cannot be read as the column's type (e.g. text in a number column, or a number "
    "beyond the 64-bit integer range, or an OTLP text with an unpaired UTF-16 surrogate escape such as \\ud800)",
    "missing_field": "a required id, op or size field is empty",
    "missing_timestamp": "a required timestamp is empty",
    "unknown_op": f"op is not one of {', '.join(OPS)} (map other names with an op mapping)",
    "negative_size": "request_bytes, response_bytes or num_keys < 0",
    "implausible_size": "request_bytes or response_bytes above 1 TiB (2^40 bytes), or num_keys above 2^40",
    "zero_timestamps": "every client timestamp, or every server timestamp, is 0 (the fields were never set)",
    "reversed_client_order": "client timestamps out of order: need issue <= send_start <= send_end <= recv_end <= done",
    "reversed_server_order": "server timestamps out of order: need recv_start <= recv_end <= proc_start <= proc_end "
    "<= send_end",
    "reversed_connect_order": "client_connect_end_ns < client_connect_start_ns",
    "negative_network": "negative network stage: the server residence (send_end - recv_start) is longer than the "
    "client's round trip (recv_end - send_end)",
    "duplicate_rpc": "the same (worker_id, rpc_id) as an earlier row; the first is kept",
    "implausible_latency": "latency above 1 min while most RPCs of the log are below it (a clock or logging "
    "error); set aside by the dissection (ddlscope.rpc.dissect.split_implausible), not by the reader",
}
"""Why a row is rejected, in the order the checks apply (a row gets the first that fails)."""

REJECTED_SCHEMA: dict[str, pl.DataType] = {
    "log_file": pl.String, "log_line": pl.Int64, "reason": pl.String, "detail": pl.String,
}
"""Columns of a rejected-rows table: the source file, its line (1-based; the row number for
Parquet), the reason (a key of :data:`REJECT_REASONS`) and a detail naming columns and values."""

ID_COLUMNS: tuple[str, ...] = ("worker_id", "server_id", "connection_id")
"""Id columns that may also be given as text (host names, addresses): they are then encoded as
0-based integer codes in sorted order of the text and the text is kept in ``<column>_label``."""

MAX_SIZE = 1 << 40
"""Largest ``request_bytes``/``response_bytes``/``num_keys`` accepted (1 TiB; 2^40 keys). Protocol
Buffers messages, which gRPC carries, are limited to 2 GiB (``kint32max`` bytes, protobuf's
``io/coded_stream.h``), and a frame of a PS framework's own protocol is far smaller than a TiB; a
larger value is a unit or logging error (and request + response must not overflow int64)."""

_INT64_LIMIT = 9.223372036854775e18
"""The largest float below 2^63: a float beyond it is outside the int64 range (a bad value)."""

SOURCE_COLUMNS: tuple[str, ...] = ("log_file", "log_line")
"""Columns every reader adds: the file (path as given) and the 1-based line (row for Parquet)."""


def empty_rejected() -> pl.DataFrame:
    """An empty rejected-rows table (:data:`REJECTED_SCHEMA`)."""
    return pl.DataFrame(schema=REJECTED_SCHEMA)


@dataclass(frozen=True)
class ColumnMapping:
    """How a log's own names map onto the schema.

    Attributes:
        columns: source column (or OTLP attribute) name -> schema column name.
        ops: source op value -> one of :data:`~ddlscope.rpc.schema.OPS` (e.g. ``Pull -> pull_dense``).
        time_unit: unit of the source's timestamps, a key of :data:`TIME_UNITS` (OTLP is always ns).
        labels: source column -> how errors name its mapping (``--map OLD=NEW``, or the mapping
            file and field); :meth:`label` falls back to ``column mapping OLD=NEW``.
    """

    columns: Mapping[str, str] = field(default_factory=dict)
    ops: Mapping[str, str] = field(default_factory=dict)
    time_unit: str = "ns"
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.time_unit not in TIME_UNITS:
            raise ValueError(f"time unit: expected one of {', '.join(TIME_UNITS)}, got {self.time_unit!r}")
        bad = {k: v for k, v in self.ops.items() if v not in OPS}
        if bad:
            raise ValueError(f"op mapping: targets must be one of {', '.join(OPS)}; got {bad}")
        targets = list(self.columns.values())
        dup = sorted({t for t in targets if targets.count(t) > 1})
        if dup:
            raise ValueError(f"column mapping: several source columns map to {', '.join(dup)}")

    def label(self, source: str) -> str:
        """How errors name the mapping of ``source`` (e.g. ``--map op=server_id``)."""
        return self.labels.get(source, f"column mapping {source}={self.columns[source]}")

    @classmethod
    def from_pairs(
        cls, columns: Iterable[str] = (), ops: Iterable[str] = (), time_unit: str = "ns",
        base: ColumnMapping | None = None,
    ) -> ColumnMapping:
        """A mapping from ``old=new`` strings (``--map``, ``--op-map``) on top of ``base``.

        Raises:
            ValueError: a pair without ``=``, with an empty side, or a name given twice.
        """
        b = base or cls()
        pairs = parse_pairs(columns, what="--map", expected="OLD=NEW")
        return cls(
            columns={**b.columns, **pairs},
            ops={**b.ops, **parse_pairs(ops, what="--op-map", expected="OLD=NEW")},
            time_unit=time_unit if time_unit != "ns" or base is None else b.time_unit,
            labels={**b.labels, **{old: f"--map {old}={new}" for old, new in pairs.items()}},
        )

    @classmethod
    def from_file(cls, path: str | Path) -> ColumnMapping:
        """Read a mapping file (TOML, or JSON when it ends in ``.json``; read with
        :func:`ddlscope.specs.files.read_toml_or_json`)::

            time_unit = "us"            # optional, a key of TIME_UNITS (default ns)
            [columns]                   # source name = schema name
            ts_issue = "client_issue_ns"
            [ops]                       # source op value = schema op
            Pull = "pull_dense"

        A file with only top-level ``name = "schema name"`` string pairs (and optionally ``ops``
        and ``time_unit``) is a column mapping.

        Raises:
            FileNotFoundError: no such file.
            ValueError: the file cannot be read or parsed (the parser's line), a field that is not
                a name -> string table (``<file>: columns.<name>: ...``), an unknown top-level field
                next to ``[columns]``, or a bad ``time_unit`` or op target (the file is named).
        """
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such mapping file")
        if not p.is_file():
            raise ValueError(f"{p}: the mapping file is a folder; expected a TOML or JSON file")
        data = read_toml_or_json(p)
        if not isinstance(data, dict):
            raise ValueError(f"{p}: expected a table of names, got {type(data).__name__}")
        if "columns" in data:
            unknown = [k for k in data if k not in ("columns", "ops", "time_unit")]
            if unknown:
                raise ValueError(f"{p}: unknown field(s) {', '.join(unknown)}; expected columns, ops, time_unit")
        columns = data.get("columns", {k: v for k, v in data.items() if k not in ("ops", "time_unit")})
        ops = data.get("ops", {})
        for what, table in (("columns", columns), ("ops", ops)):
            if not isinstance(table, dict):
                raise ValueError(f"{p}: {what}: expected a table of name = \"name\" pairs, got {table!r}")
            for name, value in table.items():
                if not isinstance(value, str):
                    field_name = f"{what}.{name}" if what in data else name
                    kind = "schema column" if what == "columns" else "schema op"
                    raise ValueError(f"{p}: {field_name}: expected a string (a {kind} name), got {value!r}")
        time_unit = data.get("time_unit", "ns")
        if not isinstance(time_unit, str) or time_unit not in TIME_UNITS:
            raise ValueError(f"{p}: time_unit: expected one of {', '.join(TIME_UNITS)}, got {time_unit!r}")
        section = "columns." if "columns" in data else ""
        try:
            return cls(columns=columns, ops=ops, time_unit=time_unit,
                       labels={old: f"{p}: {section}{old} = {new!r}" for old, new in columns.items()})
        except ValueError as exc:
            raise ValueError(f"{p}: {exc}") from exc


def apply_column_mapping(raw: pl.DataFrame, mapping: ColumnMapping, what: str) -> pl.DataFrame:
    """Rename ``raw``'s columns through ``mapping.columns``.

    Raises:
        ValueError: a mapped source column is absent, or its target already exists in ``raw``.
    """
    have = [c for c in raw.columns if c not in SOURCE_COLUMNS]
    how = ("OLD=NEW renames the log's column OLD to the schema column NEW, e.g. shard=server_id; "
           f"the log has: {', '.join(have)}")
    for old, new in mapping.columns.items():
        if old in raw.columns:
            if new not in RPC_SCHEMA and new not in raw.columns and old in RPC_SCHEMA:
                # the sides look swapped (the schema name first): the log's `old` would be renamed away
                raise ValueError(f"{what}: {mapping.label(old)}: {new} is not a schema column and the log has no "
                                 f"column {new}; {how}")
            continue
        hint = f"; did you mean {new}={old}?" if new in raw.columns and old in RPC_SCHEMA else ""
        raise ValueError(f"{what}: {mapping.label(old)}: the log has no column {old}{hint}; {how}")
    clash = [t for s, t in mapping.columns.items() if t in raw.columns and t not in mapping.columns and t != s]
    if clash:
        raise ValueError(f"{what}: the log already has column(s) {', '.join(clash)}; map them away too or "
                         "drop the mapping")
    return raw.rename(dict(mapping.columns))


def require_columns(raw: pl.DataFrame, what: str) -> None:
    """Check that every required schema column is present.

    Raises:
        ValueError: names the missing columns, the log's columns, and how to map names.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in raw.columns]
    if missing:
        have = ", ".join(c for c in raw.columns if c not in SOURCE_COLUMNS)
        raise ValueError(
            f"{what}: missing required column(s) {', '.join(missing)}; the log has: {have}. "
            "Map other names with --map OLD=NEW or a mapping file (see docs/rpc.md)."
        )


def _as_string(col: str) -> pl.Expr:
    return pl.col(col).cast(pl.String)


def _float_to_int(f: pl.Expr) -> pl.Expr:
    """A Float64 expression as Int64, null where it is not finite or outside the int64 range."""
    return pl.when(f.is_finite() & (f.abs() <= _INT64_LIMIT)).then(f).cast(pl.Int64, strict=False)


def _scaled(as_int: pl.Expr, scale: int) -> pl.Expr:
    """``as_int * scale`` (Int64), null where the product would overflow int64."""
    if scale == 1:
        return as_int
    limit = (1 << 63) // scale - 1
    return pl.when(as_int.abs() <= limit).then(as_int * scale)


def _cast_int(col: str, dtype: pl.DataType) -> pl.Expr:
    """``col`` as Int64; text is parsed, floats must be whole numbers in the int64 range (else
    null = bad value)."""
    if dtype == pl.String:
        as_int = pl.col(col).str.strip_chars().cast(pl.Int64, strict=False)
        as_float = pl.col(col).str.strip_chars().cast(pl.Float64, strict=False)
        whole = pl.when(as_float == as_float.round(0)).then(_float_to_int(as_float))
        return pl.coalesce(as_int, whole)
    if dtype.is_float():
        return pl.when(pl.col(col) == pl.col(col).round(0)).then(_float_to_int(pl.col(col)))
    if dtype.is_integer() or dtype == pl.Boolean:
        return pl.col(col).cast(pl.Int64, strict=False)
    return pl.lit(None, pl.Int64)


def _quick_int(col: str, dtype: pl.DataType, scale: int) -> pl.Expr:
    """A plain integer parse of a text column, times ``scale`` (null where the text is not a bare
    integer or the product overflows int64)."""
    return _scaled(pl.col(col).cast(pl.Int64, strict=False), scale)


def _cast_timestamp(col: str, dtype: pl.DataType, scale: int) -> pl.Expr:
    """``col`` in ns as Int64: integers are multiplied exactly; floats and decimal text rounded.
    Null (a bad value) where the result is outside the int64 range."""
    if dtype.is_integer():
        return _scaled(pl.col(col).cast(pl.Int64, strict=False), scale)
    if dtype == pl.String:
        as_int = _scaled(pl.col(col).str.strip_chars().cast(pl.Int64, strict=False), scale)
        as_float = pl.col(col).str.strip_chars().cast(pl.Float64, strict=False) * scale
        return pl.coalesce(as_int, _float_to_int(as_float.round(0)))
    if dtype.is_float():
        return _float_to_int((pl.col(col) * scale).round(0))
    return pl.lit(None, pl.Int64)


def normalize(raw: pl.DataFrame, mapping: ColumnMapping | None = None, what: str = "log",
              ) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """Rename, type and check a raw log table.

    Args:
        raw: the reader's table: source columns plus ``log_file`` (String) and ``log_line`` (Int64).
        mapping: names and units of the source (default: the schema's names, ns).
        what: how errors name the input (e.g. the file list).

    Returns:
        ``(rows, rejected, notes)``: the rows that pass every check with the schema's dtypes
        (:data:`~ddlscope.rpc.schema.RPC_SCHEMA`; extra columns kept as they are; text ids encoded,
        see :data:`ID_COLUMNS`), the rejected rows (:data:`REJECTED_SCHEMA`), and notes for the
        user (encodings applied).

    Raises:
        ValueError: mapped columns absent, or required columns missing after the mapping.
    """
    mapping = mapping or ColumnMapping()
    frame = apply_column_mapping(raw, mapping, what)
    require_columns(frame, what)
    notes: list[str] = []
    scale = TIME_UNITS[mapping.time_unit]
    schema = frame.schema
    casts: dict[str, pl.Expr] = {}
    for name, (dtype, _, _) in RPC_SCHEMA.items():
        if name not in schema:
            continue
        src = schema[name]
        if name in CLIENT_TIMESTAMPS or name in SERVER_TIMESTAMPS or name in (
                "client_connect_start_ns", "client_connect_end_ns"):
            casts[name] = _cast_timestamp(name, src, scale)
        elif name == "op":
            text = _as_string(name).str.strip_chars()
            if mapping.ops:
                text = text.replace(dict(mapping.ops))
            casts[name] = text.cast(OpEnum, strict=False)
        elif name == "connection_event":
            casts[name] = _as_string(name).str.strip_chars().str.to_lowercase().cast(ConnectionEventEnum, strict=False)
        elif name in ID_COLUMNS and src == pl.String:
            parsed = frame.select(_cast_int(name, src).is_null() & pl.col(name).is_not_null()).to_series()
            if parsed.any():
                labels = pl.col(name).str.strip_chars().replace("", None)
                frame = frame.with_columns(labels.alias(f"{name}_label"))
                casts[name] = (labels.rank("dense") - 1).cast(pl.Int64)
                notes.append(f"{name} given as text: encoded as integer codes in sorted order of the text, "
                             f"the text kept in {name}_label")
            else:
                casts[name] = _cast_int(name, src)
        elif dtype == pl.Int64:
            casts[name] = _cast_int(name, src)
        elif dtype == pl.String:
            casts[name] = _as_string(name)
        elif isinstance(dtype, pl.List) and isinstance(src, pl.List):
            casts[name] = pl.col(name).cast(dtype, strict=False)
    # text columns: a plain integer parse first; the lenient parse (spaces, decimals) only for the
    # columns where it leaves values unread
    quick = {c: _quick_int(c, schema[c], scale if c.endswith("_ns") else 1) for c in casts
             if schema[c] == pl.String and RPC_SCHEMA[c][0] == pl.Int64 and f"{c}_label" not in frame.columns}
    if quick:
        failures = frame.select(
            (pl.col(c).is_not_null() & e.is_null()).sum().alias(c) for c, e in quick.items()).row(0, named=True)
        casts.update({c: e for c, e in quick.items() if not failures[c]})
    frame = frame.with_columns(e.alias(f"__cast_{c}") for c, e in casts.items())
    bad_parts = [
        pl.when(pl.col(c).is_not_null() & pl.col(f"__cast_{c}").is_null()).then(pl.format(f"{c}={{}}", _as_string(c)))
        for c in casts if c != "op"
    ]
    frame = frame.with_columns(
        (pl.concat_str(bad_parts, separator="; ", ignore_nulls=True) if bad_parts else pl.lit(None, pl.String))
        .alias("__bad_value"),
        _as_string("op").alias("__op_text"),
    ).with_columns(pl.col(f"__cast_{c}").alias(c) for c in casts).drop([f"__cast_{c}" for c in casts])
    rows, rejected = check_rows(frame, extra_checks=True)
    rows = rows.drop("__bad_value", "__op_text")
    return rows, rejected, notes


def _first_pair_out_of_order(cols: tuple[str, ...]) -> tuple[pl.Expr, pl.Expr]:
    """(any adjacent pair out of order, detail naming the first such pair with its values)."""
    pairs = list(itertools.pairwise(cols))
    conds = [pl.col(b) < pl.col(a) for a, b in pairs]
    detail = pl.coalesce([
        pl.when(c).then(pl.format(f"{b} < {a} ({{}} < {{}})", pl.col(b), pl.col(a)))
        for c, (a, b) in zip(conds, pairs, strict=True)
    ])
    return pl.any_horizontal(conds), detail


def _null_names(cols: Iterable[str]) -> pl.Expr:
    """The names of the null columns, comma-separated; null (not "") when none is, so that joining
    it with more names adds no stray separator."""
    names = pl.concat_str([pl.when(pl.col(c).is_null()).then(pl.lit(c)) for c in cols],
                          separator=", ", ignore_nulls=True)
    return pl.when(names != "").then(names)


def check_rows(frame: pl.DataFrame, extra_checks: bool = False) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split a schema-typed RPC table into good rows and rejected rows.

    Applies the checks of :data:`REJECT_REASONS` from ``missing_field`` on (``bad_value`` and
    ``unknown_op`` too when ``extra_checks``, which needs the ``__bad_value``/``__op_text`` columns
    :func:`normalize` adds). Works on any frame with the required columns, e.g. one built in memory.

    Args:
        frame: an RPC table (:data:`~ddlscope.rpc.schema.RPC_SCHEMA` dtypes); ``log_file`` and
            ``log_line`` are used when present (else the 1-based row number is the line).

    Returns:
        ``(good, rejected)``: ``good`` keeps ``frame``'s columns; ``rejected`` is :data:`REJECTED_SCHEMA`.

    Raises:
        ValueError: a required column is missing.
    """
    require_columns(frame, "RPC table")
    if "log_line" not in frame.columns:
        frame = frame.with_row_index("log_line", offset=1).with_columns(pl.col("log_line").cast(pl.Int64))
    if "log_file" not in frame.columns:
        frame = frame.with_columns(pl.lit("<memory>").alias("log_file"))
    ts = (*CLIENT_TIMESTAMPS, *SERVER_TIMESTAMPS)
    fields = ("rpc_id", "worker_id", "server_id", "connection_id", "iteration", "op", "request_bytes",
              "response_bytes", "num_keys")
    client_bad, client_detail = _first_pair_out_of_order(CLIENT_TIMESTAMPS)
    server_bad, server_detail = _first_pair_out_of_order(SERVER_TIMESTAMPS)
    has_connect = "client_connect_start_ns" in frame.columns and "client_connect_end_ns" in frame.columns
    connect_bad = (pl.col("client_connect_end_ns") < pl.col("client_connect_start_ns")) if has_connect \
        else pl.lit(False)
    round_trip = pl.col("client_recv_end_ns") - pl.col("client_send_end_ns")
    residence = pl.col("server_send_end_ns") - pl.col("server_recv_start_ns")
    sizes = ("request_bytes", "response_bytes", "num_keys")
    op_missing = pl.col("op").is_null()
    if extra_checks:
        op_missing = pl.col("__op_text").is_null() | (pl.col("__op_text").str.strip_chars() == "")
    checks: list[tuple[str, pl.Expr, pl.Expr]] = []
    if extra_checks:
        checks.append(("bad_value", pl.col("__bad_value").is_not_null() & (pl.col("__bad_value") != ""),
                       pl.col("__bad_value")))
    field_null = pl.any_horizontal([pl.col(c).is_null() for c in fields if c != "op"]) | op_missing
    checks += [
        ("missing_field", field_null, pl.concat_str(
            [_null_names(c for c in fields if c != "op"), pl.when(op_missing).then(pl.lit("op"))],
            separator=", ", ignore_nulls=True)),
        ("missing_timestamp", pl.any_horizontal([pl.col(c).is_null() for c in ts]), _null_names(ts)),
    ]
    if extra_checks:
        checks.append(("unknown_op", pl.col("op").is_null(), pl.format("op={}", pl.col("__op_text"))))
    checks += [
        ("negative_size", pl.any_horizontal([pl.col(c) < 0 for c in sizes]),
         pl.concat_str([pl.when(pl.col(c) < 0).then(pl.format(f"{c}={{}}", pl.col(c))) for c in sizes],
                       separator=", ", ignore_nulls=True)),
        ("implausible_size", pl.any_horizontal([pl.col(c) > MAX_SIZE for c in sizes]),
         pl.concat_str([pl.when(pl.col(c) > MAX_SIZE).then(pl.format(f"{c}={{}} > 2^40", pl.col(c))) for c in sizes],
                       separator=", ", ignore_nulls=True)),
        ("zero_timestamps", pl.all_horizontal([pl.col(c) == 0 for c in CLIENT_TIMESTAMPS])
         | pl.all_horizontal([pl.col(c) == 0 for c in SERVER_TIMESTAMPS]),
         pl.when(pl.all_horizontal([pl.col(c) == 0 for c in ts])).then(pl.lit("every timestamp is 0"))
         .when(pl.all_horizontal([pl.col(c) == 0 for c in CLIENT_TIMESTAMPS])).then(pl.lit("client timestamps all 0"))
         .otherwise(pl.lit("server timestamps all 0"))),
        ("reversed_client_order", client_bad, client_detail),
        ("reversed_server_order", server_bad, server_detail),
        ("reversed_connect_order", connect_bad,
         pl.format("client_connect_end_ns < client_connect_start_ns ({} < {})",
                   pl.col("client_connect_end_ns"), pl.col("client_connect_start_ns")) if has_connect
         else pl.lit(None, pl.String)),
        ("negative_network", round_trip < residence,
         pl.format("server residence {} ns > client round trip {} ns", residence, round_trip)),
    ]
    reason = pl.when(checks[0][1]).then(pl.lit(checks[0][0]))
    detail = pl.when(checks[0][1]).then(checks[0][2])
    for name, cond, det in checks[1:]:
        reason = reason.when(cond).then(pl.lit(name))
        detail = detail.when(cond).then(det)
    frame = frame.with_columns(reason.otherwise(None).alias("__reason"), detail.otherwise(None).alias("__detail"))
    # a null in a condition (e.g. a missing timestamp in an order check) never rejects on its own:
    # the missing_* checks above catch it first
    bad_mask = pl.col("__reason").is_not_null()
    rejected = frame.filter(bad_mask)
    good = frame.filter(~bad_mask)
    # duplicates among the rows that passed every other check (the first occurrence is kept)
    dup = ~pl.struct("worker_id", "rpc_id").is_first_distinct()
    if good.select(dup.any()).item():
        good = good.with_columns(
            pl.when(dup).then(pl.lit("duplicate_rpc")).alias("__reason"),
            pl.when(dup).then(pl.format("worker_id={}, rpc_id={}", pl.col("worker_id"), pl.col("rpc_id")))
            .alias("__detail"),
        )
        rejected = pl.concat([rejected, good.filter(bad_mask)], how="vertical_relaxed")
        good = good.filter(~bad_mask)
    rejected = rejected.select(
        pl.col("log_file").cast(pl.String), pl.col("log_line").cast(pl.Int64),
        pl.col("__reason").alias("reason"), pl.col("__detail").alias("detail"),
    ).sort("log_file", "log_line", maintain_order=True)
    return good.drop("__reason", "__detail"), rejected


def rejected_counts(rejected: pl.DataFrame) -> pl.DataFrame:
    """Rejected rows per reason: ``reason``, ``rows``, ``first_at`` (``file:line`` of the first),
    ``example`` (its detail) and ``meaning`` (from :data:`REJECT_REASONS`), in check order."""
    if rejected.height == 0:
        return pl.DataFrame(schema={"reason": pl.String, "rows": pl.Int64, "first_at": pl.String,
                                    "example": pl.String, "meaning": pl.String})
    order = {r: i for i, r in enumerate(REJECT_REASONS)}
    return (
        rejected.group_by("reason", maintain_order=True)
        .agg(pl.len().cast(pl.Int64).alias("rows"),
             pl.format("{}:{}", pl.col("log_file"), pl.col("log_line")).first().alias("first_at"),
             pl.col("detail").first().alias("example"))
        .with_columns(pl.col("reason").replace_strict(REJECT_REASONS, default=None).alias("meaning"),
                      pl.col("reason").replace_strict(order, default=len(order)).alias("__o"))
        .sort("__o").drop("__o")
    )


__all__ = [
    "CONNECTION_EVENTS", "MAX_SIZE", "REJECTED_SCHEMA", "REJECT_REASONS", "TIME_UNITS", "ColumnMapping", "check_rows",
    "empty_rejected", "normalize", "rejected_counts",
]
