"""The streamed dissection equals the in-memory one: every percentile, mean and max exactly, the
stage summary and the server/connection concurrency fit to float rounding, and the rejected rows.

Inputs: SYNTHETIC logs (:func:`ddlscope.rpc.synthetic.synthetic_rpc_log`) written as Parquet
folders and CSV, with bad and implausible rows; and the repo's ps-train collector log
(tests/rpc/data/pstrain_collector.json: 12 RPCs measured over loopback gRPC by ddlscope ps-train,
with the server substage timestamps). /work/shared/data holds no RPC latency log.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from ddlscope.cli.main import app
from ddlscope.rpc import ColumnMapping, dissect, read_rpc_log
from ddlscope.rpc.decompose import grouped_quantiles
from ddlscope.rpc.streaming import (
    STREAM_MEASURES,
    dissect_streaming,
    plan_stream,
    ray_available,
    read_partition,
    scatter_partitions,
    value_bins,
)
from ddlscope.rpc.synthetic import synthetic_rpc_log

DATA = Path(__file__).parent / "data"


def _same(mem, streamed) -> None:
    """Every figure the streamed dissection has, compared with the in-memory one."""
    assert_frame_equal(mem.percentiles, streamed.percentiles, check_exact=True, check_dtypes=False)
    assert_frame_equal(mem.stage_summary, streamed.stage_summary, check_dtypes=False, rel_tol=1e-12)
    fit = mem.concurrency_fit.filter(pl.col("measure").is_in(list(STREAM_MEASURES)))
    assert_frame_equal(fit, streamed.concurrency_fit, check_dtypes=False, rel_tol=1e-7, abs_tol=1e-9)
    for key in ("rpcs", "workers", "servers", "connections", "rejected_rows", "rejected_by_reason", "latency_us",
                "dominant_stage", "stages"):
        assert mem.summary[key] == streamed.summary[key], key
    assert mem.summary["mean_stage_share"] == pytest.approx(streamed.summary["mean_stage_share"], rel=1e-12)
    assert_frame_equal(mem.rejected.sort("log_file", "log_line"), streamed.rejected.sort("log_file", "log_line"))


def _folder(tmp_path: Path, frame: pl.DataFrame, by: str = "worker_id", row_group: int = 1000) -> Path:
    """The log as one Parquet file per ``by`` value: every server's RPCs spread over all files."""
    folder = tmp_path / "log"
    folder.mkdir()
    for (key,), part in frame.group_by(by, maintain_order=True):
        part.write_parquet(folder / f"{by}={key}.parquet", row_group_size=row_group)
    return folder


def test_parquet_folder_equals_in_memory(tmp_path):
    frame = synthetic_rpc_log(12_000, workers=6, servers=5, seed=4)
    folder = _folder(tmp_path, frame)
    mem = dissect(sorted(folder.glob("*.parquet")))
    plan = plan_stream(folder, partition_rows=3_000)
    # 5 servers of ~2 400 rows each: one partition per server (a server is never split)
    assert [p.servers for p in plan.partitions] == [("0",), ("1",), ("2",), ("3",), ("4",)]
    assert plan.rows == 12_000
    streamed = dissect_streaming(folder, partition_rows=3_000)
    assert streamed.partitions == 5
    _same(mem, streamed)
    # the figures are the log's: 12 000 RPCs, 6 workers, 5 servers
    assert (streamed.rpcs, streamed.workers, streamed.servers) == (12_000, 6, 5)
    lat = streamed.percentiles.filter((pl.col("grouping") == "all") & (pl.col("stage") == "latency"))
    values = np.sort((frame["client_done_ns"] - frame["client_issue_ns"]).to_numpy())
    assert lat["p50_us"].item() == pytest.approx(np.quantile(values, 0.5) / 1e3, rel=1e-15)
    assert lat["max_us"].item() == values[-1] / 1e3


def test_csv_with_bad_rows_mapping_and_one_partition(tmp_path):
    frame = synthetic_rpc_log(6_000, seed=8).with_columns(
        pl.when(pl.col("rpc_id") == 10).then(pl.col("client_done_ns") - 10**9).otherwise(pl.col("client_done_ns"))
        .alias("client_done_ns"),
        pl.when(pl.col("rpc_id") == 20).then(None).otherwise(pl.col("server_recv_end_ns")).alias("server_recv_end_ns"),
    ).rename({"server_id": "shard"})
    path = tmp_path / "rpcs.csv"
    frame.write_csv(path)
    mapping = ColumnMapping.from_pairs(["shard=server_id"], [])
    mem = dissect(path, mapping=mapping)
    streamed = dissect_streaming(path, mapping=mapping)
    _same(mem, streamed)
    # rpc 10 (data row 11, line 12) and rpc 20 (line 22) rejected
    assert streamed.summary["rejected_by_reason"] == {"missing_timestamp": 1, "reversed_client_order": 1}
    assert sorted(streamed.rejected["log_line"].to_list()) == [12, 22]
    assert streamed.rpcs == 6_000 - 2


