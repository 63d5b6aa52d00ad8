"""The alpha-beta fit and the nccl-tests reader."""

from __future__ import annotations

import numpy as np
import pytest

from ddlscope.calibrate.fit import fit_alpha_beta
from ddlscope.calibrate.nccl_tests import NcclTestsError, parse_nccl_tests

from .nccl_samples import ALL_GATHER_OLD_MPIRUN, ALL_REDUCE_8X_A100


def test_fit_recovers_alpha_beta_exactly_from_noise_free_timings():
    # ring all-reduce on 4 ranks: 2(p-1) = 6 steps of alpha = 5 us, busbw factor 2*3/4 = 1.5,
    # beta = 12.5 GB/s: t = 6 * 5e-6 + 1.5 S / 12.5e9
    sizes = np.array([8.0, 1e3, 1e5, 1e6, 1e7, 1e8])
    t = 6 * 5e-6 + 1.5 * sizes / 12.5e9
    f = fit_alpha_beta(sizes, t, collective="all_reduce", ranks=4)
    assert f.steps == 6
    assert f.alpha_s == pytest.approx(5e-6, rel=1e-9)
    assert f.beta_bytes_per_s == pytest.approx(12.5e9, rel=1e-9)
    assert f.latency_s == pytest.approx(30e-6, rel=1e-9)
    assert f.max_rel_residual < 1e-9
    # all-to-all on 8 ranks: 7 steps, factor 7/8; alpha 2 us, beta 3 GB/s
    sizes = np.geomspace(1e3, 1e9, 13)
    t = 7 * 2e-6 + 7 / 8 * sizes / 3e9
    f = fit_alpha_beta(sizes, t, collective="alltoall_perf", ranks=8)
    assert (f.collective, f.steps) == ("all_to_all", 7)
    assert f.alpha_s == pytest.approx(2e-6, rel=1e-9) and f.bandwidth_gb_s == pytest.approx(3.0, rel=1e-9)


def test_fit_rejects_sizes_without_bandwidth_term():
    with pytest.raises(ValueError, match="do not grow with size"):
        fit_alpha_beta([1e3, 1e4, 1e5], [2e-5, 2e-5, 1.9e-5], ranks=2)
    with pytest.raises(ValueError, match="2 distinct sizes"):
        fit_alpha_beta([1e3, 1e3], [1e-5, 1e-5], ranks=2)
    with pytest.raises(ValueError, match="moves nothing"):
        fit_alpha_beta([1e3, 1e4], [1e-5, 2e-5], ranks=1)


def test_pasted_all_reduce_perf_fits_within_5_percent_of_hand_values():
    out = parse_nccl_tests(ALL_REDUCE_8X_A100, source="ar.txt")
    (tab,) = out.tables
    assert (tab.collective, tab.ranks, tab.ranks_source) == ("all_reduce", 8, "rank lines")
    assert tab.devices[0] == "NVIDIA A100-SXM4-80GB" and tab.complete and tab.avg_busbw_gb_s == 92.6906
    assert tab.rows.height == 32 and set(tab.rows["placement"]) == {"out_of_place", "in_place"}
    f = tab.fit()
    # by hand, out-of-place rows: the bus bandwidth is what the largest sizes approach, the mean busbw
    # of the last three rows (235.13 + 229.91 + 233.52) / 3 = 232.85 GB/s; the latency is the time of
    # the smallest sizes, (14.00 + 13.96 + 13.94 + 14.01 + 13.95) / 5 = 13.972 us for 2 (8-1) = 14
    # ring steps: alpha = 13.972 / 14 = 0.998 us.
    assert f.steps == 14
    assert f.bandwidth_gb_s == pytest.approx(232.85, rel=0.05)
    assert f.latency_us == pytest.approx(13.972 / 14, rel=0.05)
    assert f.latency_s * 1e6 == pytest.approx(13.972, rel=0.05)


def test_old_format_with_mpirun_prefixes_and_nccl_logs():
    out = parse_nccl_tests(ALL_GATHER_OLD_MPIRUN, source="ag.txt")
    (tab,) = out.tables
    # no rank lines, no "Collective test starting": busbw/algbw = 9.94/13.25 = 0.75 = (p-1)/p -> p = 4,
    # redop column absent -> data movement: all_gather
    assert (tab.collective, tab.ranks, tab.ranks_source) == ("all_gather", 4, "busbw/algbw")
    assert out.skipped["NCCL log line"] == 2 and out.skipped["text outside a table"] == 1
    assert out.accounting()["balanced"] == 1
    f = tab.fit()
    # the rows are t = 30 us + 0.75 S / 10 GB/s to the printed digits: 3 steps of 10 us
    assert f.bandwidth_gb_s == pytest.approx(10.0, rel=1e-3)
    assert f.latency_us == pytest.approx(10.0, rel=1e-2)


