"""What-if scenarios: the PAI study's NIC-upgrade arithmetic, ports, and scenario scope."""

from __future__ import annotations

import polars as pl
import pytest

from ddlscope.model.api import predict, predict_whatif
from ddlscope.model.jobs import job_row, jobs_frame
from ddlscope.model.scenarios import whatif
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import Catalog
from ddlscope.specs.scenario import BUILTIN_SCENARIOS, Scenario, load_scenarios, resolve_scenarios
from ddlscope.specs.system import Efficiency
from ddlscope.specs.workload import Workload

ONES = Efficiency(compute=1, memory=1, pcie=1, nvlink=1, network=1, storage=1)


def zero_latency_catalog(entries: dict) -> Catalog:
    for link in entries["link"].values():
        link["latency_us"] = 0.0
    return Catalog(entries, origin="toy, zero latency")


def test_nic_4x_speedup_is_amdahl_with_network_share_062(toy_entries):
    """Overlap none, network share f = 0.62: a 4x faster NIC gives 1 / ((1 - f) + f / 4) = 1.869x.

    Job: ps_worker with 1 worker, 1 PS shard, no input. W = S = 0.31e9 bytes:
    network = 2 * max(W, W) / 1 GB/s = 0.62 s; PCIe = 2 * 1 * S / 10 GB/s = 0.062 s;
    compute-bound = 3.18e12 / 10e12 = 0.318 s; step = 0.62 + 0.062 + 0.318 = 1.0 s, f = 0.62.
    """
    cat = zero_latency_catalog(toy_entries)
    w = Workload(batch_size=1, compute_bound_flops=3.18e12, memory_bound_bytes=0.0,
                 dense_param_bytes=0.31e9, num_gradient_tensors=1)
    arch = Architecture(kind="ps_worker", num_workers=1, num_ps=1)
    base = predict(w, arch, cat.system("toy-server", efficiency=ONES), overlap="none").row(0, named=True)
    assert base["step_s"] == pytest.approx(1.0)
    assert base["share_network"] == pytest.approx(0.62)
    out = predict_whatif(w, arch, cat.system("toy-server", efficiency=ONES),
                         [Scenario(name="nic-4x", nic="toy-nic-4x")], overlap="none", catalog=cat)
    speedup = out.filter(pl.col("scenario") == "nic-4x")["speedup"].item()
    f = 0.62
    assert speedup == pytest.approx(1 / ((1 - f) + f / 4))
    assert speedup == pytest.approx(1.8692, abs=1e-4)


def test_port_to_allreduce_local_only_where_the_job_fits(toy_catalog):
    system = toy_catalog.system("toy-server", efficiency=ONES)
    w = Workload(batch_size=8, compute_bound_flops=1e12, memory_bound_bytes=1e9,
                 dense_param_bytes=100e6, num_gradient_tensors=10)
    jobs = jobs_frame([
        job_row(w, Architecture(kind="ps_worker", num_workers=4, num_ps=1), system, job_id=0),  # fits 4 GPUs
        job_row(w, Architecture(kind="ps_worker", num_workers=8, num_ps=2), system, job_id=1),  # 8 > 4
        job_row(w, Architecture(kind="1w1g"), system, job_id=2),  # not a PS job
    ])
    port = Scenario(name="port", only_architectures=("ps_worker",), architecture="allreduce_local")
    out = whatif(jobs, [port], toy_catalog).filter(pl.col("scenario") == "port").sort("job_id")
    assert out["scenario_applied"].to_list() == [True, False, False]
    assert out["architecture"].cast(pl.String).to_list() == ["allreduce_local", "ps_worker", "1w1g"]
    assert out["num_workers"].to_list() == [4, 8, 1]
    # the ported job: ring over NVLink 2 * 3/4 * 100e6 / 100 GB/s + 60 * 5 us instead of the PS traffic
    assert out["nvlink_s"][0] == pytest.approx(150e6 / 100e9 + 60 * 5e-6)
    assert out["speedup"].to_list()[1:] == [1.0, 1.0]
    assert out["speedup"][0] > 1


