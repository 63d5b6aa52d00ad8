"""FSDP fidelity: llm-foundry's measured MPT training throughput on A100 (``shared/data/llm_foundry_mpt``),
predicted vs measured tokens/s per GPU and MFU, at the catalog defaults (nothing fitted).

Goal (issue 16): median |error| of MFU / tokens per second per GPU <= 10 %.

Protocol. Every row of ``mpt_training_throughput.csv`` (139: MPT 125M-70B, sequence 512-65,536,
8-128 GPUs, FSDP ``FULL_SHARD``) becomes one ``fsdp`` job (sharding ``zero3``, the row's GPU count
on 8-GPU servers): the workload is the analytic decoder of :mod:`ddlscope.profile.llm` for the MPT
shape (``mpt_model_shapes.csv``) at the row's sequence length and micro-batch, run as llm-foundry
ran it when the README's A100 tables were made: FlashAttention v1 (``flash_attention_version=1``:
the tables predate the README's "update tables with torch 2.0" note, the submit script's image is
``mosaicml/pytorch:1.13.1``, and llm-foundry's ``flash_attn_fn`` of that time asks for
``flash-attn==1.0.3.post0``; its ``gpu`` extra became FlashAttention-2 later, ``gpu-flash2``
"kept for backwards compatibility"), the tokens unpadded around the kernel and the fused
cross-entropy (:func:`~ddlscope.profile.llm.mpt_configs`), activation
recomputation ``full`` where the row has activation checkpointing, gradients reduced in FP32
(``MP Mode`` DEFAULT, llm-foundry's ``amp_bf16``) or bf16 (``PURE``). System: ``dgx-a100`` (8 x
A100 SXM4 on NVLink 3) with the row's GPU (80 or 40 GB) and 8 x 200 Gb/s RoCE NICs (the README's
1,600 Gb/s node-to-node RoCE). Compute is priced op by op (:func:`ddlscope.model.compute.price_jobs`,
the Ampere efficiencies of the catalog); overlap is the FSDP prefetch schedule. A step is one
micro-batch (FULL_SHARD all-gathers and reduce-scatters every micro-batch); predicted tokens/s per
GPU = ``micro_batch x seq / step_s``; predicted MFU = that x ``6 N + 12 L h s`` (llm-foundry's
definition, ``N`` the row's ``NumParams``) / 312 TFLOP/s. Rows whose predicted memory does not fit
the GPU are counted and kept (they were measured, so they ran).

``--fit lomo``: leave-one-model-out. Three things are fitted by grid search on the median |error| of
the other eight models' rows: the Ampere ``tensor_gemm_eff`` (0.50-0.80) and ``memory_eff``
(0.2-0.85) of the op pricing, and whether the flash attention skips the causal mask's blocks
(:class:`~ddlscope.profile.llm.DecoderConfig` ``causal_skip``); each model's rows are predicted by
the fit that never saw them.

Run: ``PYTHONPATH=src python benchmarks/fidelity_fsdp.py [--data /work/shared/data] [--rows] [--fit lomo]
[--png out.png]``
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

from ddlscope.model.compute import price_jobs
from ddlscope.model.jobs import job_row, jobs_frame
from ddlscope.model.step_time import breakdown
from ddlscope.profile.llm import decoder_workload, flops_per_token_mfu, mpt_configs
from ddlscope.shared_data import find_shared_data
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.specs.efficiency import ComputeEfficiency

A100_BF16_PEAK = 312e12
"""A100 dense BF16 tensor peak (NVIDIA A100 datasheet), the README's MFU denominator."""
GPUS = {"a100_80gb": "A100-SXM4-80GB", "a100_40gb": "A100-SXM4-40GB"}


FLASH_ATTENTION_VERSION = 1
"""The flash-attn release of the A100 tables' runs (module docstring)."""


