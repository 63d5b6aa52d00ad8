"""Every shared trace runs; the breakdown adds up to the microsecond; values read from the real files.

Expected numbers come from ../shared/data/hta_traces/SOURCES.md and param_dlrm/SOURCES.md (step
counts and ProfilerStep durations computed there with Python's json module) and from the traces'
own arguments (``In msg nelems``, ``Input Dims``).
"""

from __future__ import annotations

import math
from functools import cache
from types import SimpleNamespace

import polars as pl
import pytest

from ddlscope.measure.analysis import TraceAnalysis, analyze_traces
from ddlscope.measure.iterations import WHOLE_TRACE
from ddlscope.measure.timeline import IDLE_CAUSES
from ddlscope.report.trace_notes import trace_notes

EXCLUSIVE = ["compute_bound_us", "memory_bound_us", "unclassified_us", "comm_exposed_us", "device_copy_us",
             "data_io_us", "idle_us"]

TRACES: dict[str, tuple[str, ...]] = {
    "nccl_data": ("hta_traces/nccl_parser_config/nccl_data.json.gz",),
    "df_index_resolver": ("hta_traces/df_index_resolver/df_index_resolver.json.gz",),
    "negative_queue": ("hta_traces/negative_queue_length_values_check/rank0.json.gz",),
    "trace_diff_control": ("hta_traces/trace_diff/control/control.json.gz",),
    "trace_diff_test": ("hta_traces/trace_diff/test/test.json.gz",),
    "trace_filter": ("hta_traces/trace_filter/sampled_rank-0.json.gz",
                     "hta_traces/trace_filter/sampled_rank-1.json.gz"),
    "alexnet": ("hta_traces/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",),
    "ns_resolution": ("hta_traces/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",),
    "resnet": ("param_dlrm/resnet_kineto.json.gz",),
    "dlrm": ("param_dlrm/dlrm_kineto.tar.gz", "param_dlrm/dlrm_pytorch_et.tar.gz"),
}
# (ranks, iterations per rank, iteration marker)
SHAPE: dict[str, tuple[int, int, str]] = {
    "nccl_data": (1, 3, "ProfilerStep"),
    "df_index_resolver": (1, 5, "ProfilerStep"),
    "negative_queue": (1, 5, "ProfilerStep"),
    "trace_diff_control": (1, 6, "ProfilerStep"),
    "trace_diff_test": (1, 6, "ProfilerStep"),
    "trace_filter": (2, 2, "ProfilerStep"),
    "alexnet": (1, 2, "PARAM"),
    "ns_resolution": (1, 5, "ProfilerStep"),
    "resnet": (1, 30, "DataLoader"),
    "dlrm": (8, 1, "ProfilerStep"),
}


@cache
def _analysis(name: str, root: str) -> TraceAnalysis:
    return analyze_traces([f"{root}/{p}" for p in TRACES[name]])


@pytest.mark.parametrize("name", list(TRACES))
def test_every_shared_trace_adds_up_to_the_microsecond(shared_data, name):
    a = _analysis(name, str(shared_data))
    ranks, iterations, marker = SHAPE[name]
    bd = a.breakdown
    assert a.ranks.height == ranks
    assert bd.height == ranks * iterations
    assert a.ranks["marker"].str.starts_with(marker).all() or marker in a.ranks["marker"][0]
    # window = exclusive components + idle, exactly (integer nanoseconds underneath)
    residual = (bd["window_us"] - bd.select(pl.sum_horizontal(EXCLUSIVE)).to_series()).abs().max()
    assert residual < 1e-6
    causes = bd.select(pl.sum_horizontal([f"idle_{k}_us" for k in IDLE_CAUSES])).to_series()
    assert (bd["idle_us"] - causes).abs().max() < 1e-6
    assert (bd["comm_busy_us"] - bd["comm_exposed_us"] - bd["comm_overlapped_us"]).abs().max() < 1e-6
    # consecutive windows tile the rank's timeline
    gaps = bd.sort("rank", "window_start_us").with_columns(
        _next=pl.col("window_start_us").shift(-1).over("rank"), _end=pl.col("window_start_us") + pl.col("window_us"))
    assert gaps.filter(pl.col("_next").is_not_null()).select((pl.col("_next") - pl.col("_end")).abs().max()).item() in (
        None, 0.0)
    assert a.unclassified.height == 0  # the built-in rules classify every kernel of the shared traces


