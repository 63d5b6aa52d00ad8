"""``ddlscope rpc dissect`` as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from ddlscope.cli.main import app
from ddlscope.report import rpc_dissect as report_rpc_dissect
from ddlscope.rpc.synthetic import synthetic_rpc_log

runner = CliRunner()


def _log(tmp_path):
    frame = synthetic_rpc_log(20_000, seed=8)
    # two bad rows: a reversed client order (row 10) and a missing timestamp (row 20)
    frame = frame.with_columns(
        pl.when(pl.col("rpc_id") == 10).then(pl.col("client_done_ns") - 10**9).otherwise(pl.col("client_done_ns"))
        .alias("client_done_ns"),
        pl.when(pl.col("rpc_id") == 20).then(None).otherwise(pl.col("server_recv_end_ns")).alias("server_recv_end_ns"),
    ).rename({"server_id": "shard"})
    path = tmp_path / "rpcs.csv"
    frame.write_csv(path)
    return path


def test_dissect_writes_a_report_and_prints_findings(tmp_path):
    path = _log(tmp_path)
    out = tmp_path / "report"
    res = runner.invoke(app, ["rpc", "dissect", str(path), "--map", "shard=server_id", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "RPC latency dissection" in res.output
    assert "19,998 RPCs from 16 worker(s) to 4 server(s)" in res.output
    assert "Rejected rows" in res.output and "reversed_client_order" in res.output
    assert f"{path}:12" in res.output  # rpc 10 is data row 11, line 12
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rpcs"] == 19_998
    assert summary["rejected_by_reason"] == {"missing_timestamp": 1, "reversed_client_order": 1}
    html = (out / "index.html").read_text()
    assert "data:image/png;base64" in html and "Tail attribution" in html
    for name in ("stage_breakdown", "latency_ccdf", "tail_stages", "concurrency", "connection_events",
                 "message_size", "iteration_phase"):
        assert (out / "figures" / f"{name}.png").stat().st_size > 10_000, name
    pct = pl.read_csv(out / "tables" / "stage_percentiles.csv")
    assert set(pct.get_column("grouping").unique()) == {"all", "op", "server", "connection", "iteration_phase"}
    rejected = pl.read_csv(out / "tables" / "rejected_rows.csv")
    assert sorted(rejected.get_column("log_line").to_list()) == [12, 22]


def test_dissect_json_and_user_errors(tmp_path, monkeypatch):
    path = _log(tmp_path)
    # the report itself is checked above; here only what is printed (figures take seconds to render)
    monkeypatch.setattr(report_rpc_dissect, "write_dissection_report", lambda d, out: Path(out) / "index.html")
    res = runner.invoke(app, ["rpc", "dissect", str(path), "--format", "json", "--out", str(tmp_path / "r")])
    # without the mapping the server id column is missing: one red line, exit 2, no traceback
    assert res.exit_code == 2
    assert "missing required column(s) server_id" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["rpc", "dissect", str(path), "--map", "shard=server_id", "--format", "json",
                              "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.output)
    assert payload["rpcs"] == 19_998 and payload["report"].endswith("index.html")
    assert payload["tail"]["slowest 1%"]["rpcs"] == 200  # ceil(19998 * 0.01)
    res = runner.invoke(app, ["rpc", "dissect", str(path), "--format", "yaml"])
    assert res.exit_code == 2 and "expected table or json" in res.output


def test_out_and_mapping_are_checked_before_the_analysis(tmp_path, monkeypatch):
    path = _log(tmp_path)
    import importlib

    module = importlib.import_module("ddlscope.rpc.dissect")  # the module (the package exports the function)

    def never(*args, **kwargs):
        raise AssertionError("the analysis ran before the options were checked")

    monkeypatch.setattr(module, "dissect", never)
    res = runner.invoke(app, ["rpc", "dissect", str(path), "--out", str(path)])
    assert res.exit_code == 2 and f"--out {path}: is a file; expected a folder" in " ".join(res.output.split())
    res = runner.invoke(app, ["rpc", "dissect", str(path), "--out", str(path / "sub")])
    assert res.exit_code == 2 and f"{path} is a file" in " ".join(res.output.split())
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("my notes")
    res = runner.invoke(app, ["rpc", "dissect", str(path), "--out", str(foreign)])
    assert res.exit_code == 2 and "not empty and holds no ddlscope report" in " ".join(res.output.split())
    res = runner.invoke(app, ["rpc", "dissect", str(path), "--mapping", str(tmp_path / "nonexist.toml")])
    assert res.exit_code == 2 and "nonexist.toml: no such mapping file" in " ".join(res.output.split())
    assert "Errno" not in res.output and "Traceback" not in res.output


def test_overwrite_and_rerun_keep_the_users_files_and_drop_stale_ones(tmp_path):
    from ddlscope.report.outdir import check_report_dir, clear_previous_report, is_report_folder

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("my notes")
    assert check_report_dir(foreign, overwrite=True) == foreign   # --overwrite: allowed, nothing removed
    assert clear_previous_report(foreign) == 0 and (foreign / "notes.txt").exists()
    report = tmp_path / "report"
    for name in ("figures/a.png", "figures/a.svg", "tables/rejected_rows.csv", "tables/rejected_rows.parquet"):
        (report / name).parent.mkdir(parents=True, exist_ok=True)
        (report / name).write_text("old")
    (report / "index.html").write_text("<html>")
    (report / "summary.json").write_text("{}")
    assert is_report_folder(report) and check_report_dir(report) == report  # an earlier report: reused
    assert clear_previous_report(report) == 4
    assert not list((report / "tables").iterdir()) and (report / "index.html").exists()


def test_an_implausible_time_unit_is_a_warning_on_the_console(tmp_path, monkeypatch):
    from rpclog_builders import rpc_frame, rpc_row

    monkeypatch.setattr(report_rpc_dissect, "write_dissection_report", lambda d, out: Path(out) / "index.html")
    path = tmp_path / "log.csv"
    rpc_frame([rpc_row(i, issue_ns=10**6 * i, stages={"network": 100_000, "server_processing": 35_000})
               for i in range(5)]).write_csv(path)
    res = runner.invoke(app, ["rpc", "dissect", str(path), "--time-unit", "s", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    # latency 135,000 s = 37.5 h
    assert ("warning: the median RPC latency is 37.5 h, implausible for an RPC (expected 1 µs to 1 min): check "
            "--time-unit (the timestamps were read as s)") in res.output
    assert "latency p50 37.5 h" in res.output
