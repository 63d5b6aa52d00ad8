"""The characterization report: figures and tables of a :class:`~ddlscope.population.characterize.Characterization`.

Figures (each also written as PNG and SVG):

- ``breakdown``: mean step-time share of each component per architecture, job- and GPU-time-weighted;
- ``comm_share_cdf``: CDF over jobs of the exposed communication share, per architecture;
- ``speedups``: distribution of each scenario's speedup over the jobs it applies to;
- ``bottlenecks``: share of jobs whose bottleneck is each component, per architecture.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from matplotlib.ticker import NullFormatter

from ddlscope.model.step_time import COMPONENTS
from ddlscope.population.characterize import Characterization
from ddlscope.report.figures import ARCH_COLORS, COMPONENT_COLORS, COMPONENT_LABELS, new_figure
from ddlscope.report.html import HtmlReport
from ddlscope.specs.architecture import ARCHITECTURES

c = pl.col
ARCH_ORDER = [*ARCHITECTURES, "all"]


def _jobs(n: int) -> str:
    return f"{n:,} job" + ("" if n == 1 else "s")


def headline_sentences(h: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The three headline findings of a characterization, each ``(sentence, the PAI study's
    figure)``, written once for the console, the HTML report and ``summary.json``. ``h``: the
    headline of :func:`ddlscope.population.characterize.headline_figures` (fractions, ratios, job
    counts); a figure over no job says so instead of ``n/a of 0``. The study's figures are from its
    abstract (DESIGN.md): communication about 62 % of execution time, about 60 % of PS/Worker jobs
    faster on all-reduce over NVLink, about 1.7x from 25 to 100 Gb/s Ethernet."""

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f} %"

    def times(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f}x"

    ps_jobs, net_jobs = h["ps_worker_jobs"], h["network_jobs"]
    ps = (f"{pct(h['ps_worker_sped_up_by_allreduce_port'])} of {_jobs(ps_jobs)}" if ps_jobs
          else "no PS/Worker job in the population")
    net = (f"{times(h['mean_speedup_ethernet_25_to_100'])} over the {_jobs(net_jobs)} using the network"
           if net_jobs else "no job uses the network")
    return (
        (f"average communication share of step time: {pct(h['mean_comm_share'])} job-weighted, "
         f"{pct(h['mean_comm_share_gpu_time'])} GPU-time-weighted", "62 %"),
        (f"PS/Worker jobs sped up by porting to all-reduce over NVLink: {ps}", "60 %"),
        (f"mean speedup of 25 -> 100 Gb/s Ethernet: {net}, "
         f"{times(h['mean_speedup_ethernet_25_to_100_all_jobs'])} over all", "1.7x"),
    )


def _archs(frame: pl.DataFrame) -> list[str]:
    present = set(frame["architecture"].cast(pl.String).to_list())
    return [a for a in ARCH_ORDER if a in present]


def breakdown_figure(shares: pl.DataFrame):
    """Stacked horizontal bars: mean share of each component per architecture, two weightings."""
    fig, axes = new_figure(10.0, 4.2, 1, 2, sharey=True)
    for ax, weight, title in zip(axes, ("jobs", "gpu_time"), ("weighted by job count", "weighted by GPU-time"),
                                 strict=True):
        df = shares.filter(c("weight") == weight)
        archs = _archs(df)[::-1]
        left = np.zeros(len(archs))
        for comp in COMPONENTS:
            # a mean is null where no job of the architecture has a weight (no known GPU time): no bar
            vals = np.array([df.filter(c("architecture") == a)[f"mean_share_{comp}"].fill_null(np.nan).item() * 100
                             for a in archs])
            ax.barh(archs, vals, left=left, color=COMPONENT_COLORS[comp], label=COMPONENT_LABELS[comp])
            left += vals
        for i in np.flatnonzero(np.isnan(left)):
            ax.text(2, i, "no job with a known GPU time", va="center", fontsize=8, color="0.35")
        ax.set_xlim(0, 100)
        ax.set_xlabel("mean share of step time (%)")
        ax.set_title(title)
    axes[0].set_ylabel("training architecture")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=6, frameon=False)
    return fig


def comm_cdf_figure(baseline: pl.DataFrame):
    """CDF over jobs of the exposed communication share, one line per architecture."""
    fig, ax = new_figure(7.0, 4.8)
    for arch in _archs(baseline):
        x = np.sort(baseline.filter(c("architecture") == arch)["share_comm"].to_numpy() * 100)
        n = len(x)
        # the empirical CDF from 0 at the smallest share: a rise at every job, so one job is a visible step
        xs, ys = np.concatenate([x[:1], x]), np.concatenate([[0.0], np.arange(1, n + 1) / n])
        ax.step(xs, ys, where="post", color=ARCH_COLORS.get(arch), label=f"{arch} ({n} job{'s' if n != 1 else ''})")
    ax.set_xlim(-2, 100)  # a little room left of 0, so jobs without communication (a line at 0) show
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("exposed weight/gradient communication (% of step time)")
    ax.set_ylabel("fraction of jobs")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=3, frameon=False)
    return fig


