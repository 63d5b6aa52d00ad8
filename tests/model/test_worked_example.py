"""Bytes per link and time of every architecture on a small worked example, by hand.

Toy system (tests/model/conftest.py): peak 10 TFLOP/s FP32, memory 1000 GB/s, PCIe 10 GB/s with
alpha 10 us and 2 GPUs per host root, NVLink 100 GB/s with alpha 5 us, one 1 GB/s NIC with alpha
50 us, storage 2 GB/s, 4 GPUs per server, every efficiency 1.

Workload per replica: 1e12 compute-bound FLOPs (0.1 s), 50e9 memory-bound bytes (0.05 s), 10 MB
input copied to the GPU and 2 MB read from storage, S = 100 MB dense gradients in k = 10 tensors.
"""

from __future__ import annotations

import pytest

from ddlscope.model.api import predict
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.workload import Workload

MS = 1e-3
US = 1e-6


def workload(sparse: float = 0.0) -> Workload:
    return Workload(
        batch_size=32,
        compute_bound_flops=1e12,
        memory_bound_bytes=50e9,
        input_bytes=10e6,
        stored_input_bytes=2e6,
        dense_param_bytes=100e6,
        num_gradient_tensors=10,
        sparse_bytes_per_step=sparse,
        embedding_table_bytes=1e9 if sparse else 0.0,
    )


def row(arch: Architecture, system, sparse: float = 0.0, **kw) -> dict:
    # the worked example adds the components (overlap none) unless a test asks for another policy;
    # the scheduled overlap's own worked example is tests/model/test_overlap.py
    kw.setdefault("overlap", "none")
    return predict(workload(sparse), arch, system, **kw).row(0, named=True)


def test_1w1g(toy_system):
    r = row(Architecture(kind="1w1g"), toy_system)
    assert r["compute_bound_s"] == pytest.approx(1e12 / 10e12)  # 0.1 s
    assert r["memory_bound_s"] == pytest.approx(50e9 / 1000e9)  # 0.05 s
    assert r["storage_s"] == pytest.approx(1 * 2e6 / 2e9)  # 1 ms, one GPU on the server
    assert r["h2d_s"] == pytest.approx(10 * US + 1 * 10e6 / 10e9)  # alpha + 1 ms
    assert r["comm_s"] == 0 and r["pcie_bytes"] == 0 and r["network_bytes"] == 0
    assert r["step_s"] == pytest.approx(0.1 + 0.05 + 1 * MS + 1.01 * MS)
    assert r["samples_per_s"] == pytest.approx(32 / r["step_s"])
    assert r["bottleneck"] == "compute_bound" and r["bottleneck_link"] == "none"


def test_1wng_shares_the_host_root(toy_system):
    r = row(Architecture(kind="1wng", gpus_per_worker=4), toy_system)
    # g = 4 GPUs on the server, r = min(4, 2) = 2 share an uplink
    assert r["storage_s"] == pytest.approx(4 * 2e6 / 2e9)  # 4 ms
    assert r["h2d_s"] == pytest.approx(10 * US + 2 * 10e6 / 10e9)  # 2.01 ms
    # gradients up, weights down: 2 * r * S = 2 * 2 * 100e6 = 400e6 bytes, 2k = 20 messages
    assert r["pcie_bytes"] == pytest.approx(400e6)
    assert r["pcie_s"] == pytest.approx(20 * 10 * US + 400e6 / 10e9)  # 40.2 ms
    assert r["nvlink_s"] == 0 and r["network_s"] == 0
    assert r["step_s"] == pytest.approx(0.15 + 4 * MS + 2.01 * MS + 40.2 * MS)


def test_ps_worker_one_server(toy_system):
    r = row(Architecture(kind="ps_worker", num_workers=4, num_ps=2), toy_system)
    assert r["num_servers"] == 1  # 4 GPUs fit one 4-GPU server
    assert r["pcie_s"] == pytest.approx(40.2 * MS)  # as 1wng: 2 * 2 * 100e6 over 10 GB/s + 20 alpha
    # the server's one NIC carries its 4 workers: 4 * 100e6; each PS shard 4 * 100e6 / 2 = 200e6
    # push then pull: 2 * max(400e6, 200e6) = 800e6 bytes; 2 * ceil(10 / 2) = 10 messages
    assert r["network_bytes"] == pytest.approx(800e6)
    assert r["network_s"] == pytest.approx(10 * 50 * US + 800e6 / 1e9)  # 0.8005 s
    assert r["bottleneck"] == "network" and r["bottleneck_link"] == "network"


def test_ps_worker_fan_in_bounds_when_workers_spread(toy_system):
    r = row(Architecture(kind="ps_worker", num_workers=4, num_ps=2, num_servers=4), toy_system)
    # one GPU per server: r = 1; PCIe 2 * 1 * 100e6 = 200e6 bytes
    assert r["pcie_s"] == pytest.approx(20 * 10 * US + 200e6 / 10e9)  # 20.2 ms
    # worker NIC 100e6 < PS NIC fan-in 4 * 100e6 / 2 = 200e6: 2 * 200e6 = 400e6
    assert r["network_bytes"] == pytest.approx(400e6)
    assert r["network_s"] == pytest.approx(10 * 50 * US + 0.4)


