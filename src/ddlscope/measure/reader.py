"""Read PyTorch profiler traces (Kineto / Chrome trace JSON) into one events table per rank.

Inputs may be plain JSON, gzip-compressed JSON, tar archives (``.tar``, ``.tar.gz``) of such files,
or folders holding any of these. Each JSON document is recognised by content:

- a **Kineto trace** (``torch.profiler`` output, Chrome trace format): an object with a
  ``traceEvents`` array, or a bare array of events (Chrome's "JSON array format");
- a **PyTorch execution trace** (``ExecutionTraceObserver`` output, as Chakra/PARAM use it): an
  object with ``schema`` and ``nodes``. It has op shapes but no timings; ``ddlscope trace`` uses it
  only to count FLOPs for a rank whose Kineto trace lacks shapes.

The JSON is decoded with msgspec into typed structs that keep only the fields the analysis reads
(``ph, cat, name, pid, tid, ts, dur`` and a dozen ``args``), which is several times faster than
decoding to dicts and gives schema errors with the JSON path of the offending value.

Times: Kineto writes ``ts``/``dur`` in microseconds (integers, or floats with nanosecond
fractions). They are stored as integer nanoseconds relative to the trace's earliest complete
event (``ts_ns``, ``dur_ns``, ``end_ns = ts_ns + dur_ns``), so sums of durations are exact.

Bad times are dropped and counted, never fatal (the policy of ``docs/trace.md``): a complete event
whose ``ts`` or ``dur`` is not finite (``NaN``, ``Infinity``, or a number beyond the double
range, which Python's ``json`` module writes and reads), or lies outside what int64 nanoseconds
hold (|value| >= 9.2e15 us, about 292 years: e.g. a duration from an unsigned underflow, 1.8e16
us), or has a negative ``dur``, is left out; :attr:`KinetoTrace.skipped` counts it under its
reason and :attr:`KinetoTrace.skipped_examples` names the first one by its JSON path
(``traceEvents[12]``), name and value.
Source of the format: the Trace Event Format document (Google, "Trace Event Format", 2016) and
PyTorch's Kineto ``ChromeTraceLogger``.
"""

from __future__ import annotations

import gc
import gzip
import io
import json
import math
import re
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

c = pl.col
Scalar = int | float | str | None


class TraceReadError(ValueError):
    """A trace file that cannot be read: missing, truncated, not JSON, or not a profiler trace.
    The message names the file (and the archive member) and what was expected."""


class NotATraceError(TraceReadError):
    """Valid JSON that is neither a Kineto trace nor an execution trace (e.g. a config file).
    Named on the command line it is an error; found in a folder it is skipped with a note."""


# -- the part of the schema we read ------------------------------------------------------------
class _Args(msgspec.Struct, gc=False):
    correlation: Scalar = None
    stream: Scalar = None
    device: Scalar = None
    nbytes: Scalar = msgspec.field(default=None, name="bytes")
    in_msg_nelems: Scalar = msgspec.field(default=None, name="In msg nelems")
    out_msg_nelems: Scalar = msgspec.field(default=None, name="Out msg nelems")
    group_size: Scalar = msgspec.field(default=None, name="Group size")
    dtype: Scalar = None
    collective_name: Scalar = msgspec.field(default=None, name="Collective name")
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    in_split: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="In split size")
    out_split: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Out split size")
    pg_ranks: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Process Group Ranks")


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    args: _Args = msgspec.field(default_factory=_Args)


class _KinetoDoc(msgspec.Struct):
    trace_events: list[_Event] = msgspec.field(name="traceEvents")
    device_properties: list[dict[str, Any]] | None = msgspec.field(default=None, name="deviceProperties")
    distributed_info: dict[str, Any] | None = msgspec.field(default=None, name="distributedInfo")


class _EtNode(msgspec.Struct, gc=False):
    name: str = ""
    id: int | None = None
    parent: int | None = None
    input_shapes: msgspec.Raw = msgspec.Raw(b"")
    input_types: msgspec.Raw = msgspec.Raw(b"")


class _EtDoc(msgspec.Struct):
    schema: str
    nodes: list[_EtNode]
    pid: Scalar = None


_KINETO = msgspec.json.Decoder(_KinetoDoc | list[_Event])
_ET = msgspec.json.Decoder(_EtDoc)
_KEYS = msgspec.json.Decoder(dict[str, msgspec.Raw])