def speedup_figure(results: pl.DataFrame):
    """Box plot per scenario of the speedup over the jobs the scenario applies to (log axis)."""
    scen = [s for s in results["scenario"].cast(pl.String).unique(maintain_order=True) if s != "baseline"]
    data, labels, unapplied = [], [], []
    for s in scen:
        v = results.filter((c("scenario") == s) & c("scenario_applied"))["speedup"].to_numpy()
        name = s if len(s) <= 28 else s[:27] + "…"
        if len(v):
            data.append(v)
            labels.append(f"{name} (n={len(v)})")
        else:
            unapplied.append(name)
    if not data:  # no scenario applies to any job: say so instead of drawing empty boxes
        fig, ax = new_figure(7.0, 2.0)
        ax.axis("off")
        ax.text(0.5, 0.5, "no scenario applies to any job: " + ", ".join(unapplied), ha="center", va="center",
                wrap=True)
        return fig
    fig, ax = new_figure(8.0, 0.45 * len(data) + 1.8)
    ax.boxplot(data, orientation="horizontal", tick_labels=labels, showmeans=True, whis=(5, 95), showfliers=False,
               meanprops={"marker": "D", "markerfacecolor": "white", "markeredgecolor": "black", "markersize": 5})
    ax.axvline(1.0, color="grey", lw=1, ls="--")
    ax.set_xscale("log")
    lo = min(float(np.min(d)) for d in data)
    hi = max(float(np.max(d)) for d in data)
    candidates = (0.5, 0.75, 1, 1.25, 1.5, 2, 3, 4) if hi < 4.5 else (0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128)
    ticks = [t for t in candidates if lo / 1.3 <= t <= hi * 1.3]
    ax.set_xticks(ticks, [f"{t:g}x" for t in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.invert_yaxis()
    ax.set_xlabel("speedup over baseline (log scale)")
    ax.set_title("box: 25-75 %, whiskers: 5-95 %, line: median, diamond: mean", fontsize=9)
    if unapplied:
        fig.text(0.01, 0.005, "applies to no job: " + ", ".join(unapplied), fontsize=8, color="0.35")
    return fig


def bottleneck_figure(bottlenecks: pl.DataFrame):
    """Stacked bars: share of jobs (by count) whose bottleneck is each component, per architecture."""
    df = bottlenecks.filter(c("weight") == "jobs")
    archs = _archs(df)[::-1]
    fig, ax = new_figure(7.5, 4.0)
    left = np.zeros(len(archs))
    for comp in COMPONENTS:
        vals = np.array([
            (df.filter((c("architecture") == a) & (c("bottleneck") == comp))["share"].sum()) * 100 for a in archs
        ])
        ax.barh(archs, vals, left=left, color=COMPONENT_COLORS[comp], label=COMPONENT_LABELS[comp])
        left += vals
    ax.set_xlim(0, 100)
    ax.set_xlabel("jobs whose bottleneck is the component (% of jobs, by count)")
    ax.set_ylabel("training architecture")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=3, frameon=False)
    return fig


def write_characterization_report(
    ch: Characterization,
    out_dir: str | Path,
    *,
    title: str,
    subtitle: str,
    accounting: pl.DataFrame | None = None,
    malformed: pl.DataFrame | None = None,
    extra_summary: Mapping[str, Any] | None = None,
    figures: bool = True,
) -> Path:
    """Write the report folder (``index.html``, ``figures/``, ``tables/``, ``summary.json``).

    With ``figures`` false nothing is drawn: only ``tables/`` and ``summary.json`` are written.

    Args:
        ch: the characterization.
        out_dir: the folder (created).
        title, subtitle: page heading.
        accounting: optional table of how every input job was accounted for (reason, count).
        malformed: optional table of the trace's malformed rows by problem, with file:line examples.
        extra_summary: more entries for ``summary.json``.

    Returns:
        The path of ``index.html`` (of ``summary.json`` without figures).
    """
    rep = HtmlReport(title, subtitle=subtitle)

    def figure(name: str, draw, caption: str) -> None:
        if figures:
            rep.add_figure(name, draw(), caption)

    rep.add_heading("Headline")
    found = headline_sentences(ch.headline)
    rep.add_headline([text[0].upper() + text[1:] for text, _ in found],
                     [f"the PAI study: about {study}" for _, study in found])
    rep.add_key_values(ch.headline, "the headline as numbers (fractions and ratios; job-weighted unless marked "
                       "gpu_time)", collapsed=True)
    for note in ch.notes:
        rep.add_note(note)
    if accounting is not None:
        rep.add_heading("Every job accounted for")
        rep.add_table("accounting", accounting, "Input jobs by outcome")
    if malformed is not None:
        rep.add_table("malformed_rows", malformed, "Malformed rows of the trace (not jobs), with file:line examples")
    rep.add_heading("Where the step time goes")
    figure("breakdown", lambda: breakdown_figure(ch.shares),
           "Mean share of step time per component and architecture (baseline)")
    figure("comm_share_cdf", lambda: comm_cdf_figure(ch.baseline),
           "CDF over jobs of the exposed weight/gradient communication share (baseline)")
    figure("bottlenecks", lambda: bottleneck_figure(ch.bottlenecks), "Bottleneck mix per architecture (baseline)")
    rep.add_table("component_shares", ch.shares, "Mean component shares and communication-share quantiles")
    rep.add_table("bottleneck_mix", ch.bottlenecks, "Share of jobs per bottleneck component")
    rep.add_heading("What the changes buy")
    figure("speedups", lambda: speedup_figure(ch.results), "Speedup of each scenario over the jobs it applies to")
    rep.add_table("scenario_speedups", ch.speedups, "Per scenario and baseline architecture: jobs sped up, speedups")
    rep.add_heading("Per-job results")
    rep.add_table("jobs", ch.per_job(), "Every job: its baseline breakdown and each scenario's speedup", max_rows=20)
    rep.set_summary({**ch.headline, "headline_sentences": [f"{t} (the PAI study: about {st})" for t, st in found],
                     **dict(extra_summary or {}), "notes": ch.notes})
    return rep.write(out_dir, html_page=figures)
