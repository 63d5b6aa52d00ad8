"""Terminal tables and machine-readable output of Polars DataFrames.

``emit(frame, fmt)`` is the one way commands print results: ``table`` renders a rich table (units
come from the column names: ``_s`` seconds, ``_bytes``, ``_per_s``...), ``json`` prints a list of
row objects, ``csv`` prints CSV with a header.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TextIO

import polars as pl
from rich.console import Console
from rich.markup import escape
from rich.table import Table

OutputFormat = Literal["table", "json", "csv"]
FORMATS: tuple[str, ...] = ("table", "json", "csv")


def expected_one_of(value: str, choices: Sequence[str], option: str = "--format") -> str:
    """``value`` if it is one of ``choices``, else a ValueError the way every command words it:
    ``--format: expected table, json or csv, got 'xml'``.

    Returns:
        ``value`` unchanged.

    Raises:
        ValueError: ``value`` is not one of ``choices`` (naming ``option``).
    """
    if value in choices:
        return value
    listed = ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else "".join(choices)
    raise ValueError(f"{option}: expected {listed}, got {value!r}")


def terminal(stream: TextIO | None = None) -> Console:
    """A rich Console on ``stream`` (stdout): the terminal's width, or 200 columns when the output
    is piped (so tables are not squeezed to 80 columns in files and logs)."""
    console = Console(file=stream)
    return console if console.is_terminal else Console(file=stream, width=200)


CONTROL_ESCAPES: dict[int, str] = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))
                                   if c not in (9, 10)}
"""``str.translate`` table showing C0 and C1 control characters and DEL (Unicode General Category Cc)
as ``\\xNN``, tab and newline kept: a NUL or an escape sequence read from a user's file would
otherwise reach the terminal raw (a NUL prints as nothing, ESC starts a terminal command)."""


def shown(text: str) -> str:
    """``text`` with its control characters as ``\\xNN`` (:data:`CONTROL_ESCAPES`), for a terminal."""
    return text.translate(CONTROL_ESCAPES)


def format_value(value: Any, digits: int = 4) -> str:
    """A compact human string: floats to ``digits`` significant digits, None as ``-``, control
    characters of a string shown as ``\\xNN`` (:data:`CONTROL_ESCAPES`)."""
    if isinstance(value, str):
        return shown(value)
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if value == 0:
            return "0"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        mag = abs(value)
        if 1e-3 <= mag < 1e6:
            return f"{value:.{digits}g}"
        return f"{value:.{digits - 1}e}"
    return str(value)


def header_lines(name: str, width: int) -> str:
    """``name`` broken at its underscores into lines of at most ``width`` characters (a part longer
    than ``width`` stays whole): ``mean_share_compute_bound`` at 13 -> ``mean_share_`` /
    ``compute_bound``. A header never breaks inside a word (rich folds a header at any character)."""
    parts = [p + "_" for p in name.split("_")]
    parts[-1] = parts[-1][:-1]
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + len(part) <= width:
            lines[-1] += part
        else:
            lines.append(part)
    return "\n".join(line for line in lines if line)


def rich_table(frame: pl.DataFrame, title: str | None = None, caption: str | None = None,
               width: int | None = None) -> Table:
    """A rich :class:`~rich.table.Table` of ``frame``; numeric columns right-aligned.

    With ``width`` (the console's columns) and a table wider than it, the headers are broken at
    their underscores (:func:`header_lines`) to the widest cell of their column (at least 8
    characters) and each column is kept at least as wide as its header's longest line, so a header
    never wraps mid-word; only cells still too wide fold."""
    cells = [[escape(format_value(v)) for v in row] for row in frame.iter_rows()]
    table = Table(
        title=escape(shown(title)) if title else None,
        caption=escape(shown(caption)) if caption else None,
        show_lines=False,
        header_style="bold",
    )
    names = list(frame.schema)
    cell_width = [max((len(r[i]) for r in cells), default=0) for i in range(len(names))]
    natural = sum(max(len(n), w) for n, w in zip(names, cell_width, strict=True)) + 3 * len(names) + 1
    for i, (name, dtype) in enumerate(frame.schema.items()):
        header = name if width is None or natural <= width else header_lines(name, max(cell_width[i], 8))
        table.add_column(escape(header), justify="right" if dtype.is_numeric() else "left", overflow="fold",
                         min_width=max(len(line) for line in header.split("\n")))
    for row in cells:
        table.add_row(*row)
    return table


def to_jsonable(value: Any) -> Any:
    """``value`` with NaN/inf floats as None and other non-JSON types as strings (recursively)."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [to_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    return str(value)


def frame_records(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """Rows of ``frame`` as JSON-ready dicts (enums and dates as strings, NaN as null)."""
    return [to_jsonable(r) for r in frame.to_dicts()]


def emit(
    frame: pl.DataFrame,
    fmt: OutputFormat | str = "table",
    *,
    title: str | None = None,
    caption: str | None = None,
    extra: Mapping[str, Any] | None = None,
    stream: TextIO | None = None,
) -> None:
    """Print ``frame`` in ``fmt``.

    ``json`` prints ``{"rows": [...], **extra}`` when ``extra`` is given, else the list of rows.
    ``table`` prints the rich table, then ``extra`` as ``key: value`` lines.

    Raises:
        ValueError: an unknown format.
    """
    stream = stream or sys.stdout
    if fmt == "table":
        console = terminal(stream)
        if title:  # a line of its own: a table title would wrap at the table's width
            console.print(f"[bold]{escape(shown(title))}[/bold]")
        console.print(rich_table(frame, caption=caption, width=console.width))
        for key, value in (extra or {}).items():
            text = format_value(value) if not isinstance(value, Mapping) else json.dumps(to_jsonable(value))
            console.print(escape(shown(f"{key}: {text}")))
    elif fmt == "json":
        rows = frame_records(frame)
        payload: Any = {"rows": rows, **to_jsonable(dict(extra))} if extra else rows
        stream.write(json.dumps(payload, indent=2) + "\n")
    elif fmt == "csv":
        out = frame.with_columns(pl.selectors.enum().cast(pl.String), pl.selectors.categorical().cast(pl.String))
        stream.write(out.write_csv())
    else:
        expected_one_of(str(fmt), FORMATS)


def emit_sections(
    sections: Sequence[tuple[str, pl.DataFrame, str, str | None]],
    fmt: OutputFormat | str = "table",
    *,
    summary: Mapping[str, Any] | None = None,
    stream: TextIO | None = None,
) -> None:
    """Print several named tables as one output (a command with more than one result table).

    Args:
        sections: ``(name, frame, title, caption)`` in print order.
        fmt: ``table`` prints each titled table, then ``summary`` as ``key: value`` lines;
            ``json`` prints one object ``{name: [rows], ..., **summary}``; ``csv`` prints the
            first section only (the command's main table).
        summary: headline values and notes (lists print one item per line in ``table``).

    Raises:
        ValueError: an unknown format.
    """
    stream = stream or sys.stdout
    if fmt == "table":
        console = terminal(stream)
        for _, frame, title, caption in sections:
            if title:
                console.print(f"[bold]{escape(shown(title))}[/bold]")
            console.print(rich_table(frame, caption=caption, width=console.width))
        for key, value in (summary or {}).items():
            if isinstance(value, Sequence) and not isinstance(value, str):
                console.print(escape(f"{key}:"))
                for item in value:
                    console.print(escape(f"  - {format_value(item)}"))
            elif isinstance(value, Mapping):
                console.print(escape(f"{key}: {json.dumps(to_jsonable(value))}"))
            else:
                console.print(escape(f"{key}: {format_value(value)}"))
    elif fmt == "json":
        payload = {name: frame_records(frame) for name, frame, _, _ in sections}
        payload.update(to_jsonable(dict(summary or {})))
        stream.write(json.dumps(payload, indent=2) + "\n")
    elif fmt == "csv":
        if sections:
            emit(sections[0][1], "csv", stream=stream)
    else:
        expected_one_of(str(fmt), FORMATS)