def test_implausible_rpcs_are_set_aside_once_for_the_log(tmp_path):
    frame = synthetic_rpc_log(5_000, seed=2)
    hour = 3_600 * 10**9
    late = pl.col("rpc_id").is_in([3, 7])
    frame = frame.with_columns(*(pl.when(late).then(pl.col(c) + hour).otherwise(pl.col(c)).alias(c)
                                 for c in ("client_recv_end_ns", "client_done_ns")))
    path = tmp_path / "log.parquet"
    frame.write_parquet(path)
    mem = dissect(path)
    streamed = dissect_streaming(path, partition_rows=1_000)
    assert streamed.summary["implausible_latency"]["rpcs"] == 2
    assert streamed.summary["implausible_latency"]["max_us"] == mem.summary["implausible_latency"]["max_us"]
    _same(mem, streamed)


def test_pstrain_collector_log_with_substages(tmp_path):
    log = read_rpc_log(DATA / "pstrain_collector.json")
    path = tmp_path / "pstrain.parquet"
    log.frame.drop("log_file", "log_line").write_parquet(path)
    mem = dissect(path)
    streamed = dissect_streaming(path, partition_rows=1)
    assert streamed.partitions == log.frame["server_id"].n_unique()
    _same(mem, streamed)
    assert "server_sync_wait" in streamed.summary["stages"]


def test_scattered_partitions_are_the_filtered_scans(tmp_path):
    """Each input file read once and scattered per partition gives every partition the same raw
    rows, in the same order, as scanning every file filtered on its servers: here a CSV file (text
    columns, rows without a server) and a Parquet file with a column the CSV lacks."""
    frame = synthetic_rpc_log(3_000, workers=4, servers=6, seed=3)
    folder = tmp_path / "log"
    folder.mkdir()
    frame.head(1_500).with_columns(pl.when(pl.col("rpc_id") % 250 == 7).then(None).otherwise(pl.col("server_id"))
                                   .alias("server_id")).write_csv(folder / "a.csv")
    frame.tail(1_500).with_columns(pl.lit(1).alias("extra")).write_parquet(folder / "b.parquet", row_group_size=200)
    plan = plan_stream(folder, partition_rows=700)
    assert plan.partitions[-1].servers is None and plan.partitions[-1].rows == 6  # rpc_id 7, 257, ... 1257
    assert len(plan.partitions) == 7 and plan.file_rows == [1_500, 1_500]  # 6 servers of ~500 rows, no server
    assert scatter_partitions(plan, tmp_path / "raw")
    for part in plan.partitions:
        assert_frame_equal(read_partition(plan, part, tmp_path / "raw"), read_partition(plan, part))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**62), min_size=2, max_size=200))
def test_value_bins_are_monotone(values):
    v = np.sort(np.array(values, np.int64))
    b = value_bins(v)
    assert (np.diff(b) >= 0).all()
    # values below 2^10 have a bin each
    small = v[v < 1024]
    assert (value_bins(small) == small).all()


def test_exact_percentiles_of_awkward_values(tmp_path):
    """Ties, values at powers of two and just below them, in one group (the float rounding of huge values
    is covered by test_value_bins_are_monotone)."""
    frame = synthetic_rpc_log(2_000, workers=2, servers=2, seed=1)
    # server processing set to awkward durations: powers of two, 2^k - 1, repeated values
    awkward = np.array([2**k - d for k in (10, 20, 30, 35) for d in (0, 1)] * 250, np.int64)
    frame = frame.with_columns(pl.Series("d", awkward[: frame.height]))
    frame = frame.with_columns(
        (pl.col("server_proc_start_ns") + pl.col("d")).alias("server_proc_end_ns"),
        *((pl.col(c) + pl.col("d") - (pl.col("server_proc_end_ns") - pl.col("server_proc_start_ns"))).alias(c)
          for c in ("server_send_end_ns", "client_recv_end_ns", "client_done_ns")),
    ).drop("d")
    path = tmp_path / "awkward.parquet"
    frame.write_parquet(path)
    streamed = dissect_streaming(path, partition_rows=500)
    got = streamed.percentiles.filter((pl.col("grouping") == "all") & (pl.col("stage") == "server_processing"))
    q, count, _, _ = grouped_quantiles(awkward[: frame.height], np.zeros(frame.height, np.int64), 1,
                                          (0.5, 0.9, 0.99, 0.999))
    assert got["rpcs"].item() == count[0] == 2_000
    assert [got[c].item() for c in ("p50_us", "p90_us", "p99_us", "p99_9_us")] == list(q[0] / 1e3)
    assert got["max_us"].item() == 2**35 / 1e3  # 34 s: under the 60 s plausibility bound


