"""Fuzzing the OTLP reader: seeded mutations of real exports give a one-line error naming the file, or a
result whose every span is accounted for (ddlscope.rpc.fuzz).

Fixtures: ``pstrain_collector.json`` is iteration 0 of ``ddlscope ps-train -w 2 -s 1 -n 2 -b 16 --otlp``
(12 RPCs, 26 spans), rewritten in the collector's file-exporter form (one request per line, one span each);
the other two are the hand-written exports of test_otlp.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddlscope.rpc import read_rpc_log
from ddlscope.rpc.fuzz import check_one, count_spans, fuzz_otlp_reader

DATA = Path(__file__).parent / "data"
FILES = ("pstrain_collector.json", "grpc_ps_ddlscope.otlp.json", "grpc_semconv_collector.json")


def test_the_unmutated_files_balance():
    text = (DATA / "pstrain_collector.json").read_text()
    assert count_spans(text) == (24, 0)    # 12 client + 12 server spans; the 2 iteration spans are INTERNAL
    log = read_rpc_log(DATA / "pstrain_collector.json")
    assert log.frame.height == 12 and log.rejected.height == 0
    for name in FILES:
        assert check_one(DATA / name)[0] is None


def test_a_text_with_an_unpaired_surrogate_escape_rejects_its_rpc(tmp_path):
    # JSON may escape a lone UTF-16 surrogate ("\\ud800"); no UTF-8 text holds one (RFC 8259, 8.2), so
    # the RPC whose span carries it is a bad_value row naming the field (found by the fuzz test, seed 61)
    lines = (DATA / "pstrain_collector.json").read_text().splitlines()
    lines[0] = lines[0].replace('"stringValue":"vm"', '"stringValue":"vm\\ud800"', 1)
    lines[1] = lines[1].replace('"key":"ddlscope.table_id"', '"key":"ddlscope\\udfff.table_id"', 1)
    path = tmp_path / "surrogates.json"
    path.write_text("\n".join(lines) + "\n")
    log = read_rpc_log(path)
    bad = log.rejected.filter(pl.col("reason") == "bad_value").sort("log_line")
    assert log.frame.height == 10 and bad.height == 2 and log.rejected.height == 2
    fields = sorted(d.split(": ")[0] for d in bad["detail"])
    assert fields == ["'ddlscope\\udfff.table_id'", "'server.resource.host.name'"]
    assert all("a text with an unpaired UTF-16 surrogate escape" in d for d in bad["detail"])
    assert check_one(path)[0] is None


@pytest.mark.parametrize("name", FILES)
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rounds=st.integers(1, 3))
def test_mutated_otlp_is_refused_in_one_line_or_accounted_for(name, seed, rounds, tmp_path_factory):
    work = tmp_path_factory.mktemp("fuzz")
    report = fuzz_otlp_reader((DATA / name).read_bytes(), [seed], work, rounds=rounds)
    assert report.failures == []
    assert report.examples == 1 and report.user_errors + report.balanced == 1


def _lines(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "m.json"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_non_integer_int_value_is_a_bad_value_of_its_rpc_not_a_file_error(tmp_path):
    # found by the fuzzer: "intValue": "nan" raised int()'s ValueError without the file's name
    lines = (DATA / "pstrain_collector.json").read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if '"kind":3' in ln)
    lines[i] = lines[i].replace('"key":"ddlscope.num_keys","value":{"intValue":"', '"key":"ddlscope.num_keys",'
                                '"value":{"intValue":"nan", "x":"', 1)
    log = read_rpc_log(_lines(tmp_path, lines))
    assert log.frame.height == 11
    assert log.rejected.get_column("reason").to_list() == ["bad_value"]
    assert log.rejected.get_column("detail").item().startswith("num_keys=nan")


def test_a_client_span_given_twice_is_one_rpc_and_one_duplicate(tmp_path):
    # found by the fuzzer: a duplicated line joined the server span twice (26 spans read as 27)
    lines = (DATA / "pstrain_collector.json").read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if '"kind":3' in ln)
    log = read_rpc_log(_lines(tmp_path, [*lines[: i + 1], lines[i], *lines[i + 1:]]))
    assert log.frame.height == 12
    assert log.rejected.select("reason", "log_line").rows() == [("duplicate_client_span", i + 2)]


def test_invalid_utf8_and_malformed_spans_read_plainly(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes((DATA / "pstrain_collector.json").read_bytes()[:500] + b"\xff" + b"\n")
    with pytest.raises(ValueError, match=f"^{bad}: not UTF-8 text at line 1 \\(byte 500\\)"):
        read_rpc_log(bad, input_format="otlp")
    doc = json.loads((DATA / "grpc_ps_ddlscope.otlp.json").read_text())
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"].append("not a span")   # after its 4 spans (3 client, 1 internal)
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))
    log = read_rpc_log(path)
    assert log.frame.height == 2
    malformed = log.rejected.filter(log.rejected["reason"] == "malformed_span")
    assert malformed.get_column("detail").to_list() == [
        "resourceSpans[0].scopeSpans[0].spans[4]: expected an object, got str"]
