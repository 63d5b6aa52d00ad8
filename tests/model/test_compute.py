"""Op-level compute pricing (issue 14): hand-computed op times, tensor-core eligibility, the
per-step floor, the Jobs-table path and the provenance of the efficiencies."""

from __future__ import annotations

import polars as pl
import pytest

from ddlscope.model.api import predict
from ddlscope.model.compute import SingleGpuCase, predict_single_gpu, price_jobs
from ddlscope.model.jobs import job_row, jobs_frame
from ddlscope.model.step_time import breakdown
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.specs.efficiency import ComputeEfficiency
from ddlscope.specs.system import GPUSpec, PeakTflops
from ddlscope.specs.workload import Workload

EFF = ComputeEfficiency(generation="volta", tensor_gemm_eff=0.5, cuda_gemm_eff=0.8, vector_eff=0.5,
                        compute_fill_us=10.0, memory_eff=0.8, memory_fill_us=2.0, kernel_launch_us=5.0,
                        step_overhead_us=1000.0, source={"memory_eff": "test"})


def _gpu(tc: tuple[str, ...] = ("fp16",), tf32: float = 10.0, fp16: float = 100.0) -> GPUSpec:
    return GPUSpec(name="TestGPU", peak_tflops=PeakTflops(fp32=10.0, tf32=tf32, fp16=fp16, bf16=10.0),
                   memory_bandwidth_gb_s=1000.0, memory_gb=16.0, generation="volta", tensor_core_precisions=tc)


def _ops(scale: float = 1.0) -> pl.DataFrame:
    return pl.DataFrame({
        "phase": ["forward", "forward", "backward"],
        "op": ["aten.mm", "aten.relu", "aten.convolution_backward"],
        "dtype": ["float32", "float32", "float16"],
        "flops": [2e12 * scale, 1e6 * scale, 1e12 * scale],
        "total_bytes": [int(1e9 * scale), int(2e9 * scale), int(1e8 * scale)],
        "class_by_type": ["compute_bound", "memory_bound", "compute_bound"],
    })


def test_each_op_is_priced_by_its_roofline_with_fills_and_launches():
    case = SingleGpuCase(_ops(), _gpu(), "fp32", 64, label="x", conv_layout="nhwc")  # no layout transposes
    out = predict_single_gpu([case], EFF).row(0, named=True)
    # mm (fp32, CUDA cores): max(2e12 / (10e12 * 0.8) + 10us, 1e9 / (1e12 * 0.8) + 2us) + 5us = 0.250015
    # relu: max(1e6 / (10e12 * 0.5) + 10us, 2e9 / 0.8e12 + 2us) + 5us = 0.002502 + 0.000005 = 0.002507
    # conv backward (fp16 tensor cores, 2 kernels): max(1e12 / (100e12 * 0.5) + 2 * 10us,
    #     1e8 / 0.8e12 + 2 * 2us) + 2 * 5us = 0.02002 + 0.00001 = 0.02003
    assert out["compute_bound_s"] == pytest.approx(0.250015 + 0.02003)
    assert out["memory_bound_s"] == pytest.approx(0.002507)
    assert out["host_s"] == pytest.approx(0.001)
    assert out["step_s"] == pytest.approx(0.270045 + 0.002507 + 0.001)
    assert out["forward_s"] == pytest.approx(0.250015 + 0.002507) and out["backward_s"] == pytest.approx(0.02003)
    assert out["launch_s"] == pytest.approx(4 * 5e-6) and out["kernels"] == 4
    assert out["samples_per_s"] == pytest.approx(64 / 0.273552)


def test_fused_attention_kernels_are_priced_at_their_own_efficiency():
    """FlashAttention-2 / SDPA kernels at ``attention_eff``, FlashAttention v1 at ``attention_v1_eff``
    (half of v2 where not given), a GEMM at ``tensor_gemm_eff``: the same FLOPs, three times."""
    ops = pl.DataFrame({
        "phase": ["forward"] * 4, "dtype": ["float16"] * 4, "flops": [1e12] * 4, "total_bytes": [1e6] * 4,
        "op": ["aten.mm", "ddlscope.flash_attention", "aten._scaled_dot_product_flash_attention",
               "ddlscope.flash_attention_v1"],
        "class_by_type": ["compute_bound"] * 4,
    })
    eff = EFF.model_copy(update={"attention_eff": 0.4})
    each = [predict_single_gpu([SingleGpuCase(ops[i:i + 1], _gpu(), "fp16", 1)], eff)["compute_bound_s"][0]
            for i in range(4)]
    # 1e12 / (100e12 x eff) + 10 us fill + 5 us launch
    assert each == pytest.approx([0.02 + 15e-6, 0.025 + 15e-6, 0.025 + 15e-6, 0.05 + 15e-6])
    given = eff.model_copy(update={"attention_v1_eff": 0.25})
    v1 = predict_single_gpu([SingleGpuCase(ops[3:4], _gpu(), "fp16", 1)], given)["compute_bound_s"][0]
    assert v1 == pytest.approx(0.04 + 15e-6)
    # without attention_eff the fused kernels are priced as a GEMM (the generations with no measurement)
    plain = [predict_single_gpu([SingleGpuCase(ops[i:i + 1], _gpu(), "fp16", 1)], EFF)["compute_bound_s"][0]
             for i in (1, 3)]
    assert plain == pytest.approx([0.02 + 15e-6, 0.04 + 15e-6])
    line = predict_single_gpu([SingleGpuCase(ops, _gpu(), "fp16", 1)], given)["compute_efficiency_source"][0]
    assert "attention 0.4 (v1 0.25)" in line


