"""What-if from the measured baseline and the model check, on the hand-written trace.

Hardware of the fixture: Tesla V100-SXM2-32GB -> catalog V100-SXM2-32GB in a dgx-1v (NVLink 2:
150 GB/s, alpha 3 us, efficiency 0.85; PCIe 3.0 x16: 15.754 GB/s, alpha 5 us, efficiency 0.8,
2 GPUs per PCIe root). 2 ranks -> allreduce_local. Measured exclusive times (kineto_fixture.py):
iteration 1: compute-bound 20, memory-bound 10, unclassified 4, exposed comm 25, idle 41 (us);
communication busy 30 with 5 overlapped (f = 5/30); one all-reduce of S = 4000 bytes.
iteration 2: compute-bound 20, memory-bound 8, device copy 2, idle 70.
"""

from __future__ import annotations

import math

import polars as pl
import pytest
from kineto_fixture import write_fixture

from ddlscope.measure.analysis import analyze_traces
from ddlscope.report.trace_notes import trace_notes
from ddlscope.specs.scenario import BUILTIN_SCENARIOS, Scenario

V100_FP32, H100_FP32, FP16_V100 = 15.7, 67.0, 125.0  # TFLOP/s (catalog)
V100_MEM, H100_MEM = 900.0, 3350.0  # GB/s (catalog)


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    scenarios = [BUILTIN_SCENARIOS[n] for n in ("gpu-h100", "mixed-precision", "overlap-full", "ethernet-100g")]
    scenarios.append(Scenario(name="no-nvlink", nvlink="none"))
    return analyze_traces([write_fixture(tmp_path_factory.mktemp("wi"))], scenarios=scenarios)


def _pred(a, scenario: str) -> list[float]:
    rows = a.whatif_rows.filter(pl.col("scenario") == scenario).sort("iteration")
    return (rows["step_s"] * 1e6).to_list()


def test_baseline_reproduces_the_measurement(analysis):
    assert _pred(analysis, "baseline") == pytest.approx([100.0, 100.0], abs=1e-9)


def test_newer_gpu_scales_compute_by_peak_and_memory_by_bandwidth(analysis):
    rc, rm = V100_FP32 / H100_FP32, V100_MEM / H100_MEM
    it1 = 20 * rc + 10 * rm + 4 + 25 + 41       # comm unchanged: same links, f * C = 5 hidden
    it2 = 20 * rc + 8 * rm + 2 * rm + 70        # the memset is a device copy: memory bandwidth
    assert _pred(analysis, "gpu-h100") == pytest.approx([it1, it2])
    row = analysis.whatif.filter(pl.col("scenario") == "gpu-h100").row(0, named=True)
    assert row["speedup"] == pytest.approx(200 / (it1 + it2))


def test_mixed_precision(analysis):
    # compute-bound at the FP16 tensor-core peak, memory-bound bytes halved (MIXED_PRECISION_BYTES_FACTOR)
    rc = V100_FP32 / FP16_V100
    assert _pred(analysis, "mixed-precision") == pytest.approx([20 * rc + 5 + 4 + 25 + 41, 20 * rc + 4 + 1 + 70])


def test_full_overlap_hides_communication_behind_computation(analysis):
    # hidden = min(1.0 * 30, 34) = 30 -> no exposed communication in iteration 1
    assert _pred(analysis, "overlap-full") == pytest.approx([34 + 41, 100.0])


def test_nic_does_not_matter_inside_one_server(analysis):
    assert _pred(analysis, "ethernet-100g") == pytest.approx([100.0, 100.0])


def test_removing_nvlink_reprices_the_all_reduce_over_pcie(analysis):
    # ring all-reduce of S = 4000 B on p = 2 GPUs: 2 (p-1)/p S = 4000 B in 2 (p-1) = 2 steps
    # links at their catalog transports' achieved bus bandwidth (issue 15): NVLink2 0.69, PCIe 0.5
    nvlink = 2 * 3e-6 + 4000 / (150e9 * 0.69)
    pcie = 2 * 5e-6 + 4000 / (15.754e9 * 0.5)
    c_new = 30 * pcie / nvlink
    hidden = min(5 / 30 * c_new, 34)
    assert _pred(analysis, "no-nvlink") == pytest.approx([34 + (c_new - hidden) + 41, 100.0])


