"""`ddlscope validate` on this CPU: real training steps against the model on a fresh calibration.

The machine running the tests is shared (other processes compete for its cores), so the runs are
short and timed in CPU time (the `cpu` clock: what the core did for this process, which another
process's load does not add to), and the tolerance is 30 % on the median where the acceptance figure
of the full run is 10 % (docs/validation.md). On this 2-core host shared with other jobs (load
average 3-4 while this was written), CPU time still rises with cache and memory-bandwidth
interference: repeated calibrate + validate runs of these three models gave median errors from 5 %
to 33 % (memory-bound models move most), so 30 % on a 5-step run fails on a broken model or
calibration, not on a busy neighbour.
"""

from __future__ import annotations

import polars as pl
import pytest
from typer.testing import CliRunner

from ddlscope.calibrate.api import CalibrationPlan, run_calibration
from ddlscope.calibrate.profile_file import write_calibration
from ddlscope.cli.main import app
from ddlscope.validate.local import ddp_buckets, measure_ddp, predict_case, validate_local
from ddlscope.validate.models import CASES


@pytest.fixture(scope="module")
def calibration():
    plan = CalibrationPlan(matmul_sizes=(16, 32, 64, 128, 256, 512), conv_channels=(16, 64, 128),
                           elementwise_elements=tuple(4**k for k in range(4, 12)),
                           family_elements=(4**6, 4**8, 4**10), collectives=False, target_s=0.03)
    return run_calibration(plan)


def test_single_process_step_time_within_tolerance(calibration):
    frame = validate_local(calibration, ("transformer_small", "dlrm_small", "mind_small"), steps=5, warmup=2,
                           data_parallel=False)
    step = frame.filter(pl.col("component") == "step")
    assert step.height == 3 and (step["clock"] == "cpu").all()
    assert step["error"].abs().median() <= 0.30, step
    # every component row is there; the model has no term for `other`
    assert set(frame["component"]) == {"step", "compute_bound", "memory_bound", "other"}
    assert frame.filter(pl.col("component") == "other")["predicted_s"].is_null().all()


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
