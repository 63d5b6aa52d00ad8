"""A worker or server killed or frozen mid-run: the run stops every process, names the one that
failed (or the stall), and keeps what was logged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import ddlscope
from ddlscope.pstrain.config import FailureInjection, RunConfig
from ddlscope.pstrain.launcher import PsTrainFailedError, run
from ddlscope.pstrain.logs import read_client_rows, read_server_rows, timestamp_order_violations
from ddlscope.rpc.schema import CLIENT_TIMESTAMPS, REQUIRED_COLUMNS, SERVER_TIMESTAMPS

from .conftest import live_processes_mentioning


def test_killed_worker_stops_the_run(tmp_path, shared_data):
    cfg = RunConfig(data=shared_data / "text" / "tinyshakespeare.txt", iterations=50, batch_size=64, out=tmp_path,
                    inject_failure=FailureInjection(role="worker", id=1, at=3))
    with pytest.raises(PsTrainFailedError) as info:
        run(cfg)
    message = str(info.value)
    assert message.startswith("worker 1 (pid ") and "killed by SIGKILL after 3 iteration(s)" in message
    assert "stopped 3 other process(es): server 0, server 1, worker 0" in message
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["status"] == "failed" and summary["failures"] == [message.split(" (stopped")[0]]
    status = {p["name"]: p["exit_status"] for p in summary["processes"]}
    assert status["worker 1"] == -9
    # worker 1 appended iterations 0..2 to its part files before it died (one flush per iteration)
    iterations = pl.read_parquet(tmp_path / "iterations.parquet")
    assert iterations.filter(pl.col("worker_id") == 1)["iteration"].to_list() == [0, 1, 2]
    assert {0, 1} <= set(iterations.filter(pl.col("worker_id") == 0)["iteration"])
    # the servers and worker 0 wrote their rows when stopped with SIGTERM: every RPC of iterations 0 and 1
    # is in the log, both sides joined: 2 workers x 2 iterations x 12 RPCs (test_run.py) = 48
    log = pl.read_parquet(tmp_path / "rpcs.parquet")
    assert log.filter(pl.col("iteration") <= 1).height == 48
    assert summary["rpcs"] == log.height and summary["truncated_part_files"] == []
    assert live_processes_mentioning(str(tmp_path)) == []


def test_frozen_server_trips_the_stall_watchdog(tmp_path, shared_data):
    """Server 0 frozen (SIGSTOP) at its 30th RPC: no RPC completes; after stall_timeout_s the run fails
    naming the stall, and the frozen server, woken to handle SIGTERM, still writes its rows."""
    cfg = RunConfig(data=shared_data / "text" / "tinyshakespeare.txt", iterations=50, batch_size=64, out=tmp_path,
                    stall_timeout_s=2, inject_failure=FailureInjection(role="server", id=0, at=30, signal="STOP"))
    with pytest.raises(PsTrainFailedError) as info:
        run(cfg)
    message = str(info.value)
    assert message.startswith("stalled: no RPC completed for 2 s while ")
    assert "(stopped 4 process(es): server 0, server 1, worker 0, worker 1)" in message
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["status"] == "failed" and summary["failures"][0].startswith("stalled: ")
    assert {p["name"]: p["exit_status"] for p in summary["processes"]}["server 0"] == 143
    # How many of server 0's RPCs end up logged depends on scheduling (a response queued when it froze may
    # never reach its worker; handler threads mid-call when it froze finish theirs once SIGCONT wakes it
    # for SIGTERM, so 31 rows have been seen), so the test asserts what cannot vary instead of a window:
    # every logged RPC of server 0 is one the server handled and a worker sent (the raw part files, kept
    # after a failed run), each is complete, and the log accounts for every raw row.
    log = pl.read_parquet(tmp_path / "rpcs.parquet")
    raw = tmp_path / "raw"
    client, server = read_client_rows(raw), read_server_rows(raw)
    sent_to_0 = set(client.filter(pl.col("server_id") == 0)["rpc_id"])
    handled_by_0 = set(server.filter(pl.col("srv_server_id") == 0)["rpc_id"])
    logged_0 = log.filter(pl.col("server_id") == 0)
    assert logged_0.height > 0 and logged_0["rpc_id"].n_unique() == logged_0.height
    assert set(logged_0["rpc_id"]) <= sent_to_0 & handled_by_0
    assert logged_0.height <= min(len(sent_to_0), len(handled_by_0))
    # complete: every required column and every timestamp of both sides present, in order
    columns = sorted({*REQUIRED_COLUMNS, *CLIENT_TIMESTAMPS, *SERVER_TIMESTAMPS})
    assert logged_0.select(pl.col(columns).null_count()).sum_horizontal().item() == 0
    ids = logged_0["rpc_id"].implode()
    assert set(client.filter(pl.col("rpc_id").is_in(ids))["status"]) == {"OK"}
    assert set(server.filter(pl.col("rpc_id").is_in(ids))["srv_status"]) == {"OK"}
    assert timestamp_order_violations(logged_0) == {"client": 0, "server": 0}
    # accounted: the distinct rpc ids of both sides are the logged ones plus the excluded ones by reason
    excluded = summary["rpcs_excluded"]
    assert summary["rpcs"] == log.height
    assert len(set(client["rpc_id"]) | set(server["rpc_id"])) == log.height + sum(
        v for k, v in excluded.items() if not k.startswith("duplicate_"))
    assert live_processes_mentioning(str(tmp_path)) == []


def test_killed_server_fails_the_command(tmp_path, shared_data):
    """Through the CLI: non-zero exit and a message naming the dead server."""
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "ddlscope", "ps-train", "--data", str(shared_data / "text" / "tinyshakespeare.txt"),
         "-n", "50", "-b", "64", "-o", str(out), "-q", "--inject-failure", "server:0:30"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(ddlscope.__file__).resolve().parents[1])},  # this checkout
    )
    assert proc.returncode == 1
    stderr = " ".join(proc.stderr.split())
    assert "ps-train failed: server 0 (pid" in stderr and "killed by SIGKILL" in stderr
    summary = json.loads((out / "run.json").read_text())
    assert summary["failures"][0].startswith("server 0 (pid ")
    assert {p["name"]: p["exit_status"] for p in summary["processes"]}["server 0"] == -9
    assert live_processes_mentioning(str(out)) == []
