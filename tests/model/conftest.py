"""A toy system with round numbers, so every expected value can be computed by hand."""

from __future__ import annotations

import pytest

from ddlscope.specs.catalog import Catalog
from ddlscope.specs.system import Efficiency, System

TOY_ENTRIES = {
    "gpu": {
        "toy-gpu": {
            "peak_tflops": {"fp32": 10.0, "tf32": 20.0, "fp16": 40.0, "bf16": 40.0},
            "memory_bandwidth_gb_s": 1000.0,
            "memory_gb": 16.0,
            "source": "test fixture",
        }
    },
    "link": {
        "toy-pcie": {"kind": "pcie", "bandwidth_gb_s": 10.0, "latency_us": 10.0},
        "toy-nvlink": {"kind": "nvlink", "bandwidth_gb_s": 100.0, "latency_us": 5.0},
        "toy-nic": {"kind": "ethernet", "bandwidth_gb_s": 1.0, "latency_us": 50.0},
        "toy-nic-4x": {"kind": "ethernet", "bandwidth_gb_s": 4.0, "latency_us": 50.0},
    },
    "server": {
        "toy-server": {
            "gpu": "toy-gpu",
            "gpus_per_server": 4,
            "pcie": "toy-pcie",
            "gpus_per_pcie_root": 2,
            "nvlink": "toy-nvlink",
            "nic": "toy-nic",
            "nics_per_server": 1,
            "storage_read_gb_s": 2.0,
        }
    },
}

ONES = Efficiency(compute=1, memory=1, pcie=1, nvlink=1, network=1, storage=1)


@pytest.fixture()
def toy_entries() -> dict:
    """A deep copy of :data:`TOY_ENTRIES` to build variants from."""
    return {k: {n: dict(v) for n, v in d.items()} for k, d in TOY_ENTRIES.items()}


@pytest.fixture()
def toy_catalog() -> Catalog:
    """The built-in-free toy catalog."""
    return Catalog(TOY_ENTRIES, origin="toy")


@pytest.fixture()
def toy_system(toy_catalog: Catalog) -> System:
    """4 GPUs of 10 TFLOP/s and 1000 GB/s, PCIe 10 GB/s (2 GPUs per root), NVLink 100 GB/s,
    one 1 GB/s NIC, storage 2 GB/s, every efficiency 1."""
    return toy_catalog.system("toy-server", efficiency=ONES)


@pytest.fixture()
def toy_system_no_nvlink(toy_catalog: Catalog) -> System:
    """The toy system without NVLink: GPU-to-GPU traffic goes over PCIe."""
    return toy_catalog.system("toy-server", nvlink="none", efficiency=ONES)


@pytest.fixture()
def mixed_precision_pair(toy_catalog: Catalog):
    """Two 1w1g jobs on the toy server (efficiencies 1) that differ only in precision: an FP32 one
    (4 TFLOP, 100 GB memory-bound per step, batch 8) and its FP16 copy, with the toy catalog's
    ``mixed-precision`` what-if applied to both: ``whatif`` rows, baseline then scenario."""
    from ddlscope.model.jobs import job_row, jobs_frame
    from ddlscope.model.scenarios import whatif
    from ddlscope.specs.architecture import Architecture
    from ddlscope.specs.scenario import BUILTIN_SCENARIOS
    from ddlscope.specs.workload import Workload

    system = toy_catalog.system("toy-server", efficiency=ONES)
    w32 = Workload(batch_size=8, compute_bound_flops=4e12, memory_bound_bytes=100e9)
    w16 = w32.model_copy(update={"precision": "fp16"})
    jobs = jobs_frame([job_row(w32, Architecture(kind="1w1g"), system, job_id=0),
                       job_row(w16, Architecture(kind="1w1g"), system, job_id=1)])
    return whatif(jobs, [BUILTIN_SCENARIOS["mixed-precision"]], toy_catalog)
