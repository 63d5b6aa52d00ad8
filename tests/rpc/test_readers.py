"""Readers: CSV/Parquet/JSON lines round trips, every bad-row kind counted with reason and line, mappings."""

from __future__ import annotations

import json

import polars as pl
import pytest
from rpclog_builders import rpc_row

from ddlscope.rpc import ColumnMapping, check_rows, read_rpc_log
from ddlscope.rpc.schema import REQUIRED_COLUMNS
from ddlscope.rpc.synthetic import synthetic_rpc_log
from ddlscope.rpc.validate import REJECT_REASONS

STAGES = {"client_queue": 10, "client_send": 20, "network": 90, "server_receive": 8, "server_queue": 12,
          "server_processing": 50, "server_send": 10, "client_completion": 5}


def _row(i: int, **kw) -> dict:
    return rpc_row(i, issue_ns=1_000_000 + 1_000 * i, stages=STAGES, server_offset_ns=2_500_000_000, **kw)


def _csv_line(row: dict, cols: list[str]) -> str:
    return ",".join("" if row.get(c) is None else str(row[c]) for c in cols)


def test_round_trips_keep_every_value(tmp_path):
    frame = synthetic_rpc_log(2_000, seed=4)
    frame.write_parquet(tmp_path / "log.parquet")
    frame.write_csv(tmp_path / "log.csv")
    frame.write_ndjson(tmp_path / "log.jsonl")
    cols = frame.columns
    for name in ("log.parquet", "log.csv", "log.jsonl"):
        log = read_rpc_log(tmp_path / name)
        assert log.rejected.height == 0, name
        assert log.frame.select(cols).equals(frame), name
        assert log.frame.get_column("log_file").unique().to_list() == [str(tmp_path / name)]
    csv = read_rpc_log(tmp_path / "log.csv").frame
    assert csv.get_column("log_line").head(3).to_list() == [2, 3, 4]  # header is line 1
    pq = read_rpc_log(tmp_path / "log.parquet").frame
    assert pq.get_column("log_line").head(2).to_list() == [1, 2]  # Parquet: row number


def test_several_files_form_one_log(tmp_path):
    frame = synthetic_rpc_log(1_000, seed=6)
    frame.head(400).write_csv(tmp_path / "a.csv")
    frame.tail(600).write_parquet(tmp_path / "b.parquet")
    log = read_rpc_log([tmp_path / "a.csv", tmp_path / "b.parquet"])
    assert log.frame.height == 1_000
    assert log.frame.select(frame.columns).equals(frame)
    assert log.files == [str(tmp_path / "a.csv"), str(tmp_path / "b.parquet")]


def _bad_csv(tmp_path):
    cols = [*REQUIRED_COLUMNS, "client_connect_start_ns", "client_connect_end_ns"]
    rows = [_row(i) for i in range(13)]
    rows[1]["request_bytes"] = "abc"                                   # bad_value
    rows[2]["worker_id"] = None                                        # missing_field
    rows[3]["client_done_ns"] = None                                   # missing_timestamp
    rows[4]["op"] = "get"                                              # unknown_op
    rows[5]["response_bytes"] = -5                                     # negative_size
    rows[6]["client_send_end_ns"] = rows[6]["client_send_start_ns"] - 1  # reversed_client_order
    rows[7]["server_proc_end_ns"] = rows[7]["server_proc_start_ns"] - 3  # reversed_server_order
    rows[8]["client_connect_start_ns"], rows[8]["client_connect_end_ns"] = 500, 400  # reversed_connect_order
    rows[9]["server_send_end_ns"] += 1_000                             # negative_network (residence > round trip)
    rows[10]["rpc_id"] = 0                                             # duplicate_rpc of row 0 (same worker)
    rows[11]["op"] = None                                              # missing_field (op)
    text = ",".join(cols) + "\n" + "\n".join(_csv_line(r, cols) for r in rows) + "\n"
    path = tmp_path / "bad.csv"
    path.write_text(text)
    return path


