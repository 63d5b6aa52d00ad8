"""OpenTelemetry trace exports (OTLP JSON) as RPC logs: a client span and its server span per RPC.

Input: the OTLP/JSON encoding of ``ExportTraceServiceRequest`` (OpenTelemetry protocol
specification, "OTLP/JSON"; the collector's file exporter writes one request per line, an SDK's
exporter one document): ``resourceSpans[].resource.attributes``, ``resourceSpans[].scopeSpans[]
.spans[]`` with ``traceId``/``spanId``/``parentSpanId`` (hex; base64 accepted), ``kind``
(``2``/``SPAN_KIND_SERVER``, ``3``/``SPAN_KIND_CLIENT``), ``startTimeUnixNano``/``endTimeUnixNano``
(ns, string or number), ``attributes`` (``{"key", "value": {"stringValue"|"intValue"|...}}``) and
``events`` (``timeUnixNano``, ``name``, ``attributes``).

Join: a server span belongs to the client span whose ``spanId`` is its ``parentSpanId`` within the
same ``traceId`` (the gRPC client/server instrumentations propagate context this way). Ids are
compared normalised (:func:`_norm_id`: hex in any case, leading zeros or not, or base64), and trace
ids by their low 64 bits, so a 64-bit trace id on one side (Zipkin/B3 style, or zero-padded) meets
the 128-bit one on the other (a note counts such joins). Unmatched
client or server spans, and second server spans under one client span, are rejected rows.

Timestamps (each on its span's host clock). Events named ``ddlscope.*`` give exact stage bounds;
without them the RPC semantic conventions' ``message`` events (``message.type`` = ``SENT`` /
``RECEIVED``) are used, and without those the span bounds, the missing stage becoming 0:

=====================  ==========================================================================
column                 source, first that exists
=====================  ==========================================================================
client_issue_ns        client span start
client_send_start_ns   client event ``ddlscope.send_start``; span start
client_send_end_ns     client event ``ddlscope.send_end``; first ``message`` SENT; send start
client_recv_end_ns     client event ``ddlscope.recv_end``; last ``message`` RECEIVED; span end
client_done_ns         client span end
server_recv_start_ns   server span start
server_recv_end_ns     server event ``ddlscope.recv_end``; first ``message`` RECEIVED; span start
server_proc_start_ns   server event ``ddlscope.proc_start``; receive end
server_proc_end_ns     server event ``ddlscope.proc_end``; last ``message`` SENT; span end
server_send_end_ns     server span end
=====================  ==========================================================================

Other columns: every span attribute by its key (client span first; ``ddlscope.`` prefixes
stripped, so ``ddlscope.worker_id`` is ``worker_id``), resource attributes as
``client.resource.<key>`` / ``server.resource.<key>``, ``trace_id``, ``client_span_id``,
``server_span_id`` and ``rpc_name`` (the client span's name). Where no attribute (or mapping) gives
them: ``rpc_id`` = the client span id's low 63 bits; ``request_bytes`` / ``response_bytes`` = the
sum of ``message.uncompressed_size`` (else ``message.compressed_size``) of the client's SENT /
RECEIVED events; ``worker_id`` = the client resource's ``service.instance.id`` (else
``host.name``); ``server_id`` likewise from the server resource; ``connection_id`` = the server
span's ``network.peer.address:network.peer.port`` (else ``client.address:client.port``). Each
default used is listed in the notes. ``iteration`` and ``op`` have no default: give them as
attributes or map them (``--map rpc.method=op --op-map Pull=pull_dense``).
"""

from __future__ import annotations

import base64
import binascii
import gc
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl

from ddlscope.rpc.validate import REJECTED_SCHEMA, ColumnMapping

SPAN_KIND_SERVER = 2
SPAN_KIND_CLIENT = 3
_KINDS = {"SPAN_KIND_SERVER": SPAN_KIND_SERVER, "SPAN_KIND_CLIENT": SPAN_KIND_CLIENT,
          "SERVER": SPAN_KIND_SERVER, "CLIENT": SPAN_KIND_CLIENT}
