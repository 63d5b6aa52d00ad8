"""nccl-tests files as users paste them (several tables, old releases, launcher prefixes, failed
runs) and the alpha-beta fit against the file's own figures (issue 13)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from ddlscope.calibrate.fit import fit_alpha_beta
from ddlscope.calibrate.nccl_tests import NcclTestsError, parse_nccl_tests, read_nccl_tests
from ddlscope.cli.main import app
from ddlscope.model.collectives import bus_factor

from . import nccl_samples as S

runner = CliRunner()


def _file_ends(table):
    """The file's own figures, from its printed out-of-place rows: the busbw column at the 3 largest
    sizes (median) and the time column at the 3 smallest (median)."""
    r = table.rows.filter(placement="out_of_place").sort("size_bytes")
    return float(r["busbw_gb_s"].tail(3).median()), float(r["time_us"].head(3).median()), r


SWEEPS = {
    "8 x A100 NVLink": (S.ALL_REDUCE_8X_A100_NVLINK, 0),
    "16 x A100 EFA": (S.ALL_REDUCE_16X_A100_EFA, 0),
    "32 x H100 InfiniBand": (S.ALL_REDUCE_32X_H100_IB, 0),
    "8 x H100 all_gather": (S.FIVE_PERF_8X_H100, 1),
    "8 x H100 all_to_all": (S.FIVE_PERF_8X_H100, 3),
    "2 x 8 H100 srun all_gather": (S.SRUN_ALL_GATHER_16X, 0),
}


@pytest.mark.parametrize("name", list(SWEEPS))
def test_fit_reproduces_the_files_own_large_busbw_and_small_time(name):
    text, index = SWEEPS[name]
    (table,) = [t for t in parse_nccl_tests(text).tables if t.index == index]
    busbw, small_us, rows = _file_ends(table)
    f = table.fit()
    sizes = rows["size_bytes"].to_numpy()
    # the fit's busbw at the 3 largest sizes: f(p) S / t_fit(S); its time at the 3 smallest
    fit_busbw = float(np.median(bus_factor(table.collective, table.ranks) * sizes[-3:] / f.predict_s(sizes[-3:]) / 1e9))
    fit_small_us = float(np.median(f.predict_s(sizes[:3]) * 1e6))
    assert fit_busbw == pytest.approx(busbw, rel=0.05), name
    assert fit_small_us == pytest.approx(small_us, rel=0.25), name
    assert f.warnings == (), name
    assert f.measured_large_busbw_gb_s == pytest.approx(busbw, rel=0.01)  # n / t: the printed busbw, rounded


@pytest.mark.parametrize("name", ["8 x A100 NVLink", "16 x A100 EFA", "32 x H100 InfiniBand"])
def test_weighing_every_point_alike_misses_the_large_message_busbw(name):
    # the fit before issue 13 weighed every size alike; the middle sizes (protocol switches, pipeline
    # fill) run above any line through both ends and pulled beta 11-36 % below the file's own busbw
    table = parse_nccl_tests(SWEEPS[name][0]).tables[0]
    busbw, _, r = _file_ends(table)
    f = fit_alpha_beta(r["size_bytes"].to_numpy(), r["time_us"].to_numpy() * 1e-6, collective="all_reduce",
                       ranks=table.ranks, weights=np.ones(r.height))
    assert f.fitted_large_busbw_gb_s < 0.9 * busbw
    assert any("is -" in w and "off the measured" in w for w in f.warnings)


def test_degenerate_sweeps_warn():
    table = parse_nccl_tests(S.ALL_REDUCE_8X_A100_NVLINK).tables[0]
    r = table.rows.filter(placement="out_of_place")
    s, t = r["size_bytes"].to_numpy(), r["time_us"].to_numpy() * 1e-6
    # -b 64M: no latency-bound size, the latency is not measured
    big = s >= 64e6
    f = fit_alpha_beta(s[big], t[big], collective="all_reduce", ranks=8)
    assert any("even the smallest size (67108864 B) is bandwidth-bound" in w for w in f.warnings)
    # -e 64M: the sweep stops before the plateau: beta above every measured point
    small = s <= 64e6
    f = fit_alpha_beta(s[small], t[small], collective="all_reduce", ranks=8)
    assert any("above every measured point" in w for w in f.warnings)
    # times that grow faster than the size: the latency is at its bound 0
    f = fit_alpha_beta([1e5, 1e6, 1e7], [1e-6, 1e-4, 1e-2], collective="all_reduce", ranks=8)
    assert any("latency fitted as 0" in w for w in f.warnings)


def test_five_tables_in_one_file_are_kept_and_all_reduce_is_used():
    out = parse_nccl_tests(S.FIVE_PERF_8X_H100, source="all.txt")
    assert [t.collective for t in out.tables] == ["all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                                   "send_recv"]
    assert {t.collective_source for t in out.tables} == {"Collective test starting"}
    assert [t.ranks for t in out.tables] == [8] * 5 and out.accounting()["balanced"] == 1
    table, note = out.select()
    assert table.index == 0 and note.startswith("all.txt: using table 0 (line 16): all_reduce on 8 ranks")
    assert "not used: all_gather (table 1), reduce_scatter (table 2), all_to_all (table 3), send_recv (table 4)" in note
    assert out.select("sendrecv")[0].index == 4 and out.select("4")[0].collective == "send_recv"
    with pytest.raises(NcclTestsError, match="no broadcast table; the tables are: table 0"):
        out.select("broadcast")


def test_cli_uses_the_all_reduce_table_of_a_multi_table_file_and_says_so(tmp_path):
    log = tmp_path / "all_perf.txt"
    log.write_text(S.FIVE_PERF_8X_H100)
    ar_busbw = _file_ends(parse_nccl_tests(S.FIVE_PERF_8X_H100).tables[0])[0]
    sr_busbw = _file_ends(parse_nccl_tests(S.FIVE_PERF_8X_H100).tables[4])[0]
    assert ar_busbw > 340 and sr_busbw < 16  # the 350 and 15 GB/s of the issue
    for item, coll, busbw in ((f"{log}:nvlink", "all_reduce", ar_busbw),
                              (f"{log}:nvlink:send_recv", "send_recv", sr_busbw)):
        res = runner.invoke(app, ["calibrate", "--no-bench", "--system", "dgx-a100", "--nccl-tests", item,
                                  "-o", str(tmp_path / "x.toml"), "--format", "json"])
        assert res.exit_code == 0, res.output
        (fit,) = json.loads(res.stdout)["fits"]  # one table per --nccl-tests, not one fit per table
        assert fit["collective"] == coll and fit["bandwidth_gb_s"] == pytest.approx(busbw, rel=0.05)
        assert f"using table {0 if coll == 'all_reduce' else 4}" in res.stderr
        assert fit["origin"].endswith(f"({coll}, line {16 if coll == 'all_reduce' else 224})")


def test_old_per_rank_all_gather_sizes_and_the_all_reduce_after_it():
    out = parse_nccl_tests(S.OLD_PER_RANK_ALL_GATHER_THEN_ALL_REDUCE)
    ag, ar = out.tables
    assert (ag.collective, ag.ranks, ag.size_convention) == ("all_gather", 4, "per rank (old nccl-tests)")
    # the printed 1024 B per rank is 4 x 1024 = 4096 B of all-gather
    assert ag.rows["size_bytes"].to_list()[:2] == [4096.0, 4096.0]
    f = ag.fit()  # t = 30 us + 0.75 S / 10 GB/s: 3 steps of 10 us
    assert f.bandwidth_gb_s == pytest.approx(10.0, rel=2e-3) and f.latency_us == pytest.approx(10.0, rel=2e-2)
    assert (ar.collective, ar.ranks, ar.rows.height) == ("all_reduce", 4, 18)
    assert out.select()[0] is ar


def test_srun_prefixes_and_elisions():
    out = parse_nccl_tests(S.SRUN_ALL_GATHER_16X, source="slurm-1790.out")
    (t,) = out.tables
    assert (t.collective, t.ranks, t.ranks_source, t.complete) == ("all_gather", 16, "rank lines", True)
    assert t.devices == ["NVIDIA H100 80GB HBM3"] * 2 and t.rows.height == 22
    assert out.skipped["elision ('...')"] == 2 and out.skipped["text outside a table"] == 1  # "NCCL version"
    assert out.accounting() | {} == out.accounting() and out.accounting()["balanced"] == 1


def test_a_failed_run_does_not_stop_the_valid_run_after_it():
    out = parse_nccl_tests(S.FAILED_ALLTOALL_THEN_SENDRECV, source="runs.log")
    a2a, sr = out.tables
    assert (a2a.collective, a2a.complete, a2a.rows.height) == ("all_to_all", False, 6)
    assert "ends at line 17 without its footer, on \"node-1: Test NCCL failure" in a2a.notes[0]
    assert (sr.collective, sr.ranks, sr.complete) == ("send_recv", 4, True)
    with pytest.raises(NcclTestsError, match=r"no all_reduce table; .* name the one to use"):
        out.select()
    f = out.select("sendrecv")[0].fit()
    assert f.bandwidth_gb_s == pytest.approx(19.35, rel=0.05) and f.steps == 1
    assert f.latency_us == pytest.approx(22.31, rel=0.25)
    assert out.accounting()["balanced"] == 1


def test_send_recv_without_rank_lines_is_a_pair_not_a_billion_ranks():
    text = "\n".join(x for x in S.FAILED_ALLTOALL_THEN_SENDRECV.splitlines()[18:] if "Rank" not in x)
    (t,) = parse_nccl_tests(text).tables
    # busbw = algbw: the ratio says nothing about p (it was read as 1 / (1 - 1) = 1e9 ranks)
    assert (t.collective, t.ranks, t.ranks_source) == ("send_recv", 2, "send/receive (pairs)")


def test_single_rank_run_is_refused_not_read_as_reduce_scatter():
    with pytest.raises(NcclTestsError, match=r"rs\.txt:1: busbw is 0 on every row: a run on 1 rank"):
        parse_nccl_tests(S.SINGLE_RANK_REDUCE_SCATTER, source="rs.txt")
    out = parse_nccl_tests(S.SINGLE_RANK_REDUCE_SCATTER + S.ALL_REDUCE_8X_A100, source="rs.txt")
    assert [t.collective for t in out.tables] == ["all_reduce"]
    (rej,) = out.rejected_tables
    assert (rej.index, rej.header_line, rej.rows) == (0, 1, 3) and "1 rank" in rej.reason
    assert out.accounting()["balanced"] == 1


def test_the_header_line_wins_over_the_file_name(tmp_path):
    start = S.FIVE_PERF_8X_H100.index("# nccl-tests version", 10)
    ag = S.FIVE_PERF_8X_H100[start:S.FIVE_PERF_8X_H100.index("# nccl-tests version", start + 10)]
    path = tmp_path / "all_reduce_perf.txt"
    path.write_text(ag)
    (t,) = read_nccl_tests(path).tables
    assert (t.collective, t.collective_source) == ("all_gather", "Collective test starting")
    assert t.notes == ["the file name says all_reduce, the 'Collective test starting' line all_gather: all_gather used"]


def _two_runs_under_one_header(restart: bool) -> str:
    sizes8 = S.SWEEP[:20]
    sizes16 = S.SWEEP[:20] if restart else S.SWEEP[20:28]
    t8 = S.protocol_times_us(np.array(sizes8), 1.75, S.A100_NVLINK_PROTOCOLS, seed=5)
    t16 = S.protocol_times_us(np.array(sizes16), 1.875, S.A100_NVLINK_PROTOCOLS, seed=6)
    return S.HEADER_NEW + S.nccl_table("all_reduce", 8, sizes8, t8) + S.nccl_table("all_reduce", 16, sizes16, t16)


def test_mixed_rank_counts_are_separate_tables_or_refused():
    # sizes start again: a second run pasted under the first one's header -> two tables, each its ranks
    out = parse_nccl_tests(_two_runs_under_one_header(restart=True), source="mix.txt")
    assert [(t.collective, t.ranks, t.ranks_source) for t in out.tables] == [
        ("all_reduce", 8, "busbw/algbw"), ("all_reduce", 16, "busbw/algbw")]
    assert "restart at a smaller size" in out.tables[1].notes[0]
    with pytest.raises(NcclTestsError, match=r"2 all_reduce tables on different rank counts \(8, 16\)"):
        out.select()
    assert out.select("1")[0].ranks == 16
    # sizes go on growing but busbw/algbw jumps from 1.75 to 1.875: refused, naming both lines
    with pytest.raises(NcclTestsError, match=r"mix.txt:2: busbw/algbw varies from 1\.7\d\d \(line \d+\) to 1\.8\d\d"):
        parse_nccl_tests(_two_runs_under_one_header(restart=False), source="mix.txt")


def test_cli_warns_about_a_degenerate_fit_and_keeps_the_warning_in_the_profile(tmp_path):
    from ddlscope.calibrate.profile_file import load_calibration

    log = tmp_path / "runs.log"
    log.write_text(S.FAILED_ALLTOALL_THEN_SENDRECV)
    out = tmp_path / "p.toml"
    # table 0 is the all-to-all run that died after 3 sizes (1-16 KB, busbw at most 0.28 GB/s)
    res = runner.invoke(app, ["calibrate", "--no-bench", "--system", "dgx-a100", "--nccl-tests", f"{log}:pcie:0",
                              "-o", str(out)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    err = " ".join(res.stderr.split())
    assert "using table 0 (line 12): all_to_all on 4 ranks, 3 sizes" in err and "not used: send_recv (table 1)" in err
    assert "ends at line 17 without its footer" in err and "above every measured point (at most 0.275 GB/s)" in err
    (fit,) = load_calibration(out).fits
    assert any("above every measured point" in w for w in fit["warnings"])


def test_nccl_tests_item_syntax():
    from ddlscope.cli.calibrate import split_nccl_item

    assert split_nccl_item("a.txt", "pcie") == ("a.txt", "pcie", None)
    assert split_nccl_item("a.txt:nic", "pcie") == ("a.txt", "nic", None)
    assert split_nccl_item("a.txt:nvlink:all_gather", "pcie") == ("a.txt", "nvlink", "all_gather")
    assert split_nccl_item("a.txt::3", "pcie") == ("a.txt", "pcie", "3")
    assert split_nccl_item("/runs/12:00/a.txt:nvlink", "pcie") == ("/runs/12:00/a.txt", "nvlink", None)
    assert split_nccl_item("C:/runs/a.txt", "pcie") == ("C:/runs/a.txt", "pcie", None)


def test_a_single_size_two_column_table_is_read_but_not_fitted():
    # an old 4-column print of one 16 GB all_gather over 2 hosts: busbw/algbw = 22.16 / 44.32 = 0.5 = (p-1)/p -> p = 2
    text = ("#       size      time   algbw   busbw\n#        (B)      (us)  (GB/s)  (GB/s)\n"
            " 17179869184   387603   44.32   22.16\n# Avg bus bandwidth    : 21.9736\n")
    (t,) = parse_nccl_tests(text).tables
    assert (t.collective, t.ranks, t.rows["count"].to_list()) == ("all_gather", 2, [None])
    with pytest.raises(ValueError, match=r"has 1 size\(s\): alpha and beta need a sweep of sizes"):
        t.fit()


def test_per_rank_sizes_in_an_all_reduce_table_are_refused():
    # every algbw is 2 x size / time (the time column doubled): the old per-rank convention, which
    # all-reduce never had -> refused as misaligned columns, not read as 2 ranks
    sizes = S.SWEEP[18:26]
    t = S.protocol_times_us(np.array(sizes), 1.75, S.A100_NVLINK_PROTOCOLS, seed=7)
    rows = S.nccl_table("all_reduce", 8, sizes, t)
    doubled = "\n".join(
        " ".join(f"{float(x) * 2:.2f}" if i in (5, 9) else x for i, x in enumerate(line.split()))
        for line in rows.splitlines())
    with pytest.raises(NcclTestsError, match="old per-rank sizes of all-gather/reduce-scatter, in a all_reduce table"):
        parse_nccl_tests(S.HEADER_NEW + doubled)


def test_a_mistyped_slot_is_named_not_taken_for_a_file(tmp_path):
    from typer.testing import CliRunner

    from ddlscope.cli.main import app

    path = tmp_path / "ar.txt"
    path.write_text("# nothing\n")
    res = CliRunner().invoke(app, ["calibrate", "--no-bench", "--system", "dgx-a100", "--nccl-tests",
                                   f"{path}:nvlnk", "-o", str(tmp_path / "s.toml")])
    assert res.exit_code == 2
    assert "unknown link slot or table 'nvlnk'" in res.output.replace("\n", "")
