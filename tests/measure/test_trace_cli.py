"""``ddlscope trace`` as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kineto_fixture import write_fixture
from typer.testing import CliRunner

from ddlscope.cli.main import app

runner = CliRunner()


def test_table_output(tmp_path):
    res = runner.invoke(app, ["trace", str(write_fixture(tmp_path)), "--scenario", "gpu-h100"])
    assert res.exit_code == 0, res.output
    for title in ("Per-iteration breakdown", "GPU idle time by visible cause", "Collectives per iteration",
                  "Temporal breakdown", "What-if from the measured baseline", "Model check",
                  "Kernels no rule classifies"):
        assert title in res.output
    assert "mystery_kernel" in res.output


def test_json_output(tmp_path):
    res = runner.invoke(app, ["trace", str(write_fixture(tmp_path)), "--format", "json", "--no-whatif"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    first = out["breakdown"][0]
    assert (first["iteration"], first["step_ms"], first["comm_exposed_ms"], first["idle_ms"]) == (1, 0.1, 0.025, 0.041)
    assert out["breakdown_us"][0]["window_us"] == 100.0
    assert out["collective_calls"][0]["size_bytes"] == 4000
    assert "whatif" not in out and out["ranks"] == 1
    assert out["unclassified"][0]["name"].startswith("mystery_kernel")


def test_csv_prints_the_breakdown(tmp_path):
    res = runner.invoke(app, ["trace", str(write_fixture(tmp_path)), "--format", "csv", "--no-whatif"])
    assert res.exit_code == 0
    assert res.output.splitlines()[0].startswith("rank,iteration,step_ms,compute_bound_ms")


def test_html_report(tmp_path):
    # the policy of every report folder (ddlscope.report.outdir): a non-empty folder that holds no
    # report is refused unless --overwrite, which writes the report's entries and keeps the rest
    out = tmp_path / "report"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    res = runner.invoke(app, ["trace", str(write_fixture(tmp_path)), "--out", str(out), "--scenario", "gpu-h100"])
    assert res.exit_code == 2 and "--overwrite" in res.output
    res = runner.invoke(app, ["trace", str(write_fixture(tmp_path)), "--out", str(out), "--scenario", "gpu-h100",
                              "--overwrite"])
    assert res.exit_code == 0, res.output
    assert (out / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in out.iterdir()) == ["figures", "index.html", "notes.txt", "summary.json", "tables"]
    assert (out / "index.html").is_file()
    for fig in ("breakdown", "idle_causes", "collectives", "whatif", "model_check"):
        assert (out / "figures" / f"{fig}.png").is_file()
    assert (out / "tables" / "breakdown.csv").is_file()
    assert json.loads((out / "summary.json").read_text())["iterations"] == 2


def test_bad_file_is_one_red_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    res = runner.invoke(app, ["trace", str(bad)])
    assert res.exit_code == 2
    assert f"{bad}: not valid JSON" in res.output.replace("\n", "")


def test_bad_rules_file(tmp_path):
    rules = tmp_path / "r.toml"
    rules.write_text("[[kernel]]\npattern = 'x'\nclass = \"fast\"\n")
    res = runner.invoke(app, ["trace", str(write_fixture(tmp_path)), "--rules", str(rules)])
    assert res.exit_code == 2 and "class: expected one of" in res.output.replace("\n", "")


# -- options are checked before any trace is read (a missing trace would fail later) ----------------------
@pytest.mark.parametrize(("args", "message"), [
    (["--launch-gap-us", "-1"], "--launch-gap-us: expected a finite number of microseconds >= 0, got -1.0"),
    (["--launch-gap-us", "nan"], "--launch-gap-us: expected a finite number of microseconds >= 0, got nan"),
    (["--warmup-factor", "1"], "--warmup-factor: expected a finite number > 1, got 1.0"),
    (["--system", "nosuch"], "--system: unknown server 'nosuch'"),
    (["--gpu", "NOPE"], "--gpu: unknown GPU 'NOPE'"),
    (["--scenario", "x:gpu=NOPE"], "scenario x: gpu: unknown GPU 'NOPE'"),
    (["--scenario", "x:nic=nvlink2"], "scenario x: scenario nic: 'nvlink2' is a nvlink link"),
    (["--scenario", "gpu-h100", "--no-whatif"], "--scenario and --no-whatif: choose one"),
    (["--format", "xml"], "--format: expected table, json or csv, got 'xml'"),
])
def test_options_are_checked_up_front(tmp_path, args, message):
    res = runner.invoke(app, ["trace", str(tmp_path / "not-read.json"), *args])
    assert res.exit_code == 2
    assert message in res.output.replace("\n", "") and "no such file" not in res.output


def test_out_that_is_a_file_is_refused_up_front(tmp_path):
    (tmp_path / "somefile").write_text("mine")
    file = tmp_path / "somefile"
    for out, message in ((file, f"--out {file}: is a file"),
                         (file / "report", f"--out {file}/report: {file} is a file")):
        res = runner.invoke(app, ["trace", str(tmp_path / "not-read.json"), "--out", str(out)])
        assert res.exit_code == 2 and "no such file" not in res.output
        assert f"{message}; expected a folder for the report" in res.output.replace("\n", "")


def test_defaults_match_the_analysis():
    from ddlscope.cli import trace as cli_trace
    from ddlscope.measure.iterations import WARMUP_FACTOR
    from ddlscope.measure.timeline import LAUNCH_GAP_US

    assert (cli_trace.LAUNCH_GAP_US, cli_trace.WARMUP_FACTOR) == (LAUNCH_GAP_US, WARMUP_FACTOR)


def test_the_command_module_imports_no_heavy_library():
    # `ddlscope --help` imports every command module: the analysis and its libraries load when trace runs
    code = ("import sys, ddlscope.cli.trace; print(sorted(m for m in ('ddlscope.measure', 'ddlscope.report', "
            "'matplotlib', 'msgspec', 'scipy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")})
    assert done.stdout.strip() == "[]"


def test_folder_json_lists_skipped_files_and_the_iteration_rule(tmp_path):
    # `ddlscope trace FOLDER`: the file it does not read is in the JSON's notes with the reason; the
    # summary says how iterations were found (the fixture has ProfilerStep#1 and #2)
    write_fixture(tmp_path)
    (tmp_path / "run.log").write_text("epoch 1")
    res = runner.invoke(app, ["trace", str(tmp_path), "--format", "json", "--no-whatif"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert f"{tmp_path / 'run.log'}: skipped, not .json, .json.gz, .tar, .tar.gz or .tgz" in out["notes"]
    assert out["iteration_rule"] == "ProfilerStep markers"
    assert out["ranks_detail"][0]["iteration_rule"] == "ProfilerStep markers"
