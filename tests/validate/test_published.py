"""The model against the published tables in shared/data: MAPE per table, on the rows not fitted."""

from __future__ import annotations

import math
import re

import polars as pl
import pytest

from ddlscope.validate.ddp import FIRST_BUCKET_BYTES, ddp_buckets, ddp_buckets_expr
from ddlscope.validate.measurements import FIT_PARAMETERS
from ddlscope.validate.published import dle_validation, pollux_validation


@pytest.fixture(scope="module")
def dle(shared_data):
    return dle_validation(shared_data)


@pytest.fixture(scope="module")
def pollux(shared_data):
    return pollux_validation(shared_data)


def _mape(res, table: str, role: str = "test") -> float:
    row = res.summary.filter((pl.col("table") == table) & (pl.col("role") == role))
    assert row.height == 1, f"no {role} rows for {table}"
    return row["mape"][0]


def test_ddp_bucket_count():
    # ResNet-50's 102,228,128 gradient bytes: a 1 MiB first bucket, then ceil(101,179,552 / 26,214,400)
    # = ceil(3.86) = 4 buckets of 25 MiB: 5 in all; nothing to send: 0
    got = pl.DataFrame({"s": [102_228_128.0, 1.0, 0.0]}).select(ddp_buckets_expr(pl.col("s")))
    assert got.to_series().to_list() == [5, 1, 0]
    # the same rule on numbers; a 1 MiB first bucket + 25 MiB = 27,262,976 B is two buckets, one byte more three
    assert [ddp_buckets(s) for s in (102_228_128.0, 1.0, 0.0, 27_262_976, 27_262_977)] == [5, 1, 0, 2, 3]
    # the first bucket is PyTorch's own constant
    import torch.distributed

    assert FIRST_BUCKET_BYTES == torch.distributed._DEFAULT_FIRST_BUCKET_BYTES == 1_048_576


def test_dle_resnet50_throughput(dle):
    # fitted rows reproduce exactly (two efficiencies, two rows per GPU generation and table)
    assert dle.rows.filter(pl.col("role") == "fit")["error"].abs().max() < 1e-9
    # every other row is a prediction: the other V100 systems and every multi-GPU row
    assert _mape(dle, "resnet50v1.5_pytorch_training_perf_ngc19.10.csv") <= 0.035
    assert _mape(dle, "resnet50v1.5_pytorch_training_perf_ngc21.03.csv") <= 0.07
    # scheduled overlap (issue 15): test MAPE 2.5 % (19.10) and 4.8 % (21.03), down from 2.7 % and 6.0 %
    # with overlap full; the largest underestimate is DGX-2's 16-GPU FP32 row (-6.7 %: the wait for the
    # slowest of 16 ranks and the last bucket), the 8-GPU AMP rows are still overestimated (+7 % to +11 %)
    assert _mape(dle, "resnet50v1.5_pytorch_training_perf_ngc19.10.csv") <= 0.026
    assert _mape(dle, "resnet50v1.5_pytorch_training_perf_ngc21.03.csv") <= 0.049
    multi = dle.rows.filter(pl.col("gpus") > 1)
    assert multi["error"].min() > -0.07 and multi.height == 12  # 19.10: 4 DGX-1 + 2 DGX-2; 21.03: 6
    assert dle.summary["rows"].sum() == 24


def _job_mape(pollux, job: str) -> tuple[float, float]:
    """Multi-GPU step and sync MAPE of one job's rows (both of its tables)."""
    rows = pollux.rows.filter(pl.col("table").str.starts_with(f"{job}/"), pl.col("gpus") > 1)
    sync = (rows["predicted_sync_s"] / rows["measured_sync_s"] - 1).abs().mean()
    return rows["error"].abs().mean(), sync


