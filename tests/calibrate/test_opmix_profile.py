"""Op-mix efficiencies (hand-computed), the System profile file, and the micro-benchmarks' arithmetic."""

from __future__ import annotations

import polars as pl
import pytest
from typer.testing import CliRunner

from ddlscope.calibrate.microbench import bench_matmul, bench_stream, cpu_time_available
from ddlscope.calibrate.opmix import opmix_efficiency
from ddlscope.calibrate.profile_file import Calibration, load_calibration, write_calibration
from ddlscope.cli.main import app
from ddlscope.specs.catalog import CatalogError, builtin_catalog

MATMUL = pl.DataFrame({"precision": ["fp32", "fp32"], "flops": [1e8, 1e9], "intensity_flops_per_byte": [10.0, 100.0],
                       "efficiency": [0.2, 0.8]})
ELEMENTWISE = pl.DataFrame({"bytes": [1e3, 1e6], "bandwidth_gb_s": [1.0, 10.0]})


def _ops(rows: list[tuple[str, str, float, float]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["op", "class_by_type", "flops", "total_bytes"], orient="row").with_columns(
        intensity_flops_per_byte=pl.col("flops") / pl.col("total_bytes"))


def test_opmix_is_the_harmonic_mean_of_per_op_efficiencies():
    ops = _ops([
        ("aten.mm", "compute_bound", 1e9, 1e7),        # 1e9 FLOPs per call -> e 0.8
        ("aten.mm", "compute_bound", 1e8, 1e7),        # 1e8 FLOPs          -> e 0.2
        ("aten.add", "memory_bound", 0.0, 1e6),        # 10 GB/s
        ("aten.relu", "memory_bound", 0.0, 1e3),       # 1 GB/s
    ])
    peak, bmem = 1e11, 20e9
    mix = opmix_efficiency(ops, MATMUL, ELEMENTWISE, peak_flop_per_s=peak, memory_bandwidth_bytes_per_s=bmem)
    # compute: 1e9 / (1e11 * 0.8) + 1e8 / (1e11 * 0.2) = 0.0125 + 0.005 = 0.0175 s
    assert mix.compute_bound_s == pytest.approx(0.0175)
    # eff_compute = 1.1e9 / (1e11 * 0.0175) = 0.628571...
    assert mix.eff_compute == pytest.approx(1.1e9 / (1e11 * 0.0175))
    # memory: 1e6 / 10e9 + 1e3 / 1e9 = 1e-4 + 1e-6 = 1.01e-4 s; eff = 1.001e6 / (20e9 * 1.01e-4)
    assert mix.memory_bound_s == pytest.approx(1.01e-4)
    assert mix.eff_memory == pytest.approx(1.001e6 / (20e9 * 1.01e-4))
    # interpolation in log FLOPs: sqrt(1e8 * 1e9) = 3.162e8 lies half-way -> e = 0.5
    mid = opmix_efficiency(_ops([("aten.mm", "compute_bound", 3.16227766e8, 1e6)]), MATMUL, ELEMENTWISE,
                           peak_flop_per_s=peak, memory_bandwidth_bytes_per_s=bmem)
    assert mid.eff_compute == pytest.approx(0.5, rel=1e-6)
    # read at the intensity instead: 3.162e8 / 1e6 = 316 is past the sweep's end (100) -> clamped 0.8
    by_intensity = opmix_efficiency(_ops([("aten.mm", "compute_bound", 3.16227766e8, 1e6)]), MATMUL, ELEMENTWISE,
                                    peak_flop_per_s=peak, memory_bandwidth_bytes_per_s=bmem, index="intensity")
    assert by_intensity.eff_compute == pytest.approx(0.8)


def test_opmix_convolution_and_family_curves_and_overhead():
    conv = pl.DataFrame({"op": ["convolution", "convolution", "convolution_backward", "convolution_backward"],
                         "intensity_flops_per_byte": [10.0, 100.0, 10.0, 100.0], "efficiency": [0.5, 0.5, 0.25, 0.25]})
    families = pl.DataFrame({"family": ["batch_norm", "batch_norm"], "bytes": [1e3, 1e6], "bandwidth_gb_s": [0.5, 0.5]})
    ops = _ops([
        ("aten.convolution", "compute_bound", 1e9, 1e7),           # conv curve: 0.5
        ("aten.convolution_backward", "compute_bound", 1e9, 1e7),  # backward curve: 0.25
        ("aten.native_batch_norm", "memory_bound", 0.0, 1e6),      # family curve: 0.5 GB/s
        ("aten.add", "memory_bound", 0.0, 1e6),                    # element-wise: 10 GB/s
    ])
    mix = opmix_efficiency(ops, MATMUL, ELEMENTWISE, peak_flop_per_s=1e11, memory_bandwidth_bytes_per_s=20e9,
                           conv=conv, families=families, op_overhead_s=3e-6)
    # 1e9 / (1e11 * 0.5) + 1e9 / (1e11 * 0.25) = 0.02 + 0.04
    assert mix.compute_bound_s == pytest.approx(0.06)
    # 1e6 / 0.5e9 + 1e6 / 10e9 + 4 ops x (3e-6 - t_small), t_small = 1e3 B / 1 GB/s = 1e-6 s
    assert mix.memory_bound_s == pytest.approx(2e-3 + 1e-4 + 4 * 2e-6)


def test_profile_file_round_trip_and_predict_reads_it(tmp_path):
    cat = builtin_catalog()
    entries = {
        "gpu": {"cpu:test": {"peak_tflops": {"fp32": 0.1, "tf32": 0.1, "fp16": 0.1, "bf16": 0.1},
                             "memory_bandwidth_gb_s": 20.0, "memory_gb": 8.0, "source": "test"}},
        "link": {"test-gloo": {"kind": "host", "bandwidth_gb_s": 1.0, "latency_us": 50.0, "source": "test"}},
        "server": {"test-host": {"gpu": "cpu:test", "gpus_per_server": 2, "pcie": "test-gloo",
                                 "gpus_per_pcie_root": 2, "nvlink": "", "nic": "eth-10g", "storage_read_gb_s": 1.0}},
        "system": {"server": "test-host", "name": "test-host", "efficiency": {"compute": 0.5, "pcie": 1.0}},
    }
    cat.add({k: v for k, v in entries.items() if k != "system"}, origin="test")
    cal = Calibration(system=cat.system(**entries["system"]), entries=entries,
                      meta={"host": "h", "op_overhead_s": 1e-6}, tables={"matmul": MATMUL, "elementwise": ELEMENTWISE})
    path = write_calibration(cal, tmp_path / "sys.toml", header="a header line")
    assert path.read_text().startswith("# a header line\n")
    back = load_calibration(path)
    assert back.system == cal.system
    assert back.table("matmul").equals(MATMUL) and back.meta["op_overhead_s"] == 1e-6
    res = CliRunner().invoke(app, ["predict", "--system-file", str(path), "-a", "allreduce_local", "-w", "2",
                                   "--format", "json"])
    assert res.exit_code == 0, res.output
    import json

    row = json.loads(res.output)[0]
    # the example workload: 161 gradient tensors x 2 (p-1) = 322 messages of 50 us + S = 102228128 B
    # (2 (p-1)/p S = S for p = 2) at 1 GB/s
    assert row["pcie_s"] == pytest.approx(322 * 50e-6 + 102_228_128 / 1e9, rel=1e-3)
    assert row["system"] == "test-host"


def test_load_calibration_parses_the_file_once_and_reads_json(tmp_path, monkeypatch):
    import json

    import ddlscope.specs.catalog as catalog_module

    entries = {
        "gpu": {"cpu:test": {"peak_tflops": {"fp32": 0.1, "tf32": 0.1, "fp16": 0.1, "bf16": 0.1},
                             "memory_bandwidth_gb_s": 20.0, "memory_gb": 8.0, "source": "test"}},
        "server": {"test-host": {"gpu": "cpu:test", "gpus_per_server": 2, "pcie": "pcie4-x16",
                                 "gpus_per_pcie_root": 2, "nvlink": "", "nic": "eth-10g", "storage_read_gb_s": 1.0}},
        "system": {"server": "test-host", "name": "test-host", "efficiency": {"compute": 0.5}},
        "calibration": {"host": "h", "op_overhead_s": 2e-6, "matmul": MATMUL.to_dict(as_series=False)},
    }
    path = tmp_path / "sys.json"
    path.write_text(json.dumps(entries))
    reads: list[str] = []
    real = catalog_module.read_toml_or_json
    monkeypatch.setattr(catalog_module, "read_toml_or_json",
                        lambda p, *a, **k: reads.append(str(p)) or real(p, *a, **k))
    cal = load_calibration(path)
    assert reads == [str(path)]  # one read and parse of the user's file per load
    assert cal.system.name == "test-host" and cal.system.efficiency.compute == 0.5
    assert cal.table("matmul").equals(MATMUL) and cal.meta == {"host": "h", "op_overhead_s": 2e-6}
    # the same validation as load_system: errors name the file
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**entries, "system": {"server": "test-host", "gpus": 4}}))
    with pytest.raises(CatalogError, match=r"bad\.json: \[system\] has unknown field\(s\) \['gpus'\]"):
        load_calibration(bad)
    ragged = tmp_path / "ragged.json"
    ragged.write_text(json.dumps({**entries, "calibration": {"matmul": {"n": [1, 2], "time_s": [1.0]}}}))
    with pytest.raises(CatalogError, match=r"ragged\.json: \[calibration\.matmul\]: columns of different lengths"):
        load_calibration(ragged)


def test_microbench_rows_follow_their_definitions():
    mm = bench_matmul({"fp32": 1e11}, sizes=(8, 16), target_s=0.001, repeats=1)
    assert mm["flops"].to_list() == [2 * 8**3, 2 * 16**3]
    assert mm["bytes"].to_list() == [3 * 8 * 8 * 4, 3 * 16 * 16 * 4]
    assert (mm["efficiency"] - mm["flop_per_s"] / 1e11).abs().max() < 1e-12
    st = bench_stream(elements=1 << 16, target_s=0.001, repeats=1)
    # STREAM: copy counts 2 arrays, triad 3 (McCalpin)
    assert st["bytes"].to_list() == [2 * 4 * (1 << 16), 3 * 4 * (1 << 16)]
    assert cpu_time_available()
