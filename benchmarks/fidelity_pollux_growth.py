"""How Pollux's measured sync time grows with the GPUs, and whether a per-ring-step latency fitted
leave-one-job-out explains it (issue 15; the figures of docs/validation.md, "Where the model is
still wrong").

1. The measurement alone: the rows of both tables (placements and scalability) on 3-16 nodes; per
   job, the least-squares slope of ``sync_time`` against the number of GPUs with the batch per GPU
   held fixed (each batch's rows centred on their own means, one slope over all batches), in ms
   per added GPU; divided by ``2 x`` the job's DDP bucket count (a ring all-reduce pays ``2 (p-1)``
   latencies per bucket) and by the gradient in MB, to compare with a per-step latency and a
   per-byte cost. The bucket counts and gradient bytes come from the zoo profiles
   (``ddlscope.validate.ddp.ddp_buckets``, PyTorch DDP's 1 MiB first bucket and 25 MiB after).
2. ``--latency-grid``: the leave-one-job-out fit of ``pollux_validation`` with the NIC's per-step
   latency (``nic_latency_s``, 25-400 us) added to the grid of ``POLLUX_GRID``; prints each fold's
   fit and the held-out step and sync MAPE per job (about a minute; the default validation keeps
   the catalog's 25 us).

Usage: ``PYTHONPATH=src python benchmarks/fidelity_pollux_growth.py [--data DIR] [--latency-grid]``
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import polars as pl

from ddlscope.model.step_time import breakdown
from ddlscope.profile import profile_model
from ddlscope.shared_data import find_shared_data
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.validate import published as P
from ddlscope.validate.ddp import ddp_buckets
from ddlscope.validate.measurements import fit_efficiencies, price_measurement_jobs

LATENCIES_US = (25, 50, 100, 200, 400)


def sync_growth(data: Path) -> pl.DataFrame:
    """Per job: rows used, slope of sync time per added GPU (ms), DDP buckets, gradient MB, and the
    slope per ring step and bucket (ms) and per MB (ms)."""
    out = []
    for job, (model, precision, optimizer, _) in P.POLLUX_JOBS.items():
        parts = []
        for kind in ("placements", "scalability"):
            t = P.read_pollux_table(data / "pollux" / job / f"{kind}.csv", kind)
            if kind == "placements":
                digits = pl.col("placement").str.split("").cast(pl.List(pl.Int64))
                t = t.with_columns(num_nodes=pl.col("placement").str.len_chars().cast(pl.Int64),
                                   num_replicas=digits.list.sum())
            parts.append(t.select(pl.col("num_nodes").cast(pl.Int64), pl.col("num_replicas").cast(pl.Int64),
                                  "local_bsz", "sync_time"))
        rows = pl.concat(parts).filter(pl.col("num_nodes") >= 3)
        centred = rows.with_columns(
            x=pl.col("num_replicas") - pl.col("num_replicas").mean().over("local_bsz"),
            y=pl.col("sync_time") - pl.col("sync_time").mean().over("local_bsz"))
        slope_ms = float((centred["x"] * centred["y"]).sum() / (centred["x"] ** 2).sum()) * 1e3
        # as the validation profiles them: embedding gradients dense (ncf's setting; the ResNets have none)
        grad_bytes = profile_model(model, batch_size=2, precision=precision, optimizer=optimizer,
                                   embedding_gradients="dense").workload.dense_param_bytes
        buckets = ddp_buckets(grad_bytes)
        out.append({"job": job, "rows": rows.height, "ms_per_gpu": slope_ms, "ddp_buckets": buckets,
                    "gradient_mb": grad_bytes / 1e6, "ms_per_step_and_bucket": slope_ms / (2 * buckets),
                    "ms_per_gpu_per_mb": slope_ms / (grad_bytes / 1e6)})
    return pl.DataFrame(out)


def _multi_gpu_jobs(data: Path) -> pl.DataFrame:
    """The Pollux multi-GPU jobs priced as ``pollux_validation`` prices them (factors per job)."""
    cat = builtin_catalog()
    rows = P._pollux_rows(data, {})
    jobs = P.pollux_measurement_jobs(rows, cat.system(P.POLLUX_SERVER), cat)
    priced = []
    for job in P.POLLUX_JOBS:
        part = jobs.filter(pl.col("job") == job)
        fit = fit_efficiencies(part.filter(pl.col("gpus") == 1), job, cat)
        priced.append(price_measurement_jobs(part, fit.efficiencies(cat), cat))
    return pl.concat(priced, how="vertical_relaxed").filter(pl.col("gpus") > 1)


def _fit_with_latency(jobs: pl.DataFrame) -> dict[str, float]:
    """``_fit_network``'s grid, once per latency (a cross join of all of them at once does not fit
    in memory), the best point over all."""
    grid = pl.DataFrame(list(itertools.product(*P.POLLUX_GRID.values())), schema=list(P.POLLUX_GRID),
                        orient="row")
    best: dict[str, float] | None = None
    for lat_us in LATENCIES_US:
        trial = breakdown(jobs.with_columns(nic_latency_s=pl.lit(lat_us * 1e-6)).drop(list(P.POLLUX_GRID), strict=False)
                          .join(grid, how="cross"))
        row = (trial.group_by(list(P.POLLUX_GRID))
               .agg(step=(pl.col("step_s") / pl.col("step_time") - 1).abs().mean(),
                    sync=(pl.col("exposed_comm_s") / pl.col("sync_time") - 1).abs().mean())
               .with_columns(score=pl.col("step") + pl.col("sync")).sort("score", *P.POLLUX_GRID).row(0, named=True))
        row["nic_latency_us"] = lat_us
        if best is None or row["score"] < best["score"]:
            best = row
    assert best is not None
    return best


def latency_grid(data: Path) -> pl.DataFrame:
    """Per held-out job: the latency and network parameters fitted on the other two jobs, and the
    held-out step and sync MAPE (fractions)."""
    multi = _multi_gpu_jobs(data)
    out = []
    for job in P.POLLUX_JOBS:
        best = _fit_with_latency(multi.filter(pl.col("job") != job))
        test = breakdown(multi.filter(pl.col("job") == job).with_columns(
            nic_latency_s=pl.lit(best["nic_latency_us"] * 1e-6),
            **{k: pl.lit(best[k], pl.Float64) for k in P.POLLUX_GRID}))
        out.append({"held_out": job, "nic_latency_us": best["nic_latency_us"],
                    **{k: best[k] for k in P.POLLUX_GRID},
                    "step_mape": float((test["step_s"] / test["step_time"] - 1).abs().mean()),
                    "sync_mape": float((test["exposed_comm_s"] / test["sync_time"] - 1).abs().mean())})
    return pl.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None, help="the shared data folder (default: found)")
    ap.add_argument("--latency-grid", action="store_true", help="also refit with the NIC latency in the grid")
    args = ap.parse_args()
    data = args.data or find_shared_data()
    pl.Config.set_tbl_width_chars(200)
    pl.Config.set_tbl_cols(20)
    print("Pollux sync time growth with the GPUs (3-16 nodes, batch held fixed; least squares):")
    print(sync_growth(data).with_columns(pl.col(pl.Float64).round(4)))
    if args.latency_grid:
        print(f"leave one job out with nic_latency_s in {list(LATENCIES_US)} us added to POLLUX_GRID:")
        print(latency_grid(data).with_columns(pl.col(pl.Float64).round(4)))


if __name__ == "__main__":
    main()
