"""The rate of misaligned tensor-core GEMMs: its fit on the Lambda Transformer-XL rows, leave one GPU out.

``ddlscope.model.compute.MISALIGNED_GEMM_FLOP_PER_SM_CYCLE`` prices a tensor-core GEMM whose
leading dimension is not 16-byte aligned (the op table's ``gemm_aligned`` false: Transformer-XL's
full softmax over 267,735 words) at ``min(peak x eff, c x sm_count x boost clock x held fraction)``.
This script fits ``c`` (FLOP per SM per clock cycle) on the 52 one-GPU Transformer-XL rows of the
shared Lambda tables and reports, per GPU, the fit without that GPU and its rows' error before
(no cap) and after, and the rate each row implies (all its missing time put on the misaligned GEMMs).

How: every row is priced once with the cap off (the catalog defaults, ``validate --measurements``'s
path); a misaligned GEMM is compute-bound at these sizes, so its time at a cap ``c`` is the uncapped
time plus ``F / min(R, c S) - F / R`` (``F`` its FLOPs, ``R = peak x eff`` the model's rate, ``S`` the
SMs x clock); the grid (10 to 2,000 in steps of 10) minimises the median absolute throughput error.
The last line checks this shortcut against the model itself at the catalog's value.

Run: ``PYTHONPATH=src python benchmarks/fidelity_misaligned_gemm.py [--data DIR]`` (about 1 minute).
"""

from __future__ import annotations

import argparse

import numpy as np
import polars as pl

import ddlscope.model.compute as compute
from ddlscope.model.compute import efficiency_for
from ddlscope.shared_data import find_shared_data
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.validate.measurements import MeasurementTable, ops_at, validate_measurements
from ddlscope.validate.shared_tables import lambda_measurements

GRID = np.arange(10.0, 2001.0, 10.0)


def _txl_rows(d: str) -> MeasurementTable:
    t = lambda_measurements(d)
    keep = (pl.col("gpus") == 1) & pl.col("model").str.starts_with("transformer_xl")
    return MeasurementTable(rows=t.rows.filter(keep), rejected=t.rejected, path=t.path)


def _errors(d: pl.DataFrame, cap: float) -> np.ndarray:
    """Throughput error (predicted / measured - 1) of every row of ``d`` at a cap ``cap``."""
    rate = np.minimum(d["model_rate"].to_numpy(), cap * d["sm_hz"].to_numpy())
    step = d["step_s"].to_numpy() + d["misaligned_flops"].to_numpy() * (1 / rate - 1 / d["model_rate"].to_numpy())
    return d["measured_step_s"].to_numpy() / step - 1


