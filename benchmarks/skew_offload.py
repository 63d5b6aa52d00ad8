"""Throughput of the skew analysis and the switch-offload simulation on a synthetic Zipf stream.

Usage::

    PYTHONPATH=src python benchmarks/skew_offload.py [--events 2000000] [--keys 1000000] [--s 1.05]

Draws ``--events`` keys i.i.d. from a finite Zipf law over ``--keys`` keys (inverse-CDF sampling),
then times each stage and prints events (keys) per second. Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ddlscope.skew.fit import fit_discrete_power_law, fit_zipf_ranks
from ddlscope.skew.frequency import analyze_skew, key_counts
from ddlscope.skew.locality import reuse_distances
from ddlscope.skew.offload import POLICIES, SwitchLayout, prepare_trace, simulate_offload
from ddlscope.skew.streams import emulate_training, stream_from_keys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--s", type=float, default=1.05, help="rank-frequency exponent of the synthetic stream")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--batch-events", type=int, default=16_384)
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    cdf = np.cumsum(np.arange(1, args.keys + 1, dtype=np.float64) ** -args.s)
    cdf /= cdf[-1]
    keys = np.minimum(np.searchsorted(cdf, rng.random(args.events)), args.keys - 1)
    keys = rng.permutation(args.keys)[keys]  # key ids unrelated to rank

    def timed(label: str, n: int, fn):
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        print(f"{label:<48s} {dt:8.2f} s   {n / dt:14,.0f} events/s")
        return out

    print(f"synthetic Zipf stream: {args.events:,} events over {args.keys:,} keys, s = {args.s}")
    stream = timed("build KeyStream (dense ids)", args.events, lambda: stream_from_keys(keys, "synthetic"))
    ev = stream.events
    counts = key_counts(ev, stream.num_keys)
    fit = timed("Zipf rank MLE", args.events, lambda: fit_zipf_ranks(counts))
    print(f"    s = {fit.s:.4f} over the {stream.num_keys:,} keys seen (true {args.s} over {args.keys:,})")
    fit_n = timed("Zipf rank MLE, support = all keys", args.events, lambda: fit_zipf_ranks(counts, args.keys))
    print(f"    s = {fit_n.s:.4f} +- {fit_n.s_stderr:.4f} with the true support")
    pl_fit = timed("CSN power-law fit (xmin scan)", args.events, lambda: fit_discrete_power_law(counts))
    print(f"    alpha = {pl_fit.alpha:.4f}, xmin = {pl_fit.xmin}, s from alpha = {pl_fit.s_equivalent:.3f}")
    timed("reuse distances (merge-sort inversions)", args.events, lambda: reuse_distances(ev["key"].to_numpy()))
    timed("analyze_skew (everything)", args.events, lambda: analyze_skew(stream, window=args.batch_events))
    trained = timed("replay as training", args.events,
                    lambda: emulate_training(stream, args.workers, args.batch_events // args.workers))
    trace = prepare_trace(trained)
    n = trace.key.size
    print(f"trace: {n:,} pull/push events, {trace.num_iterations} iterations")
    layout = SwitchLayout(embedding_dim=64)
    budgets = [2**20, 4 * 2**20, 16 * 2**20]
    for policy in POLICIES:
        timed(f"offload {policy} ({len(budgets)} budgets)", n * len(budgets),
              lambda policy=policy: simulate_offload(trace, layout, budgets, (policy,)))


if __name__ == "__main__":
    main()