#: columns of :attr:`KinetoTrace.events` -> dtype
EVENT_SCHEMA: dict[str, pl.DataType] = {
    "cat": pl.String, "name": pl.String, "pid": pl.String, "tid": pl.String,
    "ts_ns": pl.Int64, "dur_ns": pl.Int64, "end_ns": pl.Int64,
    "correlation": pl.Int64, "stream": pl.Int64, "device": pl.Int64,
    "bytes": pl.Int64, "in_msg_nelems": pl.Int64, "out_msg_nelems": pl.Int64, "group_size": pl.Int64,
    "dtype": pl.String, "collective_name": pl.String, "input_dims": pl.String, "input_types": pl.String,
    "in_split": pl.String, "out_split": pl.String, "pg_ranks": pl.String,
}


@dataclass
class KinetoTrace:
    """One rank's profiler trace as a table.

    Attributes:
        source: the file (``archive!member`` for a member of a tar archive).
        rank: ``distributedInfo.rank``, else a rank number in the file name (``rank3``,
            ``worker3``, ``rank-3``), else the order of the inputs.
        world_size: ``distributedInfo.world_size`` (1 when absent).
        devices: ``deviceProperties`` (list of dicts: ``id``, ``name``, ...), possibly empty.
        distributed: the ``distributedInfo`` object (empty when absent).
        base_ts_us: the earliest ``ts`` of a complete event, in microseconds; ``ts_ns`` is relative
            to it.
        events: one row per complete (``ph == "X"``) event; columns :data:`EVENT_SCHEMA`:
            ``ts_ns``/``dur_ns``/``end_ns`` integer nanoseconds; ``args`` fields flattened
            (``correlation``, ``stream``, ``device``, ``bytes``, the NCCL
            message fields, ``input_dims``/``input_types`` as raw JSON text, and the NCCL metadata
            lists ``in_split``/``out_split``/``pg_ranks`` (``In split size``, ``Out split size``,
            ``Process Group Ranks``) as the list's text, e.g. ``[3, 5]`` or Kineto's truncated
            ``[1, 2, ..., ...]``).
        skipped: events not used, by reason (phase other than X, X without ts or dur, X with a
            non-finite, out-of-range or negative time).
        skipped_examples: for the reasons that mean bad data (bad times), the first such event:
            ``"traceEvents[12] 'name' (cat): dur = 1e+18 us"``.
        notes: what was assumed about this trace and why (an unusable ``distributedInfo.rank``
            or ``world_size``: the value used instead and where it came from).
    """

    source: str
    rank: int
    world_size: int
    devices: list[dict[str, Any]]
    distributed: dict[str, Any]
    base_ts_us: float
    events: pl.DataFrame
    skipped: dict[str, int] = field(default_factory=dict)
    skipped_examples: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class ExecutionTrace:
    """A PyTorch execution trace (op graph with shapes, no timings).

    Attributes:
        source: the file.
        rank: a rank number in the file name (``..._3.json``), else None.
        ops: columns ``name``, ``input_dims`` (raw JSON of ``input_shapes``), ``input_types``
            (raw JSON of ``input_types``).
    """

    source: str
    rank: int | None
    ops: pl.DataFrame


# -- bytes from files and archives -------------------------------------------------------------
def _gunzip(data: bytes, label: str) -> bytes:
    try:
        return gzip.decompress(data)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TraceReadError(f"{label}: truncated or corrupt gzip data ({exc}); expected a complete .gz file") from exc


def _is_tar(data: bytes) -> bool:
    return len(data) > 262 and data[257:262] == b"ustar"


def _is_empty_tar(data: bytes) -> bool:
    """An archive without members: only the end-of-archive marker (zero blocks of 512 bytes; POSIX
    ustar, IEEE Std 1003.1 "pax" format)."""
    return len(data) >= 1024 and len(data) % 512 == 0 and not data.strip(b"\0")


_TAR_NAME = re.compile(r"\.(tar|tar\.gz|tgz)$", re.IGNORECASE)


