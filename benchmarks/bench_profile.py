"""Wall time of ``ddlscope profile`` on this CPU: BERT-large (batch 8, sequence 512) and GPT-2
(batch 8, sequence 1024). Goal (issue 3): under 5 s each.

For each model, in fresh Python processes (``--repeat`` of them; the median is printed):

- ``import_s``: one-time library imports: ``torch`` and ``ddlscope.profile``, the Hugging Face
  model module the zoo entry builds from, and ``torch._dynamo`` (PyTorch imports it on the first
  call through any ``TorchDispatchMode``);
- ``profile_s``: the first ``profile_model`` call after those imports: builds the model on the
  meta device, warms PyTorch's meta kernels and traces forward, backward and optimizer step (the
  figure the goal applies to);
- ``warm_s``: a second call in the same process (profiling one more configuration);
- ``process_s``: the whole process, start to exit, as a user of ``ddlscope profile`` waits.

Run: ``PYTHONPATH=src python benchmarks/bench_profile.py [--repeat 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CASES = (("bert_large", 8, 512), ("gpt2", 8, 1024))
GOAL_S = 5.0

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import torch
import torch._dynamo
import transformers.models.bert.modeling_bert, transformers.models.gpt2.modeling_gpt2
from ddlscope.profile import profile_model
t1 = time.perf_counter()
name, b, s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = profile_model(name, batch_size=b, seq_len=s)
t2 = time.perf_counter()
profile_model(name, batch_size=b, seq_len=s)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "profile_s": t2 - t1, "warm_s": t3 - t2,
                  "ops": r.totals["ops"], "compute_bound_flops": r.totals["compute_bound_flops"]}))
"""


def run_case(name: str, batch: int, seq: int) -> dict[str, float]:
    """One fresh process profiling ``name``; its timings (seconds)."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, name, str(batch), str(seq)], capture_output=True, text=True,
                          check=True, env=os.environ.copy())
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_s"] = time.perf_counter() - start
    return out


def main() -> None:
    """Print the median timings of each case and whether it meets the goal."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per model (median reported)")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; median of {args.repeat} fresh processes")
    print(f"{'model':<12}{'batch':>6}{'seq':>6}{'ops':>7}{'import_s':>10}{'profile_s':>11}{'warm_s':>8}"
          f"{'process_s':>11}  goal: profile_s < {GOAL_S:g} s")
    for name, batch, seq in CASES:
        runs = [run_case(name, batch, seq) for _ in range(args.repeat)]
        med = {k: statistics.median(r[k] for r in runs) for k in ("import_s", "profile_s", "warm_s", "process_s")}
        verdict = "met" if med["profile_s"] < GOAL_S else "NOT met"
        print(f"{name:<12}{batch:>6}{seq:>6}{runs[0]['ops']:>7}{med['import_s']:>10.2f}{med['profile_s']:>11.2f}"
              f"{med['warm_s']:>8.2f}{med['process_s']:>11.2f}  {verdict}")
    load = os.getloadavg()[0]
    print(f"load average (1 min) at the end: {load:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