def test_every_bad_row_kind_is_counted_with_reason_and_line(tmp_path):
    path = _bad_csv(tmp_path)
    log = read_rpc_log(path)
    # rows 0 and 12 are good; data row k sits on line k + 2
    assert log.frame.get_column("rpc_id").to_list() == [0, 12]
    got = {(r["log_line"], r["reason"]) for r in log.rejected.iter_rows(named=True)}
    assert got == {(3, "bad_value"), (4, "missing_field"), (5, "missing_timestamp"), (6, "unknown_op"),
                   (7, "negative_size"), (8, "reversed_client_order"), (9, "reversed_server_order"),
                   (10, "reversed_connect_order"), (11, "negative_network"), (12, "duplicate_rpc"),
                   (13, "missing_field")}
    detail = {r["reason"]: r["detail"] for r in log.rejected.iter_rows(named=True)}
    assert detail["bad_value"] == "request_bytes=abc"
    assert detail["missing_timestamp"] == "client_done_ns"
    assert detail["unknown_op"] == "op=get"
    assert detail["negative_size"] == "response_bytes=-5"
    assert detail["reversed_client_order"].startswith("client_send_end_ns < client_send_start_ns")
    assert detail["reversed_server_order"].startswith("server_proc_end_ns < server_proc_start_ns")
    assert detail["negative_network"] == "server residence 1080 ns > client round trip 170 ns"  # 80+1000 vs 170
    assert detail["duplicate_rpc"] == "worker_id=0, rpc_id=0"
    by_line = {r["log_line"]: r["detail"] for r in log.rejected.iter_rows(named=True)}
    assert by_line[4] == "worker_id"
    assert by_line[13] == "op"   # an empty op alone: no leading ", "
    counts = log.rejected_counts()
    assert dict(zip(counts["reason"], counts["rows"], strict=True))["missing_field"] == 2
    assert counts.filter(pl.col("reason") == "bad_value").get_column("first_at").item() == f"{path}:3"
    assert set(counts["reason"]) <= set(REJECT_REASONS)
    assert log.rows_read == 13


def test_unparseable_json_lines_are_counted_with_their_line(tmp_path):
    rows = [_row(0), _row(1), _row(2)]
    lines = [json.dumps(rows[0]), "", "{not json", json.dumps(rows[1]), "[1, 2]", json.dumps(rows[2])]
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    log = read_rpc_log(path)
    assert log.frame.get_column("rpc_id").to_list() == [0, 1, 2]
    assert log.frame.get_column("log_line").to_list() == [1, 4, 6]   # the blank line 2 still counts
    assert [(r["log_line"], r["reason"]) for r in log.rejected.iter_rows(named=True)] == [
        (3, "unparseable_line"), (5, "unparseable_line")]


def test_check_rows_on_an_in_memory_frame():
    frame = pl.DataFrame([_row(0), _row(1)]).with_columns(
        pl.when(pl.col("rpc_id") == 1).then(pl.col("client_issue_ns") + 10**6).otherwise(pl.col("client_issue_ns"))
        .alias("client_issue_ns"))
    good, bad = check_rows(frame)
    assert good.get_column("rpc_id").to_list() == [0]
    assert bad.row(0, named=True)["reason"] == "reversed_client_order"
    assert bad.row(0, named=True)["log_line"] == 2 and bad.row(0, named=True)["log_file"] == "<memory>"


def test_column_and_op_mapping_and_time_unit(tmp_path):
    rows = [_row(0, op="pull_sparse"), _row(1, op="push_dense")]
    frame = pl.DataFrame(rows)
    # a framework's own names, microsecond timestamps, its own op names
    renamed = {"client_issue_ns": "t_issue_us", "server_id": "ps_shard", "op": "method"}
    ts_cols = [c for c in frame.columns if c.endswith("_ns")]
    src = frame.with_columns(pl.col(c) / 1_000 for c in ts_cols).with_columns(
        pl.col("op").replace({"pull_sparse": "Lookup", "push_dense": "ApplyDense"})).rename(renamed)
    src.write_csv(tmp_path / "fw.csv")
    mapping = ColumnMapping.from_pairs(["t_issue_us=client_issue_ns", "ps_shard=server_id", "method=op"],
                                       ["Lookup=pull_sparse", "ApplyDense=push_dense"], time_unit="us")
    log = read_rpc_log(tmp_path / "fw.csv", mapping=mapping)
    assert log.rejected.height == 0
    assert log.frame.get_column("op").cast(pl.String).to_list() == ["pull_sparse", "push_dense"]
    # 1_001_000 ns -> 1001 us -> 1_001_000 ns again (timestamps exact to the nanosecond here)
    assert log.frame.get_column("client_issue_ns").to_list() == frame.get_column("client_issue_ns").to_list()
    # the same through a mapping file
    (tmp_path / "map.toml").write_text('time_unit = "us"\n[columns]\nt_issue_us = "client_issue_ns"\n'
                                       'ps_shard = "server_id"\nmethod = "op"\n[ops]\nLookup = "pull_sparse"\n'
                                       'ApplyDense = "push_dense"\n')
    log2 = read_rpc_log(tmp_path / "fw.csv", mapping=ColumnMapping.from_file(tmp_path / "map.toml"))
    assert log2.frame.drop("log_file").equals(log.frame.drop("log_file"))


