"""Reading nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ``alltoall_perf``...) as
users paste it, and fitting alpha-beta per table.

Accepted: the header (``# nThread 1 nGpus 8 ...``, ``# Using devices``, ``#  Rank  0 Group 0 Pid
... device 0 [0x07] NVIDIA A100-SXM4-80GB``), the column header of old (``size count type redop
time algbw busbw error ...``) and new releases (``... redop root time algbw busbw #wrong ...``,
columns found by name), ``(B) (elements)`` unit lines, out-of-place and in-place columns, ``#``
comments, the ``# Out of bounds values`` and ``# Avg bus bandwidth`` footer, mpirun's
``[1,0]<stdout>:`` prefixes, NCCL ``INFO``/``WARN`` log lines interleaved, text pasted without the
leading ``#``, and several tables one after another (one per column header). ``N/A`` in the
``#wrong`` column (validation off) is accepted.

Errors (:class:`NcclTestsError`, a ``ValueError``) name the source and line: a data row with the
wrong number of columns (a truncated line), a field that is not a number, ``algbw`` that is not
``size / time`` (columns misread), text inside a table that is neither a row nor a comment, no
table at all, or a table without rows. A table without the ``Avg bus bandwidth`` footer is read
but flagged ``complete = False`` (the paste may have been cut at a line boundary).

Units: nccl-tests prints ``size`` in bytes, ``time`` in microseconds, ``algbw`` and ``busbw`` in
GB/s (1e9 bytes/s): ``algbw = size / time``, ``busbw = algbw * f(p)`` (nccl-tests
doc/PERFORMANCE.md; :func:`ddlscope.calibrate.fit.bus_factor`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ddlscope.calibrate.fit import AlphaBetaFit, fit_alpha_beta
from ddlscope.model.collectives import bus_factor, canonical_collective

ROW_COLUMNS: dict[str, str] = {
    "table": "0-based index of the table in the text (one per column header)",
    "line": "1-based line number of the row in the text",
    "size_bytes": "collective size S (bytes; total size for all-gather/reduce-scatter/all-to-all)",
    "count": "elements",
    "type": "element type (float, half, bfloat16...)",
    "redop": "reduction operator (sum, ...; none for data movement)",
    "placement": "out_of_place or in_place",
    "time_us": "average time per collective (us)",
    "algbw_gb_s": "algorithm bandwidth S / t (GB/s)",
    "busbw_gb_s": "bus bandwidth algbw * f(p) (GB/s)",
    "wrong": "#wrong (or error) column; null for N/A",
}
"""Columns of :attr:`NcclTestsTable.rows`."""

_PREFIX = re.compile(r"^\s*\[\d+,\d+\]<std(?:out|err)>:")
_NCCL_LOG = re.compile(r"\bNCCL (?:INFO|WARN|ERROR|TRACE)\b")
_RANK = re.compile(r"^Rank\s+(\d+)\b.*?\bdevice\s+\d+\s+\[[^\]]*\]\s*(.*)$")
_RANK_SIMPLE = re.compile(r"^Rank\s+(\d+)\b")
_AVG = re.compile(r"^Avg bus bandwidth\s*:\s*([0-9.eE+-]+|nan|inf)", re.IGNORECASE)
_PARAMS = re.compile(r"\bnThread\s+(\d+)\s+nGpus\s+(\d+)")
_COLLECTIVE = re.compile(r"Collective test starting:\s*(\S+)")
_NUMERIC = {"size", "count", "time", "algbw", "busbw", "root"}


class NcclTestsError(ValueError):
    """nccl-tests text that cannot be read; the message names the source, the line and the cause."""


@dataclass
class NcclTestsTable:
    """One table of an nccl-tests output.

    Attributes:
        collective: canonical collective (from ``Collective test starting``, the caller, or the
            ``busbw/algbw`` ratio and ``redop``), see :data:`ddlscope.model.collectives.COLLECTIVES`.
        ranks: ``p`` (the caller's, the ``Rank`` lines', or from ``busbw/algbw``).
        rows: one row per size and placement, columns :data:`ROW_COLUMNS`.
        header_line: line number of the column header.
        avg_busbw_gb_s: the footer's ``Avg bus bandwidth`` (GB/s), None if absent.
        complete: whether the footer was seen (a table without it may be cut short).
        devices: device names from the ``Rank`` lines.
        ranks_source: where ``ranks`` came from (``given``, ``rank lines``, ``busbw/algbw``).
        collective_source: where ``collective`` came from.
    """

    collective: str
    ranks: int
    rows: pl.DataFrame
    header_line: int
    avg_busbw_gb_s: float | None
    complete: bool
    devices: list[str] = field(default_factory=list)
    ranks_source: str = ""
    collective_source: str = ""

    def fit(self, placement: str = "out_of_place", min_size_bytes: float = 0.0) -> AlphaBetaFit:
        """Alpha-beta fit of this table's ``time_us`` over sizes >= ``min_size_bytes``
        (:func:`ddlscope.calibrate.fit.fit_alpha_beta`).

        Raises:
            ValueError: an unknown placement, or too few sizes to fit.
        """
        if placement not in ("out_of_place", "in_place"):
            raise ValueError(f"placement: expected out_of_place or in_place, got {placement!r}")
        r = self.rows.filter((pl.col("placement") == placement) & (pl.col("size_bytes") >= min_size_bytes)
                             & (pl.col("time_us") > 0))
        return fit_alpha_beta(r["size_bytes"].to_numpy(), r["time_us"].to_numpy() * 1e-6,
                              collective=self.collective, ranks=self.ranks)


@dataclass
class NcclTestsOutput:
    """All tables of one nccl-tests text, and what was skipped (counted by reason)."""

    source: str
    tables: list[NcclTestsTable]
    skipped: dict[str, int]

    def fits(self, placement: str = "out_of_place", min_size_bytes: float = 0.0) -> pl.DataFrame:
        """One row per table: ``source, table, collective, ranks, ...`` plus the
        :class:`~ddlscope.calibrate.fit.AlphaBetaFit` fields, ``avg_busbw_gb_s`` and ``complete``."""
        rows = []
        for i, t in enumerate(self.tables):
            f = t.fit(placement, min_size_bytes)
            rows.append({"source": self.source, "table": i, **f.as_dict(), "avg_busbw_gb_s": t.avg_busbw_gb_s,
                         "complete": t.complete, "ranks_source": t.ranks_source})
        return pl.DataFrame(rows)


def _header_columns(body: str) -> list[str] | None:
    toks = body.split()
    if {"size", "count", "time", "algbw", "busbw"} <= set(toks):
        return toks
    return None


def _ranks_from_ratio(ratio: float, collective: str | None, redop: str) -> tuple[int, str]:
    """Ranks and collective from the printed ``busbw / algbw`` (see module docstring)."""
    if collective is not None and canonical_collective(collective) in ("broadcast", "reduce", "sendrecv"):
        raise ValueError("busbw equals algbw for this collective: give the number of ranks")
    if collective is None:
        collective = "all_reduce" if (redop not in ("none", "-") and ratio > 1.0 + 1e-3) else (
            "all_gather" if redop in ("none", "-") else "reduce_scatter")
        if abs(ratio - 1.0) < 2e-3:
            raise ValueError("busbw equals algbw (broadcast, reduce or send/receive?): give the collective and ranks")
    c = canonical_collective(collective)
    # all-reduce: r = 2 (p-1)/p -> p = 2 / (2 - r); the others: r = (p-1)/p -> p = 1 / (1 - r)
    p = 2.0 / max(2.0 - ratio, 1e-9) if c == "all_reduce" else 1.0 / max(1.0 - ratio, 1e-9)
    return round(p), c


def parse_nccl_tests(
    text: str,
    *,
    source: str = "<text>",
    collective: str | None = None,
    ranks: int | None = None,
) -> NcclTestsOutput:
    """Parse nccl-tests output ``text`` (see the module docstring for what is accepted).

    Args:
        text: the pasted output.
        source: a name for messages (the file path).
        collective: the collective, when the text does not say (``all_reduce_perf``, ``alltoall``...).
        ranks: the number of ranks, when the text lacks ``Rank`` lines.

    Returns:
        :class:`NcclTestsOutput` with one :class:`NcclTestsTable` per column header.

    Raises:
        NcclTestsError: see the module docstring; the message gives ``source:line``.
    """
    skipped: Counter[str] = Counter()
    tables: list[NcclTestsTable] = []
    state: dict = {"ranks": {}, "devices": {}, "collective": None, "params": None}
    current: dict | None = None

    def close(cur: dict | None) -> None:
        if cur is None:
            return
        if not cur["rows"]:
            raise NcclTestsError(f"{source}:{cur['header_line']}: a table header without any data row "
                                 "(the output is cut short or the run failed)")
        rows = pl.DataFrame(cur["rows"], schema={
            "table": pl.Int64, "line": pl.Int64, "size_bytes": pl.Float64, "count": pl.Int64, "type": pl.String,
            "redop": pl.String, "placement": pl.String, "time_us": pl.Float64, "algbw_gb_s": pl.Float64,
            "busbw_gb_s": pl.Float64, "wrong": pl.Float64,
        }, orient="row")
        coll = collective or cur["collective"]
        coll_src = "given" if collective else ("Collective test starting" if cur["collective"] else "")
        p = ranks
        p_src = "given" if ranks else ""
        if p is None and cur["ranks"]:
            p, p_src = max(cur["ranks"]) + 1, "rank lines"
        big = rows.filter(pl.col("algbw_gb_s") > 0).sort("algbw_gb_s", descending=True).head(3)
        ratio = float((big["busbw_gb_s"] / big["algbw_gb_s"]).median()) if len(big) else float("nan")
        if coll is None or p is None:
            if ratio != ratio:
                raise NcclTestsError(f"{source}:{cur['header_line']}: cannot tell the collective/ranks: every "
                                     "algbw is 0; give --collective and --ranks")
            try:
                p_ratio, c_ratio = _ranks_from_ratio(ratio, coll, rows["redop"][0])
            except ValueError as exc:
                raise NcclTestsError(f"{source}:{cur['header_line']}: {exc}") from None
            if p is None:
                p, p_src = p_ratio, "busbw/algbw"
            if coll is None:
                coll, coll_src = c_ratio, "busbw/algbw and redop"
        coll = canonical_collective(coll)
        if ratio == ratio and p >= 2 and abs(ratio - bus_factor(coll, p)) > 0.02 * bus_factor(coll, p) + 0.01:
            raise NcclTestsError(
                f"{source}:{cur['header_line']}: busbw/algbw = {ratio:.3f} does not match {coll} on {p} ranks "
                f"(expected {bus_factor(coll, p):.3f}); give the right --collective/--ranks")
        tables.append(NcclTestsTable(
            collective=coll, ranks=int(p), rows=rows, header_line=cur["header_line"],
            avg_busbw_gb_s=cur["avg"], complete=cur["avg"] is not None,
            devices=[cur["devices"][k] for k in sorted(cur["devices"])], ranks_source=p_src,
            collective_source=coll_src))

    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = _PREFIX.sub("", raw).rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        if _NCCL_LOG.search(stripped):
            skipped["NCCL log line"] += 1
            continue
        commented = stripped.startswith("#")
        body = stripped.lstrip("#").strip()
        cols = _header_columns(body)
        if cols is not None:
            close(current)
            current = {"cols": cols, "header_line": lineno, "rows": [], "avg": None,
                       "ranks": dict(state["ranks"]), "devices": dict(state["devices"]),
                       "collective": state["collective"], "closed": False}
            state["ranks"], state["devices"], state["collective"] = {}, {}, None
            continue
        if m := _COLLECTIVE.search(body):
            state["collective"] = m.group(1)
            continue
        if m := _AVG.match(body):
            if current is None:
                raise NcclTestsError(f"{source}:{lineno}: 'Avg bus bandwidth' before any table header")
            current["avg"] = float(m.group(1))
            current["closed"] = True
            continue
        if m := _RANK.match(body) or _RANK_SIMPLE.match(body):
            state["ranks"][int(m.group(1))] = True
            if m.re is _RANK:
                state["devices"][int(m.group(1))] = m.group(2).strip()
            continue
        if _PARAMS.search(body):
            state["params"] = body
            skipped["header line"] += 1
            continue
        if commented or body.startswith(("(B)", "out-of-place", "Using devices", "Out of bounds",
                                         "Blocking Enabled", "Collective test concluded")):
            skipped["comment or header line"] += 1
            continue
        toks = body.split()
        if current is None or current["closed"]:
            # text around the tables (shell prompts, ssh warnings, the command line)
            skipped["text outside a table"] += 1
            continue
        if not toks[0].isdigit():
            raise NcclTestsError(
                f"{source}:{lineno}: expected a data row ({' '.join(current['cols'])}) or a '#' comment, "
                f"got {stripped[:80]!r}")
        cols = current["cols"]
        if len(toks) != len(cols):
            raise NcclTestsError(
                f"{source}:{lineno}: expected {len(cols)} columns ({' '.join(cols)}), got {len(toks)}: "
                f"{stripped[:100]!r} (a truncated line?)")
        current["rows"].extend(_data_rows(toks, cols, len(tables), lineno, source))
    close(current)
    if not tables:
        raise NcclTestsError(
            f"{source}: no nccl-tests table found (expected a column header line like "
            "'#       size         count      type   redop    root     time   algbw   busbw #wrong ...')")
    return NcclTestsOutput(source=source, tables=tables, skipped=dict(skipped))


def _data_rows(toks: list[str], cols: list[str], table: int, lineno: int, source: str) -> list[tuple]:
    """The out-of-place and in-place rows of one data line."""
    seen: Counter[str] = Counter()
    groups: list[dict[str, str]] = [{}, {}]
    common: dict[str, str] = {}
    for name, tok in zip(cols, toks, strict=True):
        key = name.lstrip("#")
        if key in ("time", "algbw", "busbw", "wrong", "error"):
            idx = seen[key]
            seen[key] += 1
            if idx > 1:
                raise NcclTestsError(f"{source}:{lineno}: column {name!r} appears more than twice in the header")
            groups[idx]["wrong" if key == "error" else key] = tok
        else:
            common[key] = tok

    def num(name: str, tok: str, integer: bool = False) -> float | int | None:
        if name == "wrong" and tok.upper() in ("N/A", "NA", "-"):
            return None
        try:
            return int(tok) if integer else float(tok)
        except ValueError:
            raise NcclTestsError(f"{source}:{lineno}: column {name!r}: expected a number, got {tok!r}") from None

    size = num("size", common.get("size", ""), integer=True)
    count = num("count", common.get("count", ""), integer=True)
    out = []
    for i, g in enumerate(groups):
        if not g:
            continue
        missing = {"time", "algbw", "busbw"} - set(g)
        if missing:
            raise NcclTestsError(f"{source}:{lineno}: header lacks column(s) {sorted(missing)}")
        t, alg, bus = num("time", g["time"]), num("algbw", g["algbw"]), num("busbw", g["busbw"])
        wrong = num("wrong", g.get("wrong", "N/A"))
        if t is not None and t > 0 and alg is not None and alg >= 1.0:
            expect = size / t / 1e3
            if abs(expect - alg) > 0.02 * alg + 0.02:
                raise NcclTestsError(
                    f"{source}:{lineno}: algbw {alg} GB/s is not size/time = {size} B / {t} us = {expect:.2f} "
                    "GB/s (columns misaligned?)")
        out.append((table, lineno, float(size), count, common.get("type", ""), common.get("redop", "-"),
                    "out_of_place" if i == 0 else "in_place", t, alg, bus, wrong))
    return out


def read_nccl_tests(path: str | Path, *, collective: str | None = None, ranks: int | None = None) -> NcclTestsOutput:
    """Read and parse an nccl-tests output file (:func:`parse_nccl_tests`).

    The collective defaults to the file name's when it names one (``all_gather_perf.txt``).

    Raises:
        NcclTestsError: unreadable file or bad content (naming the file and line).
    """
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise NcclTestsError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if collective is None:
        stem = path.stem.lower()
        for name in ("all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter", "alltoall",
                     "broadcast", "sendrecv"):
            if name in stem:
                collective = name
                break
    return parse_nccl_tests(text, source=str(path), collective=collective, ranks=ranks)