def test_nchw_tensor_core_convolutions_pay_layout_transposes():
    nhwc = predict_single_gpu([SingleGpuCase(_ops(), _gpu(), "fp16", 1, conv_layout="nhwc")], EFF).row(0, named=True)
    nchw = predict_single_gpu([SingleGpuCase(_ops(), _gpu(), "fp16", 1)], EFF).row(0, named=True)
    # the fp16 conv backward (2 kernels) on tensor cores, NCHW: 2 x its 1e8 bytes / (1e12 * 0.8)
    # + 2 x 2 transpose kernels x (2 us fill + 5 us launch) = 0.00025 + 0.000028
    assert nchw["transpose_s"] == pytest.approx(0.000278) and nhwc["transpose_s"] == 0.0
    assert nchw["memory_bound_s"] - nhwc["memory_bound_s"] == pytest.approx(0.000278)
    assert nchw["kernels"] == nhwc["kernels"] + 4
    # no tensor cores for it (a P100-like part): cuDNN's CUDA-core kernels take NCHW, no transposes
    p100 = predict_single_gpu([SingleGpuCase(_ops(), _gpu((), fp16=20.0), "fp16", 1)], EFF)
    assert p100["transpose_s"][0] == 0.0
    with pytest.raises(ValueError, match="conv_layout: expected nchw or nhwc"):
        predict_single_gpu([SingleGpuCase(_ops(), _gpu(), "fp16", 1, conv_layout="chwn")], EFF)


def test_tensor_cores_only_where_the_gpu_has_them_for_that_precision():
    # tf32 on a GPU with TF32 tensor cores (peak 50): mm = 2e12 / (50e12 * 0.5) + 10us + 5us = 0.080015
    with_tf32 = predict_single_gpu([SingleGpuCase(_ops(), _gpu(("tf32", "fp16"), tf32=50.0), "tf32", 1)], EFF)
    assert with_tf32["compute_bound_s"][0] == pytest.approx(0.080015 + 0.02003)
    # a separate TF32 efficiency (0.25) prices the TF32 mm alone: 2e12 / (50e12 * 0.25) + 15us = 0.160015
    own = predict_single_gpu([SingleGpuCase(_ops(), _gpu(("tf32", "fp16"), tf32=50.0), "tf32", 1)],
                             EFF.model_copy(update={"tf32_gemm_eff": 0.25}))
    assert own["compute_bound_s"][0] == pytest.approx(0.160015 + 0.02003)
    # the same GPU at fp32: the mm stays on the CUDA cores (0.250015)
    fp32 = predict_single_gpu([SingleGpuCase(_ops(), _gpu(("tf32", "fp16"), tf32=50.0), "fp32", 1)], EFF)
    assert fp32["compute_bound_s"][0] == pytest.approx(0.250015 + 0.02003)
    # no tensor cores (a P100-like part, FP16 at 20 TFLOPS on CUDA cores): the conv backward takes
    # cuda_gemm_eff: 1e12 / (20e12 * 0.8) + 2 * 10us + 2 * 5us = 0.0625 + 0.00003
    p100 = predict_single_gpu([SingleGpuCase(_ops(), _gpu((), fp16=20.0), "fp16", 1)], EFF)
    assert p100["compute_bound_s"][0] == pytest.approx(0.250015 + 0.06253)


def test_step_time_has_a_floor_that_does_not_scale_with_the_batch():
    # the totals model (before): half the work takes exactly half the time; priced: the host cost,
    # fills and launches stay, so half the batch takes more than half the step
    full = predict_single_gpu([SingleGpuCase(_ops(1.0), _gpu(), "fp32", 64, conv_layout="nhwc")], EFF)["step_s"][0]
    half = predict_single_gpu([SingleGpuCase(_ops(0.5), _gpu(), "fp32", 32, conv_layout="nhwc")], EFF)["step_s"][0]
    # fixed part: host 1 ms + mm fill+launch 15us + relu fill+launch 7us + conv 2 x (10 + 5) us = 0.001052
    assert half == pytest.approx((full - 0.001052) / 2 + 0.001052)


def test_catalog_defaults_are_used_and_named_without_an_override():
    cat = builtin_catalog()
    out = predict_single_gpu([SingleGpuCase(_ops(), "V100", "fp16", 8), SingleGpuCase(_ops(), "A100", "fp16", 8)])
    volta, ampere = cat.compute_efficiency["volta"], cat.compute_efficiency["ampere"]
    # the conv backward on V100 tensor cores: 1e12 / (125e12 * held * tensor_gemm_eff) + 2 fills + 2 launches,
    # held = the clock the 300 W board sustains under tensor load: 2.38 W x 80 SMs x 1.53 GHz = 291 W needed,
    # so it holds its boost clock (no max_clock_mhz: no clock above boost)
    held = min(1.0, (300 / (2.38 * 80 * 1.53)) ** (1 / 3))
    assert held == 1.0 and cat.gpu("V100").sustained_tensor_fraction() == pytest.approx(held)
    conv = (1e12 / (125e12 * held * volta.tensor_gemm_eff) + 2 * volta.compute_fill_us * 1e-6
            + 2 * volta.kernel_launch_us * 1e-6)
    mm = 2e12 / (15.7e12 * volta.cuda_gemm_eff) + volta.compute_fill_us * 1e-6 + volta.kernel_launch_us * 1e-6
    assert out["compute_bound_s"][0] == pytest.approx(mm + conv)
    assert out["generation"].to_list() == ["volta", "ampere"]
    assert out["compute_efficiency_source"][0].startswith("catalog default for volta (V100-SXM2-16GB)")
    assert out["host_s"][1] == pytest.approx(ampere.step_overhead_us * 1e-6)


