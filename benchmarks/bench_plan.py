"""Plan-search speed (issue 16): the whole valid plan space of MPT-70B on 1,024 A100s, and the
step-time model's rate on a million plans.

Part 1: :func:`ddlscope.model.plan.search` for MPT-70B (``mpt_model_shapes.csv``), sequence 2,048, a
global batch of 2,048 sequences, 1,024 GPUs of ``dgx-a100`` with 8 x 200 Gb/s RoCE: plans, the time to
build them (workloads, op pricing of the distinct micro-batch x recomputation workloads, the table)
and to evaluate them all (the goal: under 5 s in all). Part 2: the same plan table repeated to 1 M rows
(a larger space: the same columns, every row a valid plan) through the step-time model once, plans
per second (the goal: >= 1 M/s).

Run: ``PYTHONPATH=src python benchmarks/bench_plan.py [--data /work/shared/data] [--rows 1000000]
[--engine streaming|in-memory|auto]``
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import polars as pl

from ddlscope.model.plan import plan_jobs, search
from ddlscope.model.step_time import ENGINE, breakdown_lazy, collect
from ddlscope.profile.llm import mpt_configs
from ddlscope.shared_data import find_shared_data
from ddlscope.specs.catalog import builtin_catalog


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--engine", choices=("auto", "streaming", "in-memory"), default=ENGINE,
                    help=f"Polars engine that collects the model (default: the library's, {ENGINE})")
    args = ap.parse_args()
    data = args.data or find_shared_data()
    if data is None:
        raise SystemExit("no shared data folder found; pass --data")
    cfg = mpt_configs(data / "llm_foundry_mpt" / "mpt_model_shapes.csv", seq_len=2048)["70b"]
    system = builtin_catalog().system("dgx-a100", nic="roce-200g")
    t0 = time.perf_counter()
    ranked, t = search(cfg, 1024, system, 2048)
    total = time.perf_counter() - t0
    print(f"MPT-70B on 1,024 GPUs: {t['plans']:.0f} plans; build {t['build_s']:.3f} s, evaluate "
          f"{t['evaluate_s']:.3f} s, search in all {total:.3f} s; best: "
          + ", ".join(f"{k}={ranked[k][0]}" for k in ("architecture", "sharding", "tp", "pp", "virtual_stages",
                                                      "micro_batch", "recompute"))
          + f", {ranked['tokens_per_s_per_gpu'][0]:.0f} tokens/s/GPU, MFU {ranked['mfu'][0]:.1%}")
    jobs = plan_jobs(cfg, 1024, system, 2048)
    reps = -(-args.rows // jobs.height)
    big = pl.concat([jobs] * reps).head(args.rows).with_columns(job_id=pl.int_range(pl.len(), dtype=pl.Int64))
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        out = collect(breakdown_lazy(big).select("job_id", "step_s", "samples_per_s"), args.engine)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    rate = out.height / best / 1e6
    print(f"step-time model on {out.height:,} plans: {best:.3f} s (best of 3) = {rate:.2f} M plans/s "
          f"(engine {args.engine}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})")


if __name__ == "__main__":
    main()
