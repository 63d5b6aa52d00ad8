"""The power-limited tensor clock (issue 14): how :data:`ddlscope.specs.system.TENSOR_LOAD_W_PER_SM_GHZ`
was fitted, its leave-one-GPU-out error, and the tables it was not fitted on.

The model (:meth:`ddlscope.specs.system.GPUSpec.sustained_tensor_fraction`): tensor-core work runs at
``min(1, (board_power / (k x SMs x boost_GHz)) ** e)`` of the boost clock its datasheet peak assumes,
``e`` = 1/3 (CMOS dynamic power ~ f^3 along the DVFS curve), ``k`` the board power per SM per GHz
that dense tensor GEMMs draw. What it was built from: on Lambda's one-GPU rows
(``fidelity_compute.py``) BERT was over-predicted by 13-46 % on the boards with little power per SM
(RTX 6000 Ada, 300 W for 142 SMs; A10, 150 W for 72) and not on V100 SXM2 or the RTX 3090; the RTX
6000 Ada, with twice the RTX 4090's FP32-accumulate tensor rate, measures slower than it on both
BERT and ResNet-50 AMP (300 W vs 450 W). Unlike the base-clock hypothesis
(``fidelity_sustained_clock.py``, rejected), the same silicon at the same power (A100 SXM4 40 GB and
80 GB, 400 W) gets the same clock.

The fit: ``k`` on a grid (0.5 to 8 W, 33 points) minimising the median |log| error of the
cross-GPU throughput ratio over pairs of rows of one table, model and precision (the ratio cancels
every GPU-independent calibration, so ``k`` cannot stand in for a global efficiency).

Printed:

- no power limit (``k`` -> 0) vs the catalog's ``k``, on all rows (in sample: the catalog value was
  fitted on these rows);
- **leave one GPU out**: for each GPU, ``k`` refitted on the pairs without it, then the median ratio
  error of its pairs; the median over GPUs, and the ``k`` of each fold;
- the same for exponents 1/4, 1/2 and 1 (sensitivity; 1/3 is not chosen by the fit);
- rows the fit never saw: Pollux's T4 (one GPU, 19 rows; ImageNet AMP), the shared tables' other
  models (Lambda/DLE NCF, SSD300, Transformer-XL one-GPU rows, priced as ``validate --published``
  prices them) and llm-foundry's MPT (139 FSDP rows on A100 SXM4 40/80 GB, ``fidelity_fsdp.py``).

``--per-tensor-flop`` prints a trial instead (not the model): the power dense tensor work draws taken
as proportional to the board's tensor FLOP rate, ``e x peak_fp16`` (W per TFLOP/s of the dense FP16
FP32-accumulate peak, i.e. energy per tensor operation), instead of to SMs x clock. The tensor
throughput per SM per clock differs eight-fold across the catalog's boards (GeForce Ada 512
FLOP/clk/SM with FP32 accumulate, A100 2,048, H100 SXM5 about 4,100), so per SM-GHz cannot be the
same power on all of them. ``e`` is fitted by the same protocol as ``k`` (grid 0.2-6 W per TFLOP/s),
with leave-one-GPU-out, the held-out tables, and fixed values of ``e`` for sensitivity.

Run: ``PYTHONPATH=src python benchmarks/fidelity_power_limit.py [--cache DIR] [--per-tensor-flop]`` (the
profile cache of ``fidelity_compute.py``; about a minute with a warm cache, two or three with a cold one).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).parent))

import fidelity_compute as fc
import fidelity_sustained_clock as fs
from ddlscope.model.compute import SingleGpuCase, predict_single_gpu
from ddlscope.shared_data import find_shared_data
from ddlscope.specs import system as system_spec
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.validate.measurements import MeasurementTable, concat_tables, validate_measurements
from ddlscope.validate.shared_tables import dle_measurements, lambda_measurements

K_GRID = np.geomspace(0.5, 8.0, 33)
"""The W per SM per GHz tried."""
NO_LIMIT = 1e-9
"""A ``k`` so small that every board holds its boost clock."""


@contextmanager
def power_model(k: float, exponent: float) -> Iterator[None]:
    """Price with ``TENSOR_LOAD_W_PER_SM_GHZ = k`` and ``POWER_CLOCK_EXPONENT = exponent`` inside the block."""
    old = system_spec.TENSOR_LOAD_W_PER_SM_GHZ, system_spec.POWER_CLOCK_EXPONENT
    system_spec.TENSOR_LOAD_W_PER_SM_GHZ, system_spec.POWER_CLOCK_EXPONENT = k, exponent
    try:
        yield
    finally:
        system_spec.TENSOR_LOAD_W_PER_SM_GHZ, system_spec.POWER_CLOCK_EXPONENT = old


E_GRID = np.geomspace(0.2, 6.0, 41)
"""The W per TFLOP/s of dense FP16 tensor peak tried by ``--per-tensor-flop``."""
E_FIXED = (1.0, 1.28, 1.6, 2.0)
"""Fixed values of ``e`` printed for sensitivity (1.28 = 400 W / 312 TFLOP/s: the A100 SXM4 exactly at
its limit)."""


@contextmanager
def per_tensor_flop(e_w_per_tflops: float) -> Iterator[None]:
    """Inside the block, :meth:`GPUSpec.sustained_tensor_fraction` is
    ``min(1, (board_power_w / (e x peak_tflops.fp16)) ** POWER_CLOCK_EXPONENT)`` (1 where the board
    power is not given): the trial of ``--per-tensor-flop``, not the model."""
    old = system_spec.GPUSpec.sustained_tensor_fraction

    def fraction(gpu: system_spec.GPUSpec) -> float:
        if gpu.board_power_w is None:
            return 1.0
        needed_w = e_w_per_tflops * gpu.peak_tflops.fp16
        return min(1.0, (gpu.board_power_w / needed_w) ** system_spec.POWER_CLOCK_EXPONENT)

    system_spec.GPUSpec.sustained_tensor_fraction = fraction
    try:
        yield
    finally:
        system_spec.GPUSpec.sustained_tensor_fraction = old


class Rows:
    """The measurement rows of one table set with their profiled cases (profiled once)."""

    def __init__(self, rows: list[dict], cache: Path) -> None:
        cat = builtin_catalog()
        self.rows = rows
        self.cases = []
        for r in rows:
            zoo, seq, opt, att, amp = fc.LAMBDA_MODELS.get(r["model"], (r["model"], None, "sgd", "fused", "autocast"))
            ops, _ = fc._profile(zoo, r["batch"], r["precision"], seq, opt, att, amp, cache)
            self.cases.append(SingleGpuCase(ops, cat.gpu(r["gpu"]), r["precision"], r["batch"],
                                            conv_layout=r["layout"]))
        self.measured = np.array([r["measured"] for r in rows])
        self.gpus = np.array([r["gpu"] for r in rows])
        group = [(r["table"], r["model"], r["precision"]) for r in rows]
        self.pairs = [(i, j) for i in range(len(rows)) for j in range(i + 1, len(rows))
                      if group[i] == group[j] and self.gpus[i] != self.gpus[j]]

    def predict(self, k: float, exponent: float) -> np.ndarray:
        """samples/s of every row with the power model (k, exponent)."""
        with power_model(k, exponent):
            return predict_single_gpu(self.cases)["samples_per_s"].to_numpy()

    def pair_errors(self, pred: np.ndarray, only: str | None = None, without: str | None = None) -> np.ndarray:
        """|log| error of each pair's throughput ratio; pairs with GPU ``only`` / without GPU ``without``."""
        out = []
        for i, j in self.pairs:
            gi, gj = self.gpus[i], self.gpus[j]
            if (only is not None and only not in (gi, gj)) or (without is not None and without in (gi, gj)):
                continue
            out.append(abs(math.log((pred[i] / pred[j]) / (self.measured[i] / self.measured[j]))))
        return np.array(out)