def test_an_override_per_generation_is_used_and_said():
    fitted = builtin_catalog().compute_efficiency["volta"].with_values({"memory_eff": 0.5}, "fitted on rows a, b")
    out = predict_single_gpu([SingleGpuCase(_ops(), "V100", "fp32", 8, conv_layout="nhwc"),
                              SingleGpuCase(_ops(), "A100", "fp32", 8)], {"volta": fitted})
    assert "memory_eff overridden (fitted on rows a, b)" in out["compute_efficiency_source"][0]
    assert out["compute_efficiency_source"][1].startswith("catalog default for ampere")
    # relu on V100 at memory_eff 0.5: 2e9 / (900e9 * 0.5) + fill + launch
    d = builtin_catalog().compute_efficiency["volta"]
    assert out["memory_bound_s"][0] == pytest.approx(2e9 / 450e9 + (d.memory_fill_us + d.kernel_launch_us) * 1e-6)


def test_bad_cases_name_the_case_and_field():
    with pytest.raises(ValueError, match=r"case 0 \(r1\): precision"):
        predict_single_gpu([SingleGpuCase(_ops(), "V100", "fp8", 8, label="r1")])
    with pytest.raises(ValueError, match=r"case 0: op table lacks column\(s\) \['class_by_type'\]"):
        predict_single_gpu([SingleGpuCase(_ops().drop("class_by_type"), "V100", "fp32", 8)])


def _job(system_gpu: str = "V100-SXM2-16GB"):
    cat = builtin_catalog()
    w = Workload(name="toy", batch_size=64, precision="fp32", compute_bound_flops=3e12, memory_bound_bytes=2.1e9,
                 memory_bound_flops=1e6)
    return w, Architecture(kind="1w1g"), cat.system("pai-v100-nvlink-8", gpu=system_gpu)


def test_jobs_priced_once_per_triple_and_breakdown_uses_the_prices():
    w, a, s = _job()
    jobs = jobs_frame([job_row(w, a, s, job_id=i) for i in range(3)])
    priced = price_jobs(jobs, {"toy": _ops()})
    expect = predict_single_gpu([SingleGpuCase(_ops(), "V100", "fp32", 64)]).row(0, named=True)
    out = breakdown(priced)
    assert out["compute_bound_s"].to_list() == pytest.approx([expect["compute_bound_s"]] * 3)
    assert out["host_s"].to_list() == pytest.approx([expect["host_s"]] * 3)
    # step = data I/O + compute + memory + host (1w1g: no communication); the shares sum to 1
    row = out.row(0, named=True)
    assert row["step_s"] == pytest.approx(row["data_io_s"] + expect["step_s"])
    shares = sum(row[f"share_{k}"] for k in ("data_io", "compute_bound", "memory_bound", "pcie", "nvlink", "network"))
    assert shares + row["share_host"] == pytest.approx(1.0)


def test_a_row_whose_gpu_changed_after_pricing_falls_back_to_the_totals_path():
    w, a, s = _job()
    priced = price_jobs(jobs_frame([job_row(w, a, s)]), {"toy": _ops()})
    swapped = priced.with_columns(gpu=pl.lit("A100-SXM4-40GB"))
    out = breakdown(swapped).row(0, named=True)
    # totals: 3e12 / (15.7e12 * 0.6) on the (unchanged) peak columns; no host cost
    assert out["compute_bound_s"] == pytest.approx(3e12 / (15.7e12 * 0.6)) and out["host_s"] == 0.0


def test_predict_with_ops_prices_and_says_where_the_efficiencies_come_from():
    w, a, s = _job()
    row = predict(w, a, s, ops=_ops()).row(0, named=True)
    assert row["compute_efficiency_source"].startswith("catalog default for volta")
    plain = predict(w, a, s).row(0, named=True)  # no op table: the totals path as before
    assert plain["compute_bound_s"] == pytest.approx(3e12 / (15.7e12 * 0.6)) and plain["host_s"] == 0.0
    assert "compute_efficiency_source" not in plain


