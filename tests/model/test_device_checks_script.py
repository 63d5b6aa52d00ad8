"""benchmarks/device_checks_compute.py, the prepared GPU run of issue 14: its checks and quotients
refer to each other, the model-side claims its docstring makes hold (the model prices a 267,735-word
and a 267,736-word softmax the same; AMP halves the modelled element-wise time), its nvidia-smi
parser keeps unreadable samples as nulls, and its CPU smoke run writes the table it documents."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dc():
    path = ROOT / "benchmarks" / "device_checks_compute.py"
    spec = importlib.util.spec_from_file_location("device_checks_compute", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("smoke", [False, True])
def test_every_quotient_names_two_checks(dc, smoke):
    checks = dc.step_checks(smoke)
    pairs = dc.quotient_pairs(smoke)
    assert len(pairs) == 6
    for what, a, b in pairs:
        assert a in checks and b in checks and a != b, what
    assert {c.layout for c in checks.values() if c.check == "resnet50"} == {"nchw", "nhwc"}


def test_the_model_prices_an_odd_vocabulary_at_the_misaligned_rate(dc):
    """The vocab_head check measures what the model now assumes: with 267,735 words the projection's
    three GEMMs are misaligned and run at MISALIGNED_GEMM_FLOP_PER_SM_CYCLE x SMs x clock, with
    267,736 at the tensor-core rate; on an H100 SXM5 the odd vocabulary is priced slower by the
    difference of the two rates over the three GEMMs' FLOPs (the one extra word aside)."""
    from ddlscope.model.compute import MISALIGNED_GEMM_FLOP_PER_SM_CYCLE
    from ddlscope.specs.catalog import builtin_catalog

    checks = dc.step_checks(False)
    odd = dc.predict(checks["vocab odd fp16"], "H100-SXM5-80GB")
    aligned = dc.predict(checks["vocab aligned fp16"], "H100-SXM5-80GB")
    gpu = builtin_catalog().gpu("H100-SXM5-80GB")
    held = gpu.sustained_tensor_fraction()
    cap = MISALIGNED_GEMM_FLOP_PER_SM_CYCLE * gpu.sm_count * gpu.boost_clock_mhz * 1e6 * held
    eff = builtin_catalog().efficiency_for(gpu).tensor_gemm_eff
    rate = gpu.peak_tflops.fp16 * 1e12 * held * eff
    assert cap < rate
    from ddlscope.profile import profile_model

    check = checks["vocab odd fp16"]
    traced = profile_model(check.factory, batch_size=check.batch, precision=check.precision).ops
    flops = traced.filter(pl.col("gemm_aligned").eq(False))["flops"].sum()
    assert flops > 0
    expected_ms = flops * (1 / cap - 1 / rate) * 1e3
    assert odd["predicted_ms"] - aligned["predicted_ms"] == pytest.approx(expected_ms, rel=1e-3)


def test_the_model_halves_element_wise_time_with_16_bit_data(dc):
    """8 passes of mul, add, relu over 2^26 elements: memory-bound only; the 16-bit run moves half
    the bytes, so its memory-bound time is about half (the final cast and mean differ)."""
    checks = dc.step_checks(False)
    full = dc.predict(checks["elementwise 32-bit"], "A100-SXM4-80GB")
    half = dc.predict(checks["elementwise 16-bit"], "A100-SXM4-80GB")
    assert full["compute_bound_ms"] == half["compute_bound_ms"] == 0.0
    assert full["memory_bound_ms"] / half["memory_bound_ms"] == pytest.approx(2.0, rel=0.25)


def test_parse_smi_keeps_unreadable_samples_as_nulls(dc):
    text = "1980, 1980, 652.31, 700.00, 61\n[N/A], 1980, 640.1, 700.00, 62\n1755, 1980, 699.9"
    s = dc.parse_smi(text)
    assert s.height == 3
    assert s.row(0) == (1980.0, 1980.0, 652.31, 700.0, 61.0)
    assert s.null_count()["clocks.sm"][0] == 2  # the N/A sample and the cut last line


def test_smoke_run_writes_the_documented_table(dc, tmp_path, capsys):
    dc.main(["--smoke", "--out", str(tmp_path), "--steps", "2", "--warmup", "1",
             "--only", "vocab odd tf32,vocab aligned tf32,elementwise 32-bit"])
    t = pl.read_csv(tmp_path / "steps.csv")
    assert t["key"].to_list() == ["vocab odd tf32", "vocab aligned tf32", "elementwise 32-bit"]
    for col in ("check", "workload", "precision", "layout", "batch", "predicted_ms", "measured_ms", "error",
                "compute_bound_ms", "memory_bound_ms", "host_ms"):
        assert col in t.columns
    assert (t["measured_ms"] > 0).all()
    err = t["predicted_ms"] / t["measured_ms"] - 1
    assert (t["error"] - err).abs().max() < 1e-12
    out = capsys.readouterr().out
    assert "misaligned over aligned vocabulary, TF32" in out and "priced as A100-SXM4-80GB" in out


def test_unknown_only_key_names_the_keys(dc, tmp_path):
    with pytest.raises(SystemExit, match="unknown check"):
        dc.main(["--smoke", "--out", str(tmp_path), "--only", "vocab odd fp17"])


@pytest.mark.parametrize(("argv", "said"), [
    (["--gpu", "NoSuchGPU"], "--gpu: gpu: unknown GPU 'NoSuchGPU'"),
    (["--steps", "0"], "--steps: expected >= 1, got 0"),
    (["--warmup", "-1"], "--warmup: expected >= 0, got -1"),
    (["--only", ""], "--only: no check named"),
])
def test_bad_options_are_one_clear_message(dc, tmp_path, argv, said):
    with pytest.raises(SystemExit, match=re.escape(said)):
        dc.main(["--smoke", "--out", str(tmp_path), *argv])