_SPANS_KEYS = {"resourceSpans", "resource_spans"}
_SPAN_ID_LINE = re.compile(r'"span_?[iI]d"\s*:\s*"([^"]+)"')
_HEX_ID = re.compile(r"[0-9a-fA-F]+")
_HEX_SPAN_ID = re.compile(r"[0-9a-f]{1,16}")


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a file's spans become millions of small dicts
    and lists (none of them in reference cycles). Otherwise every generation-0 threshold of new
    containers triggers a collection, and the older generations' scans grow with the heap, so
    parsing time grows faster than the file: at 50,000 RPCs (193 MB) the reader took twice as long
    with the collector running. Reference counting still frees everything; the collector is
    restored (if it was on) even when reading fails.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


TRACE_ID_BYTES = 16
"""A W3C / OpenTelemetry trace id: 16 bytes (32 hex digits)."""
SPAN_ID_BYTES = 8
"""A span id: 8 bytes (16 hex digits)."""


def _norm_id(value: Any, size: int = SPAN_ID_BYTES) -> str:
    """An id as lower-case hex zero-padded to ``size`` bytes, whichever way it is written: hex in
    either case and with or without leading zeros (OTLP/JSON; Zipkin and B3 also write 64-bit
    trace ids as 16 hex digits), or base64 of the 8 or 16 id bytes (protobuf's JSON mapping of
    ``bytes``, with or without padding). Anything else is returned as given (it then only matches
    itself)."""
    if value is None or value == "" or isinstance(value, bool):
        return ""
    s = str(value).strip()
    if _HEX_ID.fullmatch(s) and len(s) <= 2 * size:
        return s.lower().rjust(2 * size, "0")
    if _HEX_ID.fullmatch(s) and len(s) <= 32 and int(s, 16) < 1 << (8 * size):  # zero-padded beyond its size
        return f"{int(s, 16):0{2 * size}x}"
    try:
        raw = base64.b64decode(s + "=" * (-len(s) % 4), validate=True)
    except (binascii.Error, ValueError):
        return s
    if len(raw) in (SPAN_ID_BYTES, TRACE_ID_BYTES) and int.from_bytes(raw, "big") < 1 << (8 * size):
        return f"{int.from_bytes(raw, 'big'):0{2 * size}x}"
    return s


def _trace_key(trace: str) -> str:
    """The join key of a normalised trace id: its low 64 bits (the last 16 hex digits), so that a
    64-bit (or zero-padded) trace id on one side meets the 128-bit id on the other, as
    OpenTelemetry's Zipkin/B3 interoperability does (the high 64 bits are zero there)."""
    return trace[-16:] if len(trace) == 2 * TRACE_ID_BYTES and _HEX_ID.fullmatch(trace) else trace


def _any_value(v: Any) -> Any:
    """An OTLP ``AnyValue`` as a Python value."""
    if not isinstance(v, dict):
        return v
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return _int_or_raw(v["intValue"])
    if "doubleValue" in v:
        try:
            return float(v["doubleValue"])
        except (TypeError, ValueError):
            return v["doubleValue"]  # kept as given: a schema column then rejects it as a bad value
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "arrayValue" in v:
        arr = v["arrayValue"]
        return [_any_value(x) for x in _as_list(arr.get("values") if isinstance(arr, dict) else None)]
    if "kvlistValue" in v:
        kvs = v["kvlistValue"]
        return json.dumps({str(kv["key"]): _any_value(kv.get("value"))
                           for kv in _as_list(kvs.get("values") if isinstance(kvs, dict) else None)
                           if isinstance(kv, dict) and "key" in kv}, default=str)
    if "bytesValue" in v:
        return v["bytesValue"]
    return None


def _int_or_raw(v: Any) -> Any:
    """An OTLP ``intValue`` (a decimal string or a number) as an int; a value that is not an
    integer (``"nan"``, ``1e400``) is kept as given, so that a schema column rejects it as a bad
    value rather than the whole file failing."""
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return v


def _as_list(x: Any) -> list:
    """An OTLP repeated field as a list: a list as it is, nothing (``null``, missing, empty, 0) as
    ``[]``, any other single value as a one-element list (a span written without its array)."""
    if isinstance(x, list):
        return x
    return [x] if x else []


def _attrs(items: Any) -> dict[str, Any]:
    return {str(kv["key"]): _any_value(kv.get("value")) for kv in _as_list(items)
            if isinstance(kv, dict) and "key" in kv}


