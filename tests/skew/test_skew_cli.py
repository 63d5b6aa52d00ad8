"""``ddlscope rpc skew`` and ``ddlscope rpc offload`` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddlscope.cli.main import app
from ddlscope.cli.rpc_skew import parse_bytes

runner = CliRunner()


def test_parse_bytes() -> None:
    assert parse_bytes("256KiB") == 262_144
    assert parse_bytes("1.5 MiB") == 1_572_864
    assert parse_bytes("1.5KiB") == 1_536
    assert parse_bytes("4MB") == 4_000_000
    assert parse_bytes("1000") == 1000
    for bad, message in (("4 furlongs", "expected a size like"), ("-5", "expected a size like"),
                         ("10 XB", "expected a size like"), ("0.5B", "not a whole number of bytes"),
                         ("0.1KiB", "not a whole number of bytes"),
                         ("99999999999999999999999", "expected at most 1 TiB")):
        with pytest.raises(ValueError, match=message):
            parse_bytes(bad)


def test_cli_constants_match_the_analysis_modules() -> None:
    from ddlscope.cli import rpc_dissect, rpc_skew
    from ddlscope.rpc.readers import INPUT_FORMATS
    from ddlscope.rpc.validate import TIME_UNITS
    from ddlscope.skew import frequency, offload, streams

    assert rpc_dissect.INPUT_FORMATS == INPUT_FORMATS and tuple(TIME_UNITS) == rpc_dissect.TIME_UNITS
    assert rpc_skew.SOURCE_KINDS == streams.SOURCE_KINDS and rpc_skew.POLICIES == offload.POLICIES
    assert rpc_skew.DEFAULT_WINDOW_EVENTS == frequency.DEFAULT_WINDOW_EVENTS
    assert (rpc_skew.DEFAULT_VALUE_BYTES, rpc_skew.DEFAULT_KEY_BYTES, rpc_skew.DEFAULT_METADATA_BYTES,
            rpc_skew.DEFAULT_SPACE_SAVING_COUNTERS) == (offload.DEFAULT_VALUE_BYTES, offload.DEFAULT_KEY_BYTES,
                                                        offload.DEFAULT_METADATA_BYTES,
                                                        offload.DEFAULT_SPACE_SAVING_COUNTERS)


def test_the_rpc_cli_modules_import_no_analysis_or_plotting_library() -> None:
    code = ("import sys, ddlscope.cli.rpc_dissect, ddlscope.cli.rpc_skew; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('scipy', 'matplotlib') "
            "or m.startswith(('ddlscope.rpc', 'ddlscope.skew', 'ddlscope.report'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")})
    assert out.stdout.strip() == "[]"


def test_skew_on_a_criteo_column_json(shared_data: Path) -> None:
    res = runner.invoke(app, ["rpc", "skew", str(shared_data / "criteo" / "criteo_sample.txt"), "--column", "C1",
                              "--format", "json", "--top", "3"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    # C1 of the 200-row sample: 200 values, 27 distinct; the most frequent, 05db9164, 87 times
    assert out["events"] == 200
    assert out["distinct_keys"] == 27
    assert out["rows"][0]["label"] == "05db9164"
    assert out["top_1pct_share"] == pytest.approx(87 / 200)


def test_skew_table_and_report(tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_text(" ".join(["the"] * 50 + ["of"] * 20 + ["and"] * 10 + [f"w{'a' * i}" for i in range(30)]))
    res = runner.invoke(app, ["rpc", "skew", str(text), "--report", str(tmp_path / "rep"), "--window", "40"])
    assert res.exit_code == 0, res.output
    assert "Zipf rank-frequency" in res.output
    for name in ("index.html", "summary.json", "figures/rank_frequency.png", "figures/coverage.png",
                 "figures/churn.png", "tables/rank_frequency.csv"):
        assert (tmp_path / "rep" / name).exists(), name
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["events"] == 110
    assert summary["distinct_keys"] == 33


def test_offload_csv_and_report(tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_text(" ".join(["the", "of", "the", "and", "the", "x", "of", "y"] * 20))
    res = runner.invoke(app, ["rpc", "offload", str(text), "--workers", "2", "--batch-events", "8",
                              "--budget", "1KiB", "--budget", "2KiB", "--dim", "16", "-p", "lfu", "-p", "oracle",
                              "--format", "csv", "--report", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("policy,budget_bytes,capacity_keys,")
    # entry 16 x 4 + 16 = 80 B: 1 KiB holds floor(1024 / 80) = 12 keys, more than the 5 distinct words
    assert lines[1].startswith("lfu,1024,12,")
    assert len(lines) == 1 + 4
    assert (tmp_path / "rep" / "figures" / "offload.png").exists()


def test_user_errors_exit_2(shared_data: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["rpc", "skew", str(shared_data / "criteo" / "criteo_sample.txt"), "-c", "C99"])
    assert res.exit_code == 2
    assert "no column 'C99'" in " ".join(res.output.split())
    res = runner.invoke(app, ["rpc", "offload", str(tmp_path / "missing.txt")])
    assert res.exit_code == 2
    assert "no such file" in " ".join(res.output.split())
    text = tmp_path / "one.txt"
    text.write_text("a b c")
    res = runner.invoke(app, ["rpc", "offload", str(text)])  # one iteration only
    assert res.exit_code == 2
    assert "at least 2 iterations" in " ".join(res.output.split())


def test_offload_checks_budgets_before_reading_and_hints_at_a_working_replay(shared_data: Path, tmp_path: Path) -> None:
    # the budget is checked before the (missing) source is read; the entry is 64 x 4 + 8 + 8 = 272 B
    res = runner.invoke(app, ["rpc", "offload", str(tmp_path / "missing.txt"), "-b", "143B"])
    assert res.exit_code == 2
    assert "--budget 143B: holds no switch entry; an entry takes 272 B" in " ".join(res.output.split())
    res = runner.invoke(app, ["rpc", "offload", str(tmp_path / "missing.txt"), "-b", "99999999999999999999999"])
    assert res.exit_code == 2 and "at most 1 TiB" in res.output and "Traceback" not in res.output
    criteo = str(shared_data / "criteo" / "criteo_sample.txt")
    # C3 of the 200-row sample has 191 non-empty cells: 8 x 1024 events per iteration give 1 iteration;
    # the hint keeps 8 workers with floor(191 / (8 x 10)) = 2 events each: ceil(191 / 16) = 12 iterations
    res = runner.invoke(app, ["rpc", "offload", criteo, "-c", "C3"])
    assert res.exit_code == 2
    assert ("191 events at 8 worker(s) x 1024 events per mini-batch make 1 iteration; lower --workers or "
            "--batch-events, e.g. --workers 8 --batch-events 2 gives 12 iterations") in " ".join(res.output.split())
    # the docs' example: little skew, so installs and write-backs cost more than the switch saves
    res = runner.invoke(app, ["rpc", "offload", criteo, "-c", "C3", "--workers", "2", "--batch-events", "10",
                              "-p", "lfu", "--format", "csv"])
    assert res.exit_code == 0, res.output
    saved = [float(line.split(",")[14]) for line in res.stdout.splitlines()[1:]]
    assert res.stdout.splitlines()[0].split(",")[14] == "server_bytes_saved_fraction"
    assert min(saved) < 0


def test_skew_reads_damaged_or_non_table_sources_with_one_line_errors(shared_data: Path, tmp_path: Path) -> None:
    data = (tmp_path / "t.parquet")
    import polars as pl

    pl.DataFrame({"iteration": [0, 1], "key": [1, 2], "updates": [3, 4]}).write_parquet(data)
    (tmp_path / "trunc.parquet").write_bytes(data.read_bytes()[:40])
    res = runner.invoke(app, ["rpc", "skew", str(tmp_path / "trunc.parquet")])
    assert res.exit_code == 2 and "trunc.parquet: cannot read as Parquet" in " ".join(res.output.split())
    text = shared_data / "text" / "tinyshakespeare.txt"
    res = runner.invoke(app, ["rpc", "skew", str(text), "--kind", "rpc_log"])
    # line 2, "Before we proceed any further, hear me speak.", has a comma: 2 fields against the header's 1
    assert res.exit_code == 2
    assert f"{text}:2: 2 fields, the header (line 1) has 1: not a CSV table" in " ".join(res.output.split())
    assert "Traceback" not in res.output


def test_churn_of_a_single_window_says_so(shared_data: Path) -> None:
    from ddlscope.report.skew import churn_figure
    from ddlscope.skew.frequency import analyze_skew
    from ddlscope.skew.streams import load_stream

    a = analyze_skew(load_stream(shared_data / "criteo" / "criteo_sample.txt", column="C1"))
    fig = churn_figure(a)   # 200 events, one window of 8192
    ax = fig.axes[0]
    assert not ax.lines and [t.get_text() for t in ax.texts] == [
        "one window (8192 events): no churn to show; a smaller --window gives more windows"]
