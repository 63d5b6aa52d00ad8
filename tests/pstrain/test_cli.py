"""The ``ddlscope ps-train`` command: options, bad input, and a short run as a user types it."""

from __future__ import annotations

import json

import polars as pl
from typer.testing import CliRunner

from ddlscope.cli.main import app

runner = CliRunner()


def test_help_lists_the_options():
    result = runner.invoke(app, ["ps-train", "--help"])
    assert result.exit_code == 0
    for option in ("--workers", "--servers", "--mode", "--connections", "--max-connections", "--bandwidth-mbit",
                   "--otlp", "--log-format", "--out"):
        assert option in result.output


def _text(result) -> str:
    return " ".join(result.output.split())  # undo the console's line wrapping


def test_bad_options_are_user_errors(tmp_path):
    result = runner.invoke(app, ["ps-train", "--mode", "bsp", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "mode" in _text(result) and "sync" in _text(result)
    result = runner.invoke(app, ["ps-train", "--inject-failure", "worker:x", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "expected worker:ID:ITERATION or server:ID:RPCS" in _text(result)
    result = runner.invoke(app, ["ps-train", "--data", str(tmp_path / "none.txt"), "-o", str(tmp_path)])
    assert result.exit_code == 2 and _text(result).startswith("error: --data ")
    assert "none.txt: no such file" in result.output.replace("\n", "")
    # a folder with files of its own is never overwritten
    (tmp_path / "mine.txt").write_text("keep")
    result = runner.invoke(app, ["ps-train", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "not written by ps-train" in _text(result)
    assert (tmp_path / "mine.txt").read_text() == "keep"


def test_ctr_run_with_csv_log_and_a_pool_of_one(tmp_path, shared_data):
    out = tmp_path / "ctr"
    result = runner.invoke(app, [
        "ps-train", "--model", "ctr", "--data", str(shared_data / "criteo" / "criteo_sample.txt"),
        "--mode", "async", "--max-connections", "1", "-n", "30", "-o", str(out), "--log-format", "csv",
        "--format", "json",
    ])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["summary"]
    # 1 table + 4 dense tensors on 2 servers: per worker and iteration 2 pull_sparse + 2 pull_dense + same pushes
    assert summary["rpcs"] == 2 * 30 * 8
    assert summary["rpcs_excluded"] == {} and summary["timestamp_order_violations"] == {"client": 0, "server": 0}
    assert summary["loss_last"] < summary["loss_first"]
    log = pl.read_csv(out / "rpcs.csv")
    # each RPC goes to the other server than the one before it, so (nearly) every RPC opens a connection;
    # a pool of one never holds two: per worker, connection lifetimes do not overlap
    assert set(log["connection_event"].unique()) == {"new", "reconnect"}
    spans = (log.group_by("worker_id", "connection_id")
             .agg(pl.col("client_connect_start_ns").min().alias("open_ns"),
                  pl.col("client_done_ns").max().alias("last_ns"))
             .sort("worker_id", "open_ns"))
    overlap = spans.with_columns(prev_last=pl.col("last_ns").shift(1).over("worker_id")).filter(
        pl.col("open_ns") < pl.col("prev_last"))
    assert overlap.height == 0
    assert pl.read_csv(out / "key_updates.csv")["updates"].sum() == log.filter(
        pl.col("op") == "push_sparse")["num_keys"].sum()
