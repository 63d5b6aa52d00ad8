"""Figures and the HTML report folder of ``ddlscope trace`` (a :class:`~ddlscope.measure.analysis.TraceAnalysis`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ddlscope.measure.analysis import TraceAnalysis
from ddlscope.measure.timeline import IDLE_CAUSES
from ddlscope.report.figures import (
    COLLECTIVE_COLORS,
    COMPONENT_COLORS,
    COMPONENT_LABELS,
    OKABE_ITO,
    collective_color,
    new_figure,
)
from ddlscope.report.html import HtmlReport
from ddlscope.report.trace_tables import straggler_ms, straggler_sentence

c = pl.col

BREAKDOWN_COMPONENTS: tuple[str, ...] = (
    "compute_bound", "memory_bound", "unclassified", "communication", "device_copy", "data_io", "idle",
)
"""Exclusive components of a window, in stacking order (``communication`` = exposed)."""
_COLUMN = {"communication": "comm_exposed_us"}
IDLE_COLORS: dict[str, str] = {
    "data_loader": "#7A5200", "synchronisation": "#E5B8D3", "kernel_launch": "#7f7f7f",
    "dependency": "#B8AE2C", "unknown": "#c7c7c7",
}
MAX_BARS = 60


def _bar_frame(bd: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """One bar per (rank, iteration), or per rank (means) when there would be too many bars."""
    if bd.height <= MAX_BARS:
        label = pl.format("r{} #{}", c("rank"), c("iteration")) if bd["rank"].n_unique() > 1 \
            else pl.format("#{}", c("iteration"))
        return bd.with_columns(label=label), "iteration"
    means = bd.group_by("rank").agg(pl.exclude("device", "iteration", "warmup", "in_means").mean()).sort("rank")
    return means.with_columns(label=pl.format("rank {}", c("rank"))), "rank (mean over iterations)"


def _stacked(ax, labels: list[str], parts: list[tuple[str, np.ndarray, str]]) -> None:
    bottom = np.zeros(len(labels))
    x = np.arange(len(labels))
    for label, values, color in parts:
        if not np.any(values):
            continue
        ax.bar(x, values, bottom=bottom, color=color, label=label, width=0.8)
        bottom += values
    ax.set_xticks(x, labels, rotation=60 if len(labels) > 12 else 0, ha="right" if len(labels) > 12 else "center",
                  fontsize=8 if len(labels) > 24 else 9)
    pad = max(0.0, (3 - len(labels)) / 2)  # one or two bars stay bar-wide, not panel-wide
    ax.set_xlim(-0.7 - pad, len(labels) - 0.3 + pad)


PartsFn = Callable[[pl.DataFrame], list[tuple[str, np.ndarray, str]]]


def _iteration_bars(a: TraceAnalysis, parts: PartsFn, ylabel: str, title: str, height_in: float) -> Figure:
    """Stacked bars of every window; warm-up iterations (which can be 100x longer than the others)
    in a panel of their own with its own scale, so that every iteration stays readable."""
    bd = a.breakdown
    warm, rest = bd.filter(c("warmup").is_not_null()), bd.filter(c("warmup").is_null())
    if warm.is_empty() or rest.is_empty():
        bars, xlabel = _bar_frame(bd)
        fig, ax = new_figure(max(7.0, 0.22 * bars.height + 4), height_in)
        _stacked(ax, bars["label"].to_list(), parts(bars))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        return fig
    wbars, wlabel = _bar_frame(warm)
    rbars, rlabel = _bar_frame(rest)
    widths = [max(wbars.height, 1) + 1.5, max(rbars.height, 3) + 1]
    fig, (wax, rax) = new_figure(max(8.0, 0.22 * (wbars.height + rbars.height) + 5.5), height_in, 1, 2,
                                 gridspec_kw={"width_ratios": widths})
    kept = bool(warm["in_means"].all())
    _stacked(wax, wbars["label"].to_list(), parts(wbars))
    wax.set_title("warm-up\n(" + ("kept in the means)" if kept else "not in the means)"), fontsize=9)
    wax.set_xlabel(wlabel)
    wax.set_ylabel(ylabel)
    _stacked(rax, rbars["label"].to_list(), parts(rbars))
    rax.set_title("the other iterations (own scale)", fontsize=9)
    rax.set_xlabel(rlabel)
    rax.set_ylabel(ylabel)
    fig.suptitle(title)
    handles = {h.get_label(): h for ax in (wax, rax) for h in ax.get_legend_handles_labels()[0]}
    rax.legend(list(handles.values()), list(handles), loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def _component_parts(bars: pl.DataFrame) -> list[tuple[str, np.ndarray, str]]:
    return [(COMPONENT_LABELS[k], bars[_COLUMN.get(k, f"{k}_us")].to_numpy() / 1e3, COMPONENT_COLORS[k])
            for k in BREAKDOWN_COMPONENTS]


def _idle_parts(bars: pl.DataFrame) -> list[tuple[str, np.ndarray, str]]:
    return [(k.replace("_", " "), bars[f"idle_{k}_us"].to_numpy() / 1e3, IDLE_COLORS[k]) for k in IDLE_CAUSES]


def breakdown_figure(a: TraceAnalysis) -> Figure:
    """Stacked exclusive components of every window, in ms (warm-up iterations in their own panel)."""
    return _iteration_bars(a, _component_parts, "time per iteration (ms)",
                           "Iteration breakdown (exclusive; comm. = exposed)", 4.2)


def idle_figure(a: TraceAnalysis) -> Figure:
    """Idle time of every window by visible cause, in ms (warm-up iterations in their own panel)."""
    return _iteration_bars(a, _idle_parts, "GPU idle time (ms)", "GPU idle time by visible cause", 3.8)


def collectives_figure(a: TraceAnalysis) -> Figure | None:
    """Bus bandwidth of every collective call against its message size (calls with a known size),
    one colour per collective (:data:`~ddlscope.report.figures.COLLECTIVE_COLORS`, as in every figure)."""
    calls = a.calls.filter(c("busbw_gb_s").is_not_null() & (c("size_bytes") > 0))
    if calls.is_empty():
        return None
    fig, ax = new_figure(7.0, 4.2)
    kinds = calls["collective"].unique(maintain_order=True).to_list()
    order = list(COLLECTIVE_COLORS)  # the legend in one order in every figure
    for kind in sorted(kinds, key=lambda k: order.index(k) if k in order else len(order)):
        part = calls.filter(c("collective") == kind)
        ax.scatter(part["size_bytes"].to_numpy(), part["busbw_gb_s"].to_numpy(), s=14, alpha=0.7,
                   color=collective_color(kind), label=kind.replace("_", "-"))
    ax.set_xscale("log")
    positive = calls.filter(c("busbw_gb_s") > 0)["busbw_gb_s"]
    if positive.len() and positive.max() / positive.min() > 100:
        ax.set_yscale("log")
    ax.set_xlabel("message size S (bytes, nccl-tests convention)")
    ax.set_ylabel("achieved bus bandwidth (GB/s)")
    ax.set_title("Collectives: achieved bus bandwidth per call")
    ax.legend(frameon=False)
    return fig


def skew_figure(a: TraceAnalysis) -> Figure | None:
    """Per rank, the quantity that defines the straggler: its own time (step - exposed
    communication, mean per iteration) stacked by component, with the median over ranks; beside
    it, on the same scale, the exposed communication (where the other ranks wait for it)."""
    if a.skew.height < 2:
        return None
    s = a.skew.sort("rank")
    fig, (ax, cax) = new_figure(max(8.0, 0.75 * s.height + 5), 4.2, 1, 2, sharey=True,
                                gridspec_kw={"width_ratios": [1.6, 1.0]})
    parts = [(COMPONENT_LABELS[k], s[_COLUMN.get(k, f"{k}_us")].to_numpy() / 1e3, COMPONENT_COLORS[k])
             for k in BREAKDOWN_COMPONENTS if k != "communication"]
    labels = [str(r) for r in s["rank"].to_list()]
    _stacked(ax, labels, parts)
    own = s["own_us"].to_numpy() / 1e3
    median = float(np.median(own))
    ax.axhline(median, color="#444444", linestyle="--", linewidth=1, label="median rank")
    straggler = a.skew_summary.get("straggler_rank")
    if straggler is not None:
        i = s["rank"].to_list().index(straggler)
        label = f"straggler\n+{straggler_ms(a.skew_summary['straggler_excess_us'])}"  # as the headline says it
        ax.annotate(label, (i, own[i]), xytext=(0, 4), textcoords="offset points", ha="center", va="bottom",
                    fontsize=8)
        ax.set_ylim(0, float(max(own.max(), (s["comm_exposed_us"] / 1e3).max())) * 1.2)
    ax.set_xlabel("rank")
    ax.set_ylabel("mean time per iteration (ms)")
    ax.set_title("own time = step - exposed comm.\n(defines the straggler)", fontsize=9)
    exposed = s["comm_exposed_us"].to_numpy() / 1e3
    cax.bar(np.arange(len(labels)), exposed, color=COMPONENT_COLORS["communication"], width=0.8,
            label=COMPONENT_LABELS["communication"])
    cax.set_xticks(np.arange(len(labels)), labels, fontsize=9)
    cax.set_xlim(-0.7, len(labels) - 0.3)
    cax.set_xlabel("rank")
    cax.set_title("exposed comm.\n(includes waiting for the straggler)", fontsize=9)
    fig.suptitle("Rank skew: the straggler is the rank with the most own time")
    handles = {h.get_label(): h for axis in (ax, cax) for h in axis.get_legend_handles_labels()[0]}
    cax.legend(list(handles.values()), list(handles), loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def whatif_figure(a: TraceAnalysis) -> Figure | None:
    """Predicted mean step time per scenario, with the speedup over the measured baseline."""
    if a.whatif is None:
        return None
    w = a.whatif
    fig, ax = new_figure(9.5, 0.42 * w.height + 1.4)
    y = np.arange(w.height)[::-1]
    pred = w["predicted_step_ms"].to_numpy()
    key = {"baseline": ("measured baseline", "#555555"), True: ("scenario applies", OKABE_ITO["blue"]),
           False: ("scenario does not apply", "#d9d9d9")}
    kinds = ["baseline" if s == "baseline" else bool(ok) for s, ok in zip(w["scenario"], w["applied"], strict=True)]
    ax.barh(y, pred, color=[key[k][1] for k in kinds])
    for yi, p, sp in zip(y, pred, w["speedup"].to_numpy(), strict=True):
        ax.annotate(f"{sp:.2f}x", (p, yi), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set_yticks(y, w["scenario"].to_list())
    ax.set_xlim(0, float(pred.max()) * 1.15)
    ax.set_xlabel("predicted mean step time (ms)")
    ax.set_title("What-if from the measured baseline")
    ax.legend([Patch(facecolor=colour) for _, colour in key.values()], [label for label, _ in key.values()],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def model_check_figure(a: TraceAnalysis) -> Figure | None:
    """Measured and predicted time of each component (mean over ranks), log scale."""
    if a.model_check is None:
        return None
    m = (
        a.model_check.filter(c("predicted_us").is_not_null() & (c("measured_us") > 0))
        .group_by("component", maintain_order=True).agg(c("measured_us").mean(), c("predicted_us").mean())
    )
    if m.is_empty():
        return None
    fig, ax = new_figure(6.5, 3.8)
    x = np.arange(m.height)
    ax.bar(x - 0.2, m["measured_us"].to_numpy() / 1e3, width=0.4, label="measured", color=OKABE_ITO["blue"])
    ax.bar(x + 0.2, m["predicted_us"].to_numpy() / 1e3, width=0.4, label="model", color=OKABE_ITO["orange"])
    names = {"compute_bound": "compute-bound", "data_io": "data I/O", "communication": "communication"}
    ax.set_xticks(x, [names.get(s, s) for s in m["component"].to_list()])
    ax.set_yscale("log")
    ax.set_ylabel("time per iteration (ms, log scale)")
    ax.set_title("Model check: analytical model vs measurement")
    ax.legend(frameon=False)
    return fig


def headline_sentences(a: TraceAnalysis) -> list[str]:
    """The trace report's headline: the mean iteration (ms) over the iterations in the means and
    its exclusive parts as shares of the window (percent), and the straggler when there are ranks."""
    st = a.steady
    if st.height == 0:
        return ["No iteration counts in the means."]
    window = float(st["window_us"].mean())
    parts = [("compute-bound", "compute_bound_us"), ("memory-bound", "memory_bound_us"),
             ("exposed communication", "comm_exposed_us"), ("data I/O", "data_io_us"), ("idle", "idle_us")]
    share = ", ".join(f"{label} {100 * float(st[col].mean()) / window:.1f} %" for label, col in parts if window > 0)
    out = [f"Mean iteration {window / 1e3:.3g} ms over {st.height:,} (rank, iteration) rows of "
           f"{a.ranks.height} rank(s): {share} of the window."]
    if a.skew.height > 1:
        out.append(f"Straggler: {straggler_sentence(a.skew_summary)}.")
    return out


def write_trace_report(a: TraceAnalysis, out_dir: str | Path, sections, summary: dict, title: str) -> Path:
    """Write the report folder (``index.html``, figures, tables, ``summary.json``); returns ``index.html``.

    Args:
        sections: the ``(name, frame, title, caption)`` tables the command printed; written whole.
        summary: the headline values and notes.
    """
    rep = HtmlReport(title, subtitle=", ".join(a.ranks["source"].to_list()[:4])
                     + (" ..." if a.ranks.height > 4 else ""))
    rep.add_heading("Headline")
    rep.add_headline(headline_sentences(a))
    rep.add_note("Windows tile each rank's timeline: the exclusive components plus idle time add up to the "
                 "window, to the nanosecond. Communication is exposed time (no computation kernel running); "
                 "overlapped communication is reported separately.")
    for n in summary.get("notes", []):
        if n.startswith("warm-up:"):
            rep.add_note(n)
    figures = [
        ("breakdown", breakdown_figure(a), "Exclusive breakdown of every iteration window (ms)"),
        ("idle_causes", idle_figure(a), "GPU idle time by visible cause (ms)"),
        ("collectives", collectives_figure(a), "Achieved bus bandwidth of each collective call"),
        ("rank_skew", skew_figure(a), "Per rank, the mean time outside exposed communication by component (the "
         "straggler has the most; its peers wait for it inside the collectives) and, on the same scale, the exposed "
         "communication"),
        ("whatif", whatif_figure(a), "Predicted step time under each scenario, from the measured baseline"),
        ("model_check", model_check_figure(a), "The analytical model's prediction beside the measured time"),
    ]
    for name, fig, caption in figures:
        if fig is not None:
            rep.add_figure(name, fig, caption)
    for name, frame, ttl, caption in sections:
        rep.add_table(name, frame, ttl + (f" ({caption})" if caption else ""))  # " - " read as a minus
    for name, frame in (("breakdown_full", a.breakdown), ("collective_calls", a.calls), ("kernels", a.kernels)):
        rep.add_table(name, frame, f"{name.replace('_', ' ')} (all columns, microseconds)")
    notes = summary.get("notes", [])
    said = {"notes", "straggler"}  # the straggler is a headline sentence: said once
    rep.add_key_values({k: v for k, v in summary.items() if k not in said and not isinstance(v, dict | list)},
                       "Summary")
    if notes:
        rep.add_heading("Notes: what was assumed, inferred or left out")
    for n in notes:
        rep.add_text(n)
    rep.set_summary(summary)
    return rep.write(out_dir)
