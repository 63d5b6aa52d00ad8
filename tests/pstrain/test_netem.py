"""Emulated hosts: a run with every process in its own network namespace, shaped links, and cleanup.

Needs root and iproute2; skipped otherwise (the run itself then warns and uses loopback)."""

from __future__ import annotations

import json
import subprocess

import polars as pl
import pytest

from ddlscope.pstrain import netem
from ddlscope.pstrain.config import NetemConfig, RunConfig
from ddlscope.pstrain.launcher import run

from .conftest import live_processes_mentioning


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_unavailable_reason_names_what_is_missing(monkeypatch):
    monkeypatch.setattr(netem.os, "geteuid", lambda: 1000)
    assert "needs root" in netem.unavailable_reason()
    monkeypatch.setattr(netem.os, "geteuid", lambda: 0)
    monkeypatch.setattr(netem.shutil, "which", lambda tool: None if tool == "tc" else "/usr/sbin/ip")
    assert "iproute2 (tc not found" in netem.unavailable_reason()


@pytest.mark.skipif(netem.unavailable_reason() is not None, reason="network emulation needs root and iproute2")
def test_run_on_emulated_hosts(tmp_path, shared_data):
    before = _namespaces()
    cfg = RunConfig(data=shared_data / "text" / "tinyshakespeare.txt", iterations=8, batch_size=64, out=tmp_path,
                    netem=NetemConfig(bandwidth_mbit=200.0))
    result = run(cfg)
    log = pl.read_parquet(result.files["rpcs"])
    # 2 workers x 8 iterations x 12 RPCs, each between two distinct emulated hosts
    assert log.height == 192
    assert sorted(log["client_host"].unique()) == ["worker-0", "worker-1"]
    assert sorted(log["server_host"].unique()) == ["server-0", "server-1"]
    applied = json.loads((tmp_path / "run.json").read_text())["netem"]["applied"]
    assert applied["bandwidth_mbit"] == 200.0 and applied["qdisc"] in ("netem", "tbf")
    assert applied["namespaces"] == 5  # 4 hosts + the switch
    assert _namespaces() == before  # every namespace of the run is gone
    assert live_processes_mentioning(str(tmp_path)) == []
