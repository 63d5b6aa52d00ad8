"""The reading layer: table files (CSV/TSV, Parquet, JSON lines) -> Polars, every row accounted for.

Every reader returns a :class:`TableFile`: the rows kept (with ``_line``, the 1-based line of the
row in the file, the row number for Parquet) and the rows rejected, each with ``file``, ``line``,
a reason (:data:`REASONS`) and a detail; ``data_rows = kept + rejected``. Bad input beyond a row
is a ``ValueError`` whose one-line message names the file (and line where there is one).

The :data:`FORMATS` registry maps a format name to its reader; ``ingest``, ``rpc`` and ``skew``
read through it, and an analysis adds a format of its own with :func:`register_format`.

Imports: only the standard library, Polars and NumPy (this package sits below every analysis).
"""

from ddlscope.tables.csv import CsvOptions, csv_header, infer_types, read_csv, separator_hint, split_header
from ddlscope.tables.jsonl import describe_json_document, read_jsonl
from ddlscope.tables.parquet import parquet_columns, read_parquet, scan_parquet
from ddlscope.tables.registry import (
    FORMATS,
    TableFormat,
    detect_format,
    read_table_file,
    register_format,
    table_columns,
)
from ddlscope.tables.result import (
    EXTRA_FIELDS,
    INVALID_UTF8,
    MISSING_FIELDS,
    REASONS,
    REJECTED_SCHEMA,
    TEXT_CHARS,
    TRUNCATED_LAST_LINE,
    UNPARSEABLE_LINE,
    TableFile,
    empty_rejected,
    first_line,
)
from ddlscope.tables.text import Utf8Problem, check_utf8, local_source, read_text_bytes, refuse_utf16, utf16_encoding

__all__ = [
    "EXTRA_FIELDS", "FORMATS", "INVALID_UTF8", "MISSING_FIELDS", "REASONS", "REJECTED_SCHEMA", "TEXT_CHARS",
    "TRUNCATED_LAST_LINE", "UNPARSEABLE_LINE", "CsvOptions", "TableFile", "TableFormat", "Utf8Problem",
    "check_utf8", "csv_header", "describe_json_document", "detect_format", "empty_rejected", "first_line",
    "infer_types", "local_source", "parquet_columns", "read_csv", "read_jsonl", "read_parquet", "read_table_file",
    "read_text_bytes", "refuse_utf16", "register_format", "scan_parquet", "separator_hint", "split_header",
    "table_columns", "utf16_encoding",
]
