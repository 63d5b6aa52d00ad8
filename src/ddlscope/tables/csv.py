"""Delimited text tables (CSV, TSV, any one-character separator) with every physical line accounted for.

A file is read in native Polars code, never line by line in Python:

1. its bytes are checked as UTF-8 (:func:`~ddlscope.tables.text.check_utf8`; a bad sequence is
   replaced so the lines still line up, and its line is rejected naming the byte offset);
2. every physical line becomes one string, numbered from 1, to count its fields (separators
   inside double quotes excepted, RFC 4180, ``""`` an escaped quote) and to find blank lines;
3. the fields themselves come from Polars' CSV parser (quote-aware only when some line holds a
   quote), one row per physical line, so the two passes line up row for row.

A line is then the header, blank (empty: counted, not data), a comment (with ``comment_prefix``:
counted, not data), rejected (:data:`REJECTED_SCHEMA <ddlscope.tables.result.REJECTED_SCHEMA>`,
first that applies):

=======================  ======================================================================
reason                   when
=======================  ======================================================================
``truncated_last_line``  the file does not end in a newline and its last line has fewer fields
                         than the header or an unclosed quote: the file was cut short
``invalid_utf8``         the line holds a byte sequence that is not UTF-8 (detail: byte offset)
``extra_fields``         more fields than the header
``missing_fields``       fewer fields than the header (``short_lines="reject"``; with ``"pad"``
                         the missing fields are null)
=======================  ======================================================================

or a good row. Lines may end in LF, CRLF or CR CR LF (trailing carriage returns are dropped); a file
whose lines end in CR only (classic Mac OS) is an error saying so.

**Comments.** With ``CsvOptions(comment_prefix="#")``, a line whose first characters other than
spaces and tabs are the prefix is a comment: skipped like a blank line (whatever it holds: quotes, separators,
bytes that are not UTF-8), counted in :attr:`TableFile.comment_lines
<ddlscope.tables.result.TableFile.comment_lines>`, and counted in the line numbers. The header is then
the first line that is neither blank nor a comment (blank and comment lines, and lines of only
spaces and tabs, may come before it; they count as blank).
Without ``comment_prefix`` no line is a comment and the header is line 1.
``.gz`` files are decompressed; a ``.tar.gz`` archive must hold one CSV member
(:func:`~ddlscope.tables.text.local_source`).

Limitation: a quoted field that spans several physical lines is not supported; such a file (or
one with a quote that is not closed before the last line) is a clear error naming the line, as is a
line the CSV parser refuses because a quoted field is followed by something other than the
separator or the line's end (``"a"b``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import polars as pl

from ddlscope.tables.result import (
    EXTRA_FIELDS,
    INVALID_UTF8,
    MISSING_FIELDS,
    REJECTED_SCHEMA,
    TEXT_CHARS,
    TRUNCATED_LAST_LINE,
    TableFile,
)
from ddlscope.tables.text import check_utf8, local_source, read_text_bytes, refuse_utf16

_QUOTED = r'"(?:[^"]|"")*"'


@dataclass(frozen=True)
class CsvOptions:
    """How :func:`read_csv` reads a file.

    Attributes:
        separator: one character (``\\t`` for TSV).
        has_header: ``True``, ``False``, or ``"auto"``: a first line equal to ``columns`` is the
            header (a headerless table whose header line was prepended).
        columns: the column names in order for a file without a header; with a header, None.
        select: the columns to return (default all); each must be a column of the file.
        short_lines: ``"reject"`` a line with fewer fields than the header (``missing_fields``),
            or ``"pad"`` it with nulls.
        keep_raw: keep each good line's text as ``_raw`` (String).
        comment_prefix: a line whose first characters other than spaces and tabs are this string is a
            comment: skipped like a blank line, counted in ``comment_lines`` and in the line
            numbers; the header is the first line that is neither blank nor a comment. None
            (default): no comments, the header is line 1.
    """

    separator: str = ","
    has_header: bool | Literal["auto"] = True
    columns: Sequence[str] | None = None
    select: Sequence[str] | None = None
    short_lines: Literal["reject", "pad"] = "reject"
    keep_raw: bool = False
    comment_prefix: str | None = None


def split_header(line: str, separator: str = ",") -> list[str]:
    """The column names of a header line: RFC 4180 quoting, surrounding spaces and quotes removed."""
    try:
        fields = next(csv.reader([line], delimiter=separator))
    except (csv.Error, StopIteration):
        fields = line.split(separator)
    return [name.strip().strip('"').strip() for name in fields]


def csv_header(path: str | Path, separator: str | None = None) -> list[str]:
    """The column names on the first line of a CSV file (``.tsv``: tab-separated unless
    ``separator`` says otherwise); ``[]`` for an empty file. Invalid UTF-8 is replaced.

    Raises:
        FileNotFoundError: no such file.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    with path.open("rb") as fh:
        first = fh.readline(1 << 20).decode("utf-8", errors="replace").lstrip("\ufeff").rstrip("\r\n")
    if not first:
        return []
    sep = separator or ("\t" if path.suffix.lower() == ".tsv" else ",")
    return split_header(first, sep)


