"""The GPU catalog of issue 14: generations, tensor-core precisions, reported memory, the names of
the Lambda benchmark tables, and the per-generation compute efficiencies."""

from __future__ import annotations

import csv

import pytest

from ddlscope.model.jobs import gpu_columns
from ddlscope.specs.catalog import CatalogError, builtin_catalog, load_catalog
from ddlscope.specs.efficiency import FITTABLE, ComputeEfficiency
from ddlscope.specs.system import GENERATIONS

WANTED = ["K80", "M60", "P40", "P100-PCIE-16GB", "P100-SXM2-16GB", "T4", "A10", "A10G", "A40", "Quadro RTX 6000",
          "Quadro RTX 8000", "RTX A6000", "RTX 3090", "RTX 4090", "RTX 6000 Ada", "L4", "L40S", "A100-PCIE-40GB",
          "A100-PCIE-80GB", "A100-SXM4-40GB", "A100-SXM4-80GB", "H100 PCIe", "H100-SXM5-80GB", "H200", "GH200", "B200",
          "MI250X", "MI300X"]


def test_every_gpu_users_run_is_in_the_catalog_with_a_generation_and_sources():
    cat = builtin_catalog()
    for name in WANTED:
        g = cat.gpu(name)
        assert g.generation in GENERATIONS, name
        assert g.tensor_core_precisions is not None and g.source and g.memory_mib and g.memory_source, name


def test_tensor_core_precisions_by_generation():
    cat = builtin_catalog()
    for name in ("K80", "M60", "P40", "P100-PCIE-16GB", "P100-SXM2-16GB"):
        assert cat.gpu(name).tensor_core_precisions == (), name
        assert not cat.gpu(name).has_tensor_cores("fp16")
    for name in ("V100", "T4", "RTX-2080-Ti", "Quadro RTX 8000"):
        assert cat.gpu(name).tensor_core_precisions == ("fp16",), name
        assert not cat.gpu(name).has_tensor_cores("tf32") and not cat.gpu(name).has_tensor_cores("bf16")
    for name in ("A10", "A100", "RTX 4090", "H100", "B200"):
        assert set(cat.gpu(name).tensor_core_precisions) == {"tf32", "fp16", "bf16"}, name
    assert not cat.gpu("A100").has_tensor_cores("fp32")


def test_reported_memory_is_mib_as_nvidia_smi_shows():
    v100 = builtin_catalog().gpu("V100-SXM2-16GB")
    assert v100.memory_mib == 16160
    # 16160 MiB x 1,048,576 B/MiB = 16,944,988,160 bytes (not 16e9)
    assert gpu_columns(v100)["gpu_memory_bytes"] == 16_944_988_160
    assert builtin_catalog().gpu("A100-SXM4-40GB").memory_bytes == 40536 * 2**20


def test_existing_names_and_aliases_still_resolve():
    cat = builtin_catalog()
    for name, canon in [("V100", "V100-SXM2-16GB"), ("V100M32", "V100-SXM2-32GB"), ("Tesla T4", "T4"),
                        ("A100-PG509-200", "A100-SXM4-40GB"), ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"),
                        ("H200", "H200-SXM-141GB"), ("P100", "P100-PCIE-16GB"), ("A100 80GB", "A100-SXM4-80GB")]:
        assert cat.gpu(name).name == canon


def test_every_lambda_benchmark_gpu_name_resolves(shared_data):
    cat = builtin_catalog()
    for fname in ("pytorch-train-throughput-fp16.csv", "pytorch-train-throughput-fp32.csv"):
        with open(shared_data / "lambda_benchmarks" / fname) as f:
            rows = list(csv.DictReader(f))
        for r in rows:
            _gpu, count = cat.gpu_of_label(r["name_gpu"])
            assert count == int(float(r["num_gpu"])), r["name_gpu"]
    assert cat.gpu_of_label("LambdaCloud 4xV100 16GB") == (cat.gpu("V100-SXM2-16GB"), 4)
    assert cat.gpu_of_label("Dell 8x H100 80GB SXM5") == (cat.gpu("H100-SXM5-80GB"), 8)
    assert cat.gpu_of_label("LambdaCloud A100 40GB PCIe")[0].name == "A100-PCIE-40GB"
    assert cat.gpu_of_label("H100 80GB PCIe Gen5")[0].name == "H100-PCIE-80GB"
    with pytest.raises(CatalogError, match="unknown GPU 'Voodoo 5'"):
        cat.gpu_of_label("2x Voodoo 5")