def test_pollux_leave_one_job_out(pollux):
    # every op priced on the T4 (the measurement-table path), scheduled overlap (DDP buckets, the
    # exact per-model timeline, flat NCCL ring); each job's multi-GPU rows predicted with the
    # network parameters fitted on the other two jobs' multi-GPU rows. Figures of this protocol on
    # shared/data/pollux (docs/validation.md), each bound the figure rounded up by one point: step
    # MAPE cifar10 9.1 %, imagenet 9.3 %, ncf 11.4 %; sync MAPE cifar10 45.9 %, imagenet 51.6 %, ncf
    # 16.1 % (totals pricing: 9.0 / 9.8 / 11.4 % and 46.9 / 51.9 / 16.1 %; before DDP's bucket rule
    # was followed: 11.5 / 17.6 / 11.5 % and 103 / 68 / 15.1 %)
    for job, step_bound, sync_bound in (("cifar10", 0.101, 0.469), ("imagenet", 0.103, 0.526),
                                        ("ncf", 0.124, 0.171)):
        step, sync = _job_mape(pollux, job)
        assert step <= step_bound, job
        assert sync <= sync_bound, job
        net = pollux.fitted[f"network without {job}"]
        assert set(net) >= {"nic_link_efficiency", "skew_sigma", "collective_launch_s"}
        # NCCL over TCP on the 50 Gb/s ENA reaches a small part of it (the transport's prior: 0.2)
        assert 0.05 <= net["nic_link_efficiency"] <= 0.3
    # the three folds agree on the transport: 0.111 of 50 Gb/s (5.6 Gb/s) without any one job
    shares = [pollux.fitted[f"network without {j}"]["nic_link_efficiency"] for j in ("cifar10", "imagenet", "ncf")]
    assert max(shares) / min(shares) <= 1.15
    assert (pollux.rows.filter(pl.col("gpus") > 1)["role"] == "test").all()
    # the compute factors of each job, fitted on its one-GPU rows: those rows within 8.9 / 4.6 / 4.0 %
    # (imagenet / cifar10 / ncf; totals pricing: 10.1 / 10.6 / 12.1 %), each row naming its fit
    for job, n, bound in (("imagenet", 8, 0.099), ("cifar10", 11, 0.056), ("ncf", 21, 0.050)):
        one = pollux.rows.filter(pl.col("table").str.starts_with(f"{job}/"), pl.col("gpus") == 1)
        assert one.height == n and (one["role"] == "fit").all()
        assert one["error"].abs().mean() <= bound, job
        assert set(pollux.fitted[job]) == set(FIT_PARAMETERS)
        assert (pollux.rows.filter(pl.col("table").str.starts_with(f"{job}/"))["compute_efficiency_source"]
                .str.contains(f"{job}: its {n} one-GPU rows", literal=True)).all(), job
    # the ResNets' one-GPU steps want a larger fixed per-step cost than its range allows: said, not hidden
    assert any(n.startswith("imagenet: warning: step_overhead_us") for n in pollux.notes)
    # imagenet's tensor factor 1.67 takes the T4's 0.6 to the cap of 1: said too
    assert any(n.startswith("imagenet: warning: turing tensor_gemm_eff is capped at 1") for n in pollux.notes)
    # every row of the three jobs is predicted (uneven placements as their busiest node); yolov3 is
    # counted as left out: 540 placement + 108 scalability rows (shared/data/pollux/SOURCES.md)
    assert pollux.rows.height == (864 + 288) + (1183 + 329) + (1661 + 458)
    assert pollux.skipped == {"yolov3: left out (not in the zoo, see LEFT_OUT)": 648}


def test_pollux_errors_by_servers(pollux):
    t = pollux.by_servers
    multi = pollux.rows.filter(pl.col("gpus") > 1)
    assert t["rows"].sum() == multi.height
    assert set(t["servers"]) == {"1", "2", "3-4", ">= 5"}
    # each class recomputed from the rows: imagenet over two servers (its placements rows 13, 22, 44, ...)
    two = multi.filter(pl.col("table") == "imagenet/placements.csv", pl.col("nodes") == 2)
    row = t.filter(pl.col("job") == "imagenet", pl.col("servers") == "2").row(0, named=True)
    assert row["rows"] == two.height == 80
    assert row["step_mape"] == pytest.approx(two["error"].abs().mean(), rel=1e-12)
    sync_err = two["predicted_sync_s"] / two["measured_sync_s"] - 1
    assert row["sync_median_error"] == pytest.approx(sync_err.median(), rel=1e-12)
    # the scalability tables are the ">= 5" class (6-16 servers) and nothing else is
    big = t.filter(pl.col("servers") == ">= 5")
    assert dict(zip(big["job"], big["rows"], strict=True)) == {"cifar10": 329, "imagenet": 288, "ncf": 458}
    # what the table shows on shared/data (docs/validation.md): in every job the exposed communication
    # over two servers is underestimated more than over three or four (median error -0.54 vs -0.13 for
    # imagenet), because the measured sync over two servers is larger at the same GPU count, which a
    # flat ring's bytes per NIC do not explain (benchmarks/fidelity_pollux_servers.py)
    for job in ("cifar10", "imagenet", "ncf"):
        b = dict(t.filter(pl.col("job") == job).select("servers", "sync_median_error").iter_rows())
        assert b["2"] < b["3-4"] - 0.1, job


