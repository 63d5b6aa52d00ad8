"""Where the communication model errs on the Pollux tables, by number of servers (issue 15).

Two tables:

1. The model's error on the multi-GPU rows of the leave-one-job-out validation
   (:func:`ddlscope.validate.published.pollux_validation`), by job and number of servers
   (:func:`~ddlscope.validate.published.pollux_errors_by_servers`): step time and exposed
   communication against Pollux's ``step_time`` and ``sync_time``.
2. The measurement alone, no model: each multi-server row of the placements tables divided by the
   median of the rows of the same job, the same number of GPUs (the sum of the placement's digits,
   not the busiest-node pricing of the validation) and the same batch per GPU, then the median of
   that ratio by (GPUs, servers). A byte-counting model of NCCL's flat ring, ddlscope's or any other,
   predicts the same communication for every placement of a GPU count over two or more servers:
   each NIC carries ``2 (p - 1) / p`` of the gradient. The measurement says otherwise (printed).

Usage: ``PYTHONPATH=src python benchmarks/fidelity_pollux_servers.py [--data DIR]``
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

from ddlscope.shared_data import find_shared_data
from ddlscope.validate.published import POLLUX_JOBS, pollux_validation


def measured_by_servers(data: Path) -> pl.DataFrame:
    """Median over rows of ``sync_time`` and ``step_time`` relative to the median of the same job,
    GPU count and batch per GPU (multi-server placements rows only), by job, GPUs and servers."""
    frames = []
    for job in POLLUX_JOBS:
        t = pl.read_csv(data / "pollux" / job / "placements.csv", schema_overrides={"placement": pl.String})
        digits = pl.col("placement").str.extract_all(r"\d").list.eval(pl.element().cast(pl.Int64))
        t = t.with_columns(servers=pl.col("placement").str.len_chars(), gpus=digits.list.sum()).filter(
            pl.col("servers") > 1)
        same = ("gpus", "local_bsz")
        t = t.with_columns(sync_rel=pl.col("sync_time") / pl.col("sync_time").median().over(same),
                           step_rel=pl.col("step_time") / pl.col("step_time").median().over(same))
        frames.append(t.group_by("gpus", "servers").agg(
            rows=pl.len(), sync_rel=pl.col("sync_rel").median(), step_rel=pl.col("step_rel").median(),
        ).with_columns(job=pl.lit(job)))
    return pl.concat(frames)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None, help="shared data folder (default: found)")
    args = ap.parse_args()
    data = args.data or find_shared_data()
    if data is None:
        raise SystemExit("shared/data not found (give --data or set DDLSCOPE_SHARED_DATA)")
    pl.Config.set_tbl_rows(60)
    pl.Config.set_tbl_width_chars(160)
    res = pollux_validation(data)
    print("The model, leave one job out, multi-GPU rows (fractions):")
    print(res.by_servers.with_columns(pl.selectors.float().round(3)))
    m = measured_by_servers(data)
    wide = m.pivot(on="job", index=["gpus", "servers"], values="sync_rel").sort("gpus", "servers")
    print("\nMeasured sync_time / median of the same job, GPUs and batch (placements tables, >= 2 servers):")
    print(wide.with_columns(pl.selectors.float().round(2)))
    two = m.filter(pl.col("servers") == 2)
    more = m.filter(pl.col("servers") > 2)
    for job in POLLUX_JOBS:
        a, b = two.filter(pl.col("job") == job), more.filter(pl.col("job") == job)
        print(f"{job}: 2 servers, median over GPU counts: sync x{a['sync_rel'].median():.2f}, step "
              f"x{a['step_rel'].median():.2f}; 3-4 servers: sync x{b['sync_rel'].median():.2f}, step "
              f"x{b['step_rel'].median():.2f}")


if __name__ == "__main__":
    main()
