"""Benchmark: ``ddlscope trace``'s breakdown vs Holistic Trace Analysis on the largest shared trace.

Each measurement runs in a fresh Python process (imports done before the clock starts) and
reports the wall time and the CPU time (all threads) of reading the trace and computing the
temporal breakdown and the communication/computation overlap, and the process's peak resident
memory (``ru_maxrss``, which counts Rust/C allocations that ``tracemalloc`` misses). On a busy
machine the wall times vary with the load; the CPU times much less. Both tools answer with the same numbers
(printed side by side); ddlscope also computes the per-iteration breakdown, idle causes,
collectives, rank skew and the model check in the same time.

Usage::

    python benchmarks/bench_trace.py [--file PATH] [--repeat 3]

Default file: ``shared/data/hta_traces/df_index_resolver/df_index_resolver.json.gz`` (54 MB of
JSON, 216,092 events). Needs ``holistictraceanalysis`` (the ``test`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD_OURS = r"""
import json, resource, sys, time
from ddlscope.measure.analysis import analyze_traces
from ddlscope.specs.scenario import BUILTIN_SCENARIOS
path, whatif = sys.argv[1], sys.argv[2] == "1"
u0 = resource.getrusage(resource.RUSAGE_SELF)
rss0 = u0.ru_maxrss
t0 = time.perf_counter()
a = analyze_traces([path], scenarios=list(BUILTIN_SCENARIOS.values()) if whatif else None)
t = time.perf_counter() - t0
u1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = u1.ru_utime - u0.ru_utime + u1.ru_stime - u0.ru_stime
r = a.temporal.row(0, named=True)
print(json.dumps({"wall_s": t, "cpu_s": cpu, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rss_after_imports_mb": rss0 / 1024, "idle_pct": r["idle_pct"], "compute_pct": r["compute_pct"],
                  "non_compute_pct": r["non_compute_pct"], "overlap_pct": r["comm_overlap_pct"]}))
"""

CHILD_HTA = r"""
import json, logging, resource, sys, time, warnings
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
path = sys.argv[1]
u0 = resource.getrusage(resource.RUSAGE_SELF)
rss0 = u0.ru_maxrss
t0 = time.perf_counter()
ta = TraceAnalysis(trace_files={0: path}, trace_dir="/", include_last_profiler_step=True)
tb = ta.get_temporal_breakdown(visualize=False)
ov = ta.get_comm_comp_overlap(visualize=False)
t = time.perf_counter() - t0
u1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = u1.ru_utime - u0.ru_utime + u1.ru_stime - u0.ru_stime
r = tb.iloc[0]
print(json.dumps({"wall_s": t, "cpu_s": cpu, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rss_after_imports_mb": rss0 / 1024, "idle_pct": float(r["idle_time_pctg"]),
                  "compute_pct": float(r["compute_time_pctg"]), "non_compute_pct": float(r["non_compute_time_pctg"]),
                  "overlap_pct": float(ov["comp_comm_overlap_pctg"].iloc[0])}))
"""


def _default_file() -> Path:
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "data" / "hta_traces" / "df_index_resolver" / "df_index_resolver.json.gz"
        if candidate.is_file():
            return candidate
    raise SystemExit("shared data not found; pass --file")


def _run(code: str, *args: str) -> dict:
    src = str(Path(__file__).resolve().parents[1] / "src")
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Run the comparison and print one table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    path = str(args.file or _default_file())
    print(f"file: {path} ({Path(path).stat().st_size / 1e6:.1f} MB compressed)")
    runs = {
        "ddlscope trace": [_run(CHILD_OURS, path, "0") for _ in range(args.repeat)],
        "ddlscope trace + what-if (8 scenarios)": [_run(CHILD_OURS, path, "1") for _ in range(args.repeat)],
        "HTA 0.5 (temporal + overlap)": [_run(CHILD_HTA, path) for _ in range(args.repeat)],
    }
    print(f"{'tool':40s} {'wall s':>8s} {'min':>7s} {'CPU s':>7s} {'peak RSS MB':>12s} {'after imports':>14s}"
          f" {'idle %':>8s} {'compute %':>10s} {'non-comp %':>10s} {'overlap %':>10s}")
    for name, rs in runs.items():
        walls = [r["wall_s"] for r in rs]
        r = rs[0]
        print(f"{name:40s} {statistics.median(walls):8.3f} {min(walls):7.3f}"
              f" {statistics.median(x['cpu_s'] for x in rs):7.3f} {max(x['peak_rss_mb'] for x in rs):12.0f}"
              f" {r['rss_after_imports_mb']:14.0f} {r['idle_pct']:8.2f} {r['compute_pct']:10.2f}"
              f" {r['non_compute_pct']:10.2f} {r['overlap_pct']:10.2f}")
    ours = statistics.median(r["wall_s"] for r in runs["ddlscope trace"])
    hta = statistics.median(r["wall_s"] for r in runs["HTA 0.5 (temporal + overlap)"])
    cpu_ours = statistics.median(r["cpu_s"] for r in runs["ddlscope trace"])
    cpu_hta = statistics.median(r["cpu_s"] for r in runs["HTA 0.5 (temporal + overlap)"])
    mem_ours = max(r["peak_rss_mb"] for r in runs["ddlscope trace"])
    mem_hta = max(r["peak_rss_mb"] for r in runs["HTA 0.5 (temporal + overlap)"])
    a, b = runs["ddlscope trace"][0], runs["HTA 0.5 (temporal + overlap)"][0]
    diff = max(abs(a[k] - b[k]) for k in ("idle_pct", "compute_pct", "non_compute_pct", "overlap_pct"))
    load = os.getloadavg()[0]
    print(f"speedup (HTA / ddlscope, medians): wall {hta / ours:.1f}x, CPU time {cpu_hta / cpu_ours:.1f}x "
          f"(1-minute load average {load:.1f} on {os.cpu_count()} cores);  peak memory ratio: "
          f"{mem_hta / mem_ours:.1f}x;  largest difference in the shares: {diff:.3f} percentage points")


if __name__ == "__main__":
    main()
