"""Measurement tables: reading with every rejected row counted, prediction, fitting on named rows,
leave-one-group-out, ratio errors; the shared Lambda and DLE tables as measurement tables."""

from __future__ import annotations

import math
import shutil

import polars as pl
import pytest
from typer.testing import CliRunner

from ddlscope.cli.main import app
from ddlscope.model.compute import SingleGpuCase, predict_single_gpu
from ddlscope.profile import profile_model
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.validate.measurements import (
    FittedEfficiencies,
    MeasurementError,
    error_summary,
    measurement_jobs,
    ops_at,
    predict_jobs,
    ratio_pairs,
    read_measurements,
    validate_measurements,
)
from ddlscope.validate.shared_tables import (
    LAMBDA_MODELS,
    LEFT_OUT,
    UNSYNCHRONISED_MULTI_GPU,
    dle_measurements,
    lambda_measurements,
)

HEADER = "model,gpu,gpus,batch_per_gpu,precision,step_time_s,source\n"


def _write(tmp_path, text: str, name: str = "m.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_rejected_rows_name_line_and_reason(tmp_path):
    path = _write(tmp_path, "# a comment line\n" + HEADER + "\n".join([
        "resnet18_cifar,V100,1,32,fp32,0.05,a",      # line 3: good
        "resnet18_cifar,V100,1,x,fp32,0.05,a",       # line 4: not an integer
        "resnet18_cifar,V100,0,32,fp32,0.05,a",      # line 5: gpus < 1
        "resnet18_cifar,V100,1,32,fp64,0.05,a",      # line 6: precision
        "nosuch,V100,1,32,fp32,0.05,a",              # line 7: model
        "resnet18_cifar,Z9000,1,32,fp32,0.05,a",     # line 8: GPU
        "resnet18_cifar,V100,1,32,fp32,-1,a",        # line 9: not > 0
        "resnet18_cifar,V100,1,32,fp32,,a",          # line 10: no measurement
        ",V100,1,32,fp32,0.05,a",                    # line 11: empty model
        "resnet18_cifar,V100,1,32,amp,inf,a",        # line 12: non-finite
    ]) + "\n")
    t = read_measurements(path)
    assert t.rows_in == 10 and t.rows.height == 1
    assert t.rows["line"].to_list() == [3]
    # the alias resolves to the catalog name; the given spelling is kept
    assert t.rows["gpu"][0] == builtin_catalog().gpu("V100").name and t.rows["gpu_given"][0] == "V100"
    got = dict(zip(t.rejected["line"], t.rejected["reason"], strict=True))
    assert got == {4: "not_an_integer", 5: "out_of_range", 6: "unknown_precision", 7: "unknown_model",
                   8: "unknown_gpu", 9: "out_of_range", 10: "no_measurement", 11: "missing_value",
                   12: "out_of_range"}
    assert t.rejected.filter(pl.col("line") == 8)["detail"][0] == (
        f"{path}:8: gpu = Z9000: not in the catalog (ddlscope catalog gpus)")


def test_structural_errors_name_the_file(tmp_path):
    with pytest.raises(MeasurementError, match=r"m.csv: missing column\(s\) gpus, precision"):
        read_measurements(_write(tmp_path, "model,gpu,batch_per_gpu,step_time_s\nncf,V100,4,1\n"))
    with pytest.raises(MeasurementError, match="neither throughput nor step_time_s"):
        read_measurements(_write(tmp_path, "model,gpu,gpus,batch_per_gpu,precision\nncf,V100,1,4,fp32\n"))
    with pytest.raises(MeasurementError, match="no data row"):
        read_measurements(_write(tmp_path, HEADER))
    with pytest.raises(MeasurementError, match="no such measurement table"):
        read_measurements(tmp_path / "absent.csv")


def test_throughput_units_become_step_time(tmp_path):
    header = "model,gpu,gpus,batch_per_gpu,precision,throughput,throughput_unit,seq_len,units_per_sample\n"
    path = _write(tmp_path, header +
                  "resnet18_cifar,V100,2,64,fp32,1000,images/s,,\n"      # 2 x 64 / 1000 = 0.128 s
                  "bert_base,V100,1,8,fp16,4096,tokens/s,128,\n"          # 4096 / 128 = 32 seq/s: 8 / 32 = 0.25 s
                  "bert_base,V100,1,8,fp16,300,frames/s,128,10\n"          # 300 / 10 = 30 /s: 8 / 30 s
                  "bert_base,V100,1,8,fp16,300,frames/s,128,\n"            # no units_per_sample
                  "bert_base,V100,1,8,fp16,4096,tokens/s,,\n"              # tokens/s without seq_len
                  "bert_base,V100,1,8,fp16,4096,,,\n")                      # no unit
    t = read_measurements(path)
    assert t.rows["measured_step_s"].to_list() == pytest.approx([0.128, 0.25, 8 / 30])
    assert dict(zip(t.rejected["line"], t.rejected["reason"], strict=True)) == {
        5: "no_units_per_sample", 6: "no_units_per_sample", 7: "no_unit"}


def test_prediction_prices_the_op_table_at_the_rows_batch(tmp_path):
    """A one-GPU row's prediction is the op-level price (model.compute) of the op table at its batch;
    the batch-2/batch-4 interpolation of every op equals profiling at the row's batch."""
    t = read_measurements(_write(tmp_path, HEADER + "resnet18_cifar,V100-SXM2-16GB,1,24,fp32,0.1,a\n"))
    jobs = measurement_jobs(t.rows)
    res = predict_jobs(jobs, FittedEfficiencies({}, 0, "defaults"))
    direct = profile_model("resnet18_cifar", batch_size=24, embedding_gradients="dense").ops
    interpolated = ops_at("resnet18_cifar", "fp32", "sgd", None, None, "fused", "autocast", 24)
    assert interpolated["op"].to_list() == direct["op"].to_list()
    assert interpolated["flops"].to_list() == pytest.approx(direct["flops"].cast(pl.Float64).to_list(), rel=1e-12)
    assert interpolated["total_bytes"].to_list() == pytest.approx(
        direct["total_bytes"].cast(pl.Float64).to_list(), rel=1e-12)
    priced = predict_single_gpu([SingleGpuCase(direct, "V100-SXM2-16GB", "fp32", 24)])
    assert res["compute_bound_s"][0] == pytest.approx(priced["compute_bound_s"][0], rel=1e-9)
    assert res["memory_bound_s"][0] == pytest.approx(priced["memory_bound_s"][0], rel=1e-9)
    assert res["host_s"][0] == pytest.approx(priced["host_s"][0], rel=1e-9)
    # one GPU: step = data I/O (the input copy) + compute + memory + host, and the error is against 0.1 s
    assert res["step_s"][0] == pytest.approx(res["data_io_s"][0] + priced["step_s"][0], rel=1e-9)
    assert res["error"][0] == pytest.approx(res["step_s"][0] / 0.1 - 1)
    assert res["compute_efficiency_source"][0].startswith("catalog default for volta")


def test_fit_on_recovers_the_factors_that_made_the_rows(tmp_path):
    """Rows whose step times the model itself made with CUDA-core GEMM efficiency x 0.8, memory
    efficiency x 0.9 and host cost x 1.5: a fit on three of them gives those factors back (the
    factors no FP32 row can see stay at 1), and the test row then has no error."""
    rows = [f"resnet18_cifar,{g},1,{b},fp32,1.0,a" for g, b in (
        ("V100-SXM2-16GB", 8), ("V100-SXM2-16GB", 64), ("A100-SXM4-80GB", 16), ("A100-SXM4-80GB", 128))]
    t = read_measurements(_write(tmp_path, HEADER + "\n".join(rows) + "\n"))
    truth = {"cuda_gemm_eff": 0.8, "memory_eff": 0.9, "step_overhead_us": 1.5}
    made = predict_jobs(measurement_jobs(t.rows), FittedEfficiencies(truth, 0, "the truth"))["step_s"]
    table = type(t)(rows=t.rows.with_columns(measured_step_s=made, measured=made), rejected=t.rejected, path=t.path)
    res = validate_measurements(table, fit_on="batch_per_gpu < 128")
    fit = res.fits["all"]
    assert fit.fitted_on == 3
    for name, factor in truth.items():
        assert fit.multipliers[name] == pytest.approx(factor, rel=2e-2), name
    assert fit.multipliers["tensor_gemm_eff"] == pytest.approx(1.0, abs=1e-6)
    assert fit.capped == ()  # no efficiency of volta or ampere reached 1
    assert res.rows["role"].to_list() == ["fit", "fit", "fit", "test"]
    assert res.rows["error"].abs().max() < 5e-3


def test_fit_warnings_name_a_factor_at_its_bound_and_an_efficiency_at_the_peak():
    # factors of the range e^-2 .. e^2 at an end, and a capped efficiency, each one warning; a factor
    # inside its range none
    fit = FittedEfficiencies({"memory_eff": math.exp(-2.0), "step_overhead_us": math.exp(2.0), "cuda_gemm_eff": 1.1},
                             3, "fitted on 3 rows", ("turing cuda_gemm_eff",))
    assert fit.at_bounds() == [
        "warning: memory_eff x 0.135 is at the bound of its factor ([0.135, 7.39])",
        "warning: step_overhead_us x 7.39 is at the bound of its factor ([0.135, 7.39])",
        "warning: turing cuda_gemm_eff is capped at 1 (the peak it is priced against): the rows ask for more",
    ]
    assert FittedEfficiencies({"memory_eff": 0.5}, 3, "x").at_bounds() == []


def test_cross_validation_leaves_each_group_out(tmp_path):
    rows = [f"resnet18_cifar,{g},1,{b},fp32,{s},t" for g, b, s in (
        ("V100-SXM2-16GB", 16, 0.05), ("V100-SXM2-16GB", 32, 0.09), ("A100-SXM4-80GB", 32, 0.04),
        ("T4", 32, 0.3))]
    t = read_measurements(_write(tmp_path, HEADER + "\n".join(rows) + "\n"))
    res = validate_measurements(t, cross_validate="gpu")
    assert set(res.fits) == {"V100-SXM2-16GB", "A100-SXM4-80GB", "T4"}
    # each fold fits on the one-GPU rows of the other GPUs: 4 - 2, 4 - 1, 4 - 1
    assert {k: v.fitted_on for k, v in res.fits.items()} == {"V100-SXM2-16GB": 2, "A100-SXM4-80GB": 3, "T4": 3}
    assert res.rows["fold"].to_list() == ["V100-SXM2-16GB", "V100-SXM2-16GB", "A100-SXM4-80GB", "T4"]
    assert (res.rows["role"] == "test").all()
    overall = res.summary.filter(pl.col("fold") == "all")
    assert overall["rows"][0] == 4
    assert overall["mape"][0] == pytest.approx(res.rows["error"].abs().mean())
    with pytest.raises(ValueError, match="--cross-validate nosuch: no such column"):
        validate_measurements(t, cross_validate="nosuch")
    with pytest.raises(ValueError, match="--fit-on 'gpu ==== 1': not a SQL condition"):
        validate_measurements(t, fit_on="gpu ==== 1")


def test_ratio_pairs_by_hand():
    rows = pl.DataFrame({
        "model": ["m", "m", "m"], "precision": ["fp32"] * 3, "gpus": [1, 1, 1], "servers": [1, 1, 1],
        "source": ["s"] * 3, "gpu": ["A", "B", "C"], "batch_per_gpu": [10, 20, 10], "line": [1, 2, 3],
        # measured throughput 10/0.1 = 100, 20/0.1 = 200, 10/0.2 = 50; predicted 100, 400, 50
        "measured_step_s": [0.1, 0.1, 0.2], "step_s": [0.1, 0.05, 0.2],
    })
    p = ratio_pairs(rows, "gpu").sort("a", "b")
    # faster over slower: B/A = 2 (pred 4), A/C = 2 (pred 2), B/C = 4 (pred 8)
    assert p.select("a", "b").rows() == [("A", "C"), ("B", "A"), ("B", "C")]
    assert p["measured_ratio"].to_list() == pytest.approx([2.0, 2.0, 4.0])
    assert p["ratio_error"].to_list() == pytest.approx([0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="between: expected one of gpu, batch, precision"):
        ratio_pairs(rows, "server")
    # rows that also differ in a run setting (attention, sequence length, AMP mode) are not a GPU pair
    other = rows.with_columns(attention=pl.Series(["fused", "math", "fused"]), seq_len=pl.Series([128, 128, 384]),
                              amp=pl.Series(["autocast"] * 3))
    assert ratio_pairs(other, "gpu").height == 0
    # between precisions the AMP mode may differ (an FP32 row has none), the rest must not
    prec = rows.head(2).with_columns(gpu=pl.lit("A"), precision=pl.Series(["fp32", "fp16"]),
                                     amp=pl.Series(["autocast", "o2"]), attention=pl.lit("math"))
    assert ratio_pairs(prec, "precision").select("a", "b").rows() == [("fp16", "fp32")]


def test_dle_tables_as_measurements(shared_data):
    t = dle_measurements(shared_data)
    assert t.rows.height == 24 and t.rejected.height == 0
    ngc1910 = "resnet50v1.5_pytorch_training_perf_ngc19.10.csv"
    first = t.rows.filter((pl.col("source") == ngc1910) & (pl.col("line") == 2))
    # DGX-1 16G, 1 GPU, batch 256, AMP, 893.09 images/s: 256 / 893.09 s per step
    assert first.select("gpu", "server", "precision", "gpus").row(0) == ("V100-SXM2-16GB", "dgx-1v", "fp16", 1)
    assert first["measured_step_s"][0] == pytest.approx(256 / 893.09)


def test_lambda_tables_every_row_accounted_for(shared_data):
    t = lambda_measurements(shared_data)
    expected_in = 0
    left_out = 0
    not_measured = 0
    unsynchronised = 0
    for precision in ("fp32", "fp16"):
        thr = pl.read_csv(shared_data / "lambda_benchmarks" / f"pytorch-train-throughput-{precision}.csv")
        for bench in (*LAMBDA_MODELS, *LEFT_OUT):
            n = int((thr[bench] > 0).sum())
            expected_in += n
            left_out += n if bench in LEFT_OUT else 0
            # Transformer-XL's multi-GPU runs are independent replicas (no --multi_gpu): not a DDP measurement
            if bench in UNSYNCHRONISED_MULTI_GPU:
                unsynchronised += int(((thr[bench] > 0) & (thr["num_gpu"] > 1)).sum())
            not_measured += int((thr[bench].is_null() | (thr[bench] == 0)).sum())
    # every cell is a row or counted: the empty and 0 cells (Lambda did not run that model there) too
    assert not_measured == 80
    assert t.rows_in == expected_in + not_measured
    assert int((t.rejected["reason"] == "left_out").sum()) == left_out
    assert int((t.rejected["reason"] == "not_measured").sum()) == not_measured
    assert int((t.rejected["reason"] == "not_synchronised").sum()) == unsynchronised == 80
    # SOURCES.md's outliers: NCF on 4 and 8 H100 SXM5 at 4-42 times one GPU's rate per GPU
    odd = t.rejected.filter(pl.col("reason") == "implausible")
    assert odd.height == 20 and odd["detail"].str.contains(r"\.csv:\d+: ncf on [48] GPUs measures [\d.]+ times").all()
    assert t.rows_in == t.rows.height + t.rejected.height
    # no row is lost without a reason, and every reason names the file and line
    assert t.rejected["detail"].str.contains(r"pytorch-train-throughput-fp(32|16)\.csv:\d+: ").all()
    # the 80 Transformer-XL multi-GPU rows (40 base, 40 large) say why
    txl = t.rejected.filter(pl.col("reason") == "not_synchronised")
    assert txl["detail"].str.contains(r"\.csv:\d+: transformerxl(base|large) on [248] GPUs: independent replicas").all()
    assert t.rows.filter(pl.col("model").str.starts_with("transformer_xl"))["gpus"].unique().to_list() == [1]


def _lambda_copy(shared_data, tmp_path, file: str, edits: dict[tuple[int, str], str]):
    """A copy of the shared Lambda folder under ``tmp_path`` with cells of ``file`` replaced:
    ``edits`` maps (file line, 1-based as the reader numbers it; column name) to the new text, or to a
    callable of the old text. Returns the data folder to pass to :func:`lambda_measurements`."""
    folder = tmp_path / "lambda_benchmarks"
    shutil.copytree(shared_data / "lambda_benchmarks", folder)
    path = folder / file
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    for (line, column), value in edits.items():
        cells = lines[line - 1].split(",")
        col = header.index(column)
        cells[col] = value(cells[col]) if callable(value) else value
        lines[line - 1] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    return tmp_path


def test_a_bad_lambda_cell_is_a_rejected_row_not_a_lost_one(shared_data, tmp_path):
    # a negative or non-numeric throughput goes to the checks (out_of_range / not_a_number, with its
    # file:line), not silently away with the empty cells
    data = _lambda_copy(shared_data, tmp_path, "pytorch-train-throughput-fp16.csv",
                        {(2, "resnet50"): lambda v: "-" + v, (3, "resnet50"): "abc"})
    before = lambda_measurements(shared_data)
    after = lambda_measurements(data)
    assert after.rows.height == before.rows.height - 2
    bad = after.rejected.filter(pl.col("reason").is_in(["out_of_range", "not_a_number"])).sort("line")
    assert bad["line"].to_list() == [2, 3] and bad["reason"].to_list() == ["out_of_range", "not_a_number"]


@pytest.mark.parametrize(("num_gpu", "reason", "says"), [
    ("0", "out_of_range", "gpus = 0: expected >= 1"), ("1.5", "not_an_integer", "gpus = 1.5"),
    ("eight", "not_an_integer", "gpus = eight"),
])
def test_a_bad_lambda_gpu_count_rejects_its_line_naming_the_file(shared_data, tmp_path, num_gpu, reason, says):
    # num_gpu 0 divided the server's batch by zero (a traceback), 1.5 was truncated to one GPU: now each
    # converted benchmark of that line is a rejected row naming the file and line; the other lines stay
    data = _lambda_copy(shared_data, tmp_path, "pytorch-train-throughput-fp32.csv", {(2, "num_gpu"): num_gpu})
    before, after = lambda_measurements(shared_data), lambda_measurements(data)
    line2 = (pl.col("source") == "lambda fp32") & (pl.col("line") == 2)
    assert after.rows.filter(line2).height == 0
    bad = after.rejected.filter(line2 & (pl.col("reason") == reason))
    assert bad.height == before.rows.filter(line2).height == 7  # the seven converted benchmarks of line 2
    assert bad["detail"].str.contains(f"pytorch-train-throughput-fp32.csv:2: {says}", literal=True).all()
    assert after.rows.height == before.rows.height - 7


def test_cli_measurements_and_option_errors(tmp_path):
    path = _write(tmp_path, HEADER + "resnet18_cifar,V100,1,32,fp32,0.05,a\nresnet18_cifar,T4,1,32,fp32,0.3,a\n")
    runner = CliRunner()
    ok = runner.invoke(app, ["validate", "--measurements", str(path), "--fit-on", "gpu = 'V100-SXM2-16GB'",
                             "--format", "json"])
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(app, ["validate", "--fit-on", "gpus = 1"])
    assert bad.exit_code == 2 and "--fit-on and --cross-validate go with --measurements" in bad.output
    bad = runner.invoke(app, ["validate", "--measurements", str(tmp_path / "none.csv")])
    assert bad.exit_code == 2 and "no such measurement table" in bad.output


def test_fit_on_edge_cases_and_placements(tmp_path):
    header = "model,gpu,gpus,servers,batch_per_gpu,precision,step_time_s,server\n"
    path = _write(tmp_path, header + "\n".join([
        "resnet18_cifar,A100-SXM4-80GB,16,1,32,fp32,0.1,dgx-a100",   # line 2: 16 GPUs in an 8-GPU server
        "resnet18_cifar,A100-SXM4-80GB,2,4,32,fp32,0.1,dgx-a100",    # line 3: fewer GPUs than servers
        "resnet18_cifar,A100-SXM4-80GB,1,1,32,fp32,0.05,dgx-a100",
        "resnet18_cifar,V100,1,1,32,fp32,0.08,",
    ]) + "\n")
    t = read_measurements(path)
    assert dict(zip(t.rejected["line"], t.rejected["reason"], strict=True)) == {2: "placement", 3: "placement"}
    assert "16 GPUs per server, the server (dgx-a100) has 8" in t.rejected["detail"][0]
    # a constant condition selects every row: fitted, nothing left to test, and said so
    res = validate_measurements(t, fit_on="1 = 1")
    assert res.rows["role"].to_list() == ["fit", "fit"]
    assert any("no test row" in line for line in res.protocol)
    with pytest.raises(ValueError, match="selects no row of the 2; gpu holds the catalog's names"):
        validate_measurements(t, fit_on="gpu = 'V100'")


def test_a_json_array_of_rows_reads_as_a_table(tmp_path):
    rows = [{"model": "resnet18_cifar", "gpu": "V100", "gpus": 1, "batch_per_gpu": 32, "precision": "fp32",
             "step_time_s": 0.05}, {"model": "resnet18_cifar", "gpu": "T4", "gpus": "x", "batch_per_gpu": 32,
                                    "precision": "fp32", "step_time_s": 0.3}]
    path = tmp_path / "m.json"
    path.write_text(__import__("json").dumps(rows))
    t = read_measurements(path)
    assert t.rows.height == 1 and t.rejected["reason"].to_list() == ["not_an_integer"]


def test_attention_column_is_checked_and_reaches_the_profile(tmp_path):
    """``attention``: an unknown value is a rejected row naming its line; ``math`` profiles the
    materialised scores, so the memory-bound bytes grow by the score tensors' traffic."""
    head = "model,gpu,gpus,batch_per_gpu,precision,step_time_s,seq_len,attention\n"
    path = _write(tmp_path, head + "bert_base_squad,V100,1,2,fp16,0.1,128,math\n"
                                   "bert_base_squad,V100,1,2,fp16,0.1,128,flash\n"
                                   "bert_base_squad,V100,1,2,fp16,0.1,128,\n")
    t = read_measurements(path)
    assert t.rows["attention"].to_list() == ["math", "fused"]
    bad = t.rejected.row(0, named=True)
    assert (bad["line"], bad["reason"]) == (3, "unknown_attention")
    assert bad["detail"] == f"{path}:3: attention = flash: expected fused or math"
    math_ops = ops_at("bert_base_squad", "fp16", "sgd", 128, None, "math", "autocast", 2)
    fused_ops = ops_at("bert_base_squad", "fp16", "sgd", 128, None, "fused", "autocast", 2)
    # the math path (unfused eager attention) runs a softmax on the L x L scores of each of the
    # 12 layers: 2 samples x 12 heads x 128 x 128 scores; the fused kernel never writes them
    assert "aten._softmax" in math_ops["op"].to_list() and "aten._softmax" not in fused_ops["op"].to_list()
    softmax = math_ops.filter(pl.col("op") == "aten._softmax", pl.col("phase") == "forward")
    assert softmax.height == 12
    scores = 2 * 12 * 128 * 128
    # the softmax reads and writes the scores (FP32 under autocast: 4 bytes each)
    assert softmax["total_bytes"].cast(pl.Float64).to_list() == [2 * 4 * scores] * 12
    assert math_ops["total_bytes"].sum() > fused_ops["total_bytes"].sum()


def test_lambda_bert_rows_run_as_deeplearningexamples_does(shared_data):
    """Lambda's BERT SQuAD rows: run_squad.py's optimizers (apex FusedAdam, an Adam, under AMP; its own
    BertAdam otherwise) and DLE's unfused attention (modeling.py)."""
    rows = lambda_measurements(shared_data).rows.filter(pl.col("benchmark").str.starts_with("bert"))
    assert rows.height > 0
    assert set(rows["attention"]) == {"math"}
    assert set(rows.filter(pl.col("precision") == "fp16")["optimizer"]) == {"adam"}
    assert set(rows.filter(pl.col("precision") != "fp16")["optimizer"]) == {"bert_adam"}
    # BertAdam's kernel per term per parameter; FusedAdam's multi-tensor launches
    assert set(rows.filter(pl.col("precision") != "fp16")["optimizer_kernels"]) == {"for_loop"}
    # apex O2 under AMP (run_squad.py); the FP32/TF32 rows run no AMP mode
    assert set(rows.filter(pl.col("precision") == "fp16")["amp"]) == {"o2"}
    assert set(rows.filter(pl.col("precision") != "fp16")["amp"]) == {"autocast"}
    assert set(rows["seq_len"]) == {384}


def test_a_size_the_model_does_not_take_rejects_that_row_only(tmp_path):
    """The profiler's refusal (a sequence length for an image model, a sequence longer than BERT's 512
    positions) is a rejected row with its file:line, reason profile_failed; the other rows are predicted."""
    path = _write(tmp_path, "model,gpu,gpus,batch_per_gpu,precision,step_time_s,seq_len,image_size\n"
                            "resnet18,V100,1,2,fp32,0.05,64,\n"
                            "resnet18,V100,1,2,fp32,0.05,,64\n"
                            "bert_base_squad,V100,1,2,fp32,0.05,100000,\n")
    res = validate_measurements(read_measurements(path))
    assert res.rows["line"].to_list() == [3]
    bad = res.rejected.filter(pl.col("reason") == "profile_failed").sort("line")
    assert bad["line"].to_list() == [2, 4]
    assert bad["detail"][0].startswith(f"{path}:2: seq_len: model 'resnet18' has no sequence length")
    assert bad["detail"][1].startswith(f"{path}:4: ") and "512 positions" in bad["detail"][1]


def test_unit_spellings_and_milliseconds_per_step(tmp_path):
    header = "model,gpu,gpus,batch_per_gpu,precision,throughput,throughput_unit,step_time_ms,seq_len\n"
    path = _write(tmp_path, header +
                  "resnet18_cifar,V100,2,64,fp32,1000,Images/sec,,\n"          # 2 x 64 / 1000 = 0.128 s
                  "resnet18_cifar,V100,2,64,fp32,1000,samples per second,,\n"  # the same
                  "resnet18_cifar,V100,1,64,fp32,800,examples/s,,\n"           # 64 / 800 = 0.08 s
                  "bert_base,V100,1,8,fp16,4096,Tokens / Sec,,128\n"            # 8 / (4096 / 128) = 0.25 s
                  "resnet18_cifar,V100,1,64,fp32,,,125,\n"                      # 125 ms = 0.125 s
                  "resnet18_cifar,V100,1,64,fp32,800,images/s,125,\n"           # two measurements
                  "resnet18_cifar,V100,1,64,fp32,,,abc,\n")                     # not a number
    t = read_measurements(path)
    assert t.rows["measured_step_s"].to_list() == pytest.approx([0.128, 0.128, 0.08, 0.25, 0.125])
    assert t.rows["measured_kind"].to_list() == ["throughput"] * 4 + ["step_time"]
    assert dict(zip(t.rejected["line"], t.rejected["reason"], strict=True)) == {
        7: "two_measurements", 8: "not_a_number"}
    # a table whose only measurement column is step_time_ms reads
    only_ms = _write(tmp_path, "model,gpu,gpus,batch_per_gpu,precision,step_time_ms\nncf,V100,1,256,fp32,12.5\n",
                     name="ms.csv")
    assert read_measurements(only_ms).rows["measured_step_s"].to_list() == pytest.approx([0.0125])


def test_model_names_in_table_spellings_resolve_to_the_zoo(tmp_path):
    path = _write(tmp_path, HEADER + "\n".join([
        "ResNet-18_CIFAR,V100,1,32,fp32,0.05,a",   # line 2: resnet18_cifar
        "Inception-v3,V100,1,8,fp32,0.5,a",         # line 3: inception_v3
        "bert_large_squad,V100,1,2,fp16,0.5,a",     # line 4: as is
        "BERT-Large-SQuAD,V100,1,2,fp16,0.5,a",     # line 5: bert_large_squad
        "resnet-5O,V100,1,32,fp32,0.05,a",          # line 6: a letter O, no zoo model
    ]) + "\n")
    t = read_measurements(path)
    assert t.rows["model"].to_list() == ["resnet18_cifar", "inception_v3", "bert_large_squad", "bert_large_squad"]
    assert t.rows["model_given"].to_list() == ["ResNet-18_CIFAR", "Inception-v3", "bert_large_squad",
                                               "BERT-Large-SQuAD"]
    assert dict(zip(t.rejected["line"], t.rejected["reason"], strict=True)) == {6: "unknown_model"}


def test_multi_gpu_rows_take_the_ddp_bucket_timeline_of_their_profile(tmp_path):
    """A multi-GPU row's scheduled overlap uses the model's own DDP buckets (ddlscope.model.overlap.
    bucket_timeline of its op table), not gradients spread evenly over the backward."""
    from ddlscope.model.overlap import TIMELINE_COLUMNS, bucket_timeline

    head = "model,gpu,gpus,servers,batch_per_gpu,precision,step_time_s,source\n"
    t = read_measurements(_write(tmp_path, head + "resnet18_cifar,T4,8,2,32,fp32,0.1,a\n"))
    jobs = measurement_jobs(t.rows)
    prof = profile_model("resnet18_cifar", batch_size=4, embedding_gradients="dense")
    want = bucket_timeline(prof.ops, prof.params)
    for k in TIMELINE_COLUMNS:
        assert jobs[k][0].to_list() == pytest.approx(want[k], rel=1e-12)
    # ResNet-18's last DDP bucket (the stem, layer1-2, most of layer3) is 19.6 % of its 44.7 MB of gradients
    # (tests/model/test_overlap.py::test_resnet18_cifar_buckets_as_ddp_builds_them), ready at the backward's end
    assert want["timeline_tau"][-1] == pytest.approx(1.0) and want["timeline_bytes_left"][-1] == pytest.approx(
        0.1955, abs=1e-3)
    res = predict_jobs(jobs, FittedEfficiencies({}, 0, "defaults")).row(0, named=True)
    # nothing hides the last bucket: at least its share of the all-reduce is exposed
    assert res["comm_s"] > 0 and res["exposed_comm_s"] >= 0.1955 * res["comm_s"]


def test_a_csv_row_with_the_wrong_field_count_is_one_rejected_row(tmp_path):
    """A row with an extra or a missing field is rejected naming its line (the rest are read); a
    quoted field may hold the separator; blank and ``#`` lines keep the line numbers true."""
    path = _write(tmp_path, HEADER + "\n".join([
        "resnet18_cifar,V100,1,32,fp32,0.05,a",           # line 2: good
        "resnet18_cifar,V100,1,32,fp32,0.05,a,extra",     # line 3: one field too many
        "",                                               # line 4: blank
        "resnet18_cifar,V100,1,32,fp32",                  # line 5: fields missing
        "# a comment",                                    # line 6
        'resnet18_cifar,V100,1,32,fp32,0.06,"a, b"',      # line 7: good, quoted comma
    ]) + "\n")
    t = read_measurements(path)
    assert t.rows["line"].to_list() == [2, 7] and t.rows["source"].to_list() == ["a", "a, b"]
    assert t.rows_in == 4
    assert t.rejected.select("line", "reason").rows() == [(3, "extra_fields"), (5, "missing_fields")]
    assert t.rejected["detail"].to_list() == [f"{path}:3: expected 7 fields, got 8",
                                              f"{path}:5: expected 7 fields, got 5"]
    with pytest.raises(MeasurementError, match=r"no data row with the header's 7 fields \(1 row\(s\) differ; first: "
                                               r".*m2.csv:2: expected 7 fields, got 6"):
        read_measurements(_write(tmp_path, HEADER + "resnet18_cifar,V100,1,32,fp32,0.05\n", "m2.csv"))


def test_comments_and_blank_lines_before_the_header_count_in_the_line_numbers(tmp_path):
    """``#`` lines (indented too) and blank lines are skipped before the header as after it; a line of
    spaces is no blank line but a row with one field (rejected), and an empty file is an error."""
    path = _write(tmp_path, "# measured on our cluster\n\n  # by hand\n" + HEADER + "\n".join([
        "resnet18_cifar,V100,1,32,fp32,0.05,a",  # line 5
        "#resnet18_cifar,V100,1,32,fp32,0.05,b",  # line 6: a row commented out
        "   ",                                    # line 7: spaces
        "resnet18_cifar,V100,1,32,fp32,0.06,c",  # line 8
    ]) + "\n")
    t = read_measurements(path)
    assert t.rows.select("line", "source").rows() == [(5, "a"), (8, "c")]
    assert t.rejected.select("line", "reason", "detail").rows() == [
        (7, "missing_fields", f"{path}:7: expected 7 fields, got 1")]
    with pytest.raises(MeasurementError, match=r"e.csv: empty file; expected a header line"):
        read_measurements(_write(tmp_path, "", "e.csv"))
    with pytest.raises(MeasurementError, match=r"c.csv: no header line: every line is blank or a comment"):
        read_measurements(_write(tmp_path, "# nothing yet\n\n", "c.csv"))


def test_a_header_naming_a_column_twice_is_an_error(tmp_path):
    with pytest.raises(MeasurementError, match=r"m.csv: the header names column 'gpu' twice \(fields 2 and 4\)"):
        read_measurements(_write(tmp_path, "model,gpu,gpus,gpu,batch_per_gpu,precision,step_time_s\n"
                                           "resnet18_cifar,V100,1,T4,32,fp32,0.05\n"))
    # an unnamed trailing field (a trailing comma on every line) is no column; one holding a value is an error
    t = read_measurements(_write(tmp_path, HEADER.rstrip("\n") + ",\nresnet18_cifar,V100,1,32,fp32,0.05,a,\n", "t.csv"))
    assert t.rows.height == 1 and "" not in t.rows.columns
    with pytest.raises(MeasurementError, match=r"u.csv: field 8 of the header has no name but line 2 gives it"):
        read_measurements(_write(tmp_path, HEADER.rstrip("\n") + ",\nresnet18_cifar,V100,1,32,fp32,0.05,a,9\n",
                                 "u.csv"))


def test_whole_floats_are_integers_and_a_measured_sync_of_zero_is_kept(tmp_path):
    """``gpus = 4.0`` (a float column's whole number) reads as 4, ``4.5`` is no integer; a measured
    sync of 0 (all communication hidden) is a measurement, kept out of the relative sync error and
    counted in the absolute one."""
    head = "model,gpu,gpus,servers,batch_per_gpu,precision,step_time_s,measured_sync_s\n"
    path = _write(tmp_path, head + "resnet18_cifar,V100,2.0,1,32.0,fp32,0.05,0\n"
                                   "resnet18_cifar,V100,2.5,1,32,fp32,0.05,0\n"
                                   "resnet18_cifar,V100,2,1,32,fp32,0.05,-0.1\n")
    t = read_measurements(path)
    assert t.rows.select("line", "gpus", "batch_per_gpu", "measured_sync_s").rows() == [(2, 2, 32, 0.0)]
    assert t.rejected.select("line", "reason").rows() == [(3, "not_an_integer"), (4, "out_of_range")]
    assert "measured_sync_s = -0.1: expected a finite number >= 0" in t.rejected["detail"][1]
    rows = pl.DataFrame({"g": ["a", "a", "a"], "error": [0.1, -0.1, 0.0], "measured_sync_s": [0.0, 0.2, None],
                         "predicted_sync_s": [0.01, 0.1, 0.3]})
    s = error_summary(rows, ["g"]).row(0, named=True)
    assert (s["sync_rows"], s["sync_mape"]) == (2, pytest.approx(0.5))
    assert s["sync_mae_s"] == pytest.approx((0.01 + 0.1) / 2)


def test_a_byte_order_mark_and_crlf_line_ends_read_as_plain_csv(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + HEADER.replace("\n", "\r\n").encode()
                     + b"resnet18_cifar,V100,1,32,fp32,0.05,a\r\n\r\nresnet18_cifar,V100,1,32,fp32,0.05\r\n")
    t = read_measurements(path)
    assert t.rows.select("line", "model", "source").rows() == [(2, "resnet18_cifar", "a")]
    assert t.rejected.select("line", "reason").rows() == [(4, "missing_fields")]


def test_a_line_of_separators_is_a_row_and_unreadable_text_names_its_line(tmp_path):
    """A line of commas is a row (rejected: empty values, or the wrong field count), never skipped
    as blank; a broken quote, non-UTF-8 bytes and another separator are errors naming the line or
    what to change; a whole number too large to count with is out of range, not "not an integer"."""
    path = _write(tmp_path, HEADER + "resnet18_cifar,V100,1,32,fp32,0.05,a\n,,,,,,\n,,,\n , , , , , , \n")
    t = read_measurements(path)
    assert t.rows["line"].to_list() == [2]
    assert t.rejected.select("line", "reason").rows() == [(3, "missing_value"), (4, "missing_fields"),
                                                          (5, "missing_value")]
    with pytest.raises(MeasurementError, match=r"q.csv:3: not CSV: a quoted field must close its quote and be "
                                               "followed by the separator or the line's end"):
        read_measurements(_write(tmp_path, HEADER + "resnet18_cifar,V100,1,32,fp32,0.05,a\n"
                                                    'resnet18_cifar,"V100"x,1,32,fp32,0.05,a\n', "q.csv"))
    # a quoted field spanning two lines is not read (one record a line): an error naming its first line
    with pytest.raises(MeasurementError, match=r"o.csv:3: a quote is not closed on its line; quoted fields spanning "
                                               "lines are not supported"):
        read_measurements(_write(tmp_path, HEADER + "resnet18_cifar,V100,1,32,fp32,0.05,a\n"
                                                    'resnet18_cifar,V100,1,32,fp32,0.05,"two\nlines"\n', "o.csv"))
    # a line that is not UTF-8 is one rejected row naming its line and byte; the other rows are read
    latin = tmp_path / "l.csv"
    latin.write_bytes((HEADER + "resnet18_cifar,V100,1,32,fp32,0.05,a\n").encode() + "r\xe9snet,V100,1,32,fp32,0.05,a\n"
                      .encode("latin-1") + b"resnet18_cifar,V100,1,32,fp32,0.05,a\n")
    t = read_measurements(latin)
    assert t.rows["line"].to_list() == [2, 4]
    # the header (58 bytes) and line 2 (37 bytes): 0xe9 is byte 97 counted from 1, the 2nd of line 3
    assert t.rejected.select("line", "reason", "detail").rows() == [
        (3, "invalid_utf8", f"{latin}:3: byte 97 of the file (byte 2 of the line): 0xe9 is not UTF-8: save the "
                            "table as UTF-8")]
    # a UTF-16 file has no readable line at all: an error with the hint
    utf16 = tmp_path / "w.csv"
    utf16.write_bytes((HEADER + "resnet18_cifar,V100,1,32,fp32,0.05,a\n").encode("utf-16"))
    with pytest.raises(MeasurementError, match=r"w.csv:1: not UTF-8: the file is UTF-16 LE \(byte-order mark\): "
                                               r"save the table as UTF-8"):
        read_measurements(utf16)
    utf16.write_bytes((HEADER + "resnet18_cifar,V100,1,32,fp32,0.05,a\n").encode("utf-32"))
    with pytest.raises(MeasurementError, match=r"w.csv:1: not UTF-8: the file is UTF-32 LE \(byte-order mark\)"):
        read_measurements(utf16)
    with pytest.raises(MeasurementError, match=r"s.csv: the header is one field .*comma-separated"):
        read_measurements(_write(tmp_path, HEADER.replace(",", ";") + "resnet18_cifar;V100;1;32;fp32;0.05;a\n",
                                 "s.csv"))
    t = read_measurements(_write(tmp_path, HEADER + "resnet18_cifar,V100,99999999999999999999999,32,fp32,0.05,a\n",
                                 "h.csv"))
    assert t.rejected.select("reason", "detail").rows() == [
        ("out_of_range", f"{tmp_path / 'h.csv'}:2: gpus = 99999999999999999999999: a whole number too large to "
                         "count with")]


def test_optimizer_kernels_column_is_checked_and_prices_the_optimizer(tmp_path):
    """``optimizer_kernels``: ``foreach`` by default, ``for_loop`` on request, an unknown value a
    rejected row; a for-loop step of ResNet-18 pays a launch and fills per parameter per term."""
    head = "model,gpu,gpus,batch_per_gpu,precision,step_time_s,optimizer_kernels\n"
    path = _write(tmp_path, head + "resnet18,V100,1,2,fp32,0.1,For-Loop\n"
                                   "resnet18,V100,1,2,fp32,0.1,\n"
                                   "resnet18,V100,1,2,fp32,0.1,fused\n")
    t = read_measurements(path)
    assert t.rows["optimizer_kernels"].to_list() == ["for_loop", "foreach"]
    bad = t.rejected.row(0, named=True)
    assert (bad["line"], bad["reason"]) == (4, "unknown_optimizer_kernels")
    assert bad["detail"] == (f"{path}:4: optimizer_kernels = fused: expected foreach (multi-tensor, fused optimizers "
                             "included) or for_loop")
    rows = validate_measurements(t).rows.sort("line")
    loop, each = rows["step_s"].to_list()
    assert loop > each  # the same bytes, more kernels


def test_bert_adam_rows_run_a_kernel_per_parameter(tmp_path):
    """``optimizer = bert_adam`` (DeepLearningExamples' per-parameter loop): ``for_loop`` when
    ``optimizer_kernels`` is empty, ``foreach`` refused; an unknown optimizer's message lists bert_adam."""
    head = "model,gpu,gpus,batch_per_gpu,precision,step_time_s,optimizer,optimizer_kernels\n"
    path = _write(tmp_path, head + "resnet18,V100,1,2,fp32,0.1,BERT_ADAM,\n"
                                   "resnet18,V100,1,2,fp32,0.1,bert_adam,foreach\n"
                                   "resnet18,V100,1,2,fp32,0.1,bertadam,\n")
    t = read_measurements(path)
    assert t.rows.select("optimizer", "optimizer_kernels").rows() == [("bert_adam", "for_loop")]
    assert t.rejected.select("line", "reason").rows() == [(3, "bert_adam_foreach"), (4, "unknown_optimizer")]
    assert t.rejected["detail"][1] == (f"{path}:4: optimizer = bertadam: expected one of sgd, adam, adamw, "
                                       "bert_adam")


def test_shared_tables_run_the_optimizer_as_their_pytorch_did(shared_data):
    """Lambda (PyTorch 1.13), DeepLearningExamples (1.3, 1.9) and Pollux (1.7) predate the multi-tensor
    default of PyTorch 2.0: ``for_loop``; Lambda's BERT steps apex's multi-tensor FusedAdam under AMP:
    ``foreach`` there (its FP32 runs use the per-parameter BertAdam)."""
    lam = lambda_measurements(shared_data).rows
    bert = lam["benchmark"].str.starts_with("bert") & (lam["precision"].cast(pl.String) == "fp16")
    assert set(lam.filter(bert)["optimizer_kernels"]) == {"foreach"}
    assert set(lam.filter(~bert)["optimizer_kernels"]) == {"for_loop"}
    assert set(dle_measurements(shared_data).rows["optimizer_kernels"]) == {"for_loop"}


def test_ncf_throughput_is_converted_to_the_samples_trained(shared_data):
    """DLE's ncf.py counts a whole epoch of MovieLens-20M (19,861,770 ratings x 5) but trains only the
    splits it keeps: ceil(share / local batch) - 1 steps per rank (the last split dropped)."""
    from ddlscope.validate.shared_tables import NCF_EPOCH_SAMPLES, ncf_trained_samples_per_s

    assert NCF_EPOCH_SAMPLES == 99_308_850
    # the 8x A100 80GB SXM4 log: 332,199,903.6 "samples/s", 64 M global batch: each rank's 12,413,606
    # samples split into 8 M + 4.4 M, the second dropped: one step of 64 M in 0.299 s
    assert ncf_trained_samples_per_s(332_199_903.6, 8, 64_000_000) == pytest.approx(
        332_199_903.6 * 64_000_000 / 99_308_850, rel=1e-12)
    # one GPU, 8 M: 13 splits, 12 kept, 96 M of the 99.3 M counted
    assert ncf_trained_samples_per_s(1.0, 1, 8_000_000) == pytest.approx(96_000_000 / 99_308_850, rel=1e-12)
    # a local batch above the rank's share: one split, dropped, nothing trained
    assert ncf_trained_samples_per_s(1.0, 8, 8 * 13_000_000) is None
    assert ncf_trained_samples_per_s(1.0, 8, 7) is None  # a local batch of 0
    # the shared table's 8x A100 80GB SXM4 TF32 row: 338,056,437 reported -> 217.9 M trained
    t = lambda_measurements(shared_data)
    row = t.rows.filter((pl.col("model") == "ncf_dle") & (pl.col("testbed") == "A100 80GB SXM4")
                        & (pl.col("gpus") == 8) & (pl.col("precision") == "tf32"))
    assert row["measured"].to_list() == pytest.approx([338_056_437 * 64_000_000 / 99_308_850], rel=1e-12)
    assert row["measured_step_s"][0] == pytest.approx(99_308_850 / 338_056_437, rel=1e-12)  # one step an epoch


def test_an_ncf_row_that_trains_no_step_is_rejected_with_its_reason(shared_data, tmp_path):
    # 200 M on one GPU: more than the epoch
    t = lambda_measurements(_lambda_copy(shared_data, tmp_path, "pytorch-train-bs-fp32.csv",
                                         {(2, "ncf"): "200000000"}))
    bad = t.rejected.filter(pl.col("reason") == "no_step")
    assert bad["line"].to_list() == [2] and bad["detail"].str.contains("pytorch-train-throughput-fp32.csv:2: ncf").all()
