"""A hypothesis test for the compute fidelity issue (14), kept so it can be re-run: does tensor-core
work run at the board's *base* clock rather than the boost clock its datasheet peak assumes?

Why it was asked. On Lambda's one-GPU rows (``benchmarks/fidelity_compute.py``) the op-level model
over-predicts BERT by 13-46 % on every data-centre and workstation board and not on the two GeForce
boards, and the boards it over-predicts most are the ones whose base clock lies furthest below
their boost clock (RTX 6000 Ada 915 of 2,505 MHz, A10 885 of 1,695, A100 PCIe 40 GB 765 of 1,410).
NVIDIA's GPU Boost raises the clock above the base clock only while power and temperature allow;
the base clock is the clock the board holds at its power limit under a heavy load, and dense
tensor-core GEMMs are the heaviest load of a training step. GeForce boards run FP16/TF32 tensor
math with FP32 accumulation at half the rate of the professional boards of the same chip (Ampere
GA102 and Ada whitepapers), so their tensor work draws less power per clock.

The variants priced (nothing fitted; the catalog's efficiencies as they are):

- ``none``: the model as it was (without the power-limited tensor clock added since, which
  ``fidelity_power_limit.py`` tests; every variant here is priced without it);
- ``base clock``: every tensor-core GEMM/convolution/attention kernel at ``peak x base / boost``;
- ``base clock, not GeForce``: the same except on the half-rate GeForce boards (RTX 3090, 4090).

Figures: on the Lambda/DLE rows the cross-GPU ratio error (median over pairs and leave-one-GPU-out)
and the absolute throughput error, as ``fidelity_compute.py`` prints them; then the **held-out
check** on llm-foundry's MPT table (``fidelity_fsdp.py``'s 139 FSDP rows on A100 SXM4 40 GB and
80 GB, 400 W both): median |error| of tokens/s per GPU for each GPU kind.

Base clocks (MHz), as the TechPowerUp GPU database lists them (techpowerup.com/gpu-specs; NVIDIA's
product briefs give the PCIe boards' base clocks, e.g. A100 PCIe 40 GB 765, A10 885); third-party
figures, and not all sources agree (H100 PCIe: 1,035 / 1,095 / 1,125 MHz are all published):
:data:`BASE_CLOCK_MHZ`.

Result (2026-12-06, recorded in docs/validation.md): on the Lambda rows the absolute error falls
from 14.0 % to 7.9 % (7.1 % without the GeForce boards derated) and the leave-one-GPU-out ratio
error from 12.3 % to 11.4 % (10.1 %), but on the held-out MPT table the median error rises from
8.0 % to 11.6 % (signed +7.2 % -> -9.9 %), and the A100 SXM4 40 GB rows, whose listed base clock
(1,095 MHz) is 14 % below the 80 GB board's (1,275 MHz) at the same 400 W, are measured only about
4 % slower relative to the model. Base clocks are not the sustained clocks of boards with ample
power: the hypothesis is rejected as a model change; what would settle it is a measured sustained
clock under tensor load per board (nvidia-smi's ``clocks.sm`` during a GEMM), which no shared table
holds.

Run: ``PYTHONPATH=src python benchmarks/fidelity_sustained_clock.py [--cache DIR]`` (the profile
cache of ``fidelity_compute.py``).
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).parent))

import fidelity_compute as fc
import fidelity_fsdp as ff
from ddlscope.model.compute import SingleGpuCase, predict_single_gpu, price_jobs
from ddlscope.model.step_time import breakdown
from ddlscope.shared_data import find_shared_data
from ddlscope.specs import system as system_spec
from ddlscope.specs.catalog import Catalog, builtin_catalog

BASE_CLOCK_MHZ: dict[str, float] = {
    "V100-SXM2-16GB": 1312, "V100-SXM2-32GB": 1290, "Quadro-RTX-8000": 1395, "RTX-3090": 1395, "A10": 885,
    "A100-PCIE-40GB": 765, "A100-PCIE-80GB": 1065, "A100-SXM4-40GB": 1095, "A100-SXM4-80GB": 1275,
    "RTX-6000-Ada": 915, "RTX-A6000": 1410, "RTX-4090": 2235, "H100-PCIE-80GB": 1125, "H100-SXM5-80GB": 1590,
}
"""Base clock per catalog GPU of the tables, MHz (module docstring: TechPowerUp GPU database)."""
HALF_RATE_GEFORCE = frozenset({"RTX-3090", "RTX-4090"})
"""GeForce boards: FP32-accumulate tensor math at half the professional boards' rate (whitepapers)."""
VARIANTS = ("none", "base clock", "base clock, not GeForce")


