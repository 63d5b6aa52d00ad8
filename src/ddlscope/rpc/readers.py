"""Read RPC logs (CSV, Parquet, JSON lines, OpenTelemetry OTLP JSON) into one checked RPC table.

:func:`read_rpc_log` is the one entry point: it reads every file into a *raw* table (the file's own
columns plus ``log_file``/``log_line``), concatenates them, renames columns through a
:class:`~ddlscope.rpc.validate.ColumnMapping`, types them to
:data:`~ddlscope.rpc.schema.RPC_SCHEMA` and moves every row that fails a check to
:attr:`RpcLog.rejected` with its reason and ``file:line``.

Formats (by file suffix; ``.json`` is sniffed):

=================  ==========================================================================
``.csv``, ``.tsv``  a header line, then one RPC per line (``log_line`` = line in the file)
``.parquet``       one RPC per row (``log_line`` = 1-based row number)
``.jsonl``         one JSON object per line (``.ndjson`` too); blank lines are skipped
``.json``          OTLP JSON (``resourceSpans``, see :mod:`ddlscope.rpc.otlp`) if it contains
                   ``resourceSpans``, else JSON lines
=================  ==========================================================================
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ddlscope.rpc.schema import RPC_SCHEMA
from ddlscope.rpc.validate import (
    REJECTED_SCHEMA,
    ColumnMapping,
    apply_column_mapping,
    empty_rejected,
    normalize,
    rejected_counts,
)

INPUT_FORMATS: tuple[str, ...] = ("auto", "csv", "parquet", "jsonl", "otlp")
"""Values of ``input_format``: ``auto`` picks by suffix (see the module docstring)."""


@dataclass
class RpcLog:
    """A parsed RPC log.

    Attributes:
        frame: the rows that passed every check, one per RPC, with the schema's columns and dtypes
            (:data:`~ddlscope.rpc.schema.RPC_SCHEMA`), any extra columns of the input, and
            ``log_file`` (String) / ``log_line`` (Int64, 1-based; row number for Parquet).
        rejected: one row per rejected input row: ``log_file``, ``log_line``, ``reason``, ``detail``
            (:data:`~ddlscope.rpc.validate.REJECTED_SCHEMA`).
        files: the files read, as given.
        notes: what the reader inferred or encoded (e.g. OTLP fallbacks), for the report.
    """

    frame: pl.DataFrame
    rejected: pl.DataFrame = field(default_factory=empty_rejected)
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def rows_read(self) -> int:
        """Input rows (RPCs) seen: kept plus rejected."""
        return self.frame.height + self.rejected.height

    def rejected_counts(self) -> pl.DataFrame:
        """Rejected rows per reason (see :func:`~ddlscope.rpc.validate.rejected_counts`)."""
        return rejected_counts(self.rejected)


def empty_rpc_frame() -> pl.DataFrame:
    """An RPC table without rows: the required schema columns and ``log_file``/``log_line``."""
    return pl.DataFrame(schema={**{name: dtype for name, (dtype, req, _) in RPC_SCHEMA.items() if req},
                                "log_file": pl.String, "log_line": pl.Int64})


def detect_format(path: Path) -> str:
    """``csv``, ``parquet``, ``jsonl`` or ``otlp`` from the suffix (``.json`` sniffed for ``resourceSpans``).

    Raises:
        ValueError: an unknown suffix.
    """
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        return "csv"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".json":
        with path.open("rb") as fh:
            head = fh.read(1 << 16)
        return "otlp" if b"resourceSpans" in head or b"resource_spans" in head else "jsonl"
    raise ValueError(f"{path}: unknown log format {suffix!r}; expected .csv, .tsv, .parquet, .jsonl, .ndjson or "
                     ".json (OTLP), or give the format explicitly (--input-format)")


def _source_columns(frame: pl.DataFrame, path: str, first_line: int) -> pl.DataFrame:
    return frame.with_row_index("log_line", offset=first_line).with_columns(
        pl.col("log_line").cast(pl.Int64), pl.lit(path).alias("log_file"))


def _schema_sources(mapping: ColumnMapping) -> set[str]:
    """Source names of the schema columns (to read them as text and check every value)."""
    inverse = {new: old for old, new in mapping.columns.items()}
    return {inverse.get(name, name) for name in RPC_SCHEMA}


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message (Polars adds hints on further lines)."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def csv_lines(data: bytes) -> pl.Series:
    """The lines of CSV text (String; a final newline ends the last line rather than starting an
    empty one; trailing carriage returns are dropped: CRLF, and the CR CR LF of a CRLF file
    converted to CRLF again)."""
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return pl.Series("line", lines, dtype=pl.String).str.strip_chars_end("\r")


def csv_field_counts(lines: pl.Series, sep: str = ",") -> pl.Series:
    """Fields per line of :func:`csv_lines` (UInt32, the header first).

    Separators inside double-quoted fields do not count (RFC 4180 quoting, ``""`` an escaped
    quote); records are assumed to be one per line (no quoted newlines).
    """
    return lines.str.replace_all(r'"(?:[^"]|"")*"', "").str.count_matches(sep, literal=True) + 1


def first_extra_fields_line(path: Path, sep: str = ",") -> tuple[int, int, int] | None:
    """``(line, fields, header_fields)`` of the first line of a CSV file with more fields than
    its header (1-based line numbers), or None when every line fits."""
    counts = csv_field_counts(csv_lines(path.read_bytes()), sep)
    extra = (counts > counts[0]).arg_true() if counts.len() else counts
    if extra.len() == 0:
        return None
    i = int(extra[0])
    return i + 1, int(counts[i]), int(counts[0])


def _read_csv_without_extra_fields(path: Path, sep: str, text_cols: dict[str, pl.DataType],
                                   ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The lines of a CSV whose field count does not exceed the header's, read like
    :func:`read_csv_raw` with ``log_line``/``log_file``; and the other lines as rejected rows
    (``extra_fields``)."""
    lines = csv_lines(path.read_bytes())
    counts = csv_field_counts(lines, sep)
    expected = int(counts[0])
    numbers = pl.Series("log_line", range(1, counts.len() + 1), dtype=pl.Int64)
    extra = counts > expected
    body = (lines.filter(~extra).str.join("\n").item() + "\n").encode()
    try:
        frame = pl.read_csv(io.BytesIO(body), separator=sep, schema_overrides=text_cols, infer_schema_length=10_000)
    except pl.exceptions.PolarsError:
        try:
            frame = pl.read_csv(io.BytesIO(body), separator=sep, infer_schema=False)
        except pl.exceptions.PolarsError as exc:
            raise ValueError(f"{path}: cannot parse as CSV: {_first_line(exc)}") from exc
    good_numbers = numbers.filter(~extra)[1:]  # line 1 is the header
    bad_numbers = numbers.filter(extra)
    if frame.height != good_numbers.len():  # quoted newlines: rows are not lines, no line numbers
        first = int(bad_numbers[0])
        raise ValueError(f"{path}:{first}: {int(counts[first - 1])} fields, the header has {expected}; "
                         "fix the line (line numbers need one record per line)")
    frame = frame.with_columns(good_numbers, pl.lit(str(path)).alias("log_file"))
    rejected = pl.DataFrame({
        "log_line": bad_numbers, "detail": counts.filter(extra).cast(pl.String) + f" fields, the header has {expected}",
    }).select(pl.lit(str(path)).alias("log_file"), "log_line", pl.lit("extra_fields").alias("reason"), "detail")
    return frame, rejected


