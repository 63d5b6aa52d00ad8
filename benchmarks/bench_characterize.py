"""End to end: characterize 1 M jobs x 8 scenarios without figures (issue 4 goal: under 30 s).

A *synthetic* job table (clearly not a real trace) of 1 M jobs is written as Parquet: zoo models,
every architecture, 1-64 GPUs, random durations. Then the same path as ``ddlscope characterize
TRACE --no-figures``: read through the generic table reader (every row accounted for), attach
workloads (shipped zoo profiles) and systems, run Jobs x (baseline + 8 built-in scenarios) through
the model, aggregate, and write the per-job table (baseline breakdown + every scenario's speedup)
as Parquet. Prints each stage's wall time and
the peak resident memory.

Run: ``python benchmarks/bench_characterize.py [--jobs 1000000]``
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from ddlscope.ingest import read_population
from ddlscope.population.characterize import characterize
from ddlscope.population.jobs import assemble_jobs
from ddlscope.population.workloads import WorkloadLibrary
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.specs.scenario import BUILTIN_SCENARIOS

MODELS = ["resnet18", "resnet50", "transformer_nmt", "bert_base", "bert_large", "gpt2", "mind", "dlrm",
          "wav2vec2_base"]


def synthetic_table(n: int, path: Path, seed: int = 0) -> None:
    """Write ``n`` synthetic jobs to ``path`` (Parquet)."""
    rng = np.random.default_rng(seed)
    gpus = np.where(rng.random(n) < 0.5, 1, 2 ** rng.integers(1, 7, n))
    ps = np.where((gpus > 1) & (rng.random(n) < 0.4), np.maximum(1, gpus // 4), 0)
    pl.DataFrame({
        "job": np.char.add("job-", np.arange(n).astype(str)),
        "model": np.array(MODELS)[rng.integers(0, len(MODELS), n)],
        "gpus": gpus,
        "ps": ps,
        "seconds": rng.lognormal(7, 2, n).round(0),
    }).write_parquet(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    args = ap.parse_args()
    scenarios = list(BUILTIN_SCENARIOS.values())
    assert len(scenarios) == 8
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "synthetic_jobs.parquet"
        synthetic_table(args.jobs, trace)
        times: dict[str, float] = {}
        t0 = t = time.perf_counter()
        population, _ = read_population(trace, "csv", {"job_id": "job", "model": "model", "num_gpus": "gpus",
                                                             "num_ps": "ps", "duration_s": "seconds"})
        times["read and account for every job"] = time.perf_counter() - t
        t = time.perf_counter()
        jobs, population = assemble_jobs(population, WorkloadLibrary(), builtin_catalog(),
                                         default_server="pai-v100-nvlink-8")
        times["attach workloads, systems, placements"] = time.perf_counter() - t
        t = time.perf_counter()
        ch = characterize(jobs, scenarios)
        times[f"model: {jobs.height:,} jobs x {len(scenarios) + 1} scenarios + aggregates"] = time.perf_counter() - t
        t = time.perf_counter()
        ch.per_job().write_parquet(Path(tmp) / "jobs.parquet", compression="lz4")
        times["write per-job results (Parquet, one row per job)"] = time.perf_counter() - t
        total = time.perf_counter() - t0
    print(f"synthetic population: {population.height:,} jobs, {ch.baseline.height:,} evaluated, "
          f"{ch.results.height:,} job-scenario rows")
    for stage, secs in times.items():
        print(f"  {stage:<55s} {secs:7.2f} s")
    print(f"  {'total (end to end, no figures)':<55s} {total:7.2f} s")
    print(f"peak resident memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2:.2f} GiB")


if __name__ == "__main__":
    main()
