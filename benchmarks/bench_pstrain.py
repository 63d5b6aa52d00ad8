"""RPC rate and latency of ``ddlscope ps-train`` under each connection policy and mode.

Runs the default word model (tinyshakespeare, 2 workers x 2 servers unless told otherwise) for a
few hundred iterations per variant and prints, per variant: RPCs logged, training wall time, RPC
rate, client-observed latency p50/p99, the client_queue stage p50 (where connection set-up and pool
waits land) and connections opened. First it prints what a worker's per-iteration log flush costs
(12 client rows of 250 keys each, appended to a part file), the price of losing at most one
iteration of rows to SIGKILL. Figures depend on the machine and its load; they are
measurements of this machine, not constants.

Run: ``PYTHONPATH=src python benchmarks/bench_pstrain.py [--iterations 200] [--workers 2] [--servers 2]
[--netem-mbit 100]`` (``--netem-mbit`` adds a variant on emulated hosts; needs root and iproute2).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from ddlscope.pstrain.config import NetemConfig, RunConfig
from ddlscope.pstrain.launcher import run
from ddlscope.pstrain.logs import CLIENT_RAW, RowBuffer


def flush_cost(flushes: int = 2000) -> None:
    """Print the mean time of one RowBuffer flush of one word-model iteration's client rows."""
    row = {c: 1 for c, t in CLIENT_RAW.items() if t == pl.Int64}
    row.update(op="pull_sparse", connection_event="reuse", client_host="h", server_host="h", status="OK",
               keys=np.arange(250, dtype=np.int64))
    with tempfile.TemporaryDirectory() as tmp:
        buf = RowBuffer(CLIENT_RAW, Path(tmp) / "client-0")
        t0 = time.perf_counter()
        for _ in range(flushes):
            for _ in range(12):
                buf.append(row)
            buf.flush()
        per_flush_us = (time.perf_counter() - t0) / flushes * 1e6
    print(f"per-iteration log flush (12 rows x 250 keys, append + encode + write): {per_flush_us:.0f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--netem-mbit", type=float, default=None)
    args = ap.parse_args()
    variants: list[tuple[str, dict]] = [
        ("sync, persistent", {}),
        ("async, persistent", {"mode": "async"}),
        ("sync, per-rpc", {"connections": "per-rpc"}),
        ("sync, pool of 1", {"max_connections": 1}),
    ]
    if args.netem_mbit:
        variants.append((f"sync, persistent, {args.netem_mbit:g} Mbit/s hosts",
                         {"netem": NetemConfig(bandwidth_mbit=args.netem_mbit)}))
    flush_cost()
    print(f"ps-train benchmark: word model, {args.workers} workers x {args.servers} servers, "
          f"{args.iterations} iterations per worker")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in variants:
            cfg = RunConfig(workers=args.workers, servers=args.servers, iterations=args.iterations,
                            out=Path(tmp) / name.replace(" ", "_").replace(",", ""), **extra)
            t0 = time.perf_counter()
            result = run(cfg, on_warning=lambda w: print(f"  warning: {w}"))
            total = time.perf_counter() - t0
            log = result.log
            lat = (pl.col("client_done_ns") - pl.col("client_issue_ns")) / 1e3
            queue = (pl.col("client_send_start_ns") - pl.col("client_issue_ns")) / 1e3
            stats = log.select(lat.quantile(0.5).alias("p50"), lat.quantile(0.99).alias("p99"),
                               queue.quantile(0.5).alias("q50")).row(0, named=True)
            s = result.summary
            rows.append((name, s["rpcs"], s["train_wall_s"], s["rpcs_per_s"], stats["p50"], stats["p99"],
                         stats["q50"], s["connections_opened"], total))
            print(f"  {name:<40s} {s['rpcs']:6d} RPCs  train {s['train_wall_s']:6.2f} s  "
                  f"{s['rpcs_per_s']:7.1f} RPCs/s  latency p50 {stats['p50']:8.0f} us  p99 {stats['p99']:8.0f} us  "
                  f"client_queue p50 {stats['q50']:7.0f} us  connections {s['connections_opened']:5d}  "
                  f"(total {total:5.1f} s)", flush=True)


if __name__ == "__main__":
    main()
