"""A worker or server killed mid-run: the run stops every process, names the one that died, and
keeps what was logged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ddlscope
from ddlscope.pstrain.config import FailureInjection, RunConfig
from ddlscope.pstrain.launcher import PsTrainFailedError, run

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
    # what the others logged before the failure is kept, and the RPCs of the dead worker are counted
    assert summary["rpcs"] > 0
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
