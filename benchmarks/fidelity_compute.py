"""Compute fidelity across GPUs, models and batch sizes (issue 14): the op-level model vs the totals model.

Measurements (kept apart from the team: nothing here is fitted on them; defaults only):

- Lambda ``pytorch-train-throughput-{fp32,fp16}.csv``, one-GPU rows, models ``resnet50``,
  ``bert_base_squad``, ``bert_large_squad`` (zoo ``resnet50`` at 224 px with SGD; ``bert_base_squad`` /
  ``bert_large_squad`` at SQuAD's 384 tokens with Adam, DLE's unfused attention and apex O2 AMP), each at Lambda's batch
  (``pytorch-train-bs-*.csv``); throughput in images/s or sequences/s (SOURCES.md). Lambda's "fp32"
  runs in NGC containers, which enable TF32 on GPUs that have it: priced as ``tf32`` there.
  Rows of one GPU from several vendors (the H100 SXM5 of Dell, SMC, ...) are one GPU: their
  median throughput is the measurement.
- NVIDIA DeepLearningExamples ResNet-50 v1.5 tables (``dle_tables/``), one-GPU rows: V100 16/32 GB
  FP32/AMP, A100 80 GB TF32/AMP, at the table's batch per GPU.
- Pollux (OSDI'21) ``placements.csv`` rows with placement ``1``: one T4 (AWS g4dn), ResNet-50
  (``imagenet``) and ResNet-18 on CIFAR-10 (``cifar10``, zoo ``resnet18_cifar``) at 8-11 batch
  sizes; compute time = ``step_time - sync_time``; precision as adaptdl's ``benchmark/models`` run
  them: ImageNet AMP (``imagenet/main.py`` calls apex ``amp.initialize(model, optimizer)``, opt level
  O1 by default: priced as ``fp16`` with autocast casts), CIFAR-10 FP32 (``cifar10/main.py``, no AMP).
  Until 2026-12-06 this benchmark priced the ImageNet rows as FP32 (an unchecked assumption; the
  Pollux validation of ``ddlscope.validate.published`` already ran them as AMP).

Activation layout (``conv_layout``): NCHW everywhere (PyTorch's default; Lambda's configuration,
``pytorch/scripts/config_v1/config_pytorch_80GB.sh`` of lambdal/deeplearning-benchmark, passes no
memory format), except DLE 21.03's AMP rows, which ``configs.yml`` runs as ``memory_format: nhwc``.

Figures printed, each for ``before`` (the totals path: one ``eff_compute`` 0.6 / ``eff_memory`` 0.7
for every GPU and op) and ``after`` (every op priced, per-generation efficiencies of the catalog):

1. cross-GPU ratio error: for every pair of GPUs with the same model and precision in one table,
   ``|ln(predicted ratio / measured ratio)|`` as a percentage (``exp(.) - 1``), median over pairs;
   leave-one-GPU-out: the median over GPUs of the median error of the pairs that GPU is in;
2. absolute throughput error ``|predicted / measured - 1|``: median and mean by model family;
3. throughput vs batch size on one GPU (Pollux T4): median |error| of absolute throughput, and of
   the throughput normalised by the same model's largest-batch row (the shape of the curve).

Goals (issue 14): LOGO median ratio error <= 10 %, absolute <= 12 %, vs batch within 10 %.

Run: ``PYTHONPATH=src python benchmarks/fidelity_compute.py [--cache DIR] [--rows]``. Profiles
(meta-device traces, ~40 of them, a few seconds each) are cached under ``--cache``.
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

import polars as pl

from ddlscope.model.compute import OP_INPUT_COLUMNS, SingleGpuCase, predict_single_gpu
from ddlscope.model.jobs import job_row, jobs_frame
from ddlscope.model.step_time import breakdown
from ddlscope.shared_data import find_shared_data
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.specs.system import System
from ddlscope.specs.workload import Workload
from ddlscope.validate.shared_tables import MULTI_TENSOR_UNDER_AMP

LAMBDA_MODELS = {"resnet50": ("resnet50", None, "sgd", "fused", "autocast"),
                 "bert_base_squad": ("bert_base_squad", 384, "adam", "math", "o2"),
                 "bert_large_squad": ("bert_large_squad", 384, "adam", "math", "o2")}
"""Lambda column -> (zoo model, sequence length, optimizer, attention, AMP mode): the SQuAD fine-tunings
as DeepLearningExamples runs them (Adam; attention unfused, ``modeling.py``'s ``BertSelfAttention``;
AMP as apex O2, ``run_squad.py``; :data:`ddlscope.validate.shared_tables.LAMBDA_MODELS`)."""


def optimizer_kernels(row: dict) -> str:
    """How a measurement row's optimizer step launched (``ddlscope.model.compute.OPTIMIZER_KERNELS``), as
    ``validate --published`` prices it: ``foreach`` for Lambda's BERT AMP rows (apex ``FusedAdam``,
    :data:`ddlscope.validate.shared_tables.MULTI_TENSOR_UNDER_AMP`), ``for_loop`` for every other row
    (PyTorch before 2.0: Lambda 1.13, DeepLearningExamples 1.3/1.9, Pollux 1.7)."""
    return "foreach" if row["model"] in MULTI_TENSOR_UNDER_AMP and row["precision"] == "fp16" else "for_loop"


def _profile(model: str, batch: int, precision: str, seq_len: int | None, optimizer: str, attention: str,
             amp: str, cache: Path) -> tuple[pl.DataFrame, Workload]:
    """Op table and workload of one step, from the cache or traced (tf32 shares the fp32 trace)."""
    prof_prec = "fp32" if precision == "tf32" else precision
    amp = amp if prof_prec in ("fp16", "bf16") else "autocast"
    key = f"{model}-b{batch}-{prof_prec}-s{seq_len}-{optimizer}-{attention}-{amp}-shapes"
    ops_path, wl_path = cache / f"{key}.parquet", cache / f"{key}.json"
    if ops_path.exists() and wl_path.exists():
        return pl.read_parquet(ops_path), Workload.model_validate_json(wl_path.read_text())
    from ddlscope.profile import profile_model

    kw = {"seq_len": seq_len} if seq_len else {}
    r = profile_model(model, batch_size=batch, precision=prof_prec, optimizer=optimizer, attention=attention, amp=amp,
                      **kw)
    ops = r.ops.select(*OP_INPUT_COLUMNS, "shape", "read_bytes")  # shapes: the optimizer's multi-tensor launches
    cache.mkdir(parents=True, exist_ok=True)
    ops.write_parquet(ops_path)
    wl_path.write_text(r.workload.model_dump_json())
    return ops, r.workload


def measurements(data: Path) -> list[dict]:
    """Every measurement row: table, model, zoo model, gpu (canonical), precision, batch, measured
    samples/s (``measured``)."""
    cat = builtin_catalog()
    rows: list[dict] = []
    lam = data / "lambda_benchmarks"
    for prec in ("fp32", "fp16"):
        with open(lam / f"pytorch-train-throughput-{prec}.csv") as f:
            thr = [r for r in csv.DictReader(f) if float(r["num_gpu"]) == 1]
        with open(lam / f"pytorch-train-bs-{prec}.csv") as f:
            bs = {r["name_gpu"]: r for r in csv.DictReader(f)}
        per: dict[tuple, list[float]] = {}
        for r in thr:
            gpu, _ = cat.gpu_of_label(r["name_gpu"])
            p = "fp16" if prec == "fp16" else ("tf32" if gpu.has_tensor_cores("tf32") else "fp32")
            for col in LAMBDA_MODELS:
                if float(r[col]) > 0:
                    per.setdefault((gpu.name, p, col, int(bs[r["name_gpu"]][col])), []).append(float(r[col]))
        for (gpu, p, col, b), vals in per.items():
            vals.sort()
            med = vals[len(vals) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2
            rows.append({"table": f"lambda-{'fp16' if p == 'fp16' else 'fp32'}", "model": col, "gpu": gpu,
                         "precision": p, "batch": b, "measured": med, "layout": "nchw"})
    for fname in sorted((data / "dle_tables").glob("*.csv")):
        with open(fname) as f:
            for r in csv.DictReader(f):
                if int(r["gpus"]) != 1:
                    continue
                gpu = cat.gpu(r["gpu_model"]).name
                p = {"AMP": "fp16", "TF32": "tf32", "FP32": "fp32"}[r["precision"]]
                # DLE configs.yml (097c7ff, the commit SOURCES.md cites) runs AMP with memory_format nhwc;
                # the 19.10 container (PyTorch 1.3) predates channels_last: NCHW
                nhwc = p == "fp16" and "21.03" in fname.stem
                rows.append({"table": f"dle-{fname.stem.split('_')[-1]}", "model": "resnet50", "gpu": gpu,
                             "precision": p, "batch": int(r["batch_per_gpu"]),
                             "measured": float(r["throughput_img_s"]), "layout": "nhwc" if nhwc else "nchw"})
    # adaptdl's benchmark/models: imagenet/main.py calls apex amp.initialize(model, optimizer) (opt_level
    # O1 by default: the GEMMs in FP16, casts per call, as autocast); cifar10/main.py trains in FP32
    for folder, model, precision in (("imagenet", "resnet50", "fp16"), ("cifar10", "resnet18_cifar", "fp32")):
        with open(data / "pollux" / folder / "placements.csv") as f:
            for r in csv.DictReader(f):
                if r["placement"] == "1":
                    b = int(r["local_bsz"])
                    rows.append({"table": f"pollux-{folder}", "model": model, "gpu": "T4", "precision": precision,
                                 "batch": b, "measured": b / (float(r["step_time"]) - float(r["sync_time"])),
                                 "layout": "nchw"})
    return rows


def predict(rows: list[dict], cache: Path) -> pl.DataFrame:
    """Both models' samples/s for every measurement row (columns ``before``, ``after``)."""
    cat = builtin_catalog()
    system0 = cat.system("pai-v100-pcie-8")
    cases, before = [], []
    for r in rows:
        zoo, seq, opt, att, amp = LAMBDA_MODELS.get(r["model"], (r["model"], None, "sgd", "fused", "autocast"))
        ops, wl = _profile(zoo, r["batch"], r["precision"], seq, opt, att, amp, cache)
        wl = wl.model_copy(update={"precision": r["precision"]})
        cases.append(SingleGpuCase(ops, r["gpu"], r["precision"], r["batch"], label=f"{r['table']}:{r['gpu']}",
                                   conv_layout=r["layout"], optimizer_kernels=optimizer_kernels(r)))
        sysm = System(**{**system0.model_dump(), "gpu": cat.gpu(r["gpu"])})
        b = breakdown(jobs_frame([job_row(wl, Architecture(kind="1w1g"), sysm)])).row(0, named=True)
        before.append(r["batch"] / (b["compute_bound_s"] + b["memory_bound_s"]))
    after = predict_single_gpu(cases, catalog=cat)
    return pl.DataFrame(rows).with_columns(before=pl.Series(before), after=after["samples_per_s"])