def test_pollux_sync_time_is_compared(pollux):
    multi = pollux.rows.filter(pl.col("gpus") > 1)
    assert multi["measured_sync_s"].is_not_null().all() and (multi["predicted_sync_s"] >= 0).all()
    s = pollux.summary.filter(pl.col("sync_mape").is_not_null())
    assert set(s["table"]) == {"imagenet/placements.csv", "imagenet/scalability.csv", "cifar10/placements.csv",
                               "cifar10/scalability.csv", "ncf/placements.csv", "ncf/scalability.csv"}


@pytest.mark.parametrize("change, message", [
    ("", "not a readable CSV table"),
    ("placement,local_bsz,step_time\n1,20,0.1\n", "missing column(s) sync_time"),
    ("placement,local_bsz,step_time,sync_time\n", "no data rows"),
    ("placement,local_bsz,step_time,sync_time\n1,20,0.1,0.0\n1a,20,0.1,0.0\n",
     "line 3: placement: expected GPUs per node, one digit 1-9 a node (e.g. 1124), got '1a'"),
    ("placement,local_bsz,step_time,sync_time\n1,abc,0.1,0.0\n",
     "line 2: local_bsz: expected an integer >= 1, got 'abc'"),
    ("placement,local_bsz,step_time,sync_time\n1,20,-0.1,0.0\n", "line 2: step_time: expected seconds > 0, got '-0.1'"),
])
def test_a_bad_pollux_table_is_named_with_its_line(tmp_path, change, message):
    from ddlscope.validate.published import read_pollux_table

    path = tmp_path / "placements.csv"
    path.write_text(change)
    with pytest.raises(ValueError, match=r"placements\.csv: ") as err:
        read_pollux_table(path, "placements")
    assert message in str(err.value)


@pytest.mark.parametrize("text, message", [
    # a ragged line: refused whole, naming its line and reason
    ("placement,local_bsz,step_time,sync_time\n1,20,0.1,0.0\n1,20,0.1,0.0,9\n1,20\n",
     ": line 3: extra_fields (expected 4 fields, got 5); 1 more line(s) rejected: a placements table of Pollux's is "
     "refused, not read in part (shared/data/pollux/SOURCES.md)"),
    ("placement,local_bsz,step_time,sync_time\n1,20,0.1,0.0\n1,20,0.1\n",
     ": line 3: missing_fields (expected 4 fields, got 3): a placements table"),
    (b"placement,local_bsz,step_time,sync_time\n1,20,0.1,0.0\n1\xff,20,0.1,0.0\n",
     ": line 3: invalid_utf8 (byte 55 of the file (byte 2 of the line): 0xff is not UTF-8): a placements table"),
    ("placement,local_bsz,step_time,sync_time\n1,20,0.1,0.0\n1,20,0.1", ": line 3: truncated_last_line (the file "
     "ends without a newline in this line: 3 of 4 fields)"),
    # a blank line is counted: the bad value is on line 4
    ("placement,local_bsz,step_time,sync_time\n1,20,0.1,0.0\n\n1,abc,0.1,0.0\n",
     ": line 4: local_bsz: expected an integer >= 1, got 'abc'"),
    ('placement,local_bsz,step_time,sync_time\n1,20,0.1,0.0\n"1,20,0.1,0.0\n',
     ":3: a quote is not closed on its line; quoted fields spanning lines are not supported: not a readable CSV "
     "table (a placements table of Pollux's; shared/data/pollux/SOURCES.md)"),
])
def test_a_pollux_table_with_a_rejected_line_is_refused_naming_it(tmp_path, text, message):
    from ddlscope.validate.published import read_pollux_table

    path = tmp_path / "placements.csv"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError) as err:
        read_pollux_table(path, "placements")
    assert str(err.value).startswith(f"{path}{message}")