def test_server_swap_respreads_multi_server_jobs(toy_catalog, toy_entries):
    base = toy_entries["server"]["toy-server"]
    entries = {"server": {"big": {**base, "gpus_per_server": 8, "gpus_per_pcie_root": 4},
                          "small": {**base, "gpus_per_server": 2}}}
    toy_catalog.add(entries, "test")
    system = toy_catalog.system("toy-server", efficiency=ONES)
    w = Workload(batch_size=8, compute_bound_flops=1e12, memory_bound_bytes=1e9,
                 dense_param_bytes=100e6, num_gradient_tensors=10)
    jobs = jobs_frame([job_row(w, Architecture(kind="allreduce_cluster", num_workers=8), system, job_id=0)])
    out = whatif(jobs, [Scenario(name="big", server="big"), Scenario(name="small", server="small")], toy_catalog)
    big = out.filter(pl.col("scenario") == "big").row(0, named=True)
    # 8 GPUs were on 2 servers of 4; the new server holds 8, but the job keeps its 2 servers
    assert big["num_servers"] == 2 and big["server_gpus"] == 8 and big["fits_placement"]
    assert big["eff_network"] == 1.0  # efficiencies are kept
    small = out.filter(pl.col("scenario") == "small").row(0, named=True)
    # on 2-GPU servers the 8 GPUs need ceil(8 / 2) = 4 servers
    assert small["num_servers"] == 4 and small["gpus_per_server_used"] == 2 and small["fits_placement"]


def test_mixed_precision_scales_memory_bytes_once(mixed_precision_pair, toy_catalog):
    out = mixed_precision_pair
    mp = out.filter(pl.col("scenario") == "mixed-precision").sort("job_id")
    # fp32 -> fp16: peak 10 -> 40 TFLOP/s, memory-bound bytes halved; the fp16 job is unchanged
    assert mp["compute_bound_s"].to_list() == pytest.approx([4e12 / 40e12, 4e12 / 40e12])
    assert mp["memory_bound_s"].to_list() == pytest.approx([50e9 / 1000e9, 100e9 / 1000e9])
    assert mp["speedup"][1] == pytest.approx(1.0)
    # only the FP32 job is changed: the one already in mixed precision is not counted as applied
    assert mp["scenario_applied"].to_list() == [True, False]
    w_bf16 = Workload(batch_size=8, compute_bound_flops=4e12, memory_bound_bytes=100e9, precision="bf16")
    system = toy_catalog.system("toy-server", efficiency=ONES)
    bf = whatif(jobs_frame([job_row(w_bf16, Architecture(kind="1w1g"), system, job_id=0)]),
                [BUILTIN_SCENARIOS["mixed-precision"]], toy_catalog)
    assert bf.filter(pl.col("scenario") == "mixed-precision")["scenario_applied"].to_list() == [False]


