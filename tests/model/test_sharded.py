"""FSDP / ZeRO: collectives per step on their links, memory per GPU, the port; values by hand."""

import pytest

from ddlscope.model.jobs import job_row, jobs_frame
from ddlscope.model.scenarios import whatif
from ddlscope.model.sharded import fsdp_link_bytes, fsdp_state_bytes, prefetch_exposed_s, unsharded_state_bytes
from ddlscope.model.step_time import breakdown
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.specs.scenario import Scenario
from ddlscope.specs.workload import Workload

# 1e9 parameters at bf16: an all-gather moves P = 2e9 bytes, the reduce-scatter S = 2e9 (bf16 gradients)
W = Workload(name="llm-1b", batch_size=4, precision="bf16", compute_bound_flops=1e15, memory_bound_bytes=1e11,
             dense_param_bytes=2e9, num_gradient_tensors=10, num_params=1e9, peak_memory_bytes=26e9)
SYSTEM = builtin_catalog().system("dgx-a100")  # 8 GPUs, NVLink 3, 8 NICs


def _row(arch: Architecture, w: Workload = W, overlap: str = "none") -> dict:
    return breakdown(jobs_frame([job_row(w, arch, SYSTEM, overlap=overlap)])).row(0, named=True)


def test_link_bytes_by_hand():
    # FULL_SHARD on one server: AG fwd + AG bwd + RS = 3 x 7/8 x 2e9 on NVLink, 3 x 7 ring steps per unit
    assert fsdp_link_bytes("FULL_SHARD", 2e9, 2e9, 8, 1) == {
        "intra_bytes": 5.25e9, "intra_steps": 21, "network_bytes": 0.0, "network_steps": 0}
    # across 2 servers: NCCL's ring through all 16 GPUs, 3 x 15/16 x 2e9 over each server's 8 NICs
    assert fsdp_link_bytes("zero3", 2e9, 2e9, 16, 2, nics=8)["network_bytes"] == pytest.approx(703.125e6)
    # SHARD_GRAD_OP / zero1: one all-gather and one reduce-scatter, the volume of an all-reduce
    assert fsdp_link_bytes("zero2", 2e9, 2e9, 8, 1)["intra_bytes"] == pytest.approx(3.5e9)
    assert fsdp_link_bytes("zero1", 2e9, 2e9, 8, 1)["intra_bytes"] == pytest.approx(3.5e9)
    # HYBRID_SHARD: zero3 among the 8 GPUs of a server, all-reduce 2 x 1/2 x 2e9 per server across 2
    h = fsdp_link_bytes("hybrid", 2e9, 2e9, 16, 2, nics=8)
    assert (h["intra_bytes"], h["network_bytes"], h["network_steps"]) == (5.25e9, 2 * 1 / 2 * 2e9 / 8, 2)
    with pytest.raises(ValueError, match="sharding: unknown 'zero4'"):
        fsdp_link_bytes("zero4", 1, 1, 8, 1)


def test_step_model_prices_fsdp_on_its_links():
    one = _row(Architecture(kind="fsdp", num_workers=8, sharding="FULL_SHARD"))
    assert one["nvlink_bytes"] == pytest.approx(5.25e9) and one["network_bytes"] == 0
    # time = 10 units x 21 steps x alpha + bytes / (bandwidth x achieved share)
    beta = one["nvlink_bandwidth_bytes_per_s"] * one["nvlink_link_efficiency"]
    assert one["nvlink_s"] == pytest.approx(210 * one["nvlink_latency_s"] + 5.25e9 / beta)
    # two servers: the bug (0 s of communication) is gone
    two = _row(Architecture(kind="fsdp", num_workers=16))
    assert two["num_servers"] == 2 and two["network_bytes"] == pytest.approx(703.125e6)
    nic_beta = two["nic_bandwidth_bytes_per_s"] * two["nic_link_efficiency"]
    assert two["network_s"] == pytest.approx(10 * 45 * two["nic_latency_s"] + 703.125e6 / nic_beta)
    hybrid = _row(Architecture(kind="fsdp", num_workers=16, sharding="hybrid"))
    assert (hybrid["nvlink_bytes"], hybrid["network_bytes"]) == (pytest.approx(5.25e9), pytest.approx(2.5e8))
    # FULL_SHARD moves 3/2 of DDP's all-reduce volume on one server
    ddp = _row(Architecture(kind="allreduce_local", num_workers=8))
    assert one["nvlink_bytes"] / ddp["nvlink_bytes"] == pytest.approx(1.5)


