"""configuration_repeatability: the spread of repeated configurations, by hand and on the Lambda tables."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from ddlscope.validate.repeatability import configuration_repeatability
from ddlscope.validate.shared_tables import lambda_measurements


def _rows() -> pl.DataFrame:
    # A (gpu x, batch 8): 100 and 121 on two testbeds; B (gpu x, batch 16): 50 three times; C once
    return pl.DataFrame({
        "gpu": ["x", "x", "x", "x", "x", "y"],
        "batch_per_gpu": [8, 8, 16, 16, 16, 8],
        "testbed": ["t1", "t2", "t1", "t2", "t3", "t1"],
        "measured": [100.0, 121.0, 50.0, 50.0, 50.0, 70.0],
        "predicted": [110.0, 110.0, 40.0, 40.0, 40.0, 1.0],
    })


def test_repeatability_by_hand():
    rep = configuration_repeatability(_rows(), predicted="predicted", label="testbed")
    s = rep.summary
    assert (s["groups"], s["rows"]) == (2, 5)  # C (gpu y) is measured once: no group
    # A: ln 100, ln 121 about their mean: 2 (ln 1.21 / 2)^2, 1 degree of freedom; B: 0, 2 degrees
    d = math.log(1.21)
    assert s["log_sd"] == pytest.approx(math.sqrt((d * d / 2) / 3), rel=1e-12)
    assert s["ratio_log_sd"] == pytest.approx(math.sqrt(2) * s["log_sd"], rel=1e-12)
    sig = s["log_sd"]
    phi = 0.5 * (1 + math.erf(sig / math.sqrt(2)))
    assert s["mape_noise"] == pytest.approx(math.exp(sig * sig / 2) * (2 * phi - 1), rel=1e-12)
    # least MAPE: A's best constant is 100 (weights 1/100 > 1/121): |100/121 - 1|; B's is 50: 0
    assert s["mape_least"] == pytest.approx((1 - 100 / 121) / 5, rel=1e-12)
    # the model on the same five rows: 110 vs 100 and 121, 40 vs 50 three times
    assert s["mape_model"] == pytest.approx((0.1 + (1 - 110 / 121) + 3 * 0.2) / 5, rel=1e-12)
    g = rep.groups.sort("batch_per_gpu")
    assert g["rows"].to_list() == [2, 3]
    assert g["log_sd"].to_list() == pytest.approx([d / math.sqrt(2), 0.0], rel=1e-12)
    assert g["max_over_min"].to_list() == pytest.approx([1.21, 1.0], rel=1e-12)
    assert g["labels"].to_list() == [["t1", "t2"], ["t1", "t2", "t3"]]
    # testbed offsets: t1 sits d/2 below A's mean and 0 off B's: median -d/4; t2 +d/4; t3 0
    off = {r["testbed"]: r for r in rep.offsets.iter_rows(named=True)}
    assert off["t1"]["median_log_offset"] == pytest.approx(-d / 4, rel=1e-12)
    assert off["t2"]["median_offset"] == pytest.approx(math.exp(d / 4) - 1, rel=1e-12)
    assert (off["t3"]["rows"], off["t3"]["median_log_offset"]) == (1, 0.0)


def test_default_key_is_the_configuration_columns_present():
    # without batch_per_gpu in the key, A and B would merge: the default key takes every column it knows
    rep = configuration_repeatability(_rows())
    assert rep.summary["groups"] == 2 and rep.summary["mape_model"] is None and rep.offsets is None
    merged = configuration_repeatability(_rows(), key=["gpu"])
    assert merged.summary["groups"] == 1 and merged.summary["rows"] == 5


def test_no_repeated_configuration_gives_empty_groups():
    rep = configuration_repeatability(_rows().head(1), predicted="predicted", label="testbed")
    assert rep.groups.height == 0 and rep.summary["groups"] == 0 and rep.summary["log_sd"] is None


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"predicted": "nope"}, "missing column(s) nope"),
    ({"key": ["gpu", "image_size"]}, "missing column(s) image_size"),
    ({"key": []}, "no key column"),
])
def test_bad_columns_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        configuration_repeatability(_rows(), **kwargs)


@pytest.mark.parametrize("bad", [0.0, -1.0, None, float("nan"), float("inf")])
def test_a_measurement_not_above_zero_is_refused(bad):
    rows = _rows().with_columns(measured=pl.when(pl.int_range(pl.len()) == 2).then(bad).otherwise(pl.col("measured")))
    with pytest.raises(ValueError, match="1 row"):
        configuration_repeatability(rows)


def test_lambda_h100_sxm5_ncf_spread_as_the_csv_gives_it(shared_data):
    # the six one-GPU H100 SXM5 systems measure NCF (FP32 column: tf32) at one batch; their spread read
    # straight from the CSV must be the group's
    one = lambda_measurements(shared_data).rows.filter(pl.col("gpus") == 1)
    rep = configuration_repeatability(one, label="testbed")
    g = rep.groups.filter(pl.col("model") == "ncf_dle", pl.col("gpu") == "H100-SXM5-80GB",
                          pl.col("precision") == "tf32").row(0, named=True)
    csv = pl.read_csv(shared_data / "lambda_benchmarks" / "pytorch-train-throughput-fp32.csv")
    v = csv.filter(pl.col("num_gpu") == 1, pl.col("name_gpu").str.contains("H100 80GB SXM5"))["ncf"].to_numpy()
    assert g["rows"] == len(v) == 6
    assert g["log_sd"] == pytest.approx(float(np.std(np.log(v), ddof=1)), rel=1e-12)
    assert g["max_over_min"] == pytest.approx(float(v.max() / v.min()), rel=1e-12)
    assert "Dell H100 80GB SXM5" in g["labels"]


def test_a_single_key_name_and_a_string_measurement():
    assert configuration_repeatability(_rows(), key="gpu").summary["groups"] == 1
    with pytest.raises(ValueError, match="measured must be numeric"):
        configuration_repeatability(_rows().with_columns(pl.col("measured").cast(pl.String)))


def test_rows_without_a_finite_prediction_are_counted_not_dropped():
    # the 121-row of group A and one 50-row of group B have no prediction (null, NaN): the MAPE is
    # over the other three repeated rows (110 vs 100, 40 vs 50 twice) and the two are counted
    rows = _rows().with_columns(predicted=pl.Series([110.0, None, 40.0, float("nan"), 40.0, 1.0]))
    s = configuration_repeatability(rows, predicted="predicted").summary
    assert (s["mape_model_rows"], s["mape_model_skipped"]) == (3, 2)
    assert s["mape_model"] == pytest.approx((0.1 + 0.2 + 0.2) / 3, rel=1e-12)
    full = configuration_repeatability(_rows(), predicted="predicted").summary
    assert (full["mape_model_rows"], full["mape_model_skipped"]) == (5, 0)
    none = configuration_repeatability(rows.with_columns(predicted=pl.lit(None, pl.Float64)),
                                       predicted="predicted").summary
    assert (none["mape_model"], none["mape_model_rows"], none["mape_model_skipped"]) == (None, 0, 5)
    # a prediction column of dtype Null (pl.lit(None), or a list of Nones) counts every row as skipped
    untyped = configuration_repeatability(rows.with_columns(predicted=pl.lit(None)), predicted="predicted").summary
    assert (untyped["mape_model"], untyped["mape_model_rows"], untyped["mape_model_skipped"]) == (None, 0, 5)
    with pytest.raises(ValueError, match="predicted must be numeric"):
        configuration_repeatability(_rows().with_columns(pl.col("predicted").cast(pl.String)), predicted="predicted")
