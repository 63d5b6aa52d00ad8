"""How well any model can do on the shared one-GPU tables: the spread of repeated configurations.

The Lambda tables measure the same GPU, model, precision and batch on several testbeds (six H100
SXM5 systems, two H100 PCIe), NVIDIA's DLE tables repeat V100 rows across DGX-1 and DGX-2. One
configuration gets one prediction, so the spread of its measurements is a floor under any model's
error (``ddlscope.validate.repeatability``). Prints, for the one-GPU rows of ``lambda_measurements``
and ``dle_measurements`` (the 244 rows of ``fidelity_loo.py``):

- every repeated configuration: its testbeds, log SD and largest / smallest measurement;
- pooled: log SD, the MAPE a model exact up to that noise scores (``mape_noise``), the same for a
  cross-GPU ratio of two such measurements (``ratio_mape_noise``), the least MAPE one value per group
  reaches, and the catalog defaults' MAPE on the same rows (``mape_model``; skipped with ``--no-model``);
- each testbed's median offset from its groups' geometric means (a testbed measuring slower on every
  model it shares points at its software stack, not at the GPU).

Run: ``PYTHONPATH=src python benchmarks/fidelity_lambda_repeatability.py [--data DIR] [--no-model]``
(about 40 s with the model, 2 s without).
"""

from __future__ import annotations

import argparse

import polars as pl

from ddlscope.shared_data import find_shared_data
from ddlscope.validate.measurements import MeasurementTable, concat_tables, validate_measurements
from ddlscope.validate.repeatability import configuration_repeatability
from ddlscope.validate.shared_tables import dle_measurements, lambda_measurements


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="shared data folder (default: found as the tests find it)")
    ap.add_argument("--no-model", action="store_true", help="measurements only: skip the predictions")
    args = ap.parse_args()
    d = str(args.data or find_shared_data())
    t = concat_tables([lambda_measurements(d), dle_measurements(d)])
    one = MeasurementTable(rows=t.rows.filter(pl.col("gpus") == 1), rejected=t.rejected, path=t.path)
    rows, predicted = one.rows, None
    if not args.no_model:
        rows, predicted = validate_measurements(one).rows, "predicted"
    print(f"one-GPU rows: {rows.height} (Lambda and DLE tables of {d})")
    rep = configuration_repeatability(rows, predicted=predicted, label="testbed")
    with pl.Config(tbl_rows=100, tbl_width_chars=200, fmt_str_lengths=60, fmt_table_cell_list_len=8,
                   tbl_hide_dataframe_shape=True, float_precision=3):
        print("\nrepeated configurations (log_sd: SD of ln(measured), n - 1; max_over_min: largest / smallest):")
        print(rep.groups.select("model", "gpu", "precision", "batch_per_gpu", "conv_layout", "rows", "log_sd",
                                "max_over_min", "labels").sort("log_sd", descending=True))
        print("\nper testbed, over its rows in repeated configurations (median_offset: measured / group "
              "geometric mean - 1):")
        print(rep.offsets)
    s = rep.summary
    print(f"\npooled over {s['groups']} configurations ({s['rows']} rows): log SD {s['log_sd']:.3f}; "
          f"MAPE of a model exact up to this noise {100 * s['mape_noise']:.1f} %, of a cross-GPU ratio "
          f"{100 * s['ratio_mape_noise']:.1f} % (log SD {s['ratio_log_sd']:.3f}); least MAPE of one value "
          f"per configuration {100 * s['mape_least']:.1f} %"
          + (f"; catalog defaults on these rows {100 * s['mape_model']:.1f} % ({s['mape_model_rows']} rows"
             + (f"; {s['mape_model_skipped']} without a finite prediction, not scored" if s["mape_model_skipped"]
                else "") + ")" if s["mape_model"] is not None else ""))


if __name__ == "__main__":
    main()
