"""The server stages split by ps-train's extra timestamps: the sync wait is named, not hidden in server_queue."""

from __future__ import annotations

import polars as pl
from rpclog_builders import rpc_frame, rpc_row

from ddlscope.report.rpc_findings import narrate
from ddlscope.rpc import decompose, dissect, stage_summary
from ddlscope.rpc.schema import stages_of

# per RPC (ns): network 1000, server_receive 300 = thread wait 200 + read 100,
# server_queue 5000 = decode 100 + sync wait 4900, server_processing 100: latency 6400
STAGES = {"network": 1_000, "server_receive": 300, "server_queue": 5_000, "server_processing": 100}


def _rows(n: int = 40, bad_dispatch: int | None = None) -> list[dict]:
    rows = []
    for i in range(n):
        r = rpc_row(i, issue_ns=100_000 * i, connection_id=i % 4, stages=STAGES, server_offset_ns=7 * 10**9)
        r["server_dispatch_ns"] = r["server_recv_start_ns"] + 200
        r["server_handler_start_ns"] = r["server_recv_end_ns"] + 100
        if i == bad_dispatch:  # after the request was decoded: outside server_receive
            r["server_dispatch_ns"] = r["server_recv_end_ns"] + 50
        rows.append(r)
    return rows


def test_decompose_adds_the_parts_and_they_sum_to_their_stage():
    rpcs = decompose(rpc_frame(_rows()))
    assert stages_of(rpcs) == ("client_queue", "client_send", "network", "server_thread_wait", "server_read",
                               "server_decode", "server_sync_wait", "server_processing", "server_send",
                               "client_completion")
    row = rpcs.row(0, named=True)
    assert (row["server_thread_wait_ns"], row["server_read_ns"]) == (200, 100)
    assert (row["server_decode_ns"], row["server_sync_wait_ns"]) == (100, 4_900)
    assert row["server_queue_ns"] == 5_000 and row["server_receive_ns"] == 300   # the whole stages stay
    summary = stage_summary(rpcs, by=None).row(0, named=True)
    assert summary["server_sync_wait_share"] == 4_900 / 6_400
    assert "server_queue_share" not in summary


def test_the_dissection_names_the_sync_wait_in_findings_tables_and_summary():
    d = dissect(rpc_frame(_rows()))
    t = narrate(d)
    assert d.summary["dominant_stage"] == "server_sync_wait"
    assert d.summary["mean_stage_share"]["server_sync_wait"] == 4_900 / 6_400   # 76.5625 %
    assert d.summary["stage_parts"] == {"server_receive": ["server_thread_wait", "server_read"],
                                        "server_queue": ["server_decode", "server_sync_wait"]}
    assert t.findings[1].startswith(
        "Dominant stage: server_sync_wait (the wait at the server for the sync barrier, i.e. the other workers' "
        "pushes of the previous iteration, and for table locks) takes 76.6% of the mean RPC time; second network "
        "(15.6%)")   # 1000 / 6400
    overall = d.percentiles.filter(pl.col("grouping") == "all")
    assert overall.filter(pl.col("stage") == "server_sync_wait").get_column("mean_us").item() == 4.9
    assert "server_queue" not in overall.get_column("stage").to_list()
    assert set(d.tail.get_column("stage").unique().to_list()) >= {"server_sync_wait", "server_thread_wait"}
    assert "server_sync_wait_mean_us" in d.concurrency_profile.columns


def test_a_timestamp_outside_its_stage_keeps_the_stage_whole_and_says_so():
    d = dissect(rpc_frame(_rows(bad_dispatch=3)))
    stages = d.summary["stages"]
    assert "server_receive" in stages and "server_thread_wait" not in stages
    assert "server_sync_wait" in stages    # server_queue's own timestamps are fine
    assert ("server_receive not split into server_thread_wait, server_read: 1 RPC(s) have server_dispatch_ns missing "
            "or outside the stage") in d.notes


def test_a_log_without_the_extra_timestamps_keeps_the_eight_stages():
    rows = [rpc_row(i, issue_ns=100_000 * i, stages=STAGES) for i in range(5)]
    d = dissect(rpc_frame(rows))
    assert d.summary["dominant_stage"] == "server_queue" and d.summary["stage_parts"] == {}
