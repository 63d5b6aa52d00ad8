"""Fuzzing the nccl-tests reader: mutated fixtures either give a one-line NcclTestsError naming the
file, or an accounting that balances (every line a used row, a rejected row or a skipped line) and
fits that succeed or refuse with a ValueError. /work/shared/data holds no nccl-tests output (grep
for 'Avg bus bandwidth' finds none), so the fixtures of nccl_samples.py, printed in the real
format, are the seeds."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddlscope.calibrate.nccl_tests import NcclTestsError, fuzz_target, read_nccl_tests
from ddlscope.testing.mutate import TEXT_MUTATIONS, mutate

from . import nccl_samples as S

SEEDS = {
    "a100": S.ALL_REDUCE_8X_A100,
    "old_mpirun": S.ALL_GATHER_OLD_MPIRUN,
    "five": S.FIVE_PERF_8X_H100,
    "old_per_rank": S.OLD_PER_RANK_ALL_GATHER_THEN_ALL_REDUCE,
    "srun": S.SRUN_ALL_GATHER_16X,
    "failed": S.FAILED_ALLTOALL_THEN_SENDRECV,
    "efa": S.ALL_REDUCE_16X_A100_EFA,
}


def drop_field(data: bytes, rng: random.Random) -> bytes:
    """Remove the k-th whitespace-separated field of every line (another release's columns)."""
    k = rng.randrange(12)
    out = []
    for ln in data.split(b"\n"):
        f = ln.split()
        if len(f) > k:
            del f[k]
        out.append(b"  ".join(f))
    return b"\n".join(out)


def prefix_lines(data: bytes, rng: random.Random) -> bytes:
    """Put launcher prefixes (srun -l, mpirun --tag-output) on random lines."""
    pre = rng.choice((b" 0: ", b"12: ", b"[1,0]<stdout>:", b"node7: "))
    return b"\n".join(pre + ln if rng.random() < 0.5 else ln for ln in data.split(b"\n"))


def splice(data: bytes, rng: random.Random) -> bytes:
    """Cut the text at a random line and paste another fixture's tail there (two pastes mixed)."""
    lines = data.split(b"\n")
    other = rng.choice(list(SEEDS.values())).encode().split(b"\n")
    return b"\n".join(lines[: rng.randrange(len(lines) + 1)] + other[rng.randrange(len(other)):])


MUTATIONS = {**TEXT_MUTATIONS, "drop_field": drop_field, "prefix_lines": prefix_lines, "splice": splice}


def _check(tmp_path, data: bytes, what: str) -> None:
    path = tmp_path / "fuzz_perf.txt"
    path.write_bytes(data)
    try:
        acc = fuzz_target(path)
    except NcclTestsError as exc:
        msg = str(exc)
        assert msg.startswith(str(path)) and "\n" not in msg, (what, msg)
        return
    assert acc["balanced"] == 1, (what, acc)
    assert acc["tables"] >= 1 and acc["unfittable_tables"] <= acc["tables"], (what, acc)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(SEEDS)), seed=st.integers(0, 2**32 - 1), rounds=st.integers(1, 3))
def test_mutated_nccl_tests_output_is_read_or_refused_cleanly(tmp_path_factory, name, seed, rounds):
    tmp_path = tmp_path_factory.mktemp("fuzz")
    data = SEEDS[name].encode()
    rng = random.Random(seed)
    what = [name]
    for _ in range(rounds):
        m = rng.choice(sorted(MUTATIONS))
        what.append(m)
        data = MUTATIONS[m](data, rng) if m not in TEXT_MUTATIONS else mutate(data, rng.randrange(2**32), (m,))[0]
    _check(tmp_path, data, what)


def test_fuzz_target_accounts_for_every_line_of_a_clean_file(tmp_path):
    path = tmp_path / "five.txt"
    path.write_text(S.FIVE_PERF_8X_H100)
    acc = fuzz_target(path)
    # 5 runs x (31 rows + 21 other lines) + nothing else; every line counted once
    assert acc["lines"] == len(S.FIVE_PERF_8X_H100.splitlines()) and acc["balanced"] == 1
    assert acc["row_lines_used"] == 5 * 31 and acc["tables"] == 5 and acc["unfittable_tables"] == 0
    assert acc["rejected_rows"] == {} and acc["rejected_tables"] == 0


def test_a_footer_of_minus_inf_or_a_bare_sign_reads_as_no_average(tmp_path):
    # found by benchmarks/fuzz_readers.py (seed 775): "Avg bus bandwidth : -inf" matched the footer's number
    # pattern as "-", and float("-") raised a ValueError naming no file
    for value in ("-inf", "-", "e5"):
        path = tmp_path / "avg.txt"
        path.write_text(S.ALL_REDUCE_8X_A100.replace("bandwidth    : 92.6906 ", f"bandwidth    : {value}"))
        assert f"Avg bus bandwidth    : {value}\n" in path.read_text()
        out = read_nccl_tests(path)
        assert len(out.tables) == 1 and out.tables[0].avg_busbw_gb_s is None
        assert out.accounting()["balanced"] == 1


def test_a_huge_time_rejects_the_table_as_misaligned(tmp_path):
    # found by benchmarks/fuzz_readers.py (seed 641): a time of 1e308 on a row with algbw >= 1 made the median
    # algbw * time / size infinite, and round() of it raised OverflowError; the table is now refused with its
    # reason (algbw is not size/time), in one line naming the file
    lines = S.ALL_REDUCE_8X_A100.splitlines()
    for i, ln in enumerate(lines):  # every precise row (algbw >= 1) timed 1e308
        f = ln.split()
        if len(f) == 13 and f[0].isdigit() and float(f[6]) >= 1.0:
            lines[i] = ln.replace(f" {f[5]} ", " 1e308 ", 1)
    path = tmp_path / "huge.txt"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(NcclTestsError) as exc:
        read_nccl_tests(path)
    # the table's header is line 14; its first precise row (32768 B, algbw 2.30 GB/s) line 22
    assert str(exc.value) == (f"{path}:14: algbw is not size/time (line 22: 2.3 GB/s vs 32768 B / 1e+308 us): "
                              "columns misaligned?")