def test_mapping_file_errors_name_the_file_and_the_field(tmp_path):
    # JSON: a bare name -> name table is a column mapping
    (tmp_path / "m.json").write_text('{"ts": "client_issue_ns", "ops": {"Get": "pull_dense"}}')
    m = ColumnMapping.from_file(tmp_path / "m.json")
    assert (dict(m.columns), dict(m.ops), m.time_unit) == ({"ts": "client_issue_ns"}, {"Get": "pull_dense"}, "ns")
    cases = {
        "num.toml": ('[columns]\nts = 5\n',
                     r"num\.toml: columns\.ts: expected a string \(a schema column name\), got 5"),
        "bare.toml": ('ts = 5\n', r"bare\.toml: ts: expected a string"),
        "op.toml": ('[ops]\nGet = "read"\n', r"op\.toml: op mapping: targets must be one of"),
        "unit.toml": ('time_unit = "h"\n', r"unit\.toml: time_unit: expected one of ns, us, ms, s, got 'h'"),
        "typo.toml": ('time-unit = "us"\n[columns]\nts = "client_issue_ns"\n',
                      r"typo\.toml: unknown field\(s\) time-unit; expected columns, ops, time_unit"),
        "syntax.toml": ('[columns\n', r"syntax\.toml: not valid TOML: .*line 1"),
        "list.json": ('["ts"]', r"list\.json: expected a table of names, got list"),
        "latin1.toml": (None, r"latin1\.toml: cannot read: not UTF-8 text"),
    }
    for name, (text, message) in cases.items():
        if text is None:
            (tmp_path / name).write_bytes(b'ts = "caf\xe9"\n')
        else:
            (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match=message):
            ColumnMapping.from_file(tmp_path / name)


def test_missing_and_misnamed_columns_are_clear_errors(tmp_path):
    pl.DataFrame([_row(0)]).drop("server_id", "client_done_ns").write_csv(tmp_path / "x.csv")
    with pytest.raises(ValueError, match=r"x\.csv: missing required column\(s\) server_id, client_done_ns.*--map"):
        read_rpc_log(tmp_path / "x.csv")
    with pytest.raises(ValueError, match=r"x\.csv: --map shard=server_id: the log has no column shard; OLD=NEW"):
        read_rpc_log(tmp_path / "x.csv", mapping=ColumnMapping.from_pairs(["shard=server_id"]))
    # the mapping named, not "missing required column(s) op; the log has: ..., nosuch"
    with pytest.raises(ValueError, match=r"x\.csv: --map op=nosuch: nosuch is not a schema column and the log has "
                                         r"no column nosuch; OLD=NEW renames the log's column OLD to the schema "
                                         r"column NEW, e.g\. shard=server_id; the log has: rpc_id, worker_id"):
        read_rpc_log(tmp_path / "x.csv", mapping=ColumnMapping.from_pairs(["op=nosuch"]))
    pl.DataFrame([_row(0)]).rename({"server_id": "shard"}).write_csv(tmp_path / "s.csv")
    with pytest.raises(ValueError, match=r"s\.csv: --map server_id=shard: the log has no column server_id; did you "
                                         r"mean shard=server_id\?"):
        read_rpc_log(tmp_path / "s.csv", mapping=ColumnMapping.from_pairs(["server_id=shard"]))
    (tmp_path / "m.toml").write_text('[columns]\nsrv = "server_id"\n')
    with pytest.raises(ValueError, match=r"m\.toml: columns\.srv = 'server_id': the log has no column srv"):
        read_rpc_log(tmp_path / "s.csv", mapping=ColumnMapping.from_file(tmp_path / "m.toml"))
    with pytest.raises(ValueError, match="expected OLD=NEW"):
        ColumnMapping.from_pairs(["server_id"])
    with pytest.raises(ValueError, match="op mapping: targets must be one of"):
        ColumnMapping.from_pairs([], ["Get=read"])
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_rpc_log(tmp_path / "nope.csv")
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(ValueError, match="unknown log format"):
        read_rpc_log(tmp_path / "x.txt")


