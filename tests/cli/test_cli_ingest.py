"""`ddlscope ingest` as a user runs it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from ddlscope.cli.main import app

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ingest"))
from pai_fixture import write_pai

runner = CliRunner()


def test_ingest_pai_fixture_table_and_out(tmp_path):
    d = write_pai(tmp_path / "pai")
    out = tmp_path / "pop.parquet"
    res = runner.invoke(app, ["ingest", str(d), "--out", str(out), "--examples", "1"])
    assert res.exit_code == 0, res.output
    assert "24 jobs read (pai-v2020): 10 attributed (41.7 %), 14 not attributed; 17 malformed row(s)" in res.output
    assert "malformed task row" in res.output and "pai_task_table.csv:14" in res.output
    assert "population: 24 rows ->" in res.output
    pop = pl.read_parquet(out)
    assert pop.height == 24 and pop["attributed"].sum() == 10


def test_ingest_json_and_csv_out(tmp_path):
    d = write_pai(tmp_path / "pai")
    out = tmp_path / "pop.csv"
    res = runner.invoke(app, ["ingest", str(d), "--format", "json", "--out", str(out), "--fractional-gpus", "exclude"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    reasons = {r["reason"]: r["jobs"] for r in data["rows"]}
    assert reasons["attributed"] == 9 and reasons["fractional GPU request"] == 1
    assert data["jobs"] == 24 and data["malformed_rows"] == 17 and data["population_file"] == str(out)
    # no GPU workers: j10 (CPU only), j11 (evaluator only), j12 (no task rows) and j14, j18, j19, j20 (their only
    # task row is malformed)
    assert pl.read_csv(out)["architecture"].null_count() == 7
    res = runner.invoke(app, ["ingest", str(d), "--format", "csv"])
    assert res.output.splitlines()[0] == "reason,jobs,share_jobs,gpu_time_s,share_gpu_time"


def test_ingest_generic_map_and_model_mix(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text("gpus,secs\n1,10\n8,20\n0,5\n")
    res = runner.invoke(app, ["ingest", str(path), "--map", "num_gpus=gpus", "--map", "duration_s=secs"])
    assert res.exit_code == 0, res.output
    assert "3 jobs read (csv): 0 attributed" in res.output
    assert "warning: none of the 3 jobs" in res.output and "--model-mix" in res.output
    res = runner.invoke(app, ["ingest", str(path), "--map", "num_gpus=gpus", "--model-mix", "resnet18=1",
                              "--format", "json"])
    data = json.loads(res.output)
    assert {r["reason"]: r["jobs"] for r in data["rows"]} == {"attributed": 2, "no GPU requested": 1}


def test_ingest_user_errors_are_one_line(tmp_path):
    res = runner.invoke(app, ["ingest", str(tmp_path / "missing.csv")])
    assert res.exit_code == 2 and "no such file" in res.output
    path = tmp_path / "jobs.csv"
    path.write_text("gpus\n1\n")
    res = runner.invoke(app, ["ingest", str(path)])
    assert res.exit_code == 2 and "cannot tell the trace format" in res.output
    res = runner.invoke(app, ["ingest", str(path), "--map", "gpu_count=gpus"])
    assert res.exit_code == 2 and "unknown field 'gpu_count'" in res.output
    res = runner.invoke(app, ["ingest", str(path), "--map", "num_gpus=gpus", "--out", str(tmp_path / "x.txt")])
    assert res.exit_code == 2 and "expected a .parquet or .csv file" in res.output


def test_format_csv_is_the_reason_table_and_help_says_so(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text("id,net,gpus\nj1,resnet50,1\nj2,,2\n")
    res = runner.invoke(app, ["ingest", str(path), "-t", "csv", "--map", "job_id=id", "--map", "model=net",
                              "--map", "num_gpus=gpus", "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[:3] == ["reason,jobs,share_jobs,gpu_time_s,share_gpu_time",
                                           "attributed,1,0.5,,", "no model label,1,0.5,,"]
    res = runner.invoke(app, ["ingest", "--help"], terminal_width=200)
    assert "csv only the jobs-per-reason table" in " ".join(res.output.split())


def test_ingest_exits_2_when_no_row_could_be_read(tmp_path):
    """A table whose every row is malformed (here: a non-number GPU count) is no population: exit 2 with a line
    saying why, after the tables that show where the rows went."""
    path = tmp_path / "jobs.csv"
    path.write_text("gpus\nabc\nx\n")
    res = runner.invoke(app, ["ingest", str(path), "--map", "num_gpus=gpus"])
    assert res.exit_code == 2, res.output
    assert "error: no job could be read from" in res.output and "2 data row(s), 2 malformed" in res.output
    assert "malformed rows" in res.output  # the table is still printed
    # a header only: no data row
    path.write_text("gpus\n")
    res = runner.invoke(app, ["ingest", str(path), "--map", "num_gpus=gpus"])
    assert res.exit_code == 2 and "no data row" in res.output
    # jobs read but none attributable is still a result (exit 0, a warning)
    path.write_text("gpus\n1\n")
    res = runner.invoke(app, ["ingest", str(path), "--map", "num_gpus=gpus"])
    assert res.exit_code == 0 and "warning: the one job" in res.output


def test_ingest_status_option(tmp_path):
    """The fixture's 24 jobs: j04 Running, j05 Failed, j12 Waiting, 21 Terminated (pai_fixture.py)."""
    d = write_pai(tmp_path / "pai")
    res = runner.invoke(app, ["ingest", str(d), "--format", "json"])
    data = json.loads(res.output)
    assert {r["reason"]: r["jobs"] for r in data["rows"]}["excluded by status: Waiting"] == 1
    res = runner.invoke(app, ["ingest", str(d), "--format", "json", "--status", "terminated"])
    reasons = {r["reason"]: r["jobs"] for r in json.loads(res.output)["rows"]}
    # Running j04 and Failed j05 (both attributed by default) now excluded: 10 - 2 = 8
    assert reasons["attributed"] == 8 and reasons["excluded by status: Running"] == 1
    assert reasons["excluded by status: Failed"] == 1 and reasons["excluded by status: Waiting"] == 1
    res = runner.invoke(app, ["ingest", str(d), "--status", "all", "--format", "json"])
    assert "excluded by status: Waiting" not in res.output
    res = runner.invoke(app, ["ingest", str(d), "--status", "finshed"])
    assert res.exit_code == 2 and "--status: 'finshed' is neither a status class" in res.output
