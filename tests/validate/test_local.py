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
from ddlscope.validate.local import (
    VALIDATION_COLUMNS,
    component_clock,
    ddp_buckets,
    ddp_steps,
    measure_ddp,
    predict_case,
    profiler_logs_kept_out,
    timed_steps,
    typical_s,
    validate_local,
)
from ddlscope.validate.models import CASES


@pytest.fixture(scope="module")
def calibration():
    plan = CalibrationPlan.quick(collectives=False)  # validate_local predicts 1w1g; DDP tests predict only
    return run_calibration(plan)


def test_single_process_rows_columns_and_error_definition(calibration, capfd):
    seen: list[tuple[str, int, int]] = []
    frame = validate_local(calibration, ("mind_small",), steps=2, warmup=1, data_parallel=False,
                           progress=lambda stage, done, total: seen.append((stage, done, total)))
    # a bar per run that counts its steps: 1 warm-up + 2 timed + 1 profiled; then the run is done
    assert seen == [("mind_small: 1 process, steps", k, 4) for k in range(5)] + [("training runs", 1, 1)]
    # the profiler's own native log lines (USDT ... profiler_start) do not reach the terminal
    err = capfd.readouterr().err
    assert "profiler_start" not in err and "USDT" not in err
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
    ticks: list[int] = []
    meas = measure_ddp(case, ranks=2, steps=2, warmup=1, clock="cpu", on_step=lambda: ticks.append(1))
    # rank 0 reports every step: 1 warm-up + 2 timed with the default hook, 1 + max(2, 1) with the timed one
    assert len(ticks) == ddp_steps(2, 1) == 6
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


def test_typical_step_rule_skips_warmup_and_takes_the_median():
    ticks = iter([0.0, 1.0, 1.0, 3.0, 3.0, 6.0])  # a fake clock: three timed steps of 1, 2 and 3 s
    ran = []
    times = timed_steps(lambda: ran.append(1), lambda: next(ticks), steps=3, warmup=2)
    assert len(ran) == 5 and times == [1.0, 2.0, 3.0]  # 2 untimed warm-up steps + 3 timed
    assert typical_s(times) == 2.0
    # one interrupted step (9 s) among identical ones: the median stays 1 s where the mean is 11/3 s
    assert typical_s([1.0, 9.0, 1.0]) == 1.0
    with pytest.raises(ValueError, match="steps: expected >= 1 timed steps, got 0"):
        timed_steps(lambda: None, lambda: 0.0, steps=0, warmup=1)
    with pytest.raises(ValueError, match="warmup: expected >= 0 untimed steps, got -1"):
        timed_steps(lambda: None, lambda: 0.0, steps=1, warmup=-1)
    with pytest.raises(ValueError, match="no timed steps"):
        typical_s([])
    res = CliRunner().invoke(app, ["validate", "--steps", "0"])
    assert res.exit_code == 2 and "steps: expected >= 1 timed steps, got 0" in res.output


def test_validate_cli_rejects_bad_options_before_any_calibration(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ddlscope-system.toml here: a valid run would calibrate first
    import ddlscope.calibrate.api as api

    monkeypatch.setattr(api, "run_calibration", lambda *a, **k: pytest.fail("calibrated before checking options"))
    for args, message in ((["--model", "alexnet"], "models: unknown ['alexnet']"),
                          (["--processes", "1"], "processes: expected >= 2 DDP processes, got 1"),
                          (["--clock", "gpu"], "clock: expected auto, wall or cpu, got 'gpu'"),
                          (["--warmup", "-1"], "warmup: expected >= 0 untimed steps, got -1")):
        res = CliRunner().invoke(app, ["validate", *args])
        assert res.exit_code == 2 and message in res.output, (args, res.output)


def test_comm_rows_say_their_wall_clock():
    # the DDP hook times communication in wall time whatever --clock says; the step follows --clock
    assert component_clock("comm", "cpu") == "wall" and component_clock("step", "cpu") == "cpu"
    assert component_clock("comm", "wall") == "wall" and component_clock("memory_bound", "cpu") == "cpu"


def test_published_data_folder_errors_name_the_option(tmp_path, monkeypatch):
    monkeypatch.setenv("DDLSCOPE_SHARED_DATA", str(tmp_path / "nowhere"))
    res = CliRunner().invoke(app, ["validate", "--published"])
    assert res.exit_code == 2 and f"DDLSCOPE_SHARED_DATA={tmp_path / 'nowhere'}: not a folder" in res.output
    res = CliRunner().invoke(app, ["validate", "--published", "--data", str(tmp_path / "none")])
    assert res.exit_code == 2 and "--data" in res.output and "not a folder" in res.output


def test_profiler_logs_are_kept_out_and_other_native_lines_kept(capfd):
    import os

    with profiler_logs_kept_out():
        os.write(2, b"USDT:2026-12-02 10:00:51 6142:6142 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"a native warning the user should see\n")
    err = capfd.readouterr().err
    assert err == "a native warning the user should see\n"