def test_cli_predict_with_a_model_prices_op_by_op_and_says_so():
    from typer.testing import CliRunner

    from ddlscope.cli.main import app

    res = CliRunner().invoke(app, ["predict", "--model", "resnet18_cifar", "-b", "8", "-a", "1w1g", "-w", "1",
                                   "--gpu", "T4"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "compute priced: op by op on T4; efficiencies: catalog default for turing (T4)" in text
    res = CliRunner().invoke(app, ["predict"])
    assert "from totals (no op table" in " ".join(res.output.split())
    res = CliRunner().invoke(app, ["catalog", "efficiencies", "--format", "json"])
    assert res.exit_code == 0 and '"generation": "volta"' in res.output.replace('":"', '": "')


def test_a_step_of_short_kernels_waits_for_the_host_to_issue_them():
    # 100 us of host dispatch per op, 3 ops: 300 us; the GPU needs ~60 us for these tiny kernels, so
    # step = step_overhead + ops x dispatch = 1000 + 300 us, and host_s holds everything but the GPU time
    eff = EFF.model_copy(update={"cpu_dispatch_us": 100.0})
    out = predict_single_gpu([SingleGpuCase(_ops(1e-9), _gpu(), "fp32", 1)], eff).row(0, named=True)
    assert out["ops"] == 3
    assert out["step_s"] == pytest.approx(0.0013)
    assert out["host_s"] == pytest.approx(0.0013 - out["compute_bound_s"] - out["memory_bound_s"])
    # the default 10 us per op is hidden behind the large kernels of _ops(): host = step_overhead only
    assert predict_single_gpu([SingleGpuCase(_ops(), _gpu(), "fp32", 1)], EFF)["host_s"][0] == pytest.approx(0.001)


def test_a_fit_with_scipy_recovers_a_known_parameter_through_predict_single_gpu():
    # "measurements" made by the model itself with memory_eff 0.6 on two batch sizes; a fit of
    # memory_eff from the catalog's 0.83 (volta) recovers 0.6, and the fit's note is in the output
    from scipy.optimize import minimize_scalar

    volta = builtin_catalog().compute_efficiency["volta"]
    cases = [SingleGpuCase(_ops(s), "V100", "fp32", b) for s, b in ((1.0, 64), (0.25, 16))]
    truth = predict_single_gpu(cases, {"volta": volta.with_values({"memory_eff": 0.6}, "truth")})["step_s"]

    def loss(x: float) -> float:
        pred = predict_single_gpu(cases, {"volta": volta.with_values({"memory_eff": x}, "fit")})["step_s"]
        return float(((pred / truth - 1) ** 2).sum())

    res = minimize_scalar(loss, bounds=(0.1, 1.0), method="bounded", options={"xatol": 1e-6})
    assert res.x == pytest.approx(0.6, abs=1e-4)
    fitted = volta.with_values({"memory_eff": res.x}, "fitted on 2 synthetic rows")
    out = predict_single_gpu(cases, {"volta": fitted})
    assert "memory_eff overridden (fitted on 2 synthetic rows)" in out["compute_efficiency_source"][0]


def _fp16_ops() -> pl.DataFrame:
    # the same step profiled under mixed precision: the GEMMs' results and the activations in FP16
    return _ops().with_columns(dtype=pl.lit("float16"), total_bytes=pl.col("total_bytes") // 2)


def test_whatif_with_op_tables_reprices_every_scenario_on_its_own_gpu_and_precision():
    from ddlscope.model.api import predict_whatif
    from ddlscope.specs.scenario import Scenario

    w, a, s = _job()
    cat = builtin_catalog()
    scenarios = [Scenario(name="a100", gpu="A100-SXM4-40GB"), Scenario(name="amp", precision="fp16")]
    out = predict_whatif(w, a, s, scenarios, ops={"fp32": _ops(), "fp16": _fp16_ops()})
    rows = {r["scenario"]: r for r in out.iter_rows(named=True)}
    # the baseline is predict with the same op table
    base = predict(w, a, s, ops=_ops()).row(0, named=True)
    assert rows["baseline"]["step_s"] == pytest.approx(base["step_s"], rel=1e-12)
    # the GPU swap re-prices every op on the A100 (ampere efficiencies), not the peak ratio
    a100 = predict_single_gpu([SingleGpuCase(_ops(), "A100-SXM4-40GB", "fp32", 64)], catalog=cat).row(0, named=True)
    assert rows["a100"]["compute_bound_s"] == pytest.approx(a100["compute_bound_s"], rel=1e-12)
    assert rows["a100"]["host_s"] == pytest.approx(a100["host_s"], rel=1e-12)
    assert rows["a100"]["compute_efficiency_source"].startswith("catalog default for ampere")
    # mixed precision prices the FP16 profile on the V100's tensor cores; memory-bound time from its bytes
    amp = predict_single_gpu([SingleGpuCase(_fp16_ops(), "V100", "fp16", 64)], catalog=cat).row(0, named=True)
    assert rows["amp"]["compute_bound_s"] == pytest.approx(amp["compute_bound_s"], rel=1e-12)
    assert rows["amp"]["speedup"] == pytest.approx(base["step_s"] / rows["amp"]["step_s"])
    # without the tables the same scenarios take the totals path (no host cost)
    plain = {r["scenario"]: r for r in predict_whatif(w, a, s, scenarios).iter_rows(named=True)}
    assert plain["a100"]["host_s"] == 0.0


def test_price_jobs_picks_the_table_of_the_rows_precision():
    w, a, s = _job()
    jobs = jobs_frame([job_row(w, a, s, job_id=0), job_row(w.model_copy(update={"precision": "fp16"}), a, s, job_id=1),
                       job_row(w.model_copy(update={"precision": "tf32"}), a, s, job_id=2)])
    priced = price_jobs(jobs, {("toy", "fp32"): _ops(), ("toy", "fp16"): _fp16_ops()})
    fp16 = predict_single_gpu([SingleGpuCase(_fp16_ops(), "V100", "fp16", 64)]).row(0, named=True)
    tf32 = predict_single_gpu([SingleGpuCase(_ops(), "V100", "tf32", 64)]).row(0, named=True)
    assert priced["priced_compute_bound_s"][1] == pytest.approx(fp16["compute_bound_s"])
    assert priced["priced_compute_bound_s"][2] == pytest.approx(tf32["compute_bound_s"])  # tf32 shares fp32's
    only16 = price_jobs(jobs, {("toy", "fp16"): _fp16_ops()})  # no fp32 table: those rows stay unpriced
    assert only16["priced_compute_bound_s"].null_count() == 2


def test_a_training_batch_norm_is_priced_at_its_passes_over_the_tensor():
    from ddlscope.model.compute import BATCH_NORM_PASSES

    ops = pl.DataFrame({"phase": ["forward", "backward", "forward"],
                        "op": ["aten.native_batch_norm", "aten.native_batch_norm_backward", "aten.relu"],
                        "dtype": ["float32"] * 3, "flops": [0.0, 0.0, 0.0],
                        "total_bytes": [int(8e8), int(12e8), int(8e8)],
                        "class_by_type": ["memory_bound"] * 3})
    out = predict_single_gpu([SingleGpuCase(ops, _gpu(), "fp32", 1)], EFF).row(0, named=True)
    # 0.8 GB counted x 3/2 (two reads + one write) and 1.2 GB x 5/3, the ReLU as counted; 1 TB/s x 0.8,
    # 2 us fill + 5 us launch each
    expect = (8e8 * 1.5 + 12e8 * 5 / 3 + 8e8) / 0.8e12 + 3 * 7e-6
    assert out["memory_bound_s"] == pytest.approx(expect)
    assert BATCH_NORM_PASSES["aten.native_batch_norm"] == 1.5


def test_batch_norm_passes_agree_with_the_shared_resnet_trace(shared_data):
    # param_dlrm/resnet_kineto.json.gz: FP32 ResNet-18 on an RTX 2080 Ti; per element of the same
    # tensors, BN kernels take 1.76x (forward) and 1.92x (backward) the time of the ReLU's, whose
    # passes are 2 and 3: 3.5 and 5.75 passes (the model prices 3 and 5)
    import gzip
    import json

    with gzip.open(shared_data / "param_dlrm" / "resnet_kineto.json.gz") as fh:
        events = json.load(fh)["traceEvents"]
    t = {"bn_fw": 0.0, "bn_bw": 0.0, "relu_fw": 0.0, "relu_bw": 0.0}
    for e in events:
        if e.get("cat") == "kernel":
            n = e["name"]
            key = ("bn_fw" if "bn_fw_tr_1C11" in n else "bn_bw" if "bn_bw_1C11" in n
                   else "relu_fw" if "launch_clamp_scalar" in n else "relu_bw" if "threshold_kernel" in n else None)
            if key:
                t[key] += e["dur"]
    relu = 64 * 112 * 112 + 4 * (64 * 56 * 56 + 128 * 28 * 28 + 256 * 14 * 14 + 512 * 7 * 7)
    bn = relu + 128 * 28 * 28 + 256 * 14 * 14 + 512 * 7 * 7
    forward = t["bn_fw"] / t["relu_fw"] * relu / bn * 2
    backward = t["bn_bw"] / t["relu_bw"] * relu / bn * 3
    assert forward == pytest.approx(3.53, abs=0.01) and backward == pytest.approx(5.75, abs=0.01)
    assert forward >= 3.0 and backward >= 5.0  # at least the two-pass algorithm's passes


def test_tensor_work_runs_at_the_clock_the_board_power_sustains():
    # the test GPU with 40 SMs at 1,500 MHz: 2.38 W x 40 x 1.5 = 142.8 W at boost under tensor load
    ample = _gpu().model_copy(update={"sm_count": 40, "boost_clock_mhz": 1500.0, "board_power_w": 160.0})
    capped = ample.model_copy(update={"board_power_w": 71.4})
    assert ample.sustained_tensor_fraction() == 1.0  # headroom, but no clock above boost without max_clock_mhz
    held = capped.sustained_tensor_fraction()
    assert held == pytest.approx(0.5 ** (1 / 3))  # 71.4 W / 142.8 W, cube root (P ~ f^3)
    # the fp16 convolution (tensor cores) slows by 1 / held; the fp32 mm and the relu (CUDA cores) do not
    case = lambda gpu: SingleGpuCase(_ops(), gpu, "fp32", 64, conv_layout="nhwc")  # noqa: E731
    a, b = (predict_single_gpu([case(g)], EFF).row(0, named=True) for g in (ample, capped))
    assert b["memory_bound_s"] == a["memory_bound_s"]
    conv = 1e12 / (100e12 * 0.5)  # 0.02 s at the datasheet peak; 2 x 10 us fill + 2 x 5 us launch on top
    assert b["compute_bound_s"] - a["compute_bound_s"] == pytest.approx(conv / held - conv)
    # the output says so where the case's precision runs on tensor cores (fp16 here; fp32 GEMMs run on
    # CUDA cores), and not for a board that holds its clock or has no tensor cores for the precision
    half = predict_single_gpu([SingleGpuCase(_ops(), capped, "fp16", 64)], EFF).row(0, named=True)
    assert "tensor cores at 0.794 of the boost clock (the 71.4 W board power limit" in half["compute_efficiency_source"]
    assert "boost clock" not in b["compute_efficiency_source"]
    assert "boost clock" not in a["compute_efficiency_source"]
    cuda_only = capped.model_copy(update={"tensor_core_precisions": ()})
    c = predict_single_gpu([SingleGpuCase(_ops(), cuda_only, "fp16", 64)], EFF).row(0, named=True)
    assert "boost clock" not in c["compute_efficiency_source"]
    # a board at half its die's tensor rate draws half the power: 77.7 W now holds the boost clock
    assert capped.model_copy(update={"tensor_rate_of_die": 0.5}).sustained_tensor_fraction() == 1.0
    # the power model's inputs: a board power without SMs or clock is an error, a boolean is not a number
    with pytest.raises(ValueError, match="board_power_w needs sm_count too"):
        GPUSpec(**{**capped.model_dump(), "sm_count": None})
    with pytest.raises(ValueError, match="valid number"):
        GPUSpec(**{**capped.model_dump(), "board_power_w": True})
    with pytest.raises(ValueError, match="less than or equal to 1"):
        GPUSpec(**{**capped.model_dump(), "tensor_rate_of_die": 2.0})


def test_a_board_with_power_headroom_boosts_up_to_its_max_clock():
    # max clock 1,800 MHz over a 1,500 MHz boost: a ceiling of 1.2; 142.8 W holds the boost
    gpu = _gpu().model_copy(update={"sm_count": 40, "boost_clock_mhz": 1500.0, "max_clock_mhz": 1800.0})
    # 400 W: the power allows (400 / 142.8) ** (1/3) = 1.409, the ceiling 1.2
    assert gpu.model_copy(update={"board_power_w": 400.0}).sustained_tensor_fraction() == pytest.approx(1.2)
    # 200 W: (200 / 142.8) ** (1/3) = 1.1188, below the ceiling
    fast = gpu.model_copy(update={"board_power_w": 200.0})
    assert fast.sustained_tensor_fraction() == pytest.approx((200 / 142.8) ** (1 / 3))
    assert fast.sustained_tensor_fraction() == pytest.approx(1.1188, abs=1e-4)
    # no board power: the datasheet peak, whatever the max clock
    assert gpu.sustained_tensor_fraction() == 1.0
    # the fp16 convolution runs faster by the same factor; the output says why
    row = predict_single_gpu([SingleGpuCase(_ops(), fast, "fp16", 64)], EFF).row(0, named=True)
    assert ("tensor cores at 1.119 of the boost clock (the 200 W board power leaves headroom above it, up to "
            "1800 MHz") in row["compute_efficiency_source"]
    # a max clock needs the boost clock and cannot be below it
    with pytest.raises(ValueError, match="max_clock_mhz needs boost_clock_mhz"):
        GPUSpec(**{**gpu.model_dump(), "boost_clock_mhz": None})
    with pytest.raises(ValueError, match=r"max_clock_mhz \(1400\) is below boost_clock_mhz \(1500\)"):
        GPUSpec(**{**gpu.model_dump(), "max_clock_mhz": 1400.0})


def test_catalog_board_power_sets_the_sustained_tensor_clock():
    cat = builtin_catalog()
    # A100 PCIe 40 GB: 250 W for 108 SMs at 1.41 GHz, 2.38 W per SM-GHz needed: (250 / 362.426) ** (1/3)
    assert cat.gpu("A100-PCIE-40GB").sustained_tensor_fraction() == pytest.approx((250 / 362.4264) ** (1 / 3))
    assert cat.gpu("A100-PCIE-40GB").sustained_tensor_fraction() == pytest.approx(0.8836, abs=1e-4)
    # T4: 70 W for 40 SMs at 1.59 GHz -> 0.773 of 1,590 MHz (about 1.23 GHz under tensor load)
    assert cat.gpu("T4").sustained_tensor_fraction() == pytest.approx((70 / (2.38 * 40 * 1.59)) ** (1 / 3))
    # the same silicon at the same power holds the same clock: A100 SXM4 40 and 80 GB (400 W), at boost;
    # so does the H100 SXM5 (700 W for 132 SMs at 1.98 GHz: 622 W needed)
    for name in ("A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB"):
        assert cat.gpu(name).sustained_tensor_fraction() == 1.0
    # the GeForce boards run half their die's tensor rate, so draw half the power, and may boost past the
    # rated clock: the RTX 3090 (350 W where 2.38 x 82 x 1.695 x 0.5 = 165 W) reaches its 2,100 MHz
    # ceiling (2,100 / 1,695); the RTX 4090 runs at (450 / 383.8) ** (1/3) = 1.054; their workstation
    # siblings, at the full rate, hold 0.941 (RTX A6000, 300 W, 84 SMs, 1.8 GHz) and 0.708 (RTX 6000 Ada)
    assert cat.gpu("RTX-3090").sustained_tensor_fraction() == pytest.approx(2100 / 1695)
    rtx4090 = cat.gpu("RTX-4090").sustained_tensor_fraction()
    assert rtx4090 == pytest.approx((450 / (2.38 * 128 * 2.52 * 0.5)) ** (1 / 3))
    assert cat.gpu("RTX-4090").sustained_tensor_fraction() == pytest.approx(1.054, abs=1e-3)
    assert cat.gpu("RTX-A6000").sustained_tensor_fraction() == pytest.approx((300 / (2.38 * 84 * 1.8)) ** (1 / 3))
    assert cat.gpu("RTX-6000-Ada").sustained_tensor_fraction() == pytest.approx(0.708, abs=1e-3)
    # no figure, no derate: GH200 (a module's power, CPU included) and MI300X (not in the fit)
    assert cat.gpu("GH200-96GB").board_power_w is None and cat.gpu("GH200-96GB").sustained_tensor_fraction() == 1.0
    assert cat.gpu("MI300X").sustained_tensor_fraction() == 1.0



def test_price_jobs_gives_the_priced_backward_share_and_the_schedule_uses_it():
    w, a, s = _job()
    priced = price_jobs(jobs_frame([job_row(w, a, s, job_id=0)]), {"toy": _ops()})
    one = predict_single_gpu([SingleGpuCase(_ops(), "V100", "fp32", 64)]).row(0, named=True)
    share = one["backward_s"] / (one["compute_bound_s"] + one["memory_bound_s"])
    assert 0 < share < 1
    assert priced["priced_backward_fraction"][0] == pytest.approx(share, rel=1e-12)
    # a data-parallel job over 4 servers, so that communication outlasts part of the backward
    arch = Architecture(kind="allreduce_cluster", num_workers=4, num_servers=4)
    jobs = price_jobs(jobs_frame([job_row(w.model_copy(update={"dense_param_bytes": 4e8}), arch, s, job_id=0)]),
                      {"toy": _ops()})
    got = breakdown(jobs).row(0, named=True)
    # the same row with the share given as backward_fraction (and no priced share) prices alike
    same = breakdown(jobs.with_columns(backward_fraction=pl.lit(share),
                                       priced_backward_fraction=pl.lit(None, pl.Float64)))
    assert got["exposed_comm_s"] == pytest.approx(same["exposed_comm_s"][0], rel=1e-12)
    # without it, the default 2/3 of the compute: a different exposure
    default = breakdown(jobs.drop("priced_backward_fraction")).row(0, named=True)
    assert got["comm_s"] > 0 and got["exposed_comm_s"] != pytest.approx(default["exposed_comm_s"], rel=1e-6)
    # a scenario that swaps the GPU without re-pricing keeps the default share too
    swapped = breakdown(jobs.with_columns(gpu=pl.lit("A100-SXM4-40GB"))).row(0, named=True)
    base = breakdown(jobs.with_columns(gpu=pl.lit("A100-SXM4-40GB")).drop("priced_backward_fraction")).row(
        0, named=True)
    assert swapped["exposed_comm_s"] == pytest.approx(base["exposed_comm_s"], rel=1e-12)


# -- the optimizer step as PyTorch launches it on a GPU (foreach / for_loop) ---------------------------
def test_foreach_packing_reproduces_the_launches_of_the_shared_resnet50_traces():
    """The hta_traces ResNet-50 runs (V100 ``ns_resolution_trace``, A100 ``nccl_parser_config``) step SGD
    with momentum as three multi-tensor ops over the 161 parameters, each in three launches: 180, 320
    and 8 thread blocks for ``_foreach_mul_`` (one list), 71, 155 and 282 for ``_foreach_add_`` (two),
    read from the traces' kernel grids. The packing over the zoo model's parameters gives the same."""
    from ddlscope.model.compute import foreach_launch_blocks
    from ddlscope.profile import profile_model

    params = profile_model("resnet50", batch_size=2, image_size=32).params
    numels = params.filter(pl.col("kind") != "frozen")["numel"].to_list()
    assert len(numels) == 161 and sum(-(-n // 65_536) for n in numels) == 508
    assert foreach_launch_blocks(numels, 1) == [180, 320, 8]
    assert foreach_launch_blocks(numels, 2) == [71, 155, 282]


def test_foreach_packing_by_hand():
    from ddlscope.model.compute import foreach_launch_blocks

    # one list holds 110 tensors a launch: 111 one-chunk tensors -> 110 + 1
    assert foreach_launch_blocks([10] * 111, 1) == [110, 1]
    # 320 blocks a launch; a tensor cut there goes on in the next: 700 chunks -> 320, 320, 60
    assert foreach_launch_blocks([700 * 65_536], 2) == [320, 320, 60]
    # empty tensors are skipped; five or more lists take 30 tensors a launch
    assert foreach_launch_blocks([0, 1, 0], 1) == [1] and foreach_launch_blocks([1] * 31, 7) == [30, 1]
    assert foreach_launch_blocks([], 1) == []
    assert foreach_launch_blocks((n for n in (1, 2)), 1) == [2]  # an iterator is read once
    # 2^44 elements (the bound): 2^28 chunks, 838,861 launches, counted without a loop per launch
    assert len(foreach_launch_blocks([1 << 44], 1)) == -(-(1 << 28) // 320)
    with pytest.raises(ValueError, match=r"lists: expected an integer >= 1, got 0"):
        foreach_launch_blocks([1], 0)
    for bad in ([2**62], [1.5], [-1]):
        with pytest.raises(ValueError, match=r"numels\[0\]: expected an integer from 0 to"):
            foreach_launch_blocks(bad, 1)


def _sgd_step(numels: list[int]) -> pl.DataFrame:
    """A traced for-loop SGD step (momentum, weight decay) over FP32 parameters of ``numels``:
    per parameter ``add`` (grad + wd x param: reads 2, a new result), ``mul_`` (the buffer, 1), ``add_``
    (buffer += grad, 2), ``add_`` (param -= lr x buffer, 2), as the profiler records it."""
    rows = []
    for n in numels:
        for op, reads in (("aten.add", 2), ("aten.mul_", 1), ("aten.add_", 2), ("aten.add_", 2)):
            rows.append({"phase": "optimizer", "op": op, "dtype": "float32", "shape": f"{n}", "flops": float(n),
                         "read_bytes": 4 * n * reads, "write_bytes": 4 * n, "total_bytes": 4 * n * (reads + 1),
                         "class_by_type": "memory_bound"})
    return pl.DataFrame(rows)


def test_foreach_regroups_the_optimizer_rows_into_their_launches():
    from ddlscope.model.compute import op_features

    ops = _sgd_step([1000] * 100)  # 100 one-chunk parameters
    loop = op_features(ops, "for_loop")
    each = op_features(ops)  # foreach, the default
    assert loop["kernels"].sum() == 400 and loop["dispatches"].sum() == 400
    # add (3 lists, 48 a launch): 3 launches; mul_ (1 list, 110): 1; the two add_ (2 lists, 64) as one
    # family of 200 tensors: 4
    assert each["kernels"].sum() == pytest.approx(8) and each["dispatches"].sum() == pytest.approx(8)
    assert each["bytes"].sum() == loop["bytes"].sum() and each["flops"].sum() == loop["flops"].sum()


def test_foreach_saves_the_fills_and_launch_gaps_of_a_kernel_per_parameter():
    ops = _sgd_step([1000] * 100)
    gpu = _gpu()
    loop, each = (predict_single_gpu([SingleGpuCase(ops, gpu, "fp32", 1, optimizer_kernels=k)], EFF).row(0, named=True)
                  for k in ("for_loop", "foreach"))
    # each kernel: max(flops / (10e12 x 0.5) + 10 us compute fill, bytes / (1e12 x 0.8) + 2 us memory fill)
    # + 5 us launch: the fills and the launch per kernel differ (15 us), the FLOPs and bytes do not
    assert loop["optimizer_s"] - each["optimizer_s"] == pytest.approx((400 - 8) * 15e-6)
    assert loop["ops"] == 400 and each["ops"] == pytest.approx(8)
    want = (r"case 0: optimizer_kernels: expected foreach \(multi-tensor, fused optimizers included\) or for_loop, "
            r"got 'fused'")
    with pytest.raises(ValueError, match=want):
        predict_single_gpu([SingleGpuCase(ops, gpu, "fp32", 1, optimizer_kernels="fused")])


def test_an_op_table_without_shapes_keeps_a_kernel_per_row():
    from ddlscope.model.compute import op_features

    assert op_features(_ops())["kernels"].to_list() == [1.0, 1.0, 2.0]
    assert op_features(_sgd_step([10]).drop("shape"))["kernels"].sum() == 4


def test_price_ops_gives_the_rows_predict_single_gpu_sums():
    from ddlscope.model.compute import price_ops

    cases = [SingleGpuCase(_ops(), _gpu(), "fp32", 64, label="a"), SingleGpuCase(_sgd_step([1000] * 10), _gpu(),
                                                                                 "fp32", 1, label="b")]
    per = price_ops(cases, EFF)
    assert per.height == 3 + 40 and per["case"].unique().sort().to_list() == [0, 1]
    assert per.filter(pl.col("case") == 0)["op"].to_list() == ["aten.mm", "aten.relu", "aten.convolution_backward"]
    whole = predict_single_gpu(cases, EFF)
    sums = per.group_by("case").agg(gpu=(pl.col("op_s") + pl.col("transpose_s")).sum()).sort("case")["gpu"]
    assert sums.to_list() == pytest.approx((whole["compute_bound_s"] + whole["memory_bound_s"]).to_list())
    # the mm row by hand (the first test): 0.250015 s
    assert per["op_s"][0] == pytest.approx(0.250015)


def test_a_misaligned_tensor_core_gemm_runs_at_the_per_sm_rate():
    """A GEMM the op table marks ``gemm_aligned`` false runs at ``min(peak x eff, 410 FLOP/SM/cycle x SMs
    x boost clock x held fraction)`` on tensor cores; aligned, unmarked or CUDA-core GEMMs do not."""
    from ddlscope.model.compute import MISALIGNED_GEMM_FLOP_PER_SM_CYCLE

    assert MISALIGNED_GEMM_FLOP_PER_SM_CYCLE == 410.0
    # 100 SMs at 1,000 MHz, no board power (held fraction 1): 410 x 100 x 1e9 = 41 TFLOP/s, below
    # the tensor-core rate 100e12 x 0.5 = 50 TFLOP/s
    gpu = _gpu().model_copy(update={"sm_count": 100, "boost_clock_mhz": 1000.0})
    ops = pl.DataFrame({"phase": ["forward"] * 3, "op": ["aten.mm"] * 3, "dtype": ["float16"] * 3,
                        "flops": [1e12] * 3, "total_bytes": [1e6] * 3, "class_by_type": ["compute_bound"] * 3,
                        "gemm_aligned": [False, True, None]})

    def seconds(o: pl.DataFrame, g: GPUSpec = gpu, precision: str = "fp16") -> float:
        return predict_single_gpu([SingleGpuCase(o, g, precision, 1)], EFF)["compute_bound_s"][0]

    # 1e12 / 41e12 + 10 us fill + 5 us launch; aligned and null: 1e12 / 50e12 + 15 us
    assert seconds(ops[0:1]) == pytest.approx(1 / 41 + 15e-6, rel=1e-12)
    assert seconds(ops[1:2]) == seconds(ops[2:3]) == pytest.approx(0.02 + 15e-6, rel=1e-12)
    assert seconds(ops.drop("gemm_aligned")[0:1]) == pytest.approx(0.02 + 15e-6, rel=1e-12)
    # a GPU whose own rate is below the cap (200 SMs: 82 TFLOP/s > 50) is not slowed
    wide = gpu.model_copy(update={"sm_count": 200})
    assert seconds(ops[0:1], wide) == pytest.approx(0.02 + 15e-6, rel=1e-12)
    # on CUDA cores (no FP16 tensor cores: 20 TFLOP/s x 0.8) the cap does not apply
    cuda = _gpu((), fp16=20.0).model_copy(update={"sm_count": 10, "boost_clock_mhz": 1000.0})
    assert seconds(ops[0:1], cuda) == pytest.approx(1 / 16 + 15e-6, rel=1e-12)
    # without sm_count or boost clock in the catalog entry there is nothing to cap with, and the
    # output says so where a misaligned GEMM ran on tensor cores uncapped (the catalog's A10G and B200),
    # by the op's dtype: FP16 GEMMs in an "fp32" case too; not where every GEMM is aligned
    assert seconds(ops[0:1], _gpu()) == pytest.approx(0.02 + 15e-6, rel=1e-12)

    def source(g, q: str = "fp16", o: pl.DataFrame = ops) -> str:
        return predict_single_gpu([SingleGpuCase(o, g, q, 1)], EFF)["compute_efficiency_source"][0]

    uncapped = "misaligned tensor-core GEMMs priced without their cap"
    assert uncapped in source(_gpu()) and uncapped in source("A10G") and uncapped in source("B200")
    assert uncapped in source("A10G", "fp32")  # the GEMMs are float16: tensor cores whatever the case says
    assert uncapped not in source("A10G", o=ops[1:3]) and uncapped not in source("A10G", "fp32", ops[0:1].with_columns(
        dtype=pl.lit("float32")))  # aligned only; an FP32 GEMM of an fp32 case runs on CUDA cores
    assert uncapped not in source(gpu) and uncapped not in source("A10") and uncapped not in source(cuda)

    # a gemm_aligned column read back as text is refused, naming the column
    with pytest.raises(ValueError, match="gemm_aligned must be Boolean"):
        seconds(ops[0:1].with_columns(pl.col("gemm_aligned").cast(pl.String)))
