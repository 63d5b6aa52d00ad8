"""Parquet tables: one row per record, ``_line`` the 1-based row number; damaged files are clear
errors naming the file. :func:`scan_parquet` is lazy (only the columns and rows a query needs are
read)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from ddlscope.tables.result import TableFile, empty_rejected, first_line

_ERRORS = (pl.exceptions.PolarsError, pl.exceptions.PanicException, OSError, ValueError)
"""What Polars raises on a damaged file (a panic too: its Parquet decoder panics on some damage)."""


def _reason(exc: BaseException) -> str:
    """Why Polars could not read the file: its message's first line, or, for a panic of its
    decoder (a Rust panic message, not meant for users), that the file is damaged."""
    if isinstance(exc, pl.exceptions.PanicException):
        return "the file is damaged (Polars' Parquet decoder stopped on it)"
    return first_line(exc)


def parquet_columns(path: str | Path, label: str | None = None) -> list[str]:
    """The column names of a Parquet file (from its footer; no row is read).

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not Parquet or is damaged.
    """
    path = Path(path)
    label = label or str(path)
    if not path.exists():
        raise FileNotFoundError(f"{label}: no such file")
    try:
        return list(pl.read_parquet_schema(path))
    except _ERRORS as exc:
        raise ValueError(f"{label}: cannot read as Parquet: {_reason(exc)}") from exc


def scan_parquet(path: str | Path, columns: Sequence[str] | None = None, label: str | None = None) -> pl.LazyFrame:
    """A lazy Parquet table with ``_line`` (Int64, 1-based row number), optionally only ``columns``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not Parquet (its footer does not read), or a column is missing
            (the message lists the file's columns). Damage in the data pages shows when collected
            (:func:`read_parquet` turns it into a ValueError).
    """
    label = label or str(path)
    names = parquet_columns(path, label)
    if columns is not None:
        missing = [c for c in columns if c not in names]
        if missing:
            raise ValueError(f"{label}: no column(s) {missing} (columns: {', '.join(names)})")
    lf = pl.scan_parquet(path).with_row_index("_line", offset=1).with_columns(pl.col("_line").cast(pl.Int64))
    return lf.select("_line", *columns) if columns is not None else lf


def read_parquet(path: str | Path, columns: Sequence[str] | None = None, *, label: str | None = None) -> TableFile:
    """A Parquet file read whole (or only ``columns``) with ``_line`` (1-based row number) last.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not Parquet or is damaged (e.g. truncated), or a column is missing.
    """
    label = label or str(path)
    lf = scan_parquet(path, columns, label)
    try:
        frame = lf.collect()
    except _ERRORS as exc:
        raise ValueError(f"{label}: cannot read as Parquet: {_reason(exc)}") from exc
    frame = frame.select(pl.exclude("_line"), "_line")
    return TableFile(file=label, format="parquet", frame=frame, rejected=empty_rejected(), data_rows=frame.height,
                     header=[c for c in frame.columns if c != "_line"])
