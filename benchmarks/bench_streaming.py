"""Benchmark: streamed ``rpc dissect`` on a SYNTHETIC log written as Parquet partitions (issue 17).

The benchmark writes its own log (:func:`ddlscope.rpc.synthetic.synthetic_rpc_log`, synthetic, not
a measurement: 100 workers, 20 servers, a 60 ms step so that every server's FIFO queue drains --
the run prints how many servers have a median server queue of 0) as one Parquet file per batch of
``--batch`` RPCs (each file holds every server's RPCs of its time window, so partitions cut across
files), then times :func:`ddlscope.rpc.streaming.dissect_streaming` on the folder and prints the
peak RSS of the process (``ru_maxrss``) and rows/s. With ``--duckdb`` (and duckdb installed) the
same decomposition -- per-stage count, mean, max and p50/p90/p99/p99.9 per op -- runs as one
DuckDB query over the same files, timed in the same run (DuckDB's ``quantile_cont`` is the
same type-7 interpolation; its per-op figures equal ddlscope's ``op`` rows to 1e-16 relative on
2 M RPCs). That query computes one of the five groupings ddlscope does, and no checks, in-flight
counts or fit: ``--duckdb-groupings`` also times the all/op/server/connection groupings as one
``GROUPING SETS`` query. ``--ray`` also runs the streamed passes on a local 2-worker Ray
cluster and checks every figure equals the single-process one.

Usage::

    PYTHONPATH=src python benchmarks/bench_streaming.py [--rows 2000000] [--batch 500000]
        [--partition-rows 2000000] [--concurrent-partitions 1] [--duckdb] [--duckdb-groupings] [--ray]
        [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import polars as pl

from ddlscope.rpc.schema import STAGE_BOUNDS
from ddlscope.rpc.streaming import dissect_streaming
from ddlscope.rpc.synthetic import synthetic_rpc_log

STEP_MS = 60.0
"""Step period of the synthetic workers: at the generator's default 15 ms, 100 workers keep one of
20 servers busy (its queue empty for 0.4 % of RPCs, p99 latency 0.4 s); at 60 ms every server's
queue is empty for at least 60 % of its RPCs (measured on 500 000 RPCs)."""


def peak_gib() -> float:
    """Peak resident set size of this process so far, GiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def cpu_s() -> float:
    """User + system CPU seconds of this process so far (every thread)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def write_log(folder: Path, rows: int, batch: int) -> None:
    """``rows`` synthetic RPCs in files of ``batch`` rows (independent seeds, ids offset per file)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, start in enumerate(range(0, rows, batch)):
        n = min(batch, rows - start)
        f = synthetic_rpc_log(n, workers=100, servers=20, step_ms=STEP_MS, seed=i).with_columns(
            (pl.col("rpc_id") + start).alias("rpc_id"), (pl.col("iteration") + 10_000 * i).alias("iteration"))
        f.write_parquet(folder / f"part-{i:05d}.parquet", row_group_size=100_000)


