"""Text read from users' files reaches the terminal with its control characters shown, not raw:
a NUL prints as nothing and ESC starts a terminal command (report.console.shown, format_value,
and the CLI's error line)."""

from __future__ import annotations

from typer.testing import CliRunner

from ddlscope.cli.main import app
from ddlscope.report.console import format_value, shown


def test_control_characters_are_shown_as_hex_escapes():
    assert shown("res\x00net\x1b[31m50\x7f\x85") == "res\\x00net\\x1b[31m50\\x7f\\x85"
    assert shown("tab\tand\nnewline, é, 中") == "tab\tand\nnewline, é, 中"
    assert format_value("a\x00b") == "a\\x00b"
    assert format_value(None) == "-" and format_value(0.5) == "0.5"


def test_a_nul_in_a_measurement_table_is_shown_in_the_rejected_rows_and_errors(tmp_path):
    runner = CliRunner()
    rows = tmp_path / "nul.csv"
    rows.write_bytes(b"model,gpu,gpus,batch_per_gpu,precision,throughput,throughput_unit\n"
                     b"resnet50,V100-SXM2-16GB,1,64,fp32,300,images/s\n"
                     b"res\x00net50,V100-SXM2-16GB,1,64,fp32,300,images/s\n")
    out = runner.invoke(app, ["validate", "--measurements", str(rows)])
    assert out.exit_code == 0, out.output
    assert "model = res\\x00net50: not a zoo model" in out.output and "\x00" not in out.output
    named = tmp_path / "run\x1b[2J.csv"  # a file name holding ESC (Linux allows any byte but / and NUL)
    named.write_bytes(b"model,gpu\nx,y\n")
    bad = runner.invoke(app, ["validate", "--measurements", str(named)])
    assert bad.exit_code == 2 and "missing column(s)" in bad.output
    assert "\x1b" not in bad.output and "run\\x1b[2J.csv" in bad.output, bad.output


def test_a_file_name_with_escape_codes_is_shown_escaped_in_the_table_title(tmp_path):
    named = tmp_path / "x\x1b[31mevil.csv"
    named.write_bytes(b"model,gpu,gpus,batch_per_gpu,precision,throughput,throughput_unit\n"
                      b"resnet50,V100-SXM2-16GB,1,64,fp32,300,images/s\n")
    out = CliRunner().invoke(app, ["validate", "--measurements", str(named)])
    assert out.exit_code == 0, out.output
    assert "\x1b" not in out.output and "x\\x1b[31mevil.csv): error per source" in out.output
