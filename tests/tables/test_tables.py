"""The reading layer: CSV lines accounted for, UTF-8 offsets, JSON documents, and the format registry."""

from __future__ import annotations

import gzip
import json
import re

import polars as pl
import pytest

from ddlscope.tables import (
    FORMATS,
    CsvOptions,
    TableFormat,
    check_utf8,
    detect_format,
    read_csv,
    read_jsonl,
    read_parquet,
    read_table_file,
    register_format,
    scan_parquet,
    utf16_encoding,
)


def test_every_csv_line_is_kept_rejected_or_blank(tmp_path):
    p = tmp_path / "t.csv"
    # line 1 header (3 fields); 2 ok; 3 blank; 4 extra field; 5 short; 6 quoted comma ok; 7 cut (no newline)
    p.write_bytes(b'a,b,c\n1,2,3\n\n4,5,6,7\n8,9\n"x,y",10,11\n12')
    tf = read_csv(p)
    assert tf.frame.select("_line", "a", "b", "c").rows() == [(2, "1", "2", "3"), (6, "x,y", "10", "11")]
    assert tf.rejected.select("line", "reason", "detail").rows() == [
        (4, "extra_fields", "expected 3 fields, got 4"),
        (5, "missing_fields", "expected 3 fields, got 2"),
        (7, "truncated_last_line", "the file ends without a newline in this line: 1 of 3 fields")]
    # 6 data lines (2, 4, 5, 6, 7 and ... ) = 2 kept + 3 rejected; line 3 is blank
    assert (tf.data_rows, tf.blank_lines, tf.balanced) == (5, 1, True)
    padded = read_csv(p, CsvOptions(short_lines="pad"))
    assert padded.frame.filter(pl.col("_line") == 5).select("a", "b", "c").row(0) == ("8", "9", None)


def test_a_last_line_cut_inside_quotes_is_truncated_not_an_error(tmp_path):
    p = tmp_path / "q.csv"
    p.write_bytes(b'a,b\n1,"two"\n3,"fo')
    tf = read_csv(p)
    assert tf.frame["b"].to_list() == ["two"]
    assert tf.rejected.select("line", "reason").rows() == [(3, "truncated_last_line")]
    # an unclosed quote before the last line is an error naming its line
    (tmp_path / "open.csv").write_bytes(b'a,b\n1,"two\n3,4\n')
    with pytest.raises(ValueError, match=r"open\.csv:2: a quote is not closed on its line"):
        read_csv(tmp_path / "open.csv")


def test_check_utf8_gives_line_and_offsets():
    data = b"ok\nab\xffc\nfine\n\xc3\x28\n"
    fixed, problems = check_utf8(data)
    assert fixed.split(b"\n") == [b"ok", "ab\ufffdc".encode(), b"fine", "\ufffd(".encode(), b""]
    # 0xff at offset 5 = "ok\n" (3) + "ab" (2), byte 3 of line 2; 0xc3 at 3 + 5 + 5 = 13, byte 1 of line 4
    assert [(p.line, p.offset, p.column, p.bad) for p in problems] == [(2, 5, 3, "ff"), (4, 13, 1, "c3")]
    assert check_utf8(b"plain\n") == (b"plain\n", [])


@pytest.mark.parametrize(("codec", "said"), [
    ("utf-16-le", "UTF-16 LE (a NUL byte after every character)"),
    ("utf-16-be", "UTF-16 BE (a NUL byte before every character)"),
    ("utf-16", "UTF-16 LE (byte-order mark)"),  # Python writes its native order with a mark
])
def test_utf16_tables_are_refused_naming_the_encoding(tmp_path, codec, said):
    text = "a,b\n1,2\n"
    (tmp_path / "t.csv").write_bytes(text.encode(codec))
    (tmp_path / "t.jsonl").write_bytes('{"a": 1}\n'.encode(codec))
    for reader, name in ((read_csv, "t.csv"), (read_jsonl, "t.jsonl")):
        want = rf"{re.escape(name)}:1: the file is {re.escape(said)}, not UTF-8: save it as UTF-8"
        with pytest.raises(ValueError, match=want):
            reader(tmp_path / name)


def test_utf16_guess_leaves_utf8_alone():
    assert utf16_encoding(b"a,b\n1,2\n") is None
    assert utf16_encoding("é,ü\n1,2\n".encode()) is None
    assert utf16_encoding(b"a\x00,b\n") is None  # one NUL in UTF-8 text: not the every-other-byte pattern
    assert utf16_encoding(b"a\x00") is None  # too short to tell
    assert utf16_encoding("ab".encode("utf-16-le")) == "UTF-16 LE (a NUL byte after every character)"
    assert utf16_encoding("ab".encode("utf-32")) == "UTF-32 LE (byte-order mark)"  # not UTF-16's mark
    assert utf16_encoding(b"\x00\x00\xfe\xff\x00\x00\x00a") == "UTF-32 BE (byte-order mark)"