def test_text_ids_are_encoded_and_kept(tmp_path):
    rows = [_row(0, worker_id="host-b:7"), _row(1, worker_id="host-a:3"), _row(2, worker_id="host-b:7")]
    pl.DataFrame(rows).write_csv(tmp_path / "ids.csv")
    log = read_rpc_log(tmp_path / "ids.csv")
    assert log.frame.get_column("worker_id").to_list() == [1, 0, 1]  # sorted text: host-a:3 -> 0
    assert log.frame.get_column("worker_id_label").to_list() == ["host-b:7", "host-a:3", "host-b:7"]
    assert any("worker_id given as text" in n for n in log.notes)


def test_a_text_value_after_the_inferred_json_lines_is_a_bad_value(tmp_path):
    # the first 1,000 lines fix the schema; line 1,100 has text in a number field
    frame = synthetic_rpc_log(1_200, seed=9)
    lines = [json.dumps(r) for r in frame.with_columns(pl.col("op").cast(pl.String),
                                                        pl.col("connection_event").cast(pl.String)).to_dicts()]
    row = json.loads(lines[1_099])
    row["request_bytes"] = "12x"
    lines[1_099] = json.dumps(row)
    (tmp_path / "log.jsonl").write_text("\n".join(lines) + "\n")
    log = read_rpc_log(tmp_path / "log.jsonl")
    assert log.frame.height == 1_199
    assert log.rejected.rows() == [(str(tmp_path / "log.jsonl"), 1_100, "bad_value", "request_bytes=12x")]


def test_values_beyond_int64_and_implausible_rows_are_rejected_with_their_line(tmp_path):
    cols = list(REQUIRED_COLUMNS)
    rows = [_row(i) for i in range(8)]
    rows[1]["client_done_ns"] = "99999999999999999999999"   # > 2^63: not an int64
    rows[2]["client_done_ns"] = "1.5e300"                   # a float far outside int64
    rows[3]["request_bytes"] = "99999999999999999999999"
    rows[4]["request_bytes"] = 2**62                        # fits int64, but no RPC moves 4 EiB
    rows[5].update({c: 0 for c in cols if c.endswith("_ns")})  # every timestamp 0: never set
    rows[6].update({c: 0 for c in cols if c.startswith("server_")})  # the server side never set
    path = tmp_path / "big.csv"
    path.write_text(",".join(cols) + "\n" + "\n".join(_csv_line(r, cols) for r in rows) + "\n")
    log = read_rpc_log(path)
    assert log.frame.get_column("rpc_id").to_list() == [0, 7]
    got = [(r["log_line"], r["reason"], r["detail"]) for r in log.rejected.sort("log_line").iter_rows(named=True)]
    assert got == [(3, "bad_value", "client_done_ns=99999999999999999999999"),
                   (4, "bad_value", "client_done_ns=1.5e300"),
                   (5, "bad_value", "request_bytes=99999999999999999999999"),
                   (6, "implausible_size", f"request_bytes={2**62} > 2^40"),
                   (7, "zero_timestamps", "every timestamp is 0"),
                   (8, "zero_timestamps", "server timestamps all 0")]


def test_a_time_unit_that_overflows_int64_ns_is_a_bad_value(tmp_path):
    frame = pl.DataFrame([_row(0), _row(1)])  # the same numbers read as seconds: up to 2.5e18 ns
    frame = frame.with_columns(pl.when(pl.col("rpc_id") == 1).then(10**10).otherwise(pl.col("client_done_ns"))
                               .alias("client_done_ns"))   # 1e10 s = 1e19 ns > 2^63 - 1
    frame.write_parquet(tmp_path / "s.parquet")
    log = read_rpc_log(tmp_path / "s.parquet", mapping=ColumnMapping(time_unit="s"))
    rejected = log.rejected.select("log_line", "reason", "detail").rows()
    assert rejected == [(2, "bad_value", "client_done_ns=10000000000")]


def test_csv_lines_with_extra_fields_are_rejected_with_their_line(tmp_path):
    frame = synthetic_rpc_log(50, seed=3)
    frame.write_csv(tmp_path / "ok.csv")
    lines = (tmp_path / "ok.csv").read_text().splitlines()
    lines[7] += ',extra,"a,b"'      # data row 6 on line 8: two more fields (one quoted with a comma)
    lines[20] += ",x"
    (tmp_path / "ragged.csv").write_text("\n".join(lines) + "\n")
    log = read_rpc_log(tmp_path / "ragged.csv")
    n = len(frame.columns)
    assert log.rejected.select("log_line", "reason", "detail").rows() == [
        (8, "extra_fields", f"{n + 2} fields, the header has {n}"),
        (21, "extra_fields", f"{n + 1} fields, the header has {n}")]
    assert log.frame.height == 48
    # the other rows keep their line and values (rpc_id k is on line k + 2)
    assert (log.frame.get_column("log_line") - 2).to_list() == log.frame.get_column("rpc_id").to_list()
    assert log.frame.select(frame.columns).equals(frame.filter(~pl.col("rpc_id").is_in([6, 19])))


