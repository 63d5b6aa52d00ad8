"""A real (tiny) calibration of this machine, and `ddlscope calibrate` with nccl-tests files."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ddlscope.calibrate.api import CalibrationPlan, run_calibration
from ddlscope.calibrate.profile_file import load_calibration, write_calibration
from ddlscope.cli.main import app

from .nccl_samples import ALL_REDUCE_8X_A100

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_calibration():
    plan = CalibrationPlan(matmul_sizes=(16, 64), conv_channels=(8,), elementwise_elements=(256, 4096),
                           family_elements=(4096,), collective_sizes=(1024, 1 << 22), target_s=0.002, ranks=2)
    steps = []
    cal = run_calibration(plan, progress=lambda task, done, total: steps.append((task, done, total)))
    return cal, steps


def test_tiny_calibration_builds_a_valid_cpu_system(tiny_calibration, tmp_path):
    cal, steps = tiny_calibration
    s = cal.system
    assert s.pcie.kind == "host" and s.nvlink is None and s.gpus_per_server >= 2
    # the link is the all-reduce fit: per-step latency = intercept / 2 (p-1), beta = bus bandwidth
    (ar,) = [f for f in cal.fits if f["collective"] == "all_reduce"]
    assert ar["steps"] == 2 and s.pcie.latency_us == pytest.approx(ar["latency_us"])
    assert s.pcie.bandwidth_gb_s == pytest.approx(ar["bandwidth_gb_s"])
    assert {f["collective"] for f in cal.fits} == {"all_reduce", "all_gather", "all_to_all"}
    mm = cal.table("matmul")
    # each row is scored against its own precision's peak (a CPU with AVX512_BF16 has a BF16 peak of
    # twice its FP32 one, device.py), and that peak is the one the System carries for the precision
    assert set(mm["precision"]) <= {"fp32", "bf16"} and "fp32" in set(mm["precision"])
    for prec, rows in mm.group_by("precision"):
        system_peak = getattr(s.gpu.peak_tflops, prec[0]) * 1e12
        assert rows["peak_flop_per_s"].to_list() == pytest.approx([system_peak] * rows.height, rel=1e-12)
        assert (rows["flop_per_s"] / system_peak - rows["efficiency"]).abs().max() < 1e-9
    assert mm["efficiency"].max() <= 1.0 + 1e-9
    assert s.gpu.memory_bandwidth_gb_s >= cal.table("stream")["bandwidth_gb_s"].max() - 1e-9
    assert 0 < s.efficiency.compute <= 1 and 0 < s.efficiency.memory <= 1
    assert {t for t, _, _ in steps} >= {"matmul", "stream", "element-wise", "gloo collectives x 2"}
    assert cal.meta["clock"] in ("cpu", "wall") and cal.meta["op_overhead_s"] > 0
    path = write_calibration(cal, tmp_path / "me.toml")
    assert load_calibration(path).system == s


def test_calibrate_cli_applies_nccl_tests_to_a_catalog_server(tmp_path):
    log = tmp_path / "all_reduce_perf.txt"
    log.write_text(ALL_REDUCE_8X_A100)
    out = tmp_path / "dgx.toml"
    res = runner.invoke(app, ["calibrate", "--no-bench", "--system", "dgx-a100", "--nccl-tests", f"{log}:nvlink",
                              "-o", str(out), "--format", "json"])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)
    (fit,) = payload["fits"]
    assert "using table 0 (line 14): all_reduce on 8 ranks, 16 sizes" in res.stderr
    assert fit["collective"] == "all_reduce" and fit["ranks"] == 8 and fit["slot"] == "nvlink"
    res = runner.invoke(app, ["predict", "--system-file", str(out), "-a", "allreduce_local", "-w", "8",
                              "--format", "json"])
    assert res.exit_code == 0, res.output
    row = json.loads(res.output)[0]
    # the fitted link replaces NVLink: beta in bytes/s and alpha in seconds, efficiency 1
    assert row["nvlink_bandwidth_bytes_per_s"] == pytest.approx(fit["bandwidth_gb_s"] * 1e9)
    assert row["nvlink_latency_s"] == pytest.approx(fit["latency_us"] * 1e-6)
    assert row["eff_nvlink"] == 1.0 and row["gpu"] == "A100-SXM4-80GB"


def test_calibrate_cli_table_says_not_measured_instead_of_none(tmp_path):
    log = tmp_path / "all_reduce_perf.txt"
    log.write_text(ALL_REDUCE_8X_A100)
    res = runner.invoke(app, ["calibrate", "--no-bench", "--system", "dgx-a100", "--nccl-tests", f"{log}:nvlink",
                              "-o", str(tmp_path / "dgx.toml")], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    lines = {line.split("│")[1].strip(): line.split("│")[2].strip()
             for line in res.output.splitlines() if line.count("│") >= 3}
    assert lines["per-op overhead"] == "not measured" and lines["clock"] == "not measured"
    assert "None" not in res.output
    # the fit's beta is a bus bandwidth: named as nccl-tests names it, with alpha beside it
    # the fit table's header (the first; its lines may break at underscores): each column's name whole
    lines = res.output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("alpha-beta fits"))
    header = [line.split("┃")[1:-1] for line in lines[start + 1:start + 8] if line.startswith("┃")]
    names = ["".join(part.strip() for part in col) for col in zip(*header, strict=True)]
    assert names[5:7] == ["alpha_us", "busbw_gb_s"] and "bandwidth_gb_s" not in names
    fit = next(line for line in res.output.splitlines() if "│ nvlink │ all_reduce │" in line)
    assert fit.split("│")[6].strip() == "1.007" and fit.split("│")[7].strip() == "233.1"


def test_calibrate_cli_errors_name_the_line(tmp_path):
    lines = ALL_REDUCE_8X_A100.splitlines()
    row = next(i for i, x in enumerate(lines) if x.strip().startswith("134217728")) + 1
    bad = tmp_path / "x.txt"
    # a row that cannot be read is left out, counted and named; the rest of the table is used
    bad.write_text(ALL_REDUCE_8X_A100.replace("   134217728      33554432", "   134217728      zz"))
    res = runner.invoke(app, ["calibrate", "--no-bench", "--system", "dgx-a100", "--nccl-tests", str(bad),
                              "-o", str(tmp_path / "x.toml")])
    assert res.exit_code == 0, res.output
    assert f"x.txt:{row}: 1 row(s) not read: column 'count' is not a number" in " ".join(res.stderr.split())
    # a file with no usable table is refused, naming the file and line
    bad.write_text("\n".join(lines[: next(i for i, x in enumerate(lines) if "(B)" in x) + 1]))
    res = runner.invoke(app, ["calibrate", "--no-bench", "--system", "dgx-a100", "--nccl-tests", str(bad)])
    assert res.exit_code == 2
    assert "x.txt:14: a table header without any readable data row" in " ".join(res.output.split())
    res = runner.invoke(app, ["calibrate", "--no-bench"])
    assert res.exit_code == 2 and "nothing to do" in res.output


def test_calibrate_cli_warns_on_stderr_about_a_table_cut_short(tmp_path):
    cut = tmp_path / "cut.txt"
    cut.write_text("\n".join(line for line in ALL_REDUCE_8X_A100.splitlines()
                             if "Avg bus bandwidth" not in line))
    res = runner.invoke(app, ["calibrate", "--no-bench", "--system", "dgx-a100", "--nccl-tests", str(cut),
                              "-o", str(tmp_path / "out.toml"), "--format", "json"])
    assert res.exit_code == 0, res.output
    # the warning goes to the shared stderr console; stdout stays one JSON document
    assert "has no 'Avg bus bandwidth' footer" in res.stderr and "cut.txt: table 0" in res.stderr
    assert json.loads(res.stdout)["fits"][0]["collective"] == "all_reduce"


def test_calibrate_cli_rejects_bad_plans_before_measuring(tmp_path, monkeypatch):
    import ddlscope.calibrate.api as api

    monkeypatch.setattr(api, "_measure_device", lambda *a, **k: pytest.fail("measured before checking the plan"))
    out = str(tmp_path / "x.toml")
    for args, message in ((["--clock", "gpu"], "clock: expected auto, wall or cpu, got 'gpu'"),
                          (["--processes", "1"], "processes: a collective needs >= 2 processes, got 1"),
                          (["--precision", "fp64"], "precision: expected some of fp32, tf32, fp16, bf16, got 'fp64'"),
                          (["--device", "tpu"], "device: expected cpu or cuda, got 'tpu'"),
                          (["--cores-per-device", "0"], "cores_per_device: expected >= 1, got 0"),
                          (["--clock", "cpu", "--cores-per-device", "2"], "the cpu clock (thread CPU time) measures")):
        res = runner.invoke(app, ["calibrate", "--quick", "-o", out, *args])
        assert res.exit_code == 2 and message in res.output, (args, res.output)