def _fit(d: pl.DataFrame) -> float:
    return float(GRID[int(np.argmin([np.median(np.abs(_errors(d, c))) for c in GRID]))])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="shared data folder (default: found as the tests find it)")
    args = ap.parse_args()
    d = str(args.data or find_shared_data())
    table = _txl_rows(d)
    catalog = builtin_catalog()
    kept = compute.MISALIGNED_GEMM_FLOP_PER_SM_CYCLE
    try:
        compute.MISALIGNED_GEMM_FLOP_PER_SM_CYCLE = float("inf")
        rows = validate_measurements(table).rows
    finally:
        compute.MISALIGNED_GEMM_FLOP_PER_SM_CYCLE = kept
    rec = []
    for r in rows.iter_rows(named=True):
        ops = ops_at(r["model"], r["precision"], r["optimizer"], int(r["seq_len"]), None, r["attention"] or "fused",
                     r["amp"] or "autocast", r["batch_per_gpu"])
        gpu = catalog.gpu(r["gpu"])
        q = "fp16" if r["precision"] == "fp16" else "tf32"
        eff = efficiency_for(gpu, catalog)
        tc = gpu.has_tensor_cores(q)
        peak = getattr(gpu.peak_tflops, q) * 1e12 * (gpu.sustained_tensor_fraction() if tc else 1.0)
        model_rate = peak * ((eff.tensor_gemm_eff if q == "fp16" else eff.tf32_eff) if tc else eff.cuda_gemm_eff)
        flops = float(ops.filter(pl.col("gemm_aligned").eq(False))["flops"].sum())
        sm_hz = (gpu.sm_count * gpu.boost_clock_mhz * 1e6 * gpu.sustained_tensor_fraction()) if tc else float("inf")
        seq = int(r["seq_len"])
        rec.append({"model": r["model"], "gpu": r["gpu"], "precision": str(r["precision"]), "testbed": r["testbed"],
                    "step_s": r["step_s"], "measured_step_s": r["batch_per_gpu"] * seq / r["measured"],
                    "misaligned_flops": flops, "model_rate": model_rate, "sm_hz": sm_hz})
    d_ = pl.DataFrame(rec)
    missing_s = d_["measured_step_s"] - d_["step_s"]
    implied = d_["misaligned_flops"] / (d_["misaligned_flops"] / d_["model_rate"] + missing_s)
    d_ = d_.with_columns(implied_tflop_s=implied / 1e12, implied_flop_per_sm_cycle=implied / d_["sm_hz"])
    c_all = _fit(d_)
    print(f"rows: {d_.height} one-GPU Transformer-XL rows (Lambda, {d}); the misaligned GEMMs: the full "
          f"softmax's three vocabulary GEMMs (267,735 words)")
    before, after = np.median(np.abs(_errors(d_, 1e12))), np.median(np.abs(_errors(d_, c_all)))
    print(f"fit on all rows: c = {c_all:.0f} FLOP per SM per cycle; median |error| {100 * before:.1f} % "
          f"without the cap -> {100 * after:.1f} %")
    print("\nleave one GPU out (c fitted on the other GPUs' rows; error = predicted / measured throughput - 1):")
    held0, held1, out = [], [], []
    for g in sorted(d_["gpu"].unique()):
        train, test = d_.filter(pl.col("gpu") != g), d_.filter(pl.col("gpu") == g)
        c = _fit(train)
        e0, e1 = _errors(test, 1e12), _errors(test, c)
        held0.append(e0)
        held1.append(e1)
        part = test.select("implied_tflop_s", "implied_flop_per_sm_cycle")
        out.append({"gpu": g, "rows": test.height, "c_fitted": c, "median_error_before": float(np.median(e0)),
                    "median_error_after": float(np.median(e1)),
                    "implied_tflop_s": f"{part['implied_tflop_s'].min():.0f}-{part['implied_tflop_s'].max():.0f}",
                    "implied_per_sm_cycle": f"{part['implied_flop_per_sm_cycle'].min():.0f}-"
                                            f"{part['implied_flop_per_sm_cycle'].max():.0f}"})
    with pl.Config(tbl_rows=50, tbl_width_chars=200, tbl_hide_dataframe_shape=True, float_precision=3):
        print(pl.DataFrame(out))
    a0, a1 = np.concatenate(held0), np.concatenate(held1)
    print(f"held-out rows, median |error|: {100 * np.median(np.abs(a0)):.1f} % without the cap -> "
          f"{100 * np.median(np.abs(a1)):.1f} % (folds' c: {min(o['c_fitted'] for o in out):.0f}-"
          f"{max(o['c_fitted'] for o in out):.0f}); catalog value {kept:.0f}")
    # the shortcut against the model at the catalog's value
    model_rows = validate_measurements(table).rows
    shortcut = d_["measured_step_s"].to_numpy() / (1 + _errors(d_, kept))
    worst = float(np.max(np.abs(shortcut / model_rows["step_s"].to_numpy() - 1)))
    print(f"check: the shortcut's step time vs the model's at c = {kept:.0f}: largest relative difference {worst:.2e}")


if __name__ == "__main__":
    main()