def test_a_dle_table_line_is_the_file_line(shared_data, tmp_path):
    """``line`` of a DLE table is the file's line: a blank line and a comma-quoted value keep it true."""
    from ddlscope.validate.published import read_dle_table

    src = (shared_data / "dle_tables" / "resnet50v1.5_pytorch_training_perf_ngc19.10.csv").read_text().splitlines()
    path = tmp_path / "dle.csv"
    path.write_text("\n".join([src[0], src[1], "", src[2]]) + "\n")
    assert read_dle_table(path)["line"].to_list() == [2, 4]
    path.write_text("\n".join([src[0], src[1], "", src[2].replace(",FP32,", ",,")]) + "\n")
    with pytest.raises(ValueError, match=r"dle\.csv: line 4: precision: expected a name, got None"):
        read_dle_table(path)


def test_a_pollux_table_with_a_byte_order_mark_and_crlf_reads_as_the_plain_one(shared_data, tmp_path):
    from ddlscope.validate.published import read_pollux_table

    src = shared_data / "pollux" / "ncf" / "placements.csv"
    path = tmp_path / "placements.csv"
    path.write_bytes(b"\xef\xbb\xbf" + src.read_bytes().replace(b"\n", b"\r\n"))
    assert read_pollux_table(path, "placements").equals(read_pollux_table(src, "placements"))


def test_a_job_without_one_gpu_rows_is_an_error(shared_data, tmp_path):
    import shutil

    root = tmp_path / "data"
    shutil.copytree(shared_data / "pollux", root / "pollux")
    placements = root / "pollux" / "imagenet" / "placements.csv"
    lines = placements.read_text().splitlines()
    placements.write_text("\n".join([lines[0], *[x for x in lines[1:] if not x.startswith("1,")]]) + "\n")
    with pytest.raises(ValueError, match="imagenet: no one-GPU row"):
        pollux_validation(root)


def _rows(placements, batches, step, sync, pred_step, pred_sync, table="imagenet/placements.csv"):
    n = len(placements)
    return pl.DataFrame({"source": ["pollux"] * n, "table": [table] * n, "placement": placements,
                         "batch_per_gpu": batches, "measured": step, "predicted": pred_step,
                         "measured_sync_s": sync, "predicted_sync_s": pred_sync})


def test_pollux_repeatability_by_hand():
    from ddlscope.validate.published import pollux_repeatability

    # two servers' orders of one placement (12, 21) at batch 8, measured twice: one group; 112 at batch 8
    # and 12 at batch 16 occur once (no group); a scalability row (placement null) is never grouped
    rows = _rows(["12", "21", "112", "12", None], [8, 8, 8, 16, 8], [1.0, 2.0, 1.0, 1.0, 1.0],
                 [0.1, 0.4, 0.1, 0.1, 0.1], [1.5, 1.5, 1.0, 1.0, 1.0], [0.2, 0.2, 0.1, 0.1, 0.1])
    t = pollux_repeatability(rows).row(0, named=True)
    assert (t["job"], t["groups"], t["rows"], t["sync_rows"]) == ("imagenet", 1, 2, 2)
    # ln 1, ln 2 about their mean: (ln 2 / 2)^2 twice, one degree of freedom -> SD ln 2 / sqrt 2
    assert t["step_log_sd"] == pytest.approx(math.log(2) / math.sqrt(2), rel=1e-12)
    assert t["sync_log_sd"] == pytest.approx(math.log(4) / math.sqrt(2), rel=1e-12)
    # the least MAPE of one value p for {1, 2}: |p - 1| + |p / 2 - 1| is least at p = 1 (weights 1 > 1/2)
    assert t["step_mape_least"] == pytest.approx(0.25, rel=1e-12)
    assert t["sync_mape_least"] == pytest.approx((0 + 0.75) / 2, rel=1e-12)
    # the model on the same two rows: 1.5 vs 1 and 2; 0.2 vs 0.1 and 0.4
    assert t["step_mape_model"] == pytest.approx((0.5 + 0.25) / 2, rel=1e-12)
    assert t["sync_mape_model"] == pytest.approx((1.0 + 0.5) / 2, rel=1e-12)
    # the log-normal MAPE: exp(s^2 / 2) (2 Phi(s) - 1)
    s = math.log(2) / math.sqrt(2)
    phi = 0.5 * (1 + math.erf(s / math.sqrt(2)))
    assert t["step_mape_noise"] == pytest.approx(math.exp(s * s / 2) * (2 * phi - 1), rel=1e-12)