def test_damaged_empty_and_missing_inputs_are_clear_errors(tmp_path):
    frame = synthetic_rpc_log(200, seed=5)
    frame.write_parquet(tmp_path / "good.parquet")
    data = (tmp_path / "good.parquet").read_bytes()
    (tmp_path / "trunc.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"trunc.parquet: cannot read as Parquet"):
        read_rpc_log(tmp_path / "trunc.parquet")
    (tmp_path / "empty.csv").write_text("")
    log = read_rpc_log([tmp_path / "empty.csv", tmp_path / "good.parquet"])
    assert log.frame.height == 200 and f"{tmp_path / 'empty.csv'}: empty file, no rows" in log.notes
    with pytest.raises(FileNotFoundError, match=r"nonexist\.toml: no such mapping file"):
        ColumnMapping.from_file(tmp_path / "nonexist.toml")


@pytest.mark.parametrize("eol", [b"\r\n", b"\r\r\n"])
def test_csv_with_crlf_line_endings_reads_every_row(tmp_path, eol):
    # CRLF (Windows) and CR CR LF (a CRLF file converted once more, `sed 's/$/\r/'`): no hidden \r in the
    # header or the last field (server_send_end_ns)
    rows = [_row(i) for i in range(3)]
    cols = list(rows[0])
    text = "\n".join([",".join(cols), *(_csv_line(r, cols) for r in rows)]) + "\n"
    path = tmp_path / "log.csv"
    path.write_bytes(text.encode().replace(b"\n", eol))
    log = read_rpc_log(path)
    assert log.rejected.height == 0
    assert log.frame.height == 3
    # server_send_end_ns of rpc 1 = issue 1_001_000 + client_queue 10 + client_send 20 + network/2 45
    # + server_receive 8 + server_queue 12 + server_processing 50 + server_send 10 + server offset 2.5e9
    assert log.frame.get_column("server_send_end_ns").to_list()[1] == 1_001_000 + 10 + 20 + 45 + 8 + 12 + 50 + 10 \
        + 2_500_000_000
    assert log.frame.get_column("log_line").to_list() == [2, 3, 4]


def test_the_same_file_given_twice_is_an_error_naming_it(tmp_path, monkeypatch):
    # before: read twice, every row of the second copy rejected as duplicate_rpc
    rpc_frame_rows = [_row(i) for i in range(3)]
    path = tmp_path / "a.csv"
    pl.DataFrame(rpc_frame_rows).write_csv(path)
    with pytest.raises(ValueError, match=rf"^{path}: the same log file given twice; give each file once$"):
        read_rpc_log([path, path])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=rf"^a\.csv: the same log file given twice \(also as {path}\)"):
        read_rpc_log([path, "a.csv"])   # another spelling of the same file
    (tmp_path / "b.csv").write_bytes(path.read_bytes())   # a copy is another file: its rows are duplicates
    log = read_rpc_log([path, tmp_path / "b.csv"])
    assert log.frame.height == 3 and log.rejected.get_column("reason").to_list() == ["duplicate_rpc"] * 3


def _log_bytes(rows: list[dict]) -> bytes:
    cols = list(rows[0])
    return ("\n".join([",".join(cols), *(_csv_line(r, cols) for r in rows)]) + "\n").encode()


def test_a_csv_cut_mid_line_counts_a_truncated_last_line(tmp_path):
    # before: the cut line (fewer fields, null timestamps) was counted as missing_timestamp
    data = _log_bytes([_row(i) for i in range(4)])
    cut = data[: len(data) - 40]  # inside the last line (rpc 3, line 5): its last fields are gone, no newline
    path = tmp_path / "cut.csv"
    path.write_bytes(cut)
    log = read_rpc_log(path)
    fields_left = cut.split(b"\n")[-1].count(b",") + 1
    assert log.rejected.select("log_line", "reason", "detail").rows() == [
        (5, "truncated_last_line", f"the file ends without a newline in this line: {fields_left} of 19 fields")]
    assert log.frame.get_column("rpc_id").to_list() == [0, 1, 2]
    # a complete last line without a final newline is a good row
    (tmp_path / "no_eol.csv").write_bytes(data.rstrip(b"\n"))
    assert read_rpc_log(tmp_path / "no_eol.csv").frame.height == 4


