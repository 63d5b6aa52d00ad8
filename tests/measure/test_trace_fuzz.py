"""Fuzzing the Kineto trace reader (and the analysis after it) and the ``--rules`` CSV reader with
seeded mutations of real files (ddlscope.testing.mutate): every mutated file gives either a clean
one-line error naming the file, or a result whose accounting balances (ddlscope.measure.fuzz)."""

from __future__ import annotations

import gzip
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddlscope.measure.fuzz import USER_ERRORS, check_kineto, check_rules_csv, kineto_samples, rules_csv_sample
from ddlscope.testing.mutate import BINARY_MUTATIONS, mutate

SEEDS = st.integers(min_value=0, max_value=2**32 - 1)
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _clean_error(exc: BaseException, path: Path, what: str) -> None:
    msg = str(exc)
    assert isinstance(exc, USER_ERRORS), f"{what}: {type(exc).__name__} is not a user error: {msg[:300]}"
    assert "\n" not in msg, f"{what}: the message is not one line: {msg[:300]}"
    assert str(path) in msg, f"{what}: the message does not name the file: {msg[:300]}"


def _balanced(result: dict, what: str) -> None:
    assert result["unexplained"] == 0, f"{what}: rows unaccounted for: {result}"
    assert result["rows_in"] == result["used"] + result["rejected"], what
    assert result.get("residual_us", 0.0) < 1e-6, f"{what}: the breakdown does not add up: {result}"


def _try(check, path: Path, what: str) -> str:
    try:
        result = check(path)
    except Exception as exc:  # classified below: a user error, or a failure
        _clean_error(exc, path, what)
        return "error"
    _balanced(result, what)
    return "result"


@pytest.fixture(scope="module")
def samples(shared_data):
    return kineto_samples(shared_data)


def test_clean_samples_balance(samples, tmp_path):
    # the unmutated smallest trace: 1,408 events (SOURCES.md), all accounted for; two iterations
    for name, data in samples.items():
        path = tmp_path / name
        path.write_bytes(data)
        r = check_kineto(path)
        assert (r["rows_in"], r["unexplained"], r["iterations"]) == (1408, 0, 2)
    path = tmp_path / "rules.csv"
    path.write_bytes(rules_csv_sample())
    r = check_rules_csv(path)
    assert r["rows_in"] == r["used"] == 31 and r["unexplained"] == 0  # the 31 [[kernel]] rules of the TOML


@FUZZ
@given(seed=SEEDS, form=st.sampled_from(["pretty.json", "lines.json"]), rounds=st.integers(1, 2))
def test_kineto_reader_fuzz(samples, seed, form, rounds):
    data, applied = mutate(samples[form], seed, rounds=rounds)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / form
        path.write_bytes(data)
        _try(check_kineto, path, f"seed {seed}, {form}, {applied}")


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS)
def test_kineto_reader_fuzz_gzip_damage(samples, seed):
    # the compressed file cut short or with flipped bytes: a clean gzip/JSON error, or a readable trace
    rng = random.Random(seed)
    name = rng.choice(sorted(BINARY_MUTATIONS))
    data = BINARY_MUTATIONS[name](gzip.compress(samples["lines.json"], mtime=0), rng)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json.gz"
        path.write_bytes(data)
        _try(check_kineto, path, f"seed {seed}, {name}")


@FUZZ
@given(seed=SEEDS, rounds=st.integers(1, 3))
def test_rules_csv_fuzz(seed, rounds):
    data, applied = mutate(rules_csv_sample(), seed, rounds=rounds)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rules.csv"
        path.write_bytes(data)
        _try(check_rules_csv, path, f"seed {seed}, {applied}")


def test_rules_csv_invalid_utf8_and_duplicate_column(tmp_path):
    # before: a UnicodeDecodeError naming no file; a header naming a column twice was accepted
    path = tmp_path / "rules.csv"
    path.write_bytes(b"pattern,class,kind\n^volta\xff,compute_bound,gemm\n")
    with pytest.raises(ValueError) as exc:
        check_rules_csv(path)
    assert str(exc.value) == (f"{path}: not valid UTF-8 at byte 26 (line 2): byte 0xff (invalid start byte); "
                              "expected a UTF-8 CSV file")
    path.write_text("pattern,class,class,kind\n^volta,compute_bound,compute_bound,gemm\n")
    with pytest.raises(ValueError, match=r"line 1: column\(s\) class named twice in the header"):
        check_rules_csv(path)