def test_every_generation_has_compute_efficiencies_each_with_a_source():
    cat = builtin_catalog()
    for gen in (*GENERATIONS, "default"):
        eff = cat.compute_efficiency[gen]
        assert set(FITTABLE) <= set(eff.source) <= {*FITTABLE, "attention_eff", "attention_v1_eff"}, gen
        # a source for every value, inherited or own; the attention-kernel efficiencies where given
        for k in ("attention_eff", "attention_v1_eff"):
            assert (getattr(eff, k) is None) == (k not in eff.source), (gen, k)
    ampere, hopper = cat.compute_efficiency["ampere"], cat.compute_efficiency["hopper"]
    assert (ampere.fused_attention_eff, ampere.flash_v1_eff) == (0.615, 0.325)
    assert "FlashAttention-2" in ampere.source["attention_eff"] and "25-40 %" in ampere.source["attention_v1_eff"]
    assert (hopper.fused_attention_eff, hopper.flash_v1_eff) == (0.35, 0.175)  # v1: half of v2 where not given
    assert cat.compute_efficiency["volta"].fused_attention_eff == cat.compute_efficiency["volta"].tensor_gemm_eff
    volta = cat.compute_efficiency["volta"]
    assert volta.memory_eff == 0.83 and "1804.06826" in volta.source["memory_eff"]
    # a field volta does not set is the default's, with the default's source
    assert volta.step_overhead_us == cat.compute_efficiency["default"].step_overhead_us
    assert volta.source["step_overhead_us"] == cat.compute_efficiency["default"].source["step_overhead_us"]
    assert cat.efficiency_for(cat.gpu("V100")) is volta


def test_a_user_file_overrides_one_efficiency_field_and_says_where_from(tmp_path):
    f = tmp_path / "eff.toml"
    f.write_text('[compute_efficiency."volta"]\nmemory_eff = 0.7\nsource = "my STREAM run"\n')
    cat = load_catalog(f)
    eff = cat.compute_efficiency["volta"]
    assert eff.memory_eff == 0.7 and eff.tensor_gemm_eff == 0.75
    assert eff.source["memory_eff"] == f"my STREAM run ({f})"
    assert cat.overrides == [f"compute_efficiency.volta (from {f})"]


def test_bad_efficiency_entries_name_the_file_and_field(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('[compute_efficiency."volta"]\nmemory_eff = 1.5\n')
    with pytest.raises(CatalogError, match=r'bad.toml: \[compute_efficiency."volta"\]: memory_eff'):
        load_catalog(f)
    f.write_text('[compute_efficiency."fermi"]\nmemory_eff = 0.5\n')
    with pytest.raises(CatalogError, match="unknown generation"):
        load_catalog(f)


def test_with_values_replaces_and_records_the_fit():
    eff = ComputeEfficiency(generation="ampere").with_values({"memory_eff": 0.9}, "fitted on rows a, b")
    assert eff.memory_eff == 0.9 and eff.source["memory_eff"] == "fitted on rows a, b"
    with pytest.raises(ValueError, match="unknown parameter"):
        eff.with_values({"peak": 1.0}, "x")


# FP32 lanes per SM and dense FP16 tensor FLOPs per SM per clock (FP32 accumulate) by chip family
# (whitepapers): Kepler GK110 192 lanes per SMX; Maxwell GM200 and Pascal GP10x 128; Volta, Turing
# and GA100 64; GA10x and AD10x 128. Tensor: Volta/Turing 1,024 (GeForce Turing 512), GA100 2,048,
# GA10x/AD10x professional 1,024 (GeForce and the L40: 512)
PER_SM = {
    "K40": (192, None), "GTX-TITAN-X": (128, None), "GTX-1080": (128, None), "TITAN-X-Pascal": (128, None),
    "GTX-1080-Ti": (128, None), "TITAN-Xp": (128, None), "Quadro-P4000": (128, None), "P4": (128, None),
    "V100S-PCIE-32GB": (64, 1024), "TITAN-RTX": (64, 1024), "RTX-2070": (64, 512), "RTX-2080": (64, 512),
    "RTX-3080": (128, 512), "RTX-A4000": (128, 1024), "RTX-A5000": (128, 1024), "A30": (64, 2048),
    "RTX-4080": (128, 512), "L40": (128, 512),  # L40 datasheet: 181 dense FP16/FP32-accumulate (L40S: 362)
    "TITAN-V": (64, None),  # NVIDIA quotes 110 TFLOPS tensor, below SMs x 1,024 x boost (119): not checked
}


@pytest.mark.parametrize("name", sorted(PER_SM))
def test_added_boards_peaks_are_their_sms_times_clock(name):
    # peak = SMs x FLOPs per SM per clock x boost clock, within 1.5 % (datasheets round)
    g = builtin_catalog().gpu(name)
    lanes, tensor = PER_SM[name]
    clock_hz = g.boost_clock_mhz * 1e6
    assert g.peak_tflops.fp32 * 1e12 == pytest.approx(g.sm_count * lanes * 2 * clock_hz, rel=0.015)
    if tensor is not None:
        assert g.peak_tflops.fp16 * 1e12 == pytest.approx(g.sm_count * tensor * clock_hz, rel=0.015)
        if g.has_tensor_cores("tf32"):
            assert g.peak_tflops.tf32 == pytest.approx(g.peak_tflops.fp16 / 2, rel=0.015)
    else:
        assert not g.has_tensor_cores("fp16") or name == "TITAN-V"
    assert g.generation in GENERATIONS and g.source