def derated_catalog(variant: str) -> Catalog:
    """The built-in catalog with the tensor-core peaks (``tf32``, ``fp16``, ``bf16`` where the GPU has
    tensor cores for them) of :data:`BASE_CLOCK_MHZ`'s GPUs scaled by ``base / boost`` (variant
    ``base clock``; ``base clock, not GeForce`` leaves :data:`HALF_RATE_GEFORCE` alone; ``none``
    changes nothing)."""
    cat = copy.deepcopy(builtin_catalog())
    if variant == "none":
        return cat
    for name, base in BASE_CLOCK_MHZ.items():
        gpu = cat.gpus[name]
        if variant.endswith("not GeForce") and name in HALF_RATE_GEFORCE:
            continue
        f = min(1.0, base / gpu.boost_clock_mhz)
        peaks = gpu.peak_tflops.model_dump()
        for p in ("tf32", "fp16", "bf16"):
            if gpu.has_tensor_cores(p):
                peaks[p] *= f
        cat.gpus[name] = gpu.model_copy(update={"peak_tflops": type(gpu.peak_tflops)(**peaks)})
    return cat


def lambda_figures(rows: list[dict], cache: Path, cat: Catalog) -> dict[str, float]:
    """Ratio (median, leave-one-GPU-out) and absolute |error| (median) on the Lambda/DLE rows, %."""
    cases = []
    for r in rows:
        zoo, seq, opt, att, amp = fc.LAMBDA_MODELS.get(r["model"], (r["model"], None, "sgd", "fused", "autocast"))
        ops, _ = fc._profile(zoo, r["batch"], r["precision"], seq, opt, att, amp, cache)
        cases.append(SingleGpuCase(ops, cat.gpu(r["gpu"]), r["precision"], r["batch"], conv_layout=r["layout"],
                                   optimizer_kernels=fc.optimizer_kernels(r)))
    df = pl.DataFrame(rows).with_columns(after=predict_single_gpu(cases, catalog=cat)["samples_per_s"])
    med, logo, _ = fc.ratio_errors(df, "after")
    cross = df.filter(~pl.col("table").str.starts_with("pollux"))
    err = (cross["after"] / cross["measured"] - 1) * 100
    return {"ratio_median": med, "ratio_logo": logo, "abs_median": float(err.abs().median()),
            "abs_signed": float(err.median())}


def mpt_figures(data: Path, cat: Catalog) -> dict[str, float]:
    """Median |error| and signed error of tokens/s per GPU on the MPT table, all rows, the 7B-30B models
    (``mpt_signed_large``) and per GPU kind, %."""
    jobs, ops, rows = ff.build(data, causal_skip=True)
    out = breakdown(price_jobs(jobs, ops, catalog=cat)).with_columns(
        gpu_kind=rows["GPU"], measured=rows["Throughput (T/s/GPU)"].cast(pl.Float64),
        seq_len=rows["SeqLen (T)"])
    out = out.with_columns(error=(pl.col("batch_size") * pl.col("seq_len") / pl.col("step_s")) / pl.col("measured")
                           - 1, model=rows["Model"])
    figs = {"mpt_abs_median": 100 * float(out["error"].abs().median()),
            "mpt_signed": 100 * float(out["error"].median()),
            # the 7B-30B models: the largest GEMMs, where a tensor clock shows most directly
            "mpt_signed_large": 100 * float(out.filter(pl.col("model").is_in(["7b", "13b", "30b"]))["error"].median())}
    for kind, g in out.group_by("gpu_kind"):
        figs[f"mpt_signed_{kind[0]}"] = 100 * float(g["error"].median())
    return figs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=Path("/tmp/ddlscope-fidelity-cache"))
    args = ap.parse_args()
    data = find_shared_data()
    if data is None:
        raise SystemExit("shared/data not found (set DDLSCOPE_SHARED_DATA)")
    rows = fc.measurements(data)
    # the hypothesis was tested on the model without the power-limited tensor clock (added after it,
    # fidelity_power_limit.py): price every variant without it, so the figures are the recorded ones
    system_spec.GPUSpec.sustained_tensor_fraction = lambda gpu: 1.0
    for variant in VARIANTS:
        cat = derated_catalog(variant)
        lam, mpt = lambda_figures(rows, args.cache, cat), mpt_figures(data, cat)
        print(f"[{variant}] Lambda/DLE: cross-GPU ratio |error| median {lam['ratio_median']:.1f} %, "
              f"leave-one-GPU-out {lam['ratio_logo']:.1f} %; absolute |error| median {lam['abs_median']:.1f} % "
              f"(signed {lam['abs_signed']:+.1f} %)")
        print(f"    held out, MPT (FSDP, A100 SXM4): median |error| {mpt['mpt_abs_median']:.1f} % "
              f"(signed {mpt['mpt_signed']:+.1f} %); signed by GPU: 40 GB {mpt['mpt_signed_a100_40gb']:+.1f} %, "
              f"80 GB {mpt['mpt_signed_a100_80gb']:+.1f} %")


if __name__ == "__main__":
    main()