def pct(log_errors: np.ndarray) -> float:
    """Median of symmetric percentage errors (``exp(|log|) - 1``), %."""
    return float(np.median(np.expm1(log_errors)) * 100)


def leave_one_gpu_out(rows: Rows, exponent: float) -> tuple[float, dict[str, tuple[float, float]]]:
    """(median over GPUs of the held-out GPU's pair error, {gpu: (k fitted without it, its error)})."""
    preds = {k: rows.predict(k, exponent) for k in K_GRID}
    folds = {}
    for g in sorted(set(rows.gpus)):
        k = min(K_GRID, key=lambda kk: float(np.median(rows.pair_errors(preds[kk], without=g))))
        folds[g] = (float(k), pct(rows.pair_errors(preds[k], only=g)))
    return float(np.median([e for _, e in folds.values()])), folds


def per_tensor_flop_trial(fit: Rows, pol: Rows, data: Path) -> None:
    """Print the ``--per-tensor-flop`` trial: ``e`` fitted on the fit rows' cross-GPU ratios (in sample and
    leave one GPU out, with the held-out GPU's absolute error at its fold's ``e``), then for the fitted
    and fixed values the held-out tables (Pollux T4, the other models, MPT)."""
    def predict(rows: Rows, e: float) -> np.ndarray:
        with power_model(NO_LIMIT, system_spec.POWER_CLOCK_EXPONENT), per_tensor_flop(e):
            return predict_single_gpu(rows.cases)["samples_per_s"].to_numpy()

    gpus = sorted(set(fit.gpus))
    preds = {e: predict(fit, e) for e in E_GRID}
    best = float(min(E_GRID, key=lambda e: float(np.median(fit.pair_errors(preds[e])))))
    pred = preds[best]
    print(f"per tensor FLOP: e fitted on every row {best:.2f} W per TFLOP/s (in sample: ratio |error| median "
          f"{pct(fit.pair_errors(pred)):.1f} % over pairs, "
          f"{np.median([pct(fit.pair_errors(pred, only=g)) for g in gpus]):.1f} % median over GPUs; absolute "
          f"{np.median(np.abs(pred / fit.measured - 1)) * 100:.1f} %)")
    held_abs, folds = [], {}
    for g in gpus:
        e = float(min(E_GRID, key=lambda ee: float(np.median(fit.pair_errors(preds[ee], without=g)))))
        folds[g] = (e, pct(fit.pair_errors(preds[e], only=g)))
        mask = fit.gpus == g
        held_abs.extend(np.abs(preds[e][mask] / fit.measured[mask] - 1) * 100)
    print(f"  leave one GPU out: ratio |error| median over GPUs {np.median([v for _, v in folds.values()]):.1f} % "
          f"(e per fold {min(e for e, _ in folds.values()):.2f}-{max(e for e, _ in folds.values()):.2f}); "
          f"absolute |error| of the held-out GPU's rows, median {np.median(held_abs):.1f} %")
    cat = builtin_catalog()
    with per_tensor_flop(best):
        held = {g: cat.gpu(g).sustained_tensor_fraction() for g in gpus}
    for g, (e, err) in folds.items():
        print(f"    {g:<18} {err:5.1f} %  (e {e:.2f}; clock held at e = {best:.2f}: {held[g]:.3f})")
    other = held_out_models(data)
    amp = np.array([r["precision"] == "fp16" for r in pol.rows])
    for e in (best, *E_FIXED):
        pp = predict(pol, e)
        err = np.abs(pp / pol.measured - 1) * 100
        with power_model(NO_LIMIT, system_spec.POWER_CLOCK_EXPONENT), per_tensor_flop(e):
            res = validate_measurements(other)
            mpt = fs.mpt_figures(data, builtin_catalog())
            p = predict(fit, e)
        test = res.rows.filter(pl.col("role") == "test")
        ratio = res.ratios.filter(pl.col("kind") == "gpu").row(0, named=True)
        print(f"  e = {e:.2f}: fit rows ratio median over GPUs "
              f"{np.median([pct(fit.pair_errors(p, only=g)) for g in gpus]):.1f} %, absolute "
              f"{np.median(np.abs(p / fit.measured - 1)) * 100:.1f} %; held out: Pollux T4 {np.median(err):.1f} % "
              f"(ImageNet AMP {np.median(err[amp]):.1f} %), other models ratio "
              f"{100 * ratio['median_abs_error']:.1f} % / absolute {100 * test['error'].abs().median():.1f} %, "
              f"MPT on A100 SXM4 {mpt['mpt_abs_median']:.1f} % (signed {mpt['mpt_signed']:+.1f} %)")


