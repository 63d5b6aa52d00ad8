"""Properties of the step-time model that hold for every job (hypothesis)."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddlscope.model.collectives import ring_allreduce_bytes_per_rank
from ddlscope.model.jobs import job_row, jobs_frame
from ddlscope.model.step_time import COMPONENTS, breakdown
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.specs.workload import Workload

CATALOG = builtin_catalog()
SERVERS = sorted(CATALOG.servers)

positive = st.floats(min_value=1e3, max_value=1e13, allow_nan=False, allow_infinity=False)
nonneg = st.one_of(st.just(0.0), positive)


@st.composite
def jobs(draw):
    """A random valid (workload, architecture, system) on a catalog server."""
    server = CATALOG.server(draw(st.sampled_from(SERVERS)))
    G = server.gpus_per_server
    kind = draw(st.sampled_from(["1w1g", "1wng", "ps_worker", "allreduce_local", "allreduce_cluster", "pearl"]))
    if kind == "1w1g":
        arch = Architecture(kind=kind)
    elif kind == "1wng":
        arch = Architecture(kind=kind, gpus_per_worker=draw(st.integers(2, G)))
    elif kind == "allreduce_local":
        arch = Architecture(kind=kind, num_workers=draw(st.integers(2, G)))
    elif kind == "ps_worker":
        arch = Architecture(kind=kind, num_workers=draw(st.integers(1, 64)), num_ps=draw(st.integers(1, 16)))
    else:
        m = draw(st.integers(1 if kind == "pearl" else 2, 8))
        g = draw(st.integers(1 if m > 1 else 2, G))
        arch = Architecture(kind=kind, num_workers=m * g, num_servers=m)
    table = draw(nonneg)
    w = Workload(
        batch_size=draw(st.integers(1, 512)),
        precision=draw(st.sampled_from(["fp32", "tf32", "fp16", "bf16"])),
        compute_bound_flops=draw(positive),  # a step does some work (all-zero workloads are rejected)
        memory_bound_bytes=draw(nonneg),
        memory_bound_flops=draw(nonneg),
        input_bytes=draw(nonneg),
        dense_param_bytes=(S := draw(nonneg)),
        num_gradient_tensors=draw(st.integers(1 if S > 0 else 0, 500)),
        sparse_bytes_per_step=draw(st.floats(0, 1)) * table,
        embedding_table_bytes=table,
    )
    system = CATALOG.system(server.name)
    overlap = draw(st.sampled_from(["none", "full", 0.3]))
    return job_row(w, arch, system, overlap=overlap)


RESOURCES = [
    ("gpu_peak_fp32_flop_per_s", "gpu_peak_tf32_flop_per_s", "gpu_peak_fp16_flop_per_s", "gpu_peak_bf16_flop_per_s"),
    ("gpu_memory_bandwidth_bytes_per_s",),
    ("pcie_bandwidth_bytes_per_s",),
    ("nvlink_bandwidth_bytes_per_s",),
    ("nic_bandwidth_bytes_per_s",),
    ("storage_read_bytes_per_s",),
]


@settings(max_examples=150, deadline=None)
@given(job=jobs(), which=st.sampled_from(range(len(RESOURCES))), factor=st.floats(1.0, 100.0))
def test_step_time_never_rises_when_a_bandwidth_or_peak_rises(job, which, factor):
    faster = dict(job)
    for col in RESOURCES[which]:
        faster[col] = job[col] * factor
    out = breakdown(jobs_frame([job, faster]))
    before, after = out["step_s"].to_list()
    assert after <= before * (1 + 1e-12)


@settings(max_examples=150, deadline=None)
@given(job=jobs())
def test_shares_sum_to_one_and_components_are_nonnegative(job):
    r = breakdown(jobs_frame([job])).row(0, named=True)
    if r["step_s"] == 0:
        return
    assert sum(r[f"share_{c}"] for c in COMPONENTS) == pytest.approx(1.0, rel=1e-9)
    assert all(r[f"{c}_s"] >= 0 for c in COMPONENTS)
    assert 0 <= r["exposed_comm_s"] <= r["comm_s"] + 1e-15


@settings(max_examples=60, deadline=None)
@given(job=jobs())
def test_1w1g_has_no_weight_traffic(job):
    if job["architecture"] != "1w1g":
        return
    r = breakdown(jobs_frame([job])).row(0, named=True)
    assert r["comm_s"] == 0 and r["pcie_bytes"] == 0 and r["nvlink_bytes"] == 0 and r["network_bytes"] == 0


@given(size=st.floats(1.0, 1e12), ranks=st.integers(1, 100_000))
def test_ring_allreduce_bytes_per_rank_approach_2s(size, ranks):
    b = ring_allreduce_bytes_per_rank(size, ranks)
    assert b == pytest.approx(2 * size * (1 - 1 / ranks))
    assert b < 2 * size
    assert ring_allreduce_bytes_per_rank(size, ranks + 1) >= b


def test_ring_allreduce_bytes_in_the_model_approach_2s():
    """allreduce_local on a 1024-GPU 'server': NVLink bytes per rank -> 2 S as p grows."""
    cat = builtin_catalog()
    cat.add({"server": {"huge": {**CATALOG.server("dgx-a100").model_dump(exclude={"name"}),
                                 "gpus_per_server": 1024}}}, "test")
    system = cat.system("huge")
    w = Workload(batch_size=1, compute_bound_flops=0, memory_bound_bytes=0, dense_param_bytes=1e9,
                 num_gradient_tensors=1)
    rows = [job_row(w, Architecture(kind="allreduce_local", num_workers=p), system, job_id=p) for p in (2, 8, 64, 1024)]
    ratio = breakdown(jobs_frame(rows))["nvlink_bytes"] / 1e9
    assert ratio.to_list() == pytest.approx([1.0, 1.75, 2 * 63 / 64, 2 * 1023 / 1024])
    assert pl.Series(ratio).is_sorted()
