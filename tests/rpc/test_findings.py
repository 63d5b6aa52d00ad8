"""Findings and figures on small and degenerate logs read plainly and draw without warnings."""

from __future__ import annotations

import warnings

import polars as pl
import pytest
from rpclog_builders import rpc_frame, rpc_row

from ddlscope.report.rpc_findings import dissection_summary, narrate, slope_text
from ddlscope.rpc import ColumnMapping, dissect
from ddlscope.rpc.analyzers import KindEffect
from ddlscope.rpc.synthetic import synthetic_rpc_log


def test_one_rpc_gives_findings_not_a_traceback():
    d = dissect(rpc_frame([rpc_row(0, issue_ns=0, stages={"network": 300, "server_processing": 100})]))
    t = narrate(d)
    assert t.findings[0] == ("1 RPC from 1 worker(s) to 1 server(s) over 1 connection(s): latency p50 0.4 µs, "
                             "p99 0.4 µs (1x p50), p99.9 0.4 µs.")
    # the tail of one RPC is that RPC, no slower than the median (itself): nothing to attribute
    assert t.findings[2] == ("Slowest 1% (1 RPC, >= 0.4 µs): no tail: the slowest 1% are no slower than the median "
                             "(0.4 µs), so no stage or server is singled out.")
    assert "concurrency fit not quoted: 1 RPC, fewer than 30" in t.notes


def test_a_line_through_too_few_sizes_or_with_a_negative_intercept_is_not_a_finding():
    # network = 90 ns per byte - 80 us: 1000 B -> 10 us, 2000 B -> 100 us (3000 B -> 190 us)
    def rows(n: int, sizes: list[int]) -> list[dict]:
        return [rpc_row(i, issue_ns=10**6 * i, request_bytes=sizes[i % len(sizes)], response_bytes=0,
                        stages={"network": 90 * sizes[i % len(sizes)] - 80_000}) for i in range(n)]

    two = dissect(rpc_frame(rows(2, [1_000, 2_000])))
    tt2 = narrate(two)
    fit = two.size_fits.filter(pl.col("stage") == "network").row(0, named=True)
    assert fit["alpha_us"] == pytest.approx(-80.0)  # the table keeps what least squares gives
    assert not any("alpha-beta" in f for f in tt2.findings)
    assert any("fewer than 30 RPCs or 3 distinct message sizes" in n for n in tt2.notes)
    many = dissect(rpc_frame(rows(30, [1_000, 2_000, 3_000])))   # enough points, still a negative intercept
    tman = narrate(many)
    assert not any("alpha-beta" in f or "Message size" in f for f in tman.findings)
    assert any("pull_sparse has a negative intercept" in n for n in tman.notes)


def test_all_equal_timestamps_say_so_and_draw_nothing(tmp_path):
    frame = synthetic_rpc_log(2_400, seed=1)
    stamps = [c for c in frame.columns if c.startswith(("client_", "server_")) and c.endswith("_ns")
              and "connect" not in c]
    d = dissect(frame.with_columns(pl.lit(1_700_000_000_000_000_000).alias(c) for c in stamps))
    t = narrate(d)
    assert t.findings[0].endswith("every RPC has latency 0 (client_done_ns = client_issue_ns), so the timestamps do "
                                  "not resolve the RPCs and there are no stage shares, tails or fits to report; "
                                  "check the log's timestamps and --time-unit.")
    assert len(t.findings) == 1 and d.summary["dominant_stage"] is None
    from ddlscope.report.rpc_dissect import write_dissection_report

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_dissection_report(d, tmp_path / "r")
    assert not list((tmp_path / "r" / "figures").iterdir())
    assert "Every RPC has latency 0" in (tmp_path / "r" / "index.html").read_text()


def test_an_excess_share_above_one_is_explained():
    # 99 RPCs: network 500 ns; RPC 99: network 100 ns and a 1000 ns server queue (latency 1100 ns).
    # The slowest 1% is RPC 99: its excess latency is 1100 - 500 = 600 ns, of which the server queue carries
    # 1000 - 0 = 1000 ns (167%) and the network -400 ns.
    rows = [rpc_row(i, issue_ns=10**5 * i, stages={"network": 500}) for i in range(99)]
    rows.append(rpc_row(99, issue_ns=10**5 * 99, stages={"network": 100, "server_queue": 1_000}))
    d = dissect(rpc_frame(rows))
    t = narrate(d)
    assert t.findings[2] == ("Slowest 1% (1 RPC, >= 1.1 µs): server_queue is the longest stage in 100% of them; "
                             "server_queue is 1 µs longer in them than in the rest, more than their whole excess "
                             "latency (0.6 µs), because other stages are shorter in the tail.")