def held_out_models(data: Path) -> MeasurementTable:
    """The one-GPU rows of the shared Lambda + DLE measurement tables (``validate --published``'s) whose
    model is not one of the fit's (ResNet-50, BERT-base/large SQuAD): NCF, SSD300, Transformer-XL."""
    table = concat_tables([lambda_measurements(data), dle_measurements(data)])
    fit_models = {"resnet50", "bert_base_squad", "bert_large_squad"}
    return MeasurementTable(rows=table.rows.filter((pl.col("gpus") == 1) & ~pl.col("model").is_in(fit_models)),
                            rejected=table.rejected, path=table.path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=Path("/tmp/ddlscope-fidelity-cache"))
    ap.add_argument("--per-tensor-flop", action="store_true",
                    help="the trial of tensor-load power per tensor FLOP/s instead of per SM-GHz (not the model)")
    args = ap.parse_args()
    data = find_shared_data()
    if data is None:
        raise SystemExit("shared/data not found (set DDLSCOPE_SHARED_DATA)")
    all_rows = fc.measurements(data)
    fit = Rows([r for r in all_rows if not r["table"].startswith("pollux")], args.cache)
    if args.per_tensor_flop:
        per_tensor_flop_trial(fit, Rows([r for r in all_rows if r["table"].startswith("pollux")], args.cache), data)
        return
    k0, e0 = system_spec.TENSOR_LOAD_W_PER_SM_GHZ, system_spec.POWER_CLOCK_EXPONENT
    none, with_k = fit.predict(NO_LIMIT, e0), fit.predict(k0, e0)
    print(f"fit rows: {len(fit.rows)} (Lambda + DLE one-GPU, {len(set(fit.gpus))} GPUs), {len(fit.pairs)} pairs")
    for label, pred in (("no power limit", none), (f"k = {k0:g} W/(SM GHz), in sample", with_k)):
        per_gpu = np.median([pct(fit.pair_errors(pred, only=g)) for g in sorted(set(fit.gpus))])
        print(f"  {label}: ratio |error| median {pct(fit.pair_errors(pred)):.1f} % over pairs, "
              f"{per_gpu:.1f} % median over GPUs; absolute |error| median "
              f"{np.median(np.abs(pred / fit.measured - 1)) * 100:.1f} %")
    best = min(K_GRID, key=lambda kk: float(np.median(fit.pair_errors(fit.predict(kk, e0)))))
    print(f"  k fitted on every row: {best:.2f}")
    for exponent in (e0, 0.25, 0.5, 1.0):
        logo, folds = leave_one_gpu_out(fit, exponent)
        ks = [k for k, _ in folds.values()]
        print(f"leave one GPU out, exponent {exponent:.3g}: ratio |error| median over GPUs {logo:.1f} % "
              f"(k per fold {min(ks):.2f}-{max(ks):.2f})")
        if exponent == e0:
            base = {g: pct(fit.pair_errors(none, only=g)) for g in folds}
            for g, (k, e) in folds.items():
                print(f"    {g:<18} no limit {base[g]:5.1f} % -> {e:5.1f} %  (k {k:.2f})")
    pol = Rows([r for r in all_rows if r["table"].startswith("pollux")], args.cache)
    for label, k in (("no power limit", NO_LIMIT), (f"k = {k0:g}", k0)):
        pred = pol.predict(k, e0)
        err = np.abs(pred / pol.measured - 1) * 100
        amp = np.array([r["precision"] == "fp16" for r in pol.rows])
        print(f"held out, Pollux T4 one GPU ({label}): absolute |error| median {np.median(err):.1f} % "
              f"(ImageNet AMP {np.median(err[amp]):.1f} %, CIFAR-10 FP32 {np.median(err[~amp]):.1f} %)")
    other = held_out_models(data)
    for label, k in (("no power limit", NO_LIMIT), (f"k = {k0:g}", k0)):
        with power_model(k, e0):
            res = validate_measurements(other)
        test = res.rows.filter(pl.col("role") == "test")
        gpu = res.ratios.filter(pl.col("kind") == "gpu").row(0, named=True)
        print(f"held out, the shared tables' other models ({', '.join(sorted(other.rows['model'].unique()))}; "
              f"{test.height} one-GPU rows, {label}): GPU ratio |error| median {100 * gpu['median_abs_error']:.1f} % "
              f"({gpu['pairs']} pairs); absolute |error| median {100 * test['error'].abs().median():.1f} %")
    for label, k in (("no power limit", NO_LIMIT), (f"k = {k0:g}", k0)):
        with power_model(k, e0):
            mpt = fs.mpt_figures(data, builtin_catalog())
        print(f"held out, MPT FSDP on A100 SXM4 ({label}): median |error| {mpt['mpt_abs_median']:.1f} % "
              f"(signed {mpt['mpt_signed']:+.1f} %)")


if __name__ == "__main__":
    main()