def test_lognormal_mape_matches_sampling():
    import numpy as np

    from ddlscope.validate.published import lognormal_mape

    e = np.random.default_rng(7).normal(0.0, 0.4, 400_000)
    assert pl.select(lognormal_mape(pl.lit(0.4))).item() == pytest.approx(np.abs(np.exp(-e) - 1).mean(), rel=5e-3)
    assert pl.select(lognormal_mape(pl.lit(0.0))).item() == 0.0


def test_pollux_repeatability_zero_sync_is_left_out():
    from ddlscope.validate.published import pollux_repeatability

    rows = _rows(["12", "21", "12"], [8, 8, 8], [1.0, 1.0, 1.0], [0.0, 0.2, 0.2], [1.0] * 3, [0.2] * 3)
    t = pollux_repeatability(rows).row(0, named=True)
    assert (t["rows"], t["sync_rows"], t["sync_log_sd"], t["sync_mape_model"]) == (3, 2, 0.0, 0.0)


def test_pollux_repeatability_on_shared_data(pollux):
    t = {r["job"]: r for r in pollux.repeatability.iter_rows(named=True)}
    assert set(t) == {"cifar10", "imagenet", "ncf"}
    # recomputed from the imagenet placements table directly: rows whose sorted placement digits and batch repeat
    raw = pollux.rows.filter(pl.col("table") == "imagenet/placements.csv").with_columns(
        ms=pl.col("placement").str.split("").list.sort().list.join(""))
    rep = raw.filter(pl.len().over("ms", "batch_per_gpu") > 1)
    assert t["imagenet"]["rows"] == rep.height == 496
    assert t["imagenet"]["groups"] == rep.select("ms", "batch_per_gpu").unique().height == 184
    # what the tables say (docs/validation.md): the sync time of one placement repeats only to a log SD of
    # about 0.4-0.5 on imagenet and cifar10 (0.1 on ncf), so a model exact up to the noise has a sync MAPE
    # above the 20 % goal of issue 15 there; the step time repeats to about 6-8 %
    assert 0.35 < t["imagenet"]["sync_log_sd"] < 0.45 and 0.45 < t["cifar10"]["sync_log_sd"] < 0.55
    assert t["ncf"]["sync_log_sd"] < 0.15
    for job in ("imagenet", "cifar10"):
        assert t[job]["sync_mape_noise"] > 0.3 and t[job]["sync_mape_least"] > 0.15
    for r in t.values():
        assert 0.05 < r["step_log_sd"] < 0.09
        assert r["step_mape_least"] < r["step_mape_noise"] and r["sync_mape_least"] < r["sync_mape_noise"]


def test_a_pollux_row_the_measurement_checks_refuse_names_its_table(shared_data):
    # read_pollux_table checks the CSV values; a row it passed but the pricing cannot take (here a
    # batch set to -3 after reading) is an error naming the table, not a silent drop
    from pathlib import Path

    from ddlscope.specs.catalog import builtin_catalog
    from ddlscope.validate import published

    cat = builtin_catalog()
    rows = published._pollux_rows(Path(shared_data), {})
    bad = rows.with_columns(batch_per_gpu=pl.when(pl.int_range(pl.len()) == 5).then(-3)
                            .otherwise(pl.col("batch_per_gpu")))
    with pytest.raises(ValueError, match=r"^pollux/imagenet/placements\.csv: 1 row\(s\) .* batch_per_gpu = -3"):
        published.pollux_measurement_jobs(bad, cat.system(published.POLLUX_SERVER), cat)
    jobs = published.pollux_measurement_jobs(rows, cat.system(published.POLLUX_SERVER), cat)
    assert jobs.height == rows.height and (jobs["flat_ring"] == 1.0).all()


