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
img{max-width:100%} table{border-collapse:collapse;font-size:.85em;margin:0}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:right;white-space:nowrap} th{background:#f4f4f4}
td.s,th.s{text-align:left} .note{background:#f3f3f3;border-left:4px solid #0072B2;padding:.5em 1em}
code{background:#f4f4f4;padding:0 3px} .kv td{text-align:left}
.headline{background:#eef5fb;border-left:4px solid #0072B2;padding:.4em 1em .4em 1.2em;font-size:1.05em}
.headline li{margin:.25em 0} .study{color:#555}
.tablebox{max-height:30em;overflow:auto;border:1px solid #ccc;margin:.4em 0 1em 0;max-width:100%}
.tablebox thead th{position:sticky;top:0;z-index:1}
table.sortable th{cursor:pointer;user-select:none} table.sortable th::after{content:" \\2195";color:#999}
table.sortable th[aria-sort=ascending]::after{content:" \\2191";color:#000}
table.sortable th[aria-sort=descending]::after{content:" \\2193";color:#000}
.tablefiles{font-size:.85em;color:#444}
"""

_SORT_JS = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('thead th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var down = th.getAttribute('aria-sort') === 'ascending';
      table.querySelectorAll('thead th').forEach(function (h) { h.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', down ? 'descending' : 'ascending');
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var key = function (row) {
        var cell = row.cells[col];
        var v = cell.getAttribute('data-v');
        return v === null ? cell.textContent : (v === '' ? NaN : parseFloat(v));
      };
      rows.sort(function (a, b) {
        var x = key(a), y = key(b), r;
        if (typeof x === 'number' && typeof y === 'number') {
          if (isNaN(x)) { return isNaN(y) ? 0 : 1; }
          if (isNaN(y)) { return -1; }
          r = x - y;
        } else { r = String(x).localeCompare(String(y)); }
        return down ? -r : r;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""
"""Click a column header to sort the table by it (again: the other way); numbers sort by value
(``data-v``), empty cells last. Inline: the report stays one file that needs no network."""

PAGE_ROWS = 500
"""Rows of a table shown on the page, in its scrolling box (at least the caller's ``max_rows``);
every row is in the CSV/Parquet file linked beside it."""


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

    def add_headline(self, sentences: list[str] | tuple[str, ...], studies: list[str | None] | None = None) -> None:
        """The report's headline: one sentence per finding, with units; ``studies`` (same length,
        None where there is none) is the published figure shown beside each ("the PAI study: about
        62 %")."""
        self.blocks.append(_Block("headline", (list(sentences), list(studies or [None] * len(sentences)))))

    def add_key_values(self, pairs: dict[str, Any], caption: str = "", collapsed: bool = False) -> None:
        """A two-column table of figures; ``collapsed``: inside a closed ``<details>`` (the raw
        numbers under a headline in sentences)."""
        self.blocks.append(_Block("kv", (pairs, collapsed), caption))

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
            elif b.kind == "headline":
                sentences, studies = b.payload
                items = "".join(
                    f"<li>{html.escape(t)}" + (f" <span class='study'>({html.escape(st)})</span>" if st else "")
                    + "</li>" for t, st in zip(sentences, studies, strict=True))
                parts.append(f"<section class='headline' id='headline'><ul>{items}</ul></section>")
            elif b.kind == "table":
                name, frame, max_rows, csv_max_rows = b.payload
                frame.write_parquet(out / "tables" / f"{name}.parquet", compression="lz4")
                esc = html.escape(name)
                links = [f"<a href='tables/{esc}.parquet'>Parquet</a>"]
                if frame.height <= csv_max_rows:
                    flat = frame.with_columns(pl.selectors.enum().cast(pl.String),
                                              pl.selectors.categorical().cast(pl.String))
                    flat.select(pl.exclude(pl.List, pl.Struct, pl.Array)).write_csv(out / "tables" / f"{name}.csv")
                    links.insert(0, f"<a href='tables/{esc}.csv'>CSV</a>")
                else:
                    links.append(f"no CSV for more than {csv_max_rows:,} rows")
                shown = min(frame.height, max(max_rows, PAGE_ROWS))
                parts.append(f"<p><b>{html.escape(b.caption)}</b> <span class='tablefiles'>({frame.height:,} rows; "
                             f"every row: {', '.join(links)})</span></p>")
                parts.append(f"<div class='tablebox' id='table-{esc}'>{_html_table(frame.head(shown))}</div>")
                if frame.height > shown:
                    parts.append(f"<p class='tablefiles'><i>the first {shown:,} of {frame.height:,} rows are shown "
                                 f"(sorting sorts these); every row is in {', '.join(links)}</i></p>")
            elif b.kind == "kv":
                pairs, collapsed = b.payload
                rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(format_value(v))}</td></tr>"
                               for k, v in pairs.items())
                table = f"<table class='kv'>{rows}</table>"
                if collapsed:
                    parts.append(f"<details><summary>{html.escape(b.caption or 'the figures')}</summary>{table}"
                                 "</details>")
                else:
                    if b.caption:
                        parts.append(f"<p><b>{html.escape(b.caption)}</b></p>")
                    parts.append(table)
        parts.append(f"<script>{_SORT_JS}</script></body></html>")
        summary = out / "summary.json"
        summary.write_text(json.dumps(to_jsonable(self.summary), indent=2) + "\n")
        if not html_page:
            return summary
        index = out / "index.html"
        index.write_text("\n".join(parts))
        return index


def _html_table(frame: pl.DataFrame) -> str:
    """A sortable HTML table of ``frame``: numeric cells carry their full value in ``data-v`` (the
    shown text is rounded; empty for null/NaN, sorted last)."""
    numeric = [dt.is_numeric() for dt in frame.dtypes]
    head = "".join(f"<th scope='col'{'' if num else ' class=s'}>{html.escape(c)}</th>"
                   for c, num in zip(frame.columns, numeric, strict=True))
    body = []
    for row in frame.iter_rows():
        cells = []
        for v, num in zip(row, numeric, strict=True):
            if num:
                raw = _sort_value(v)
                cells.append(f"<td data-v='{raw}'>{html.escape(format_value(v))}</td>")
            else:
                cells.append(f"<td class=s>{html.escape(format_value(v))}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table class='sortable'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _sort_value(v: Any) -> str:
    """The ``data-v`` of a numeric cell: the full value as JavaScript's ``parseFloat`` reads it
    (``Infinity``), empty for null and NaN."""
    if v is None or (isinstance(v, float) and v != v):
        return ""
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    return repr(v)
