"""``ddlscope trace`` as a user runs it."""

from __future__ import annotations

import json

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
    out = tmp_path / "report"
    res = runner.invoke(app, ["trace", str(write_fixture(tmp_path)), "--out", str(out), "--scenario", "gpu-h100"])
    assert res.exit_code == 0, res.output
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