def _kind(value: Any) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return int(value) if value.isdigit() else _KINDS.get(value.upper())
    return None


def _strip(key: str) -> str:
    return key.removeprefix("ddlscope.")


def _documents(path: Path) -> tuple[list[tuple[dict, int | None]], list[tuple[int, str]], dict[str, int]]:
    """(documents with their line for JSON lines, unparseable lines, span id -> line)."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ValueError(f"{path}: not UTF-8 text at line {line} (byte {exc.start}): OTLP JSON is UTF-8; the file is "
                         "damaged or not a JSON export") from None
    lines = text.splitlines()
    span_line: dict[str, int] = {}
    for i, ln in enumerate(lines, start=1):
        for m in _SPAN_ID_LINE.finditer(ln):
            span_line.setdefault(_norm_id(m.group(1)), i)
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError(f"{path}: expected an OTLP JSON object with resourceSpans, got {type(doc).__name__}")
        return [(doc, None)], [], span_line
    except json.JSONDecodeError as exc:
        whole_error = exc
    docs, bad = [], []
    for i, ln in enumerate(lines, start=1):
        if not ln.strip():
            continue
        try:
            doc = json.loads(ln)
        except json.JSONDecodeError as exc:
            bad.append((i, f"not JSON: {exc.msg} at column {exc.colno}"))
            continue
        if isinstance(doc, dict):
            docs.append((doc, i))
        else:
            bad.append((i, f"expected an OTLP JSON object, got {type(doc).__name__}"))
    if text.strip() and not any(_SPANS_KEYS & d.keys() for d, _ in docs):
        # neither one document nor JSON lines of requests: a broken (e.g. truncated) document
        e = whole_error
        raise ValueError(f"{path}: not valid JSON (truncated?) at line {e.lineno}, column {e.colno}: {e.msg}")
    return docs, bad, span_line


def _spans(docs: list[tuple[dict, int | None]], span_line: dict[str, int],
           ) -> tuple[list[dict], int, list[tuple[int, str, str]]]:
    """(CLIENT and SERVER spans, count of other spans, malformed elements as rejected rows)."""
    out, other = [], 0
    malformed: list[tuple[int, str, str]] = []
    for doc, doc_line in docs:
        line = doc_line if doc_line is not None else 1
        for i, rs in enumerate(_as_list(doc.get("resourceSpans", doc.get("resource_spans")))):
            if not isinstance(rs, dict):
                malformed.append((line, "malformed_span", f"resourceSpans[{i}]: expected an object, got "
                                  f"{type(rs).__name__}"))
                continue
            resource = rs.get("resource")
            res = _attrs(resource.get("attributes") if isinstance(resource, dict) else None)
            scopes = _as_list(rs.get("scopeSpans", rs.get("scope_spans", rs.get("instrumentationLibrarySpans"))))
            for j, ss in enumerate(scopes):
                if not isinstance(ss, dict):
                    malformed.append((line, "malformed_span", f"resourceSpans[{i}].scopeSpans[{j}]: expected an "
                                      f"object, got {type(ss).__name__}"))
                    continue
                for k, sp in enumerate(_as_list(ss.get("spans"))):
                    if not isinstance(sp, dict):
                        malformed.append((line, "malformed_span", f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]: "
                                          f"expected an object, got {type(sp).__name__}"))
                        continue
                    kind = _kind(sp.get("kind"))
                    if kind not in (SPAN_KIND_CLIENT, SPAN_KIND_SERVER):
                        other += 1
                        continue
                    sid = _norm_id(sp.get("spanId", sp.get("span_id")))
                    events = [(_to_int(e.get("timeUnixNano", e.get("time_unix_nano"))), str(e.get("name", "")),
                               _attrs(e.get("attributes"))) for e in _as_list(sp.get("events")) if isinstance(e, dict)]
                    out.append({
                        "kind": kind, "trace": _norm_id(sp.get("traceId", sp.get("trace_id")), TRACE_ID_BYTES),
                        "span": sid,
                        "parent": _norm_id(sp.get("parentSpanId", sp.get("parent_span_id"))),
                        "name": sp.get("name", ""),
                        "start": _to_int(start := sp.get("startTimeUnixNano", sp.get("start_time_unix_nano"))),
                        "end": _to_int(end := sp.get("endTimeUnixNano", sp.get("end_time_unix_nano"))),
                        "start_raw": _raw_time(start), "end_raw": _raw_time(end),
                        "attrs": _attrs(sp.get("attributes")), "resource": res,
                        "events": sorted((e for e in events if e[0] is not None), key=lambda e: e[0]),
                        "line": doc_line if doc_line is not None else span_line.get(sid, 1),
                    })
    return out, other, malformed


def _raw_time(v: Any) -> Any:
    """A span time as given when it is not an integer (kept so the row is rejected as a bad value
    rather than a missing timestamp), else None."""
    return v if v not in (None, "") and _to_int(v) is None else None


def _to_int(v: Any) -> int | None:
    if v is None or v == "":
        return None
    if isinstance(v, bool):
        return None
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return None


def _event(events: list, name: str) -> int | None:
    return next((t for t, n, _ in events if n == name), None)


def _message(events: list, mtype: str, last: bool = False) -> int | None:
    times = [t for t, n, a in events if n == "message" and str(a.get("message.type", "")).upper() == mtype]
    return (times[-1] if last else times[0]) if times else None


def _message_bytes(events: list, mtype: str) -> int | None:
    sizes = [a.get("message.uncompressed_size", a.get("message.compressed_size")) for t, n, a in events
             if n == "message" and str(a.get("message.type", "")).upper() == mtype]
    sizes = [s for s in sizes if isinstance(s, int)]
    return sum(sizes) if sizes else None


def _first(*values: Any) -> tuple[Any, int]:
    """The first non-None value and its position (the fallback level used)."""
    for i, v in enumerate(values):
        if v is not None:
            return v, i
    return None, len(values)


def read_otlp_raw(path: Path, mapping: ColumnMapping | None = None,
                  ) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """One OTLP JSON file as a raw RPC table (see the module docstring for the columns).

    Args:
        path: an OTLP JSON document, or JSON lines of documents (collector file exporter).
        mapping: the user's column mapping; a default (e.g. ``worker_id`` from the resource) is
            derived only for schema columns no attribute or mapping target provides.

    Returns:
        ``(raw, rejected, notes)``: one row per matched client/server span pair with
        ``log_file``/``log_line`` (the line of the client span's ``spanId``, or of its document in
        JSON lines); rejected spans and lines (:data:`~ddlscope.rpc.validate.REJECTED_SCHEMA`);
        notes on defaults and fallbacks used.

    Raises:
        ValueError: the file is JSON but not an OTLP object; it is not valid JSON (e.g. a
            truncated document; the message gives the line); or it holds no CLIENT or SERVER span.
    """
    with _gc_paused():
        return _read_otlp_raw(path, mapping or ColumnMapping())


def _read_otlp_raw(path: Path, mapping: ColumnMapping) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """:func:`read_otlp_raw`'s work (with the collector paused)."""
    docs, bad_lines, span_line = _documents(path)
    spans, other, malformed = _spans(docs, span_line)
    if not spans and docs and not malformed:
        raise ValueError(f"{path}: no spans in the file" + (
            f" ({other:,} span(s) of kinds other than CLIENT and SERVER)" if other else "")
            + (f"; {len(bad_lines):,} line(s) not JSON, the first at line {bad_lines[0][0]}" if bad_lines else ""))
    rejected: list[tuple[int, str, str]] = [(ln, "unparseable_line", d) for ln, d in bad_lines] + malformed
    clients: list[dict] = []
    client_keys: set[tuple[str, str]] = set()
    for c in (s for s in spans if s["kind"] == SPAN_KIND_CLIENT):
        key = (_trace_key(c["trace"]), c["span"])
        if key in client_keys:  # the same client span twice (e.g. a concatenation of exports)
            rejected.append((c["line"], "duplicate_client_span", f"traceId={c['trace']} spanId={c['span']}"))
            continue
        client_keys.add(key)
        clients.append(c)
    servers: dict[tuple[str, str], list[dict]] = {}
    for s in spans:
        if s["kind"] == SPAN_KIND_SERVER:
            servers.setdefault((_trace_key(s["trace"]), s["parent"]), []).append(s)
    matched_keys = set()
    rows: list[dict[str, Any]] = []
    fallback_counts: dict[str, int] = {}
    low_64 = 0
    for c in clients:
        key = (_trace_key(c["trace"]), c["span"])
        cands = sorted(servers.get(key, []), key=lambda s: (s["start"] is None, s["start"] or 0))
        if not cands:
            rejected.append((c["line"], "unmatched_client_span", f"traceId={c['trace']} spanId={c['span']} "
                             f"name={c['name']}"))
            continue
        matched_keys.add(key)
        s = cands[0]
        low_64 += s["trace"] != c["trace"]
        for extra in cands[1:]:
            rejected.append((extra["line"], "duplicate_server_span",
                             f"traceId={extra['trace']} spanId={extra['span']} parentSpanId={extra['parent']}"))
        ce, se = c["events"], s["events"]
        send_start, fb1 = _first(_event(ce, "ddlscope.send_start"), c["start"])
        send_end, fb2 = _first(_event(ce, "ddlscope.send_end"), _message(ce, "SENT"), send_start)
        recv_end, fb3 = _first(_event(ce, "ddlscope.recv_end"), _message(ce, "RECEIVED", last=True), c["end"])
        s_recv_end, fb4 = _first(_event(se, "ddlscope.recv_end"), _message(se, "RECEIVED"), s["start"])
        proc_start, fb5 = _first(_event(se, "ddlscope.proc_start"), s_recv_end)
        proc_end, fb6 = _first(_event(se, "ddlscope.proc_end"), _message(se, "SENT", last=True), s["end"])
        for col, level, labels in (
            ("client_send_start_ns", fb1, ("", "span start")),
            ("client_send_end_ns", fb2, ("", "message SENT event", "send start")),
            ("client_recv_end_ns", fb3, ("", "last message RECEIVED event", "span end")),
            ("server_recv_end_ns", fb4, ("", "message RECEIVED event", "span start")),
            ("server_proc_start_ns", fb5, ("", "receive end")),
            ("server_proc_end_ns", fb6, ("", "last message SENT event", "span end")),
        ):
            if 0 < level < len(labels):
                k = f"{col} from the {labels[level]}"
                fallback_counts[k] = fallback_counts.get(k, 0) + 1
        row: dict[str, Any] = {}
        for k, v in s["attrs"].items():
            row[_strip(k)] = v
        for k, v in c["attrs"].items():  # the client span wins where both carry a key
            row[_strip(k)] = v
        row.update({f"client.resource.{k}": v for k, v in c["resource"].items()})
        row.update({f"server.resource.{k}": v for k, v in s["resource"].items()})
        row["_server_attrs"] = s["attrs"]
        row["_client_events"] = ce
        row.update({
            "trace_id": c["trace"], "client_span_id": c["span"], "server_span_id": s["span"], "rpc_name": c["name"],
            "client_issue_ns": _first(c["start"], c["start_raw"])[0], "client_send_start_ns": send_start,
            "client_send_end_ns": send_end, "client_recv_end_ns": recv_end,
            "client_done_ns": _first(c["end"], c["end_raw"])[0],
            "server_recv_start_ns": _first(s["start"], s["start_raw"])[0], "server_recv_end_ns": s_recv_end,
            "server_proc_start_ns": proc_start, "server_proc_end_ns": proc_end,
            "server_send_end_ns": _first(s["end"], s["end_raw"])[0],
            "log_line": c["line"],
        })
        rows.append(row)
    for (trace, parent), group in servers.items():
        if (trace, parent) not in matched_keys:
            for s in group:
                rejected.append((s["line"], "unmatched_server_span",
                                 f"traceId={s['trace']} spanId={s['span']} parentSpanId={parent or '(none)'}"))
    rows = _reject_non_unicode(rows, rejected)
    notes = _defaults(rows, mapping)
    for row in rows:
        row.pop("_server_attrs")
        row.pop("_client_events")
    notes += [f"{n} of {len(rows)} RPCs: {k} (no ddlscope.* event)" for k, n in sorted(fallback_counts.items())]
    if low_64:
        notes.append(f"{low_64} server span(s) joined to their client span by the low 64 bits of the trace id (the "
                     "two sides write it with different widths, e.g. 64 and 128 bits)")
    if other:
        notes.append(f"{other} span(s) neither CLIENT nor SERVER ignored")
    raw = _frame(rows).with_columns(pl.lit(str(path)).alias("log_file"), pl.col("log_line").cast(pl.Int64))
    rej = pl.DataFrame({"log_file": [str(path)] * len(rejected), "log_line": [r[0] for r in rejected],
                        "reason": [r[1] for r in rejected], "detail": [_printable(r[2]) for r in rejected]},
                       schema=REJECTED_SCHEMA)
    return raw, rej, notes


