"""Throughput of the vectorised step-time model: 1 M jobs x 10 scenarios.

Goal (issue 2): at least 10 million job-scenario rows per second on the 2-core development machine.

Prints three figures:
- model only: ``breakdown`` over the already stacked 10 M-row Jobs x Scenarios table;
- what-if end to end: ``whatif`` (apply 10 scenarios + model + per-job speedup) from the 1 M jobs;
- with ``--priced``: model only again on a table whose rows carry op-level prices
  (:func:`ddlscope.model.compute.price_jobs` with a three-op table for the example workload,
  priced once and joined): the population path of issue 14;
- peak resident memory of the process.

Run: ``python benchmarks/bench_model.py [--jobs 1000000] [--overlap scheduled|none|full|F]
[--engine streaming|in-memory|auto]`` (the scheduled overlap, the default since issue 15, costs
about twice the fraction model's passes; the engine is Polars', default the library's
:data:`ddlscope.model.step_time.ENGINE`, streaming). The load average is printed with the rows:
the machine is shared, report it beside every figure.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import numpy as np
import polars as pl

from ddlscope.model.jobs import JOB_SCHEMA, job_row
from ddlscope.model.scenarios import apply_scenario, whatif
from ddlscope.model.step_time import ENGINE, breakdown_lazy, collect
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.specs.examples import example_workload
from ddlscope.specs.scenario import BUILTIN_SCENARIOS, Scenario
from ddlscope.specs.traits import PAI_ARCHITECTURES as ARCHITECTURES  # the six of the PAI study: the benchmark's mix


def random_jobs(n: int, seed: int = 0, overlap: str = "scheduled") -> pl.DataFrame:
    """``n`` random jobs on the PAI NVLink server: every PAI architecture, 1-64 GPUs, varied workloads."""
    rng = np.random.default_rng(seed)
    cat = builtin_catalog()
    template = job_row(example_workload(), Architecture(kind="1w1g"), cat.system("pai-v100-nvlink-8"), overlap=overlap)
    frame = pl.DataFrame([template], schema={k: t for k, (t, _) in JOB_SCHEMA.items()})
    jobs = frame.select(pl.all().gather(np.zeros(n, dtype=np.int64)))
    kind = rng.integers(0, len(ARCHITECTURES), n)
    gpus = 2 ** rng.integers(1, 7, n)  # 2..64
    arch = np.array(ARCHITECTURES)[kind]
    single = np.isin(arch, ["1wng", "allreduce_local"])
    gpus = np.where(arch == "1w1g", 1, np.where(single, np.minimum(gpus, 8), gpus))
    servers = np.where(np.isin(arch, ["1w1g", "1wng", "allreduce_local"]), 1, np.maximum(1, -(-gpus // 8)))
    servers = np.where((arch == "allreduce_cluster") & (servers < 2), 2, servers)
    scale = rng.lognormal(0, 1, n)
    return jobs.with_columns(
        job_id=pl.Series(np.arange(n)),
        architecture=pl.Series(arch).cast(JOB_SCHEMA["architecture"][0]),
        num_workers=pl.Series(np.where(arch == "1wng", 1, gpus)),
        gpus_per_worker=pl.Series(np.where(arch == "1wng", gpus, 1)),
        num_ps=pl.Series(np.where(arch == "ps_worker", np.maximum(1, gpus // 4), 0)),
        num_servers=pl.Series(servers),
        compute_bound_flops=pl.col("compute_bound_flops") * pl.Series(scale),
        memory_bound_bytes=pl.col("memory_bound_bytes") * pl.Series(rng.lognormal(0, 1, n)),
        dense_param_bytes=pl.col("dense_param_bytes") * pl.Series(rng.lognormal(0, 1.5, n)),
    )


SCENARIOS = [
    *BUILTIN_SCENARIOS.values(),
    Scenario(name="ib-hdr", nic="ib-hdr"),
    Scenario(name="to-allreduce-cluster", only_architectures=("ps_worker",), architecture="allreduce_cluster"),
]


def _time_priced(stacked: pl.DataFrame, repeat: int, engine: str) -> None:
    """Model-only throughput on ``stacked`` with op-level prices joined (every row priced)."""
    from ddlscope.model.compute import price_jobs

    ops = pl.DataFrame({"phase": ["forward", "forward", "backward"], "op": ["aten.mm", "aten.relu", "aten.mm"],
                        "dtype": ["float32"] * 3, "flops": [1e12, 1e6, 2e12], "total_bytes": [10**9, 2 * 10**9, 10**9],
                        "class_by_type": ["compute_bound", "memory_bound", "compute_bound"]})
    t = time.perf_counter()
    priced = price_jobs(stacked, {stacked["workload"][0]: ops})
    join_s = time.perf_counter() - t
    times = []
    for _ in range(repeat):
        out = None
        t = time.perf_counter()
        out = collect(breakdown_lazy(priced), engine)
        times.append(time.perf_counter() - t)
    assert out["host_s"].min() > 0
    best, median = min(times), float(np.median(times))
    print(f"model only, op-priced rows: pricing + join {join_s:.2f} s once; best {best:.2f} s = "
          f"{priced.height / best / 1e6:.1f} M rows/s, median {median:.2f} s = "
          f"{priced.height / median / 1e6:.1f} M rows/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--priced", action="store_true", help="also time the op-priced path")
    ap.add_argument("--overlap", default="scheduled", help="overlap policy of every job (default: scheduled)")
    ap.add_argument("--engine", choices=("auto", "streaming", "in-memory"), default=ENGINE,
                    help=f"Polars engine that collects the model (default: the library's, {ENGINE})")
    args = ap.parse_args()
    jobs = random_jobs(args.jobs, overlap=args.overlap)
    stacked = pl.concat([apply_scenario(jobs, s) for s in SCENARIOS], how="vertical_relaxed").collect()
    rows = stacked.height
    print(f"jobs: {args.jobs:,}  scenarios: {len(SCENARIOS)}  job-scenario rows: {rows:,}  engine: {args.engine}  "
          f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    times = []
    for _ in range(args.repeat):
        out = None  # the previous result is freed first: one output in memory at a time
        t = time.perf_counter()
        out = collect(breakdown_lazy(stacked), args.engine)
        times.append(time.perf_counter() - t)
    assert out.height == rows and out["step_s"].null_count() == 0
    best, median = min(times), float(np.median(times))
    print(f"model only (breakdown of the stacked table): best {best:.2f} s = {rows / best / 1e6:.1f} M rows/s, "
          f"median {median:.2f} s = {rows / median / 1e6:.1f} M rows/s (of {args.repeat} runs)")
    del out
    if args.priced:
        _time_priced(stacked, args.repeat, args.engine)

    times = []
    for _ in range(args.repeat):
        res = None
        t = time.perf_counter()
        res = whatif(jobs, SCENARIOS, engine=args.engine)
        times.append(time.perf_counter() - t)
    total = res.height
    best, median = min(times), float(np.median(times))
    print(f"what-if end to end (apply scenarios + model + speedup, incl. baseline): best {best:.2f} s = "
          f"{total / best / 1e6:.1f} M rows/s, median {median:.2f} s = {total / median / 1e6:.1f} M rows/s over "
          f"{total:,} rows (of {args.repeat} runs)")
    print(f"peak resident memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2:.2f} GiB")


if __name__ == "__main__":
    main()