def test_streaming_refuses_json_text_ids_and_ragged_csv(tmp_path):
    with pytest.raises(ValueError, match="not streamed"):
        dissect_streaming(DATA / "pstrain_collector.json")
    lines = synthetic_rpc_log(50, seed=1).write_csv().splitlines()
    lines[5] += ",99"  # one field more than the header: the in-memory reader rejects the line
    path = tmp_path / "ragged.csv"
    path.write_text("\n".join(lines) + "\n")
    assert dissect(path).summary["rejected_by_reason"] == {"extra_fields": 1}
    with pytest.raises(ValueError, match=r"ragged.csv: not readable as csv by the streaming reader \(found more "
                       r"fields than defined in 'Schema'\); dissect it without --streaming"):
        dissect_streaming(path)
    frame = synthetic_rpc_log(500, seed=3).with_columns(pl.format("w{}", pl.col("worker_id")).alias("worker_id"))
    path = tmp_path / "text_ids.parquet"
    frame.write_parquet(path)
    with pytest.raises(ValueError, match="streaming needs integer ids") as err:
        dissect_streaming(path)
    # the first text id is named with its file and line (Parquet rows count from 1)
    assert f"first at {path}:1: worker_id = 'w" in str(err.value)
    # one text cell in a CSV of integers: its line (the header is line 1)
    lines = synthetic_rpc_log(50, seed=1).write_csv().splitlines()
    header = lines[0].split(",")
    row = lines[7].split(",")
    row[header.index("server_id")] = "x"
    lines[7] = ",".join(row)
    path = tmp_path / "one_text.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"first at .*one_text\.csv:8: server_id = 'x'"):
        dissect_streaming(path)


def test_empty_and_header_only_csv_files(tmp_path):
    # a 0-byte CSV is an empty file (alone: an error; beside good files: a note, skipped); a header
    # without rows says so
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"empty\.csv: the file is empty"):
        dissect_streaming(empty)
    lines = synthetic_rpc_log(300, seed=4).write_csv().splitlines()
    header = tmp_path / "header.csv"
    header.write_text(lines[0] + "\n")
    with pytest.raises(ValueError, match=r"no RPC rows in .*header\.csv.*no data rows \(only a header\)"):
        dissect_streaming(header)
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.csv").write_text("\n".join(lines) + "\n")
    (folder / "b.csv").write_text("")
    d = dissect_streaming(folder)
    assert d.rpcs == 300 and any("b.csv: empty file, no rows" in n for n in d.notes)


