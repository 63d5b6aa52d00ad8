"""``ddlscope rpc skew`` and ``ddlscope rpc offload`` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddlscope.cli.main import app
from ddlscope.cli.rpc_skew import parse_bytes

runner = CliRunner()


def test_parse_bytes() -> None:
    assert parse_bytes("256KiB") == 262_144
    assert parse_bytes("1.5 MiB") == 1_572_864
    assert parse_bytes("4MB") == 4_000_000
    assert parse_bytes("1000") == 1000
    with pytest.raises(ValueError, match="expected a size like"):
        parse_bytes("4 furlongs")


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