def build(data: Path, causal_skip: bool) -> tuple[pl.DataFrame, dict[str, pl.DataFrame], pl.DataFrame]:
    """The Jobs table (one ``fsdp`` job per measurement, module docstring), the op tables by
    workload name, and the measurement rows."""
    folder = data / "llm_foundry_mpt"
    rows = pl.read_csv(folder / "mpt_training_throughput.csv")
    cat = builtin_catalog()
    jobs, ops, meta = [], {}, []
    for i, r in enumerate(rows.iter_rows(named=True)):
        seq, mb, p = r["SeqLen (T)"], r["MicroBatchSize"], r["# GPUs"]
        cfg = mpt_configs(folder / "mpt_model_shapes.csv", seq_len=seq, causal_skip=causal_skip,
                          flash_attention_version=FLASH_ATTENTION_VERSION)[r["Model"]]
        recompute = "full" if r["Activation Checkpointing"] else "none"
        grad_bytes = 2.0 if r["MP Mode"] == "PURE" else 4.0
        w, table = decoder_workload(cfg, mb, recompute=recompute, grad_bytes_per_param=grad_bytes,
                                    name=f"{r['Model']}/s{seq}/mb{mb}/{recompute}/g{grad_bytes:g}")
        ops[w.name] = table
        system = cat.system("dgx-a100", gpu=GPUS[r["GPU"]], nic="roce-200g")
        arch = Architecture(kind="fsdp", num_workers=p, sharding=r["Sharding Strategy"])
        jobs.append(job_row(w, arch, system, job_id=i, overlap="scheduled"))
        meta.append({"job_id": i, "mfu_flops_per_token": flops_per_token_mfu(cfg, r["NumParams"])})
    return jobs_frame(jobs).join(pl.DataFrame(meta), on="job_id"), ops, rows


def evaluate(jobs: pl.DataFrame, ops: dict[str, pl.DataFrame], rows: pl.DataFrame,
             efficiency: ComputeEfficiency | None = None) -> pl.DataFrame:
    """Predicted vs measured per row, with ``efficiency`` for the A100 (Ampere) or the catalog's."""
    cat = builtin_catalog()
    eff = {"ampere": efficiency} if efficiency is not None else None
    out = breakdown(price_jobs(jobs, ops, efficiencies=eff, catalog=cat))
    return out.with_columns(
        model=rows["Model"], seq_len=rows["SeqLen (T)"], gpus=rows["# GPUs"], gpu_kind=rows["GPU"],
        recompute=rows["Activation Checkpointing"],
        measured_tokens_per_s_per_gpu=rows["Throughput (T/s/GPU)"].cast(pl.Float64),
        measured_mfu=rows["MFU"] / 100.0,
    ).with_columns(
        predicted_tokens_per_s_per_gpu=pl.col("batch_size") * pl.col("seq_len") / pl.col("step_s"),
    ).with_columns(
        predicted_mfu=pl.col("predicted_tokens_per_s_per_gpu") * pl.col("mfu_flops_per_token") / A100_BF16_PEAK,
    ).with_columns(
        error=pl.col("predicted_tokens_per_s_per_gpu") / pl.col("measured_tokens_per_s_per_gpu") - 1,
    )


def predict(data: Path) -> pl.DataFrame:
    """One row per measurement at the catalog defaults (the causal skip both flash-attn releases make)."""
    return evaluate(*build(data, causal_skip=True))


TENSOR_GRID = tuple(round(0.50 + 0.025 * i, 3) for i in range(13))  # 0.50 .. 0.80
MEMORY_GRID = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.85)