def test_profiler_step_durations_match_sources(shared_data):
    # SOURCES.md: df_index_resolver ProfilerSteps 345.8 / 365.3 / 346.1 / 344.3 / 336.3 ms
    bd = _analysis("df_index_resolver", str(shared_data)).breakdown
    assert (bd["cpu_step_us"] / 1e3).round(1).to_list() == [345.8, 365.3, 346.1, 344.3, 336.3]
    # windows are the steps' wall-clock spans: the next step starts right after (tens of us later)
    assert ((bd["window_us"] - bd["cpu_step_us"]).head(4) / 1e3).abs().max() < 0.2
    # SOURCES.md: dlrm one ProfilerStep per rank: 14.5 / 19.9 / 13.0 / 19.3 / 18.0 / 17.8 / 13.1 / 12.5 ms
    dlrm = _analysis("dlrm", str(shared_data)).breakdown.sort("rank")
    assert (dlrm["cpu_step_us"] / 1e3).round(1).to_list() == [14.5, 19.9, 13.0, 19.3, 18.0, 17.8, 13.1, 12.5]


def test_collective_sizes_from_the_traces_own_arguments(shared_data):
    # nccl_data: 15 AllReduce + 6 Broadcast kernels (SOURCES.md), sizes from the kernels' args;
    # its record_param_comms broadcast has 'In msg nelems' 53120, dtype Float -> 212,480 bytes
    calls = _analysis("nccl_data", str(shared_data)).calls
    counts = dict(calls.group_by("collective").len().iter_rows())
    assert counts == {"all_reduce": 15, "broadcast": 6}
    assert (calls["size_source"] == "kernel args").all()
    assert 53120 * 4 in calls.filter(pl.col("collective") == "broadcast")["size_bytes"].to_list()
    # negative_queue: SendRecv kernels under nccl:all_to_all annotations are all-to-all; the
    # annotation records Input Dims [[3145728]] float -> 12,582,912 bytes
    nq = _analysis("negative_queue", str(shared_data)).calls
    a2a = nq.filter(pl.col("collective") == "all_to_all")
    assert a2a.height > 0 and 3145728 * 4 in a2a["size_bytes"].to_list()
    assert set(nq["collective"].unique()) >= {"all_to_all", "all_reduce", "reduce_scatter", "all_gather"}
    # _all_gather_base records the local shard [[8192, 64]] float; S = shard x 16 ranks
    assert 8192 * 64 * 4 * 16 in nq.filter(pl.col("collective") == "all_gather")["size_bytes"].to_list()
    # df_index_resolver has no comm args and no shapes: sizes unknown, said so
    df = _analysis("df_index_resolver", str(shared_data))
    assert df.calls["size_bytes"].null_count() == df.calls.height == 2020
    assert any("no message size" in n for n in trace_notes(df))


def test_inferred_iterations_and_whole_trace(shared_data):
    resnet = _analysis("resnet", str(shared_data))
    assert "inferred" in resnet.ranks["marker"][0]
    # 30 DataLoader __next__ annotations (SOURCES.md) -> 30 iterations, numbered 0..29
    assert resnet.breakdown["iteration"].to_list() == list(range(30))
    whole = analyze_traces([f"{shared_data}/{TRACES['resnet'][0]}"], whole_trace=True)
    assert whole.ranks["iteration_rule"][0] == WHOLE_TRACE and whole.breakdown.height == 1
    assert whole.ranks["marker"][0] == "no iteration marker rules (--whole-trace)"


def test_rank_skew_on_dlrm(shared_data):
    a = _analysis("dlrm", str(shared_data))
    s = a.skew.sort("rank")
    own = s["step_us"] - s["comm_exposed_us"]
    assert (own - s["own_us"]).abs().max() < 1e-9
    assert a.skew_summary["straggler_rank"] == s.sort("own_us", descending=True)["rank"][0]
    assert a.skew_summary["slow_component"] in ("compute_bound", "memory_bound", "unclassified", "device_copy",
                                                 "data_io", "idle")


def test_no_device_properties_skips_the_model(shared_data):
    a = _analysis("trace_filter", str(shared_data))
    assert a.hardware.system is None and a.model_check is None
    assert any("--gpu" in n for n in trace_notes(a))
    with_gpu = analyze_traces([f"{shared_data}/{p}" for p in TRACES["trace_filter"]], gpu="A100-SXM4-80GB")
    assert with_gpu.model_check is not None


