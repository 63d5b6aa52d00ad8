"""3D parallelism (tp x pp x dp): compute scale and bubble, TP/PP/DP traffic on their links, memory; by hand."""

import pytest
from pydantic import ValidationError

from ddlscope.model.jobs import job_row, jobs_frame
from ddlscope.model.pipeline import bubble_fraction, tp_bytes_per_step
from ddlscope.model.step_time import breakdown
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.specs.scenario import Scenario
from ddlscope.specs.workload import Workload

# 1e9 parameters (bf16 gradients S = 2e9), 8 layers, one layer's activation A = 1e8 bytes per micro-batch;
# peak = unsharded Adam state U = (2 + 12) 1e9 + 2e9 = 16e9 plus 8e9 of activations
W = Workload(name="llm", batch_size=1, precision="bf16", compute_bound_flops=1e15, memory_bound_bytes=0.0,
             dense_param_bytes=2e9, num_gradient_tensors=10, num_params=1e9, num_layers=8,
             layer_activation_bytes=1e8, peak_memory_bytes=24e9)
SYSTEM = builtin_catalog().system("dgx-a100")  # 8 GPUs per server, NVLink 3, 8 NICs


def test_bubble():
    assert bubble_fraction(4, 8) == 3 / 8
    assert bubble_fraction(4, 8, virtual_stages=2) == 3 / 16
    assert tp_bytes_per_step(1e8, 4, 8, 4, 8) == pytest.approx(4 * 8 * 2 * 2 * 3 / 4 * 1e8)
    with pytest.raises(ValueError, match="expected >= 1"):
        bubble_fraction(0, 8)


def test_3d_by_hand():
    a = Architecture(kind="3d", num_workers=32, tp=4, pp=4, microbatches=8)  # dp = 2, 4 servers
    row = breakdown(jobs_frame([job_row(W, a, SYSTEM, overlap="none")])).row(0, named=True)
    one = breakdown(jobs_frame([job_row(W, Architecture(kind="fsdp", num_workers=8), SYSTEM, overlap="none")]))
    # compute: (M + pp - 1) / (tp pp) = 11/16 of one micro-batch of the whole model
    assert row["compute_bound_s"] == pytest.approx(one["compute_bound_s"][0] * 11 / 16)
    # TP: 4 M L/pp = 64 all-reduces of 2 (tp-1)/tp A = 1.5e8 each on NVLink, 6 ring steps each
    assert row["nvlink_bytes"] == pytest.approx(64 * 1.5e8)
    # PP spans servers (tp pp = 16 > 8): 2 M A / tp = 4e8 per GPU, 8 GPUs over 8 NICs; DP: one group
    # member per server, 2 servers: the 8 groups' rings of S/16 = 1.25e8 each, 2 (2-1)/2 of it, over 8 NICs
    assert row["network_bytes"] == pytest.approx(4e8 + 8 * 1.25e8 / 8)
    beta = row["nvlink_bandwidth_bytes_per_s"] * row["nvlink_link_efficiency"]
    assert row["nvlink_s"] == pytest.approx(384 * row["nvlink_latency_s"] + 9.6e9 / beta)
    nic_beta = row["nic_bandwidth_bytes_per_s"] * row["nic_link_efficiency"]
    assert row["network_s"] == pytest.approx(36 * row["nic_latency_s"] + 5.25e8 / nic_beta)
    # memory: U / (tp pp) + activations / tp = 1e9 + 2e9 fits; samples per step b M dp = 16
    assert row["fits_gpu_memory"] is True and row["gpu_memory_needed_bytes"] == pytest.approx(3e9)
    assert row["samples_per_s"] == pytest.approx(16 / row["step_s"])
    assert row["exposed_comm_s"] == pytest.approx(row["comm_s"])  # fixed overlap 0: all exposed


def test_3d_rules():
    with pytest.raises(ValidationError, match="tp x pp = 12 to divide the 32 GPUs"):
        Architecture(kind="3d", num_workers=32, tp=4, pp=3)
    with pytest.raises(ValidationError, match="only 3d is model-parallel"):
        Architecture(kind="fsdp", num_workers=8, tp=2)
    with pytest.raises(ValidationError, match="interleaved schedule expects pp >= 2 and microbatches a multiple"):
        Architecture(kind="3d", num_workers=32, tp=4, pp=4, microbatches=6, virtual_stages=2)
    with pytest.raises(ValueError, match="tp: the 16 tensor-parallel GPUs must sit in one server"):
        Architecture(kind="3d", num_workers=32, tp=16, pp=2).servers_on(8)
    with pytest.raises(ValidationError, match="3d is not a port target"):
        Scenario(name="x", architecture="3d")


def test_context_parallel_by_hand():
    # tp 2 x cp 2 x pp 2 inside one 8-GPU server, dp 4 over 4 servers, 8 micro-batches; KV = 2 A (unset)
    a = Architecture(kind="3d", num_workers=32, tp=2, cp=2, pp=2, microbatches=8)
    row = breakdown(jobs_frame([job_row(W, a, SYSTEM, overlap="none")])).row(0, named=True)
    one = breakdown(jobs_frame([job_row(W, Architecture(kind="fsdp", num_workers=8), SYSTEM, overlap="none")]))
    assert row["compute_bound_s"] == pytest.approx(one["compute_bound_s"][0] * (8 + 1) / 8)
    tp = 128 * (2 * 1 / 2 * 1e8 / 2)    # 4 M L/pp all-reduces of the GPU's A / cp over tp = 2
    cp = 96 * (1 / 2) * 2e8 / 2         # 3 passes x M L/pp of (cp-1)/cp KV / tp
    pp = 2 * 8 * 1e8 / 4                # 2 M sends of A / (tp cp)
    dp = 2 * 1 / 2 * 5e8                # S / (tp pp) = 5e8 over the 2 replicas in the server
    assert row["nvlink_bytes"] == pytest.approx(tp + cp + pp + dp)
    # the 4 groups of the server, each a ring of 4 servers over 2 (4-1)/4 of 5e8, on 8 NICs
    assert row["network_bytes"] == pytest.approx(4 * 2 * 3 / 4 * 5e8 / 8)
    beta = row["nvlink_bandwidth_bytes_per_s"] * row["nvlink_link_efficiency"]
    assert row["nvlink_s"] == pytest.approx((256 + 96 + 16 + 20) * row["nvlink_latency_s"] + (tp + cp + pp + dp) / beta)
    assert row["samples_per_s"] == pytest.approx(32 / row["step_s"])
    assert row["fits_gpu_memory"] is True and row["gpu_memory_needed_bytes"] == pytest.approx(6e9)  # 16e9/4 + 8e9/4
    with pytest.raises(ValidationError, match="tp x cp x pp = 12 to divide the 32 GPUs"):
        Architecture(kind="3d", num_workers=32, tp=2, cp=3, pp=2)
