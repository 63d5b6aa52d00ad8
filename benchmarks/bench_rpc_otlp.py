"""Benchmark: reading an OTLP JSON trace export (SYNTHETIC) into the raw RPC table -- wall time.

The export is written by :func:`ddlscope.pstrain.otlp.otlp_traces` from
:func:`ddlscope.rpc.synthetic.synthetic_rpc_log` (synthetic, not a measurement): per RPC a client
and a server span with ``ddlscope.*`` events, message events and attributes, as ``ps-train``
writes them. Not a test: it prints figures.

Usage::

    PYTHONPATH=src python benchmarks/bench_rpc_otlp.py [--rpcs 50000]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import polars as pl

from ddlscope.pstrain.logs import ITERATIONS
from ddlscope.pstrain.otlp import otlp_traces
from ddlscope.rpc.otlp import read_otlp_raw
from ddlscope.rpc.synthetic import synthetic_rpc_log


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rpcs", type=int, default=50_000)
    args = ap.parse_args()
    log = synthetic_rpc_log(args.rpcs, seed=1)
    doc = otlp_traces(log, pl.DataFrame(schema=ITERATIONS), run_id="0123456789abcdef")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "traces.json"
        path.write_text(json.dumps(doc))
        del doc
        size_mb = path.stat().st_size / 1e6
        print(f"OTLP JSON: {args.rpcs:,} SYNTHETIC RPCs ({2 * args.rpcs:,} spans), {size_mb:.1f} MB; load average "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
        t = time.perf_counter()
        raw, rejected, _ = read_otlp_raw(path)
        dt = time.perf_counter() - t
    assert raw.height == args.rpcs and rejected.height == 0
    print(f"read_otlp_raw {dt:8.2f} s   {2 * args.rpcs / dt:12,.0f} spans/s   {size_mb / dt:6.1f} MB/s")


if __name__ == "__main__":
    main()