def test_invalid_utf8_is_rejected_naming_line_and_byte_offset(tmp_path):
    # before: CSV - the bad byte turned up in a column name or value; JSON lines - a UnicodeDecodeError
    # that named no file
    data = _log_bytes([_row(i) for i in range(3)])
    line3 = data.index(b"\n", data.index(b"\n") + 1) + 1   # start of line 3 (rpc 1)
    bad = data[: line3 + 4] + b"\xff" + data[line3 + 4:]
    (tmp_path / "bad.csv").write_bytes(bad)
    log = read_rpc_log(tmp_path / "bad.csv")
    assert log.rejected.select("log_file", "log_line", "reason", "detail").rows() == [
        (str(tmp_path / "bad.csv"), 3, "invalid_utf8",
         f"byte {line3 + 5} of the file (byte 5 of the line): 0xff is not UTF-8")]
    assert log.frame.get_column("rpc_id").to_list() == [0, 2]
    lines = [json.dumps(_row(i)).encode() for i in range(3)]
    lines[2] = lines[2][:10] + b"\xc3\x28" + lines[2][10:]
    (tmp_path / "bad.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    log = read_rpc_log(tmp_path / "bad.jsonl")
    offset = len(lines[0]) + 1 + len(lines[1]) + 1 + 10
    assert log.rejected.select("log_line", "reason", "detail").rows() == [
        (3, "invalid_utf8", f"byte {offset + 1} of the file (byte 11 of the line): 0xc3 is not UTF-8")]
    assert log.frame.height == 2
    # a header that is not UTF-8 is an error naming the file and line 1
    (tmp_path / "head.csv").write_bytes(b"rpc\xff_id" + data[6:])
    with pytest.raises(ValueError, match=r"head\.csv:1: the header is not UTF-8 text: byte 4 of the file "):
        read_rpc_log(tmp_path / "head.csv")


def test_a_json_document_is_named_for_what_it_is(tmp_path):
    # before: "52 lines are not JSON" - every line of the pretty-printed document rejected
    chrome = tmp_path / "trace.json"
    chrome.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 2}] * 5}, indent=1))
    with pytest.raises(ValueError, match=r"trace\.json: a Chrome-trace JSON object \(traceEvents: 5 events; .*\), "
                                         r"not JSON lines; expected JSON lines \(one RPC per line, a JSON object\) "
                                         r"or an OTLP JSON export \(resourceSpans\)$"):
        read_rpc_log(chrome)
    chrome.write_text(json.dumps({"traceEvents": []}))   # one line: a valid JSON line, but a trace
    with pytest.raises(ValueError, match=r"trace\.json: a Chrome-trace JSON object"):
        read_rpc_log(chrome)
    array = tmp_path / "rpcs.json"
    array.write_text(json.dumps([_row(i) for i in range(3)], indent=2))
    with pytest.raises(ValueError, match=r"rpcs\.json: a JSON array of 3 item\(s\) \(object\), not JSON lines"):
        read_rpc_log(array)
    (tmp_path / "one.jsonl").write_text(json.dumps([_row(0)]))   # an array on one line
    with pytest.raises(ValueError, match=r"one\.jsonl: a JSON array of 1 item"):
        read_rpc_log(tmp_path / "one.jsonl")
    (tmp_path / "broken.json").write_text("[\n" + json.dumps(_row(0)) + ",\n")   # an array cut short
    with pytest.raises(ValueError, match=r"broken\.json:3: the file opens a JSON document \('\[' on line 1\) that "
                                         r"does not parse"):
        read_rpc_log(tmp_path / "broken.json")


@pytest.mark.parametrize("name", ["rpc csv", "rpc jsonl", "rpc parquet"])
def test_fuzz_rpc_readers(name, tmp_path_factory):
    """Seeded mutations (text ones for CSV/JSON lines; damaged bytes and changed schemas for
    Parquet) of a small synthetic log: a clean error naming the file, or rows in = kept + rejected
    with a reason; never a traceback or a silent drop."""
    from ddlscope.testing.fuzz import check_target

    check_target(name, tmp_path_factory.mktemp("fuzz"))