def test_a_negative_slope_reads_as_less_latency():
    # the stage that moves most in the slope's direction (concurrency_effect picks it from the fit's stage rows)
    less = KindEffect("read", -186.0, None, None, True, "network", -150.0)
    assert slope_text(less, first=False) == (
        "each other read is associated with 186 µs less latency (most in network; a correlation, not a saving)")
    more = KindEffect("read", 55.7, None, None, True, "server_queue", 20.0)
    assert slope_text(more, first=True) == (
        "each other read in flight at the same server on another connection adds 55.7 µs to an RPC's latency "
        "(most in server_queue, 20 µs)")


def test_the_report_of_a_two_rpc_log_draws_without_warnings(tmp_path):
    from ddlscope.report.rpc_dissect import tail_servers_figure, write_dissection_report

    d = dissect(synthetic_rpc_log(2, seed=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_dissection_report(d, tmp_path / "r")
    assert (tmp_path / "r" / "figures" / "latency_ccdf.png").exists()
    # each server thread serves one connection: no threads figure, but the table and a sentence saying why
    assert not (tmp_path / "r" / "figures" / "threads.png").exists()
    assert (tmp_path / "r" / "tables" / "connections_per_thread.csv").exists()
    assert "Every server thread serves 1 connection(s)" in (tmp_path / "r" / "index.html").read_text()
    fig = tail_servers_figure(d)
    assert fig.axes[0].get_legend() is None and len(fig.legends) == 1  # the legend sits below the axes


def test_large_durations_read_in_human_units():
    from ddlscope.rpc.units import human_us as _us

    assert _us(476.0) == "476 µs"
    assert _us(2_190.0) == "2.19 ms"
    assert _us(1_500_000.0) == "1.5 s"               # 1.5e6 µs
    assert _us(135_000 * 1e6 / 1000) == "2.25 min"   # 135 s = 2.25 min
    assert _us(135_000 * 1e6) == "37.5 h"            # 135,000 s / 3600 = 37.5 h
    assert _us(-3_000.0) == "-3 ms"


def test_an_implausible_median_latency_says_check_the_time_unit(tmp_path):
    # every RPC: network 100,000 + server_processing 35,000 = latency 135,000 (in the log's unit)
    rows = [rpc_row(i, issue_ns=1_000_000 * i, stages={"network": 100_000, "server_processing": 35_000})
            for i in range(5)]
    path = tmp_path / "log.csv"
    rpc_frame(rows).write_csv(path)
    ok = dissect(path)   # ns: 135 µs, plausible
    tk = narrate(ok)
    assert tk.warnings == () and dissection_summary(ok)["warnings"] == []
    as_s = dissect(path, mapping=ColumnMapping(time_unit="s"))   # 135,000 s = 37.5 h
    ts_s = narrate(as_s)
    assert ts_s.findings[0].endswith("latency p50 37.5 h, p99 37.5 h (1x p50), p99.9 37.5 h.")
    assert ts_s.warnings == ("the median RPC latency is 37.5 h, implausible for an RPC (expected 1 µs to 1 min): "
                             "check --time-unit (the timestamps were read as s)",)
    # a µs log read as ns: latency 135 ns = 0.135 µs
    us_path = tmp_path / "log_us.csv"
    rpc_frame(rows).with_columns(pl.col("^.*_ns$") // 1000).write_csv(us_path)
    as_ns = dissect(us_path)
    tsns = narrate(as_ns)
    assert tsns.warnings == ("the median RPC latency is 0.135 µs, implausible for an RPC (expected 1 µs to "
                              "1 min): check --time-unit (the timestamps were read as ns)",)
    assert narrate(dissect(us_path, mapping=ColumnMapping(time_unit="us"))).warnings == ()


def test_tied_latencies_have_no_tail_to_attribute():
    # 200 RPCs, all network 100 us + server_processing 35 us = 135 us, on servers 0 (120 RPCs) and 1 (80):
    # the slowest 1% (ceil(200 * 0.01) = 2 RPCs) are picked by tie-breaking; they are no slower than the median
    rows = [rpc_row(i, issue_ns=10**6 * i, server_id=int(i >= 120), connection_id=int(i >= 120),
                    stages={"network": 100_000, "server_processing": 35_000}) for i in range(200)]
    d = dissect(rpc_frame(rows))
    t = narrate(d)
    assert t.findings[2] == ("Slowest 1% (2 RPCs, >= 135 µs): no tail: the slowest 1% are no slower than the median "
                             "(135 µs), so no stage or server is singled out.")
    assert t.findings[3].startswith("Slowest 0.1% (1 RPC, >= 135 µs): no tail:")
    assert not any("holds" in f or "in flight at their server" in f for f in t.findings)
    entry = d.summary["tail"]["slowest 1%"]
    assert entry["no_tail"] is True and entry["top_server"] is None and entry["dominant_stage"] is None
    from ddlscope.report.rpc_dissect import tail_stages_figure

    fig = tail_stages_figure(d)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts == ["nothing to show: no tail\n(the slowest 1% and 0.1% are no slower\nthan the median latency)"] * 2


def test_a_real_tail_is_still_attributed():
    # 199 RPCs of 135 us on server 0, one of 1135 us (server_queue 1000 us) on server 1: p50 135 us < 1135 us
    rows = [rpc_row(i, issue_ns=10**6 * i, stages={"network": 100_000, "server_processing": 35_000})
            for i in range(199)]
    rows.append(rpc_row(199, issue_ns=10**6 * 199, server_id=1, connection_id=1,
                        stages={"network": 100_000, "server_processing": 35_000, "server_queue": 1_000_000}))
    d = dissect(rpc_frame(rows))
    t = narrate(d)
    # the slowest 1% = 2 RPCs: the 1135 us one and a 135 us one picked by tie-breaking (threshold 135 us = the
    # median); the tail (mean 635 us) is slower than the rest (135 us): attributed, with the tie said.
    # Excess: server_queue (500 - 0) / (635 - 135) = 100%; dominant: server_queue in 1 of 2 RPCs, network in
    # the other (first on the sort's tie: network) = 50%
    assert t.findings[2].startswith("Slowest 1% (2 RPCs, >= 135 µs): ")
    assert "server_queue" in t.findings[2] and "carries the most excess latency (100%)" in t.findings[2]
    assert "its threshold is the median: RPCs tied at 135 µs fill the tail, picked by tie-breaking" in t.findings[2]
    # the slowest 0.1% = 1 RPC (1.135 ms > 135 us): server_queue is its longest stage and carries its excess
    # (1000 us of 1000 us = 100%); server 1 holds it with 0.5% of all RPCs
    assert t.findings[3] == ("Slowest 0.1% (1 RPC, >= 1.14 ms): server_queue is the longest stage in 100% of them "
                             "and carries 100% of their excess latency over the rest; server 1 holds 100% of them "
                             "with 0.5% of all RPCs.")
    assert d.summary["tail"]["slowest 0.1%"]["no_tail"] is False


def test_the_connection_legend_is_below_the_axes_not_over_a_bar():
    # 5 RPCs on 2 connections: the first on each is "new", the others "reuse" (inferred); one op, so the "new"
    # bar filled the right half of the axes where the legend used to sit
    rows = [rpc_row(i, issue_ns=10**6 * i, connection_id=i % 2, stages={"network": 100_000}) for i in range(5)]
    from ddlscope.report.rpc_dissect import connection_figure

    fig = connection_figure(dissect(rpc_frame(rows)))
    assert all(ax.get_legend() is None for ax in fig.axes)
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["reuse", "new"]
    fig.canvas.draw()
    box = legend.get_window_extent()
    assert all(box.y1 <= ax.get_window_extent().y0 for ax in fig.axes)   # wholly below both panels


def test_one_connection_setup_reads_in_the_singular():
    # 4 RPCs on one connection: the first (inferred "new") takes 150 us, the three reused ones 100 us.
    # Added over the reuse median: 150 - 100 = 50 us; all RPC time 150 + 3 * 100 = 450 us -> 11.1%
    rows = [rpc_row(i, issue_ns=10**6 * i, stages={"network": 100_000 + (50_000 if i == 0 else 0)}) for i in range(4)]
    d = dissect(rpc_frame(rows))
    t = narrate(d)
    assert t.findings[-2] == ("Connection management: 1 RPC (25%) opened a connection (0 after a reconnect); it adds "
                              "50 µs over reused connections, 11.1% of all RPC time; median +50 µs for pull_sparse "
                              "on a new connection.")
