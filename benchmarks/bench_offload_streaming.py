"""Benchmark: ``rpc offload --streaming`` against the in-memory simulation on a SYNTHETIC key column (issue 17).

Writes ``--files`` Parquet partition files of a Zipf-distributed key column (s = 1.1 over
``--support`` ranks, every 97th cell empty; :func:`bench_skew_streaming.write_partitions`, a
synthetic stream, not a measurement) and the same rows as one Parquet file, then runs, each in its
own child process so that each peak RSS (``ru_maxrss``) is its own:

* streamed: :func:`ddlscope.skew.offload_streaming.simulate_offload_streaming` over the folder;
* in memory: ``simulate_offload(prepare_trace(emulate_training(read_categorical_column(file))))``,
  what ``rpc offload`` runs, on the one file;

both with the ``rpc offload`` defaults (8 workers x 1 024 events per mini-batch, the budget sweep
of :func:`~ddlscope.skew.offload.budgets_for` the distinct keys, embedding dimension ``--dim``),
and prints wall time, CPU time (user + system), rows/s, peak RSS and whether the two tables are equal.

Usage::

    PYTHONPATH=src python benchmarks/bench_offload_streaming.py [--rows 3000000] [--support 200000] \
        [--chunk-rows 500000] [--policy lfu --policy space_saving] [--keep DIR] [--streamed-only]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_skew_streaming import write_partitions


def peak_gib() -> float:
    """Peak resident set size of this process so far, GiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def cpu_s() -> float:
    """CPU time (user + system) of this process so far, s."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _child(mode: str, source: str, out: str, dim: int, chunk_rows: int, policies: list[str]) -> None:
    """Run one simulation; write its table (Parquet) and figures (JSON) beside ``out``."""
    from ddlscope.skew.offload import POLICIES, SwitchLayout, budgets_for, prepare_trace, simulate_offload

    layout = SwitchLayout(dim)
    pols = tuple(policies) or POLICIES
    t, c = time.perf_counter(), cpu_s()
    if mode == "streamed":
        from ddlscope.skew.offload_streaming import simulate_offload_streaming

        s = simulate_offload_streaming(source, "feature", layout, policies=pols, chunk_rows=chunk_rows)
        res, rows, info = s.result, s.rows, {"passes": s.passes, "spill_mib": s.spill_bytes / 2**20,
                                             "keys": s.num_keys, "events": s.num_events}
    else:
        from ddlscope.skew.streams import emulate_training, read_categorical_column

        stream = read_categorical_column(source, "feature")
        res = simulate_offload(prepare_trace(emulate_training(stream)), layout, budgets_for(stream.num_keys, layout),
                               pols)
        rows, info = stream.used_rows + sum(stream.skipped.values()), {"keys": stream.num_keys,
                                                                        "events": stream.num_events}
    wall, cpu = time.perf_counter() - t, cpu_s() - c
    res.table.write_parquet(f"{out}.parquet")
    Path(out).write_text(json.dumps({"wall_s": wall, "cpu_s": cpu, "rows": rows, "peak_gib": peak_gib(), **info,
                                     "warmup": res.warmup_iterations, "evaluated": res.evaluation_iterations}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=3_000_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--support", type=int, default=200_000)
    ap.add_argument("--chunk-rows", type=int, default=500_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--policy", action="append", default=[], help="policies (default all)")
    ap.add_argument("--keep", type=Path, help="write the partitions here and keep them")
    ap.add_argument("--streamed-only", action="store_true", help="skip the in-memory run (RSS against rows)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(*args.child, args.dim, args.chunk_rows, args.policy)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder, one = args.keep or Path(tmp) / "parts", Path(tmp) / "all.parquet"
        write_partitions(folder, args.rows, args.files, args.support)
        pl.scan_parquet(f"{folder}/*.parquet").sink_parquet(one)
        print(f"wrote {args.rows:,} rows (SYNTHETIC Zipf s = 1.1 over {args.support:,} ranks) in {args.files} "
              f"files; policies: {', '.join(args.policy) or 'all'}; dim {args.dim}")
        got = {}
        runs = (("streamed", folder),) if args.streamed_only else (("streamed", folder), ("in_memory", one))
        for mode, source in runs:
            out = Path(tmp) / f"{mode}.json"
            extra = [a for p in args.policy for a in ("--policy", p)]
            subprocess.run([sys.executable, __file__, "--child", mode, str(source), str(out), "--dim", str(args.dim),
                            "--chunk-rows", str(args.chunk_rows), *extra], check=True)
            got[mode] = json.loads(out.read_text()) | {"table": pl.read_parquet(f"{out}.parquet")}
            g = got[mode]
            more = f", {g['passes']} replays, {g['spill_mib']:.1f} MiB spilled" if mode == "streamed" else ""
            print(f"{mode}: {g['rows']:,} rows, {g['events']:,} events, {g['keys']:,} keys, {g['warmup']} + "
                  f"{g['evaluated']} iterations: {g['wall_s']:.1f} s wall, {g['cpu_s']:.1f} s CPU "
                  f"({g['rows'] / g['wall_s']:,.0f} rows/s{more}), "
                  f"peak RSS {g['peak_gib']:.2f} GiB")
        a = got["streamed"]["table"]
        if not args.streamed_only:
            print(f"tables equal (every row, bit for bit): {a.equals(got['in_memory']['table'])}; {a.height} rows")
        best = a.sort("server_bytes_saved_fraction", descending=True).unique("policy", maintain_order=True)
        print(best.select("policy", "budget_bytes", "capacity_keys", "push_aggregated_fraction",
                          "server_bytes_saved_fraction"))


if __name__ == "__main__":
    main()
