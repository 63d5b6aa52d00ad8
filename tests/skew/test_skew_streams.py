"""Readers of key streams: text tokens, a categorical column, RPC logs, update-count tables; the
replay of a raw stream as data-parallel training."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from ddlscope.skew.streams import (
    detect_kind,
    emulate_training,
    load_stream,
    read_categorical_column,
    read_rpc_log_keys,
    read_text_tokens,
    read_update_table,
    with_vocabulary,
)


def test_text_tokenisation_rule(tmp_path: Path) -> None:
    p = tmp_path / "t.txt"
    p.write_text("Don't, Citizen!\nthe THE the 42\n")
    s = read_text_tokens(p)
    # lower-case, maximal runs of a-z: don | t | citizen | the the the (digits separate, dropped)
    assert s.keys["label"].to_list() == ["don", "t", "citizen", "the"]
    assert s.events["key"].to_list() == [0, 1, 2, 3, 3, 3]
    assert set(s.events["op"].cast(pl.String).to_list()) == {"access"}


def test_categorical_column_counts_empty_cells(tmp_path: Path) -> None:
    p = tmp_path / "ctr.csv"
    p.write_text("label,C1,C2\n1,aa,x\n0,,y\n1,bb,\n0,aa,z\n")
    s = read_categorical_column(p, "C1")
    assert s.keys["label"].to_list() == ["aa", "bb"]
    assert s.events["key"].to_list() == [0, 1, 0]
    assert s.skipped == {"empty value": 1}
    with pytest.raises(ValueError, match=r"no column 'C9' \(columns: label, C1, C2\)"):
        read_categorical_column(p, "C9")


def test_criteo_column_real(shared_data: Path) -> None:
    s = load_stream(shared_data / "criteo" / "criteo_sample.txt", column="C26")
    # 200 data rows; C26 is empty in 82 of them (counted with pandas-free csv parsing below)
    lines = (shared_data / "criteo" / "criteo_sample.txt").read_text().splitlines()
    header = lines[0].split(",")
    values = [line.split(",")[header.index("C26")] for line in lines[1:]]
    assert s.num_events == sum(1 for v in values if v) == 118
    assert s.skipped == {"empty value": sum(1 for v in values if not v)} == {"empty value": 82}
    assert s.num_keys == len({v for v in values if v})


def _rpc_rows() -> list[dict]:
    return [
        {"rpc_id": 10, "worker_id": 0, "iteration": 0, "op": "push_sparse", "table_id": 1, "keys": [7, 8],
         "client_issue_ns": 200},
        {"rpc_id": 11, "worker_id": 1, "iteration": 0, "op": "pull_sparse", "table_id": 1, "keys": [8],
         "client_issue_ns": 100},
        {"rpc_id": 12, "worker_id": 1, "iteration": 0, "op": "push_dense", "table_id": None, "keys": None,
         "client_issue_ns": 150},
        {"rpc_id": 13, "worker_id": 0, "iteration": 1, "op": "push_sparse", "table_id": 2, "keys": [7],
         "client_issue_ns": 300},
    ]


def test_rpc_log_keys(tmp_path: Path) -> None:
    p = tmp_path / "log.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in _rpc_rows()))
    assert detect_kind(p) == "rpc_log"
    s = read_rpc_log_keys(p)
    # ordered by client_issue_ns: rpc 11 (pull 1:8), rpc 10 (push 1:7, 1:8), rpc 13 (push 2:7)
    assert s.keys["label"].to_list() == ["1:8", "1:7", "2:7"]  # table 2's key 7 is another row
    ev = s.events
    assert ev["key"].to_list() == [0, 1, 0, 2]
    assert ev["op"].cast(pl.String).to_list() == ["pull", "push", "push", "push"]
    assert ev["rpc_id"].to_list() == [11, 10, 10, 13]
    assert ev["iteration"].to_list() == [0, 0, 0, 1]
    assert s.skipped == {"RPC without keys (null or empty 'keys', e.g. dense ops)": 1}


def test_rpc_log_bad_op_names_the_row(tmp_path: Path) -> None:
    rows = _rpc_rows()
    rows[2]["op"] = "get"
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(ValueError, match=r"bad.jsonl:3: op 'get' is not one of"):  # row 2 is the file's line 3
        read_rpc_log_keys(p)


def test_update_table(tmp_path: Path) -> None:
    p = tmp_path / "updates.parquet"
    pl.DataFrame({"iteration": [1, 0, 0, 1], "table_id": [0, 0, 0, 0], "key": [5, 5, 6, 7],
                  "updates": [2, 3, 0, 1]}).write_parquet(p)
    assert detect_kind(p) == "update_table"
    s = read_update_table(p)
    # iteration order (file order within one): (0, 5, 3), (1, 5, 2), (1, 7, 1); (0, 6, 0) skipped
    assert s.events["count"].to_list() == [3, 2, 1]
    assert s.events["key"].to_list() == [0, 0, 1]
    assert s.skipped == {"zero updates": 1}
    p2 = tmp_path / "neg.parquet"
    pl.DataFrame({"iteration": [0], "key": [1], "updates": [-1]}).write_parquet(p2)
    with pytest.raises(ValueError, match="row 0: updates must be >= 0"):
        read_update_table(p2)


def test_unknown_table_needs_a_column(tmp_path: Path) -> None:
    p = tmp_path / "x.parquet"
    pl.DataFrame({"a": [1]}).write_parquet(p)
    with pytest.raises(ValueError, match="name a key column with --column"):
        load_stream(p)


def test_emulate_training_by_hand(tmp_path: Path) -> None:
    p = tmp_path / "t.txt"
    p.write_text("a b a c b b d e")
    s = emulate_training(read_text_tokens(p), workers=2, batch_events=2)
    # iteration 0 = tokens 0-3: worker 0 [a b], worker 1 [a c]; iteration 1: worker 0 [b b] -> {b},
    # worker 1 [d e]. Per iteration: all pulls (worker order), then the same keys as pushes.
    ids = {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4}
    it0, it1 = [ids[k] for k in "abac"], [ids[k] for k in "bde"]
    assert s.events["key"].to_list() == it0 + it0 + it1 + it1
    assert s.events["op"].cast(pl.String).to_list() == ["pull"] * 4 + ["push"] * 4 + ["pull"] * 3 + ["push"] * 3
    assert s.events["worker_id"].to_list() == [0, 0, 1, 1] * 2 + [0, 1, 1] * 2
    assert s.events["iteration"].to_list() == [0] * 8 + [1] * 6
    assert s.events["count"].to_list() == [1] * 14


def test_vocabulary_names_integer_keys(tmp_path: Path) -> None:
    p = tmp_path / "updates.parquet"
    pl.DataFrame({"iteration": [0, 0, 1], "table_id": [0, 1, 0], "key": [5, 5, 9], "updates": [1, 1, 1]}
                 ).write_parquet(p)
    v = tmp_path / "vocabulary.parquet"
    pl.DataFrame({"table_id": [0, 1], "key": [5, 5], "feature": ["the", "C1=ab"]}).write_parquet(v)
    s = with_vocabulary(read_update_table(p), v)
    # (0, 5) -> the, (1, 5) -> C1=ab, (0, 9) is not in the vocabulary and keeps "0:9"
    assert s.keys["label"].to_list() == ["the", "C1=ab", "0:9"]
    assert "1 keys not in it" in s.notes[-1]
    text = tmp_path / "t.txt"
    text.write_text("a b")
    with pytest.raises(ValueError, match="has none"):
        with_vocabulary(read_text_tokens(text), v)


def test_rpc_log_read_once_for_keys_and_the_checked_table(tmp_path: Path) -> None:
    from ddlscope.skew.streams import read_rpc_log_with_keys

    p = tmp_path / "log.jsonl"
    lines = [json.dumps(r) for r in _rpc_rows()]
    p.write_text("\n".join([lines[0], "{not json", *lines[1:]]))
    r = read_rpc_log_with_keys(p)
    # line 2 is not JSON: counted; the dense RPC (no keys) too; the 4 keys of the 3 sparse RPCs remain
    assert r.stream.num_events == 4
    assert r.stream.skipped == {"rejected line (unparseable_line)": 1,
                                "RPC without keys (null or empty 'keys', e.g. dense ops)": 1}
    # the rows have no timestamps: no checked table, and the reason names the missing columns
    assert r.log is None and "missing required column(s) server_id" in r.log_error
    assert read_rpc_log_keys(p).events.equals(r.stream.events)


def test_update_table_cut_short_and_null_updates_are_counted(tmp_path: Path) -> None:
    # before: a row with a null 'updates' was dropped without a count; the cut last line padded with nulls
    p = tmp_path / "updates.csv"
    p.write_text("iteration,key,updates\n0,5,3\n0,6,\n1,5,2\n1,7")   # line 3: no updates; line 5: cut short
    s = read_update_table(p)
    assert s.events["count"].to_list() == [3, 2]   # (0, 5, 3), (1, 5, 2)
    assert s.skipped == {"null updates": 1, "rejected line (truncated_last_line)": 1}
    # every data row is accounted for: 4 rows = 2 used + 1 null updates + 1 truncated
    assert s.used_rows + sum(s.skipped.values()) == 4


def test_rpc_log_ids_that_are_not_whole_numbers_name_the_line(tmp_path: Path) -> None:
    # before: Polars' InvalidOperationError (a traceback) for a float table_id of inf
    rows = _rpc_rows()
    rows[1]["table_id"] = 1.5
    p = tmp_path / "log.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(ValueError, match=r"log\.jsonl:2: table_id 1\.5 is not a whole number"):
        read_rpc_log_keys(p)
    frame = pl.DataFrame(rows[:1]).with_columns(pl.lit(float("inf")).alias("table_id"))
    frame.write_parquet(tmp_path / "log.parquet")
    with pytest.raises(ValueError, match=r"log\.parquet:1: table_id inf is not a whole number"):
        read_rpc_log_keys(tmp_path / "log.parquet")


def test_text_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "t.txt"
    p.write_bytes(b"to be\nor not\xff to be\n")
    with pytest.raises(ValueError, match=r"t\.txt:2: not UTF-8 text: byte 13 of the file \(byte 7 of the line\): 0xff"):
        read_text_tokens(p)   # offset 12 = "to be\n" (6) + "or not" (6)


@pytest.mark.parametrize("name", ["skew update table", "skew update table parquet", "skew column",
                                  "skew rpc keys jsonl", "skew rpc keys parquet", "skew text"])
def test_fuzz_stream_readers(name: str, shared_data: Path, tmp_path_factory) -> None:
    """Seeded mutations of real (Criteo, Shakespeare) and built inputs: a clean error naming the
    file, or every row used or skipped with a reason; never a traceback or a silent drop."""
    from ddlscope.testing.fuzz import check_target

    check_target(name, tmp_path_factory.mktemp("fuzz"))