def duckdb_query(folder: Path, groupings: bool = False, memory_limit: str | None = None) -> tuple[float, int]:
    """The decomposition per op as one DuckDB query over the files: (seconds, result rows).

    With ``groupings``: the same statistics for the groupings of ddlscope's percentile table that
    need no derived column -- all RPCs, op, server, connection -- as one ``GROUPING SETS`` query
    (ddlscope's fifth grouping, the iteration quarter, needs each worker iteration's bounds, and its
    concurrency fit needs in-flight counts per RPC: neither is in the query)."""
    import duckdb

    stages = {s: f"{b} - {a}" for s, (a, b) in STAGE_BOUNDS.items()}
    stages["network"] = ("(client_recv_end_ns - client_send_end_ns) - (server_send_end_ns - server_recv_start_ns)")
    stages["latency"] = "client_done_ns - client_issue_ns"
    aggs = []
    for s, e in stages.items():
        aggs += [f"avg({e}) AS {s}_mean", f"max({e}) AS {s}_max"]
        aggs += [f"quantile_cont({e}, {q}) AS {s}_q{int(q * 1000)}" for q in (0.5, 0.9, 0.99, 0.999)]
    sql = (f"SELECT op, count(*) AS rpcs, {', '.join(aggs)} FROM read_parquet('{folder}/*.parquet') "
           "GROUP BY op ORDER BY op")
    if groupings:
        sql = (f"SELECT op, server_id, connection_id, count(*) AS rpcs, {', '.join(aggs)} "
               f"FROM read_parquet('{folder}/*.parquet') "
               "GROUP BY GROUPING SETS ((), (op), (server_id), (connection_id))")
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    # its spill files go to the system's temporary folder, not to .tmp/ in the working folder
    con.execute(f"SET temp_directory = '{Path(tempfile.gettempdir()) / 'ddlscope-bench-duckdb'}'")
    if memory_limit:  # DuckDB spills what it can to its temporary directory past this
        con.execute(f"SET memory_limit = '{memory_limit}'")
    t = time.perf_counter()
    out = con.sql(sql).fetchall()
    return time.perf_counter() - t, len(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=500_000, help="RPCs per Parquet file")
    ap.add_argument("--partition-rows", type=int, default=2_000_000)
    ap.add_argument("--duckdb", action="store_true", help="time the same decomposition as one DuckDB query")
    ap.add_argument("--duckdb-groupings", action="store_true",
                    help="also time DuckDB on the all/op/server/connection groupings (GROUPING SETS)")
    ap.add_argument("--duckdb-memory", help="DuckDB's memory_limit (e.g. 6GB; default DuckDB's: 80 %% of RAM)")
    ap.add_argument("--concurrent-partitions", type=int, default=1,
                    help="partitions at a time in threads (dissect_streaming's concurrent_partitions)")
    ap.add_argument("--ray", action="store_true", help="also run on a local 2-worker Ray cluster and compare")
    ap.add_argument("--keep", type=Path, help="write (or reuse) the log in this folder instead of a temporary one")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp) / "log"
        if not folder.exists() or not any(folder.glob("*.parquet")):
            t = time.perf_counter()
            write_log(folder, args.rows, args.batch)
            print(f"wrote {args.rows:,} synthetic RPCs in {time.perf_counter() - t:.1f} s "
                  f"({sum(f.stat().st_size for f in folder.glob('*.parquet')) / 2**20:.0f} MiB of Parquet)")
        base_rss = peak_gib()
        print(f"peak RSS before the dissection (the generator's): {base_rss:.2f} GiB")
        t, cpu = time.perf_counter(), cpu_s()
        d = dissect_streaming(folder, partition_rows=args.partition_rows,
                              concurrent_partitions=args.concurrent_partitions)
        wall, cpu = time.perf_counter() - t, cpu_s() - cpu
        print(f"streamed dissect: {d.rpcs:,} RPCs, {d.partitions} partitions ({d.concurrent_partitions} at a "
              f"time), wall {wall:.1f} s (CPU user+sys "
              f"{cpu:.1f} s), {d.rpcs / wall:,.0f} rows/s, peak RSS {peak_gib():.2f} GiB, "
              f"load {os.getloadavg()[0]:.1f}")
        lat = d.summary["latency_us"]
        queue = d.percentiles.filter((pl.col("grouping") == "server") & (pl.col("stage") == "server_queue"))
        print(f"  servers whose median server queue is 0 (the queue drains): "
              f"{queue.filter(pl.col('p50_us') == 0).height}/{queue.height}")
        print(f"  latency p50 {lat['p50']:.1f} µs, p99 {lat['p99']:.1f} µs (exact); dominant stage "
              f"{d.summary['dominant_stage']}")
        if args.duckdb:
            try:
                secs, n = duckdb_query(folder, memory_limit=args.duckdb_memory)
                print(f"duckdb, one query (per-op count/mean/max/4 percentiles of 9 stages): {secs:.1f} s "
                      f"({n} rows); ddlscope/duckdb wall ratio {wall / secs:.2f} (ddlscope also computes the "
                      "server, connection and iteration-phase groupings and the concurrency fit)")
            except ImportError:
                print("duckdb not installed: comparison skipped")
        if args.duckdb_groupings:
            try:
                secs, n = duckdb_query(folder, groupings=True, memory_limit=args.duckdb_memory)
                print(f"duckdb, one GROUPING SETS query (all, op, server, connection; count/mean/max/4 percentiles "
                      f"of 9 stages): {secs:.1f} s ({n} rows); ddlscope/duckdb wall ratio {wall / secs:.2f} (ddlscope "
                      "also computes the iteration-quarter grouping, the checks and the concurrency fit)")
            except ImportError:
                print("duckdb not installed: comparison skipped")
        if args.ray:
            from polars.testing import assert_frame_equal

            t = time.perf_counter()
            r = dissect_streaming(folder, partition_rows=args.partition_rows, engine="ray", num_cpus=2)
            rwall = time.perf_counter() - t
            assert_frame_equal(d.percentiles, r.percentiles, check_exact=True)
            assert_frame_equal(d.concurrency_fit, r.concurrency_fit, check_exact=True)
            print(f"ray (local, 2 workers): wall {rwall:.1f} s (single process {wall:.1f} s, overhead "
                  f"{rwall - wall:+.1f} s incl. cluster start); every figure equal")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