def _bar_tops(ax) -> dict[float, float]:
    """Height of each stacked bar of ``ax`` (x centre -> top), from the drawn rectangles."""
    tops: dict[float, float] = {}
    for p in ax.patches:
        x = round(p.get_x() + p.get_width() / 2, 6)
        tops[x] = max(tops.get(x, 0.0), p.get_y() + p.get_height())
    return tops


def test_skew_figure_plots_the_quantity_that_defines_the_straggler(shared_data):
    from ddlscope.report.figures import close
    from ddlscope.report.trace_report import skew_figure

    a = _analysis("dlrm", str(shared_data))
    fig = skew_figure(a)
    own_ax, comm_ax = fig.axes[:2]
    s = a.skew.sort("rank")
    tops = _bar_tops(own_ax)
    # the left panel's bars are each rank's own time (step - exposed comm.), so the straggler's is tallest
    assert [tops[float(i)] for i in range(8)] == pytest.approx((s["own_us"] / 1e3).to_list())
    assert max(tops, key=tops.get) == s["rank"].to_list().index(a.skew_summary["straggler_rank"])
    assert [t.get_text() for t in own_ax.texts] == [f"straggler\n+{a.skew_summary['straggler_excess_us'] / 1e3:.3f} ms"]
    assert list(_bar_tops(comm_ax).values()) == pytest.approx((s["comm_exposed_us"] / 1e3).to_list())
    close(fig)


def test_breakdown_figure_puts_warmup_in_its_own_panel(shared_data):
    from ddlscope.report.figures import close
    from ddlscope.report.trace_report import breakdown_figure

    a = _analysis("resnet", str(shared_data))
    fig = breakdown_figure(a)
    warm_ax, rest_ax = fig.axes[:2]
    assert [t.get_text() for t in warm_ax.get_xticklabels()] == ["#0"]
    assert len(rest_ax.get_xticklabels()) == 29
    # each panel has its own scale: the 4.45 s warm-up does not flatten the ~0.16 s iterations
    assert warm_ax.get_ylim()[1] > 4000 > 1000 > rest_ax.get_ylim()[1]
    close(fig)


