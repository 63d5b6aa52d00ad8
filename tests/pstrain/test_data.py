"""Readers of the text and CTR formats, on hand-made files and on the real samples."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from ddlscope.pstrain.data import DataFormatError, load_ctr, load_text


def test_text_keys_are_frequency_ranks(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("B a b, C! b A o'er\n")
    c = load_text(f)
    # counts: b 3, a 2, c 1, o'er 1 (ties by first occurrence: c before o'er)
    assert c.words == ("b", "a", "c", "o'er")
    assert c.counts.tolist() == [3, 2, 1, 1]
    assert c.tokens.tolist() == [0, 1, 0, 2, 0, 1, 3]


def test_tinyshakespeare(shared_data):
    c = load_text(shared_data / "text" / "tinyshakespeare.txt")
    # the same tokenisation with coreutils/grep gives 203,836 words, 12,373 distinct, 'the' 6,287 times:
    # tr A-Z a-z < tinyshakespeare.txt | grep -oE "[a-z]+('[a-z]+)*" | sort | uniq -c | sort -rn
    assert len(c.tokens) == 203_836
    assert len(c.words) == 12_373
    assert c.words[:3] == ("the", "and", "to")
    assert c.counts[:3].tolist() == [6287, 5690, 4902]
    assert int(c.counts.sum()) == len(c.tokens)


def test_text_errors(tmp_path):
    f = tmp_path / "bin.txt"
    f.write_bytes(b"hello \xff world")
    with pytest.raises(DataFormatError, match="byte 6"):
        load_text(f)
    f.write_text("one")
    with pytest.raises(DataFormatError, match="1 word"):
        load_text(f)


def test_criteo_sample(shared_data):
    s = load_ctr(shared_data / "criteo" / "criteo_sample.txt", rows=1 << 16)
    assert s.format == "criteo" and s.keys.shape == (200, 26) and s.dense.shape == (200, 13)
    assert s.labels.sum() == 49  # SOURCES.md: 151 x 0, 49 x 1
    # first data row: I1 empty -> 0, I2 = 3 -> log(1 + 3), I3 = 260.0 -> log(261)
    np.testing.assert_allclose(s.dense[0, :3], [0.0, np.log(4.0), np.log(261.0)], rtol=1e-6)
    # second row: I2 = -1 is clipped to 0 -> log(1) = 0
    assert s.dense[1, 1] == 0.0
    assert ((s.keys >= 0) & (s.keys < 1 << 16)).all()
    # the same value in the same field hashes to the same key: C5 of rows 1 and 2 is 25c83c98
    assert s.keys[0, 4] == s.keys[1, 4]
    # every (field, value) is in the feature map with the count of its occurrences
    assert s.feature_map["count"].sum() == 200 * 26
    c5 = s.feature_map.filter(pl.col("feature") == "C5:25c83c98")
    assert c5["key"].to_list() == [int(s.keys[0, 4])]


def test_avazu_sample(shared_data):
    s = load_ctr(shared_data / "criteo" / "avazu_sample.txt", rows=1000)
    assert s.format == "avazu" and s.keys.shape == (100, 22) and s.dense.shape == (100, 0)
    assert s.labels.sum() == 20  # SOURCES.md: click 80/20
    assert s.fields[0] == "hour"


def test_ctr_errors(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(DataFormatError, match="line 1"):
        load_ctr(bad, 10)
    header = "label," + ",".join(f"I{i}" for i in range(1, 14)) + "," + ",".join(f"C{i}" for i in range(1, 27))
    row = ["0"] + ["1"] * 13 + ["ab"] * 26
    bad.write_text(header + "\n" + ",".join(row) + "\n" + ",".join(["2", *row[1:]]) + "\n")
    with pytest.raises(DataFormatError, match=r"line 3, field label: expected 0 or 1"):
        load_ctr(bad, 10)
    row[5] = "x"
    bad.write_text(header + "\n" + ",".join(row) + "\n")
    with pytest.raises(DataFormatError, match=r"line 2, field I5: 'x' is not a number"):
        load_ctr(bad, 10)


def test_criteo_tsv_without_header(tmp_path):
    f = tmp_path / "train.txt"
    rows = ["1\t" + "\t".join(["2"] * 13) + "\t" + "\t".join(["ff"] * 26), "0\t" + "\t" * 38]
    f.write_text("\n".join(rows) + "\n")
    s = load_ctr(f, 97)
    assert s.format == "criteo" and s.labels.tolist() == [1.0, 0.0]
    np.testing.assert_allclose(s.dense[0], np.log(3.0), rtol=1e-6)
    assert (s.dense[1] == 0).all()