def _defaults(rows: list[dict[str, Any]], mapping: ColumnMapping) -> list[str]:
    """Fill schema columns no attribute or mapping provides (in place); notes naming each default."""
    provided = set(mapping.columns.values())
    notes: list[str] = []

    def needs(col: str) -> bool:
        return col not in provided and not any(col in r for r in rows)

    def fill(col: str, how: str, fn) -> None:
        if not rows or not needs(col):
            return
        n = 0
        for r in rows:
            v = fn(r)
            if v is not None:
                r[col] = v
                n += 1
        if n:
            notes.append(f"{col} of {n} RPCs from {how}")

    fill("rpc_id", "the client span id (low 63 bits)", lambda r: int(r["client_span_id"], 16) & ((1 << 63) - 1)
         if _HEX_SPAN_ID.fullmatch(r["client_span_id"]) else None)
    fill("request_bytes", "the client's message SENT events", lambda r: _message_bytes(r["_client_events"], "SENT"))
    fill("response_bytes", "the client's message RECEIVED events",
         lambda r: _message_bytes(r["_client_events"], "RECEIVED"))
    fill("worker_id", "the client resource's service.instance.id / host.name",
         lambda r: r.get("client.resource.service.instance.id", r.get("client.resource.host.name")))
    fill("server_id", "the server resource's service.instance.id / host.name",
         lambda r: r.get("server.resource.service.instance.id", r.get("server.resource.host.name")))

    def peer(r: dict[str, Any]) -> str | None:
        a = r["_server_attrs"]
        for host, port in (("network.peer.address", "network.peer.port"), ("client.address", "client.port"),
                           ("net.sock.peer.addr", "net.sock.peer.port")):
            if host in a and port in a:
                return f"{a[host]}:{a[port]}"
        return None

    fill("connection_id", "the server span's peer address:port", peer)
    return notes