def _text_boxes(fig) -> list[tuple[str, object]]:
    """The drawn box (display pixels) of every non-empty title and the suptitle of a figure."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [fig._suptitle] if fig._suptitle is not None else []
    texts += [t for ax in fig.axes for t in (ax.title, ax._left_title, ax._right_title)]
    return [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_text()]


@pytest.mark.parametrize("name", ["trace_filter", "dlrm"])
def test_skew_figure_titles_do_not_overlap(shared_data, name):
    from ddlscope.report.figures import close
    from ddlscope.report.trace_report import skew_figure

    fig = skew_figure(_analysis(name, str(shared_data)))
    boxes = _text_boxes(fig)
    assert len(boxes) == 3  # suptitle + one title per panel
    for i, (ta, ba) in enumerate(boxes):
        for tb, bb in boxes[i + 1:]:
            assert not ba.overlaps(bb), f"{ta!r} overlaps {tb!r}"
    close(fig)


def test_model_check_predicts_communication_from_the_calls_with_a_message_size(shared_data):
    # trace_diff/test: 4 of its 64 collective calls carry no message size (SOURCES.md; see the note)
    a = _analysis("trace_diff_test", str(shared_data))
    assert "4 of 64 collective calls have no message size" in " ".join(trace_notes(a))
    row = a.model_check.filter(pl.col("component") == "communication").row(0, named=True)
    assert row["predicted_us"] is not None and row["predicted_us"] > 0
    assert row["basis"].startswith("60 of 64 calls (4 without a message size not predicted")
    # like with like: measured = busy time x (call time of the sized calls / call time of all calls)
    steady = a.breakdown.filter(pl.col("in_means"))
    calls = a.calls.join(steady.select("rank", "iteration"), on=["rank", "iteration"], how="semi")
    share = calls.filter(pl.col("size_bytes").is_not_null())["time_us"].sum() / calls["time_us"].sum()
    assert 0 < share < 1
    assert row["measured_us"] == pytest.approx(steady["comm_busy_us"].mean() * share)
    assert row["error"] == pytest.approx(row["predicted_us"] / row["measured_us"] - 1)


def test_exposed_communication_check_on_the_dlrm_ranks(shared_data):
    # 8 ranks, one iteration each: the measured exposed communication is the breakdown's, and the
    # measured wait of each rank is the slowest rank's own time (step - exposed comm) minus its own
    a = _analysis("dlrm", str(shared_data))
    bd = a.breakdown.sort("rank")
    mc = a.model_check
    model = mc.filter(pl.col("component") == "exposed_communication").sort("rank")
    waited = mc.filter(pl.col("component") == "exposed_communication_measured_wait").sort("rank")
    assert model.height == waited.height == 8
    assert model["measured_us"].to_list() == pytest.approx(bd["comm_exposed_us"].to_list())
    own = bd["window_us"] - bd["comm_exposed_us"]
    slowest = int(own.arg_max())
    wait_us = (own.max() - own).to_list()
    assert wait_us[slowest] == 0.0
    # the two predictions differ by (measured wait - model wait) per rank; the model's wait,
    # 0.01 sqrt(2 ln 8) x the rank's GPU compute, is below 0.01 sqrt(2 ln 8) x its step
    for r in range(8):
        model_wait = wait_us[r] - (waited["predicted_us"][r] - model["predicted_us"][r])
        assert 0 < model_wait < 0.01 * math.sqrt(2 * math.log(8)) * bd["window_us"][r]
        assert f"the measured wait for the slowest rank (its own time - this rank's) {wait_us[r] / 1e3:.3g}" in (
            waited["basis"][r]) or wait_us[r] == 0.0
    # a collective kernel's time includes waiting for the peers: the transfer the links explain is
    # a small part of the measured exposed time here (the check says so, it does not hide it)
    assert (model["predicted_us"] < model["measured_us"]).sum() >= 6


def test_collectives_figure_colours_each_collective_from_the_shared_palette(shared_data, tmp_path):
    from matplotlib.colors import to_hex

    from ddlscope.measure.rules import COLLECTIVES
    from ddlscope.report.calibrate import collectives_figure as calibrate_collectives_figure
    from ddlscope.report.figures import COLLECTIVE_COLORS, OKABE_ITO, close
    from ddlscope.report.trace_report import collectives_figure

    # every kind a trace can name has its colour, one each, and none is the network's red
    assert set(COLLECTIVE_COLORS) == set(COLLECTIVES)
    assert len(set(COLLECTIVE_COLORS.values())) == len(COLLECTIVE_COLORS)
    assert OKABE_ITO["vermillion"] not in COLLECTIVE_COLORS.values()
    a = _analysis("negative_queue", str(shared_data))
    fig = collectives_figure(a)
    ax = fig.axes[0]
    drawn = {coll.get_label(): to_hex(coll.get_facecolor()[0], keep_alpha=False) for coll in ax.collections}
    sized = a.calls.filter(pl.col("busbw_gb_s").is_not_null() & (pl.col("size_bytes") > 0))
    kinds = sized["collective"].unique().to_list()
    assert len(kinds) >= 3  # all-to-all, all-reduce, reduce-scatter, all-gather with known sizes (SOURCES.md)
    assert drawn == {k.replace("_", "-"): COLLECTIVE_COLORS[k].lower() for k in kinds}
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [k.replace("_", "-") for k in COLLECTIVE_COLORS if k in kinds]  # the palette's order
    fig.savefig(tmp_path / "collectives.png")
    close(fig)

    # the calibration's collectives figure gives all-reduce the same colour
    measured = pl.DataFrame({"collective": ["all_reduce", "all_reduce"], "size_bytes": [1024, 4096],
                             "time_s": [1e-5, 2e-5], "ranks": [2, 2]})
    cal = SimpleNamespace(fits=[], table=lambda name: measured)
    cfig = calibrate_collectives_figure(cal)
    line = next(ln for ln in cfig.axes[0].lines if ln.get_label() == "all_reduce measured")
    assert to_hex(line.get_color()) == COLLECTIVE_COLORS["all_reduce"].lower() == drawn["all-reduce"]
    close(cfig)


def test_collective_colours_mean_one_thing_each():
    # each collective its own colour, none the network's red, none a trace idle cause's colour
    from ddlscope.report.figures import COLLECTIVE_COLORS, COMPONENT_COLORS
    from ddlscope.report.trace_report import IDLE_COLORS

    colours = [v.lower() for v in COLLECTIVE_COLORS.values()]
    assert len(set(colours)) == len(colours)
    assert COMPONENT_COLORS["network"].lower() not in colours
    assert not {v.lower() for v in IDLE_COLORS.values()} & set(colours)
