"""Cluster-trace tables read through the reading layer (:mod:`ddlscope.tables`), every line accounted for.

:func:`read_delimited` reads a delimited text table with :func:`ddlscope.tables.read_csv` (one
row per physical line, fields counted quote-aware, no Python loop per line) and
:func:`read_parquet_table` a Parquet one with :func:`ddlscope.tables.read_parquet`. A line is then
either the header, blank (empty; counted, not data), *malformed* (wrong field count, the file cut
short in its last line, invalid UTF-8, a number that does not parse, ``inf``/``-inf``, a count
that is not a whole number or exceeds :data:`MAX_COUNT`, plus any rule the caller adds with
:meth:`TableRead.reject`), or a good data row. Malformed lines go to :attr:`TableRead.malformed`
with file, line, problem and the text of the line; nothing is dropped silently.

Compressed input: ``.gz`` files are decompressed; a ``.tar.gz`` / ``.tgz`` archive (as the PAI
2020 tables are distributed) must hold one ``.csv`` member (or one named after the archive),
which is extracted to a temporary file first (:func:`ddlscope.tables.local_source`).

Limitation: a quoted field that spans several physical lines is not supported; such a file
gives a clear error naming it and the line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import polars as pl

from ddlscope.tables import (
    EXTRA_FIELDS,
    INVALID_UTF8,
    MISSING_FIELDS,
    TRUNCATED_LAST_LINE,
    CsvOptions,
    TableFile,
    parquet_columns,
    read_csv,
    read_parquet,
)
from ddlscope.tables import TEXT_CHARS as TEXT_CHARS
from ddlscope.tables import local_source as local_source

ColumnKind = Literal["str", "float", "int"]
"""How a column is parsed: ``str`` kept as text (surrounding spaces stripped, empty -> null);
``float`` a number; ``int`` a number that must be whole (``"4.0"`` is accepted: the PAI tables
write counts as floats)."""

#: Columns of every malformed-rows table.
MALFORMED_SCHEMA: dict[str, pl.DataType] = {
    "table": pl.String,
    "file": pl.String,
    "line": pl.Int64,
    "problem": pl.String,
    "detail": pl.String,
    "text": pl.String,
}

# problems (the categories malformed rows are counted by)
WRONG_FIELD_COUNT = "wrong field count"
UNPARSABLE_NUMBER = "unparsable number"
NOT_WHOLE = "count not a whole number"
NOT_FINITE = "not a finite number"
COUNT_TOO_LARGE = "count too large"
MAX_COUNT = 2**53
"""Largest count accepted (the largest integer a float64 holds exactly; also fits Int64)."""
MISSING_HEADER_COLUMN = "missing column"
TRUNCATED_LINE = "truncated last line"
"""The file ends without a newline in its last line, which has fewer fields than the header (or
an unclosed quote): the file was cut short."""
NOT_UTF8 = "invalid UTF-8"
"""A line holding bytes that are not UTF-8 (the detail gives the byte offset)."""
_PROBLEMS = {EXTRA_FIELDS: WRONG_FIELD_COUNT, MISSING_FIELDS: WRONG_FIELD_COUNT,
             TRUNCATED_LAST_LINE: TRUNCATED_LINE, INVALID_UTF8: NOT_UTF8}



def empty_malformed() -> pl.DataFrame:
    """An empty table with the :data:`MALFORMED_SCHEMA` columns."""
    return pl.DataFrame(schema=MALFORMED_SCHEMA)


@dataclass(frozen=True)
class TableRead:
    """The outcome of reading one table file.

    Attributes:
        table: logical table name (``job``, ``task``, ... or ``jobs`` for a generic table).
        file: the path read, as given.
        frame: good data rows: the requested columns parsed to their kinds, plus ``_line``
            (Int64, 1-based physical line of the file; row number for Parquet) and, until
            :meth:`drop_raw`, ``_raw`` (the line's text) whose first :data:`TEXT_CHARS`
            characters :meth:`reject` reports.
        malformed: rejected rows, columns :data:`MALFORMED_SCHEMA`.
        data_rows: physical lines that are neither the header nor blank (= rows of :attr:`frame` +
            malformed + duplicate + superseded rows).
        blank_lines: empty lines, counted, not data.
        duplicate_rows: exact duplicates (the same line text as an earlier line of the file)
            removed from :attr:`frame` by :meth:`drop_exact_duplicates`; counted, not used.
        superseded_rows: rows a reader replaced by a later record of the same key (e.g. a PAI
            instance restarted under the same ``worker_name``); set by the reader, which says
            its rule in a note.
        header: the header line's column names when the file has one, else ``None``.
        separator: the field separator (used to rebuild a rejected row's text).
    """

    table: str
    file: str
    frame: pl.DataFrame
    malformed: pl.DataFrame
    data_rows: int
    blank_lines: int
    header: list[str] | None = None
    separator: str = ","
    columns: tuple[str, ...] = field(default_factory=tuple)
    duplicate_rows: int = 0
    superseded_rows: int = 0

    def drop_exact_duplicates(self) -> TableRead:
        """Remove every row of :attr:`frame` whose line text equals an earlier row's, counting them
        in :attr:`duplicate_rows`.

        The text compared is ``_raw`` (the physical line) while it is kept, else the columns read
        joined by :attr:`separator` (Parquet, or after :meth:`drop_raw`). The first occurrence
        stays; hash-based (``is_first_distinct``), no sort.
        """
        if self.frame.height == 0:
            return self
        key = pl.col("_raw") if "_raw" in self.frame.columns else pl.struct(list(self.columns))
        kept = self.frame.filter(key.is_first_distinct())
        removed = self.frame.height - kept.height
        if removed == 0:
            return self
        return replace(self, frame=kept, duplicate_rows=self.duplicate_rows + removed)

    def reject(self, condition: pl.Expr, problem: str, detail: pl.Expr | str) -> TableRead:
        """Move the rows of :attr:`frame` where ``condition`` is true to :attr:`malformed`.

        ``problem`` is the category they are counted by; ``detail`` (an expression over the
        row's columns, or a fixed string) says what was found and what was expected. Rows
        where ``condition`` is null are kept.
        """
        flagged = self.frame.with_columns(_bad=condition.fill_null(False))
        bad = flagged.filter(pl.col("_bad"))
        if bad.height == 0:
            return self
        detail_expr = pl.lit(detail) if isinstance(detail, str) else detail
        if "_raw" in bad.columns:
            text = pl.col("_raw").str.slice(0, TEXT_CHARS)
        else:  # rebuilt from the columns read (Parquet, or after drop_raw)
            text = pl.concat_str(
                [pl.col(c).cast(pl.String).fill_null("") for c in self.columns], separator=self.separator
            ).str.slice(0, TEXT_CHARS)
        rows = bad.select(
            table=pl.lit(self.table),
            file=pl.lit(self.file),
            line=pl.col("_line").cast(pl.Int64),
            problem=pl.lit(problem),
            detail=detail_expr.cast(pl.String),
            text=text,
        )
        return replace(
            self,
            frame=flagged.filter(~pl.col("_bad")).drop("_bad"),
            malformed=pl.concat([self.malformed, rows]),
        )

    def drop_raw(self) -> TableRead:
        """Drop the raw line text kept for :meth:`reject` (call when validation is done)."""
        return replace(self, frame=self.frame.drop("_raw", strict=False))


def _clean_text(name: str) -> pl.Expr:
    """A text column with surrounding spaces removed and empty values as null."""
    text = pl.col(name).str.strip_chars()
    return pl.when(text.str.len_bytes() == 0).then(None).otherwise(text).alias(name)


def parse_columns(
    read: TableRead, types: Mapping[str, ColumnKind], labels: Mapping[str, str] | None = None, *, strip: bool = True
) -> TableRead:
    """Parse the string columns of ``read.frame`` to their kinds, rejecting the rows that do not
    parse (problems ``unparsable number``, ``not a finite number`` (``inf``, ``-inf``),
    ``count not a whole number``, ``count too large`` (above :data:`MAX_COUNT`); their text still raw).

    ``labels`` names a column in the detail (default ``column <name>``). Each number column is
    cast once; only a column with failures is cast again with surrounding spaces removed (so clean
    files pay one cast per column). ``nan`` parses as missing. Text columns are stripped of
    surrounding spaces and empty ones become null; ``strip`` False: the caller knows no field has
    surrounding spaces (text columns are kept as they are, empty ones already null).
    """
    numeric = [c for c, k in types.items() if k != "str"]
    frame = read.frame.with_columns(
        pl.col(c).cast(pl.Float64, strict=False).fill_nan(None).alias(f"__n_{c}") for c in numeric
    )

    def failed(c: str) -> pl.Expr:
        return pl.col(f"__n_{c}").is_null() & (pl.col(c).str.strip_chars().str.len_bytes() > 0)

    if numeric:
        # only columns with a value that did not cast are retried with spaces stripped
        has_fail = frame.select(
            (pl.col(f"__n_{c}").is_null() & (pl.col(c).str.len_bytes() > 0)).any().alias(c) for c in numeric
        ).row(0, named=True)
        retry = [c for c in numeric if has_fail[c]]
        if retry:
            frame = frame.with_columns(
                pl.coalesce(f"__n_{c}", pl.col(c).str.strip_chars().cast(pl.Float64, strict=False).fill_nan(None))
                .alias(f"__n_{c}") for c in retry
            )
        conds, details = [], []
        for c in numeric:
            label = (labels or {}).get(c, f"column {c}")
            if has_fail[c]:
                conds.append(failed(c))
                details.append(pl.format(f"{UNPARSABLE_NUMBER}|{label}: expected a number, got '{{}}'", pl.col(c)))
            num = pl.col(f"__n_{c}")
            conds.append(num.is_infinite())
            details.append(pl.format(f"{NOT_FINITE}|{label}: expected a finite number, got '{{}}'", pl.col(c)))
            if types[c] == "int":
                conds.append(num.is_finite() & (num != num.round(0)))
                details.append(pl.format(f"{NOT_WHOLE}|{label}: expected a whole number, got '{{}}'", pl.col(c)))
                conds.append(num.is_finite() & (num.abs() > MAX_COUNT))
                details.append(pl.format(f"{COUNT_TOO_LARGE}|{label}: expected a count up to {MAX_COUNT}, got '{{}}'",
                                         pl.col(c)))
        if conds:
            cond = pl.any_horizontal(conds)
            detail = pl.coalesce([pl.when(c).then(d) for c, d in zip(conds, details, strict=True)])
            read = replace(read, frame=frame).reject(cond, "parse", detail)
            frame = read.frame
    m = read.malformed
    is_parse = pl.col("problem") == "parse"
    parts = pl.col("detail").str.splitn("|", 2)
    m = m.with_columns(
        problem=pl.when(is_parse).then(parts.struct.field("field_0")).otherwise(pl.col("problem")),
        detail=pl.when(is_parse).then(parts.struct.field("field_1")).otherwise(pl.col("detail")),
    )
    converted = []
    for c, kind in types.items():
        if kind == "str":
            if strip:
                converted.append(_clean_text(c))
        elif kind == "float":
            converted.append(pl.col(f"__n_{c}").alias(c))
        else:
            converted.append(pl.col(f"__n_{c}").cast(pl.Int64, strict=False).alias(c))
    frame = frame.with_columns(converted).drop([f"__n_{c}" for c in numeric])
    return replace(read, malformed=m, frame=frame)


def _table_read(tf: TableFile, table: str, types: Mapping[str, ColumnKind], separator: str) -> TableRead:
    """A :class:`TableRead` of the layer's :class:`~ddlscope.tables.TableFile` (its rejected rows
    become malformed rows, the layer's reasons renamed to this module's problems)."""
    malformed = tf.rejected.select(
        table=pl.lit(table), file="file", line="line",
        problem=pl.col("reason").replace_strict(_PROBLEMS, default=pl.col("reason"), return_dtype=pl.String),
        detail="detail", text="text",
    ).cast(MALFORMED_SCHEMA)
    return TableRead(
        table=table, file=tf.file, frame=tf.frame, malformed=malformed, data_rows=tf.data_rows,
        blank_lines=tf.blank_lines, header=tf.header, separator=separator, columns=tuple(types),
    )


def read_delimited(
    path: str | Path,
    *,
    table: str,
    columns: Sequence[str] | None,
    types: Mapping[str, ColumnKind],
    separator: str = ",",
    has_header: bool | Literal["auto"] = False,
) -> TableRead:
    """Read one delimited text table; see the module docstring for what becomes of each line.

    Args:
        path: the file (``.csv``, ``.csv.gz``, ``.tar.gz``, any text table).
        table: logical name used in reports.
        columns: the file's column names in order (headerless files); with a header, ``None``
            takes the header's names, and a list must be a subset of the header's names.
        types: column -> :data:`ColumnKind` for the columns to return (others are dropped).
        separator: one character.
        has_header: ``True``, ``False``, or ``"auto"``: a first line equal to ``columns`` is
            the header (a headerless table whose ``.header`` line was prepended).

    Returns:
        A :class:`TableRead`; its ``frame`` holds the ``types`` columns and ``_line``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a header lacking a needed column, an empty file with a header expected, a
            bad separator, a header that is not UTF-8, or quoted fields spanning lines (naming
            the file and line).
    """
    label = str(path)
    tf = read_csv(path, CsvOptions(separator=separator, has_header=has_header, columns=columns, select=list(types),
                                   short_lines="reject", keep_raw=True), label=label)
    if tf.header is not None and columns is not None:
        missing = [c for c in columns if c not in tf.header]
        if missing:
            raise ValueError(f"{label}: header has no column(s) {missing}; the header is {tf.header}")
    good = tf.frame
    # text fields are stripped of surrounding spaces only when some line holds a space (or tab)
    spaces = [" "] if separator == "\t" else [" ", "\t"]
    padded = bool(good.select(pl.any_horizontal(pl.col("_raw").str.contains(c, literal=True) for c in spaces)
                              .any()).item()) if good.height else False
    return parse_columns(_table_read(tf, table, types, separator), types, strip=padded)


def read_parquet_table(path: str | Path, *, table: str, types: Mapping[str, ColumnKind]) -> TableRead:
    """Read the ``types`` columns of a Parquet file with the same parsing rules; ``_line`` is the
    1-based row number.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a needed column is missing (listing the file's columns), or the file is not
            Parquet or is damaged.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    schema = parquet_columns(path)
    missing = [c for c in types if c not in schema]
    if missing:
        raise ValueError(f"{path}: no column(s) {missing}; the file's columns are {schema}")
    tf = read_parquet(path, list(types))
    frame = tf.frame.with_columns(pl.col(c).cast(pl.String) for c in types)
    read = TableRead(
        table=table, file=str(path), frame=frame, malformed=empty_malformed(), data_rows=frame.height,
        blank_lines=0, header=schema, separator=",", columns=tuple(types),
    )
    return parse_columns(read, types)
