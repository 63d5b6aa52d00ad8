"""Reading delimited text tables so that every physical line is accounted for.

A trace file is read twice over in native Polars code, never line by line in Python:

1. every physical line as one string (``read_lines``), numbered from 1, to count its fields
   (quoted separators excepted) and to find blank lines;
2. the fields themselves, by Polars' CSV parser (quote-aware only when some line holds a quote;
   the PAI, Gavel and Philly files hold none), which gives one row per physical line, so the two
   passes line up row for row.

A line is then either the header, blank (empty; counted, not data), *malformed* (wrong field count,
a number that does not parse, ``inf``/``-inf``, a count that is not a whole number or exceeds
:data:`MAX_COUNT`, plus any rule the caller adds
with :meth:`TableRead.reject`), or a good data row. Malformed lines go to
:attr:`TableRead.malformed` with file, line, problem and the text of the line; nothing is
dropped silently.

Compressed input: ``.gz`` files are read by Polars directly; a ``.tar.gz`` / ``.tgz`` archive (as
the PAI 2020 tables are distributed) must hold one ``.csv`` member (or one named after the
archive), which is extracted to a temporary file first.

Limitation: a quoted field that spans several physical lines is not supported; such a file
gives a clear error naming it.
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import polars as pl

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
TEXT_CHARS = 200
"""Characters of a malformed line kept in the report."""

# problems (the categories malformed rows are counted by)
WRONG_FIELD_COUNT = "wrong field count"
UNPARSABLE_NUMBER = "unparsable number"
NOT_WHOLE = "count not a whole number"
NOT_FINITE = "not a finite number"
COUNT_TOO_LARGE = "count too large"
MAX_COUNT = 2**53
"""Largest count accepted (the largest integer a float64 holds exactly; also fits Int64)."""
MISSING_HEADER_COLUMN = "missing column"

_QUOTED = r'"(?:[^"]|"")*"'


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


def _read_lines(path: Path) -> pl.DataFrame:
    """Every physical line of ``path`` as ``_raw`` (String, ``\\r`` stripped, a UTF-8 byte-order mark
    at the start of the file removed, as Polars' CSV parser does: Excel's "CSV UTF-8" writes one)
    with ``_line``."""
    reader = getattr(pl, "read_lines", None)
    if reader is not None:
        frame = reader(path, name="_raw", row_index_name="_line", row_index_offset=1)
    else:  # older Polars: a separator byte that text files do not hold, no quoting
        frame = pl.read_csv(
            path, has_header=False, separator="\x1f", quote_char=None, schema={"_raw": pl.String},
            truncate_ragged_lines=True, row_index_name="_line", row_index_offset=1,
        )
    raw = pl.col("_raw").fill_null("")
    return frame.with_columns(
        pl.col("_line").cast(pl.Int64),
        pl.when(pl.col("_line") == 1).then(raw.str.strip_prefix("\ufeff")).otherwise(raw).alias("_raw"),
    )


def _split_header(line: str, separator: str) -> list[str]:
    return [name.strip().strip('"').strip() for name in line.split(separator)]


def _separator_hint(header: list[str] | None, separator: str) -> str:
    """A hint when a header read as one column holds another likely separator (``;``, tab, ``|``)."""
    if not header or len(header) != 1:
        return ""
    names = {";": "';'", "\t": "tab", "|": "'|'", ",": "','"}
    for sep, name in names.items():
        if sep != separator and sep in header[0]:
            value = "tab" if sep == "\t" else sep
            return (f"; the header is one column holding {name}: set separator (e.g. separator = \"{value}\" in a "
                    "--mapping file)")
    return ""


@contextmanager
def local_source(path: str | Path) -> Iterator[Path]:
    """A path Polars can read for ``path``: the file itself, or, for a ``.tar.gz``/``.tgz``
    archive, its one CSV member extracted to a temporary file (removed afterwards).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: an archive without exactly one CSV member to read.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    name = path.name.lower()
    if not (name.endswith(".tar.gz") or name.endswith(".tgz")):
        yield path
        return
    stem = path.name[: -len(".tar.gz")] if name.endswith(".tar.gz") else path.name[: -len(".tgz")]
    try:
        archive = tarfile.open(path, "r:gz")  # noqa: SIM115 - closed by the with-block below
    except (tarfile.TarError, OSError) as exc:
        raise ValueError(f"{path}: not a readable .tar.gz archive: {exc}") from exc
    with archive:
        try:
            members = [m for m in archive.getmembers() if m.isfile() and ".csv" in Path(m.name).name.lower()]
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ValueError(f"{path}: not a readable .tar.gz archive: {exc}") from exc
        named = [m for m in members if Path(m.name).name.split(".csv")[0] == stem]
        chosen = named or members
        if len(chosen) != 1:
            found = ", ".join(m.name for m in members) or "none"
            raise ValueError(f"{path}: expected one CSV member ({stem}.csv) in the archive, found {found}")
        member = chosen[0]
        tmpdir = Path(tempfile.mkdtemp(prefix="ddlscope-ingest-"))
        try:
            target = tmpdir / Path(member.name).name
            src = archive.extractfile(member)
            if src is None:
                raise ValueError(f"{path}: cannot extract {member.name}")
            with src, target.open("wb") as out:
                shutil.copyfileobj(src, out, length=1 << 22)
            yield target
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)


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
            bad separator, or quoted fields spanning lines (naming the file).
    """
    if len(separator) != 1:
        raise ValueError(f"separator: expected one character, got {separator!r}")
    label = str(path)
    with local_source(path) as local:
        lines = _read_lines(local)
        header: list[str] | None = None
        first = lines["_raw"][0] if lines.height else None
        if has_header == "auto":
            has_header = bool(columns) and first is not None and _split_header(first, separator) == list(columns or [])
        if has_header:
            if first is None:
                raise ValueError(f"{label}: empty file; expected a header line")
            header = _split_header(first, separator)
            if columns is None:
                columns = header
            else:
                missing = [c for c in columns if c not in header]
                if missing:
                    raise ValueError(
                        f"{label}: header has no column(s) {missing}; the header is {header}"
                        + _separator_hint(header, separator)
                    )
            lines = lines.slice(1)
        if columns is None:
            raise ValueError(f"{label}: column names needed for a file without a header")
        names = list(header or columns)
        n_expected = len(names)
        unknown = [c for c in types if c not in names]
        if unknown:
            raise ValueError(f"{label}: unknown column(s) {unknown}; the table's columns are {names}"
                             + _separator_hint(header, separator))

        wanted = list(types)
        raw = pl.col("_raw")
        quoted = bool(lines["_raw"].str.contains('"', literal=True).any()) if lines.height else False
        if quoted:
            n_fields = raw.str.replace_all(_QUOTED, "Q").str.count_matches(separator, literal=True) + 1
        else:
            n_fields = raw.str.count_matches(separator, literal=True) + 1
        lines = lines.with_columns(_n=n_fields.cast(pl.Int64))
        # the parser's schema is as wide as the widest line: Polars rejects a first row wider than
        # its schema (later ones are truncated); the extra columns are not read
        width = max(n_expected, int(lines["_n"].max() or 0))
        schema = dict.fromkeys(names, pl.String) | {f"__extra_{i}": pl.String for i in range(width - n_expected)}
        # the values, by Polars' CSV parser: one row per physical line (blank lines included), so
        # the two frames line up row for row
        values = pl.read_csv(
            local, has_header=False, skip_rows=1 if header else 0, separator=separator,
            quote_char='"' if quoted else None, schema=schema,
            columns=[names.index(c) for c in wanted], truncate_ragged_lines=True, missing_columns="insert",
            raise_if_empty=False,
        ) if lines.height else pl.DataFrame(schema=dict.fromkeys(wanted, pl.String))
        if values.height != lines.height:
            raise ValueError(
                f"{label}: the CSV parser found {values.height} rows in {lines.height} lines: a quoted "
                "field spans several lines or a quote is not closed; not supported"
            )
        lines = pl.concat([lines, values.select(wanted)], how="horizontal")
        lines = lines.with_columns(_blank=raw.str.len_bytes() == 0)
        blank_lines = int(lines["_blank"].sum())
        lines = lines.filter(~pl.col("_blank")).drop("_blank")
        data_rows = lines.height
        wrong = lines.filter(pl.col("_n") != n_expected)
        malformed = wrong.select(
            table=pl.lit(table),
            file=pl.lit(label),
            line=pl.col("_line"),
            problem=pl.lit(WRONG_FIELD_COUNT),
            detail=pl.format(f"expected {n_expected} fields, got {{}}", pl.col("_n")),
            text=raw.str.slice(0, TEXT_CHARS),
        )
        good = lines.filter(pl.col("_n") == n_expected).drop("_n")
        # text fields are stripped of surrounding spaces only when some line holds a space (or tab)
        spaces = [" "] if separator == "\t" else [" ", "\t"]
        padded = bool(good.select(pl.any_horizontal(raw.str.contains(c, literal=True) for c in spaces).any()).item()) \
            if good.height else False
    read = TableRead(
        table=table, file=label, frame=good, malformed=malformed, data_rows=data_rows,
        blank_lines=blank_lines, header=header, separator=separator, columns=tuple(wanted),
    )
    return parse_columns(read, types, strip=padded)


def read_parquet_table(path: str | Path, *, table: str, types: Mapping[str, ColumnKind]) -> TableRead:
    """Read the ``types`` columns of a Parquet file with the same parsing rules; ``_line`` is the
    1-based row number.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a needed column is missing (listing the file's columns).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    schema = pl.read_parquet_schema(path)
    missing = [c for c in types if c not in schema]
    if missing:
        raise ValueError(f"{path}: no column(s) {missing}; the file's columns are {list(schema)}")
    frame = pl.read_parquet(path, columns=list(types), row_index_name="_line", row_index_offset=1)
    frame = frame.with_columns(pl.col("_line").cast(pl.Int64), *[pl.col(c).cast(pl.String) for c in types])
    read = TableRead(
        table=table, file=str(path), frame=frame, malformed=empty_malformed(), data_rows=frame.height,
        blank_lines=0, header=list(schema), separator=",", columns=tuple(types),
    )
    return parse_columns(read, types)
