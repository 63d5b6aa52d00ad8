"""The one-job fast path (:mod:`ddlscope.model.scalar`) gives the vectorised model's numbers: every
output column of ``breakdown_lazy`` on a one-row table, to 1e-9 relative, over every architecture,
several workloads (dense CNN, transformer, embedding-heavy), servers with and without NVLink,
precisions and the three overlap policies."""

from __future__ import annotations

import math

import polars as pl
import pytest

from ddlscope.model.jobs import job_row, jobs_frame
from ddlscope.model.scalar import breakdown_one, covers
from ddlscope.model.step_time import OUTPUT_COLUMNS, breakdown_lazy
from ddlscope.profile import profile_model
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import builtin_catalog

CAT = builtin_catalog()
ARCHS = [
    Architecture(kind="1w1g"),
    Architecture(kind="1wng", gpus_per_worker=4),
    Architecture(kind="ps_worker", num_workers=8, num_ps=2),
    Architecture(kind="ps_worker", num_workers=3, num_ps=1, gpus_per_worker=2),
    Architecture(kind="allreduce_local", num_workers=8),
    Architecture(kind="allreduce_cluster", num_workers=32),
    Architecture(kind="pearl", num_workers=16),
]


@pytest.fixture(scope="module")
def workloads():
    return {name: profile_model(name, batch_size=bs).workload
            for name, bs in (("resnet50", 64), ("bert_base", 16), ("dlrm", 256))}


def _same(fast, slow, where: str) -> None:
    for col in OUTPUT_COLUMNS:
        a, b = fast[col], slow[col]
        if isinstance(b, float) or isinstance(a, float):
            if b is None or a is None:
                assert a is None and b is None, (where, col, a, b)
            elif math.isnan(b):
                assert math.isnan(a), (where, col, a, b)
            else:
                assert a == pytest.approx(b, rel=1e-9, abs=1e-300), (where, col, a, b)
        else:
            assert a == b, (where, col, a, b)


@pytest.mark.parametrize("overlap", ["none", "scheduled", "full", 0.3])
@pytest.mark.parametrize("server", ["pai-v100-nvlink-8", "pai-v100-pcie-8", "dgx-h100"])
def test_scalar_path_equals_breakdown_lazy(workloads, overlap, server):
    system = CAT.system(server)
    checked = 0
    for wname, w in workloads.items():
        for arch in ARCHS:
            try:
                row = job_row(w, arch, system, overlap=overlap)
            except ValueError:  # the placement does not fit this server
                continue
            slow = breakdown_lazy(jobs_frame([row])).collect().with_columns(
                pl.col("bottleneck", "bottleneck_link").cast(pl.String)).row(0, named=True)
            assert covers(row)
            _same(breakdown_one(row), slow, f"{wname} {arch.kind} x{arch.num_workers} on {server}, {overlap}")
            checked += 1
    assert checked >= 18


def test_scalar_path_other_precisions_and_scales(workloads):
    system = CAT.system("dgx-a100")
    for precision in ("fp16", "bf16", "tf32"):
        w = workloads["bert_base"].model_copy(update={"precision": precision})
        row = job_row(w, Architecture(kind="allreduce_cluster", num_workers=16), system, overlap="scheduled",
                      memory_bound_scale=0.5)
        slow = breakdown_lazy(jobs_frame([row])).collect().with_columns(
            pl.col("bottleneck", "bottleneck_link").cast(pl.String)).row(0, named=True)
        _same(breakdown_one(row), slow, precision)


def test_scalar_path_refuses_op_priced_rows():
    with pytest.raises(ValueError, match="vectorised model"):
        breakdown_one({"priced_compute_bound_s": 1.0})


def test_predict_takes_the_fast_path_with_the_vectorised_frame(workloads):
    """``predict`` without ops returns the frame ``breakdown`` returns (schema and values)."""
    from ddlscope.model.api import predict
    from ddlscope.model.step_time import breakdown

    system = CAT.system("pai-v100-nvlink-8")
    for arch in ARCHS[:5]:
        for overlap in ("scheduled", "none"):
            fast = predict(workloads["dlrm"], arch, system, overlap=overlap)
            slow = breakdown(jobs_frame([job_row(workloads["dlrm"], arch, system, overlap=overlap)]))
            assert fast.schema == slow.schema
            from polars.testing import assert_frame_equal

            assert_frame_equal(fast, slow, check_exact=False, rel_tol=1e-9, abs_tol=0.0)
