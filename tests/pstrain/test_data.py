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


CRITEO_HEADER = "label," + ",".join(f"I{i}" for i in range(1, 14)) + "," + ",".join(f"C{i}" for i in range(1, 27))
CRITEO_ROW = ",".join(["0"] + ["1"] * 13 + ["ab"] * 26)  # 1 + 13 + 26 = 40 fields


def _error(path) -> str:
    with pytest.raises(DataFormatError) as info:
        load_ctr(path, 10)
    return str(info.value)


def test_ctr_rows_of_the_wrong_shape_are_errors_naming_each_line(tmp_path):
    f = tmp_path / "crit.csv"
    # line 1 header, 2 ok, 3 has 3 of 40 fields, 4 ok, 5 has 41 fields
    f.write_text("\n".join([CRITEO_HEADER, CRITEO_ROW, "1,2,3", CRITEO_ROW, CRITEO_ROW + ",extra"]) + "\n")
    with pytest.raises(DataFormatError) as info:
        load_ctr(f, 10)
    assert str(info.value) == (
        f"{f}: 2 malformed line(s) of 5: line 3: 3 field(s), expected 40 (label, I1..I13, C1..C26); "
        "line 5: 41 field(s), expected 40 (label, I1..I13, C1..C26)")


def test_ctr_file_cut_mid_row(tmp_path):
    f = tmp_path / "crit.csv"
    # cut after 30 characters: "0," + 13 x "1," + "ab" = 1 + 13 + 1 = 15 fields
    f.write_text(CRITEO_HEADER + "\n" + CRITEO_ROW + "\n" + CRITEO_ROW[:30])
    with pytest.raises(DataFormatError, match=r"crit\.csv, line 3: 15 field\(s\), expected 40 .*without a newline: "
                                              r"was it cut short\?"):
        load_ctr(f, 10)


def test_ctr_counts_every_bad_line_and_names_the_first_five(tmp_path):
    f = tmp_path / "crit.csv"
    rows = [CRITEO_ROW.replace("0", "2", 1) for _ in range(7)] + [CRITEO_ROW.replace(",1,", ",x,", 1)]
    f.write_text(CRITEO_HEADER + "\n" + "\n".join(rows) + "\n")
    message = _error(f)
    # 7 bad labels (lines 2..8) and a non-number in I1 of line 9: 8 lines, 5 shown, 3 more
    assert message.startswith(f"{f}: 8 malformed line(s) of 9: line 2, field label: expected 0 or 1, got '2'; ")
    assert message.endswith("line 6, field label: expected 0 or 1, got '2'; and 3 more")


def test_ctr_blank_lines_are_skipped_and_counted_with_true_line_numbers(tmp_path):
    f = tmp_path / "crit.csv"
    f.write_text("\n".join([CRITEO_HEADER, CRITEO_ROW, "", "  ", CRITEO_ROW.replace("0", "2", 1)]) + "\n")
    # the bad label is on line 5 of the file, after two blank lines
    with pytest.raises(DataFormatError, match=r"crit\.csv, line 5, field label: expected 0 or 1, got '2'"):
        load_ctr(f, 10)
    f.write_text("\n".join([CRITEO_HEADER, CRITEO_ROW, "", CRITEO_ROW]) + "\n\n")
    s = load_ctr(f, 10)
    assert len(s.labels) == 2 and s.blank_lines == 2


def test_ctr_quoted_fields_and_tsv_shape(tmp_path):
    f = tmp_path / "avazu.csv"
    f.write_text('id,click,hour,site\n1,0,14102100,"a,b"\n2,1,14102101,c\n')
    s = load_ctr(f, 1000)
    # the quoted comma stays inside the field: site values 'a,b' and 'c'
    assert s.format == "avazu" and s.labels.tolist() == [0.0, 1.0]
    assert sorted(s.feature_map.filter(pl.col("feature").str.starts_with("site:"))["feature"]) == ["site:a,b", "site:c"]
    t = tmp_path / "train.txt"
    t.write_text("1\t" + "\t".join(["2"] * 13) + "\t" + "\t".join(["ff"] * 26) + "\n" + "0\t1\t2\n")
    with pytest.raises(DataFormatError, match=r"train\.txt, line 2: 3 field\(s\), expected 40 tab-separated"):
        load_ctr(t, 97)


def test_binary_input_is_named_not_echoed(tmp_path):
    f = tmp_path / "garbage.bin"
    f.write_bytes(b"label\x00\x9c\xff\x01\n\x80\x81")
    message = _error(f)
    assert message == (f"{f}, line 1: not UTF-8 text (byte 6: invalid start byte); expected Criteo or Avazu CTR "
                       "samples (CSV or tab-separated text)")
    f.write_bytes(b"\x01\x02 binary\x1b[31m header\n")  # valid UTF-8 but not a header: quoted with escapes
    message = _error(f)
    assert message.endswith(r"got '\x01\x02 binary\x1b[31m header'") and "\x1b" not in message
