"""The calibration report: what ``ddlscope calibrate`` measured, in sentences, figures and tables.

Figures (each also PNG and SVG):

- ``efficiency``: matmul (per precision) and 3x3 convolution efficiency against the device's peak,
  by arithmetic intensity (FLOPs per byte), the roofline's x axis;
- ``collectives``: each measured collective's time against its size, with the alpha-beta fit
  ``t = steps x alpha + f(p) S / beta`` drawn through it (nccl-tests' bus-bandwidth convention).

:func:`summary_tables` are also the tables the console prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ddlscope.model.collectives import bus_factor
from ddlscope.report.figures import FIT, OKABE_ITO, collective_color, new_figure, no_data
from ddlscope.report.html import HtmlReport

PRECISION_COLORS = {"fp32": OKABE_ITO["blue"], "tf32": OKABE_ITO["sky_blue"], "bf16": OKABE_ITO["orange"],
                    "fp16": OKABE_ITO["bluish_green"]}
"""One colour per matmul precision."""


def summary_tables(cal: Any) -> dict[str, pl.DataFrame]:
    """The calibration's tables, titled: matmul and convolution efficiency, STREAM, element-wise,
    alpha-beta fits (``alpha_us``, ``busbw_gb_s``: beta is a bus bandwidth, as nccl-tests names it)."""
    out: dict[str, pl.DataFrame] = {}
    mm = cal.table("matmul")
    if not mm.is_empty():
        out["matmul efficiency vs peak"] = mm.select(
            "precision", "n", "intensity_flops_per_byte", (pl.col("flop_per_s") / 1e9).alias("gflop_per_s"),
            (pl.col("peak_flop_per_s") / 1e9).alias("peak_gflop_per_s"), "efficiency")
    conv = cal.table("conv")
    if not conv.is_empty():
        out["3x3 convolution (batch 8, 16 x 16) efficiency vs peak"] = conv.select(
            "op", "channels", "intensity_flops_per_byte", (pl.col("flops") / pl.col("time_s") / 1e9).alias(
                "gflop_per_s"), "efficiency")
    st = cal.table("stream")
    if not st.is_empty():
        out["STREAM (McCalpin), FP32"] = st.select("kernel", "array_bytes", "bandwidth_gb_s")
    ew = cal.table("elementwise")
    if not ew.is_empty():
        out["element-wise, allocating, cold inputs"] = ew.pivot(on="op", index="elements",
                                                                values="bandwidth_gb_s").rename(
            {"add": "add_gb_s", "relu": "relu_gb_s"})
    if cal.fits:
        # beta is a bus bandwidth (f(p) S bytes cross each rank's link): nccl-tests' busbw, named as it names it
        out["alpha-beta fits (t = steps x alpha + f(p) S / beta; beta as nccl-tests' busbw)"] = pl.DataFrame([
            {"origin": f.get("origin", ""), "slot": f.get("slot", ""), "collective": f["collective"],
             "ranks": f["ranks"], "steps": f["steps"], "alpha_us": f["latency_us"],
             "busbw_gb_s": f["bandwidth_gb_s"], "rms_rel_residual": f["rms_rel_residual"],
             "sizes": f["points"]} for f in cal.fits])
    return out


def headline_sentences(cal: Any) -> list[str]:
    """The calibration in sentences with units: the device and its peak, the best matmul
    efficiency, STREAM triad, the per-op overhead, each fitted link."""
    s = cal.system
    out = [f"{s.gpu.name}: peak {s.gpu.peak_tflops.fp32 * 1e3:,.1f} GFLOP/s FP32 "
           f"({cal.meta.get('peak_source', s.gpu.source)}), memory {s.gpu.memory_bandwidth_gb_s:,.1f} GB/s."]
    mm = cal.table("matmul")
    if not mm.is_empty():
        best = mm.sort("efficiency", descending=True).row(0, named=True)
        out.append(f"Matmul reaches {100 * best['efficiency']:.0f} % of the {best['precision']} peak at n = "
                   f"{best['n']} ({best['intensity_flops_per_byte']:.0f} FLOP/byte); the model's compute "
                   f"efficiency: {s.efficiency.compute:.3g}.")
    st = cal.table("stream")
    if not st.is_empty():
        triad = st.filter(pl.col("kernel") == "triad")
        if triad.height:
            out.append(f"STREAM triad: {triad['bandwidth_gb_s'].max():,.1f} GB/s.")
    if cal.meta.get("op_overhead_s") is not None:
        out.append(f"Per-op framework overhead: {cal.meta['op_overhead_s'] * 1e6:.2f} µs per ATen op.")
    for f in cal.fits:
        out.append(f"{f['collective'].replace('_', '-')} on {f['ranks']} ranks ({f.get('origin', '')}): alpha "
                   f"{f['latency_us']:.3g} µs per step, beta {f['bandwidth_gb_s']:.3g} GB/s bus bandwidth "
                   f"(rms relative residual {f['rms_rel_residual']:.2g}).")
    return out


def efficiency_figure(cal: Any):
    """Matmul (per precision) and convolution efficiency against arithmetic intensity."""
    fig, ax = new_figure(7.5, 4.2)
    mm, conv = cal.table("matmul"), cal.table("conv")
    if mm.is_empty() and conv.is_empty():
        no_data(ax, "no matmul or convolution measured")
        return fig
    for prec in mm["precision"].unique(maintain_order=True).to_list() if not mm.is_empty() else []:
        part = mm.filter(pl.col("precision") == prec).sort("intensity_flops_per_byte")
        ax.plot(part["intensity_flops_per_byte"], 100 * part["efficiency"], "o-", ms=4,
                color=PRECISION_COLORS.get(prec, "#555555"), label=f"matmul {prec}")
    if not conv.is_empty():
        for op, marker in zip(conv["op"].unique(maintain_order=True).to_list(), "s^v<>", strict=False):
            part = conv.filter(pl.col("op") == op).sort("intensity_flops_per_byte")
            ax.plot(part["intensity_flops_per_byte"], 100 * part["efficiency"], marker, ls="--", ms=5,
                    color="#555555", label=f"conv {op}")
    ax.set_xscale("log")
    ax.set_ylim(0, 105)
    ax.set_xlabel("arithmetic intensity (FLOP per byte, log scale)")
    ax.set_ylabel("achieved share of the peak (%)")
    ax.legend(loc="upper left", frameon=False)
    return fig


def collectives_figure(cal: Any):
    """Measured collective time against size (log-log) with each alpha-beta fit drawn through it."""
    fig, ax = new_figure(7.5, 4.2)
    coll = cal.table("collectives")
    if coll.is_empty():
        no_data(ax, "no collective measured")
        return fig
    fits = {(f["collective"], f["ranks"]): f for f in cal.fits if f.get("slot") == "measured"}
    for name in coll["collective"].unique(maintain_order=True).to_list():
        part = coll.filter(pl.col("collective") == name).sort("size_bytes")
        colour = collective_color(name)
        ax.plot(part["size_bytes"], part["time_s"] * 1e6, "o", ms=4, color=colour, label=f"{name} measured")
        fit = fits.get((name, int(part["ranks"][0])))
        if fit:
            sizes = np.geomspace(float(part["size_bytes"].min()), float(part["size_bytes"].max()), 50)
            t = fit["steps"] * fit["alpha_s"] + bus_factor(name, fit["ranks"]) * sizes / fit["beta_bytes_per_s"]
            ax.plot(sizes, t * 1e6, "-", lw=1, color=colour)
    ax.plot([], [], "-", color=FIT, lw=1, label="alpha-beta fit (line per collective)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes, log scale)")
    ax.set_ylabel("time per collective (µs, log scale)")
    ax.legend(loc="upper left", frameon=False, fontsize=8)
    return fig


def write_calibration_report(cal: Any, out_dir: str | Path, *, title: str = "ddlscope calibrate") -> Path:
    """Write the calibration report folder (``index.html``, ``figures/``, ``tables/``,
    ``summary.json``); returns the path of ``index.html``."""
    rep = HtmlReport(title, subtitle=f"{cal.system.name} on {cal.meta.get('host', '?')} at "
                     f"{cal.meta.get('created', '?')}")
    rep.add_heading("Headline")
    rep.add_headline(headline_sentences(cal))
    for note in cal.meta.get("notes", []) or []:
        rep.add_note(str(note))
    rep.add_heading("Compute")
    rep.add_figure("efficiency", efficiency_figure(cal), "Matmul and convolution efficiency against the device's "
                   "peak, by arithmetic intensity")
    rep.add_heading("Communication")
    rep.add_figure("collectives", collectives_figure(cal), "Measured collective times and their alpha-beta fits")
    rep.add_heading("Tables")
    for i, (name, frame) in enumerate(summary_tables(cal).items()):
        rep.add_table(f"table_{i}", frame, name)
    for name, frame in cal.tables.items():
        rep.add_table(f"measured_{name}", frame, f"every measurement: {name}")
    rep.set_summary({"system": cal.system.name, "headline_sentences": headline_sentences(cal),
                     "meta": cal.meta, "fits": cal.fits})
    return rep.write(out_dir)