def read_csv_raw(path: Path, mapping: ColumnMapping) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A CSV/TSV log as a raw table: schema columns as text (checked later), others inferred;
    and the rejected lines.

    ``log_line`` is the line in the file (the header is line 1), assuming one record per line.
    Lines may end in LF, CRLF or CR CR LF (trailing carriage returns are dropped from the header
    and the fields).
    A line with more fields than the header is rejected (``extra_fields``, with its line) and the
    others are read as text; a line with fewer fields has nulls in the missing ones.

    Raises:
        ValueError: the file cannot be parsed as CSV.
    """
    sep = "\t" if path.suffix.lower() == ".tsv" else ","
    try:
        header = pl.read_csv(path, separator=sep, n_rows=0).columns
    except pl.exceptions.PolarsError as exc:
        raise ValueError(f"{path}: cannot read the CSV header: {_first_line(exc)}") from exc
    if header and header[-1].endswith("\r"):
        # lines end in more than one CR (CR CR LF): Polars keeps all but one in the last field
        header = [*header[:-1], header[-1].rstrip("\r")]
        return _read_csv_without_extra_fields(path, sep, {c: pl.String for c in header
                                                          if c in _schema_sources(mapping)})
    text_cols = {c: pl.String for c in header if c in _schema_sources(mapping)}
    try:
        frame = pl.read_csv(path, separator=sep, schema_overrides=text_cols, infer_schema_length=10_000)
    except pl.exceptions.PolarsError as exc:
        if "more fields" in str(exc):
            return _read_csv_without_extra_fields(path, sep, text_cols)
        try:  # an extra column changes type after the inferred rows: read everything as text
            frame = pl.read_csv(path, separator=sep, infer_schema=False)
        except pl.exceptions.PolarsError as exc2:
            if "more fields" in str(exc2):
                return _read_csv_without_extra_fields(path, sep, text_cols)
            raise ValueError(f"{path}: cannot parse as CSV: {_first_line(exc2)}") from exc2
    return _source_columns(frame, str(path), 2), empty_rejected()


def read_parquet_table(path: Path, columns: list[str] | None = None) -> pl.DataFrame:
    """A Parquet file (optionally only ``columns``).

    Raises:
        ValueError: the file is not Parquet or is damaged (e.g. truncated), or a column is missing.
    """
    try:
        return pl.read_parquet(path, columns=columns)
    except pl.exceptions.ColumnNotFoundError as exc:
        raise ValueError(f"{path}: no column {columns} (columns: {', '.join(parquet_columns(path))})") from exc
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise ValueError(f"{path}: cannot read as Parquet: {_first_line(exc)}") from exc


def parquet_columns(path: Path) -> list[str]:
    """The column names of a Parquet file.

    Raises:
        ValueError: the file is not Parquet or is damaged.
    """
    try:
        return list(pl.read_parquet_schema(path))
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise ValueError(f"{path}: cannot read as Parquet: {_first_line(exc)}") from exc


def read_parquet_raw(path: Path) -> pl.DataFrame:
    """A Parquet log as a raw table (``log_line`` = 1-based row number).

    Raises:
        ValueError: the file is not Parquet.
    """
    return _source_columns(read_parquet_table(path), str(path), 1)


def read_jsonl_raw(path: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A JSON-lines log as a raw table, and the lines that are not JSON objects (rejected).

    Blank lines are skipped; ``log_line`` is the line in the file.
    """
    data = path.read_bytes()
    if data and not data[:1].isspace() and b"\n\n" not in data and b"\n\r\n" not in data \
            and not data.rstrip(b"\r\n").endswith((b"\n", b" ")):
        # no blank lines: the rows are the lines, read in one pass
        try:  # the schema from the first lines; a later line that does not fit takes the slow path
            frame = pl.read_ndjson(io.BytesIO(data), infer_schema_length=1_000)
            return _source_columns(frame, str(path), 1), empty_rejected()
        except (pl.exceptions.PolarsError, ValueError):
            pass  # a bad line: find it below
    lines = data.splitlines()
    numbers = [i + 1 for i, ln in enumerate(lines) if ln.strip()]
    body = [lines[i - 1] for i in numbers]
    bad: list[tuple[int, str]] = []
    try:
        frame = pl.read_ndjson(io.BytesIO(b"\n".join(body)), infer_schema_length=None) if body else pl.DataFrame()
    except (pl.exceptions.PolarsError, ValueError):
        good_numbers, good_body = [], []
        for n, ln in zip(numbers, body, strict=True):
            try:
                obj = json.loads(ln)
            except json.JSONDecodeError as exc:
                bad.append((n, f"not JSON: {exc.msg} at column {exc.colno}"))
                continue
            if not isinstance(obj, dict):
                bad.append((n, f"expected a JSON object, got {type(obj).__name__}"))
                continue
            good_numbers.append(n)
            good_body.append(ln)
        numbers, body = good_numbers, good_body
        try:
            frame = (pl.read_ndjson(io.BytesIO(b"\n".join(body)), infer_schema_length=None) if body
                     else pl.DataFrame())
        except (pl.exceptions.PolarsError, ValueError):
            # values of one key with clashing types across lines: read every value as text
            frame = pl.DataFrame([{k: None if v is None else (v if isinstance(v, str) else json.dumps(v))
                                   for k, v in json.loads(ln).items()} for ln in body], infer_schema_length=None)
    frame = frame.with_columns(pl.Series("log_line", numbers, dtype=pl.Int64), pl.lit(str(path)).alias("log_file"))
    rejected = pl.DataFrame(
        {"log_file": [str(path)] * len(bad), "log_line": [n for n, _ in bad],
         "reason": ["unparseable_line"] * len(bad), "detail": [d for _, d in bad]},
        schema=REJECTED_SCHEMA,
    )
    return frame, rejected