def _tar_members(label: str, data: bytes) -> list[tuple[str, bytes]]:
    """(label, JSON bytes) of the trace files in a tar archive."""
    out: list[tuple[str, bytes]] = []
    others: list[str] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                if not member.isfile():
                    continue
                if not re.search(r"\.json(\.gz)?$", member.name):
                    others.append(member.name)
                    continue
                fh = tar.extractfile(member)
                body = fh.read() if fh else b""
                mlabel = f"{label}!{member.name}"
                out.append((mlabel, _gunzip(body, mlabel) if body[:2] == b"\x1f\x8b" else body))
    except tarfile.TarError as exc:
        raise TraceReadError(f"{label}: truncated or corrupt tar archive ({exc})") from exc
    if not out:
        held = (f"its {len(others)} file(s) ({', '.join(others[:5])}{', ...' if len(others) > 5 else ''}) are not "
                ".json or .json.gz") if others else "it is empty"
        raise TraceReadError(f"{label}: the archive holds no trace file ({held})")
    return out


_TRACE_FILE = re.compile(r"\.(json|json\.gz|tar|tar\.gz|tgz)$", re.IGNORECASE)
SKIPPED_NAME = "not .json, .json.gz, .tar, .tar.gz or .tgz"


def _documents(path: Path, skipped: list[tuple[str, str]] | None = None) -> list[tuple[str, bytes]]:
    """(label, JSON bytes) for every document in ``path`` (file, archive or folder).

    In a folder (searched recursively), files whose names are not those of trace files
    (:data:`_TRACE_FILE`) are not read: each is appended to ``skipped`` as ``(path, reason)``.
    """
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        found = [p for p in files if _TRACE_FILE.search(p.name)]
        if skipped is not None:
            skipped.extend((str(p), SKIPPED_NAME) for p in files if not _TRACE_FILE.search(p.name))
        if not found:
            held = (f"; it holds {len(files)} other file(s): {', '.join(p.name for p in files[:5])}"
                    f"{', ...' if len(files) > 5 else ''}") if files else ""
            raise TraceReadError(f"{path}: folder holds no .json, .json.gz or .tar(.gz) trace files{held}")
        return [doc for p in found for doc in _documents(p)]
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TraceReadError(f"{path}: no such file") from None
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    label = str(path)
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data, label)
    if _is_empty_tar(data):
        raise TraceReadError(f"{label}: the archive holds no trace file (it is empty)")
    if _is_tar(data):
        return _tar_members(label, data)
    if _TAR_NAME.search(path.name) and data[:64].lstrip()[:1] not in (b"{", b"["):  # pre-POSIX tars have no magic
        try:
            with tarfile.open(fileobj=io.BytesIO(data)):
                pass
        except tarfile.TarError:
            raise TraceReadError(f"{label}: not a tar archive (the name says .tar; expected a tar of trace "
                                 "files)") from None
        return _tar_members(label, data)
    return [(label, data)]


# -- decoding --------------------------------------------------------------------------------------
def _where(raw: bytes, exc: Exception) -> str:
    """``line L`` for a msgspec error that names a byte offset."""
    m = re.search(r"\(byte (\d+)\)", str(exc))
    if not m:
        return ""
    line = raw.count(b"\n", 0, int(m.group(1))) + 1
    return f" at line {line}"


# Non-finite numbers, which strict JSON cannot hold but Python's json module writes (NaN, Infinity,
# -Infinity) and numbers beyond the double range (1e400) are read by the lenient path below as these
# finite stand-ins, far outside every range the reader accepts, so they are dropped and counted like
# any other out-of-range time; :func:`_show` prints them back by their meaning.
_STAND_INS: dict[str, float] = {"NaN": 7.0e300, "Infinity": 8.0e300, "-Infinity": -8.0e300}
_SHOW = {v: k for k, v in _STAND_INS.items()}


def _show(value: float) -> str:
    return _SHOW.get(value, f"{value:g}")


def _lenient_float(text: str) -> float:
    v = float(text)
    return v if math.isfinite(v) else _STAND_INS["Infinity" if v > 0 else "-Infinity"]


def _lenient_int(text: str) -> int | float:
    v = int(text)
    return v if abs(v) < 2**63 else _lenient_float(text)


def _needs_lenient(raw: bytes, exc: Exception) -> bool:
    """Whether msgspec failed on a non-finite or out-of-range number (see :data:`_STAND_INS`)."""
    msg = str(exc)
    if "Number out of range" in msg:
        return True
    m = re.search(r"invalid character \(byte (\d+)\)", msg)
    return bool(m) and raw[int(m.group(1)):int(m.group(1)) + 9].startswith((b"NaN", b"Infinity", b"-Infinity"))


