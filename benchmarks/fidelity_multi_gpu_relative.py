"""What communication adds to the error of the shared tables' multi-GPU rows (issue 15).

Rows: the Lambda and DeepLearningExamples measurement tables (``ddlscope.validate.shared_tables``),
every row, priced with the catalog defaults as ``ddlscope validate --published`` prices them (op by
op; a multi-GPU row with DDP's bucket timeline from the model's op table). For each n-GPU row the
relative error is ``(1 + error_n) / (1 + error_1) - 1``, where ``error = predicted / measured - 1``
and ``error_1`` is the geometric-mean error of the one-GPU rows of the same GPU, model and precision
(a GPU x model x precision without a one-GPU row is counted and left out). It cancels what the
one-GPU compute error already is, so what is left is the error of the communication and its overlap.

Printed: per model, the rows, the median signed and the median absolute relative error, and the
same over all rows.

Run: ``PYTHONPATH=src python benchmarks/fidelity_multi_gpu_relative.py [--data DIR]`` (about 2 min).
"""

from __future__ import annotations

import argparse

import polars as pl

from ddlscope.shared_data import find_shared_data
from ddlscope.validate.measurements import concat_tables, validate_measurements
from ddlscope.validate.shared_tables import dle_measurements, lambda_measurements

KEY = ("gpu", "model", "precision")
"""A multi-GPU row's one-GPU reference: the rows of the same catalog GPU, model and precision."""


def relative_errors(rows: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """The multi-GPU rows of ``rows`` (columns of :func:`validate_measurements`'s ``rows``: ``gpus``,
    ``error`` and :data:`KEY`) with ``error_1`` and ``relative_error`` (fractions; module
    docstring), and how many multi-GPU rows had no one-GPU reference (left out)."""
    one = (rows.filter(pl.col("gpus") == 1).group_by(KEY)
           .agg(error_1=(1 + pl.col("error")).log().mean().exp() - 1))
    multi = rows.filter((pl.col("gpus") > 1) & pl.col("error").is_not_null())
    joined = multi.join(one, on=list(KEY), how="inner")
    return (joined.with_columns(relative_error=(1 + pl.col("error")) / (1 + pl.col("error_1")) - 1),
            multi.height - joined.height)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="shared/data folder (default: found as the tests find it)")
    args = ap.parse_args()
    data = args.data or find_shared_data()
    res = validate_measurements(concat_tables([lambda_measurements(data), dle_measurements(data)]))
    rel, unmatched = relative_errors(res.rows)
    stats = [pl.len().alias("rows"), (100 * pl.col("relative_error").median()).round(1).alias("median_signed_pct"),
             (100 * pl.col("relative_error").abs().median()).round(1).alias("median_abs_pct")]
    pl.Config.set_tbl_rows(50)
    print("multi-GPU rows, error relative to the same GPU's one-GPU error (catalog defaults):")
    print(rel.group_by("model").agg(stats).sort("model"))
    total = rel.select(stats).row(0, named=True)
    print(f"all: {total['rows']} rows, median signed {total['median_signed_pct']} %, median |.| "
          f"{total['median_abs_pct']} %; {unmatched} multi-GPU row(s) without a one-GPU row of their "
          "GPU, model and precision (left out)")


if __name__ == "__main__":
    main()