@dataclass
class RawRpcLog:
    """RPC log files as read, before the schema's checks (the first half of :func:`read_rpc_log`).

    Attributes:
        raw: the files' rows concatenated (columns unified by name): each file's own columns plus
            ``log_file`` (String) and ``log_line`` (Int64, 1-based; row number for Parquet); None
            when no file gave a row.
        rejected: the lines the readers could not parse (``unparseable_line``, ``extra_fields``),
            :data:`~ddlscope.rpc.validate.REJECTED_SCHEMA`.
        files: the files read, as given.
        notes: what the readers inferred (empty files, OTLP fallbacks).
        mapping: the column mapping the files were read with (mapped names checked per file).
    """

    raw: pl.DataFrame | None
    rejected: pl.DataFrame
    files: list[str]
    notes: list[str]
    mapping: ColumnMapping

    @property
    def what(self) -> str:
        """How errors name the input: the file, or ``N log files``."""
        return self.files[0] if len(self.files) == 1 else f"{len(self.files)} log files"

    def check(self) -> RpcLog:
        """Rename, type and check the rows (:func:`~ddlscope.rpc.validate.normalize`) into an
        :class:`RpcLog`; the readers' rejected lines come first in its ``rejected``.

        Raises:
            ValueError: required columns missing after the mapping (the message names them, the
                log's columns and how to map names).
        """
        rejected = [self.rejected]
        if self.raw is None:
            rows, norm_notes = empty_rpc_frame(), []
        else:
            rows, bad_rows, norm_notes = normalize(self.raw, self.mapping, self.what)
            rejected.append(bad_rows)
        return RpcLog(frame=rows, rejected=pl.concat(rejected, how="vertical_relaxed"), files=list(self.files),
                      notes=self.notes + norm_notes)