def _sym_pct(x: float) -> float:
    return (math.exp(abs(math.log(x))) - 1) * 100


def ratio_errors(df: pl.DataFrame, col: str) -> tuple[float, float, int]:
    """(median over pairs, leave-one-GPU-out median, pairs) of the cross-GPU ratio error, in %."""
    errs: list[tuple[str, str, float]] = []
    for _, g in df.filter(~pl.col("table").str.starts_with("pollux")).group_by(["table", "model", "precision"]):
        recs = g.rows(named=True)
        for i, a in enumerate(recs):
            for bb in recs[i + 1:]:
                if a["gpu"] == bb["gpu"]:
                    continue
                e = _sym_pct((a[col] / bb[col]) / (a["measured"] / bb["measured"]))
                errs.append((a["gpu"], bb["gpu"], e))
    if not errs:
        return float("nan"), float("nan"), 0
    med = float(pl.Series([e for *_, e in errs]).median())
    gpus = sorted({x for a, b, _ in errs for x in (a, b)})
    logo = float(pl.Series([pl.Series([e for a, b, e in errs if g in (a, b)]).median() for g in gpus]).median())
    return med, logo, len(errs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=Path("/tmp/ddlscope-fidelity-cache"))
    ap.add_argument("--rows", action="store_true", help="print every row")
    args = ap.parse_args()
    data = find_shared_data()
    if data is None:
        raise SystemExit("shared/data not found (set DDLSCOPE_SHARED_DATA)")
    df = predict(measurements(data), args.cache)
    df = df.with_columns(err_before=(pl.col("before") / pl.col("measured") - 1) * 100,
                         err_after=(pl.col("after") / pl.col("measured") - 1) * 100)
    if args.rows:
        with pl.Config(tbl_rows=200, tbl_width_chars=200, float_precision=1):
            print(df)
    print(f"rows: {df.height} (Lambda 1-GPU, DLE ResNet-50 1-GPU, Pollux T4 1-GPU); defaults only, nothing fitted")
    for col in ("before", "after"):
        med, logo, n = ratio_errors(df, col)
        print(f"[{col}] cross-GPU ratio |error|: median {med:.1f} % over {n} pairs; "
              f"leave-one-GPU-out median {logo:.1f} %")
    groups = (df.filter(~pl.col("table").str.starts_with("pollux")).select("table", "model").unique()
              .sort("table", "model"))
    for t, m in groups.iter_rows():
        sub = df.filter((pl.col("table") == t) & (pl.col("model") == m))
        figs = []
        for col in ("before", "after"):
            med, _, n = ratio_errors(sub, col)
            figs.append(f"{col} {med:.1f} %")
        if n:
            print(f"    {t} {m}: ratio median |error| {', '.join(figs)} ({n} pairs)")
    cross = df.filter(~pl.col("table").str.starts_with("pollux"))
    fam = cross.with_columns(family=pl.when(pl.col("model").str.starts_with("bert")).then(pl.lit("bert"))
                             .otherwise(pl.lit("resnet50")))
    for col in ("before", "after"):
        e = pl.col(f"err_{col}").abs()
        agg = fam.group_by("family").agg(median=e.median(), mean=e.mean(), n=pl.len()).sort("family")
        parts = ", ".join(f"{r['family']} median {r['median']:.1f} % / mean {r['mean']:.1f} % (n={r['n']})"
                          for r in agg.iter_rows(named=True))
        print(f"[{col}] absolute throughput |error|: all median {cross[f'err_{col}'].abs().median():.1f} %; {parts}")
    pol = df.filter(pl.col("table").str.starts_with("pollux"))
    for col in ("before", "after"):
        shape = pol.with_columns(
            norm_err=((pl.col(col) / pl.col(col).filter(pl.col("batch") == pl.col("batch").max()).first())
                      / (pl.col("measured") / pl.col("measured").filter(pl.col("batch") == pl.col("batch").max())
                         .first()) - 1).over("table") * 100)
        print(f"[{col}] vs batch (Pollux T4, {pol.height} rows): absolute median |error| "
              f"{pol[f'err_{col}'].abs().median():.1f} %, normalised to the largest batch median |error| "
              f"{shape['norm_err'].abs().median():.1f} % (max {shape['norm_err'].abs().max():.1f} %)")


if __name__ == "__main__":
    main()
