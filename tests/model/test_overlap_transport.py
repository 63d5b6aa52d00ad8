"""Transports in the catalog: a link's achieved share of its bandwidth (NCCL over IB, sockets with a
per-flow limit, NVLink, PCIe) and who wins over the system's efficiency."""

from __future__ import annotations

import pytest

from ddlscope.model.api import predict
from ddlscope.model.jobs import system_columns
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import Catalog, builtin_catalog
from ddlscope.specs.system import LinkSpec
from ddlscope.specs.workload import Workload


def test_socket_transport_is_capped_per_flow():
    # 50 Gb/s ENA = 6.25 GB/s; 2 flows x 5 Gb/s (AWS single-flow limit) = 1.25 GB/s -> 0.2 of the line
    link = builtin_catalog().link("aws-ena-50g")
    assert link.transport == "nccl-socket"
    assert link.achieved_efficiency() == pytest.approx(2 * 0.625 / 6.25)
    # efficiency and the per-flow cap: the smaller wins; 25 GbE, 0.85, 2 x 1.25 GB/s = 0.8 of 3.125
    tcp = builtin_catalog().link("eth-25g-tcp")
    assert tcp.achieved_efficiency() == pytest.approx(min(0.85, 2 * 1.25 / 3.125))
    assert LinkSpec(name="x", kind="ethernet", bandwidth_gb_s=1.0, latency_us=1.0).achieved_efficiency() is None


def test_catalog_nvlink_and_ib_are_priced_at_achieved_busbw():
    cat = builtin_catalog()
    assert cat.link("nvlink3").achieved_efficiency() == pytest.approx(0.69)  # 200 / 300 GB/s, nccl-tests #149
    assert cat.link("nvlink4").achieved_efficiency() == pytest.approx(0.82)  # 370 / 450 GB/s, nccl-tests #212
    assert cat.link("ib-hdr").achieved_efficiency() == pytest.approx(0.96)  # 96 / 100 GB/s, nccl-tests #119


def test_explicit_system_efficiency_wins_over_the_link():
    cat = builtin_catalog()
    default = system_columns(cat.system("dgx-a100"))
    assert default["nvlink_link_efficiency"] == pytest.approx(0.69)
    assert default["nic_link_efficiency"] == pytest.approx(0.96)
    # a calibrated profile sets efficiency.nvlink = 1 with the measured bandwidth: that wins
    explicit = system_columns(cat.system("dgx-a100", efficiency={"nvlink": 1.0}))
    assert explicit["nvlink_link_efficiency"] is None and explicit["eff_nvlink"] == 1.0
    assert explicit["nic_link_efficiency"] == pytest.approx(0.96)  # not set explicitly: the link's


def test_nvlink_time_uses_the_achieved_bandwidth(toy_entries):
    # toy NVLink 100 GB/s with a transport share of 0.5: 4 GPUs ring 2 (3/4) 100e6 B = 150e6 B / 50e9 B/s = 3 ms
    # (+ 10 tensors x 6 steps x 5 us = 0.3 ms); the system's efficiency (1, not explicit here) does not apply
    toy_entries["link"]["toy-nvlink"]["efficiency"] = 0.5
    system = Catalog(toy_entries, origin="toy").system("toy-server")
    w = Workload(batch_size=1, compute_bound_flops=1e12, memory_bound_bytes=0.0, dense_param_bytes=100e6,
                 num_gradient_tensors=10)
    r = predict(w, Architecture(kind="allreduce_local", num_workers=4), system, overlap="none").row(0, named=True)
    assert r["nvlink_s"] == pytest.approx(3e-3 + 0.3e-3)


def test_efa_prices_a_multi_instance_all_reduce_at_the_measured_rate():
    # NVIDIA/nccl issue #527: 4 x p4dn.24xlarge (32 A100, 4 x 100 Gb/s EFA each), all_reduce of 1 GiB
    # in 70.25 ms. The model's hierarchical ring: 2 (m-1)/m x 1 GiB per instance over its 4 EFA
    # interfaces at 12.5 GB/s x 0.45, 2 (m-1) = 6 latency steps of 15 us each
    cat = builtin_catalog()
    efa = cat.link("efa-100g")
    assert efa.transport == "nccl-efa" and efa.achieved_efficiency() == pytest.approx(0.45)
    system = cat.system("aws-p4d.24xlarge")
    assert system.nics_per_server == 4 and system.nic.name == "efa-100g"
    S = 2.0**30
    w = Workload(name="allreduce-1GiB", batch_size=1, compute_bound_flops=1.0, memory_bound_bytes=0.0,
                 dense_param_bytes=S, num_gradient_tensors=1)
    row = predict(w, Architecture(kind="allreduce_cluster", num_workers=32, num_servers=4), system,
                  overlap="none").row(0, named=True)
    expect = 6 * 15e-6 + 1.5 * S / 4 / (12.5e9 * 0.45)
    assert row["network_s"] == pytest.approx(expect)
    assert row["network_s"] == pytest.approx(70.25e-3, rel=0.03)  # the measurement the efficiency came from
