"""What every reader of the reading layer returns: the rows kept, the rows rejected by reason.

A :class:`TableFile` is one file read: its good rows (``frame``, with ``_line``, the 1-based
physical line of the row in the file; the row number for Parquet) and its rejected rows
(``rejected``, :data:`REJECTED_SCHEMA`: file, line, reason, detail, text). Its accounting
balances by construction: ``data_rows = frame.height + rejected.height``, where data rows are
the lines that are neither the header nor blank (nor, where the reader skips them, a comment).

Reasons (the categories rejected rows are counted by) are the module's constants; callers may
rename them to their own vocabulary (the RPC readers keep ``extra_fields``, ingest keeps
``wrong field count``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

REJECTED_SCHEMA: dict[str, pl.DataType] = {
    "file": pl.String,
    "line": pl.Int64,
    "reason": pl.String,
    "detail": pl.String,
    "text": pl.String,
}
"""Columns of :attr:`TableFile.rejected`: ``line`` is 1-based (row number for Parquet); ``text``
is the first :data:`TEXT_CHARS` characters of the line (null where there is no line text)."""

TEXT_CHARS = 200
"""Characters of a rejected line kept in :attr:`TableFile.rejected` ``text``."""

# reasons
EXTRA_FIELDS = "extra_fields"
"""A line with more fields than the header."""
MISSING_FIELDS = "missing_fields"
"""A line with fewer fields than the header (only when the reader is asked to reject them)."""
TRUNCATED_LAST_LINE = "truncated_last_line"
"""The file ends without a newline in the middle of its last line: fewer fields than the header,
an unclosed quote, or (JSON lines) an object that does not parse: the file was cut short."""
INVALID_UTF8 = "invalid_utf8"
"""A line holding a byte sequence that is not UTF-8."""
UNPARSEABLE_LINE = "unparseable_line"
"""A JSON-lines line that is not JSON, or not a JSON object."""

REASONS: tuple[str, ...] = (EXTRA_FIELDS, MISSING_FIELDS, TRUNCATED_LAST_LINE, INVALID_UTF8, UNPARSEABLE_LINE)
"""Every reason the reading layer rejects a row for."""


def empty_rejected() -> pl.DataFrame:
    """A rejected-rows table without rows (:data:`REJECTED_SCHEMA`)."""
    return pl.DataFrame(schema=REJECTED_SCHEMA)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (Polars adds hints on further lines)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass(frozen=True)
class TableFile:
    """One file read by the reading layer.

    Attributes:
        file: the path, as given.
        format: the registry name of the format it was read as (``csv``, ``parquet``, ``jsonl``).
        frame: the rows kept: the file's columns (as the reader typed them) plus ``_line``
            (Int64, 1-based physical line; row number for Parquet) and, when asked for, ``_raw``
            (the line's text).
        rejected: the rows not kept, one per line, :data:`REJECTED_SCHEMA`.
        data_rows: lines (rows) that are neither the header nor blank nor a comment:
            ``frame.height + rejected.height``.
        blank_lines: empty (or, for JSON lines, white-space only) lines: counted, not data.
        header: the column names of the header line (CSV) or of the file (Parquet, JSON lines).
        notes: what the reader inferred (e.g. a CR CR LF line ending), for the report.
        comment_lines: comment lines skipped (CSV read with ``comment_prefix``): counted, not data.
    """

    file: str
    format: str
    frame: pl.DataFrame
    rejected: pl.DataFrame = field(default_factory=empty_rejected)
    data_rows: int = 0
    blank_lines: int = 0
    header: list[str] | None = None
    notes: tuple[str, ...] = ()
    comment_lines: int = 0

    @property
    def balanced(self) -> bool:
        """Whether every data row is either kept or rejected (the reader's invariant)."""
        return self.data_rows == self.frame.height + self.rejected.height

    def rejected_counts(self) -> dict[str, int]:
        """Rejected rows per reason."""
        return {r: int(n) for r, n in self.rejected["reason"].value_counts(sort=True).iter_rows()}