def test_ps_worker_sparse_rows(toy_system):
    e = 8e6
    r = row(Architecture(kind="ps_worker", num_workers=4, num_ps=2, num_servers=4), toy_system, sparse=e)
    # W = S + E = 108e6 per worker; PCIe 2 * 1 * 108e6; PS NIC 4 * 108e6 / 2 = 216e6, twice
    assert r["pcie_bytes"] == pytest.approx(216e6)
    assert r["network_bytes"] == pytest.approx(432e6)
    assert r["network_s"] == pytest.approx(10 * 50 * US + 0.432)


def test_allreduce_local_nvlink(toy_system):
    r = row(Architecture(kind="allreduce_local", num_workers=4), toy_system)
    # ring: 2 (p-1)/p S = 2 * 3/4 * 100e6 = 150e6 bytes; 2 (p-1) k = 60 steps of 5 us
    assert r["nvlink_bytes"] == pytest.approx(150e6)
    assert r["nvlink_s"] == pytest.approx(60 * 5 * US + 150e6 / 100e9)  # 1.8 ms
    assert r["pcie_s"] == 0 and r["network_s"] == 0


def test_allreduce_local_without_nvlink_uses_pcie(toy_system_no_nvlink):
    r = row(Architecture(kind="allreduce_local", num_workers=4), toy_system_no_nvlink)
    assert r["nvlink_s"] == 0
    assert r["pcie_bytes"] == pytest.approx(150e6)
    assert r["pcie_s"] == pytest.approx(60 * 10 * US + 150e6 / 10e9)  # 15.6 ms


def test_allreduce_local_sparse_allgather(toy_system):
    e = 8e6
    r = row(Architecture(kind="allreduce_local", num_workers=4), toy_system, sparse=e)
    # + all-gather of touched rows: (p-1) E = 24e6 bytes in p-1 = 3 steps
    assert r["nvlink_bytes"] == pytest.approx(150e6 + 24e6)
    assert r["nvlink_s"] == pytest.approx((60 + 3) * 5 * US + 174e6 / 100e9)


def test_allreduce_cluster_hierarchical(toy_system):
    r = row(Architecture(kind="allreduce_cluster", num_workers=8), toy_system)
    assert r["num_servers"] == 2 and r["gpus_per_server_used"] == 4
    # intra: reduce-scatter + all-gather 2 (g-1)/g S = 150e6, 2 (g-1) k = 60 steps
    assert r["nvlink_s"] == pytest.approx(60 * 5 * US + 150e6 / 100e9)
    # inter-server ring of the shards, NIC shared by the 4 GPUs: 2 (m-1)/m S = 100e6, 2 (m-1) k = 20 steps
    assert r["network_bytes"] == pytest.approx(100e6)
    assert r["network_s"] == pytest.approx(20 * 50 * US + 100e6 / 1e9)  # 0.101 s


def test_pearl_alltoall(toy_system):
    e = 8e6
    r = row(Architecture(kind="pearl", num_workers=8), toy_system, sparse=e)
    # dense as allreduce_cluster; embeddings: two all-to-alls, p = 8, g = 4
    # intra 2 E (g-1)/p = 2 * 8e6 * 3/8 = 6e6 in 2 (g-1) = 6 steps
    # NIC 2 g E (p-g)/p = 2 * 4 * 8e6 * 4/8 = 32e6 in 2 (p-g) = 8 steps
    assert r["nvlink_bytes"] == pytest.approx(150e6 + 6e6)
    assert r["nvlink_s"] == pytest.approx((60 + 6) * 5 * US + 156e6 / 100e9)
    assert r["network_bytes"] == pytest.approx(100e6 + 32e6)
    assert r["network_s"] == pytest.approx((20 + 8) * 50 * US + 132e6 / 1e9)


def test_overlap_full_hides_communication_behind_compute(toy_system):
    arch = Architecture(kind="allreduce_cluster", num_workers=8)
    none = row(arch, toy_system)
    full = row(arch, toy_system, overlap="full")
    half = row(arch, toy_system, overlap=0.5)
    compute = 0.1 + 0.05
    comm = none["comm_s"]  # 1.8 ms + 101 ms < compute
    assert full["exposed_comm_s"] == pytest.approx(0.0)
    assert full["step_s"] == pytest.approx(none["data_io_s"] + compute)
    assert half["exposed_comm_s"] == pytest.approx(0.5 * comm)
    assert sum(half[f"share_{c}"] for c in ("data_io", "compute_bound", "memory_bound", "pcie", "nvlink",
                                            "network")) == pytest.approx(1.0)


def test_overlap_bounded_by_compute(toy_system):
    # PS job whose 0.8 s of network exceeds 0.15 s of compute: only 0.15 s can hide
    r = row(Architecture(kind="ps_worker", num_workers=4, num_ps=2), toy_system, overlap="full")
    assert r["exposed_comm_s"] == pytest.approx(r["comm_s"] - 0.15)
    assert r["step_s"] == pytest.approx(r["data_io_s"] + r["comm_s"])
