"""Benchmark: RPC latency dissection of 10 M RPC records (SYNTHETIC log) -- wall time and peak memory.

Goal (issue 6): 10 M RPC records decomposed with contributors in under 20 s on the development
machine (2 cores). The log comes from :func:`ddlscope.rpc.synthetic.synthetic_rpc_log` (synthetic,
not a measurement): 100 workers, 20 parameter servers, 4 000 connections, ~1 250 iterations.

Usage::

    PYTHONPATH=src python benchmarks/bench_rpc_dissect.py [--rpcs 10000000] [--threads 2] [--read]

Prints the wall time and the process CPU time (all threads; the wall time of a loaded machine
shared with other jobs can be several times the CPU time) of each phase, the load average, and the
peak resident memory (``resource.getrusage`` ``ru_maxrss``) after each. ``--read`` also writes the
log to a temporary Parquet file and times ``read_rpc_log`` on it (parsing and every row check).
``--log`` reuses a Parquet copy of the synthetic log (generating 10 M rows takes a minute or more).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from ddlscope.report.rpc_findings import narrate
from ddlscope.rpc.concurrency import concurrency_fit
from ddlscope.rpc.connections import connection_summary, connections_per_server
from ddlscope.rpc.dissect import _percentiles, _profiles, annotate
from ddlscope.rpc.readers import read_rpc_log
from ddlscope.rpc.size_phase import phase_profile, size_fits, size_profile
from ddlscope.rpc.synthetic import synthetic_rpc_log
from ddlscope.rpc.tail import tail_attribution, tail_contributors, tail_servers


def peak_gib() -> float:
    """Peak resident set size of this process so far, GiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def timed(label: str, fn, results: list):
    """Run ``fn``; print its wall time, this process's CPU time (all threads) and the peak RSS."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    dt, dc = time.perf_counter() - t, time.process_time() - c
    results.append((label, dt, peak_gib(), dc))
    print(f"  {label:<44s} wall {dt:7.2f} s   cpu {dc:7.2f} s   peak RSS {peak_gib():5.2f} GiB", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rpcs", type=int, default=10_000_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--read", action="store_true", help="also time read_rpc_log on a Parquet copy")
    ap.add_argument("--log", type=Path, help="use this Parquet log instead of generating one (e.g. a cached copy)")
    args = ap.parse_args()
    res: list = []
    print(f"RPC dissection benchmark: {args.rpcs:,} SYNTHETIC RPC records, polars threads "
          f"{pl.thread_pool_size()}, sweep threads {args.threads}")
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())} (on {os.cpu_count()} CPUs)")
    if args.log:
        frame = timed(f"read {args.log.name} (not timed below)", lambda: pl.read_parquet(args.log), res)
    else:
        frame = timed("generate synthetic log (not timed below)", lambda: synthetic_rpc_log(
            args.rpcs, workers=100, servers=20, seed=0), res)
    if args.read:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "rpcs.parquet"
            timed("write Parquet (not timed below)", lambda: frame.write_parquet(path), res)
            log = timed("read_rpc_log (Parquet, all row checks)", lambda: read_rpc_log(path), res)
            assert log.frame.height == args.rpcs
            frame = log.frame
            del log
    rpcs, _ = timed("decompose + contributors (annotate)", lambda: annotate(frame, threads=args.threads), res)
    t_annotate, c_annotate = res[-1][1], res[-1][3]
    frame = None  # let the input go: the annotated table holds every column
    first = len(res)
    timed("percentiles: all/op/server/connection/phase", lambda: _percentiles(rpcs), res)
    timed("concurrency fit (4 measures x 9 targets)", lambda: concurrency_fit(rpcs), res)
    timed("concurrency profiles", lambda: _profiles(rpcs), res)
    timed("connection management", lambda: (connection_summary(rpcs), connections_per_server(rpcs)), res)
    timed("message size and phase", lambda: (size_profile(rpcs), size_fits(rpcs), phase_profile(rpcs)), res)
    timed("tail attribution, servers, contributors",
          lambda: (tail_attribution(rpcs), tail_servers(rpcs), tail_contributors(rpcs)), res)
    t_analyzers = sum(r[1] for r in res[first:])
    c_analyzers = sum(r[3] for r in res[first:])
    print(f"\nRESULT decompose + contributors: wall {t_annotate:.2f} s, cpu {c_annotate:.2f} s for {rpcs.height:,} "
          f"RPCs (goal < 20 s wall): {'met' if t_annotate < 20 else 'NOT met'}")
    print(f"RESULT all analyzers after that: wall {t_analyzers:.2f} s, cpu {c_analyzers:.2f} s; "
          f"total wall {t_annotate + t_analyzers:.2f} s")
    print(f"RESULT peak RSS: {peak_gib():.2f} GiB (input log alone: {res[0][2]:.2f} GiB)")
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())} (on {os.cpu_count()} CPUs)")
    _ = narrate  # the findings text is built from the analyzers' records in milliseconds
    return 0


if __name__ == "__main__":
    sys.exit(main())
