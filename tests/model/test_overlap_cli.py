"""`ddlscope predict` shows exposed and hidden communication per link (the scheduled overlap)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ddlscope.cli.main import app

runner = CliRunner()


def test_predict_json_has_exposed_and_hidden_per_link():
    res = runner.invoke(app, ["predict", "-a", "allreduce_cluster", "-w", "16", "--format", "json"])
    assert res.exit_code == 0, res.output
    row = json.loads(res.output)[0]
    assert row["overlap_fraction"] is None  # scheduled, the default
    for link in ("pcie", "nvlink", "network"):
        # each link's time splits into exposed and hidden
        assert row[f"{link}_exposed_s"] + row[f"{link}_hidden_s"] == pytest.approx(row[f"{link}_s"])
    # exposed communication = the links' exposed time + the wait for the slowest rank
    exposed = sum(row[f"{x}_exposed_s"] for x in ("pcie", "nvlink", "network")) + row["sync_wait_s"]
    assert row["exposed_comm_s"] == pytest.approx(exposed)
    assert row["sync_wait_s"] > 0


def test_predict_table_shows_the_split_and_overlap_none_keeps_the_additive_model():
    res = runner.invoke(app, ["predict"])
    assert res.exit_code == 0, res.output
    assert "exposed_s" in res.output and "hidden_s" in res.output and "sync_wait" in res.output
    assert "overlap: scheduled (buckets behind the backward" in res.output
    res = runner.invoke(app, ["predict", "--overlap", "none", "--format", "json"])
    row = json.loads(res.output)[0]
    assert row["exposed_comm_s"] == pytest.approx(row["comm_s"]) and row["hidden_comm_s"] == pytest.approx(0.0)