def test_collective_given_and_contradicting_ratio_is_an_error():
    with pytest.raises(NcclTestsError, match=r"busbw/algbw = 1\.750 does not match all_gather on 8 ranks"):
        parse_nccl_tests(ALL_REDUCE_8X_A100, collective="all_gather")


def test_truncated_line_is_counted_and_named_not_fatal():
    lines = ALL_REDUCE_8X_A100.splitlines()
    row = next(i for i, x in enumerate(lines) if x.strip().startswith("134217728"))
    cut = "\n".join([*lines[:row], lines[row][:60]])
    out = parse_nccl_tests(cut, source="ar.txt")
    # the cut last line is one rejected row, named by its line; the 12 rows before it are the table
    assert out.rejected_rows == {"fewer fields than the header (a truncated line?)": 1}
    assert out.notes == [f"ar.txt:{row + 1}: 1 row(s) not read: fewer fields than the header (a truncated line?)"]
    (tab,) = out.tables
    assert tab.rows.height == 2 * 12 and not tab.complete
    assert out.accounting()["balanced"] == 1 and out.accounting()["lines"] == row + 1


def test_truncated_before_the_footer_is_read_but_flagged():
    lines = ALL_REDUCE_8X_A100.splitlines()
    cut = "\n".join(lines[: next(i for i, x in enumerate(lines) if "Out of bounds" in x)])
    (tab,) = parse_nccl_tests(cut).tables
    assert not tab.complete and tab.avg_busbw_gb_s is None and tab.rows.height == 32


def test_garbage_gets_a_clear_error_or_a_counted_rejection_with_the_line():
    with pytest.raises(NcclTestsError, match="no nccl-tests table found"):
        parse_nccl_tests("hello\nworld\n", source="x.txt")
    lines = ALL_REDUCE_8X_A100.splitlines()
    row = next(i for i, x in enumerate(lines) if x.strip().startswith("8192 "))
    bad = lines.copy()
    bad[row] = "Segmentation fault (core dumped)"
    # the run stopped there: the rows before it (8 B-2 KB) all have algbw < 1 GB/s, too coarse to tell
    # anything; the table is refused, naming its header line
    with pytest.raises(NcclTestsError, match=r"x\.txt:14: cannot tell the collective: every algbw is below 1 GB/s"):
        parse_nccl_tests("\n".join(bad), source="x.txt")
    out = parse_nccl_tests("\n".join(bad), source="x.txt", collective="all_reduce", ranks=8)
    assert out.skipped["text ending a table"] == 1 and "ends at line 21" in out.tables[0].notes[0]
    bad = lines.copy()
    bad[row] = bad[row].replace("14.13", "14.x3")
    out = parse_nccl_tests("\n".join(bad))
    assert out.notes == [f"<text>:{row + 1}: 1 row(s) not read: column 'time' is not a number"]
    assert out.tables[0].rows.height == 30
    bad = lines.copy()  # a size that does not match its time and algbw: columns misread, the table refused
    bad[row + 4] = bad[row + 4].replace("2097152 ", "4097152 ", 1)
    with pytest.raises(NcclTestsError, match=rf":14: algbw is not size/time on 1 row\(s\), first line {row + 5}"):
        parse_nccl_tests("\n".join(bad))
    header_only = "\n".join(lines[: next(i for i, x in enumerate(lines) if "(B)" in x) + 1])
    with pytest.raises(NcclTestsError, match="a table header without any readable data row"):
        parse_nccl_tests(header_only)


def test_two_tables_and_no_hash_paste():
    no_hash = "\n".join(x.lstrip("#") for x in ALL_REDUCE_8X_A100.splitlines())
    out = parse_nccl_tests(no_hash + "\n" + ALL_GATHER_OLD_MPIRUN)
    assert [t.collective for t in out.tables] == ["all_reduce", "all_gather"]
    fits = out.fits()
    assert fits["collective"].to_list() == ["all_reduce", "all_gather"]
    assert fits["ranks"].to_list() == [8, 4]
