"""OTLP JSON exports of a gRPC parameter-server client/server pair parse into RPC rows.

Fixtures (tests/rpc/data, written by hand following the OTLP/JSON encoding of
ExportTraceServiceRequest):

- ``grpc_ps_ddlscope.otlp.json``: an SDK export (one document) of a worker and a PS process
  instrumented with gRPC OpenTelemetry plus ddlscope attributes and events; the PS host's clock is
  2.5 s ahead of the worker's. Two complete RPCs, a client span whose server span was not exported,
  a server span without its client, a second (hedged) server span under one client span, and an
  INTERNAL span.
- ``grpc_semconv_collector.json``: the collector's file exporter (one request per line) of plain
  gRPC instrumentation (RPC semantic conventions only: ``message`` events, resource ids, peer
  address), the PS host 1.25 s behind; its last line is truncated.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from ddlscope.rpc import ColumnMapping, decompose, dissect, read_rpc_log
from ddlscope.rpc.schema import STAGE_COLUMNS

DATA = Path(__file__).parent / "data"


def _line_of(path: Path, text: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


def test_sdk_export_with_ddlscope_events_gives_exact_stages_despite_skew():
    path = DATA / "grpc_ps_ddlscope.otlp.json"
    log = read_rpc_log(path)
    rpcs = decompose(log.frame).sort("rpc_id")
    assert rpcs.get_column("rpc_id").to_list() == [1001, 1002]
    # pull: queue 12, send 18, network (380 round trip - 235 residence) 145, receive 5, queue 20,
    # processing 200, send 10, completion 5 = 415 us
    assert rpcs.select(STAGE_COLUMNS).row(0) == tuple(1_000 * x for x in (12, 18, 145, 5, 20, 200, 10, 5))
    # push: 3, 40, (1262 - 1132) 130, 30, 700, 400, 2, 1 = 1306 us
    assert rpcs.select(STAGE_COLUMNS).row(1) == tuple(1_000 * x for x in (3, 40, 130, 30, 700, 400, 2, 1))
    assert rpcs.get_column("latency_ns").to_list() == [415_000, 1_306_000]
    first = rpcs.row(0, named=True)
    assert (first["worker_id"], first["server_id"], first["connection_id"], first["iteration"]) == (0, 1, 7, 42)
    assert str(first["op"]) == "pull_sparse" and first["num_keys"] == 1024 and first["server_thread"] == 3
    assert (first["request_bytes"], first["response_bytes"]) == (8256, 65600)
    assert first["rpc.method"] == "Pull" and first["rpc.system"] == "grpc"
    assert first["client.resource.host.name"] == "worker-host-0"
    assert first["server.resource.host.name"] == "ps-host-1"
    assert first["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736" and first["server_span_id"] == "53995c3f42cd8ad8"
    assert first["log_line"] == _line_of(path, '"spanId": "00f067aa0ba902b7"')
    rejected = {(r["reason"], r["log_line"]) for r in log.rejected.iter_rows(named=True)}
    assert rejected == {
        ("unmatched_client_span", _line_of(path, '"spanId": "b7ad6b7169203331"')),
        ("unmatched_server_span", _line_of(path, '"spanId": "7d1f3f2a6b5c4e3d"')),
        ("duplicate_server_span", _line_of(path, '"spanId": "8f2c7e1d9a4b6c30"')),
    }
    assert any("1 span(s) neither CLIENT nor SERVER ignored" in n for n in log.notes)


def test_collector_export_of_plain_grpc_spans_with_a_mapping():
    path = DATA / "grpc_semconv_collector.json"
    mapping = ColumnMapping.from_pairs(["rpc.method=op", "ps.iteration=iteration", "ps.num_keys=num_keys"],
                                       ["Pull=pull_dense", "Push=push_dense"])
    log = read_rpc_log(path, mapping=mapping)
    rpcs = decompose(log.frame).sort("client_issue_ns")
    # without ddlscope events: no client queue or server queue can be seen; the send ends at the message
    # SENT event, the server receive at its RECEIVED event, processing until its SENT event.
    # pull: send 20, network (280 - 160) 120, receive 4, processing 150, send 6, completion 10 = 310 us
    assert rpcs.select(STAGE_COLUMNS).row(0) == tuple(1_000 * x for x in (0, 20, 120, 4, 0, 150, 6, 10))
    # push: send 35, network (465 - 327) 138, receive 25, processing 300, send 2, completion 2 = 502 us
    assert rpcs.select(STAGE_COLUMNS).row(1) == tuple(1_000 * x for x in (0, 35, 138, 25, 0, 300, 2, 2))
    assert rpcs.get_column("op").cast(pl.String).to_list() == ["pull_dense", "push_dense"]
    assert rpcs.get_column("rpc_id").to_list() == [0x0102030405060708, 0x1112131415161718]
    assert rpcs.get_column("request_bytes").to_list() == [70, 262_208]     # message.uncompressed_size
    assert rpcs.get_column("response_bytes").to_list() == [262_208, 5]
    assert rpcs.get_column("worker_id_label").to_list() == ["worker-3", "worker-3"]
    assert rpcs.get_column("server_id_label").to_list() == ["ps-0", "ps-0"]
    assert rpcs.get_column("connection_id_label").to_list() == ["10.0.0.3:40001", "10.0.0.3:40002"]
    assert rpcs.get_column("connection_id").to_list() == [0, 1]
    assert rpcs.get_column("log_line").to_list() == [1, 1]  # the client spans' request is line 1
    assert [(r["reason"], r["log_line"]) for r in log.rejected.iter_rows(named=True)] == [("unparseable_line", 3)]
    notes = " | ".join(log.notes)
    for expected in ("rpc_id of 2 RPCs from the client span id", "worker_id of 2 RPCs from the client resource",
                     "connection_id of 2 RPCs from the server span's peer address:port",
                     "2 of 2 RPCs: client_send_start_ns from the span start",
                     "2 of 2 RPCs: server_proc_end_ns from the last message SENT event"):
        assert expected in notes


def test_otlp_without_op_or_iteration_names_what_to_map():
    with pytest.raises(ValueError, match=r"missing required column\(s\) iteration, op, num_keys.*--map"):
        read_rpc_log(DATA / "grpc_semconv_collector.json")


def _write_doc(tmp_path: Path, name: str, edit) -> Path:
    doc = json.loads((DATA / "grpc_ps_ddlscope.otlp.json").read_text())
    edit(doc)
    path = tmp_path / name
    path.write_text(json.dumps(doc, indent=2))
    return path


def test_broken_or_empty_otlp_files_say_what_is_wrong(tmp_path):
    text = (DATA / "grpc_ps_ddlscope.otlp.json").read_text()
    cut = len(text) // 2
    (tmp_path / "trunc.json").write_text(text[:cut])
    line = text[:cut].count("\n") + 1   # the document breaks off on the last line written
    with pytest.raises(ValueError, match=rf"trunc.json: not valid JSON \(truncated\?\) at line {line},"):
        read_rpc_log(tmp_path / "trunc.json")
    (tmp_path / "none.json").write_text('{"resourceSpans": []}')
    with pytest.raises(ValueError, match=r"none\.json: no spans in the file"):
        read_rpc_log(tmp_path / "none.json")
    (tmp_path / "empty.json").write_text("")
    with pytest.raises(ValueError, match=r"empty\.json: the file is empty"):
        dissect(tmp_path / "empty.json")

    def drop_servers(doc):
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                ss["spans"] = [sp for sp in ss["spans"] if sp["kind"] != 2]

    # the fixture has 3 client spans (one already without its server span)
    path = _write_doc(tmp_path, "clients.json", drop_servers)
    with pytest.raises(ValueError, match=r"3 client span\(s\) have no server span \(unmatched_client_span, the "
                                         rf"first at {path}:\d+\)"):
        dissect(path)


def test_an_unreadable_span_time_is_a_bad_value(tmp_path):
    def banana(doc):
        doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["startTimeUnixNano"] = "banana"

    path = _write_doc(tmp_path, "banana.json", banana)
    log = read_rpc_log(path)
    bad = log.rejected.filter(pl.col("reason") == "bad_value")
    # the row's line is that of its client span's spanId (00f067aa0ba902b7, the first span)
    assert bad.select("log_line", "detail").rows() == [(_line_of(path, "00f067aa0ba902b7"), "client_issue_ns=banana")]
    assert log.rejected.filter(pl.col("reason") == "missing_timestamp").height == 0


def test_the_reader_restores_the_garbage_collector(tmp_path):
    import gc

    from ddlscope.rpc.otlp import read_otlp_raw

    assert gc.isenabled()
    read_otlp_raw(DATA / "grpc_ps_ddlscope.otlp.json")
    assert gc.isenabled()  # paused while reading, on again after
    (tmp_path / "broken.json").write_text('{"resourceSpans": [')
    with pytest.raises(ValueError, match="not valid JSON"):
        read_otlp_raw(tmp_path / "broken.json")
    assert gc.isenabled()  # and after a failed read
    gc.disable()
    try:
        read_otlp_raw(DATA / "grpc_ps_ddlscope.otlp.json")
        assert not gc.isenabled()  # a caller's own pause is left as it was
    finally:
        gc.enable()


def _with_ids(doc: dict, ids: dict[str, dict[str, str]]) -> dict:
    """``doc`` with the fields of the spans named by their spanId replaced (``ids[spanId]``)."""
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                sp.update(ids.get(sp["spanId"], {}))
    return doc


def test_trace_ids_of_other_widths_cases_and_encodings_are_joined(tmp_path):
    import base64

    doc = json.loads((DATA / "grpc_ps_ddlscope.otlp.json").read_text())
    b64 = base64.b64encode(bytes.fromhex("5b8efff798038103d269b633813fc60c")).decode()   # 24 chars, "==" padded
    parent_b64 = base64.b64encode(bytes.fromhex("eee19b7ec3c1b174")).decode().rstrip("=")  # 11 chars, unpadded
    doc = _with_ids(doc, {
        # RPC 1001: the server span carries the low 64 bits of its client's 128-bit trace id, in upper case
        "53995c3f42cd8ad8": {"traceId": "A3CE929D0E0E4736"},
        # RPC 1002: the server span's trace id in base64, its parent span id in unpadded base64
        "2a1c3c8e4b7f0d11": {"traceId": b64, "parentSpanId": parent_b64},
    })
    path = tmp_path / "ids.json"
    path.write_text(json.dumps(doc))
    log = read_rpc_log(path)
    assert sorted(log.frame.get_column("rpc_id").to_list()) == [1001, 1002]
    assert log.frame.sort("rpc_id").get_column("trace_id").to_list() == [
        "4bf92f3577b34da6a3ce929d0e0e4736", "5b8efff798038103d269b633813fc60c"]
    assert f"{path}: 1 server span(s) joined to their client span by the low 64 bits of the trace id (the two " \
           "sides write it with different widths, e.g. 64 and 128 bits)" in log.notes
    reasons = sorted(log.rejected.get_column("reason").to_list())
    assert reasons == ["duplicate_server_span", "unmatched_client_span", "unmatched_server_span"]  # as unmodified


def test_a_64_bit_client_trace_id_meets_its_zero_padded_server_form(tmp_path):
    doc = _with_ids(json.loads((DATA / "grpc_ps_ddlscope.otlp.json").read_text()), {
        "eee19b7ec3c1b174": {"traceId": "d269b633813fc60c"},                       # client: 64-bit
        "2a1c3c8e4b7f0d11": {"traceId": "0000000000000000d269b633813fc60c"},       # server: zero-padded
    })
    path = tmp_path / "ids64.json"
    path.write_text(json.dumps(doc))
    log = read_rpc_log(path)
    assert sorted(log.frame.get_column("rpc_id").to_list()) == [1001, 1002]
    assert not any("low 64 bits" in n for n in log.notes)   # both normalise to the same 128-bit form