def leave_one_model_out(data: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Fit (``tensor_gemm_eff``, ``memory_eff`` of the Ampere efficiencies, ``causal_skip``) by grid
    search on the median |error| of every model but one, predict the held-out model's rows; one fold
    per model. Returns the test predictions (every row once) and the per-fold parameters."""
    base = builtin_catalog().compute_efficiency["ampere"]
    built = {skip: build(data, skip) for skip in (True, False)}
    grid = {}
    for skip, (jobs, ops, rows) in built.items():
        for t in TENSOR_GRID:
            for m in MEMORY_GRID:
                eff = base.with_values({"tensor_gemm_eff": t, "memory_eff": m}, note="leave-one-model-out grid")
                grid[(skip, t, m)] = evaluate(jobs, ops, rows, eff).select("model", "error")
    models = built[True][2]["Model"].unique(maintain_order=True).to_list()
    tests, folds = [], []
    for held in models:
        def train_error(key: tuple, held: str = held) -> float:
            return float(grid[key].filter(pl.col("model") != held)["error"].abs().median())
        best = min(grid, key=train_error)
        skip, t, m = best
        jobs, ops, rows = built[skip]
        eff = base.with_values({"tensor_gemm_eff": t, "memory_eff": m}, note=f"fitted without {held}")
        test = evaluate(jobs, ops, rows, eff).filter(pl.col("model") == held)
        tests.append(test)
        folds.append({"held_out": held, "causal_skip": skip, "tensor_gemm_eff": t, "memory_eff": m,
                      "train_median_abs_error": train_error(best),
                      "test_median_abs_error": float(test["error"].abs().median()), "test_rows": test.height})
    return pl.concat(tests), pl.DataFrame(folds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--rows", action="store_true", help="print every row")
    ap.add_argument("--png", type=Path, default=None, help="write predicted vs measured MFU here")
    ap.add_argument("--fit", choices=("none", "lomo"), default="none",
                    help="none: catalog defaults; lomo: leave-one-model-out fit of the Ampere GEMM and memory "
                         "efficiencies and the causal skip")
    args = ap.parse_args()
    data = args.data or find_shared_data()
    if data is None:
        raise SystemExit("no shared data folder found; pass --data")
    if args.fit == "lomo":
        out, folds = leave_one_model_out(data)
        with pl.Config(tbl_rows=20, tbl_cols=10, tbl_width_chars=200, float_precision=3):
            print(folds)
    else:
        out = predict(data)
    label = "catalog defaults" if args.fit == "none" else "leave-one-model-out"
    cols = ["model", "seq_len", "gpus", "gpu_kind", "recompute", "batch_size", "measured_mfu", "predicted_mfu",
            "measured_tokens_per_s_per_gpu", "predicted_tokens_per_s_per_gpu", "error", "share_comm",
            "fits_gpu_memory"]
    with pl.Config(tbl_rows=200, tbl_cols=20, tbl_width_chars=220, float_precision=3):
        if args.rows:
            print(out.select(cols))
        by = (out.group_by("model").agg(rows=pl.len(), median_abs_error=pl.col("error").abs().median(),
                                        median_error=pl.col("error").median(),
                                        measured_mfu=pl.col("measured_mfu").median(),
                                        predicted_mfu=pl.col("predicted_mfu").median())
              .sort(pl.col("model").str.extract(r"(\d+)").cast(pl.Int64) * pl.when(
                  pl.col("model").str.ends_with("b")).then(1000).otherwise(1)))
        print(by)
    err = out["error"].abs()
    print(f"[{label}] rows: {out.height}; median |error| tokens/s/GPU (= MFU): {err.median():.1%}; "
          f"within 10 %: {(err <= 0.10).mean():.0%}; within 20 %: {(err <= 0.20).mean():.0%}; "
          f"median signed error: {out['error'].median():+.1%}; "
          f"predicted not to fit the GPU: {(~out['fits_gpu_memory'].fill_null(True)).sum()}")
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        top = max(80.0, 10.0 * float((max(out["predicted_mfu"].max(), out["measured_mfu"].max()) * 10 + 0.5) // 1 + 1))
        fig, ax = plt.subplots(figsize=(6.5, 5.5))
        for kind, marker in (("a100_80gb", "o"), ("a100_40gb", "^")):
            sub = out.filter(pl.col("gpu_kind") == kind)
            ax.scatter(sub["measured_mfu"] * 100, sub["predicted_mfu"] * 100, marker=marker, alpha=0.7,
                       label=f"{kind.replace('_', ' ').upper()} ({sub.height} rows)")
        ax.plot([0, top], [0, top], color="grey", lw=1, label="predicted = measured")
        ax.fill_between([0, top], [0, 0.9 * top], [0, 1.1 * top], color="grey", alpha=0.15, label="±10 %")
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_xlabel("measured MFU (%)  [llm-foundry README]")
        ax.set_ylabel(f"predicted MFU (%)  [ddlscope fsdp, {label}]")
        ax.set_title(f"MPT 125M-70B, FSDP FULL_SHARD, 8-128 A100\nmedian |error| {err.median():.1%}")
        ax.legend(loc="upper left", fontsize=8)
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
