"""The concurrency finding states the fit's strength and no per-RPC effect the data does not support."""

from __future__ import annotations

import polars as pl

from ddlscope.report.rpc_findings import concurrency_sentence, narrate
from ddlscope.rpc import dissect
from ddlscope.rpc.analyzers import concurrency_effect
from ddlscope.rpc.synthetic import synthetic_rpc_log

STAGES = pl.DataFrame({"stage": ["network", "server_queue"], "us_per_write": [400.0, 140.0],
                       "us_per_read": [1.0, 2.6]})


def _fit(r2: float, n: int, write: tuple[float, float], read: tuple[float, float]) -> dict:
    return {"partial_r2": r2, "rpcs": n, "us_per_write": write[0], "us_per_write_se": write[1],
            "us_per_read": read[0], "us_per_read_se": read[1]}


def test_a_fit_explaining_0_28_percent_states_no_per_rpc_effect():
    # the ps-train run: 540 us per write from a fit with R² 0.28 % over 24,000 RPCs
    e = concurrency_effect(_fit(0.0028, 24_000, (540.0, 160.0), (3.6, 56.0)), STAGES, {"write": (0.0556, 0.0918)},
                           "slowest 1%")
    text, effect = concurrency_sentence(e), e.entry()
    assert text == ("Concurrency: no measurable effect of the reads and writes in flight at the same server on other "
                    "connections on an RPC's latency: the two counts explain 0.28% of the latency variance within an "
                    "op (R² below 5%; linear fit, op as fixed effect, n = 24,000 RPCs).")
    assert "540" not in text
    # 540 ± 1.96 x 160 = 226.4 .. 853.6: the interval excludes 0, but R² is below the threshold
    assert effect["write"]["ci95_us"] == [540.0 - 1.96 * 160.0, 540.0 + 1.96 * 160.0]
    assert effect["write"]["measurable"] is False and effect["min_r2"] == 0.05


def test_a_slope_whose_interval_includes_zero_is_no_measurable_effect():
    # R² 12 %; writes 99.6 ± 1.96 x 2 = 95.68 .. 103.52 (measurable), reads 3 ± 1.96 x 10 = -16.6 .. 22.6 (includes 0)
    e = concurrency_effect(_fit(0.12, 100_000, (99.6, 2.0), (3.0, 10.0)), STAGES, {}, "slowest 1%")
    text, effect = concurrency_sentence(e), e.entry()
    assert text == ("Concurrency (R² 12% of the latency variance within an op, n = 100,000 RPCs; linear fit, op as "
                    "fixed effect): each other write in flight at the same server on another connection adds 99.6 µs "
                    "(95% interval 95.7 µs to 104 µs) to an RPC's latency (most in network, 400 µs); no measurable "
                    "effect of each other read (3 µs per read, 95% interval -16.6 µs to 22.6 µs).")
    assert effect["write"]["measurable"] and not effect["read"]["measurable"]


def test_a_positive_effect_is_checked_against_the_tail():
    # measurable write slope, but the slowest 1 % have fewer writes in flight than the rest
    text = concurrency_sentence(concurrency_effect(_fit(0.2, 5_000, (50.0, 1.0), (20.0, 1.0)), STAGES,
                                                   {"write": (0.05, 0.09), "read": (2.0, 0.5)}, "slowest 1%"))
    assert ("adds 50 µs (95% interval 48 µs to 52 µs) to an RPC's latency (most in network, 400 µs), but the slowest "
            "1% have fewer writes in flight (0.05) than the rest (0.09), so writes in flight do not explain the tail"
            ) in text
    assert "fewer reads" not in text  # the tail has more reads in flight (2 > 0.5): consistent


def test_the_dissection_quotes_strength_and_interval():
    d = dissect(synthetic_rpc_log(20_000, seed=1))
    fit = d.concurrency_fit.filter((pl.col("measure") == "server_other_conn") & (pl.col("stage") == "latency"))
    row = fit.row(0, named=True)
    assert row["partial_r2"] > 0.05   # the synthetic log's queues grow with the writes in flight
    text = next(f for f in narrate(d).findings if f.startswith("Concurrency"))
    assert f"n = {row['rpcs']:,} RPCs" in text and "95% interval" in text
    assert d.summary["concurrency_effect"]["write"]["measurable"] is True
