"""The fuzz harness (ddlscope.testing.fuzz) and the other modules' readers adapted to it
(ddlscope.testing.fuzz_targets): every slot of benchmarks/fuzz_readers.py is filled, the clean samples
balance with the counts worked out below, and each adapted reader passes a short hypothesis run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ddlscope.testing.fuzz import Accounting, FuzzTarget, Sample, check_target, run_trial, user_error_problem
from ddlscope.testing.fuzz_targets import ADAPTED_TARGETS, nccl_tests_samples, otlp_samples

ROOT = Path(__file__).resolve().parents[2]


def _benchmark():
    spec = importlib.util.spec_from_file_location("fuzz_readers", ROOT / "benchmarks" / "fuzz_readers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_slot_of_the_benchmark_is_filled():
    targets = _benchmark().TARGETS
    assert [n for n, build in targets.items() if build is None] == []
    for name in ("kineto trace", "nccl-tests output", "otlp", "pai-v2020", "system toml", "catalog toml",
                 "scenario toml", "rules csv", "ingest philly", "rpc parquet"):
        assert name in targets


def _clean(name: str, tmp_path: Path) -> dict[str, Accounting]:
    target = ADAPTED_TARGETS[name]()
    out = {}
    for s in target.samples():
        path = tmp_path / s.name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(s.data)
        out[s.name] = target.read(path, s.data)
    return out


def test_clean_samples_balance(tmp_path, shared_data):
    # the smallest shared trace: 1,408 events (measure.fuzz.SMALLEST_TRACE), in both forms and gzip-compressed
    for name in ("kineto trace", "kineto trace gz"):
        assert all(a.balanced and a.rows_in == 1408 for a in _clean(name, tmp_path).values())
    # nccl-tests: 25 sizes (8 B * 2^0..2^24) a table; other lines: version, "starting", parameters, "#",
    # "Using devices", one per rank, "#", 3 header lines, 2 footer lines, "#", "" = 13 + ranks
    nccl = _clean("nccl-tests output", tmp_path)
    assert nccl["all_reduce_perf.txt"] == Accounting(25 + 13 + 8, 25, 13 + 8)
    assert nccl["all_gather_perf.txt"] == Accounting(25 + 13 + 16, 25, 13 + 16)
    assert nccl["two_runs.txt"] == Accounting(46 + 54, 50, 21 + 29)
    # OTLP: 12 RPCs = 12 CLIENT + 12 SERVER spans, all read
    assert set(_clean("otlp", tmp_path).values()) == {Accounting(24, 24, 0)}
    # specs: the docs/model.md examples: 3 scenarios, 1 system, 1 server in the catalog
    assert _clean("scenario toml", tmp_path)["scenarios.toml"] == Accounting(3, 3, 0)
    assert _clean("system toml", tmp_path)["system.toml"] == Accounting(1, 1, 0)
    assert _clean("catalog toml", tmp_path)["catalog.toml"] == Accounting(1, 1, 0)
    assert _clean("rules csv", tmp_path)["rules.csv"] == Accounting(31, 31, 0)  # the 31 built-in kernel rules
    # the measurement table: four rows, all used (a comment and a blank line are no rows)
    assert _clean("measurement table csv", tmp_path)["measurements.csv"] == Accounting(4, 4, 0)


def test_nccl_sample_fits_back_to_its_model(tmp_path):
    """The all_reduce sample is t = 14 us + 1.75 S / 230 GB/s (8 ranks: f = 2 (8 - 1) / 8 = 1.75); the
    reader's fit gets both back (to the 2 decimals nccl-tests prints)."""
    from ddlscope.calibrate.nccl_tests import read_nccl_tests

    path = tmp_path / "ar.txt"
    path.write_bytes(nccl_tests_samples()[0].data)
    fit = read_nccl_tests(path).tables[0].fit()
    assert fit.collective == "all_reduce" and fit.ranks == 8
    assert fit.latency_s == pytest.approx(14e-6, rel=1e-3)
    assert fit.beta_bytes_per_s == pytest.approx(230e9, rel=1e-3)


def test_otlp_samples_are_one_document_and_one_span_a_line():
    doc, lines = otlp_samples()
    assert doc.data.count(b'"resourceSpans"') == 1
    assert lines.data.count(b"\n") == 24 and lines.data.count(b'"resourceSpans"') == 24


def test_user_error_problem():
    assert user_error_problem(ValueError("/x/a.csv: line 3: bad"), ["a.csv"]) is None
    assert user_error_problem(KeyError("a.csv"), ["a.csv"]).startswith("KeyError is not a user error")
    assert "of several lines" in user_error_problem(ValueError("a.csv: x\ny"), ["a.csv"])
    assert "not naming the file" in user_error_problem(ValueError("bad row"), ["a.csv"])
    assert user_error_problem(ValueError("a.csv: internal error: x"), ["a.csv"]).startswith("internal error")


def test_a_sample_in_a_folder_may_be_named_by_its_folder(tmp_path):
    """A reader of folders (PAI 2020) names the folder; a sample ``folder/file`` allows it, a bare one does not."""
    def read(path: Path, data: bytes) -> Accounting:
        raise ValueError(f"{path.parent}: no job table")

    folder = FuzzTarget("f", lambda: [Sample("pai/pai_job_table.csv", b"a\n1\n")], read)
    assert run_trial(folder, 0, tmp_path).outcome == "clean_error"
    bare = FuzzTarget("b", lambda: [Sample("pai_job_table.csv", b"a\n1\n")], read)
    trial = run_trial(bare, 0, tmp_path)
    assert trial.outcome == "failure" and trial.detail.startswith("ValueError not naming the file")


@pytest.mark.parametrize("name", sorted(ADAPTED_TARGETS))
def test_adapted_reader_fuzz(name, tmp_path_factory, shared_data):
    check_target(name, tmp_path_factory.mktemp("fuzz"), max_examples=20)
