"""Communication fidelity on one server: Lambda's 1-8 GPU PyTorch training throughput
(``shared/data/lambda_benchmarks``), scaling efficiency measured vs predicted.

Goal (issue 15): the predicted scaling efficiency ``throughput(n) / (n throughput(1))`` within
5 points (median) of the measured one.

Protocol. Each n-GPU row (n = 2, 4, 8) is matched with the same system's 1-GPU row (the name without
its ``Nx`` token; rows without one are counted as skipped) at the same per-GPU batch (else
skipped). The measured 1-GPU throughput is the compute anchor: a replica's compute time is
``t1 = batch / throughput(1)`` (the ``bs`` files give the server's batch, ``num_gpu`` times the
per-GPU one), so only communication is tested. The job is PyTorch DDP
(``allreduce_local``, n GPUs): FP32 gradients of the model's published parameter count
(:data:`PARAMETERS`, 4 bytes each; AMP keeps FP32 gradients) in DDP buckets, on PCIe for every
system: Lambda's scripts set ``NCCL_P2P_DISABLE=1``, so NCCL does not use NVLink (:func:`links_of`;
the rows are still reported by whether the server has NVLink). Predicted efficiency =
``t1 / step_s(n)``.

Two models on the same rows:

- ``before``: the model as it was (overlap ``full``: communication hidden as far as compute lasts,
  links at the system's default efficiency, NVLink 0.85 and PCIe 0.8 of the datasheet rate);
- ``after``: the scheduled overlap (buckets behind the backward, the last exposed, the wait for the
  slowest rank; :mod:`ddlscope.model.overlap` defaults: backward 2/3 of compute, sigma 0.01, launch
  20 us) and the catalog's transports (NVLink/PCIe achieved bus bandwidth).

Nothing is fitted on these rows. Models: ``resnet50`` (images/s, batch in images) and the two BERT
SQuAD fine-tunings (sequences/s, batch in sequences); left out (:data:`LEFT_OUT`, counted): ``ncf``
(SOURCES.md: implausible multi-GPU rows), ``ssd`` (no published parameter count at hand) and the
models whose throughput unit is not the batch's (tokens, audio samples, mel frames per second).

Run: ``PYTHONPATH=src python benchmarks/fidelity_comm.py [--data /work/shared/data] [--rows]``
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import polars as pl

from ddlscope.model.jobs import JOB_SCHEMA, job_row, jobs_frame
from ddlscope.model.step_time import breakdown
from ddlscope.shared_data import find_shared_data
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.specs.workload import Workload
from ddlscope.validate.ddp import ddp_buckets

PARAMETERS: dict[str, tuple[float, str]] = {
    "resnet50": (25_557_032, "He et al. CVPR 2016, torchvision resnet50"),
    "bert_base_squad": (110e6, "Devlin et al. NAACL 2019: BERT-base 110 M"),
    "bert_large_squad": (340e6, "Devlin et al. NAACL 2019: BERT-large 340 M"),
}
"""Model -> (parameters, source)."""
_UNITS = "throughput not in the batch's unit (tokens, audio samples or mel frames per s)"
LEFT_OUT = {"ncf": "implausible multi-GPU rows (SOURCES.md)", "ssd": "no parameter count at hand",
            "gnmt": _UNITS, "transformerxlbase": _UNITS, "transformerxllarge": _UNITS, "tacotron2": _UNITS,
            "waveglow": _UNITS}


def links_of(name: str) -> tuple[str, str]:
    """(nvlink, pcie) catalog links of a Lambda system name: NVLink never, as every Lambda benchmark runs
    with ``NCCL_P2P_DISABLE=1`` (``pytorch/scripts/benchmark_pytorch.sh``): NCCL exchanges through host
    memory over PCIe, NVLink included in what the setting turns off."""
    if "V100" in name or "Quadro RTX 8000" in name:
        return "none", "pcie3-x16"
    if "SXM5" in name or "Gen5" in name:
        return "none", "pcie5-x16"
    return "none", "pcie4-x16"


def load_rows(data: Path) -> tuple[pl.DataFrame, dict[str, int]]:
    """Matched (n-GPU, 1-GPU) rows: system, precision, model, n, batch, thr1, thrn; skipped by reason."""
    skipped: dict[str, int] = {}
    out = []
    for prec in ("fp32", "fp16"):
        thr, bs = (pl.read_csv(data / "lambda_benchmarks" / f"pytorch-train-{kind}-{prec}.csv")
                   .with_columns(pl.col("num_gpu").cast(pl.Int64), pl.exclude("name_gpu", "num_gpu").cast(pl.Float64))
                   for kind in ("throughput", "bs"))
        models = thr.columns[4:]
        long = thr.unpivot(models, index=["name_gpu", "num_gpu"], variable_name="model", value_name="thr").join(
            bs.unpivot(models, index=["name_gpu", "num_gpu"], variable_name="model", value_name="batch"),
            on=["name_gpu", "num_gpu", "model"])
        long = long.with_columns(base=pl.col("name_gpu").map_elements(
            lambda s: re.sub(r"\s*\b\d+\s*x\s*", " ", s).strip(), return_dtype=pl.String), precision=pl.lit(prec))
        one = long.filter(pl.col("num_gpu") == 1).select("base", "model", thr1="thr", batch1="batch")
        # the bs files give the whole server's batch: per GPU = bs / num_gpu
        multi = long.filter(pl.col("num_gpu") > 1).with_columns(batch=pl.col("batch") / pl.col("num_gpu"))
        for m in LEFT_OUT:
            key = f"{m}: {LEFT_OUT[m]}"
            skipped[key] = skipped.get(key, 0) + multi.filter(pl.col("model") == m).height
        multi = multi.filter(~pl.col("model").is_in(list(LEFT_OUT)))
        j = multi.join(one, on=["base", "model"], how="left")
        for reason, mask in (("no 1-GPU row of the same system", pl.col("thr1").is_null()),
                             ("not measured (0)", (pl.col("thr") <= 0) | (pl.col("thr1") <= 0)),
                             ("per-GPU batch differs from the 1-GPU row", pl.col("batch") != pl.col("batch1"))):
            n = j.filter(mask).height
            if n:
                skipped[reason] = skipped.get(reason, 0) + n
            j = j.filter(~mask.fill_null(True))
        out.append(j)
    return pl.concat(out), skipped


def predict(rows: pl.DataFrame, after: bool) -> pl.DataFrame:
    """``rows`` with ``predicted`` scaling efficiency under the ``after`` (or ``before``) model."""
    cat = builtin_catalog()
    jobs = []
    for i, r in enumerate(rows.iter_rows(named=True)):
        nv, pcie = links_of(r["name_gpu"])
        eff = {"compute": 1.0, "memory": 1.0}
        system = cat.system("dgx-a100", nvlink=nv, pcie=pcie, efficiency=eff)
        prec = r["precision"]
        peak = {"fp32": system.gpu.peak_tflops.fp32, "fp16": system.gpu.peak_tflops.fp16}[prec] * 1e12
        t1 = r["batch"] / r["thr1"]
        S = 4.0 * PARAMETERS[r["model"]][0]
        w = Workload(name=r["model"], batch_size=int(r["batch"]), precision=prec, compute_bound_flops=t1 * peak,
                     memory_bound_bytes=0.0, dense_param_bytes=S, num_gradient_tensors=ddp_buckets(S))
        arch = Architecture(kind="allreduce_local", num_workers=int(r["num_gpu"]))
        row = job_row(w, arch, system, job_id=i, overlap="scheduled" if after else "full")
        if not after:  # the model as it was: the system's default link efficiencies
            row.update(pcie_link_efficiency=None, nvlink_link_efficiency=None, nic_link_efficiency=None,
                       eff_pcie=0.8, eff_nvlink=0.85)
        jobs.append(row)
    out = breakdown(jobs_frame(jobs))
    assert set(JOB_SCHEMA) <= set(out.columns)
    return rows.with_columns(predicted=(pl.Series((rows["batch"] / rows["thr1"]).to_numpy()) / out["step_s"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None, help="shared data folder (default: the package's rule)")
    ap.add_argument("--rows", action="store_true", help="print every row")
    args = ap.parse_args()
    data = args.data or find_shared_data()
    if data is None:
        raise SystemExit("shared data folder not found: pass --data")
    rows, skipped = load_rows(data)
    rows = rows.with_columns(measured=pl.col("thr") / (pl.col("num_gpu") * pl.col("thr1")),
                             link=pl.when(pl.col("name_gpu").str.contains("SXM|V100"))
                             .then(pl.lit("nvlink server (P2P off)")).otherwise(pl.lit("pcie server")))
    print(f"rows: {rows.height} matched n-GPU rows (n = 2, 4, 8); skipped: {skipped}")
    pl.Config.set_tbl_rows(200)
    pl.Config.set_tbl_width_chars(200)
    for label, after in (("before", False), ("after", True)):
        p = predict(rows, after).with_columns(err_pts=100 * (pl.col("predicted") - pl.col("measured")))
        med = p["err_pts"].abs().median()
        by = p.group_by("link").agg(rows=pl.len(), median_abs_err_pts=pl.col("err_pts").abs().median(),
                                    measured_median=pl.col("measured").median(),
                                    predicted_median=pl.col("predicted").median()).sort("link")
        print(f"\n{label}: median |predicted - measured| scaling efficiency = {med:.1f} points over {p.height} rows")
        print(by)
        if args.rows:
            print(p.select("name_gpu", "precision", "model", "num_gpu", "batch", "measured", "predicted", "err_pts"))


if __name__ == "__main__":
    main()