def test_cli_streaming_writes_tables_and_partitioned_percentiles(tmp_path):
    frame = synthetic_rpc_log(4_000, seed=5)
    folder = _folder(tmp_path, frame, by="server_id")
    out = tmp_path / "report"
    res = CliRunner().invoke(app, ["rpc", "dissect", str(folder), "--streaming", "--partition-rows", "1500",
                                   "--no-progress", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "streamed: 4 partition(s), engine local" in res.output
    assert "4,000 RPCs from 16 worker(s) to 4 server(s)" in res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rpcs"] == 4_000 and summary["streaming"]["percentiles"] == "exact"
    mem = dissect(sorted(folder.glob("*.parquet")))
    assert summary["latency_us"] == mem.summary["latency_us"]
    # the partitioned dataset: one folder per grouping, read back without the others
    assert sorted(p.name for p in (out / "tables" / "stage_percentiles").iterdir()) == [
        "grouping=all", "grouping=connection", "grouping=iteration_phase", "grouping=op", "grouping=server"]
    servers = pl.read_parquet(out / "tables" / "stage_percentiles" / "grouping=server")
    assert servers.filter(pl.col("stage") == "latency").height == 4
    # a second run into the same report folder replaces the dataset
    res = CliRunner().invoke(app, ["rpc", "dissect", str(folder), "--streaming", "--no-progress", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "summary.json").read_text())["streaming"]["partitions"] == 1


@pytest.mark.skipif(not ray_available(), reason="ray is not installed (pip install 'ddlscope[ray]')")
def test_ray_two_workers_equal_single_process(tmp_path):
    frame = synthetic_rpc_log(8_000, workers=8, servers=4, seed=6)
    folder = _folder(tmp_path, frame)
    local = dissect_streaming(folder, partition_rows=2_000)
    on_ray = dissect_streaming(folder, partition_rows=2_000, engine="ray", num_cpus=2)
    assert on_ray.partitions == local.partitions == 4
    assert_frame_equal(local.percentiles, on_ray.percentiles, check_exact=True)
    assert_frame_equal(local.stage_summary, on_ray.stage_summary, check_exact=True)
    assert_frame_equal(local.concurrency_fit, on_ray.concurrency_fit, check_exact=True)
    assert_frame_equal(local.rejected, on_ray.rejected)
    assert {k: v for k, v in local.summary.items() if k != "streaming"} == \
        {k: v for k, v in on_ray.summary.items() if k != "streaming"}
    _same(dissect(sorted(folder.glob("*.parquet"))), on_ray)


def test_concurrent_partitions_are_the_same_bits(tmp_path):
    # 5 servers, 5 partitions, 3 at a time in threads: every table equals the one-at-a-time run exactly,
    # rejected rows included (a duplicate and a row with its send before its issue)
    frame = synthetic_rpc_log(10_000, workers=6, servers=5, seed=9)
    bad = frame.head(2).with_columns(client_send_start_ns=pl.col("client_issue_ns") - 1)
    folder = _folder(tmp_path, pl.concat([frame, frame.slice(100, 1), bad]))
    one = dissect_streaming(folder, partition_rows=2_500)
    three = dissect_streaming(folder, partition_rows=2_500, concurrent_partitions=3)
    assert one.partitions == three.partitions == 5
    assert (one.concurrent_partitions, three.concurrent_partitions) == (1, 3)
    assert one.rejected.height >= 3
    for name in ("percentiles", "stage_summary", "concurrency_fit", "rejected"):
        assert_frame_equal(getattr(one, name), getattr(three, name), check_exact=True)
    assert three.summary["streaming"]["concurrent_partitions"] == 3
    _same(dissect(sorted(folder.glob("*.parquet"))), three)


def test_concurrent_partitions_bad_values(tmp_path):
    folder = _folder(tmp_path, synthetic_rpc_log(2_000, seed=2))
    with pytest.raises(ValueError, match="concurrent_partitions: expected >= 1, got 0"):
        dissect_streaming(folder, concurrent_partitions=0)
    with pytest.raises(ValueError, match="goes with engine local"):
        dissect_streaming(folder, concurrent_partitions=2, engine="ray")
    res = CliRunner().invoke(app, ["rpc", "dissect", str(folder), "--concurrent-partitions", "2",
                                   "--out", str(tmp_path / "r")])
    assert res.exit_code != 0 and "--concurrent-partitions goes with --streaming --engine local" in res.output
    res = CliRunner().invoke(app, ["rpc", "dissect", str(folder), "--streaming", "--concurrent-partitions", "2",
                                   "--partition-rows", "400", "--no-progress", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert "at a time, engine local" in res.output
    # more than the log's partitions: as many as it has, and a note saying why
    res = CliRunner().invoke(app, ["rpc", "dissect", str(folder), "--streaming", "--concurrent-partitions", "8",
                                   "--no-progress", "--overwrite", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert "the log is 1 partition(s)" in res.output and "so 1 ran at a time" in res.output


def test_progress_counts_the_rows_of_each_pass(tmp_path, capsys):
    # 4 passes over 8 000 rows (scatter, check, sketch, refine): each bar says 8,000 of 8,000, not the
    # running total over the passes (a newcomer read "32,000 rows read" on the refine bar)
    folder = _folder(tmp_path, synthetic_rpc_log(8_000, workers=4, servers=4, seed=8))
    dissect_streaming(folder, partition_rows=2_000, progress=True)
    err = capsys.readouterr().err
    assert err.count("8,000 of 8,000 rows read") == 4, err
    assert "32,000" not in err and "files" in err
