"""`ddlscope predict` and `ddlscope whatif` as a user runs them."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ddlscope.cli.main import app

runner = CliRunner()


def test_whatif_default_example_runs_every_builtin_scenario():
    res = runner.invoke(app, ["whatif", "--format", "json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["scenario"] for r in rows][:2] == ["baseline", "ps-to-allreduce-nvlink"]
    assert len(rows) == 9
    base = rows[0]
    assert base["architecture"] == "ps_worker" and base["speedup"] == 1.0
    port = rows[1]
    assert port["architecture"] == "allreduce_local" and port["speedup"] > 1


def test_predict_table_and_csv():
    res = runner.invoke(app, ["predict", "-a", "allreduce_cluster", "-w", "32", "--nic", "ib-hdr"])
    assert res.exit_code == 0, res.output
    assert "allreduce_cluster: 32 GPU(s) on 4 server(s)" in res.output
    assert "pai-v100-nvlink-8[nic=ib-hdr]" in res.output
    res = runner.invoke(app, ["predict", "--format", "csv"])
    header = res.output.splitlines()[0].split(",")
    assert {"step_s", "share_network", "bottleneck"} <= set(header)


def test_predict_workload_file_and_inline_scenario(tmp_path):
    f = tmp_path / "w.toml"
    f.write_text('[workload]\nname = "tiny"\nbatch_size = 2\ncompute_bound_flops = 1e12\n'
                 'memory_bound_bytes = 1e9\ndense_param_bytes = 4e6\nnum_gradient_tensors = 2\n')
    res = runner.invoke(app, ["whatif", "--workload-file", str(f), "-a", "allreduce_local", "-w", "4",
                              "--scenario", "no-nvlink:nvlink=none", "--format", "json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert rows[1]["scenario"] == "no-nvlink" and rows[1]["nvlink_s"] == 0 and rows[1]["pcie_s"] > 0


def test_bad_input_is_one_clear_line_and_exit_2():
    res = runner.invoke(app, ["predict", "--gpu", "V200"])
    assert res.exit_code == 2
    assert "unknown GPU 'V200'" in res.output
    res = runner.invoke(app, ["predict", "-a", "allreduce_local", "-w", "16"])
    assert res.exit_code == 2 and "at most 8 GPUs per server" in res.output
    res = runner.invoke(app, ["predict", "-a", "ps_worker", "-w", "0"])
    assert res.exit_code == 2 and "num_workers" in res.output
    res = runner.invoke(app, ["predict", "--overlap", "sometimes"])
    assert res.exit_code == 2 and "overlap" in res.output
    # a negative batch size is one error, not followed by the negative demands it would scale to
    res = runner.invoke(app, ["predict", "--batch-size", "-1"])
    assert res.exit_code == 2 and "batch_size: expected a whole number >= 1, got -1" in res.output
    assert "compute_bound_flops" not in res.output
    # an inline scenario's unknown GPU names the scenario
    res = runner.invoke(app, ["whatif", "--scenario", "x:gpu=NOPE"])
    assert res.exit_code == 2 and "scenario x: gpu: unknown GPU 'NOPE'" in res.output


def test_catalog_lists_every_kind():
    for kind, expected in (("gpus", "H200-SXM-141GB"), ("links", "ib-ndr"), ("servers", "pai-v100-pcie-8"),
                           ("scenarios", "ps-to-allreduce-nvlink")):
        res = runner.invoke(app, ["catalog", kind, "--format", "json"])
        assert res.exit_code == 0, res.output
        assert expected in [r["name"] for r in json.loads(res.output)]
    res = runner.invoke(app, ["catalog", "widgets"])
    assert res.exit_code == 2 and "expected one of gpus, links, servers, scenarios" in res.output


def test_wrong_link_kind_message_is_one_short_line(tmp_path):
    res = runner.invoke(app, ["predict", "--nic", "nvlink4"])
    assert res.exit_code == 2
    assert "nic: expected an 'ethernet' or 'infiniband' link, got 'nvlink4'" in res.output
    assert "GPUSpec" not in res.output and len(res.output) < 200
    f = tmp_path / "s.toml"
    f.write_text('[system]\nserver = "dgx-a100"\n')
    res = runner.invoke(app, ["predict", "--system-file", str(f), "-s", "dgx-h100"])
    assert res.exit_code == 2 and "give the server and its overrides in the system file" in res.output


def test_rescaling_a_fixed_workload_warns_that_the_memory_fit_is_not_checked():
    from ddlscope.specs.examples import example_workload

    w = example_workload()
    assert w.peak_memory_bytes is not None  # the example carries a measured peak
    for command in ("predict", "whatif"):
        res = runner.invoke(app, [command, "-b", "100000"])
        assert res.exit_code == 0, res.output
        text = res.output.replace("\n", " ")
        assert "warning: the GPU memory fit is not checked" in text
        assert f"at batch size {w.batch_size}) is unknown at -b 100000" in text
        assert "use --model NAME -b 100000 to re-profile" in text
    for args in ([], ["-b", str(w.batch_size)]):  # not rescaled: the peak is known, no warning
        res = runner.invoke(app, ["predict", *args])
        assert res.exit_code == 0 and "memory fit is not checked" not in res.output


def test_predict_prices_the_flash_attention_release(shared_data):
    # MPT-125M (12 layers, hidden 768), 8 sequences of 2,048 tokens on one A100-SXM4-80GB (BF16 312 TFLOP/s):
    # the causal flash-attention forward is 4 b s^2 h / 2 = 5.154e10 FLOPs per layer, its backward 2.5x that;
    # compute-bound either way (58 us of memory time vs 268 us), so only the efficiency changes, Ampere's
    # attention_eff 0.615 (flash-attn 2) vs attention_v1_eff 0.325 (flash-attn 1); fills, launches and the
    # host term are the same
    args = ["predict", "--model", "mpt-125m", "-b", "8", "--architecture", "1w1g", "--system", "dgx-a100",
            "--format", "json"]
    rows = {}
    for version in ("1", "2", None):
        res = runner.invoke(app, args + (["--flash-attention-version", version] if version else []))
        assert res.exit_code == 0, res.output
        rows[version] = json.loads(res.output)[0]
    assert rows[None]["step_s"] == rows["2"]["step_s"]  # the default is flash-attn 2, as in `plan`
    attention_flops = 12 * (1 + 2.5) * 4 * 8 * 2048**2 * 768 / 2
    delta_s = attention_flops / 312e12 * (1 / 0.325 - 1 / 0.615)
    assert delta_s == pytest.approx(0.010066, rel=1e-4)
    assert rows["1"]["compute_bound_s"] - rows["2"]["compute_bound_s"] == pytest.approx(delta_s, rel=1e-9)
    assert rows["1"]["step_s"] - rows["2"]["step_s"] == pytest.approx(delta_s, rel=1e-9)
    assert rows["1"]["memory_bound_s"] == rows["2"]["memory_bound_s"] and rows["1"]["host_s"] == rows["2"]["host_s"]
    # a profiled (non-decoder) model or the example workload has no flash-attn release to choose
    bad = runner.invoke(app, ["predict", "--flash-attention-version", "1"])
    assert bad.exit_code != 0 and "--flash-attention-version: only with --model of a decoder LLM" in bad.output
    # whatif takes it too: its baseline is predict's
    res = runner.invoke(app, ["whatif", "--model", "mpt-125m", "-b", "8", "--architecture", "1w1g", "--system",
                              "dgx-a100", "--flash-attention-version", "1", "--scenario", "mixed-precision",
                              "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)[0]["step_s"] == pytest.approx(rows["1"]["step_s"], rel=1e-12)


def test_a_precision_without_tensor_cores_is_said():
    # a decoder config defaults to bf16; the V100 (the default server's GPU) has fp16 tensor cores
    # only, so bf16 runs at its FP32 peak, 15.7 TFLOP/s (catalog: V100-SXM2-16GB)
    res = runner.invoke(app, ["predict", "-m", "mpt-125m", "-a", "3d", "-w", "8", "-f", "json"])
    assert res.exit_code == 0, res.output
    assert ("warning: the V100-SXM2-16GB has no bf16 tensor cores: bf16 GEMMs are priced at its FP32 rate "
            "(15.7 TFLOP/s); its tensor cores take fp16") in " ".join(res.stderr.split())
    res = runner.invoke(app, ["predict", "-m", "mpt-125m", "-a", "3d", "-w", "8", "--gpu", "A100-SXM4-80GB",
                              "-f", "json"])
    assert res.exit_code == 0 and "tensor cores" not in res.stderr


def test_a_pipeline_with_fewer_microbatches_than_stages_is_said():
    # pp = 8 with 2 micro-batches: bubble (pp - 1) / M = 7 / 2 = 3.5 x the ideal step
    args = ["predict", "-m", "mpt-125m", "-a", "3d", "-w", "16", "--gpu", "A100-SXM4-80GB", "-f", "json"]
    res = runner.invoke(app, [*args, "--parallel", "tp=2,pp=8,microbatches=2"])
    assert res.exit_code == 0, res.output
    err = " ".join(res.stderr.split())
    assert "warning: pp=8 with 2 micro-batch(es) x 1 virtual stage(s): the pipeline bubble is 3.50 x" in err
    assert "microbatches=32" in err
    # as many micro-batches as stages (bubble 7/8 < 1): no warning; nor without a pipeline
    for parallel in ("tp=2,pp=8,microbatches=8", "tp=2,pp=1,microbatches=1"):
        res = runner.invoke(app, [*args, "--parallel", parallel])
        assert res.exit_code == 0 and "bubble" not in res.stderr, (parallel, res.output)


def test_the_title_names_the_gpu_an_alias_resolved_to():
    # "V100" is an alias of the V100-SXM2-16GB (catalog); the title says which GPU was priced
    res = runner.invoke(app, ["predict", "--gpu", "V100"])
    assert res.exit_code == 0, res.output
    assert "pai-v100-nvlink-8[gpu=V100-SXM2-16GB]" in res.output


def test_model_parallel_traffic_without_the_layer_shape_is_said():
    # the built-in ResNet-50 example has no num_layers / layer_activation_bytes: tp/pp traffic is 0 bytes
    res = runner.invoke(app, ["predict", "-a", "3d", "-w", "16", "--parallel", "tp=2,pp=2,microbatches=4",
                              "-f", "json"])
    assert res.exit_code == 0, res.output
    assert ("warning: tp=2, pp=2 on a workload without num_layers and layer_activation_bytes: its "
            "tensor/context/pipeline-parallel traffic is priced as 0 bytes") in " ".join(res.stderr.split())
    # a decoder config has its layer shape: no warning
    res = runner.invoke(app, ["predict", "-m", "mpt-125m", "-a", "3d", "-w", "16", "--gpu", "A100-SXM4-80GB",
                              "--parallel", "tp=2,pp=2,microbatches=4", "-f", "json"])
    assert res.exit_code == 0 and "priced as 0 bytes" not in res.stderr
