"""Read RPC logs (CSV, Parquet, JSON lines, OpenTelemetry OTLP JSON) into one checked RPC table.

:func:`read_rpc_log` is the one entry point: it reads every file into a *raw* table (the file's own
columns plus ``log_file``/``log_line``), concatenates them, renames columns through a
:class:`~ddlscope.rpc.validate.ColumnMapping`, types them to
:data:`~ddlscope.rpc.schema.RPC_SCHEMA` and moves every row that fails a check to
:attr:`RpcLog.rejected` with its reason and ``file:line``.

Files are read by the reading layer (:mod:`ddlscope.tables`: line numbers kept, every rejected
line counted by reason, e.g. ``extra_fields``, ``truncated_last_line``, ``invalid_utf8``,
``unparseable_line``); this module registers the ``otlp`` format there. Formats (by file suffix,
``.gz`` looked through; ``.json`` is sniffed):

=================  ==========================================================================
``.csv``, ``.tsv``  a header line, then one RPC per line (``log_line`` = line in the file)
``.parquet``       one RPC per row (``log_line`` = 1-based row number)
``.jsonl``         one JSON object per line (``.ndjson`` too); blank lines are skipped; a
                   whole-file JSON document (an array, a Chrome trace) is an error saying so
``.json``          OTLP JSON (``resourceSpans``, see :mod:`ddlscope.rpc.otlp`) if it contains
                   ``resourceSpans``, else JSON lines
=================  ==========================================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from ddlscope.tables import (
    EXTRA_FIELDS,
    TableFile,
    TableFormat,
    infer_types,
    read_table_file,
    register_format,
)
from ddlscope.tables import detect_format as detect_table_format

INPUT_FORMATS: tuple[str, ...] = ("auto", "csv", "parquet", "jsonl", "otlp")
"""Values of ``input_format``: ``auto`` picks by suffix (see the module docstring)."""

JSONL_EXPECTED = ("expected JSON lines (one RPC per line, a JSON object) or an OTLP JSON export "
                  "(resourceSpans)")
"""What the JSON-lines reader says it expected when given a whole-file JSON document."""


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


def _sniff_otlp(head: bytes) -> bool:
    return b"resourceSpans" in head or b"resource_spans" in head


def _read_otlp_table(path: Path, *, label: str | None = None, mapping: ColumnMapping | None = None) -> TableFile:
    """The OTLP reader (:func:`~ddlscope.rpc.otlp.read_otlp_raw`) as a registered table format."""
    from ddlscope.rpc.otlp import read_otlp_raw  # OTLP parsing is the rpc helper's module, loaded on use

    raw, bad, notes = read_otlp_raw(path, mapping or ColumnMapping())
    frame = raw.drop("log_file", strict=False).rename({"log_line": "_line"}) if "log_line" in raw.columns \
        else raw.drop("log_file", strict=False)
    rejected = bad.select(file="log_file", line="log_line", reason="reason", detail="detail",
                          text=pl.lit(None, dtype=pl.String))
    return TableFile(file=label or str(path), format="otlp", frame=frame, rejected=rejected,
                     data_rows=frame.height + rejected.height, notes=tuple(notes))


register_format(TableFormat("otlp", (".json",), _read_otlp_table, None, _sniff_otlp,
                            "OpenTelemetry OTLP JSON (resourceSpans): one RPC per client/server span pair"))

_RPC_FORMATS = ("csv", "tsv", "parquet", "jsonl", "otlp")


def detect_format(path: Path) -> str:
    """``csv``, ``parquet``, ``jsonl`` or ``otlp`` from the suffix (``.json`` sniffed for
    ``resourceSpans``; ``.tsv`` is ``csv``; ``.gz`` looked through), by the reading layer's registry.

    Raises:
        ValueError: an unknown suffix.
    """
    fmt = detect_table_format(path, among=_RPC_FORMATS)
    if fmt is None:
        raise ValueError(f"{path}: unknown log format {path.suffix.lower()!r}; expected .csv, .tsv, .parquet, .jsonl, "
                         ".ndjson or .json (OTLP), or give the format explicitly (--input-format)")
    return "csv" if fmt == "tsv" else fmt


def _schema_sources(mapping: ColumnMapping) -> set[str]:
    """Source names of the schema columns (read as text and checked later, every value)."""
    inverse = {new: old for old, new in mapping.columns.items()}
    return {inverse.get(name, name) for name in RPC_SCHEMA}


def read_log_file(path: Path, fmt: str, mapping: ColumnMapping) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """One RPC log file as a raw table (its own columns plus ``log_line`` first and ``log_file``
    last), its rejected lines (:data:`~ddlscope.rpc.validate.REJECTED_SCHEMA`) and the reader's notes.

    CSV/TSV: a line with more fields than the header is rejected (``extra_fields``), one with
    fewer has nulls in the missing fields (the checks then name what is missing), the last line of
    a file cut short is ``truncated_last_line``; schema columns are read as text (checked later),
    others typed as Polars infers them. Parquet: ``log_line`` is the row number. Invalid UTF-8 is
    ``invalid_utf8`` with the byte offset.

    Raises:
        ValueError: an unreadable file (naming it), a JSON document that is not JSON lines or OTLP.
    """
    if fmt == "csv" and path.suffix.lower() == ".tsv":
        fmt = "tsv"
    options: dict[str, Any] = {"csv": {"short_lines": "pad"}, "tsv": {"short_lines": "pad"},
                               "jsonl": {"expected": JSONL_EXPECTED}, "otlp": {"mapping": mapping}}.get(fmt, {})
    tf = read_table_file(path, fmt, **options)
    frame = tf.frame
    if fmt in ("csv", "tsv"):
        sources = _schema_sources(mapping)
        frame = infer_types(frame, [c for c in frame.columns if c not in sources and c != "_line"])
    raw = frame.select(pl.col("_line").alias("log_line"), pl.exclude("_line"), pl.lit(str(path)).alias("log_file"))
    detail = pl.col("detail")
    if fmt in ("csv", "tsv"):  # this module's wording since the first CSV reader
        detail = pl.when(pl.col("reason") == EXTRA_FIELDS).then(
            detail.str.replace(r"^expected (\d+) fields, got (\d+)$", "${2} fields, the header has ${1}")
        ).otherwise(detail)
    rejected = tf.rejected.select(log_file=pl.lit(str(path)), log_line="line", reason="reason",
                                  detail=detail).cast(REJECTED_SCHEMA)
    return raw, rejected, list(tf.notes)


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
        if fmt == "otlp" and mapping.time_unit != "ns":
            raise ValueError(f"{p}: OTLP timestamps are always ns; drop --time-unit for OTLP input")
        raw, bad, file_notes = read_log_file(p, fmt, mapping)
        notes.extend(f"{p}: {n}" for n in file_notes)
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
