"""`ddlscope validate` on this CPU: the pipeline's deterministic parts (rows, columns, units, the
error column's definition, DDP's bucket count), on short runs and a quick calibration.

No accuracy bound is asserted here: the prediction error of a timed run moves with the machine's
load (docs/validation.md), so it is a figure `benchmarks/bench_validate.py` prints, not a test.
"""

from __future__ import annotations

import polars as pl
import pytest
from typer.testing import CliRunner

from ddlscope.calibrate.api import CalibrationPlan, run_calibration
from ddlscope.calibrate.profile_file import write_calibration
from ddlscope.cli.main import app
from ddlscope.validate.local import VALIDATION_COLUMNS, ddp_buckets, measure_ddp, predict_case, validate_local
from ddlscope.validate.models import CASES


@pytest.fixture(scope="module")
def calibration():
    plan = CalibrationPlan.quick(collectives=False)  # validate_local predicts 1w1g; DDP tests predict only
    return run_calibration(plan)


def test_single_process_rows_columns_and_error_definition(calibration):
    frame = validate_local(calibration, ("mind_small",), steps=2, warmup=1, data_parallel=False)
    assert frame.columns == ["model", "architecture", "processes", "component", "clock", "measured_s",
                             "predicted_s", "eff_compute", "eff_memory", "error"]
    assert set(VALIDATION_COLUMNS) <= set(frame.columns)
    # one row per component of the one-process run, in this order
    assert frame["component"].to_list() == ["step", "compute_bound", "memory_bound", "other"]
    assert (frame["model"] == "mind_small").all() and (frame["architecture"] == "1w1g").all()
    assert (frame["processes"] == 1).all() and (frame["clock"] == "cpu").all()  # one-core device: CPU time
    assert frame.filter(pl.col("component") != "other")["measured_s"].min() > 0
    assert frame["measured_s"].min() >= 0  # seconds per step
    row = {r["component"]: r for r in frame.iter_rows(named=True)}
    # the measured components split the measured step: other = step - compute - memory (>= 0)
    step = row["step"]["measured_s"]
    assert row["other"]["measured_s"] == pytest.approx(
        max(step - row["compute_bound"]["measured_s"] - row["memory_bound"]["measured_s"], 0.0), abs=1e-12)
    # the model has no term for `other`; the others are priced, and error = predicted / measured - 1
    assert row["other"]["predicted_s"] is None and row["other"]["error"] is None
    for comp in ("step", "compute_bound", "memory_bound"):
        r = row[comp]
        assert r["predicted_s"] > 0
        assert r["error"] == pytest.approx(r["predicted_s"] / r["measured_s"] - 1, rel=1e-12)
    # the op-mix efficiencies of the workload are fractions of the peaks
    assert 0 < row["step"]["eff_compute"] <= 1 and 0 < row["step"]["eff_memory"] <= 1


def test_ddp_measures_and_predicts_communication(calibration):
    case = CASES["dlrm_small"]
    pred = predict_case(case, calibration, ranks=2)
    meas = measure_ddp(case, ranks=2, steps=2, warmup=1, clock="cpu")
    # DLRM-small's dense gradients (tables included: DDP with dense embeddings) fit DDP's buckets as the
    # rule says: the hook saw as many buckets as 1 + ceil((S - 1 MiB) / 25 MiB)
    assert meas["buckets"] == pred["buckets"] == ddp_buckets(meas["bucket_bytes"])
    assert meas["comm_s"] > 0 and pred["comm_s"] > 0 and meas["step_s"] > 0


def test_validate_cli_json(calibration, tmp_path):
    path = write_calibration(calibration, tmp_path / "me.toml")
    res = CliRunner().invoke(app, ["validate", "--system-file", str(path), "--model", "mind_small", "--no-ddp",
                                   "--steps", "2", "--warmup", "1", "--format", "json"])
    assert res.exit_code == 0, res.output
    import json

    payload = json.loads(res.output[res.output.index("{"):])
    assert {r["component"] for r in payload["rows"]} == {"step", "compute_bound", "memory_bound", "other"}
    assert payload["median |error| of step time"] >= 0
    bad = CliRunner().invoke(app, ["validate", "--system-file", str(path), "--model", "alexnet"])
    assert bad.exit_code == 2 and "unknown ['alexnet']" in bad.output

