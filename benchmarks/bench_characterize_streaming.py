"""Benchmark: characterize a SYNTHETIC job table in chunks (issue 17) -- wall time and peak memory.

The same synthetic table as ``bench_characterize.py`` (zoo models, random GPU counts and PS
shards, log-normal durations; not a real trace), read and accounted for, then, as ``ddlscope
characterize --streaming`` does it, :func:`ddlscope.population.streaming.characterize_streaming`
over the built-in 8 scenarios on a :class:`~ddlscope.population.streaming.JobChunks` (the Jobs
table assembled slice by slice, never whole; ``--whole-jobs-table``: assembled whole first, as
before), the job x scenario rows written to a Parquet dataset partitioned by scenario. Prints each
phase's wall time and the peak RSS (``ru_maxrss``; the job population is held, as the trace
reader gives it).

``--engine ray``: the local engine first, then the Ray engine on the same input (a local cluster of
``--num-cpus`` workers, or ``--address``), its start-up timed apart, ``--ray-runs`` times in one
session (the first run's tasks start the worker processes, the later ones find them warm); every
aggregate table, the headline figures and every scenario's rows are checked equal to the local
engine's, bit for bit; prints the wall times, rows/s, the overhead (Ray / local wall time) and the
peak memory of each run: this process's RSS and the sum of the RSS of this process and every
process under it (Ray's GCS, raylet and workers on a local cluster), sampled every 0.2 s (pages
shared between processes, such as Ray's object store, are counted once per process: an upper
bound).

Usage::

    PYTHONPATH=src python benchmarks/bench_characterize_streaming.py [--jobs 1000000] [--chunk-jobs 250000]
        [--whole-jobs-table] [--engine local|ray] [--num-cpus 2] [--address ADDR] [--ray-runs 2]
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import polars as pl
from polars.testing import assert_frame_equal

from bench_characterize import synthetic_table
from ddlscope.ingest import read_population
from ddlscope.population.jobs import assemble_jobs
from ddlscope.population.streaming import JobChunks, characterize_streaming
from ddlscope.population.workloads import WorkloadLibrary
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.specs.scenario import BUILTIN_SCENARIOS

SERVER = "pai-v100-nvlink-8"


def peak_gib() -> float:
    """Peak resident set size of this process so far, GiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


class TreeRss:
    """Peak RSS, GiB, of this process and of the sum over it and every process under it, sampled
    every ``interval_s`` seconds in a thread while the ``with`` block runs (needs psutil, which Ray
    installs; without it both stay None)."""

    def __init__(self, interval_s: float = 0.2) -> None:
        self.interval_s = interval_s
        self.own_gib: float | None = None
        self.tree_gib: float | None = None
        self._stop = threading.Event()

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        while True:
            own = tree = me.memory_info().rss
            for child in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):  # ended meanwhile
                    tree += child.memory_info().rss
            self.own_gib = max(self.own_gib or 0.0, own / 2**30)
            self.tree_gib = max(self.tree_gib or 0.0, tree / 2**30)
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> TreeRss:
        try:
            import psutil  # noqa: F401
        except ImportError:
            return self
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if hasattr(self, "_thread"):
            self._thread.join()

    def __str__(self) -> str:
        if self.tree_gib is None:
            return "peak RSS not sampled (no psutil)"
        return f"peak RSS {self.own_gib:.2f} GiB this process, {self.tree_gib:.2f} GiB with the processes under it"


