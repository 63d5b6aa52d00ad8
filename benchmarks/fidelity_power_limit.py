"""The power-limited tensor clock (issue 14): how :data:`ddlscope.specs.system.TENSOR_LOAD_W_PER_SM_GHZ`
was fitted, its leave-one-GPU-out error, and the tables it was not fitted on.

The model (:meth:`ddlscope.specs.system.GPUSpec.sustained_tensor_fraction`): tensor-core work runs at
``min(max_clock / boost, (board_power / (k x SMs x boost_GHz x r)) ** x)`` of the boost clock its
datasheet peak assumes: ``x`` = 1/3 (CMOS dynamic power ~ f^3 along the DVFS curve), ``k`` the board
power dense tensor GEMMs draw per SM per GHz at the die's full tensor rate, ``r`` the board's share
of that rate (``tensor_rate_of_die``: 0.5 on GeForce RTX boards, whose FP16 MMAs with FP32
accumulate run at half their die's rate), ``max_clock`` the highest clock the board reports
(``nvidia-smi`` "Max Clocks"; the boost clock for data-centre boards, more for GeForce and
workstation boards).

What it replaced (printed as "before"): the same without ``r`` and without the ceiling,
``min(1, (board_power / (k x SMs x boost_GHz)) ** x)``, ``k`` = 2.38. Boards of one die whose tensor
work per SM per clock differs (GeForce RTX 3090/4090 against the RTX A6000 / A10 / RTX 6000 Ada of the
same GA102/AD102 dies) showed it wrong: the workstation board of each pair was over-predicted against
its GeForce sibling by 11-52 % (printed: the same-die pairs), while the pairs of equal tensor rate
(A100 PCIe 80 GB / SXM4, H100 PCIe / SXM5) were right within 1-3 %.

The fit: ``k`` on a grid (0.5 to 8 W, 33 points) minimising the median |log| error of the
cross-GPU throughput ratio over pairs of rows of one table, model and precision (the ratio cancels
every GPU-independent calibration, so ``k`` cannot stand in for a global efficiency).

Printed:

- no power model, before, the model (in sample: ``k`` was fitted on these rows), and the rejected
  trial (``--per-tensor-flop`` in the commit history: power per TFLOP/s of the FP16 peak, with the
  ceiling), with the same-die pairs' error;
- **leave one GPU out**: for each GPU, ``k`` refitted on the pairs without it, then the median
  ratio error of its pairs; the median over GPUs, and each fold's ``k``;
- the same for exponents 1/4, 1/2 and 1 (sensitivity; 1/3 is not chosen by the fit), without the
  clock ceiling and without the half rate;
- rows the fit never saw: Pollux's T4 (one GPU, 19 rows; ImageNet AMP), the shared tables' other
  models (Lambda/DLE NCF, SSD300, Transformer-XL one-GPU rows, priced as ``validate --published``
  prices them) and llm-foundry's MPT (139 FSDP rows on A100 SXM4 40/80 GB, ``fidelity_fsdp.py``;
  all rows and the 7B-30B models, whose large GEMMs show a tensor clock most directly).

Run: ``PYTHONPATH=src python benchmarks/fidelity_power_limit.py [--cache DIR]`` (the profile cache of
``fidelity_compute.py``; about two minutes with a warm cache, five with a cold one).
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

K_GRID = tuple(float(k) for k in np.geomspace(0.5, 8.0, 33))
"""The W per SM per GHz tried."""
K_BEFORE = 2.38
"""The model before (no half rate, no ceiling): W per SM per GHz, fitted on the same rows by the same protocol."""
E_TRIAL = 1.98
"""The rejected trial's W per TFLOP/s of dense FP16 peak (fitted on the same rows, bounded by the H100 SXM5's
measured large-GEMM rate)."""
NO_LIMIT = {"k": 1e-9, "ceiling": False}
"""``power_model`` arguments that price every board at its boost clock (no power model)."""
SAME_DIE = {"GA100": ("A100-PCIE-40GB", "A100-PCIE-80GB", "A100-SXM4-80GB"),
            "GH100": ("H100-PCIE-80GB", "H100-SXM5-80GB"), "GA102": ("A10", "RTX-3090", "RTX-A6000"),
            "AD102": ("RTX-4090", "RTX-6000-Ada"),
            "GV100": ("V100-SXM2-16GB", "V100-SXM2-32GB")}
"""The fit rows' GPUs by die (NVIDIA's architecture whitepapers: GA100, GH100, GA102, AD102, GV100)."""


@contextmanager
def power_model(k: float, exponent: float, ceiling: bool = True, half_rate: bool = True,
                per_tflops: float | None = None) -> Iterator[None]:
    """Price with ``TENSOR_LOAD_W_PER_SM_GHZ = k`` and ``POWER_CLOCK_EXPONENT = exponent`` inside the block;
    ``ceiling=False`` ignores the boards' max clocks (ceiling 1), ``half_rate=False`` their
    ``tensor_rate_of_die`` (the model before is both off); ``per_tflops`` prices the rejected trial instead:
    ``min(ceiling, (board_power / (per_tflops x peak_fp16)) ** exponent)``."""
    old = system_spec.TENSOR_LOAD_W_PER_SM_GHZ, system_spec.POWER_CLOCK_EXPONENT
    method = system_spec.GPUSpec.sustained_tensor_fraction
    system_spec.TENSOR_LOAD_W_PER_SM_GHZ, system_spec.POWER_CLOCK_EXPONENT = k, exponent

    def fraction(gpu: system_spec.GPUSpec) -> float:
        if gpu.board_power_w is None or gpu.sm_count is None or gpu.boost_clock_mhz is None:
            return 1.0
        top = gpu.max_clock_mhz / gpu.boost_clock_mhz if ceiling and gpu.max_clock_mhz is not None else 1.0
        if per_tflops is not None:
            needed = per_tflops * gpu.peak_tflops.fp16
        else:
            needed = k * gpu.sm_count * gpu.boost_clock_mhz / 1e3 * (gpu.tensor_rate_of_die if half_rate else 1.0)
        return min(top, (gpu.board_power_w / needed) ** exponent)

    system_spec.GPUSpec.sustained_tensor_fraction = fraction
    try:
        yield
    finally:
        system_spec.TENSOR_LOAD_W_PER_SM_GHZ, system_spec.POWER_CLOCK_EXPONENT = old
        system_spec.GPUSpec.sustained_tensor_fraction = method


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
                                            conv_layout=r["layout"], optimizer_kernels=fc.optimizer_kernels(r)))
        self.measured = np.array([r["measured"] for r in rows])
        self.gpus = np.array([r["gpu"] for r in rows])
        group = [(r["table"], r["model"], r["precision"]) for r in rows]
        self.pairs = [(i, j) for i in range(len(rows)) for j in range(i + 1, len(rows))
                      if group[i] == group[j] and self.gpus[i] != self.gpus[j]]
        die = {g: d for d, gs in SAME_DIE.items() for g in gs}
        self.same_die = [(i, j) for i, j in self.pairs
                         if die.get(self.gpus[i], "i") == die.get(self.gpus[j], "j")]

    def predict(self, k: float, exponent: float, **kw) -> np.ndarray:
        """samples/s of every row with the power model (``power_model``'s arguments)."""
        with power_model(k, exponent, **kw):
            return predict_single_gpu(self.cases)["samples_per_s"].to_numpy()

    def pair_errors(self, pred: np.ndarray, only: str | None = None, without: str | None = None,
                    pairs: list[tuple[int, int]] | None = None) -> np.ndarray:
        """|log| error of each pair's throughput ratio; pairs with GPU ``only`` / without GPU ``without``."""
        out = []
        for i, j in self.pairs if pairs is None else pairs:
            gi, gj = self.gpus[i], self.gpus[j]
            if (only is not None and only not in (gi, gj)) or (without is not None and without in (gi, gj)):
                continue
            out.append(abs(math.log((pred[i] / pred[j]) / (self.measured[i] / self.measured[j]))))
        return np.array(out)


def pct(log_errors: np.ndarray) -> float:
    """Median of symmetric percentage errors (``exp(|log|) - 1``), %."""
    return float(np.median(np.expm1(log_errors)) * 100)


def per_gpu(rows: Rows, pred: np.ndarray) -> float:
    """Median over GPUs of each GPU's median pair error, %."""
    return float(np.median([pct(rows.pair_errors(pred, only=g)) for g in sorted(set(rows.gpus))]))


def fit(rows: Rows, preds: dict[float, np.ndarray], without: str | None = None) -> float:
    """The grid ``k`` minimising the median pair error (over the pairs without GPU ``without``)."""
    return min(preds, key=lambda k: float(np.median(rows.pair_errors(preds[k], without=without))))


def leave_one_gpu_out(rows: Rows, exponent: float, **kw) -> tuple[float, dict[str, tuple[float, float]]]:
    """(median over GPUs of the held-out GPU's pair error, {gpu: (k fitted without it, its error)})."""
    preds = {k: rows.predict(k, exponent, **kw) for k in K_GRID}
    folds = {}
    for g in sorted(set(rows.gpus)):
        k = fit(rows, preds, without=g)
        folds[g] = (k, pct(rows.pair_errors(preds[k], only=g)))
    return float(np.median([err for _, err in folds.values()])), folds


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
    args = ap.parse_args()
    data = find_shared_data()
    if data is None:
        raise SystemExit("shared/data not found (set DDLSCOPE_SHARED_DATA)")
    all_rows = fc.measurements(data)
    rows = Rows([r for r in all_rows if not r["table"].startswith("pollux")], args.cache)
    k0, x0 = system_spec.TENSOR_LOAD_W_PER_SM_GHZ, system_spec.POWER_CLOCK_EXPONENT
    preds = {k: rows.predict(k, x0) for k in K_GRID}
    print(f"fit rows: {len(rows.rows)} (Lambda + DLE one-GPU, {len(set(rows.gpus))} GPUs), {len(rows.pairs)} pairs, "
          f"{len(rows.same_die)} of them same-die; k fitted on every row: {fit(rows, preds):.2f} W per SM-GHz "
          f"(the catalog's: {k0:g})")
    variants = {"no power model (boost clock)": dict(NO_LIMIT),
                f"before: {K_BEFORE:g} W per SM-GHz, no half rate, no ceiling": {"k": K_BEFORE, "ceiling": False,
                                                                                  "half_rate": False},
                f"the model: {k0:g} W per SM-GHz, half rate, ceiling (in sample)": {"k": k0},
                f"rejected trial: {E_TRIAL:g} W per TFLOP/s, ceiling": {"k": k0, "per_tflops": E_TRIAL}}
    for label, kw in variants.items():
        kw = dict(kw)
        pred = rows.predict(kw.pop("k"), x0, **kw)
        print(f"  {label}: ratio |error| median {pct(rows.pair_errors(pred)):.1f} % over pairs, "
              f"{per_gpu(rows, pred):.1f} % median over GPUs, same-die pairs "
              f"{pct(rows.pair_errors(pred, pairs=rows.same_die)):.1f} %; absolute |error| median "
              f"{np.median(np.abs(pred / rows.measured - 1)) * 100:.1f} %")
    cat = builtin_catalog()
    none = rows.predict(NO_LIMIT["k"], x0, ceiling=False)
    for exponent, kw in ((x0, {}), (0.25, {}), (0.5, {}), (1.0, {}), (x0, {"ceiling": False}),
                         (x0, {"half_rate": False}), (x0, {"ceiling": False, "half_rate": False})):
        logo, folds = leave_one_gpu_out(rows, exponent, **kw)
        ks = [k for k, _ in folds.values()]
        what = ", ".join(f"no {n.replace('_', ' ')}" for n in kw) or "the model"
        print(f"leave one GPU out, exponent {exponent:.3g}, {what}: ratio |error| median over GPUs {logo:.1f} % "
              f"(k per fold {min(ks):.2f}-{max(ks):.2f})")
        if exponent == x0 and not kw:
            for g, (k, err) in folds.items():
                print(f"    {g:<18} boost clock {pct(rows.pair_errors(none, only=g)):5.1f} % -> {err:5.1f} %  "
                      f"(k {k:.2f}; "
                      f"clock held in the catalog: {cat.gpu(g).sustained_tensor_fraction():.3f})")
    pol = Rows([r for r in all_rows if r["table"].startswith("pollux")], args.cache)
    other = held_out_models(data)
    amp = np.array([r["precision"] == "fp16" for r in pol.rows])
    for label, kw in variants.items():
        kw = dict(kw)
        k = kw.pop("k")
        err = np.abs(pol.predict(k, x0, **kw) / pol.measured - 1) * 100
        with power_model(k, x0, **kw):
            res = validate_measurements(other)
            mpt = fs.mpt_figures(data, builtin_catalog())
        test = res.rows.filter(pl.col("role") == "test")
        gpu = res.ratios.filter(pl.col("kind") == "gpu").row(0, named=True)
        print(f"held out ({label}): Pollux T4 one GPU absolute |error| median {np.median(err):.1f} % (ImageNet AMP "
              f"{np.median(err[amp]):.1f} %, CIFAR-10 FP32 {np.median(err[~amp]):.1f} %); other models "
              f"({test.height} rows) GPU ratio {100 * gpu['median_abs_error']:.1f} % ({gpu['pairs']} pairs), absolute "
              f"{100 * test['error'].abs().median():.1f} %; MPT FSDP on A100 SXM4 {mpt['mpt_abs_median']:.1f} % "
              f"(signed {mpt['mpt_signed']:+.1f} %; 7B-30B signed {mpt['mpt_signed_large']:+.1f} %)")


if __name__ == "__main__":
    main()