def test_builtin_scenarios_resolve_and_files_load(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[[scenario]]\nname = "a100-100g"\ngpu = "A100-SXM4-40GB"\nnic = "eth-100g"\n')
    got = resolve_scenarios(["ethernet-100g", str(f)])
    assert [s.name for s in got] == ["ethernet-100g", "a100-100g"]
    bad = tmp_path / "bad.toml"
    bad.write_text('[[scenario]]\nname = "x"\nmemory_bound_scale = 2\n')
    with pytest.raises(ValueError, match=r"bad.toml: scenario #1: memory_bound_scale"):
        load_scenarios(bad)
    with pytest.raises(ValueError, match="neither a built-in scenario"):
        resolve_scenarios(["no-such-thing"])


def test_duplicate_scenario_names_rejected(toy_system):
    w = Workload(batch_size=1, compute_bound_flops=1.0, memory_bound_bytes=1.0)
    s = Scenario(name="x", overlap="full")
    with pytest.raises(ValueError, match="unique"):
        predict_whatif(w, Architecture(kind="1w1g"), toy_system, [s, s])


def test_upgrade_only_never_downgrades():
    """add-nvlink on an A100 server (NVLink 3, 300 GB/s) and ethernet-100g on 200 Gb/s HDR do not apply;
    on the PAI PCIe server (no NVLink, 25 Gb/s) both do."""
    from ddlscope.specs.catalog import builtin_catalog

    cat = builtin_catalog()
    w = Workload(batch_size=8, compute_bound_flops=1e12, memory_bound_bytes=1e9, dense_param_bytes=100e6,
                 num_gradient_tensors=10)
    jobs = jobs_frame([
        job_row(w, Architecture(kind="allreduce_cluster", num_workers=16), cat.system("dgx-a100"), job_id=0),
        job_row(w, Architecture(kind="allreduce_cluster", num_workers=16), cat.system("pai-v100-pcie-8"), job_id=1),
    ])
    out = whatif(jobs, [BUILTIN_SCENARIOS["add-nvlink"], BUILTIN_SCENARIOS["ethernet-100g"],
                        BUILTIN_SCENARIOS["gpu-a100"]], cat).filter(pl.col("scenario") != "baseline")
    applied = {(r["scenario"], r["job_id"]): r["scenario_applied"] for r in out.iter_rows(named=True)}
    assert applied == {("add-nvlink", 0): False, ("add-nvlink", 1): True,
                       ("ethernet-100g", 0): False, ("ethernet-100g", 1): True,
                       ("gpu-a100", 0): False, ("gpu-a100", 1): True}  # A100 80 GB -> 40 GB: less bandwidth
    assert out.filter(pl.col("job_id") == 0)["speedup"].to_list() == [1.0, 1.0, 1.0]


def test_nic_swap_applies_only_to_jobs_that_use_the_network():
    """ethernet-100g (an upgrade over the PAI PCIe server's 25 Gb/s NIC) changes hardware only for
    jobs whose traffic crosses a NIC: those spanning servers, and PS jobs (the shards sit across the
    network). A 1-GPU job, a 1wng job and an 8-GPU all-reduce inside one server use no NIC: not
    applied (speedup 1 either way), however many ranks they have."""
    from ddlscope.specs.catalog import builtin_catalog

    cat = builtin_catalog()
    w = Workload(batch_size=8, compute_bound_flops=1e12, memory_bound_bytes=1e9, dense_param_bytes=100e6,
                 num_gradient_tensors=10)
    sys_ = cat.system("pai-v100-pcie-8")
    archs = [Architecture(kind="1w1g"), Architecture(kind="1wng", gpus_per_worker=8),
             Architecture(kind="allreduce_local", num_workers=8),
             Architecture(kind="allreduce_cluster", num_workers=16),
             Architecture(kind="ps_worker", num_workers=4, num_ps=1)]
    jobs = jobs_frame([job_row(w, a, sys_, job_id=i) for i, a in enumerate(archs)])
    out = whatif(jobs, [BUILTIN_SCENARIOS["ethernet-100g"]], cat).filter(pl.col("scenario") != "baseline")
    assert out.sort("job_id")["scenario_applied"].to_list() == [False, False, False, True, True]
    assert out.filter(~pl.col("scenario_applied"))["speedup"].to_list() == [1.0, 1.0, 1.0]


def test_port_keeps_a_faster_nvlink():
    """ps-to-allreduce-nvlink on a DGX H100 (NVLink 4, 450 GB/s) keeps NVLink 4; on the PAI PCIe-only
    server it adds NVLink 2 (150 GB/s); system efficiencies 1. Both PS jobs (4 workers of 1 GPU) fit one
    8-GPU server: both ported.

    The ported ring all-reduce of 4 ranks moves 2 * (4 - 1) / 4 * 100e6 = 150e6 bytes per rank in
    2 * 3 = 6 steps of 10 gradient tensors = 60 latencies of 3 us (both NVLinks: 3 us, catalog):
    NVLink 4: 150e6 / 450e9 s + 60 * 3e-6 s; NVLink 2: 150e6 / 150e9 s + 60 * 3e-6 s."""
    from ddlscope.specs.catalog import builtin_catalog

    cat = builtin_catalog()
    w = Workload(batch_size=8, compute_bound_flops=1e12, memory_bound_bytes=1e9, dense_param_bytes=100e6,
                 num_gradient_tensors=10)
    arch = Architecture(kind="ps_worker", num_workers=4, num_ps=1)
    jobs = jobs_frame([job_row(w, arch, cat.system("dgx-h100", efficiency=ONES), job_id=0),
                       job_row(w, arch, cat.system("pai-v100-pcie-8", efficiency=ONES), job_id=1)])
    out = whatif(jobs, [BUILTIN_SCENARIOS["ps-to-allreduce-nvlink"]], cat).filter(
        pl.col("scenario") != "baseline").sort("job_id")
    assert out["scenario_applied"].to_list() == [True, True]
    assert out["architecture"].cast(pl.String).to_list() == ["allreduce_local", "allreduce_local"]
    assert out["nvlink"].to_list() == ["nvlink4", "nvlink2"]
    assert out["nvlink_bandwidth_bytes_per_s"].to_list() == [450e9, 150e9]
    # the DGX H100's own NVLink 4 at the system's explicit efficiency 1 (it wins over the link's transport
    # share), kept by the port; the NVLink 2 the port adds comes with its transport's share, 0.69 (catalog)
    assert cat.link("nvlink2").achieved_efficiency() == 0.69
    assert out["nvlink_s"][0] == pytest.approx(150e6 / 450e9 + 60 * 3e-6)
    assert out["nvlink_s"][1] == pytest.approx(150e6 / (150e9 * 0.69) + 60 * 3e-6)
    # the system label names only the part that was swapped
    assert out["system"].to_list() == ["dgx-h100", "pai-v100-pcie-8[nvlink=nvlink2]"]
