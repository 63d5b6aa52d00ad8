"""Where the one-GPU compute error sits: signed error of throughput per GPU x model and precision, and
the AMP over TF32/FP32 speed-up per sample, measured vs predicted (issue 14).

Rows: the one-GPU rows of the shared Lambda and DeepLearningExamples measurement tables
(``ddlscope.validate.shared_tables``: ``lambda_measurements``, ``dle_measurements``), priced with the
catalog defaults exactly as ``ddlscope validate --published`` prices them (op by op on the row's GPU
and precision). Printed:

- error = predicted / measured - 1 of samples/s, in %, the median over a cell's rows (several
  Lambda systems carry the same GPU), one table per precision, a column per model;
- per GPU and model, the AMP (``fp16``) throughput over the FP32/TF32 throughput of the same table,
  measured and predicted (per sample, so a different batch per precision, as Lambda ran it, is
  allowed), and their quotient (> 1: the model gives AMP more than was measured);
- for boards of one die (:data:`SAME_DIE_PAIRS`, Lambda's rows), the predicted over the measured
  throughput ratio, the median over the models per precision, with the catalog's power model and
  with the model before (power per SM-GHz, ``k`` = 2.38, no GeForce half rate, no clock ceiling;
  ``fidelity_power_limit.power_model``): what showed the model before wrong where the boards of a
  pair run different tensor work per SM per clock (docs/model.md, "The power-limited tensor clock").

Run: ``PYTHONPATH=src python benchmarks/fidelity_gpu_model.py`` (about 20 s; profiles every
model at each row's batch).
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).parent))

from ddlscope.shared_data import find_shared_data
from ddlscope.validate.measurements import MeasurementTable, concat_tables, validate_measurements
from ddlscope.validate.shared_tables import dle_measurements, lambda_measurements
from fidelity_power_limit import K_BEFORE, power_model

SAME_DIE_PAIRS = (("RTX-A6000", "RTX-3090"), ("A10", "RTX-3090"), ("RTX-6000-Ada", "RTX-4090"),
                  ("A100-PCIE-80GB", "A100-SXM4-80GB"), ("H100-PCIE-80GB", "H100-SXM5-80GB"))
"""Boards of one die (GA102, GA102, AD102, GA100, GH100): the first three pairs differ in tensor work
per SM per clock (the GeForce board at half rate), the last two do not."""


def same_die_quotients(rows: pl.DataFrame) -> pl.DataFrame:
    """Per pair of :data:`SAME_DIE_PAIRS` and precision: the median over models of (predicted ratio /
    measured ratio) of throughput, first board over second, on Lambda's rows (the DLE DGX rows left
    out: another batch and input pipeline). ``rows``: :func:`one_gpu_errors`'s columns."""
    lam = (rows.filter(~pl.col("testbed").str.contains("DGX"))
           .group_by("gpu", "model", "precision").agg(pl.col("measured").median(), pl.col("predicted").median()))
    out = []
    for a, b in SAME_DIE_PAIRS:
        j = lam.filter(pl.col("gpu") == a).join(lam.filter(pl.col("gpu") == b), on=["model", "precision"])
        out.append(j.group_by("precision").agg(
            q=((pl.col("predicted") / pl.col("predicted_right")) / (pl.col("measured") / pl.col("measured_right")))
            .median()).with_columns(pair=pl.lit(f"{a} / {b}")))
    return pl.concat(out).select("pair", "precision", pl.col("q").round(3)).sort("pair", "precision")


def one_gpu_errors(data: str) -> pl.DataFrame:
    """The priced one-GPU rows: ``testbed``, ``gpu``, ``model``, ``precision`` (String), ``batch_per_gpu``,
    ``measured``, ``predicted`` (samples/s) and ``error`` (predicted / measured - 1)."""
    table = concat_tables([lambda_measurements(data), dle_measurements(data)])
    one = MeasurementTable(rows=table.rows.filter(pl.col("gpus") == 1), rejected=table.rejected, path=table.path)
    rows = validate_measurements(one).rows
    return rows.select("testbed", "gpu", "model", pl.col("precision").cast(pl.String), "batch_per_gpu",
                       "measured", "predicted", "error")


def main() -> None:
    data = find_shared_data()
    if data is None:
        raise SystemExit("shared/data not found (set DDLSCOPE_SHARED_DATA)")
    rows = one_gpu_errors(str(data))
    pl.Config.set_tbl_rows(200)
    pl.Config.set_tbl_cols(20)
    pl.Config.set_tbl_width_chars(250)
    pl.Config.set_tbl_hide_dataframe_shape(True)
    print(f"{rows.height} one-GPU rows (Lambda + DLE), catalog defaults; error = predicted / measured - 1, "
          "median per GPU x model, %")
    for precision in ("fp32", "tf32", "fp16"):
        cell = rows.filter(pl.col("precision") == precision)
        if cell.height == 0:
            continue
        print(f"\nprecision {precision}:")
        table = (cell.with_columns(e=(100 * pl.col("error")).round(0))
                 .pivot(on="model", index="gpu", values="e", aggregate_function="median").sort("gpu"))
        print(table.select("gpu", *sorted(c for c in table.columns if c != "gpu")))
    per = (rows.with_columns(base=pl.col("precision").is_in(["fp32", "tf32"]))
           .group_by("testbed", "gpu", "model", "base")
           .agg(pl.col("measured").median(), pl.col("predicted").median()))
    amp = per.filter(~pl.col("base")).join(per.filter(pl.col("base")), on=["testbed", "gpu", "model"],
                                           suffix="_base")
    amp = (amp.group_by("gpu", "model")
           .agg(measured=(pl.col("measured") / pl.col("measured_base")).median(),
                predicted=(pl.col("predicted") / pl.col("predicted_base")).median())
           .with_columns(over=pl.col("predicted") / pl.col("measured")))
    print("\nAMP over FP32/TF32 throughput per sample (same table and system), median per GPU x model; "
          "quotient predicted / measured:")
    table = (amp.with_columns(pl.col("over").round(2))
             .pivot(on="model", index="gpu", values="over", aggregate_function="first").sort("gpu"))
    print(table.select("gpu", *sorted(c for c in table.columns if c != "gpu")))
    with power_model(K_BEFORE, 1 / 3, ceiling=False, half_rate=False):
        before = same_die_quotients(one_gpu_errors(str(data)))
    after = same_die_quotients(rows)
    print("\nboards of one die, predicted / measured throughput ratio (median over models; 1 = right):")
    print(before.rename({"q": "before (2.38 W per SM-GHz)"}).join(
        after.rename({"q": "the catalog's model"}), on=["pair", "precision"]))


if __name__ == "__main__":
    main()