def test_model_check(analysis):
    mc = {r["component"]: r for r in analysis.model_check.iter_rows(named=True)}
    # aten::mm [[64,128],[128,256]] once in 2 iterations: 2*64*128*256/2 FLOPs per iteration,
    # at the V100's FP32 peak x efficiency 0.6; measured: K1 (20 us) per 2 iterations
    flops = 2 * 64 * 128 * 256 / 2
    assert mc["compute_bound"]["predicted_us"] == pytest.approx(flops / (V100_FP32 * 1e12 * 0.6) * 1e6)
    assert mc["compute_bound"]["measured_us"] == pytest.approx(10.0)
    assert "50.0% of compute-bound kernel time" in mc["compute_bound"]["basis"]
    # 1,000,000 bytes host-to-device per 2 iterations over PCIe 3 (2 GPUs per root, alpha 5 us)
    assert mc["data_io"]["predicted_us"] == pytest.approx((5e-6 + 2 * 500_000 / (15.754e9 * 0.8)) * 1e6)
    assert mc["data_io"]["measured_us"] == pytest.approx(5.0)
    assert mc["data_io"]["error"] == pytest.approx(mc["data_io"]["predicted_us"] / 5.0 - 1)
    assert mc["communication"]["measured_us"] == pytest.approx(15.0)
    # the all-reduce of 4000 B in iteration 1 (2000 B and 0.5 calls per iteration, at least one
    # message): 2 (p-1) = 2 steps x 3 us + 2000 B / (150 GB/s x 0.69) on NVLink2
    comm_us = 2 * 3.0 + 2000 / (150e9 * 0.69) * 1e6
    assert mc["communication"]["predicted_us"] == pytest.approx(comm_us)
    # exposed: measured (25 + 0) / 2 us. The schedule: 2000 B is one bucket (< the 1 MiB first
    # bucket), so nothing hides it: the launch latency (20 us) + the transfer, plus the model's wait
    # for the slowest of 2 ranks: 0.01 sqrt(2 ln 2) x the measured compute (busy 30 + 30 over 2 iterations)
    exposed = mc["exposed_communication"]
    assert exposed["measured_us"] == pytest.approx(12.5)
    compute_us = 30.0
    assert exposed["predicted_us"] == pytest.approx(20.0 + comm_us + 0.01 * (2 * math.log(2)) ** 0.5 * compute_us)
    assert "1 bucket(s)" in exposed["basis"]
    assert "exposed_communication_measured_wait" not in mc  # one rank in the trace: its wait is not measured


def test_unknown_gpu_needs_gpu_option(tmp_path):
    a = analyze_traces([write_fixture(tmp_path, gpu_name="Imaginary GPU 9000")],
                       scenarios=[BUILTIN_SCENARIOS["gpu-h100"]])
    assert a.whatif is None and a.model_check is None
    assert any("not in the catalog" in n for n in trace_notes(a))
    b = analyze_traces([write_fixture(tmp_path, gpu_name="Imaginary GPU 9000")],
                       scenarios=[BUILTIN_SCENARIOS["gpu-h100"]], gpu="V100-SXM2-32GB")
    assert _pred(b, "baseline") == pytest.approx([100.0, 100.0])


def test_whatif_figure_colours_match_its_legend(analysis):
    from matplotlib.colors import to_hex

    from ddlscope.report.figures import close
    from ddlscope.report.trace_report import whatif_figure

    fig = whatif_figure(analysis)
    ax = fig.axes[0]
    w = analysis.whatif
    bar_colours = [to_hex(p.get_facecolor()) for p in ax.patches]  # bars top-down = rows in order
    legend = {t.get_text(): to_hex(h.get_facecolor()) for t, h in
              zip(ax.get_legend().get_texts(), ax.get_legend().legend_handles, strict=True)}
    key = {"baseline": "measured baseline", True: "scenario applies", False: "scenario does not apply"}
    for scenario, applied, colour in zip(w["scenario"], w["applied"], bar_colours, strict=True):
        assert colour == legend[key["baseline" if scenario == "baseline" else applied]], scenario
    assert len(set(legend.values())) == 3  # three distinct colours, each named once
    assert "grey" not in ax.get_title()
    close(fig)


@pytest.mark.parametrize("world_size", [1, 2])
def test_nic_swap_does_not_apply_to_a_single_server_trace(tmp_path, world_size):
    # pai-v100-nvlink-8 has a 25 Gb/s NIC, so ethernet-100g is an upgrade; but a job of 1 or 2
    # ranks on one 8-GPU server sends nothing over a NIC: not applied either way (speedup 1)
    import json

    from kineto_fixture import fixture_trace

    doc = fixture_trace()
    doc["distributedInfo"]["world_size"] = world_size
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc))
    a = analyze_traces([path], scenarios=[BUILTIN_SCENARIOS["ethernet-100g"]], server="pai-v100-nvlink-8")
    row = a.whatif.filter(pl.col("scenario") == "ethernet-100g").row(0, named=True)
    assert (row["applied"], row["speedup"]) == (False, pytest.approx(1.0))
