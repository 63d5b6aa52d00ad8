"""One absurd RPC duration among many is set aside, counted and reported, not averaged in."""

from __future__ import annotations

import json

import polars as pl
from rpclog_builders import rpc_frame, rpc_row
from typer.testing import CliRunner

from ddlscope.cli.main import app
from ddlscope.report.rpc_findings import narrate
from ddlscope.rpc import dissect

YEAR_NS = 365 * 86_400 * 10**9  # 31 years: a client_done taken on another clock (e.g. CLOCK_MONOTONIC vs REALTIME)


def _log(n: int = 400, absurd_completion_ns: int = 31 * YEAR_NS) -> list[dict]:
    # n RPCs of network 600 us + server_processing 400 us = 1 ms; RPC 7 has an absurd client completion
    rows = [rpc_row(i, issue_ns=2_000_000 * i, worker_id=i % 2, connection_id=i % 2,
                    stages={"network": 600_000, "server_processing": 400_000}) for i in range(n)]
    rows[7] = rpc_row(7, issue_ns=2_000_000 * 7, worker_id=1, connection_id=1,
                      stages={"network": 600_000, "server_processing": 400_000,
                              "client_completion": absurd_completion_ns})
    return rows


def test_a_31_year_rpc_is_set_aside_and_the_shares_describe_the_rest(tmp_path):
    path = tmp_path / "rpcs.csv"
    rpc_frame(_log()).write_csv(path)
    d = dissect(path)
    t = narrate(d)
    # before: client_completion took ~100 % of the mean (31 years / 400 RPCs >> 1 ms)
    assert d.summary["dominant_stage"] == "network"
    assert d.summary["mean_stage_share"]["network"] == 0.6      # 600 / 1000 us
    assert d.summary["mean_stage_share"]["client_completion"] == 0.0
    assert d.summary["rpcs"] == 399
    assert d.summary["latency_us"]["mean"] == 1000.0
    assert d.summary["rejected_by_reason"] == {"implausible_latency": 1}
    # RPC 7 is on line 9 of the CSV (header = line 1, rpc 0 on line 2)
    assert d.summary["implausible_latency"]["rpcs"] == 1
    assert d.summary["implausible_latency"]["first_at"] == f"{path}:9"
    assert d.summary["implausible_latency"]["longest_stage"] == "client_completion"
    assert d.rejected.row(0, named=True)["detail"] == ("latency 31 years > 1 min (longest stage client_completion, "
                                                       "31 years)")
    assert t.warnings[0] == (f"1 RPC with a latency above 1 min (31 years, at {path}:9; its longest stage "
                             "client_completion) is implausible for an RPC and left out of every share, percentile "
                             "and fit (rejected as implausible_latency; 399 RPCs analysed)")
    assert t.findings[1].startswith("Dominant stage: network takes 60% of the mean RPC time; second "
                                    "server_processing (40%)")


def test_one_hour_rpc_is_set_aside_and_shown_on_the_console_and_in_summary_json(tmp_path):
    path = tmp_path / "rpcs.csv"
    rpc_frame(_log(absurd_completion_ns=3_600 * 10**9)).write_csv(path)
    out = tmp_path / "report"
    res = CliRunner().invoke(app, ["rpc", "dissect", str(path), "--out", str(out)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "warning: 1 RPC with a latency above 1 min (1 h, at" in res.output
    assert "implausible_latency" in res.output   # the rejected-rows table
    summary = json.loads((out / "summary.json").read_text())
    assert summary["implausible_latency"]["rpcs"] == 1
    assert summary["implausible_latency"]["max_us"] == 3_600_001_000.0  # 3600 s + 1 ms, in µs
    assert summary["rejected_by_reason"] == {"implausible_latency": 1}
    rejected = pl.read_csv(out / "tables" / "rejected_rows.csv")
    assert rejected.get_column("reason").to_list() == ["implausible_latency"]


def test_most_rpcs_above_the_bound_is_a_unit_problem_not_outliers():
    # every RPC 2 min: nothing set aside (the time-unit warning speaks instead)
    rows = [rpc_row(i, issue_ns=10**12 * i, stages={"network": 120 * 10**9}) for i in range(5)]
    d = dissect(rpc_frame(rows))
    t = narrate(d)
    assert d.summary["rpcs"] == 5 and d.summary["implausible_latency"]["rpcs"] == 0
    assert t.warnings == ("the median RPC latency is 2 min, implausible for an RPC (expected 1 µs to 1 min): "
                          "check --time-unit",)


def test_one_plausible_but_huge_rpc_carrying_most_of_the_mean_is_a_warning():
    # 99 RPCs of 1 ms and one of 50 s (below the 1 min bound): 50 s / (50 s + 99 ms) = 99.8 % of the total
    rows = [rpc_row(i, issue_ns=2_000_000 * i, stages={"network": 1_000_000}) for i in range(99)]
    rows.append(rpc_row(99, issue_ns=2_000_000 * 99, stages={"server_queue": 50 * 10**9}))
    d = dissect(rpc_frame(rows))
    t = narrate(d)
    assert d.summary["implausible_latency"]["rpcs"] == 0
    share = 50e9 / (50e9 + 99e6)
    assert abs(d.summary["largest_rpc_share_of_latency"] - share) < 1e-12
    assert t.warnings == ("one RPC (at <memory>:100) carries 99.8% of the total latency of the 100 RPCs: the mean "
                          "and the stage shares describe that RPC more than the log; read the percentiles",)
    assert t.findings[1].startswith("Dominant stage: server_queue takes 99.8% of the mean RPC time (one RPC, at "
                                    "<memory>:100, carries 100% of it)")