@pytest.mark.parametrize("column, value, message", [
    ("throughput_img_s", "abc", "line 3: throughput_img_s: expected images/s > 0, got 'abc'"),
    ("throughput_img_s", "-380", "line 3: throughput_img_s: expected images/s > 0, got '-380'"),
    ("throughput_img_s", "", "line 3: throughput_img_s: expected images/s > 0, got None"),
    ("gpus", "0", "line 3: gpus: expected an integer >= 1, got '0'"),
    ("batch_per_gpu", "25.6", "line 3: batch_per_gpu: expected an integer >= 1, got '25.6'"),
])
def test_a_bad_dle_value_is_named_with_its_line(shared_data, tmp_path, column, value, message):
    # a fit row with a bad throughput would silently skew the fit: the table is refused instead
    import csv
    import shutil

    folder = tmp_path / "dle_tables"
    shutil.copytree(shared_data / "dle_tables", folder)
    path = folder / "resnet50v1.5_pytorch_training_perf_ngc19.10.csv"
    rows = list(csv.reader(path.read_text().splitlines()))
    rows[2][rows[0].index(column)] = value
    with path.open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: {re.escape(message)}$"):
        dle_validation(tmp_path)


def test_a_missing_dle_table_is_an_error(shared_data, tmp_path):
    import shutil

    shutil.copytree(shared_data / "dle_tables", tmp_path / "dle_tables")
    (tmp_path / "dle_tables" / "resnet50v1.5_pytorch_training_perf_ngc21.03.csv").unlink()
    with pytest.raises(FileNotFoundError, match=r"ngc21\.03\.csv: missing \(see shared/data/dle_tables/SOURCES\.md\)"):
        dle_validation(tmp_path)


def test_a_scalability_row_with_more_nodes_than_replicas_is_refused(shared_data, tmp_path):
    from ddlscope.validate.published import read_pollux_table

    lines = (shared_data / "pollux" / "ncf" / "scalability.csv").read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[2].split(",")
    cells[header.index("num_nodes")] = str(int(cells[header.index("num_replicas")]) + 1)
    lines[2] = ",".join(cells)
    path = tmp_path / "scalability.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"scalability\.csv: line 3: num_nodes: expected at most num_replicas"):
        read_pollux_table(path, "scalability")
    assert read_pollux_table(shared_data / "pollux" / "ncf" / "scalability.csv", "scalability").height == 458


def test_published_json_lists_every_row_not_used(shared_data):
    # the note on stderr points at --format json for each row not used: the JSON has each one, with
    # its file:line, and as many as the counts by reason say; the fits' notes are there too
    import json

    from typer.testing import CliRunner

    from ddlscope.cli.main import app

    res = CliRunner().invoke(app, ["validate", "--published", "--data", str(shared_data), "--format", "json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    tables = out["measurement_tables"]
    assert len(tables["rejected"]) == sum(tables["rejected_by_reason"].values())
    # left out: GNMT, Tacotron2, WaveGlow (318); not synchronised: Transformer-XL's multi-GPU runs (80)
    # implausible: the NCF rows on 4 and 8 H100 SXM5 that SOURCES.md calls outliers (20)
    assert tables["rejected_by_reason"] == {"left_out": 318, "not_measured": 80, "not_synchronised": 80,
                                            "implausible": 20}
    assert all(r["line"] >= 2 and r["reason"] in ("left_out", "not_measured", "not_synchronised", "implausible")
               for r in tables["rejected"])
    assert any(n.startswith("imagenet: warning: step_overhead_us") for n in out["notes"])
    assert "lists each with its file:line" in res.stderr
