"""Self-contained HTML reports with their figures and tables beside them.

A report folder holds::

    index.html          one self-contained file (figures inlined as PNG, styles inline)
    figures/NAME.png    every figure, also as NAME.svg (for papers)
    tables/NAME.csv     every table, also as NAME.parquet
    summary.json        the headline numbers

Usage::

    rep = HtmlReport("Cluster characterization", subtitle="built-in population (reconstruction)")
    rep.add_text("What this shows ...")
    rep.add_figure("breakdown", fig, "Stacked step-time breakdown per architecture")
    rep.add_table("aggregates", frame, "Mean share per component")
    rep.set_summary({"mean_comm_share": 0.41})
    path = rep.write("out/")
"""

from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from matplotlib.figure import Figure

from ddlscope.report.console import format_value, to_jsonable
from ddlscope.report.figures import close

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em} h2{font-size:1.25em;margin-top:1.8em;border-bottom:1px solid #ddd}
.subtitle{color:#666;margin-top:0} figure{margin:1.2em 0} figcaption{color:#444;font-size:.92em}
img{max-width:100%} table{border-collapse:collapse;font-size:.85em;margin:.6em 0}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:right} th{background:#f4f4f4}
td.s{text-align:left} .note{background:#fff8e1;border-left:4px solid #f0b400;padding:.5em 1em}
code{background:#f4f4f4;padding:0 3px} .kv td{text-align:left}
"""


CSV_MAX_ROWS = 1_000_000
"""Tables longer than this are written as Parquet only (see :meth:`HtmlReport.add_table`)."""


@dataclass
class _Block:
    kind: str
    payload: Any
    caption: str = ""


@dataclass
class HtmlReport:
    """A report being assembled; :meth:`write` renders it into a folder.

    Attributes:
        title: the page title.
        subtitle: one line under the title (input, date, provenance).
    """

    title: str
    subtitle: str = ""
    blocks: list[_Block] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def add_heading(self, text: str) -> None:
        """A section heading."""
        self.blocks.append(_Block("h2", text))

    def add_text(self, text: str) -> None:
        """A paragraph (plain text; blank lines separate paragraphs)."""
        self.blocks.append(_Block("text", text))

    def add_note(self, text: str) -> None:
        """A highlighted note (caveats, reconstructions, what was not attributed)."""
        self.blocks.append(_Block("note", text))

    def add_figure(self, name: str, fig: Figure, caption: str) -> None:
        """A matplotlib figure, written as ``figures/<name>.png`` and ``.svg`` and inlined.

        The figure is rendered at once and closed.
        """
        png, svg = io.BytesIO(), io.BytesIO()
        fig.savefig(png, format="png", dpi=150)
        fig.savefig(svg, format="svg")
        close(fig)
        self.blocks.append(_Block("figure", (name, png.getvalue(), svg.getvalue()), caption))

    def add_table(self, name: str, frame: pl.DataFrame, caption: str, max_rows: int = 40,
                  csv_max_rows: int = CSV_MAX_ROWS) -> None:
        """A table, written whole as ``tables/<name>.parquet`` and, up to ``csv_max_rows`` rows, as
        ``.csv`` too (a CSV of millions of rows is slow to write and to open; the page says when it
        was left out); the page shows the first ``max_rows`` rows."""
        self.blocks.append(_Block("table", (name, frame, max_rows, csv_max_rows), caption))

    def add_key_values(self, pairs: dict[str, Any], caption: str = "") -> None:
        """A two-column table of headline figures."""
        self.blocks.append(_Block("kv", pairs, caption))

    def set_summary(self, summary: dict[str, Any]) -> None:
        """The JSON summary written as ``summary.json``."""
        self.summary = summary

    def write(self, out_dir: str | Path, html_page: bool = True) -> Path:
        """Write the report folder; returns the path of ``index.html`` (of ``summary.json`` when
        ``html_page`` is false: then only ``tables/`` and ``summary.json`` are written, for runs that
        want the numbers without drawing)."""
        out = Path(out_dir)
        (out / "tables").mkdir(parents=True, exist_ok=True)
        if html_page:
            (out / "figures").mkdir(parents=True, exist_ok=True)
        parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
                 f"<style>{_CSS}</style></head><body><h1>{html.escape(self.title)}</h1>"]
        if self.subtitle:
            parts.append(f"<p class='subtitle'>{html.escape(self.subtitle)}</p>")
        for b in self.blocks:
            if b.kind == "h2":
                parts.append(f"<h2>{html.escape(b.payload)}</h2>")
            elif b.kind == "text":
                parts.extend(f"<p>{html.escape(p.strip())}</p>" for p in b.payload.split("\n\n") if p.strip())
            elif b.kind == "note":
                parts.append(f"<p class='note'>{html.escape(b.payload)}</p>")
            elif b.kind == "figure" and html_page:
                name, png, svg = b.payload
                (out / "figures" / f"{name}.png").write_bytes(png)
                (out / "figures" / f"{name}.svg").write_bytes(svg)
                data = base64.b64encode(png).decode()
                parts.append(f"<figure><img alt='{html.escape(name)}' src='data:image/png;base64,{data}'>"
                             f"<figcaption>{html.escape(b.caption)} "
                             f"(<code>figures/{html.escape(name)}.svg</code>)</figcaption></figure>")
            elif b.kind == "table":
                name, frame, max_rows, csv_max_rows = b.payload
                frame.write_parquet(out / "tables" / f"{name}.parquet", compression="lz4")
                if frame.height <= csv_max_rows:
                    flat = frame.with_columns(pl.selectors.enum().cast(pl.String),
                                              pl.selectors.categorical().cast(pl.String))
                    flat.select(pl.exclude(pl.List, pl.Struct, pl.Array)).write_csv(out / "tables" / f"{name}.csv")
                    files = f"tables/{html.escape(name)}.csv"
                else:
                    files = f"tables/{html.escape(name)}.parquet; no CSV for more than {csv_max_rows:,} rows"
                parts.append(f"<p><b>{html.escape(b.caption)}</b> (<code>{files}</code>, {frame.height:,} rows)</p>")
                parts.append(_html_table(frame.head(max_rows)))
                if frame.height > max_rows:
                    parts.append(f"<p><i>first {max_rows} of {frame.height} rows shown</i></p>")
            elif b.kind == "kv":
                if b.caption:
                    parts.append(f"<p><b>{html.escape(b.caption)}</b></p>")
                rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(format_value(v))}</td></tr>"
                               for k, v in b.payload.items())
                parts.append(f"<table class='kv'>{rows}</table>")
        parts.append("</body></html>")
        summary = out / "summary.json"
        summary.write_text(json.dumps(to_jsonable(self.summary), indent=2) + "\n")
        if not html_page:
            return summary
        index = out / "index.html"
        index.write_text("\n".join(parts))
        return index


def _html_table(frame: pl.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in frame.columns)
    numeric = [dt.is_numeric() for dt in frame.dtypes]
    body = []
    for row in frame.iter_rows():
        cells = "".join(
            f"<td{'' if num else ' class=s'}>{html.escape(format_value(v))}</td>"
            for v, num in zip(row, numeric, strict=True)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