def test_memory_per_gpu_by_hand():
    # 7e9 parameters, bf16, Adam: U = (2 + 12) 7e9 + 14e9 gradients = 112e9 bytes unsharded
    assert unsharded_state_bytes(7e9, 14e9, "bf16") == 112e9
    # zero3 on 8 GPUs with 32 units: 112e9 / 8 + two gathered units 2 x 14e9 / 32
    assert fsdp_state_bytes("zero3", 7e9, 14e9, "bf16", 8, 8, 32) == pytest.approx(14.875e9)
    assert fsdp_state_bytes("zero2", 7e9, 14e9, "bf16", 8, 8, 32) == pytest.approx(14e9 + 98e9 / 8)
    assert fsdp_state_bytes("zero1", 7e9, 14e9, "bf16", 8, 8, 32) == pytest.approx(28e9 + 84e9 / 8)
    assert fsdp_state_bytes("hybrid", 7e9, 14e9, "bf16", 64, 8, 32) == pytest.approx(14.875e9)
    # the replica's peak: the state plus 10 GB of activations: DDP does not fit an 80 GB A100, zero3 does
    w = Workload(name="llm-7b", batch_size=1, precision="bf16", compute_bound_flops=1e15, memory_bound_bytes=1e11,
                 dense_param_bytes=14e9, num_gradient_tensors=32, num_params=7e9, peak_memory_bytes=122e9)
    ddp = _row(Architecture(kind="allreduce_local", num_workers=8), w)
    assert ddp["fits_gpu_memory"] is False and ddp["gpu_memory_needed_bytes"] == pytest.approx(122e9)
    zero3 = _row(Architecture(kind="fsdp", num_workers=8), w)
    # the need: the peak less the unsharded state plus the sharded one, 122e9 - 112e9 + 14.875e9
    assert zero3["fits_gpu_memory"] is True and zero3["gpu_memory_needed_bytes"] == pytest.approx(24.875e9)
    zero1 = _row(Architecture(kind="fsdp", num_workers=8, sharding="zero1"), w)
    assert zero1["fits_gpu_memory"] is True and zero1["gpu_memory_needed_bytes"] == pytest.approx(10e9 + 38.5e9)
    # without a parameter count the fit and the need are unknown
    unknown = _row(Architecture(kind="fsdp", num_workers=8), w.model_copy(update={"num_params": None}))
    assert unknown["fits_gpu_memory"] is None and unknown["gpu_memory_needed_bytes"] is None


def test_prefetch_overlap():
    # 10 units: the first unit's all-gather is exposed, the rest hides behind 5 s of compute
    assert prefetch_exposed_s(1.0, 5.0, 10) == pytest.approx(0.1)
    assert prefetch_exposed_s(10.0, 5.0, 10) == pytest.approx(1.0 + 4.0)
    row = _row(Architecture(kind="fsdp", num_workers=16), overlap="scheduled")
    compute = row["compute_bound_s"] + row["memory_bound_s"]
    assert row["exposed_comm_s"] == pytest.approx(prefetch_exposed_s(row["comm_s"], compute, 10) + row["sync_wait_s"])


def test_port_to_fsdp():
    jobs = jobs_frame([job_row(W, Architecture(kind="allreduce_cluster", num_workers=16), SYSTEM, job_id=0),
                       job_row(W, Architecture(kind="allreduce_cluster", num_workers=12, gpus_per_worker=1,
                                               num_servers=2), SYSTEM, job_id=1)])
    out = whatif(jobs, [Scenario(name="to-zero2", architecture="fsdp", sharding="SHARD_GRAD_OP")])
    port = out.filter(out["scenario"] == "to-zero2").sort("job_id")
    assert port["scenario_applied"].to_list() == [True, True]  # 12 GPUs on ceil(12/8) = 2 servers divide evenly
    assert port["architecture"].to_list() == ["fsdp", "fsdp"] and port["sharding"].to_list() == ["zero2"] * 2
    # zero2 across 2 servers: 2 x 15/16 x 2e9 through the ring, over 8 NICs
    assert port["network_bytes"][0] == pytest.approx(2 * 15 / 16 * 2e9 / 8)
