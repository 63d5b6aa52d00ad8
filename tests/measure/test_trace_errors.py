"""Bad inputs get one clear error naming the file (and the place in it)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import polars as pl
import pytest
from kineto_fixture import GEMM, fixture_trace, write_fixture

from ddlscope.measure.analysis import analyze_traces
from ddlscope.measure.reader import BAD_TIME, NEGATIVE_DUR, TraceReadError, read_traces
from ddlscope.report.trace_notes import trace_notes


def _error(path) -> str:
    with pytest.raises(TraceReadError) as exc:
        read_traces([path])
    return str(exc.value)


def test_missing_file(tmp_path):
    assert _error(tmp_path / "nope.json") == f"{tmp_path / 'nope.json'}: no such file"


def test_truncated_json_names_the_file(tmp_path):
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(fixture_trace())[:500])
    msg = _error(path)
    assert msg.startswith(str(path)) and "truncated JSON" in msg


def test_truncated_gzip_names_the_file(tmp_path):
    path = tmp_path / "cut.json.gz"
    path.write_bytes(gzip.compress(json.dumps(fixture_trace()).encode())[:300])
    msg = _error(path)
    assert msg.startswith(str(path)) and "truncated or corrupt gzip" in msg


def test_non_json_names_the_file_and_line(tmp_path):
    path = tmp_path / "notes.json"
    path.write_text('{\n  "traceEvents": [\n    {"ph": "X", oops}\n  ]\n}\n')
    msg = _error(path)
    assert msg.startswith(f"{path}: not valid JSON at line 3")


def test_wrong_schema_names_the_field(tmp_path):
    doc = fixture_trace()
    doc["traceEvents"][3]["ts"] = "early"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    msg = _error(path)
    assert msg.startswith(f"{path}: wrong schema") and "traceEvents[3].ts" in msg


def test_json_that_is_not_a_trace(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model": "resnet", "lr": 0.1}))
    msg = _error(path)
    assert msg.startswith(f"{path}: not a PyTorch profiler trace") and "['lr', 'model']" in msg


def test_empty_file(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text("")
    assert "empty file" in _error(path)


def test_member_of_an_archive_is_named(tmp_path):
    good = json.dumps(fixture_trace()).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, body in (("traces/rank0.json", good), ("traces/rank1.json", good[:200])):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    path = tmp_path / "job.tar.gz"
    path.write_bytes(buf.getvalue())
    assert _error(path).startswith(f"{path}!traces/rank1.json: truncated JSON")


def test_cpu_only_trace(tmp_path):
    doc = fixture_trace()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")]
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=rf"^{path}: no GPU kernel, memcpy or memset events"):
        analyze_traces([path])


def test_two_traces_of_one_rank(tmp_path):
    a = write_fixture(tmp_path, "a.json")
    b = write_fixture(tmp_path, "b.json")
    with pytest.raises(TraceReadError, match="rank 0 is also claimed by"):
        read_traces([a, b])


def test_execution_trace_alone(tmp_path):
    path = tmp_path / "et_0.json"
    path.write_text(json.dumps({"schema": "1.0.1", "pid": 1, "nodes": [{"name": "aten::mm", "id": 2}]}))
    with pytest.raises(TraceReadError, match="no PyTorch profiler \\(Kineto\\) trace among the inputs"):
        read_traces([path])


# -- times out of range: the event is dropped, counted and named (docs/trace.md, "Bad input") --------
def _write(tmp_path, doc, name="bad.json", dump=json.dumps) -> str:
    path = tmp_path / name
    path.write_text(dump(doc))
    return str(path)


def test_huge_duration_is_dropped_and_named(tmp_path):
    # K1 (traceEvents[18], the GEMM [25, 45) us) with "dur": 1e18 us: beyond int64 nanoseconds
    doc = fixture_trace()
    assert doc["traceEvents"][18]["name"] == GEMM
    doc["traceEvents"][18]["dur"] = 1e18
    path = _write(tmp_path, doc)
    a = analyze_traces([path])
    note = next(n for n in trace_notes(a) if "out-of-range" in n)
    assert note.startswith(f"{path}: 1 complete event(s) with a non-finite or out-of-range ts/dur")
    assert f"traceEvents[18] '{GEMM}' (kernel): dur = 1e+18 us" in note
    # without K1, window 1 has no compute-bound time; [0, 45) is idle, before K2 (launched at 22,
    # the data loader ran in [0, 20)): data_loader 25 + 20 = 45 us, idle 41 + 20 = 61 us
    it1 = a.breakdown.filter(pl.col("iteration") == 1).row(0, named=True)
    assert (it1["window_us"], it1["compute_bound_us"], it1["idle_us"], it1["idle_data_loader_us"]) == (
        100.0, 0.0, 61.0, 45.0)


def test_nan_infinity_and_negative_times_are_dropped_and_counted(tmp_path):
    # Python's json module writes NaN and Infinity (not strict JSON); a negative dur is also bad
    doc = fixture_trace()
    doc["traceEvents"][19]["ts"] = float("nan")
    doc["traceEvents"][20]["dur"] = float("inf")
    doc["traceEvents"][21]["dur"] = -3
    path = _write(tmp_path, doc)
    (t,), _ = read_traces([path])
    assert t.skipped[BAD_TIME] == 2 and t.skipped[NEGATIVE_DUR] == 1
    assert t.skipped_examples[BAD_TIME].startswith("traceEvents[19] ") and "ts = NaN us" in t.skipped_examples[BAD_TIME]
    assert t.skipped_examples[NEGATIVE_DUR].endswith("(gpu_memcpy): dur = -3 us")
    assert t.events.height == 22 - 3  # the fixture's 22 complete events (26 events: M, i, s, f are not), 3 dropped


def test_a_bad_first_timestamp_does_not_shift_the_others(tmp_path):
    # a bare event array (Chrome's JSON array format) whose event [18] has ts -1e300: dropped, and
    # the others keep their times relative to the earliest good event
    events = fixture_trace()["traceEvents"]
    events[18]["ts"] = -1e300
    (t,), _ = read_traces([_write(tmp_path, events)])
    assert t.skipped_examples[BAD_TIME] == f"$[18] '{GEMM}' (kernel): ts = -1e+300 us"
    assert t.base_ts_us == 0.0 and t.events["end_ns"].max() == 200_000


def test_only_bad_times_is_an_error(tmp_path):
    doc = fixture_trace()
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            e["dur"] = 1e300
    msg = _error(_write(tmp_path, doc))
    assert "no complete ('ph': 'X') event has a usable ts and dur (22 out of range" in msg


# -- archives ------------------------------------------------------------------------------------------
def _tar(path, members: dict[str, bytes]) -> str:
    with tarfile.open(path, "w") as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return str(path)


def test_empty_archive(tmp_path):
    path = _tar(tmp_path / "empty.tar", {})
    assert _error(path) == f"{path}: the archive holds no trace file (it is empty)"
    gz = tmp_path / "empty.tar.gz"
    gz.write_bytes(gzip.compress((tmp_path / "empty.tar").read_bytes()))
    assert _error(gz) == f"{gz}: the archive holds no trace file (it is empty)"


def test_archive_without_trace_files_names_its_files(tmp_path):
    path = _tar(tmp_path / "logs.tar", {"a/stdout.txt": b"hello", "b.csv": b"x,y"})
    assert _error(path) == (f"{path}: the archive holds no trace file (its 2 file(s) (a/stdout.txt, b.csv) "
                            "are not .json or .json.gz)")


def test_file_named_tar_that_is_not_one(tmp_path):
    path = tmp_path / "job.tar"
    path.write_bytes(b"\x00\x01not an archive" * 100)
    assert _error(path) == f"{path}: not a tar archive (the name says .tar; expected a tar of trace files)"


@pytest.mark.parametrize(("name", "rank", "why"), [
    ("rank1.json", 1, "from the file name"),
    ("trace.json", 0, "input order, after the ranks the other traces name"),
])
def test_unusable_rank_in_distributed_info_is_noted(tmp_path, name, rank, why):
    doc = fixture_trace()
    doc["distributedInfo"]["rank"] = "zero"
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    a = analyze_traces([path])
    assert [n for n in trace_notes(a) if "distributedInfo" in n] == [
        f"{path}: distributedInfo.rank 'zero' is not a non-negative integer: rank {rank} assumed ({why})"]
    assert a.ranks["rank"].to_list() == [rank]


# -- invalid UTF-8: the file, the byte offset and the line (issue 13) ---------------------------------
@pytest.mark.parametrize("gz", [False, True])
def test_invalid_utf8_names_file_byte_and_line(tmp_path, gz):
    # the fixture pretty-printed (one key per line), with byte 0xff put into the GEMM kernel's name
    text = json.dumps(fixture_trace(), indent=1).encode()
    at = text.index(GEMM.encode()) + 5  # inside 'volta_sgemm...': after 'volta'
    raw = text[:at] + b"\xff" + text[at:]
    line = text[:at].count(b"\n") + 1
    col = at - text.rfind(b"\n", 0, at)
    path = tmp_path / ("bad.json.gz" if gz else "bad.json")
    path.write_bytes(gzip.compress(raw) if gz else raw)
    where = " of the decompressed data" if gz else ""
    assert _error(path) == (f"{path}: not valid UTF-8 at byte {at + 1}{where} (line {line}, column {col}): byte 0xff "
                            "(invalid start byte); expected UTF-8 JSON text (a damaged file or transfer?)")


def test_invalid_utf8_in_a_field_the_reader_skips(tmp_path):
    # a field the reader does not decode ("Call stack") still makes the file invalid JSON text
    doc = fixture_trace()
    doc["traceEvents"][5]["args"]["Call stack"] = "PLACEHOLDER"
    text = json.dumps(doc).encode()
    at = text.index(b"PLACEHOLDER")
    path = tmp_path / "bad.json"
    path.write_bytes(text.replace(b"PLACEHOLDER", b"\xc3\x28"))
    assert _error(path).startswith(f"{path}: not valid UTF-8 at byte {at + 1} (line 1, column {at + 1}): byte 0xc3 "
                                   "(invalid continuation byte)")


# -- a folder: every file not read is listed with the reason (issue 13) --------------------------------
def test_folder_lists_every_skipped_file(tmp_path):
    from ddlscope.measure.analysis import analyze_traces as run

    write_fixture(tmp_path, "rank0.json")
    (tmp_path / "README.txt").write_text("how the job was run")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "stdout.log.gz").write_bytes(gzip.compress(b"epoch 1"))
    (tmp_path / "sub" / "config.json").write_text(json.dumps({"lr": 0.1, "model": "resnet"}))
    a = run([tmp_path])
    assert a.ranks["source"].to_list() == [str(tmp_path / "rank0.json")]
    assert [n for n in trace_notes(a) if "skipped" in n] == [
        f"{tmp_path / 'README.txt'}: skipped, not .json, .json.gz, .tar, .tar.gz or .tgz",
        f"{tmp_path / 'sub' / 'stdout.log.gz'}: skipped, not .json, .json.gz, .tar, .tar.gz or .tgz",
        f"{tmp_path / 'sub' / 'config.json'}: skipped, not a PyTorch profiler trace: expected a JSON object with a "
        "'traceEvents' array (Kineto/Chrome trace) or 'schema' and 'nodes' (execution trace); found keys "
        "['lr', 'model']",
    ]
    # named on the command line, the same config file is an error
    assert _error(tmp_path / "sub" / "config.json").startswith(f"{tmp_path / 'sub' / 'config.json'}: not a PyTorch")


def test_folder_without_traces_names_what_it_holds(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    assert _error(tmp_path) == (f"{tmp_path}: folder holds no .json, .json.gz or .tar(.gz) trace files; it holds 1 "
                                "other file(s): notes.txt")


# -- two faults in one file (found by tests/measure/test_trace_fuzz.py) ---------------------------------
def test_wrong_type_and_a_syntax_error_later(tmp_path):
    # msgspec stops at the wrong type ("ts": "early" in event 3); the document is also malformed
    # further on (a value missing): before, the execution-trace retry raised msgspec's DecodeError
    doc = fixture_trace()
    doc["traceEvents"][3]["ts"] = "early"
    text = json.dumps(doc, indent=1)
    at = text.rindex('"dur": 8')
    path = tmp_path / "bad.json"
    path.write_text(text[:at] + '"dur": ,' + text[at + len('"dur": 8'):])
    line = text[:at].count("\n") + 1
    col = at - text.rfind("\n", 0, at) + len('"dur": ')  # 1-based column of the ',' where the value should be
    assert _error(path) == f"{path}: not valid JSON at line {line}, column {col}: Expecting value"


def test_out_of_range_number_in_a_truncated_file(tmp_path):
    # a pid beyond the double range sends the reader to its lenient path (Python's json), which then meets the
    # cut: before, json's JSONDecodeError escaped; now the file is named as truncated
    doc = fixture_trace()
    doc["traceEvents"][2]["pid"] = "PID"
    text = json.dumps(doc).replace('"PID"', "1e400")  # beyond the double range
    path = tmp_path / "cut.json"
    path.write_text(text[: text.index(GEMM) + 3])
    msg = _error(path)
    assert msg.startswith(f"{path}: truncated JSON")
