"""Reading and attributing a PAI-2020-schema trace of 1 M jobs (SYNTHETIC data).

The real PAI 2020 tables (1.26 M jobs, 7.5 M instances, hundreds of MB compressed) are not
available here, so this script GENERATES A SYNTHETIC TRACE in the exact schema (headerless CSVs
named ``pai_<table>.csv``): the job mix below is invented for load, not measured. It then reads
it with ``ddlscope.ingest.read_population`` in a child process and prints the child's wall time
and peak resident memory (so that generation does not count).

Synthetic job mix (per job, drawn with a fixed seed): 70 % one instance with one GPU (of which a
quarter request 50 % of a GPU), 10 % one instance with 2/4/8 GPUs, 12 % PS/worker (1-4 PS, 2-16
workers), 8 % multi-worker all-reduce (2-16 workers x 1-8 GPUs); GPU types V100 / V100M32 / P100
/ T4 / MISC; 9 % of the jobs carry a workload tag (as the trace's README says of its instances);
1,800 machines of 8 GPUs (T4 and P100 machines 2). One sensor row per worker instance.

Run: ``python benchmarks/bench_ingest.py [--jobs 1000000] [--dir DIR] [--keep]``
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

GPU_TYPES = np.array(["V100", "V100M32", "P100", "T4", "MISC"])
TAGS = np.array(["bert", "ctr", "graphlearn", "resnet", "nmt", "inception", "xlnet", "vgg"])


def generate(directory: Path, n_jobs: int, seed: int = 0) -> dict[str, int]:
    """Write a synthetic PAI-2020-schema trace of ``n_jobs`` jobs into ``directory``; return the
    rows per table."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    ids = np.arange(n_jobs)
    kind = rng.choice(4, size=n_jobs, p=[0.70, 0.10, 0.12, 0.08])  # 1 GPU, 1 x n GPUs, PS/worker, all-reduce
    gpu_type = GPU_TYPES[rng.choice(5, size=n_jobs, p=[0.45, 0.15, 0.15, 0.15, 0.10])]
    start = rng.integers(1, 5_000_000, n_jobs).astype(np.float64)
    run = np.ceil(rng.lognormal(7.0, 1.5, n_jobs))
    workers = np.where(kind >= 2, rng.integers(2, 17, n_jobs), 1)
    plan = np.select(
        [kind == 0, kind == 1, kind == 2, kind == 3],
        [np.where(rng.random(n_jobs) < 0.25, 50.0, 100.0), 100.0 * rng.choice([2, 4, 8], n_jobs), 100.0,
         100.0 * rng.choice([1, 2, 4, 8], n_jobs)],
    )
    n_ps = np.where(kind == 2, rng.integers(1, 5, n_jobs), 0)
    name = pl.Series("job_name", ids).cast(pl.String).str.zfill(12).str.replace(r"^", "j")
    inst_id = "i" + name.str.slice(1)
    status = np.array(["Terminated", "Failed", "Running", "Waiting"])[rng.choice(4, n_jobs, p=[.8, .12, .05, .03])]
    jobs = pl.DataFrame({
        "job_name": name, "inst_id": inst_id, "user": pl.Series(ids % 5000).cast(pl.String), "status": status,
        "start_time": start, "end_time": start + run + 30,
    })
    task_name = np.select([kind == 0, kind == 1, kind == 2], ["tensorflow", "worker", "worker"], "PyTorchWorker")
    tasks = pl.DataFrame({
        "job_name": name, "task_name": task_name, "inst_num": workers.astype(np.float64), "status": "Terminated",
        "start_time": start + 10, "end_time": start + 10 + run, "plan_cpu": 600.0, "plan_mem": 29.296875,
        "plan_gpu": plan, "gpu_type": gpu_type,
    })
    ps = pl.DataFrame({
        "job_name": name, "task_name": "ps", "inst_num": n_ps.astype(np.float64), "status": "Terminated",
        "start_time": start + 10, "end_time": start + 10 + run, "plan_cpu": 800.0, "plan_mem": 20.0,
        "plan_gpu": None, "gpu_type": None,
    }).filter(pl.col("inst_num") > 0)
    tasks = pl.concat([tasks, ps], how="vertical_relaxed")
    # one instance row per worker instance, machines drawn from 1,800
    machine = rng.integers(0, 1800, n_jobs)
    inst = tasks.filter(pl.col("task_name") != "ps").with_columns(
        _m=pl.Series(machine), _w=pl.col("inst_num").cast(pl.Int64)
    ).select(
        "job_name", "task_name", "_m", "start_time", "end_time",
        _k=pl.int_ranges(0, pl.col("_w")),
    ).explode("_k")
    same_machine = (pl.col("_k") // 8)  # up to 8 instances share a machine
    inst = inst.select(
        "job_name", "task_name",
        inst_name=pl.col("job_name") + "_" + pl.col("_k").cast(pl.String),
        worker_name=pl.lit("w") + pl.col("job_name") + "_" + pl.col("_k").cast(pl.String),
        inst_id=pl.lit("i") + pl.col("job_name").str.slice(1),
        status=pl.lit("Terminated"),
        start_time=pl.col("start_time"), end_time=pl.col("end_time"),
        machine=pl.lit("m") + ((pl.col("_m") + same_machine) % 1800).cast(pl.String),
    )
    tag_mask = rng.random(n_jobs) < 0.09
    tags = pl.DataFrame({
        "inst_id": inst_id, "user": jobs["user"], "gpu_type_spec": np.where(rng.random(n_jobs) < 0.3, gpu_type, ""),
        "group": pl.Series(ids % 20000).cast(pl.String), "workload": np.where(tag_mask, TAGS[ids % len(TAGS)], ""),
    })
    m_type = GPU_TYPES[np.arange(1800) % 5]
    spec = pl.DataFrame({
        "machine": [f"m{i}" for i in range(1800)], "gpu_type": m_type, "cap_cpu": 96, "cap_mem": 512,
        "cap_gpu": np.where(np.isin(m_type, ["T4", "P100"]), 2, 8),
    })
    n_inst = inst.height
    sensor = inst.select(
        "job_name", "task_name", "worker_name", "inst_id", "machine", gpu_name=pl.lit("/dev/nvidia0"),
        cpu_usage=pl.lit(150.0), gpu_wrk_util=pl.Series(rng.uniform(0, 100, n_inst)),
        avg_mem=pl.lit(2.0), max_mem=pl.lit(3.0), avg_gpu_wrk_mem=pl.lit(1.5),
        max_gpu_wrk_mem=pl.Series(rng.uniform(0.5, 30, n_inst)), read=pl.lit(1e6), write=pl.lit(1e6),
        read_count=pl.lit(100.0), write_count=pl.lit(100.0),
    )
    out = {"pai_job_table": jobs, "pai_task_table": tasks, "pai_instance_table": inst,
           "pai_group_tag_table": tags, "pai_machine_spec": spec, "pai_sensor_table": sensor}
    for stem, frame in out.items():
        frame.write_csv(directory / f"{stem}.csv", include_header=False)
    return {stem: frame.height for stem, frame in out.items()}


def read(directory: Path) -> None:
    """Child process: read the trace, print one JSON line of figures."""
    from ddlscope.ingest import read_population

    t = time.perf_counter()
    population, report = read_population(directory)
    wall = time.perf_counter() - t
    print(json.dumps({
        "wall_s": wall,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,
        "jobs": population.height,
        "attributed": report.attributed_jobs,
        "by_reason": dict(zip(report.summary()["reason"], report.summary()["jobs"], strict=True)),
    }))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=None, help="where to write the synthetic trace (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the synthetic trace")
    ap.add_argument("--read", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.read is not None:
        read(args.read)
        return
    directory = args.dir or Path(tempfile.mkdtemp(prefix="ddlscope-bench-ingest-"))
    try:
        t = time.perf_counter()
        rows = generate(directory, args.jobs)
        size = sum(f.stat().st_size for f in directory.iterdir()) / 1e6
        print(f"SYNTHETIC PAI-2020-schema trace: {args.jobs:,} jobs; rows per table: "
              + ", ".join(f"{k.removeprefix('pai_')} {v:,}" for k, v in rows.items())
              + f"; {size:,.0f} MB of CSV; generated in {time.perf_counter() - t:.1f} s")
        child = subprocess.run([sys.executable, __file__, "--read", str(directory)], capture_output=True, text=True,
                               check=True)
        figures = json.loads(child.stdout.strip().splitlines()[-1])
        print(f"read_population (read + validate + join + attribute): {figures['wall_s']:.2f} s wall, "
              f"peak resident memory {figures['peak_rss_gib']:.2f} GiB (child process)")
        print(f"jobs: {figures['jobs']:,}, attributed: {figures['attributed']:,}; by reason: {figures['by_reason']}")
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