def _lenient(raw: bytes) -> bytes:
    """``raw`` re-encoded with non-finite and out-of-range numbers replaced by :data:`_STAND_INS`."""
    obj = json.loads(raw, parse_constant=_STAND_INS.__getitem__, parse_float=_lenient_float, parse_int=_lenient_int)
    return msgspec.json.encode(obj)


def _utf8_error(label: str, raw: bytes) -> TraceReadError | None:
    """The error naming the byte offset (and line) of the first byte of ``raw`` that is not UTF-8
    (None when ``raw`` is valid UTF-8). JSON text is UTF-8 (RFC 8259, section 8.1); offsets of a
    compressed file or archive member count in its decompressed data. Byte, line and column all
    count from 1."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        where = " of the decompressed data" if re.search(r"\.(gz|tgz)($|!)", label) else ""
        return TraceReadError(
            f"{label}: not valid UTF-8 at byte {exc.start + 1}{where} (line {line}, column {col}): byte "
            f"0x{raw[exc.start]:02x} ({exc.reason}); expected UTF-8 JSON text (a damaged file or transfer?)")
    return None


def _lenient_or_error(label: str, raw: bytes) -> bytes:
    """:func:`_lenient`, or the document's JSON syntax error (truncated, malformed) naming ``label``
    and the line and column (Python's ``json`` module reports them)."""
    try:
        return _lenient(raw)
    except json.JSONDecodeError as exc:
        at_end = exc.pos >= len(raw.rstrip()) or (
            exc.msg.startswith("Unterminated string") and b'"' not in raw[exc.pos + 1:])
        if at_end:
            raise TraceReadError(f"{label}: truncated JSON (the file ends inside the document; was the "
                                 "profiler stopped while writing it?)") from None
        raise TraceReadError(f"{label}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:  # e.g. a number of more than 4300 digits
        raise TraceReadError(f"{label}: not valid JSON: {str(exc).splitlines()[0]}") from None


def _decode(label: str, raw: bytes) -> _KinetoDoc | list[_Event] | _EtDoc:
    if not raw.strip():
        raise TraceReadError(f"{label}: empty file; expected a PyTorch profiler trace (JSON)")
    # checked first: msgspec skips the fields it does not read without checking them, and names no
    # position for a bad byte in the fields it reads
    utf8 = _utf8_error(label, raw)
    if utf8 is not None:
        raise utf8
    try:
        return _KINETO.decode(raw)
    except msgspec.ValidationError as exc:  # valid JSON so far, unexpected shape (a DecodeError subclass)
        if _needs_lenient(raw, exc):
            return _decode(label, _lenient_or_error(label, raw))
        kinetoerr = str(exc)
    except msgspec.DecodeError as exc:
        msg = str(exc)
        if "truncated" in msg:
            raise TraceReadError(f"{label}: truncated JSON (the file ends inside the document; was the "
                                 "profiler stopped while writing it?)") from None
        if _needs_lenient(raw, exc):
            return _decode(label, _lenient_or_error(label, raw))
        raise TraceReadError(f"{label}: not valid JSON{_where(raw, exc)}: {msg}") from None
    # msgspec stops at the first value of the wrong type: the rest of the document is not checked yet
    try:
        return _ET.decode(raw)
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError:
        _lenient_or_error(label, raw)  # raises the syntax error, with its line, if there is one
    try:
        keys = sorted(_KEYS.decode(raw))
    except msgspec.DecodeError:
        keys = []
    if "traceEvents" in keys or not keys:
        raise TraceReadError(
            f"{label}: wrong schema for a PyTorch profiler trace: {kinetoerr.replace('$.', '')}") from None
    raise NotATraceError(
        f"{label}: not a PyTorch profiler trace: expected a JSON object with a 'traceEvents' array "
        f"(Kineto/Chrome trace) or 'schema' and 'nodes' (execution trace); found keys {keys[:12]}") from None


def _raw_text(r: msgspec.Raw) -> str | None:
    return bytes(r).decode() if len(r) else None


_STR = msgspec.json.Decoder(str)


def _list_text(r: msgspec.Raw) -> str | None:
    """The text of a list argument: Kineto writes NCCL metadata lists as JSON strings (``"[3, 5]"``,
    truncated after 30 values as ``"[1, ..., 30, ...]"``); a JSON array is kept as its text."""
    if not len(r):
        return None
    raw = bytes(r)
    if raw[:1] == b'"':
        try:
            return _STR.decode(raw)
        except msgspec.DecodeError:
            return None
    return raw.decode()


def _series(name: str, values: list, dtype: pl.DataType) -> pl.Series:
    """A column from decoded values: the fast typed path, else per-value conversion (mixed types,
    e.g. a stream id written as text) with values that do not convert set to null."""
    try:
        if dtype == pl.String:  # ids written as numbers (pid, tid) convert faster as a column
            s = pl.Series(name, values)
            return s if s.dtype == pl.String else s.cast(pl.String)
        return pl.Series(name, values, dtype=dtype)
    except (TypeError, OverflowError, pl.exceptions.PolarsError):
        if dtype == pl.String:
            return pl.Series(name, [None if v is None else str(v) for v in values], dtype=pl.String)
        return pl.Series(name, values, strict=False).cast(dtype, strict=False)


_NS_LIMIT = 9.2e18
"""Largest magnitude (ns) a time may have: int64 holds +-9.22e18 ns (about 292 years)."""
BAD_TIME = "complete event(s) with a non-finite or out-of-range ts/dur (beyond +-9.2e15 us)"
NEGATIVE_DUR = "complete event(s) with a negative dur"


def _kept_positions(events: list[_Event]) -> list[int]:
    """Positions in ``events`` of the rows of the frame :func:`_events_frame` builds (same filters)."""
    return [i for i, e in enumerate(events)
            if e.ph == "X" and e.cat != "Trace" and e.ts is not None and e.dur is not None]


def _example(bad: pl.DataFrame, events: list[_Event], where: str) -> str:
    """``traceEvents[12] 'name' (cat): dur = 1e+18 us`` for the first row of ``bad`` (has ``_row``)."""
    r = bad.row(0, named=True)
    pos = _kept_positions(events)[r["_row"]]
    name = r["name"] if len(r["name"] or "") <= 60 else r["name"][:57] + "..."
    ts_ok = math.isfinite(r["ts"]) and abs(r["ts"] * 1e3) < _NS_LIMIT
    what = f"dur = {_show(r['dur'])} us" if ts_ok else f"ts = {_show(r['ts'])} us"
    return f"{where}[{pos}] {name!r} ({r['cat'] or 'no cat'}): {what}"


def _events_frame(label: str, events: list[_Event], where: str = "traceEvents"
                  ) -> tuple[pl.DataFrame, float, dict[str, int], dict[str, str]]:
    """The complete (``X``) events as a frame of :data:`EVENT_SCHEMA`, the base time (us), the
    events not used by reason, and an example (JSON path ``where[i]``) of each bad-time reason."""
    skipped: dict[str, int] = {}
    examples: dict[str, str] = {}
    phases = pl.Series([e.ph for e in events], dtype=pl.String)
    for ph, n in phases.filter(phases != "X").value_counts().iter_rows():
        skipped[f"phase '{ph}' (not a complete event)"] = n
    xs = [e for e in events if e.ph == "X"]
    # the profiler's own span ("PyTorch Profiler (0)", cat "Trace") is not an event of the program
    spans = [e for e in xs if e.cat == "Trace"]
    if spans:
        skipped["profiler span (cat 'Trace')"] = len(spans)
    xs = [e for e in xs if e.cat != "Trace"]
    incomplete = sum(1 for e in xs if e.ts is None or e.dur is None)
    if incomplete:
        skipped["complete event without ts or dur"] = incomplete
        xs = [e for e in xs if e.ts is not None and e.dur is not None]
    if not xs:
        raise TraceReadError(f"{label}: no complete ('ph': 'X') events with ts and dur; not a profiler trace")
    a = [e.args for e in xs]
    cols = [
        _series("cat", [e.cat for e in xs], pl.String), _series("name", [e.name for e in xs], pl.String),
        _series("pid", [e.pid for e in xs], pl.String), _series("tid", [e.tid for e in xs], pl.String),
        _series("ts", [e.ts for e in xs], pl.Float64), _series("dur", [e.dur for e in xs], pl.Float64),
        _series("correlation", [x.correlation for x in a], pl.Int64),
        _series("stream", [x.stream for x in a], pl.Int64),
        _series("device", [x.device for x in a], pl.Int64),
        _series("bytes", [x.nbytes for x in a], pl.Int64),
        _series("in_msg_nelems", [x.in_msg_nelems for x in a], pl.Int64),
        _series("out_msg_nelems", [x.out_msg_nelems for x in a], pl.Int64),
        _series("group_size", [x.group_size for x in a], pl.Int64),
        _series("dtype", [x.dtype for x in a], pl.String),
        _series("collective_name", [x.collective_name for x in a], pl.String),
        pl.Series("input_dims", [bytes(x.input_dims).decode() if len(x.input_dims) else None for x in a],
                  dtype=pl.String),
        pl.Series("input_types", [bytes(x.input_types).decode() if len(x.input_types) else None for x in a],
                  dtype=pl.String),
        pl.Series("in_split", [_list_text(x.in_split) for x in a], dtype=pl.String),
        pl.Series("out_split", [_list_text(x.out_split) for x in a], dtype=pl.String),
        pl.Series("pg_ranks", [_list_text(x.pg_ranks) for x in a], dtype=pl.String),
    ]
    frame = pl.DataFrame(cols)

    def drop(keep: pl.Expr, reason: str) -> None:
        nonlocal frame
        bad = frame.filter(~keep)
        if bad.height:
            skipped[reason] = skipped.get(reason, 0) + bad.height
            examples.setdefault(reason, _example(bad, events, where))
            frame = frame.filter(keep)

    # times must be finite and fit int64 nanoseconds, also after rebasing (checked in floats)
    in_range = lambda x: x.is_finite() & ((x * 1000.0).abs() < _NS_LIMIT)  # noqa: E731
    frame = frame.with_row_index("_row")
    drop(in_range(c("ts")) & in_range(c("dur")), BAD_TIME)
    if frame.is_empty():
        raise TraceReadError(f"{label}: no complete ('ph': 'X') event has a usable ts and dur "
                             f"({skipped[BAD_TIME]} out of range, e.g. {examples[BAD_TIME]})")
    base = float(frame["ts"].min())
    drop(((c("ts") - base) * 1000.0 + c("dur").abs() * 1000.0) < _NS_LIMIT, BAD_TIME)
    drop(c("dur") >= 0, NEGATIVE_DUR)
    frame = frame.with_columns(
        pl.col("cat").fill_null(""),
        # subtract first (exact for nearby floats), then round to integer nanoseconds
        ts_ns=((pl.col("ts") - base) * 1000.0).round(0).cast(pl.Int64),
        dur_ns=(pl.col("dur") * 1000.0).round(0).cast(pl.Int64),
    ).with_columns(end_ns=pl.col("ts_ns") + pl.col("dur_ns"))
    return frame.select(list(EVENT_SCHEMA)), base, skipped, examples


_RANK_IN_NAME = re.compile(r"(?:rank|worker|trainer)[-_]?(\d+)", re.IGNORECASE)


def _rank_from_name(label: str) -> int | None:
    m = _RANK_IN_NAME.search(Path(label.split("!")[-1]).name)
    return int(m.group(1)) if m else None


def _kineto(label: str, doc: _KinetoDoc | list[_Event]) -> KinetoTrace:
    if isinstance(doc, list):
        events, devices, dist = doc, [], {}
    else:
        events, devices, dist = doc.trace_events, doc.device_properties or [], doc.distributed_info or {}
    frame, base, skipped, examples = _events_frame(label, events, "$" if isinstance(doc, list) else "traceEvents")
    rank, notes = dist.get("rank"), []
    usable = isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0
    if not usable:
        bad = None if "rank" not in dist else rank
        rank = _rank_from_name(label)
        if "rank" in dist:  # completed by read_traces when the input order decides
            notes.append(f"{label}: distributedInfo.rank {bad!r} is not a non-negative integer: "
                         + (f"rank {rank} assumed (from the file name)" if rank is not None else "{input order}"))
    world = dist.get("world_size")
    world_ok = isinstance(world, int) and not isinstance(world, bool) and world > 0
    if "world_size" in dist and not world_ok:
        notes.append(f"{label}: distributedInfo.world_size {world!r} is not a positive integer: 1 assumed")
    return KinetoTrace(
        source=label, rank=-1 if rank is None else rank,
        world_size=world if world_ok else 1,
        devices=[d for d in devices if isinstance(d, dict)], distributed=dist,
        base_ts_us=base, events=frame, skipped=skipped, skipped_examples=examples, notes=notes,
    )


def _execution(label: str, doc: _EtDoc) -> ExecutionTrace:
    ops = pl.DataFrame({
        "name": [n.name for n in doc.nodes],
        "input_dims": [_raw_text(n.input_shapes) for n in doc.nodes],
        "input_types": [_raw_text(n.input_types) for n in doc.nodes],
    }, schema={"name": pl.String, "input_dims": pl.String, "input_types": pl.String})
    m = re.search(r"_(\d+)\.json", label.split("!")[-1])
    return ExecutionTrace(source=label, rank=_rank_from_name(label) if _rank_from_name(label) is not None
                          else (int(m.group(1)) if m else None), ops=ops)


def read_traces(paths: list[str | Path], notes: list[str] | None = None
                ) -> tuple[list[KinetoTrace], list[ExecutionTrace]]:
    """Read every trace document in ``paths`` (files, tar archives, folders).

    In a folder, a file not named like a trace file (``.json``, ``.json.gz``, ``.tar``,
    ``.tar.gz``, ``.tgz``) and a JSON document that is not a profiler or execution trace are
    skipped; one line per skipped file, naming it and the reason, is appended to ``notes``.

    Returns:
        The Kineto traces, one per rank, sorted by rank (ranks missing from both
        ``distributedInfo`` and the file name are numbered in input order after the known ones),
        and the execution traces found among the inputs.

    Raises:
        TraceReadError: a missing, truncated, non-JSON or wrong-schema file (naming it); no Kineto
            trace among the inputs; two traces claiming the same rank; traces of different jobs
            (different world sizes).
    """
    kineto: list[KinetoTrace] = []
    execution: list[ExecutionTrace] = []
    skipped: list[tuple[str, str]] = []
    # decoding creates a few hundred thousand objects without reference cycles: pausing the cyclic
    # garbage collector meanwhile saves its repeated scans (a large part of the parse time)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for path in paths:
            folder = Path(path).is_dir()
            for label, raw in _documents(Path(path), skipped):
                try:
                    doc = _decode(label, raw)
                except NotATraceError as exc:
                    if not folder:
                        raise
                    skipped.append((label, str(exc).removeprefix(f"{label}: ")))
                    continue
                if isinstance(doc, _EtDoc):
                    execution.append(_execution(label, doc))
                else:
                    kineto.append(_kineto(label, doc))
                del doc, raw
    finally:
        if gc_was_enabled:
            gc.enable()
    if notes is not None:
        notes.extend(f"{name}: skipped, {why}" for name, why in skipped)
    if not kineto:
        what = ", ".join(e.source for e in execution) or ", ".join(map(str, paths))
        also = (f" (skipped: {'; '.join(f'{n}: {w}' for n, w in skipped[:5])}{'; ...' if len(skipped) > 5 else ''})"
                if skipped else "")
        raise TraceReadError(f"{what}: no PyTorch profiler (Kineto) trace among the inputs{also}; execution traces "
                             "carry op shapes but no timings, pass them together with the Kineto traces")
    known = {t.rank for t in kineto if t.rank >= 0}
    nxt = max(known, default=-1) + 1
    for t in kineto:
        if t.rank < 0:
            t.rank, nxt = nxt, nxt + 1
            t.notes = [n.replace("{input order}", f"rank {t.rank} assumed (input order, after the ranks the "
                                                  "other traces name)") for n in t.notes]
    seen: dict[int, str] = {}
    for t in kineto:
        if t.rank in seen:
            raise TraceReadError(
                f"{t.source}: rank {t.rank} is also claimed by {seen[t.rank]}; pass one trace per rank")
        seen[t.rank] = t.source
    worlds = {t.world_size for t in kineto}
    if len(worlds) > 1:
        detail = ", ".join(f"{t.source}: {t.world_size}" for t in kineto)
        raise TraceReadError(f"traces of different jobs (world sizes differ: {detail}); pass the traces of one job")
    return sorted(kineto, key=lambda t: t.rank), execution
