"""Wall time of ``ddlscope calibrate`` (default and ``--quick``) and its headline figures.

Goal (issue 5): the default run under 2 minutes on the 2-core development machine.

Runs ``python -m ddlscope calibrate --format json`` in a fresh process (imports included, as a user
runs it) and prints: wall time, load average before and after, the FP32 matmul efficiency curve,
STREAM copy/triad, the gloo all-reduce alpha/beta, the op overhead.

Run: ``PYTHONPATH=src python benchmarks/bench_calibrate.py [--quick]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="time `calibrate --quick` instead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "system.toml"
        cmd = [sys.executable, "-m", "ddlscope", "calibrate", "-o", str(out), "--format", "json"]
        if args.quick:
            cmd.append("--quick")
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        load1 = os.getloadavg()[0]
        if res.returncode != 0:
            sys.exit(f"calibrate failed ({res.returncode}): {res.stderr[-2000:]}")
        payload = json.loads(res.stdout)
    print(f"calibrate{' --quick' if args.quick else ''}: {wall:.1f} s wall (goal < 120 s); "
          f"load average {load0:.2f} -> {load1:.2f}")
    print(f"device: {payload['device']}; peak source: {payload['peak source']}")
    for row in payload["tables"]["matmul"]:
        print(f"  matmul {row['precision']} n={row['n']:5d}: {row['flop_per_s'] / 1e9:7.2f} GFLOP/s, "
              f"efficiency {row['efficiency']:.3f}")
    for row in payload["tables"]["stream"]:
        print(f"  STREAM {row['kernel']}: {row['bandwidth_gb_s']:.2f} GB/s")
    for fit in payload["fits"]:
        print(f"  {fit['collective']} x {fit['ranks']}: alpha {fit['latency_us']:.1f} us per step "
              f"(latency {fit['latency_s'] * 1e6:.1f} us), beta {fit['bandwidth_gb_s']:.3f} GB/s, "
              f"rms relative residual {fit['rms_rel_residual']:.2f}")
    print(f"  op overhead: {payload['op overhead (s per op)'] * 1e6:.2f} us per op; clock {payload['clock']}")


if __name__ == "__main__":
    main()