def test_gzip_csv_and_lazy_parquet(tmp_path):
    (tmp_path / "t.csv.gz").write_bytes(gzip.compress(b"a,b\n1,2\n3,4\n"))
    assert detect_format(tmp_path / "t.csv.gz") == "csv"
    assert read_table_file(tmp_path / "t.csv.gz").frame["b"].to_list() == ["2", "4"]
    pl.DataFrame({"x": [1, 2, 3], "y": ["a", "b", "c"]}).write_parquet(tmp_path / "t.parquet")
    lf = scan_parquet(tmp_path / "t.parquet", ["y"])
    assert isinstance(lf, pl.LazyFrame) and lf.collect().rows() == [(1, "a"), (2, "b"), (3, "c")]
    assert read_parquet(tmp_path / "t.parquet").frame.columns == ["x", "y", "_line"]
    with pytest.raises(ValueError, match=r"t\.parquet: no column\(s\) \['z'\] \(columns: x, y\)"):
        scan_parquet(tmp_path / "t.parquet", ["z"])


def test_jsonl_lines_and_documents(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_bytes(b'{"a": 1}\n\n[1, 2]\n{"a": 2}\n{"a": 3')
    tf = read_jsonl(p)
    assert tf.frame.select("_line", "a").rows() == [(1, 1), (4, 2)]
    assert tf.rejected.select("line", "reason", "detail").rows() == [
        (3, "unparseable_line", "expected a JSON object, got list"),
        (5, "truncated_last_line", "the file ends without a newline inside this JSON object")]
    assert (tf.data_rows, tf.blank_lines) == (4, 1)
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps({"a": 1, "b": [1, 2]}, indent=2))
    with pytest.raises(ValueError, match=r"doc\.json: one JSON object with keys a, b, not JSON lines; expected JSON "
                                         r"lines: one JSON object per line$"):
        read_jsonl(doc)


def test_a_new_format_is_one_registry_entry(tmp_path):
    # a pipe-separated table: the CSV reader with another separator, registered under its own suffix
    def read_psv(path, *, label=None, **options):
        return read_csv(path, CsvOptions(separator="|", **options), label=label)

    try:
        register_format(TableFormat("psv", (".psv",), read_psv, description="pipe-separated values"))
        (tmp_path / "t.psv").write_text("a|b\n1|2\n3|4|5\n")
        assert detect_format(tmp_path / "t.psv") == "psv"
        tf = read_table_file(tmp_path / "t.psv")
        assert tf.frame["b"].to_list() == ["2"] and tf.rejected["reason"].to_list() == ["extra_fields"]
    finally:
        FORMATS.pop("psv", None)
    with pytest.raises(ValueError, match=r"t\.psv: unknown suffix '\.psv'; expected one of csv \(\.csv\), "):
        read_table_file(tmp_path / "t.psv")


def test_json_suffix_is_sniffed_between_otlp_and_json_lines(tmp_path):
    import ddlscope.rpc.readers  # noqa: F401 - registers otlp

    (tmp_path / "spans.json").write_text('{"resourceSpans": []}\n')
    (tmp_path / "rows.json").write_text('{"a": 1}\n')
    assert detect_format(tmp_path / "spans.json") == "otlp"
    assert detect_format(tmp_path / "rows.json") == "jsonl"


def test_comment_lines_are_skipped_and_counted_with_their_line_numbers(tmp_path):
    p = tmp_path / "c.csv"
    # 1 comment; 2 blank; 3 indented comment; 4 header; 5 ok; 6 comment holding a quote, commas and
    # bad bytes; 7 extra field; 8 blank; 9 ok with '#' inside a field; 10 short; 11 '#' not first: a row
    p.write_bytes(b'# made by hand\n\n   # "a, b\na,b\n1,2\n# "x,y,\xff\n3,4,5\n\n5,#6\n7\nx#,8\n')
    tf = read_csv(p, CsvOptions(comment_prefix="#"))
    assert tf.header == ["a", "b"]
    assert tf.frame.select("_line", "a", "b").rows() == [(5, "1", "2"), (9, "5", "#6"), (11, "x#", "8")]
    assert tf.rejected.select("line", "reason", "detail").rows() == [
        (7, "extra_fields", "expected 2 fields, got 3"), (10, "missing_fields", "expected 2 fields, got 1")]
    # 11 lines: 1 header + 3 comments + 2 blank + 5 data (3 kept, 2 rejected)
    assert (tf.data_rows, tf.blank_lines, tf.comment_lines, tf.balanced) == (5, 2, 3, True)
    # without the option, line 1 is the header and line 3's quote is a field's
    with pytest.raises(ValueError, match=r"c\.csv:3: a quote is not closed on its line"):
        read_csv(p)


