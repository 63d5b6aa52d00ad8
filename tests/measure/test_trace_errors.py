"""Bad inputs get one clear error naming the file (and the place in it)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import pytest
from kineto_fixture import fixture_trace, write_fixture

from ddlscope.measure.analysis import analyze_traces
from ddlscope.measure.reader import TraceReadError, read_traces


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
