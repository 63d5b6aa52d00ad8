"""Compute fidelity on the shared published tables: leave-one-group-out error of the step-time model.

Goal (issue "compute fidelity"): leave-one-GPU-out, median |error| of the cross-GPU throughput ratio
<= 10 % and of absolute throughput <= 12 %; throughput between batch sizes of one GPU within 10 %.

Reads ``shared/data/lambda_benchmarks`` and ``shared/data/dle_tables`` as measurement tables
(:mod:`ddlscope.validate.shared_tables`) and prints, for the catalog defaults and for each
cross-validation grouping (``gpu``, ``model``, ``testbed``), the median and mean |error| of absolute
throughput over the test rows, and the median |error| of the GPU, batch and precision ratios. Only the
one-GPU rows are used by default (``--all-gpus`` keeps the multi-GPU rows, whose error is mostly
communication: the communication-fidelity issue).

Usage: ``PYTHONPATH=src python benchmarks/fidelity_loo.py [--data DIR] [--all-gpus] [--by gpu,model]``
"""

from __future__ import annotations

import argparse
import time

import polars as pl

from ddlscope.shared_data import find_shared_data
from ddlscope.validate.measurements import MeasurementTable, concat_tables, validate_measurements
from ddlscope.validate.shared_tables import dle_measurements, lambda_measurements


def _line(label: str, res) -> str:
    test = res.rows.filter(pl.col("role") == "test")
    ratios = {r["kind"]: r for r in res.ratios.iter_rows(named=True)}

    def ratio(kind: str) -> str:
        r = ratios.get(kind)
        return f"{100 * r['median_abs_error']:6.1f} % ({r['pairs']:4d})" if r else "     -        "

    return (f"{label:<28} {test.height:5d} {100 * test['error'].abs().median():7.1f} % "
            f"{100 * test['error'].abs().mean():7.1f} % {100 * test['error'].mean():+7.1f} %  "
            f"{ratio('gpu')}  {ratio('batch')}  {ratio('precision')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="shared/data folder (default: found as the tests find it)")
    ap.add_argument("--all-gpus", action="store_true", help="keep the multi-GPU rows")
    ap.add_argument("--by", default="gpu,model,testbed", help="cross-validation groupings, comma-separated")
    args = ap.parse_args()
    data = args.data or find_shared_data()
    t0 = time.perf_counter()
    table = concat_tables([lambda_measurements(data), dle_measurements(data)])
    if not args.all_gpus:
        table = MeasurementTable(rows=table.rows.filter(pl.col("gpus") == 1), rejected=table.rejected,
                                 path=table.path)
    reasons = ", ".join(f"{r}: {n}" for r, n in table.rejected.group_by("reason").len().rows())
    print(f"rows used: {table.rows.height} ({'all' if args.all_gpus else 'one-GPU'}); rows not used: "
          f"{table.rejected.height} ({reasons})")
    print(f"GPUs: {table.rows['gpu'].n_unique()}, models: {', '.join(sorted(table.rows['model'].unique()))}")
    print()
    print(f"{'protocol':<28} {'rows':>5} {'median':>9} {'mean':>9} {'bias':>9}  "
          f"{'gpu ratio (pairs)':<16}  {'batch ratio':<14}  {'precision ratio':<14}")
    print(_line("catalog defaults", validate_measurements(table)))
    for by in [b for b in args.by.split(",") if b]:
        print(_line(f"leave one {by} out", validate_measurements(table, cross_validate=by)))
    print()
    print("median/mean/bias: |error| of absolute throughput over the test rows (error = predicted / measured - 1);")
    print("ratios: median |predicted ratio / measured ratio - 1| over pairs of test rows differing only in the GPU,")
    print("the batch, or the precision. Under leave-one-out every row is predicted by a fit that did not see")
    print("its group.")
    print(f"wall time {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
