"""Long fuzz runs of every reader: seeded mutations of real inputs, each outcome classified.

Usage::

    PYTHONPATH=src python benchmarks/fuzz_readers.py [--seconds-per-reader 20] [--only NAME ...] [--seed 0]

For each target of :data:`TARGETS` (the reading layer's users from
:data:`ddlscope.testing.fuzz.READER_TARGETS`, and the other modules' readers adapted in
:data:`ddlscope.testing.fuzz_targets.ADAPTED_TARGETS`), runs trials with
seeds ``seed, seed+1, ...`` for ``--seconds-per-reader`` seconds and prints, per reader, the
examples tried, clean errors (a one-line user error naming the file), balanced results (rows in =
used + rejected with a reason) and failures, then each distinct failure with the seed and the
mutations to replay it (``--only NAME --seed SEED --examples 1``). Exits 1 when any trial failed.
Goal: no failure. Not a test: it prints figures (the suite runs each target with a short budget).

Adding a target is one line in :data:`TARGETS`: a name and a function returning a
:class:`~ddlscope.testing.fuzz.FuzzTarget` (samples, the reader wrapped to return its
:class:`~ddlscope.testing.fuzz.Accounting`, the mutations). A slot left ``None`` is listed as
not filled.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from ddlscope.testing.fuzz import READER_TARGETS, FuzzTarget, Trial, run_trial
from ddlscope.testing.fuzz_targets import ADAPTED_TARGETS

TARGETS: dict[str, Callable[[], FuzzTarget] | None] = {**READER_TARGETS, **ADAPTED_TARGETS}
"""Fuzz targets by name; ``None``: a slot not filled yet."""


def fuzz(target: FuzzTarget, seconds: float, first_seed: int, examples: int | None) -> tuple[Counter, list[Trial]]:
    """Trials of ``target`` from ``first_seed`` on, for ``seconds`` (or ``examples`` trials)."""
    samples = target.samples()
    counts: Counter = Counter()
    failures: list[Trial] = []
    end = time.perf_counter() + seconds
    seed = first_seed
    with tempfile.TemporaryDirectory(prefix="ddlscope-fuzz-") as tmp:
        while (seed < first_seed + examples) if examples is not None else (time.perf_counter() < end):
            trial = run_trial(target, seed, Path(tmp), samples)
            counts[trial.outcome] += 1
            if trial.outcome == "failure":
                failures.append(trial)
            seed += 1
    return counts, failures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds-per-reader", type=float, default=20.0, help="time budget of each reader (s)")
    ap.add_argument("--only", nargs="*", default=None, help="target names (default: all)")
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument("--examples", type=int, default=None, help="a fixed number of trials instead of a time budget")
    ap.add_argument("--show", type=int, default=5, help="distinct failures shown per reader")
    args = ap.parse_args()

    names = args.only or list(TARGETS)
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        ap.error(f"unknown target(s) {unknown}; expected some of {list(TARGETS)}")
    print(f"{'reader':28} {'examples':>9} {'clean errors':>13} {'balanced':>9} {'failures':>9}")
    failed = False
    report: list[str] = []
    for name in names:
        build = TARGETS[name]
        if build is None:
            print(f"{name:28} {'(slot not filled)':>42}")
            continue
        try:
            target = build()
        except FileNotFoundError as exc:
            print(f"{name:28} skipped: {exc}")
            continue
        counts, failures = fuzz(target, args.seconds_per_reader, args.seed, args.examples)
        total = sum(counts.values())
        print(f"{name:28} {total:9,} {counts['clean_error']:13,} {counts['balanced']:9,} {counts['failure']:9,}",
              flush=True)
        seen: set[str] = set()
        for t in failures:
            key = t.detail[:80]
            if key in seen or len(seen) >= args.show:
                continue
            seen.add(key)
            report.append(f"  {t.replay()}: {t.detail}")
        failed = failed or bool(failures)
    if report:
        print("\nfailures (replay with --only NAME --seed SEED --examples 1):")
        print("\n".join(report))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