def separator_hint(header: Sequence[str] | None, separator: str) -> str:
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


def _unique_names(names: Sequence[str]) -> list[str]:
    """Names made unique: a repeated name gets ``_duplicated_<n>`` (as Polars names them)."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        if name in seen:
            out.append(f"{name}_duplicated_{seen[name]}")
            seen[name] += 1
        else:
            seen[name] = 0
            out.append(name)
    return out


def _lines(data: bytes) -> pl.DataFrame:
    """Every physical line as ``_raw`` (trailing CRs and a UTF-8 byte-order mark at the start of
    the file removed) with ``_line`` (Int64, 1-based)."""
    if not data:
        return pl.DataFrame(schema={"_line": pl.Int64, "_raw": pl.String})
    frame = pl.read_lines(io.BytesIO(data), name="_raw", row_index_name="_line", row_index_offset=1)
    raw = pl.col("_raw").fill_null("").str.strip_chars_end("\r")
    return frame.select(
        pl.col("_line").cast(pl.Int64),
        pl.when(pl.col("_line") == 1).then(raw.str.strip_prefix("\ufeff")).otherwise(raw).alias("_raw"),
    )


def _read_padded_fast(data: bytes, label: str, header: list[str], names: list[str], select: list[str],
                      sep: str) -> TableFile | None:
    """One pass of Polars' CSV parser, for a file with a header read with short lines padded, when
    its rows are sure to be its lines: it ends in a newline (so its last line is whole), holds no
    blank line and no CR CR LF, and the parser finds as many records as there are lines after the
    header (no quoted newline) without a line wider than the header. None: read it line by line."""
    if not data.endswith(b"\n") or b"\n\n" in data or b"\n\r\n" in data or b"\r\r\n" in data:
        return None
    rows = data.count(b"\n") - 1
    if rows <= 0:
        return None
    try:
        values = pl.read_csv(data, has_header=False, skip_rows=1, separator=sep, quote_char='"',
                             schema=dict.fromkeys(names, pl.String), columns=[names.index(c) for c in select],
                             raise_if_empty=False)
    except pl.exceptions.PolarsError:
        return None
    if values.height != rows:
        return None
    frame = values.select(pl.int_range(2, rows + 2, dtype=pl.Int64).alias("_line"), *select)
    return TableFile(file=label, format="csv", frame=frame, rejected=pl.DataFrame(schema=REJECTED_SCHEMA),
                     data_rows=rows, blank_lines=0, header=header)


def _unclosed_quote(lines: pl.DataFrame, label: str) -> None:
    """Raise naming the first line of ``lines`` with an odd number of double quotes, if any."""
    odd = lines.filter(pl.col("_raw").str.count_matches('"', literal=True) % 2 == 1)
    if odd.height:
        raise ValueError(f"{label}:{int(odd['_line'][0])}: a quote is not closed on its line; quoted fields "
                         "spanning lines are not supported")


def _misquoted(lines: pl.DataFrame, label: str, sep: str) -> None:
    """Raise naming the first line of ``lines`` that is not RFC 4180 fields: each field empty,
    quoted (``"..."``, ``""`` an escaped quote) or unquoted (not starting with a quote), if any."""
    s = f"\\x{{{ord(sep):X}}}"  # the separator as a regex escape, in or out of a class
    field = f'(?:{_QUOTED}|[^"{s}][^{s}]*)?'
    bad = lines.filter(pl.col("_raw").str.len_bytes() > 0, ~pl.col("_raw").str.contains(f"^{field}(?:{s}{field})*$"))
    if bad.height:
        raise ValueError(f"{label}:{int(bad['_line'][0])}: not CSV: a quoted field must close its quote and be "
                         "followed by the separator or the line's end")


def read_csv(path: str | Path, options: CsvOptions | None = None, *, label: str | None = None) -> TableFile:
    """Read one delimited text table; see the module docstring for what becomes of each line.

    Args:
        path: the file (``.csv``, ``.tsv``, ``.csv.gz``, ``.tar.gz``, any text table).
        options: :class:`CsvOptions` (default: comma, a header, every column, short lines rejected).
        label: how messages name the file (default the path).

    Returns:
        A :class:`~ddlscope.tables.result.TableFile` whose ``frame`` holds the selected columns
        as String (surrounding spaces kept, empty fields null) and ``_line``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a bad separator or ``comment_prefix``, a UTF-16 file (with or without a byte-order
            mark, :func:`~ddlscope.tables.text.refuse_utf16`), lines that end in CR only, an empty file (or,
            with ``comment_prefix``, one of blank and comment lines only) where a header is expected, a
            header that is not UTF-8, a selected column the file lacks (with a separator hint), a
            quote not closed before the last line, or a quoted field followed by something other
            than the separator or the line's end (naming the line).
    """
    opts = options or CsvOptions()
    sep = opts.separator
    if len(sep) != 1:
        raise ValueError(f"separator: expected one character, got {sep!r}")
    label = label or str(path)
    prefix = opts.comment_prefix
    if prefix is not None and (not prefix or prefix[0] in " \t" or "\n" in prefix or "\r" in prefix):
        raise ValueError(f"comment_prefix: expected a non-empty string that neither starts with a space or tab nor "
                         f"holds a line end, got {prefix!r}")
    with local_source(path) as local:
        raw_bytes = read_text_bytes(local, label)
    refuse_utf16(raw_bytes, label)
    data, utf8 = check_utf8(raw_bytes)
    if b"\n" not in data and b"\r" in data.rstrip(b"\r"):
        raise ValueError(f"{label}: lines end in CR only (classic Mac OS line ends), so the file reads as one line: "
                         "save it with LF or CRLF line ends")
    raw = pl.col("_raw")
    lines: pl.DataFrame | None = None
    if prefix is None:
        end = data.find(b"\n")
        first = data[: end if end >= 0 else len(data)].decode("utf-8").rstrip("\r").removeprefix("\ufeff") \
            if data else None
        first_line = 1
        comment_lines = 0
    else:
        # a comment line's text becomes empty: it is parsed, counted and skipped as a blank line is
        lines = _lines(data)
        comment = raw.str.strip_chars_start(" \t").str.starts_with(prefix)
        lines = lines.with_columns(_comment=comment).with_columns(
            pl.when(pl.col("_comment")).then(pl.lit("")).otherwise(raw).alias("_raw"))
        comment_lines = int(lines["_comment"].sum())
        # the header: the first line holding more than spaces and tabs (those before it count as blank)
        content = lines.filter(raw.str.strip_chars(" \t").str.len_bytes() > 0).head(1)
        first = content["_raw"][0] if content.height else None
        first_line = int(content["_line"][0]) if content.height else None
        lines = lines.drop("_comment")
    has_header = opts.has_header
    if has_header == "auto":
        has_header = bool(opts.columns) and first is not None and split_header(first, sep) == list(opts.columns or [])
    header: list[str] | None = None
    if has_header:
        if first is None:
            if data:
                raise ValueError(f"{label}: no header line: every line is blank or a comment (prefix {prefix!r})")
            raise ValueError(f"{label}: empty file; expected a header line")
        bad = [p for p in utf8 if p.line == first_line]
        if bad:
            raise ValueError(f"{label}:{first_line}: the header is not UTF-8 text: {bad[0].describe()}")
        header = split_header(first, sep)
        names = _unique_names(header)
    else:
        if opts.columns is None:
            raise ValueError(f"{label}: column names needed for a file without a header")
        names = _unique_names(list(opts.columns))
    select = list(names if opts.select is None else opts.select)
    missing = [c for c in select if c not in names]
    if missing:
        raise ValueError(f"{label}: unknown column(s) {missing}; the table's columns are {names}"
                         + separator_hint(header, sep))
    if opts.short_lines == "pad" and not opts.keep_raw and header is not None and not utf8 and prefix is None:
        fast = _read_padded_fast(data, label, header, names, select, sep)
        if fast is not None:
            return fast
    if lines is None:
        lines = _lines(data)
    # the lines before the header (blank or, with comment_prefix, comments) are no data either
    head_lines = int(first_line) if header is not None and first_line is not None else 0
    before = lines.slice(0, max(head_lines - 1, 0))
    body_lines = lines.slice(head_lines)
    n_expected = len(names)
    quoted = bool(lines["_raw"].str.contains('"', literal=True).any()) if lines.height else False
    stripped = raw.str.replace_all(_QUOTED, "Q") if quoted else raw
    body_lines = body_lines.with_columns(_n=(stripped.str.count_matches(sep, literal=True) + 1).cast(pl.Int64))

    # the last line, cut short: the file ends without a newline inside it
    truncated: int | None = None
    trunc_detail = ""
    if data and data[-1:] not in (b"\n", b"\r") and body_lines.height:
        last_raw, last_n = body_lines["_raw"][-1], int(body_lines["_n"][-1])
        if last_raw and quoted and last_raw.count('"') % 2 == 1:
            truncated = int(body_lines["_line"][-1])
            trunc_detail = "the file ends without a newline inside a quoted field"
        elif last_raw and last_n < n_expected:
            truncated = int(body_lines["_line"][-1])
            trunc_detail = f"the file ends without a newline in this line: {last_n} of {n_expected} fields"
    parse_lines = body_lines.slice(0, body_lines.height - 1) if truncated is not None else body_lines

    # the values, one row per physical line
    width = max(n_expected, int(parse_lines["_n"].max() or 0)) if parse_lines.height else n_expected
    schema = dict.fromkeys(names, pl.String) | {f"__extra_{i}": pl.String for i in range(width - n_expected)}
    # the lines as cleaned above (CR CR LF, comments emptied, lines before the header or the cut line left out)
    rebuilt = truncated is not None or b"\r\r\n" in data or prefix is not None
    if parse_lines.height:
        if rebuilt:
            body = (parse_lines["_raw"].str.join("\n").item() + "\n").encode()
            skip = 0
        else:
            body, skip = data, 1 if header is not None else 0
        try:
            values = pl.read_csv(
                io.BytesIO(body), has_header=False, skip_rows=skip, separator=sep,
                quote_char='"' if quoted else None, schema=schema,
                columns=[names.index(c) for c in select], truncate_ragged_lines=True, missing_columns="insert",
                raise_if_empty=False,
            )
        except pl.exceptions.PolarsError as exc:
            _unclosed_quote(parse_lines, label)
            if quoted:
                _misquoted(parse_lines, label, sep)
            raise ValueError(f"{label}: cannot parse as CSV: {str(exc).strip().splitlines()[0]}") from exc
        if values.height != parse_lines.height:
            _unclosed_quote(parse_lines, label)
            raise ValueError(f"{label}: the CSV parser found {values.height} records in {parse_lines.height} lines; "
                             "quoted fields spanning lines are not supported")
    else:
        values = pl.DataFrame(schema=dict.fromkeys(select, pl.String))
    if truncated is not None:
        values = pl.concat([values, pl.DataFrame({c: [None] for c in select}, schema=dict.fromkeys(select, pl.String))])
    frame = pl.concat([body_lines, values.select(select)], how="horizontal")
    blank = raw.str.len_bytes() == 0
    blank_lines = int(frame.select(blank.sum()).item()) + before.height if frame.height or before.height else 0
    blank_lines -= comment_lines  # comment lines were emptied: counted as comments, not blank
    frame = frame.filter(~blank)

    bad_utf8: dict[int, str] = {}
    for p in utf8:
        bad_utf8.setdefault(p.line, p.describe())
    line = pl.col("_line")
    n = pl.col("_n")
    reason = (
        pl.when(line == (truncated if truncated is not None else -1)).then(pl.lit(TRUNCATED_LAST_LINE))
        .when(line.is_in(list(bad_utf8))).then(pl.lit(INVALID_UTF8))
        .when(n > n_expected).then(pl.lit(EXTRA_FIELDS))
        .when((n < n_expected) & (opts.short_lines == "reject")).then(pl.lit(MISSING_FIELDS))
        .otherwise(None)
    )
    frame = frame.with_columns(_reason=reason)
    bad_rows = frame.filter(pl.col("_reason").is_not_null())
    rejected = bad_rows.select(
        file=pl.lit(label),
        line=line,
        reason=pl.col("_reason"),
        detail=pl.when(pl.col("_reason") == TRUNCATED_LAST_LINE).then(pl.lit(trunc_detail))
        .when(pl.col("_reason") == INVALID_UTF8).then(line.replace_strict(bad_utf8, default=None,
                                                                          return_dtype=pl.String))
        .otherwise(pl.format(f"expected {n_expected} fields, got {{}}", n)),
        text=raw.str.slice(0, TEXT_CHARS),
    ).cast(REJECTED_SCHEMA) if bad_rows.height else pl.DataFrame(schema=REJECTED_SCHEMA)
    good = frame.filter(pl.col("_reason").is_null()).drop("_reason", "_n")
    last = names[-1]
    if last in select and not rebuilt and b"\r" in data:
        good = good.with_columns(pl.col(last).str.strip_chars_end("\r"))
    if not opts.keep_raw:
        good = good.drop("_raw")
    notes = ("lines end in CR CR LF (a CRLF file converted again): the extra CRs are dropped",) \
        if b"\r\r\n" in data else ()
    return TableFile(file=label, format="csv", frame=good, rejected=rejected, data_rows=frame.height,
                     blank_lines=blank_lines, header=header, notes=notes, comment_lines=comment_lines)


def infer_types(frame: pl.DataFrame, columns: Sequence[str]) -> pl.DataFrame:
    """``frame`` with each String column of ``columns`` typed as Polars' CSV reader infers it:
    Int64 when every non-null value is an integer, else Float64 when every one is a number, else
    Boolean when every one is ``true``/``false`` (any case), else String."""
    exprs = []
    for c in columns:
        if c not in frame.columns or frame.schema[c] != pl.String:
            continue
        col = frame[c]
        nulls = col.null_count()
        for dtype in (pl.Int64, pl.Float64):
            cast = col.cast(dtype, strict=False)
            if cast.null_count() == nulls:
                exprs.append(cast.alias(c))
                break
        else:
            low = col.str.to_lowercase()
            if nulls < col.len() and low.is_in(["true", "false"]).sum() == col.len() - nulls:
                exprs.append((low == "true").alias(c))
    return frame.with_columns(exprs) if exprs else frame
