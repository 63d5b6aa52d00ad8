"""Export a run's RPC log as OpenTelemetry spans in OTLP JSON (``ExportTraceServiceRequest``).

Encoding per the OTLP specification's JSON mapping (opentelemetry.io/docs/specs/otlp, "JSON
Protobuf Encoding"): ``traceId``/``spanId``/``parentSpanId`` are lower-case hex (32 and 16
digits), ``kind`` is the integer enum (1 INTERNAL, 2 SERVER, 3 CLIENT), 64-bit integers
(``startTimeUnixNano``, ``intValue``) are decimal strings.

Structure:

* one ``resourceSpans`` entry per process, resource attributes ``service.name``
  (``ddlscope-ps-worker`` / ``ddlscope-ps-server``), ``service.instance.id`` (``worker-0``,
  ``server-1``), ``host.name``;
* one trace per worker iteration: an INTERNAL root span ``iteration`` on the worker
  (``iteration_start_ns`` .. ``iteration_end_ns``, attribute ``ddlscope.loss``);
* per RPC a CLIENT span (child of the iteration span, ``client_issue_ns`` .. ``client_done_ns``)
  and a SERVER span (child of the client span, ``server_recv_start_ns`` .. ``server_send_end_ns``),
  named ``ddlscope.ps.ParameterServer/PullSparse`` etc., with the RPC semantic-convention
  attributes ``rpc.system`` = grpc, ``rpc.service``, ``rpc.method``;
* the inner timestamps as span events: client ``ddlscope.send_start``, ``ddlscope.send_end``,
  ``ddlscope.recv_end``; server ``ddlscope.recv_end``, ``ddlscope.proc_start``,
  ``ddlscope.proc_end`` (the names ``ddlscope rpc`` reads), plus the RPC ``message`` events of
  the OpenTelemetry gRPC instrumentations (``message.type`` SENT/RECEIVED, ``message.id``,
  ``message.uncompressed_size``) at send end / receive end on each side;
* the other log columns as attributes ``ddlscope.<column>``: on both spans ``rpc_id``,
  ``worker_id``, ``server_id``, ``connection_id``, ``iteration``, ``op``, ``request_bytes``,
  ``response_bytes``, ``num_keys``, ``table_id``; on the client span ``connection_event``,
  ``client_connect_start_ns``, ``client_connect_end_ns``, ``client_host``, ``server_host``; on
  the server span ``server_thread``, ``server_dispatch_ns``, ``server_handler_start_ns``,
  ``server_call_end_ns`` - so the
  log can be rebuilt from the spans without loss (``keys`` excepted).

Ids: trace = ``run id (16 hex) + worker (8 hex) + iteration (8 hex)``; client span = ``2 * rpc_id
+ 1``, server span = ``2 * rpc_id + 2``, iteration span = ``2^62 + worker * 2^32 + iteration``
(16 hex each).
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import polars as pl

from ddlscope.pstrain import wire
from ddlscope.rpc.schema import OPS

KIND_INTERNAL, KIND_SERVER, KIND_CLIENT = 1, 2, 3
SCOPE = {"name": "ddlscope.pstrain", "version": "1"}

_SHARED = ("rpc_id", "worker_id", "server_id", "connection_id", "iteration", "op", "request_bytes", "response_bytes",
           "num_keys", "table_id")
_CLIENT_ATTRS = ("connection_event", "client_connect_start_ns", "client_connect_end_ns", "client_host", "server_host")
_SERVER_ATTRS = ("server_thread", "server_dispatch_ns", "server_handler_start_ns", "server_call_end_ns")
_CLIENT_EVENTS = (("ddlscope.send_start", "client_send_start_ns"), ("ddlscope.send_end", "client_send_end_ns"),
                  ("ddlscope.recv_end", "client_recv_end_ns"))
_SERVER_EVENTS = (("ddlscope.recv_end", "server_recv_end_ns"), ("ddlscope.proc_start", "server_proc_start_ns"),
                  ("ddlscope.proc_end", "server_proc_end_ns"))


def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": str(v)}


def _attrs(pairs: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in pairs.items() if v is not None]


def _hex16(n: int) -> str:
    return f"{n:016x}"


def _message_event(t_ns: int, kind: str, size: int) -> dict[str, Any]:
    return {"timeUnixNano": str(t_ns), "name": "message",
            "attributes": _attrs({"message.type": kind, "message.id": 1, "message.uncompressed_size": size})}


def _events(row: dict[str, Any], names: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    return [{"timeUnixNano": str(row[col]), "name": name} for name, col in names]


def otlp_traces(log: pl.DataFrame, iterations: pl.DataFrame, run_id: str | None = None) -> dict[str, Any]:
    """The ``ExportTraceServiceRequest`` (as a dict) of a run.

    Args:
        log: the joined RPC log (:func:`ddlscope.pstrain.logs.join_rpc_rows`).
        iterations: the workers' iteration table (:data:`ddlscope.pstrain.logs.ITERATIONS`).
        run_id: 16 hex digits that make trace ids unique across runs (random if None).
    """
    run_id = run_id or secrets.token_hex(8)
    cols = set(log.columns)
    hosts: dict[tuple[str, int], str] = {}
    if "client_host" in cols:
        hosts.update({("ddlscope-ps-worker", w): h for w, h in log.select("worker_id", "client_host").unique().rows()})
    if "server_host" in cols:
        hosts.update({("ddlscope-ps-server", s): h for s, h in log.select("server_id", "server_host").unique().rows()})
    by_resource: dict[tuple[str, int], list[dict[str, Any]]] = {}

    def trace_id(worker: int, iteration: int) -> str:
        return f"{run_id}{worker:08x}{iteration:08x}"

    def iteration_span_id(worker: int, iteration: int) -> str:
        return _hex16((1 << 62) + (worker << 32) + iteration)

    for it in iterations.iter_rows(named=True):
        span = {
            "traceId": trace_id(it["worker_id"], it["iteration"]),
            "spanId": iteration_span_id(it["worker_id"], it["iteration"]),
            "name": "iteration", "kind": KIND_INTERNAL,
            "startTimeUnixNano": str(it["iteration_start_ns"]), "endTimeUnixNano": str(it["iteration_end_ns"]),
            "attributes": _attrs({"ddlscope.worker_id": it["worker_id"], "ddlscope.iteration": it["iteration"],
                                  "ddlscope.loss": it["loss"], "ddlscope.samples": it["samples"],
                                  "ddlscope.pull_end_ns": it["pull_end_ns"],
                                  "ddlscope.compute_end_ns": it["compute_end_ns"]}),
        }
        by_resource.setdefault(("ddlscope-ps-worker", it["worker_id"]), []).append(span)
    for r in log.iter_rows(named=True):
        op = OPS.index(str(r["op"]))
        method = wire.METHOD_NAMES[op]
        common = {"rpc.system": "grpc", "rpc.service": wire.SERVICE, "rpc.method": method,
                  "rpc.grpc.status_code": 0}
        shared = {f"ddlscope.{c}": (str(r[c]) if c == "op" else r[c]) for c in _SHARED if c in cols}
        tid = trace_id(r["worker_id"], r["iteration"])
        client_id, server_id = _hex16(2 * r["rpc_id"] + 1), _hex16(2 * r["rpc_id"] + 2)
        client = {
            "traceId": tid, "spanId": client_id,
            "parentSpanId": iteration_span_id(r["worker_id"], r["iteration"]),
            "name": f"{wire.SERVICE}/{method}", "kind": KIND_CLIENT,
            "startTimeUnixNano": str(r["client_issue_ns"]), "endTimeUnixNano": str(r["client_done_ns"]),
            "attributes": _attrs({**common, "server.address": r.get("server_host"), **shared,
                                  **{f"ddlscope.{c}": (None if r[c] is None else str(r[c]) if c == "connection_event"
                                                       else r[c]) for c in _CLIENT_ATTRS if c in cols}}),
            "events": [*_events(r, _CLIENT_EVENTS),
                       _message_event(r["client_send_end_ns"], "SENT", r["request_bytes"]),
                       _message_event(r["client_recv_end_ns"], "RECEIVED", r["response_bytes"])],
            "status": {"code": 1},
        }
        server = {
            "traceId": tid, "spanId": server_id, "parentSpanId": client_id,
            "name": f"{wire.SERVICE}/{method}", "kind": KIND_SERVER,
            "startTimeUnixNano": str(r["server_recv_start_ns"]), "endTimeUnixNano": str(r["server_send_end_ns"]),
            "attributes": _attrs({**common, **shared,
                                  **{f"ddlscope.{c}": r[c] for c in _SERVER_ATTRS if c in cols}}),
            "events": [*_events(r, _SERVER_EVENTS),
                       _message_event(r["server_recv_end_ns"], "RECEIVED", r["request_bytes"]),
                       _message_event(r["server_send_end_ns"], "SENT", r["response_bytes"])],
            "status": {"code": 1},
        }
        by_resource.setdefault(("ddlscope-ps-worker", r["worker_id"]), []).append(client)
        by_resource.setdefault(("ddlscope-ps-server", r["server_id"]), []).append(server)
    resource_spans = []
    for (service, idx), spans in sorted(by_resource.items()):
        instance = f"{'worker' if service.endswith('worker') else 'server'}-{idx}"
        resource = _attrs({"service.name": service, "service.instance.id": instance,
                           "host.name": hosts.get((service, idx))})
        resource_spans.append({"resource": {"attributes": resource},
                               "scopeSpans": [{"scope": SCOPE, "spans": spans}]})
    return {"resourceSpans": resource_spans}


def write_otlp_json(path: Path, log: pl.DataFrame, iterations: pl.DataFrame, run_id: str | None = None) -> Path:
    """Write :func:`otlp_traces` to ``path`` (one JSON document); returns the path."""
    path = Path(path)
    path.write_text(json.dumps(otlp_traces(log, iterations, run_id)))
    return path
