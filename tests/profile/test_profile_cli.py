"""`ddlscope profile` and `predict/whatif --model`, run as a user would."""

from __future__ import annotations

import json

import polars as pl
import pytest
from typer.testing import CliRunner

from ddlscope.cli.main import app
from ddlscope.profile import OP_COLUMNS, profile_model
from ddlscope.specs.workload import load_workload

runner = CliRunner()
SMALL = ["resnet18", "--batch-size", "2", "--image-size", "32"]


def _ok(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output


def test_profile_table_shows_totals():
    out = _ok(["profile", *SMALL])
    assert "resnet18 | batch size 2, image size 32 | fp32, sgd | roofline on V100-SXM2-16GB" in out
    assert "aten.convolution_backward" in out
    assert "dense gradient bytes (tensors): 4.676e+07 (62)" in out  # 11,689,512 x 4 B in 62 tensors


def test_profile_json_workload_reads_back(tmp_path):
    out = _ok(["profile", *SMALL, "--format", "json"])
    payload = json.loads(out)
    assert {"rows", "totals", "workload", "embedding_tables"} <= set(payload)
    assert payload["totals"]["params"] == 11_689_512
    path = tmp_path / "resnet18.json"
    path.write_text(out)
    w = load_workload(path)
    assert w == profile_model("resnet18", batch_size=2, image_size=32).workload


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_ops_out(tmp_path, suffix):
    path = tmp_path / f"ops{suffix}"
    _ok(["profile", *SMALL, "--ops-out", str(path), "--params-out", str(tmp_path / f"params{suffix}")])
    ops = pl.read_parquet(path) if suffix == ".parquet" else pl.read_csv(path)
    assert list(ops.columns) == list(OP_COLUMNS)
    r = profile_model("resnet18", batch_size=2, image_size=32)
    assert ops.height == r.totals["ops"]
    assert ops["total_bytes"].sum() == r.ops["total_bytes"].sum()


def test_profile_list_and_errors():
    assert "gcn_reddit" in _ok(["profile", "--list"])
    bad = runner.invoke(app, ["profile", "no_such_model"])
    assert bad.exit_code == 2 and "not a zoo model" in bad.output
    bad = runner.invoke(app, ["profile", *SMALL, "--ops-out", "ops.txt"])
    assert bad.exit_code == 2 and "expected a .parquet or .csv file name" in bad.output
    bad = runner.invoke(app, ["profile", *SMALL, "--by", "layer"])
    assert bad.exit_code == 2 and "--by: expected op, module or phase, got 'layer'" in bad.output


def test_predict_with_model_equals_workload_file(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(_ok(["profile", *SMALL, "--format", "json"]))
    via_model = json.loads(_ok(["predict", "--model", *SMALL, "--format", "json"]))
    via_file = json.loads(_ok(["predict", "--workload-file", str(path), "--format", "json"]))
    m, f = via_model[0], via_file[0]
    # the same workload: the same totals, and so the same communication
    for col in ("compute_bound_flops", "memory_bound_bytes", "dense_param_bytes", "comm_s"):
        assert m[col] == f[col], col
    # --model has the op table, so its compute is priced op by op (and says so); a workload file has
    # only totals, priced by the system's eff_compute / eff_memory
    assert m["compute_bound_s"] == m["priced_compute_bound_s"] > 0
    assert m["compute_efficiency_source"].startswith("catalog default for volta")
    assert f.get("priced_compute_bound_s") is None and f["host_s"] == 0
    assert m["step_s"] > 0 and f["step_s"] > 0


def test_whatif_with_model_and_flag_errors():
    out = json.loads(_ok(["whatif", "-m", "resnet18", "-b", "2", "--image-size", "32", "--format", "json"]))
    assert out[0]["scenario"] == "baseline" and out[0]["batch_size"] == 2
    bad = runner.invoke(app, ["predict", "--optimizer", "adam"])
    assert bad.exit_code == 2 and "--optimizer: only with --model" in bad.output
    bad = runner.invoke(app, ["predict", "--model", "resnet18", "--workload-file", "x.json"])
    assert bad.exit_code == 2 and "give one of them" in bad.output


def test_a_size_the_model_cannot_run_at_is_one_line_naming_the_sizes():
    # ResNet-18 halves 7 px five times to 1 x 1; BatchNorm then sees one value per channel at batch 1
    res = runner.invoke(app, ["profile", "resnet18", "--batch-size", "1", "--image-size", "7"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert ("profile resnet18 at --batch-size 1, --image-size 7: the model cannot run at this size "
            "(PyTorch: Expected more than 1 value per channel when training") in res.output.replace("\n", "")


def test_profile_header_names_the_amp_mode_and_attention():
    args = ["profile", "bert_base_squad", "--batch-size", "2", "--seq-len", "32", "--top", "2"]
    out = _ok([*args, "--precision", "fp16", "--amp", "o2", "--attention", "math"])
    assert "bert_base_squad | batch size 2, seq len 32 | fp16 (apex O2), sgd, attention math |" in out
    result = runner.invoke(app, [*args, "--amp", "o2"])  # fp32: no AMP mode to apply
    assert result.exit_code == 0
    assert "note: --amp o2 applies to --precision fp16/bf16 only; ignored at fp32" in result.output
