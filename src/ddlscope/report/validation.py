"""The validation report: the model against measurements, in sentences, one figure and tables.

Figure (PNG and SVG): ``predicted_vs_measured``, each prediction against its measurement on log
axes, one colour per group (the table's ``source``, or the component of a run on this machine),
with the ``y = x`` line and the +-25 % band (``error = predicted / measured - 1``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from ddlscope.report.figures import FIT, OKABE_ITO, new_figure, no_data
from ddlscope.report.html import HtmlReport

GROUP_COLORS: tuple[str, ...] = tuple(OKABE_ITO[k] for k in ("blue", "orange", "bluish_green", "reddish_purple",
                                                             "sky_blue", "black", "yellow"))
"""Colours of the groups in order (Okabe-Ito without vermillion, the network's red)."""


def headline_sentences(rows: pl.DataFrame, measured: str, predicted: str, group: str | None) -> list[str]:
    """``N predictions: median |error| X %, mean Y %, bias Z %`` and the same per group
    (``error = predicted / measured - 1``, over the rows that have both)."""
    both = rows.filter(pl.col(measured).is_not_null() & pl.col(predicted).is_not_null() & (pl.col(measured) > 0))
    if both.height == 0:
        return ["No row has both a measurement and a prediction."]
    err = both[predicted] / both[measured] - 1

    def line(e: pl.Series, what: str) -> str:
        return (f"{what}: {e.len():,} prediction(s), median |error| {100 * e.abs().median():.1f} %, mean |error| "
                f"{100 * e.abs().mean():.1f} %, bias (mean error) {100 * e.mean():+.1f} %.")

    out = [line(err, "All")]
    if group is not None and group in both.columns:
        with_err = both.with_columns(__e=err)
        for name, part in with_err.group_by(group, maintain_order=True):
            out.append(line(part["__e"], str(name[0])))
    return out


def predicted_figure(rows: pl.DataFrame, measured: str, predicted: str, group: str | None, unit: str):
    """Predicted against measured, log-log, the y = x line and the +-25 % band."""
    fig, ax = new_figure(6.5, 5.2)
    both = rows.filter(pl.col(measured).is_not_null() & pl.col(predicted).is_not_null() & (pl.col(measured) > 0)
                       & (pl.col(predicted) > 0))
    if both.height == 0:
        no_data(ax, "no row has both a measurement and a prediction")
        return fig
    groups = both[group].cast(pl.String).unique(maintain_order=True).to_list() if group in both.columns else [None]
    for i, name in enumerate(groups):
        part = both if name is None else both.filter(pl.col(group).cast(pl.String) == name)
        ax.plot(part[measured], part[predicted], "o", ms=4, alpha=0.75, color=GROUP_COLORS[i % len(GROUP_COLORS)],
                label=f"{name} ({part.height})" if name is not None else None)
    lo = float(min(both[measured].min(), both[predicted].min())) / 1.3
    hi = float(max(both[measured].max(), both[predicted].max())) * 1.3
    xs = np.geomspace(lo, hi, 20)
    ax.plot(xs, xs, "-", color=FIT, lw=1, label="predicted = measured")
    ax.fill_between(xs, xs * 0.75, xs * 1.25, color="#999999", alpha=0.2, lw=0, label="within 25 %")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel(f"measured ({unit}, log scale)")
    ax.set_ylabel(f"predicted ({unit}, log scale)")
    ax.legend(loc="upper left", frameon=False, fontsize=8)
    return fig


def write_validation_report(
    rows: pl.DataFrame,
    summary: pl.DataFrame,
    out_dir: str | Path,
    *,
    title: str,
    subtitle: str,
    measured: str = "measured",
    predicted: str = "predicted",
    group: str | None = "source",
    unit: str | None = None,
    notes: Sequence[str] = (),
    extra_tables: Sequence[tuple[str, pl.DataFrame, str]] = (),
) -> Path:
    """Write the validation report folder (``index.html``, ``figures/``, ``tables/``,
    ``summary.json``); returns the path of ``index.html``.

    Args:
        rows: one row per prediction, with ``measured`` and ``predicted`` columns (same unit).
        summary: the error statistics table (MAPE and the like) shown beside.
        group: the column whose values get a colour each (None: one colour).
        unit: the unit of ``measured``/``predicted`` for the axes (None: the rows'
            ``throughput_unit`` values, e.g. ``img/s``, else "the table's quantity").
        notes: the protocol and what was left out.
        extra_tables: more tables after the summary, each (name, frame, caption); written to
            ``tables/<name>.csv`` and into ``summary.json`` under its name.
    """
    if unit is None:
        units = (rows["throughput_unit"].drop_nulls().unique(maintain_order=True).to_list()
                 if "throughput_unit" in rows.columns else [])
        unit = (", ".join(map(str, units[:3])) + (", ..." if len(units) > 3 else "")) if units \
            else "the table's quantity"
    rep = HtmlReport(title, subtitle=subtitle)
    sentences = headline_sentences(rows, measured, predicted, group)
    rep.add_heading("Headline")
    rep.add_headline(sentences)
    for note in notes:
        rep.add_note(note)
    rep.add_figure("predicted_vs_measured", predicted_figure(rows, measured, predicted, group, unit),
                   "Each prediction against its measurement; the band is +-25 %")
    rep.add_table("summary", summary, "Error per group (error = predicted / measured - 1)")
    for name, frame, caption in extra_tables:
        rep.add_table(name, frame, caption)
    rep.add_table("rows", rows, "Every prediction")
    rep.set_summary({"headline_sentences": sentences, "summary": summary.to_dicts(), "notes": list(notes),
                     **{name: frame.to_dicts() for name, frame, _ in extra_tables}})
    return rep.write(out_dir)
