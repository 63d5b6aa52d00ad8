"""Benchmark: characterize a SYNTHETIC job table in chunks (issue 17) -- wall time and peak memory.

The same synthetic table as ``bench_characterize.py`` (zoo models, random GPU counts and PS
shards, log-normal durations; not a real trace), read and accounted for, then, as ``ddlscope
characterize --streaming`` does it, :func:`ddlscope.population.streaming.characterize_streaming`
over the built-in 8 scenarios on a :class:`~ddlscope.population.streaming.JobChunks` (the Jobs
table assembled slice by slice, never whole; ``--whole-jobs-table``: assembled whole first, as
before), the job x scenario rows written to a Parquet dataset partitioned by scenario. Prints each
phase's wall time and the peak RSS (``ru_maxrss``; the job population is held, as the trace
reader gives it).

Usage::

    PYTHONPATH=src python benchmarks/bench_characterize_streaming.py [--jobs 1000000] [--chunk-jobs 250000]
        [--whole-jobs-table]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_characterize import synthetic_table
from ddlscope.ingest import read_population
from ddlscope.population.jobs import assemble_jobs
from ddlscope.population.streaming import JobChunks, characterize_streaming
from ddlscope.population.workloads import WorkloadLibrary
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.specs.scenario import BUILTIN_SCENARIOS


def peak_gib() -> float:
    """Peak resident set size of this process so far, GiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--chunk-jobs", type=int, default=250_000)
    ap.add_argument("--whole-jobs-table", action="store_true", help="assemble the whole Jobs table first")
    args = ap.parse_args()
    scenarios = list(BUILTIN_SCENARIOS.values())
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "synthetic_jobs.parquet"
        synthetic_table(args.jobs, trace)
        t0 = t = time.perf_counter()
        population, _ = read_population(trace, "csv", {"job_id": "job", "model": "model", "num_gpus": "gpus",
                                                       "num_ps": "ps", "duration_s": "seconds"})
        if args.whole_jobs_table:
            jobs, population = assemble_jobs(population, WorkloadLibrary(), builtin_catalog(),
                                             default_server="pai-v100-nvlink-8")
            print(f"read, account, attach: {time.perf_counter() - t:.1f} s, peak RSS {peak_gib():.2f} GiB")
        else:
            jobs = JobChunks(population, WorkloadLibrary(), builtin_catalog(), chunk_jobs=args.chunk_jobs,
                             default_server="pai-v100-nvlink-8")
            print(f"read and account: {time.perf_counter() - t:.1f} s, peak RSS {peak_gib():.2f} GiB "
                  "(the Jobs table is attached chunk by chunk below)")
        t = time.perf_counter()
        sc = characterize_streaming(jobs, scenarios, Path(tmp) / "results", chunk_jobs=args.chunk_jobs)
        dt = time.perf_counter() - t
        rows = sc.jobs * len(sc.scenarios)
        print(f"streamed characterize: {sc.jobs:,} jobs x {len(sc.scenarios)} scenarios = {rows:,} rows in "
              f"{sc.chunks} chunks: {dt:.1f} s ({rows / dt:,.0f} job-scenario rows/s), peak RSS {peak_gib():.2f} GiB")
        print(f"end to end: {time.perf_counter() - t0:.1f} s; mean comm share {sc.headline['mean_comm_share']:.4f}")


if __name__ == "__main__":
    main()