def _not_unicode(v: Any) -> bool:
    """A text with an unpaired UTF-16 surrogate, which JSON's ``\\uD800`` escape can write and no
    UTF-8 text holds (RFC 8259, section 8.2: such strings are not Unicode)."""
    if not isinstance(v, str) or v.isascii():
        return False
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _printable(v: str) -> str:
    """``v`` with unpaired surrogates written as ``\\udXXX`` escapes (a detail must be UTF-8 text)."""
    return v.encode("utf-8", "backslashreplace").decode("utf-8")


def _reject_non_unicode(rows: list[dict[str, Any]], rejected: list[tuple[int, str, str]]) -> list[dict[str, Any]]:
    """``rows`` without the RPCs that hold a non-Unicode key or text value (:func:`_not_unicode`), each of
    those appended to ``rejected`` as ``bad_value`` with the field that holds it."""
    kept = []
    for row in rows:
        bad = next((k for k, v in row.items() if not k.startswith("_") and (_not_unicode(k) or _not_unicode(v))),
                   None)
        if bad is None:
            kept.append(row)
        else:
            rejected.append((row["log_line"], "bad_value", f"{bad!a}: a text with an unpaired UTF-16 surrogate "
                             "escape (e.g. \\ud800) is not Unicode (RFC 8259, section 8.2)"))
    return kept


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    if not rows:
        return pl.DataFrame(schema={"log_line": pl.Int64})
    keys: dict[str, None] = {}
    for r in rows:
        keys.update(dict.fromkeys(r))
    columns: dict[str, pl.Series] = {}
    for k in keys:
        values = [r.get(k) for r in rows]
        try:
            columns[k] = pl.Series(k, values, strict=True)
        except (TypeError, pl.exceptions.PolarsError, OverflowError):
            # values of clashing types across spans: keep them as text
            columns[k] = pl.Series(k, [None if v is None else str(v) for v in values], dtype=pl.String)
    return pl.DataFrame(columns)