def check_identical(local, on_ray) -> None:
    """Every aggregate table, headline figure and scenario's rows equal, bit for bit (AssertionError if not)."""
    for name in ("shares", "bottlenecks", "speedups", "excluded"):
        assert_frame_equal(getattr(local, name), getattr(on_ray, name), check_exact=True)
    assert local.headline == on_ray.headline, "headline figures differ"
    assert (local.chunks, local.jobs) == (on_ray.chunks, on_ray.jobs)
    for name in local.scenarios:
        assert_frame_equal(local.scan(name).collect(), on_ray.scan(name).collect(), check_exact=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--chunk-jobs", type=int, default=250_000)
    ap.add_argument("--whole-jobs-table", action="store_true", help="assemble the whole Jobs table first")
    ap.add_argument("--engine", choices=("local", "ray"), default="local",
                    help="ray: the local engine, then the Ray engine on the same input, compared")
    ap.add_argument("--num-cpus", type=int, default=2, help="workers of the local Ray cluster")
    ap.add_argument("--address", default=None, help="an existing Ray cluster instead of a local one")
    ap.add_argument("--ray-runs", type=int, default=2, help="Ray runs in one session (the first starts the workers)")
    args = ap.parse_args()
    scenarios = list(BUILTIN_SCENARIOS.values())
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "synthetic_jobs.parquet"
        synthetic_table(args.jobs, trace)
        t0 = t = time.perf_counter()
        population, _ = read_population(trace, "csv", {"job_id": "job", "model": "model", "num_gpus": "gpus",
                                                       "num_ps": "ps", "duration_s": "seconds"})
        whole = None
        if args.whole_jobs_table:
            whole, population = assemble_jobs(population, WorkloadLibrary(), builtin_catalog(), default_server=SERVER)
            print(f"read, account, attach: {time.perf_counter() - t:.1f} s, peak RSS {peak_gib():.2f} GiB")
        else:
            print(f"read and account: {time.perf_counter() - t:.1f} s, peak RSS {peak_gib():.2f} GiB "
                  "(the Jobs table is attached chunk by chunk below)")

        def source() -> pl.DataFrame | JobChunks:
            if whole is not None:
                return whole
            return JobChunks(population, WorkloadLibrary(), builtin_catalog(), chunk_jobs=args.chunk_jobs,
                             default_server=SERVER)

        t = time.perf_counter()
        with TreeRss() as mem:
            sc = characterize_streaming(source(), scenarios, Path(tmp) / "results", chunk_jobs=args.chunk_jobs)
        dt = time.perf_counter() - t
        rows = sc.jobs * len(sc.scenarios)
        print(f"streamed characterize (local engine): {sc.jobs:,} jobs x {len(sc.scenarios)} scenarios = {rows:,} "
              f"rows in {sc.chunks} chunks: {dt:.1f} s ({rows / dt:,.0f} job-scenario rows/s), peak RSS "
              f"{peak_gib():.2f} GiB (ru_maxrss; sampled: {mem})")
        if args.engine == "ray":
            from ddlscope.engine import ray_cpus, ray_session

            t = time.perf_counter()
            with ray_session(args.address, args.num_cpus) as ray:
                started = time.perf_counter() - t
                print(f"Ray cluster start ({ray_cpus(ray)} CPUs, {args.address or 'local'}): {started:.1f} s")
                for run in range(1, args.ray_runs + 1):
                    t = time.perf_counter()
                    with TreeRss() as ray_mem:
                        on_ray = characterize_streaming(source(), scenarios, Path(tmp) / "results-ray",
                                                        chunk_jobs=args.chunk_jobs, engine="ray")
                    ray_dt = time.perf_counter() - t
                    check_identical(sc, on_ray)
                    workers = "the workers started by its first tasks" if run == 1 else "warm workers"
                    print(f"streamed characterize (ray engine, run {run}, {workers}): {on_ray.jobs:,} jobs x "
                          f"{len(on_ray.scenarios)} scenarios in {on_ray.chunks} chunks: {ray_dt:.1f} s "
                          f"({rows / ray_dt:,.0f} job-scenario rows/s), {ray_mem}; ray / local wall time "
                          f"{ray_dt / dt:.2f}" + (f" ({(ray_dt + started) / dt:.2f} with the cluster start)"
                                                 if run == 1 else ""))
            print("every table, headline figure and scenario row of every Ray run identical to the local engine's")
        print(f"end to end: {time.perf_counter() - t0:.1f} s; mean comm share {sc.headline['mean_comm_share']:.4f}")


if __name__ == "__main__":
    main()
