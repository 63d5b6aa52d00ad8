"""Benchmark and worked example: ``rpc skew --streaming`` on a SYNTHETIC key column (issue 17).

Writes ``--files`` Parquet partition files of a Zipf-distributed key column (s = 1.1 over
``--support`` ranks; a synthetic stream, not a measurement; every 97th cell empty), then runs
:func:`ddlscope.skew.streaming.analyze_skew_streaming` over the folder and prints its wall time,
rows/s and peak RSS (``ru_maxrss``). ``--compare`` also runs the in-memory analysis on the same
rows (one Parquet file) in a child process and checks that every table and figure is equal, with
that process's peak RSS.

Usage::

    PYTHONPATH=src python benchmarks/bench_skew_streaming.py [--rows 4000000] [--files 4] [--keep DIR] [--compare]
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

import numpy as np
import polars as pl


def peak_gib() -> float:
    """Peak resident set size of this process so far, GiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def write_partitions(folder: Path, rows: int, files: int, support: int, seed: int = 0) -> None:
    """``files`` Parquet files ``part-<i>.parquet`` of one String column ``feature`` (Zipf s = 1.1)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, support + 1) ** 1.1
    p /= p.sum()
    folder.mkdir(parents=True, exist_ok=True)
    start = 0
    for i, n in enumerate(np.diff(np.linspace(0, rows, files + 1).astype(np.int64))):
        keys = pl.Series("feature", rng.choice(support, size=n, p=p)).cast(pl.String)
        empty = (np.arange(start, start + n) % 97) == 0
        keys = pl.select(pl.when(pl.Series(empty)).then(None).otherwise(keys).alias("feature")).to_series()
        pl.DataFrame({"feature": keys}).write_parquet(folder / f"part-{i:03d}.parquet", row_group_size=250_000)
        start += n


def _in_memory(folder: str, out: str) -> None:
    """Child process: the in-memory analysis of the folder's rows as one file; summary as JSON."""
    from ddlscope.skew.frequency import analyze_skew
    from ddlscope.skew.streams import read_categorical_column

    one = Path(out).with_suffix(".parquet")
    pl.scan_parquet(f"{folder}/*.parquet").sink_parquet(one)
    t = time.perf_counter()
    a = analyze_skew(read_categorical_column(one, "feature"))
    dt = time.perf_counter() - t
    for name in ("ranks", "coverage", "reuse", "churn"):
        getattr(a, name).write_parquet(f"{out}.{name}.parquet")
    Path(out).write_text(json.dumps({"summary": a.summary(), "wall_s": dt, "peak_gib": peak_gib()}, default=str))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--support", type=int, default=1_000_000)
    ap.add_argument("--chunk-rows", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, help="write the partitions here and keep them")
    ap.add_argument("--compare", action="store_true", help="also run in memory and check every figure")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _in_memory(*args.child)
        return
    from ddlscope.skew.streaming import analyze_skew_streaming

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp) / "parts"
        write_partitions(folder, args.rows, args.files, args.support)
        print(f"wrote {args.rows:,} rows (SYNTHETIC Zipf s = 1.1 over {args.support:,} ranks) in {args.files} files")
        base = peak_gib()
        s = analyze_skew_streaming(folder, "feature", chunk_rows=args.chunk_rows)
        a = s.analysis
        print(f"streamed: {s.rows:,} rows, {s.batches} batches, {a.num_keys:,} keys: {s.wall_s:.1f} s "
              f"({s.rows / s.wall_s:,.0f} rows/s, two passes), peak RSS {peak_gib():.2f} GiB "
              f"(before: {base:.2f} GiB, writing the partitions)")
        print(f"zipf s {a.zipf.s:.4f}, top 1 % share {a.summary()['top_1pct_share']:.4f}, reuse distance "
              f"median {a.reuse_summary['reuse_distance_median']:g}, churn mean {a.summary()['churn_mean']:.4f}")
        if args.compare:
            out = Path(tmp) / "mem.json"
            subprocess.run([sys.executable, __file__, "--child", str(folder), str(out)], check=True)
            mem = json.loads(out.read_text())
            mine = json.loads(json.dumps(a.summary(), default=str))
            same = {k: v for k, v in mine.items() if k != "source"} == \
                {k: v for k, v in mem["summary"].items() if k != "source"}  # a folder vs one file
            for name in ("ranks", "coverage", "reuse", "churn"):
                same &= getattr(a, name).equals(pl.read_parquet(f"{out}.{name}.parquet"))
            print(f"in memory: {mem['wall_s']:.1f} s, peak RSS {mem['peak_gib']:.2f} GiB; every table and summary "
                  f"figure equal: {same}")


if __name__ == "__main__":
    main()