def test_comment_prefix_with_a_byte_order_mark_crlf_and_a_cut_last_line(tmp_path):
    p = tmp_path / "b.csv"
    # 1 BOM + comment; 2 header; 3 ok; 4 comment; 5 cut inside a quote (no newline)
    p.write_bytes(b'\xef\xbb\xbf#c\r\nx,y\r\n"1,5",2\r\n  #z\r\n3,"fo')
    tf = read_csv(p, CsvOptions(comment_prefix="#"))
    assert tf.header == ["x", "y"]
    assert tf.frame.select("_line", "x", "y").rows() == [(3, "1,5", "2")]
    assert tf.rejected.select("line", "reason").rows() == [(5, "truncated_last_line")]
    assert (tf.data_rows, tf.blank_lines, tf.comment_lines) == (2, 0, 2)
    # a longer prefix, and a file whose comments end it without a newline
    (tmp_path / "s.csv").write_bytes(b"-- head\nx,y\n-- 1,2\n1,2\n-- end")
    tf = read_csv(tmp_path / "s.csv", CsvOptions(comment_prefix="--"))
    assert tf.frame.select("_line", "x", "y").rows() == [(4, "1", "2")] and tf.rejected.height == 0
    assert (tf.data_rows, tf.comment_lines) == (1, 3)


def test_comment_prefix_errors_name_the_line(tmp_path):
    (tmp_path / "only.csv").write_bytes(b"# nothing\n\n  # here\n")
    with pytest.raises(ValueError, match=r"only\.csv: no header line: every line is blank or a comment"):
        read_csv(tmp_path / "only.csv", CsvOptions(comment_prefix="#"))
    (tmp_path / "h.csv").write_bytes(b"# ok\n\na,\xffb\n1,2\n")
    with pytest.raises(ValueError, match=r"h\.csv:3: the header is not UTF-8 text: byte 9 of the file "):
        read_csv(tmp_path / "h.csv", CsvOptions(comment_prefix="#"))
    # an unclosed quote, and a closing quote followed by a letter, name their line (not a comment's)
    (tmp_path / "q.csv").write_bytes(b'# "\na,b\n1,2\n3,"x\n')
    with pytest.raises(ValueError, match=r"q\.csv:4: a quote is not closed on its line"):
        read_csv(tmp_path / "q.csv", CsvOptions(comment_prefix="#"))
    (tmp_path / "x.csv").write_bytes(b'# "\na,b\n1,"2"\n3,"4"x\n')
    with pytest.raises(ValueError, match=r"x\.csv:4: not CSV: a quoted field must close its quote and be followed"):
        read_csv(tmp_path / "x.csv", CsvOptions(comment_prefix="#"))
    with pytest.raises(ValueError, match="comment_prefix: expected a non-empty string"):
        read_csv(tmp_path / "x.csv", CsvOptions(comment_prefix=""))


def test_lines_of_spaces_before_the_header_are_blank_and_cr_only_line_ends_are_an_error(tmp_path):
    # 1 comment; 2 spaces; 3 a tab; 4 header; 5 ok; 6 spaces after the header: a row with 1 field
    p = tmp_path / "s.csv"
    p.write_bytes(b"# runs\n   \n\t\na,b\n1,2\n  \n")
    tf = read_csv(p, CsvOptions(comment_prefix="#"))
    assert tf.header == ["a", "b"]
    assert tf.frame.select("_line", "a", "b").rows() == [(5, "1", "2")]
    assert tf.rejected.select("line", "reason").rows() == [(6, "missing_fields")]
    assert (tf.data_rows, tf.blank_lines, tf.comment_lines, tf.balanced) == (2, 2, 1, True)
    # classic Mac OS line ends: the whole file would be one line; a trailing CR alone is fine
    (tmp_path / "cr.csv").write_bytes(b"a,b\r1,2\r3,4\r")
    with pytest.raises(ValueError, match=r"cr\.csv: lines end in CR only \(classic Mac OS line ends\)"):
        read_csv(tmp_path / "cr.csv")
    (tmp_path / "one.csv").write_bytes(b"a,b\r")
    assert read_csv(tmp_path / "one.csv").header == ["a", "b"]
