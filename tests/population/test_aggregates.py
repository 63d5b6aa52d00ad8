"""Population aggregates on a three-job population computed by hand."""

from __future__ import annotations

import polars as pl
import pytest

from ddlscope.population.aggregates import bottleneck_mix, component_shares, scenario_speedups, weighted_mean

SHARES = ("data_io", "compute_bound", "memory_bound", "pcie", "nvlink", "network")


def job(job_id, arch, gpu_time, shares, bottleneck, scenario="baseline", speedup=1.0, applied=False):
    row = {"job_id": job_id, "architecture": arch, "baseline_architecture": arch, "gpu_time_s": gpu_time,
           "bottleneck": bottleneck, "scenario": scenario, "speedup": speedup, "scenario_applied": applied}
    row.update({f"share_{k}": v for k, v in zip(SHARES, shares, strict=True)})
    row["share_comm"] = shares[3] + shares[4] + shares[5]
    return row


BASE = [
    job(0, "ps_worker", 100.0, (0, 0.2, 0.2, 0.1, 0, 0.5), "network"),
    job(1, "ps_worker", 300.0, (0, 0.5, 0.3, 0, 0, 0.2), "compute_bound"),
    job(2, "1w1g", 600.0, (0.1, 0.7, 0.2, 0, 0, 0), "compute_bound"),
]
PORT = [
    {**BASE[0], "scenario": "port", "speedup": 2.0, "scenario_applied": True, "architecture": "allreduce_local"},
    {**BASE[1], "scenario": "port", "speedup": 0.8, "scenario_applied": True, "architecture": "allreduce_local"},
    {**BASE[2], "scenario": "port", "speedup": 1.0, "scenario_applied": False},
]


def get(frame, **eq):
    out = frame
    for k, v in eq.items():
        out = out.filter(pl.col(k) == v)
    assert out.height == 1, eq
    return out.row(0, named=True)


def test_component_shares_by_jobs_and_gpu_time():
    shares = component_shares(pl.DataFrame(BASE))
    ps_jobs = get(shares, weight="jobs", architecture="ps_worker")
    assert ps_jobs["mean_share_comm"] == pytest.approx((0.6 + 0.2) / 2)
    assert ps_jobs["mean_share_network"] == pytest.approx((0.5 + 0.2) / 2)
    assert get(shares, weight="gpu_time", architecture="ps_worker")["mean_share_comm"] == pytest.approx(
        (0.6 * 100 + 0.2 * 300) / 400)
    everyone = get(shares, weight="jobs", architecture="all")
    assert everyone["jobs"] == 3 and everyone["gpu_time_s"] == 1000
    assert everyone["mean_share_comm"] == pytest.approx(0.8 / 3)
    assert everyone["p50_share_comm"] == pytest.approx(0.2)  # sorted 0, 0.2, 0.6 with cum 1/3, 2/3, 1
    by_time = get(shares, weight="gpu_time", architecture="all")
    assert by_time["mean_share_comm"] == pytest.approx(120 / 1000)
    # sorted 0 (w 600), 0.2 (w 300), 0.6 (w 100): cumulative 0.6, 0.9, 1.0
    assert (by_time["p10_share_comm"], by_time["p50_share_comm"], by_time["p90_share_comm"]) == pytest.approx(
        (0.0, 0.0, 0.2))


def test_bottleneck_mix():
    mix = bottleneck_mix(pl.DataFrame(BASE))
    assert get(mix, weight="jobs", architecture="all", bottleneck="network")["share"] == pytest.approx(1 / 3)
    assert get(mix, weight="gpu_time", architecture="all", bottleneck="compute_bound")["share"] == pytest.approx(0.9)
    assert get(mix, weight="jobs", architecture="1w1g", bottleneck="compute_bound")["share"] == 1.0


def test_scenario_speedups():
    sp = scenario_speedups(pl.DataFrame(BASE + PORT))
    ps = get(sp, weight="jobs", scenario="port", architecture="ps_worker")
    assert (ps["sped_up_share"], ps["slowed_share"], ps["applied_share"]) == pytest.approx((0.5, 0.5, 1.0))
    assert ps["mean_speedup"] == pytest.approx(1.4)
    assert ps["median_speedup"] == pytest.approx(0.8)  # sorted 0.8, 2.0 with cumulative 0.5, 1.0
    everyone = get(sp, weight="jobs", scenario="port", architecture="all")
    assert everyone["sped_up_share"] == pytest.approx(1 / 3)
    assert everyone["mean_speedup"] == pytest.approx((2.0 + 0.8 + 1.0) / 3)
    assert everyone["median_speedup"] == pytest.approx(1.0)
    assert everyone["mean_speedup_applied"] == pytest.approx(1.4)
    by_time = get(sp, weight="gpu_time", scenario="port", architecture="ps_worker")
    assert by_time["mean_speedup"] == pytest.approx((2.0 * 100 + 0.8 * 300) / 400)
    assert by_time["sped_up_share"] == pytest.approx(0.25)
    assert by_time["materially_sped_up_share"] == pytest.approx(0.25)
    assert "baseline" not in sp["scenario"].to_list()


def test_weighted_mean_known_rows_only_and_null_without_weight():
    df = pl.DataFrame({"x": [0.6, 0.2, None, 0.0], "w": [100.0, 300.0, 50.0, 600.0]})
    got = df.select(
        jobs=weighted_mean(pl.col("x"), pl.lit(1.0)),          # (0.6 + 0.2 + 0) / 3: the unknown x is left out
        gpu_time=weighted_mean(pl.col("x"), pl.col("w")),      # (60 + 60 + 0) / (100 + 300 + 600) = 0.12, not / 1050
        share=weighted_mean(pl.col("x") > 0.1, pl.col("w")),   # rows 0 and 1: 400 / 1000
        none=weighted_mean(pl.col("x"), pl.lit(0.0)),          # no weight: null, not NaN
    ).row(0, named=True)
    assert got == pytest.approx({"jobs": 0.8 / 3, "gpu_time": 0.12, "share": 0.4, "none": None})
    assert got["none"] is None


def test_gpu_time_weighting_without_gpu_time_is_null_not_nan():
    # every job without a GPU time (weight 0): the GPU-time-weighted means are unknown, the job-weighted ones are not
    shares = component_shares(pl.DataFrame([{**r, "gpu_time_s": 0.0} for r in BASE]))
    assert get(shares, weight="gpu_time", architecture="all")["mean_share_comm"] is None
    assert get(shares, weight="jobs", architecture="all")["mean_share_comm"] == pytest.approx(0.8 / 3)
    sp = scenario_speedups(pl.DataFrame([{**r, "gpu_time_s": 0.0} for r in PORT]))
    row = get(sp, weight="gpu_time", scenario="port", architecture="all")
    assert (row["applied_share"], row["sped_up_share"], row["mean_speedup"]) == (None, None, None)
