"""The registry of table formats: a format name -> its reader, its suffixes, and how to sniff it.

:data:`FORMATS` holds ``csv``, ``tsv``, ``parquet`` and ``jsonl``; an analysis adds its own
(``rpc`` registers ``otlp``) with :func:`register_format`, so a new format is one entry.
:func:`detect_format` picks one by suffix (``.gz`` looked through: ``.csv.gz`` is ``csv``); where
several formats share a suffix (``.json``: OTLP or JSON lines), the first whose ``sniff`` accepts
the file's first 64 KiB wins, else the first without a ``sniff``. :func:`read_table_file` reads a
file with the format's reader.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddlscope.tables.csv import CsvOptions, csv_header, read_csv
from ddlscope.tables.jsonl import read_jsonl
from ddlscope.tables.parquet import parquet_columns, read_parquet
from ddlscope.tables.result import TableFile

Reader = Callable[..., TableFile]
"""``reader(path, *, label=None, **options) -> TableFile``; options are the format's own."""

SNIFF_BYTES = 1 << 16
"""Bytes of the file's start a ``sniff`` function sees."""


@dataclass(frozen=True)
class TableFormat:
    """One registered format.

    Attributes:
        name: the registry key (``csv``, ``parquet``, ...), as ``--input-format`` values name it.
        suffixes: file suffixes (lower case, with the dot) it is picked for.
        read: its reader (see :data:`Reader`).
        columns: the column names of a file without reading its rows, or None.
        sniff: for a suffix shared with another format, whether the file's first
            :data:`SNIFF_BYTES` bytes are this format; None: the fallback.
        description: one line for help texts.
    """

    name: str
    suffixes: tuple[str, ...]
    read: Reader
    columns: Callable[[Path], list[str]] | None = None
    sniff: Callable[[bytes], bool] | None = None
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)


FORMATS: dict[str, TableFormat] = {}
"""Registered formats by name, in registration order."""


def register_format(fmt: TableFormat) -> TableFormat:
    """Add (or replace) ``fmt`` in :data:`FORMATS`; returns it."""
    FORMATS[fmt.name] = fmt
    return fmt


def _suffix(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".gz") and not name.endswith((".tar.gz", ".tgz")):
        name = name[:-3]
    return Path(name).suffix


def detect_format(path: str | Path, among: tuple[str, ...] | None = None) -> str | None:
    """The name of the registered format of ``path`` by suffix (and sniffing, see the module
    docstring), only among ``among`` when given; None when no format claims the suffix."""
    path = Path(path)
    suffix = _suffix(path)
    candidates = [f for f in FORMATS.values() if suffix in f.suffixes and (among is None or f.name in among)]
    if not candidates:
        return None
    if len(candidates) > 1 and any(f.sniff for f in candidates):
        with path.open("rb") as fh:
            head = fh.read(SNIFF_BYTES)
        for f in candidates:
            if f.sniff is not None and f.sniff(head):
                return f.name
        fallback = [f for f in candidates if f.sniff is None]
        return (fallback or candidates)[0].name
    return candidates[0].name


def read_table_file(path: str | Path, fmt: str = "auto", *, label: str | None = None, **options: Any) -> TableFile:
    """Read ``path`` with the reader of format ``fmt`` (``auto``: :func:`detect_format`).

    Raises:
        FileNotFoundError: no such file.
        ValueError: an unknown format or suffix (listing the registered ones), or the reader's errors.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{label or path}: no such file")
    name = detect_format(path) if fmt == "auto" else fmt
    if name is None or name not in FORMATS:
        known = ", ".join(f"{f.name} ({' '.join(f.suffixes)})" for f in FORMATS.values())
        what = f"format {fmt!r}" if fmt != "auto" else f"suffix {_suffix(path)!r}"
        raise ValueError(f"{label or path}: unknown {what}; expected one of {known}")
    spec = FORMATS[name]
    return spec.read(path, label=label, **{**spec.options, **options})


def table_columns(path: str | Path, fmt: str = "auto") -> list[str]:
    """The column names of a table file without reading its rows (CSV header, Parquet footer,
    the keys of a JSON-lines file's objects).

    Raises:
        FileNotFoundError, ValueError: as :func:`read_table_file`.
    """
    path = Path(path)
    name = detect_format(path) if fmt == "auto" else fmt
    spec = FORMATS.get(name or "")
    if spec is not None and spec.columns is not None:
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file")
        return spec.columns(path)
    return list(read_table_file(path, fmt).header or [])


def _read_csv(path: Path, *, label: str | None = None, **options: Any) -> TableFile:
    return read_csv(path, CsvOptions(**options), label=label)


def _read_tsv(path: Path, *, label: str | None = None, **options: Any) -> TableFile:
    return read_csv(path, CsvOptions(**{"separator": "\t", **options}), label=label)


def _read_parquet(path: Path, *, label: str | None = None, columns: list[str] | None = None) -> TableFile:
    return read_parquet(path, columns, label=label)


def _read_jsonl(path: Path, *, label: str | None = None, **options: Any) -> TableFile:
    return read_jsonl(path, label=label, **options)


register_format(TableFormat("csv", (".csv",), _read_csv, csv_header, None,
                            "comma-separated values with a header line"))
register_format(TableFormat("tsv", (".tsv",), _read_tsv, lambda p: csv_header(p, "\t"), None,
                            "tab-separated values with a header line"))
register_format(TableFormat("parquet", (".parquet", ".pq"), _read_parquet, parquet_columns, None,
                            "Apache Parquet, one row per record"))
register_format(TableFormat("jsonl", (".jsonl", ".ndjson", ".json"), _read_jsonl, None, None,
                            "JSON lines: one JSON object per line"))
