"""JSON lines (one JSON object per line) with every line accounted for, and whole-file JSON
documents recognised for what they are.

Blank lines are skipped and counted; ``_line`` is the line in the file. A line is rejected
(:data:`REJECTED_SCHEMA <ddlscope.tables.result.REJECTED_SCHEMA>`) as ``invalid_utf8`` (the
detail gives the byte offset), ``truncated_last_line`` (the last line, without a newline, does
not parse: the file was cut short) or ``unparseable_line`` (not JSON, or not a JSON object).
Values of one key whose types clash across lines are all read as text (JSON-encoded).

A file that is one JSON *document* rather than JSON lines (a JSON array, a pretty-printed object,
a Chrome-trace ``traceEvents`` object) is not read line by line, which would reject every line as
"not JSON": :func:`read_jsonl` raises an error saying what the file is and what was expected.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import polars as pl

from ddlscope.tables.result import (
    INVALID_UTF8,
    REJECTED_SCHEMA,
    TEXT_CHARS,
    TRUNCATED_LAST_LINE,
    UNPARSEABLE_LINE,
    TableFile,
    empty_rejected,
)
from ddlscope.tables.text import check_utf8, read_text_bytes, refuse_utf16

_NON_SPACE = re.compile(rb"\S")

JSONL_EXPECTED = "expected JSON lines: one JSON object per line"
"""What :func:`read_jsonl` says it expected when the file is a JSON document."""


def describe_json_document(doc: Any) -> str:
    """What a parsed JSON document is, in words: ``a Chrome trace (traceEvents: 12 events)``,
    ``a JSON array of 5 objects``, ``a JSON object with keys a, b``."""
    if isinstance(doc, dict):
        if "traceEvents" in doc:
            events = doc["traceEvents"]
            n = f"{len(events):,} events" if isinstance(events, list) else "not a list"
            return f"a Chrome-trace JSON object (traceEvents: {n}; e.g. a PyTorch profiler trace)"
        if "resourceSpans" in doc or "resource_spans" in doc:
            return "an OpenTelemetry OTLP JSON document (resourceSpans)"
        keys = list(doc)
        shown = ", ".join(map(str, keys[:6])) + (", ..." if len(keys) > 6 else "")
        return f"one JSON object with keys {shown}" if keys else "an empty JSON object"
    if isinstance(doc, list):
        kinds = sorted({type(v).__name__.replace("dict", "object").replace("list", "array") for v in doc})
        return f"a JSON array of {len(doc):,} item(s) ({', '.join(kinds) or 'empty'})"
    return f"a single JSON {type(doc).__name__}"


def _refuse_document(data: bytes, label: str, expected: str) -> None:
    """Raise when ``data`` (valid UTF-8) is a whole-file JSON document rather than JSON lines.

    Text is decoded as UTF-8 before :func:`json.loads` (given bytes, it guesses UTF-16 or UTF-32
    from NUL bytes).

    Checked only when the first non-blank line is not a JSON object by itself (it opens an array
    or a pretty-printed object), so JSON lines pay one parse of their first line.
    """
    found = _NON_SPACE.search(data)
    if found is None or data[found.start(): found.start() + 1] not in (b"[", b"{"):
        return
    end = data.find(b"\n", found.start())
    first = data[found.start(): end if end >= 0 else len(data)].strip()
    if first[:1] == b"{":
        try:
            if isinstance(json.loads(first.decode("utf-8")), dict):
                return
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            pass
    try:
        doc = json.loads(data.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        if first in (b"[", b"{") or first[:1] == b"[":
            where = f"{label}:{exc.lineno}" if isinstance(exc, json.JSONDecodeError) else label
            msg = f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise ValueError(f"{where}: the file opens a JSON document ({first[:1].decode()!r} on line 1) that "
                             f"does not parse ({msg}); {expected}") from None
        return
    raise ValueError(f"{label}: {describe_json_document(doc)}, not JSON lines; {expected}")


def _jsonish(v: Any) -> str | None:
    return None if v is None else (v if isinstance(v, str) else json.dumps(v))


def read_jsonl(path: str | Path, *, label: str | None = None, expected: str = JSONL_EXPECTED) -> TableFile:
    """Read a JSON-lines file; see the module docstring for what becomes of each line.

    Args:
        path: the file (``.gz`` decompressed).
        label: how messages name the file (default the path).
        expected: what the error for a whole-file JSON document says was expected.

    Returns:
        A :class:`~ddlscope.tables.result.TableFile`: one row per JSON object, its keys as
        columns (types inferred by Polars), plus ``_line``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is a JSON document (array, pretty-printed object, Chrome trace), not
            JSON lines; the message says which and what was expected; or it is UTF-16 text
            (:func:`~ddlscope.tables.text.refuse_utf16`).
    """
    label = label or str(path)
    raw = read_text_bytes(path, label)
    refuse_utf16(raw, label)
    data, utf8 = check_utf8(raw)
    _refuse_document(data, label, expected)
    if not utf8 and data and not data[:1].isspace() and b"\n\n" not in data and b"\n\r\n" not in data \
            and not data[-4096:].rstrip(b"\r\n").endswith((b"\n", b" ")):
        # no blank lines: the rows are the lines, read in one pass
        try:  # the schema from the first lines; a later line that does not fit takes the slow path
            frame = pl.read_ndjson(data, infer_schema_length=1_000)
            if "traceEvents" in frame.columns:
                raise ValueError(f"{label}: a Chrome-trace JSON object (traceEvents), not JSON lines; {expected}")
            frame = frame.with_row_index("_line", offset=1).with_columns(pl.col("_line").cast(pl.Int64))
            return TableFile(file=label, format="jsonl", frame=frame, rejected=empty_rejected(),
                             data_rows=frame.height, header=[c for c in frame.columns if c != "_line"])
        except (pl.exceptions.PolarsError, ValueError) as exc:
            if "Chrome-trace" in str(exc):
                raise
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    open_end = bool(data) and data[-1:] not in (b"\n", b"\r")
    numbers = [i + 1 for i, ln in enumerate(lines) if ln.strip()]
    blank_lines = len(lines) - len(numbers)
    bad_utf8: dict[int, str] = {}
    for p in utf8:
        bad_utf8.setdefault(p.line, p.describe())
    bad: list[tuple[int, str, str, bytes]] = [(n, INVALID_UTF8, bad_utf8[n], lines[n - 1])
                                              for n in numbers if n in bad_utf8]
    numbers = [n for n in numbers if n not in bad_utf8]
    body = [lines[n - 1] for n in numbers]
    try:
        frame = pl.read_ndjson(io.BytesIO(b"\n".join(body)), infer_schema_length=None) if body else pl.DataFrame()
    except (pl.exceptions.PolarsError, ValueError):
        good_numbers, good_body = [], []
        last = len(lines)
        for n, ln in zip(numbers, body, strict=True):
            try:
                obj = json.loads(ln.decode("utf-8"))
            except (json.JSONDecodeError, RecursionError) as exc:
                if open_end and n == last:
                    bad.append((n, TRUNCATED_LAST_LINE, "the file ends without a newline inside this JSON object",
                                ln))
                else:
                    msg = f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else str(exc)
                    bad.append((n, UNPARSEABLE_LINE, f"not JSON: {msg}", ln))
                continue
            if not isinstance(obj, dict):
                bad.append((n, UNPARSEABLE_LINE, f"expected a JSON object, got {type(obj).__name__}", ln))
                continue
            good_numbers.append(n)
            good_body.append(ln)
        numbers, body = good_numbers, good_body
        try:
            frame = (pl.read_ndjson(io.BytesIO(b"\n".join(body)), infer_schema_length=None) if body
                     else pl.DataFrame())
        except (pl.exceptions.PolarsError, ValueError):
            # values of one key with clashing types across lines: read every value as text
            frame = pl.DataFrame([{k: _jsonish(v) for k, v in json.loads(ln.decode("utf-8")).items()} for ln in body],
                                 infer_schema_length=None)
    if frame.width == 0 and body:  # objects without keys
        frame = pl.DataFrame({"_line": numbers}, schema={"_line": pl.Int64})
    else:
        frame = frame.with_columns(pl.Series("_line", numbers, dtype=pl.Int64))
    if "traceEvents" in frame.columns:
        raise ValueError(f"{label}: a Chrome-trace JSON object (traceEvents), not JSON lines; {expected}")
    bad.sort()
    rejected = pl.DataFrame(
        {"file": [label] * len(bad), "line": [b[0] for b in bad], "reason": [b[1] for b in bad],
         "detail": [b[2] for b in bad],
         "text": [b[3].decode("utf-8", errors="replace")[:TEXT_CHARS] for b in bad]},
        schema=REJECTED_SCHEMA,
    )
    return TableFile(file=label, format="jsonl", frame=frame, rejected=rejected,
                     data_rows=frame.height + rejected.height, blank_lines=blank_lines,
                     header=[c for c in frame.columns if c != "_line"])
