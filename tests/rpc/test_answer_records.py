"""The analyzers' frozen records (ddlscope.rpc.analyzers) on a hand-made log, values by hand.

The log: 100 pull_sparse RPCs from one worker to one server on one connection, issued 10 ms
apart (never two in flight). RPCs 0..98: network 500 µs + server processing 100 µs = 600 µs.
RPC 99: the same plus a 20 ms server queue = 20.6 ms.

    mean latency = (99 x 600 + 20,600) / 100 = 800 µs
    mean network = 500 µs -> 62.5 %; server queue = 20,000 / 100 = 200 µs -> 25 %; processing 100 µs -> 12.5 %
    slowest 1 % = RPC 99 (1 RPC, threshold 20.6 ms): the server queue is its longest stage, and carries
    (20,000 - 0) / (20,600 - 600) = 100 % of its excess latency over the rest
    largest RPC share of all latency = 20,600 / 80,000 = 25.75 %
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import polars as pl
import pytest
from rpclog_builders import rpc_frame, rpc_row

from ddlscope.report.rpc_findings import concurrency_sentence, dissection_summary, narrate
from ddlscope.rpc import dissect
from ddlscope.rpc.analyzers import concurrency_effect, median_implausible
from ddlscope.rpc.synthetic import synthetic_rpc_log

US = 1_000  # ns per µs


@pytest.fixture(scope="module")
def d():
    rows = [rpc_row(i, issue_ns=10_000 * US * i, stages={"network": 500 * US, "server_processing": 100 * US})
            for i in range(99)]
    rows.append(rpc_row(99, issue_ns=10_000 * US * 99,
                        stages={"network": 500 * US, "server_queue": 20_000 * US, "server_processing": 100 * US}))
    return dissect(rpc_frame(rows))


def test_overview_counts_and_percentiles(d):
    ov = d.overview
    assert (ov.rpcs, ov.workers, ov.servers, ov.connections) == (100, 1, 1, 1)
    assert ov.latency_us["mean"] == pytest.approx(800.0)
    assert ov.latency_us["p50"] == pytest.approx(600.0)
    assert ov.max_us == pytest.approx(20_600.0)
    assert ov.zero_latency_rpcs == 0 and not ov.all_zero and not ov.synthetic
    assert ov.rejected_rows == 0 and dict(ov.rejected_by_reason) == {}


def test_stage_shares_name_the_dominant_stage(d):
    sh = d.stage_shares
    assert sh.dominant_stage == "network" and sh.ranked[:3] == ("network", "server_queue", "server_processing")
    assert sh.mean_stage_share["network"] == pytest.approx(0.625)
    assert sh.mean_stage_share["server_queue"] == pytest.approx(0.25)
    assert sh.mean_stage_share["server_processing"] == pytest.approx(0.125)
    assert [(o.op, o.stage) for o in sh.per_op] == [("pull_sparse", "network")]
    assert sh.largest_rpc_share == pytest.approx(0.01)      # every RPC's network is 500 of 50,000 µs


def test_the_tail_is_the_queued_rpc(d):
    first, second = d.tail_levels
    assert first.label == "slowest 1%" and second.label == "slowest 0.1%"
    assert first.rpcs == 1 and first.threshold_us == pytest.approx(20_600.0) and not first.no_tail
    assert first.dominant_stage == "server_queue" and first.dominant_share == 1.0
    assert first.excess_stage == "server_queue" and first.excess_share == pytest.approx(1.0)
    assert first.excess_stage_us == pytest.approx(20_000.0)
    assert not first.median_tied and first.top_server == 0 and first.top_server_share_of_tail == 1.0
    assert d.tail_at("slowest 1%") is first and d.tail_at("slowest 5%") is None


def test_input_checks_and_connection_setup(d):
    c = d.checks
    assert c.largest_rpc_share == pytest.approx(20_600 / 80_000)
    assert not c.one_rpc_carries_most and not c.median_implausible and dict(c.implausible) == {}
    s = d.connection_setup
    assert (s.setup_rpcs, s.reconnect_rpcs) == (1, 0)   # the first RPC on the connection opened it
    assert (s.example_op, s.example_event) == ("pull_sparse", "new")
    assert s.example_added_p50_us == pytest.approx(0.0)  # 600 µs on the new connection, 600 µs median on reuse
    # one request size only: no alpha-beta fit is quoted
    assert d.network.too_few == ("pull_sparse",) and d.network.quoted == () and d.network.max_r2 is None
    assert [(k.kind, k.rpcs) for k in d.phase.kinds] == [("pulls", 100)]


def test_records_are_frozen_and_the_summary_is_a_copy(d):
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.overview = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.tail_levels[0].rpcs = 5
    with pytest.raises(TypeError):
        d.overview.latency_us["p50"] = 0.0   # a read-only mapping
    s = d.summary
    s["rpcs"] = -1
    assert d.summary["rpcs"] == 100
    assert d.summary["tail"]["slowest 1%"] == d.tail_levels[0].entry()


def test_the_sentences_come_from_the_records(d):
    told = narrate(d)
    assert told.findings[1] == ("Dominant stage: network takes 62.5% of the mean RPC time; second server_queue "
                                "(25%). Largest stage per op: pull_sparse network 62.5%.")
    assert told.findings[2] == ("Slowest 1% (1 RPC, >= 20.6 ms): server_queue is the longest stage in 100% of them "
                                "and carries 100% of their excess latency over the rest.")
    assert told.warnings == ()
    assert "100 RPCs: the slowest 0.1% is 1 RPC; tail shares of so few RPCs are anecdotes" in told.notes
    js = dissection_summary(d, told)
    assert js["findings"] == list(told.findings) and js["rpcs"] == 100
    assert list(js)[-3:] == ["warnings", "notes", "findings"]


def test_concurrency_effect_by_hand():
    # writes 99.6 ± 1.96 x 2 = 95.68 .. 103.52 µs (excludes 0), reads 3 ± 1.96 x 10 = -16.6 .. 22.6 (includes 0)
    stages = pl.DataFrame({"stage": ["network", "server_queue"], "us_per_write": [400.0, 140.0],
                           "us_per_read": [1.0, 2.6]})
    e = concurrency_effect({"partial_r2": 0.12, "rpcs": 100_000, "us_per_write": 99.6, "us_per_write_se": 2.0,
                            "us_per_read": 3.0, "us_per_read_se": 10.0}, stages, {"write": (2.0, 1.0)})
    write, read = e.kinds
    assert write.ci95_us == pytest.approx((95.68, 103.52)) and write.measurable
    assert (write.stage, write.stage_us) == ("network", 400.0)
    assert read.ci95_us == pytest.approx((-16.6, 22.6)) and not read.measurable
    assert (read.stage, read.stage_us) == ("server_queue", 2.6)  # the stage that grows most per read
    assert e.any_measurable and e.entry()["write"]["measurable"] is True
    # the same R² below 5 %: nothing measurable
    weak = concurrency_effect({"partial_r2": 0.01, "rpcs": 100_000, "us_per_write": 99.6, "us_per_write_se": 2.0,
                               "us_per_read": 3.0, "us_per_read_se": 10.0}, stages)
    assert not weak.any_measurable
    assert concurrency_sentence(weak).startswith("Concurrency: no measurable effect")


def test_plausible_median_bounds():
    assert median_implausible(0.5) and median_implausible(61e6)
    assert not median_implausible(1.0) and not median_implausible(600.0) and not median_implausible(0.0)
    assert not median_implausible(None)


def test_summary_keys_match_the_records_on_a_synthetic_log():
    d = dissect(synthetic_rpc_log(3_000, seed=2))
    s = dissection_summary(d)
    assert s["dominant_stage"] == d.stage_shares.dominant_stage
    assert s["latency_us"] == dict(d.overview.latency_us)
    assert s["concurrency_effect"] == d.concurrency_effect.entry()
    assert s["network_fit"] == {f.op: f.entry() for f in d.network.fits}
    assert s["phase"] == {p.kind: p.entry() for p in d.phase.kinds}


def test_the_analysis_core_does_not_import_the_report_side():
    code = ("import sys; import ddlscope.rpc.dissect, ddlscope.rpc.streaming, ddlscope.measure.analysis; "
            "bad = sorted(m for m in sys.modules if m.startswith('ddlscope.report') or m.startswith('ddlscope.cli')); "
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_python_api_returns_the_records_and_the_report_sentences(tmp_path):
    import json

    import ddlscope

    path = tmp_path / "rpcs.csv"
    synthetic_rpc_log(2_000, seed=4).rename({"server_id": "shard"}).write_csv(path)
    res = ddlscope.rpc_dissect(path, column_map={"shard": "server_id"}, report_dir=tmp_path / "r")
    assert res.summary["rpcs"] == 2_000 == res.dissection.overview.rpcs
    assert res.findings == narrate(res.dissection).findings
    written = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert written["findings"] == list(res.findings) and written["rpcs"] == 2_000
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.findings = ()
    with pytest.raises(TypeError):
        res.summary["rpcs"] = 0
