"""The Polars engine that collects the model: streaming (the default) gives the in-memory engine's
frames bit for bit on materialised Jobs tables, and divides exactly where the in-memory engine
multiplies by a reciprocal."""

from __future__ import annotations

import numpy as np
import polars as pl

from ddlscope.model.jobs import job_row, jobs_frame
from ddlscope.model.plan import PlanSpace, plan_jobs
from ddlscope.model.scenarios import whatif
from ddlscope.model.step_time import ENGINE, breakdown
from ddlscope.profile.llm import DecoderConfig
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.specs.scenario import BUILTIN_SCENARIOS
from ddlscope.specs.system import Efficiency
from ddlscope.specs.workload import Workload

ONES = Efficiency(compute=1, memory=1, pcie=1, nvlink=1, network=1, storage=1)


def _assert_bit_identical(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert a.columns == b.columns and a.dtypes == b.dtypes
    for col in a.columns:
        x, y = a[col], b[col]
        assert x.is_null().equals(y.is_null()), col
        if x.dtype == pl.Float64:
            keep = ~x.is_null().to_numpy()
            assert np.array_equal(x.to_numpy().view(np.uint64)[keep], y.to_numpy().view(np.uint64)[keep]), col
        else:
            assert x.equals(y, null_equal=True), col


def _mixed_jobs() -> pl.DataFrame:
    """The six PAI architectures on two servers, each with the scheduled overlap and two fixed ones."""
    cat = builtin_catalog()
    rows = []
    archs = [Architecture(kind="1w1g"), Architecture(kind="1wng", gpus_per_worker=4),
             Architecture(kind="allreduce_local", num_workers=8),
             Architecture(kind="ps_worker", num_workers=16, num_ps=4, num_servers=2),
             Architecture(kind="allreduce_cluster", num_workers=16, num_servers=2),
             Architecture(kind="pearl", num_workers=16, num_servers=2)]
    for i, (arch, overlap, server) in enumerate(
            (a, o, s) for a in archs for o in ("scheduled", "none", 0.3) for s in ("pai-v100-nvlink-8", "dgx-a100")):
        w = Workload(batch_size=32 + i, compute_bound_flops=1e12 * (1 + i), memory_bound_bytes=3e9 * (1 + i % 5),
                     dense_param_bytes=1e8 * (1 + i % 7), num_gradient_tensors=50 + i,
                     sparse_bytes_per_step=1e6 * (i % 3), embedding_table_bytes=1e9 * (i % 3), input_bytes=1e6)
        rows.append(job_row(w, arch, cat.system(server), overlap=overlap, job_id=i))
    return jobs_frame(rows)


def test_streaming_is_the_default_and_bit_identical_to_in_memory():
    assert ENGINE == "streaming"
    jobs = _mixed_jobs()
    _assert_bit_identical(breakdown(jobs), breakdown(jobs, engine="in-memory"))
    scenarios = list(BUILTIN_SCENARIOS.values())
    _assert_bit_identical(whatif(jobs, scenarios), whatif(jobs, scenarios, engine="in-memory"))
    # fsdp and 3d plans with op-level prices (the costed architectures' own terms)
    cfg = DecoderConfig(name="tiny", layers=4, hidden=512, heads=8, vocab=1000, seq_len=256)
    plans = plan_jobs(cfg, 16, builtin_catalog().system("dgx-a100"), 32,
                      space=PlanSpace(micro_batches=(1, 2), context_parallel=(1,)))
    _assert_bit_identical(breakdown(plans), breakdown(plans, engine="in-memory"))


def test_streaming_divides_exactly_where_in_memory_multiplied_by_the_reciprocal(mixed_precision_pair):
    # the one frame of tests/model where the engines differed (Polars 2.1): in this whatif block the
    # in-memory engine divided the memory-bound bytes by the bandwidth as x * (1 / d), giving
    # 0.049999999999999996, one unit in the last place under the correctly rounded 0.05
    out = mixed_precision_pair
    # fp32 -> fp16 halves the first job's memory-bound bytes: 50 GB at 1000 GB/s; the fp16 job keeps 100 GB;
    # step = compute 4e12 / 40e12 + memory (1w1g: nothing else)
    assert out["memory_bound_s"].to_list() == [100e9 / 1000e9, 100e9 / 1000e9, 50e9 / 1000e9, 100e9 / 1000e9]
    assert out["step_s"][2] == 4e12 / 40e12 + 50e9 / 1000e9