def read_raw_rpc_log(
    paths: str | Path | Sequence[str | Path],
    *,
    mapping: ColumnMapping | None = None,
    input_format: str = "auto",
) -> RawRpcLog:
    """Read one or more RPC log files into one raw table, without the schema's checks (see
    :func:`read_rpc_log` for the arguments; :meth:`RawRpcLog.check` does the rest).

    Returns:
        A :class:`RawRpcLog`.

    Raises:
        FileNotFoundError: a path does not exist.
        ValueError: no path, the same file given twice (also through another path or a link),
            unknown format, unreadable file, a mapped column missing from a file (the message names
            the file), or a time unit other than ns with OTLP input.
    """
    from ddlscope.rpc.otlp import read_otlp_raw  # the OTLP reader imports this module's helpers

    if isinstance(paths, str | Path):
        paths = [paths]
    if not paths:
        raise ValueError("no log files given")
    if input_format not in INPUT_FORMATS:
        raise ValueError(f"input format: expected one of {', '.join(INPUT_FORMATS)}, got {input_format!r}")
    mapping = mapping or ColumnMapping()
    raws: list[pl.DataFrame] = []
    rejected: list[pl.DataFrame] = []
    notes: list[str] = []
    files = [str(p) for p in paths]
    seen: dict[Path, Path] = {}
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file")
        if not p.is_file():
            raise ValueError(f"{p}: a folder, not a log file")
        first = seen.setdefault(p.resolve(), p)
        if first is not p:  # its rows would all be rejected as duplicate_rpc
            also = "" if str(first) == str(p) else f" (also as {first})"
            raise ValueError(f"{p}: the same log file given twice{also}; give each file once")
    for p in map(Path, paths):
        if p.stat().st_size == 0:
            notes.append(f"{p}: empty file, no rows")
            continue
        fmt = detect_format(p) if input_format == "auto" else input_format
        if fmt == "csv":
            raw, bad = read_csv_raw(p, mapping)
        elif fmt == "parquet":
            raw, bad = read_parquet_raw(p), empty_rejected()
        elif fmt == "jsonl":
            raw, bad = read_jsonl_raw(p)
        else:
            if mapping.time_unit != "ns":
                raise ValueError(f"{p}: OTLP timestamps are always ns; drop --time-unit for OTLP input")
            raw, bad, otlp_notes = read_otlp_raw(p, mapping)
            notes.extend(f"{p}: {n}" for n in otlp_notes)
        rejected.append(bad)
        if raw.height == 0 and (fmt in ("jsonl", "otlp") or bad.height):
            # nothing parsed (every span or line rejected): no columns to check, the rejections say why
            notes.append(f"{p}: no RPC rows read" + (f" ({bad.height:,} rejected)" if bad.height else ""))
            continue
        # mapped names must exist in each file (a clear error naming the file)
        apply_column_mapping(raw.head(0), mapping, str(p))
        raws.append(raw)
    raw_all = (pl.concat(raws, how="diagonal_relaxed") if len(raws) > 1 else raws[0]) if raws else None
    all_rejected = pl.concat(rejected, how="vertical_relaxed") if rejected else empty_rejected()
    return RawRpcLog(raw=raw_all, rejected=all_rejected, files=files, notes=notes, mapping=mapping)


def read_rpc_log(
    paths: str | Path | Sequence[str | Path],
    *,
    mapping: ColumnMapping | None = None,
    input_format: str = "auto",
) -> RpcLog:
    """Read one or more RPC log files into one checked RPC table.

    Args:
        paths: log file(s); all are read into one table (e.g. one file per worker).
        mapping: column names, op names and the time unit of the input (default: the schema's names,
            ns). For OTLP the column mapping applies to span attributes (see :mod:`ddlscope.rpc.otlp`).
        input_format: one of :data:`INPUT_FORMATS`.

    Returns:
        An :class:`RpcLog` (good rows, rejected rows with reasons, notes).

    Raises:
        FileNotFoundError: a path does not exist.
        ValueError: unknown format, unreadable file, mapped/required columns missing (the message
            names the file and columns), or a time unit other than ns with OTLP input.

    An empty file contributes no rows (a note says so); a file whose every line or span was
    rejected contributes its rejected rows only, so that the caller can report why.
    """
    return read_raw_rpc_log(paths, mapping=mapping, input_format=input_format).check()
