"""Reading nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ``alltoall_perf``...) as
users paste it, and fitting alpha-beta per table.

Accepted: the header (``# nccl-tests version ...``, ``# Collective test starting: all_reduce_perf``,
``# nThread 1 nGpus 8 ...``, ``# Using devices``, ``#  Rank  0 Group 0 Pid ... device 0 [0x07]
NVIDIA A100-SXM4-80GB``), the column header of old (``size count type redop time algbw busbw
error ...``, or ``size time algbw busbw``) and new releases (``... redop root time algbw busbw
#wrong ...``): the columns are found **by name**, ``(B) (elements)`` unit lines, out-of-place and
in-place columns, ``#`` comments, the ``# Out of bounds values`` and ``# Avg bus bandwidth`` footer
(``: 31.42`` or ``: 31.42 GB/s``), launcher prefixes (mpirun's ``[1,0]<stdout>:``, ``srun -l``'s
``0: ``), NCCL ``INFO``/``WARN`` log lines interleaved, text pasted without the leading ``#``, ``N/A``
in ``#wrong``, and **several tables** in one file (the output of several ``*_perf`` binaries pasted
together: one table per column header; a table whose sizes start again from a smaller one without
a new header is read as a new table).

Old nccl-tests releases printed all-gather and reduce-scatter sizes *per rank* with ``algbw = p *
size / time``; a table whose every ``algbw`` is the same integer ``p >= 2`` times ``size / time`` is
read in that convention (``size_bytes`` becomes the total ``p * size``, and ``p`` the ranks).

Nothing is dropped silently; what is not used is counted by reason:

- lines that are not table rows (``skipped``: comments, log lines, text around the tables, a
  ``...`` elision line, text that ends a table such as a failed run's error message);
- data rows that cannot be read (``rejected_rows``: fewer or more fields than the header, a field
  that is not a number or not finite, ``algbw`` that is not ``size / time``), with the first line
  of each reason in ``notes``;
- tables that cannot be interpreted (``rejected_tables``: no readable row, busbw 0 on every row (a
  run on one rank moves nothing over a link), ``busbw / algbw`` that varies inside the table (rows
  of runs on different rank counts under one header), a ratio that contradicts the collective and
  ranks, broadcast/reduce without a rank count).

:class:`NcclTestsError` (a ``ValueError``) is raised, naming the source and line, only when no
table at all can be used. :meth:`NcclTestsOutput.accounting` balances: every line of the text is a
row used, a row rejected, or a skipped line (:func:`fuzz_target`).

The collective of a table: the ``# Collective test starting:`` line above it wins; then the
caller's (``--collective``, or the file name); then ``busbw / algbw`` and ``redop``. Ranks: the
``Rank`` lines, then the caller's, then ``busbw / algbw``.

Units: nccl-tests prints ``size`` in bytes, ``time`` in microseconds, ``algbw`` and ``busbw`` in
GB/s (1e9 bytes/s): ``algbw = size / time``, ``busbw = algbw * f(p)`` (nccl-tests
doc/PERFORMANCE.md; :func:`ddlscope.model.collectives.bus_factor`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ddlscope.calibrate.fit import AlphaBetaFit, fit_alpha_beta
from ddlscope.model.collectives import bus_factor, canonical_collective

ROW_COLUMNS: dict[str, str] = {
    "table": "index of the table in the text (one per column header, in order)",
    "line": "1-based line number of the row in the text",
    "size_bytes": "collective size S (bytes; total size for all-gather/reduce-scatter/all-to-all)",
    "count": "elements (null where the header has no count column)",
    "type": "element type (float, half, bfloat16...)",
    "redop": "reduction operator (sum, ...; none for data movement)",
    "placement": "out_of_place or in_place",
    "time_us": "average time per collective (us)",
    "algbw_gb_s": "algorithm bandwidth S / t (GB/s)",
    "busbw_gb_s": "bus bandwidth algbw * f(p) (GB/s)",
    "wrong": "#wrong (or error) column; null for N/A",
}
"""Columns of :attr:`NcclTestsTable.rows`."""

_SCHEMA = {
    "table": pl.Int64, "line": pl.Int64, "size_bytes": pl.Float64, "count": pl.Int64, "type": pl.String,
    "redop": pl.String, "placement": pl.String, "time_us": pl.Float64, "algbw_gb_s": pl.Float64,
    "busbw_gb_s": pl.Float64, "wrong": pl.Float64,
}
_PREFIXES = (
    re.compile(r"^\s*\[\d+,\d+\]<std(?:out|err)>:"),  # mpirun --tag-output
    re.compile(r"^\s*\d+:(?=\s|$)"),  # srun -l
)
_NCCL_LOG = re.compile(r"\bNCCL (?:INFO|WARN|ERROR|TRACE)\b")
_RANK = re.compile(r"^Rank\s+(\d+)\b.*?\bdevice\s+\d+\s+\[[^\]]*\]\s*(.*)$")
_RANK_SIMPLE = re.compile(r"^Rank\s+(\d+)\b")
_AVG = re.compile(r"^Avg bus bandwidth\s*:\s*([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?|[+-]?nan|[+-]?inf)",
                  re.IGNORECASE)
_PARAMS = re.compile(r"\bnThread\s+(\d+)\s+nGpus\s+(\d+)")
_COLLECTIVE = re.compile(r"Collective test starting:\s*(\S+)")
_ELISION = re.compile(r"^(?:\.{3,}|…)\s*$|^\.{3,}\s|\s\.{3,}$")
_TIME_NAMES = ("time", "algbw", "busbw", "wrong", "error")
_OTHER_INFO = ("(B)", "out-of-place", "Using devices", "Out of bounds", "Blocking Enabled",
               "Collective test concluded", "nccl-tests version", "Errors with asterisks")
RATIO_TOLERANCE = 0.03
"""Largest relative spread of ``busbw / algbw`` inside one table (printed to 2 decimals, rows with
``algbw >= 1`` GB/s); beyond it the rows are of runs on different rank counts."""


class NcclTestsError(ValueError):
    """nccl-tests text that cannot be used; the message names the source, the line and the cause."""


@dataclass
class NcclTestsTable:
    """One table of an nccl-tests output.

    Attributes:
        collective: canonical collective (see the module docstring for the order of sources),
            :data:`ddlscope.model.collectives.COLLECTIVES`.
        ranks: ``p``.
        rows: one row per size and placement, columns :data:`ROW_COLUMNS`.
        header_line: line number of the column header.
        avg_busbw_gb_s: the footer's ``Avg bus bandwidth`` (GB/s), None if absent.
        complete: whether the footer was seen (a table without it may be cut short, or its run failed).
        devices: device names from the ``Rank`` lines.
        ranks_source: where ``ranks`` came from (``rank lines``, ``given``, ``busbw/algbw``...).
        collective_source: where ``collective`` came from (``Collective test starting``, ``given``,
            ``file name``, ``busbw/algbw and redop``).
        index: the table's number in the text (tables rejected count too), for
            :meth:`NcclTestsOutput.select`.
        size_convention: ``total`` or ``per rank (old nccl-tests)`` (module docstring).
        notes: what the reader decided about this table, one sentence each.
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
    index: int = 0
    size_convention: str = "total"
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line: ``table 0 (line 14): all_reduce on 8 ranks, 16 sizes 8 B-8.59e+09 B``."""
        sizes = self.rows["size_bytes"]
        return (f"table {self.index} (line {self.header_line}): {self.collective} on {self.ranks} ranks, "
                f"{sizes.n_unique()} sizes {sizes.min():.0f}-{sizes.max():.3g} B")

    def fit(self, placement: str = "out_of_place", min_size_bytes: float = 0.0) -> AlphaBetaFit:
        """Alpha-beta fit of this table's ``time_us`` over sizes >= ``min_size_bytes``
        (:func:`ddlscope.calibrate.fit.fit_alpha_beta`; check its ``warnings``).

        Raises:
            ValueError: an unknown placement, or too few sizes to fit.
        """
        if placement not in ("out_of_place", "in_place"):
            raise ValueError(f"placement: expected out_of_place or in_place, got {placement!r}")
        r = self.rows.filter((pl.col("placement") == placement) & (pl.col("size_bytes") >= min_size_bytes)
                             & (pl.col("time_us") > 0))
        if r["size_bytes"].n_unique() < 2:
            raise ValueError(f"table {self.index} (line {self.header_line}) has {r['size_bytes'].n_unique()} size(s): "
                             "alpha and beta need a sweep of sizes (nccl-tests -b 8 -e 8G -f 2)")
        return fit_alpha_beta(r["size_bytes"].to_numpy(), r["time_us"].to_numpy() * 1e-6,
                              collective=self.collective, ranks=self.ranks)


@dataclass
class RejectedTable:
    """A table that could not be interpreted: its number, header line and why."""

    index: int
    header_line: int
    reason: str
    rows: int


@dataclass
class NcclTestsOutput:
    """All tables of one nccl-tests text, and what was not used (counted by reason).

    Attributes:
        source: the name used in messages.
        tables: the usable tables, in order.
        skipped: lines that are not table rows, by reason.
        rejected_rows: data rows that could not be read, by reason.
        rejected_tables: tables that could not be interpreted.
        notes: the first line of each rejected-row reason, and other remarks.
        lines: lines of the text.
    """

    source: str
    tables: list[NcclTestsTable]
    skipped: dict[str, int]
    rejected_rows: dict[str, int] = field(default_factory=dict)
    rejected_tables: list[RejectedTable] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    lines: int = 0

    def accounting(self) -> dict[str, int | dict[str, int]]:
        """Every line of the text, accounted for: ``lines = row_lines_used +
        row_lines_in_rejected_tables + sum(rejected_rows) + sum(skipped)`` (``balanced``)."""
        used = sum(t.rows["line"].n_unique() for t in self.tables)
        in_rejected = sum(t.rows for t in self.rejected_tables)
        total = used + in_rejected + sum(self.rejected_rows.values()) + sum(self.skipped.values())
        return {"lines": self.lines, "row_lines_used": used, "row_lines_in_rejected_tables": in_rejected,
                "rejected_rows": dict(self.rejected_rows), "skipped": dict(self.skipped),
                "tables": len(self.tables), "rejected_tables": len(self.rejected_tables),
                "balanced": int(total == self.lines)}

    def fits(self, placement: str = "out_of_place", min_size_bytes: float = 0.0) -> pl.DataFrame:
        """One row per table: ``source, table, collective, ranks, ...`` plus the
        :class:`~ddlscope.calibrate.fit.AlphaBetaFit` fields, ``avg_busbw_gb_s`` and ``complete``."""
        rows = []
        for t in self.tables:
            f = t.fit(placement, min_size_bytes)
            d = f.as_dict()
            d["warnings"] = "; ".join(d["warnings"])
            rows.append({"source": self.source, "table": t.index, **d, "avg_busbw_gb_s": t.avg_busbw_gb_s,
                         "complete": t.complete, "ranks_source": t.ranks_source})
        return pl.DataFrame(rows)

    def select(self, which: str | int | None = None) -> tuple[NcclTestsTable, str]:
        """The table to calibrate a link with, and a sentence saying which was used and what else the
        text holds.

        Args:
            which: a collective name (any spelling :func:`canonical_collective` accepts), a table
                number (:attr:`NcclTestsTable.index`), or None: the all-reduce table, or the only
                table.

        Raises:
            NcclTestsError: no table matches, or several do (different rank counts, or the same
                collective twice), naming the tables and how to pick one.
        """
        listing = "; ".join(t.describe() for t in self.tables)
        if which is not None and str(which).strip().lstrip("-").isdigit():
            idx = int(str(which))
            match = [t for t in self.tables if t.index == idx]
            if not match:
                raise NcclTestsError(f"{self.source}: no usable table {idx}; the tables are: {listing}")
            chosen = match[0]
        else:
            if which is None:
                want = "all_reduce"
            else:
                try:
                    want = canonical_collective(str(which))
                except ValueError as exc:
                    raise NcclTestsError(f"{self.source}: {exc}") from None
            match = [t for t in self.tables if t.collective == want]
            if not match and which is None and len(self.tables) == 1:
                match = self.tables
            if not match:
                hint = ("" if which is not None else
                        "; name the one to use: FILE:SLOT:COLLECTIVE or FILE:SLOT:TABLE")
                raise NcclTestsError(f"{self.source}: no {want} table; the tables are: {listing}{hint}")
            if len(match) > 1:
                ranks = sorted({t.ranks for t in match})
                what = f"{len(match)} {match[0].collective} tables"
                if len(ranks) > 1:
                    what += f" on different rank counts ({', '.join(map(str, ranks))})"
                raise NcclTestsError(
                    f"{self.source}: {what}: {'; '.join(t.describe() for t in match)}; name the table to use: "
                    "FILE:SLOT:TABLE (its number)")
            chosen = match[0]
        others = [t for t in self.tables if t is not chosen]
        note = f"{self.source}: using {chosen.describe()}"
        if others:
            note += "; not used: " + ", ".join(f"{t.collective} (table {t.index})" for t in others)
        if self.rejected_tables:
            note += "; unreadable: " + ", ".join(f"table {t.index} (line {t.header_line})"
                                                 for t in self.rejected_tables)
        return chosen, note


def _header_columns(body: str) -> list[str] | None:
    toks = body.split()
    names = {t.lstrip("#") for t in toks}
    if {"size", "time", "algbw", "busbw"} <= names:
        return toks
    return None


def _strip_prefix(raw: str) -> str:
    line = raw.rstrip("\r\n")
    for rx in _PREFIXES:
        line = rx.sub("", line, count=1)
    return line.rstrip()


def _parse_row(toks: list[str], cols: list[str], table: int, lineno: int) -> list[tuple] | str:
    """The out-of-place and in-place rows of one data line, or the reason it cannot be read."""
    if len(toks) != len(cols):
        return ("fewer fields than the header (a truncated line?)" if len(toks) < len(cols)
                else "more fields than the header")
    seen: Counter[str] = Counter()
    groups: list[dict[str, str]] = [{}, {}]
    common: dict[str, str] = {}
    for name, tok in zip(cols, toks, strict=True):
        key = name.lstrip("#")
        if key in _TIME_NAMES:
            idx = seen[key]
            seen[key] += 1
            if idx > 1:
                return f"column {name!r} more than twice in the header"
            groups[idx]["wrong" if key == "error" else key] = tok
        else:
            common[key] = tok

    def num(name: str, tok: str | None, integer: bool = False) -> float | int | str | None:
        if tok is None:
            return None
        if name == "wrong" and tok.upper() in ("N/A", "NA", "-"):
            return None
        try:
            v = int(tok) if integer else float(tok)
        except ValueError:
            return f"column {name!r} is not a number"
        if not integer and not math.isfinite(v):
            return f"column {name!r} is not finite"
        return v

    size = num("size", common.get("size"), integer=True)
    count = num("count", common.get("count"), integer=True)
    for v in (size, count):
        if isinstance(v, str):
            return v
    if size is None or size < 0 or size > 2**62 or (count is not None and not 0 <= count <= 2**62):
        return "size or count out of range"
    out = []
    for i, g in enumerate(groups):
        if not g:
            continue
        if {"time", "algbw", "busbw"} - set(g):
            return "header lacks time/algbw/busbw for a placement"
        vals = [num(k, g.get(k)) for k in ("time", "algbw", "busbw", "wrong")]
        for v in vals:
            if isinstance(v, str):
                return v
        t, alg, bus, wrong = vals
        if t < 0 or alg < 0 or bus < 0:
            return "a negative time or bandwidth"
        out.append((table, lineno, float(size), count, common.get("type", ""), common.get("redop", "-"),
                    "out_of_place" if i == 0 else "in_place", t, alg, bus, wrong))
    return out


def parse_nccl_tests(
    text: str,
    *,
    source: str = "<text>",
    collective: str | None = None,
    ranks: int | None = None,
    collective_source: str = "given",
) -> NcclTestsOutput:
    """Parse nccl-tests output ``text`` (see the module docstring for what is accepted).

    Args:
        text: the pasted output.
        source: a name for messages (the file path).
        collective: the collective of tables whose text does not say (no ``Collective test
            starting`` line above them).
        ranks: the number of ranks of tables without ``Rank`` lines.
        collective_source: what ``collective`` is, for :attr:`NcclTestsTable.collective_source`
            (``given``, ``file name``).

    Returns:
        :class:`NcclTestsOutput` with the usable tables and the accounting of the rest.

    Raises:
        NcclTestsError: no table, or no usable one (the message gives ``source:line`` and why).
    """
    skipped: Counter[str] = Counter()
    rejected_rows: Counter[str] = Counter()
    notes: list[str] = []
    first_line: dict[str, int] = {}
    raw_tables: list[dict] = []
    pending: dict = {"ranks": {}, "devices": {}, "collective": None}
    current: dict | None = None
    lines = text.splitlines()

    def reject_row(reason: str, lineno: int) -> None:
        rejected_rows[reason] += 1
        first_line.setdefault(reason, lineno)

    def open_table(cols: list[str], lineno: int, inherit: dict | None = None) -> dict:
        info = inherit or pending
        t = {"cols": cols, "header_line": lineno, "rows": [], "avg": None, "closed": False,
             "ranks": dict(info["ranks"]), "devices": dict(info["devices"]), "collective": info["collective"],
             "notes": [], "index": len(raw_tables)}
        raw_tables.append(t)
        return t

    for lineno, raw in enumerate(lines, start=1):
        line = _strip_prefix(raw)
        stripped = line.strip()
        if not stripped:
            skipped["blank line"] += 1
            continue
        if _NCCL_LOG.search(stripped):
            skipped["NCCL log line"] += 1
            continue
        commented = stripped.startswith("#")
        body = stripped.lstrip("#").strip()
        cols = _header_columns(body)
        if cols is not None:
            skipped["column header"] += 1
            current = open_table(cols, lineno)
            pending = {"ranks": {}, "devices": {}, "collective": None}
            continue
        if m := _COLLECTIVE.search(body):
            skipped["header line"] += 1
            if current is not None and not current["closed"]:
                current["closed"] = True
                current["notes"].append(f"ends at line {lineno} (the next run starts) without its footer")
            pending["collective"] = m.group(1)
            continue
        if m := _AVG.match(body):
            skipped["footer line"] += 1
            if current is not None and not current["closed"]:
                with_avg = float(m.group(1))
                current["avg"] = with_avg if math.isfinite(with_avg) else None
                current["closed"] = True
            continue
        if m := _RANK.match(body) or _RANK_SIMPLE.match(body):
            skipped["header line"] += 1
            pending["ranks"][int(m.group(1))] = True
            if m.re is _RANK:
                pending["devices"][int(m.group(1))] = m.group(2).strip()
            continue
        if _ELISION.search(body):
            skipped["elision ('...')"] += 1
            continue
        if _PARAMS.search(body) or commented or body.startswith(_OTHER_INFO):
            skipped["comment or header line"] += 1
            continue
        toks = body.split()
        if current is None or current["closed"]:
            skipped["text outside a table"] += 1
            continue
        if not toks[0].isdigit():
            # an error message or other text where rows were expected: the run stopped here
            skipped["text ending a table"] += 1
            current["closed"] = True
            current["notes"].append(f"ends at line {lineno} without its footer, on {stripped[:60]!r} "
                                    "(the run failed or the paste was cut?)")
            continue
        parsed = _parse_row(toks, current["cols"], current["index"], lineno)
        if isinstance(parsed, str):
            reject_row(parsed, lineno)
            continue
        if current["rows"] and parsed and parsed[0][2] < current["rows"][-1][2]:
            # sizes start again without a new header: another run's rows
            prev = current
            prev["closed"] = True
            current = open_table(prev["cols"], lineno, inherit={"ranks": {}, "devices": {}, "collective": None})
            current["notes"].append(f"rows at line {lineno} restart at a smaller size without a column header: "
                                    f"read as a new table (after table {prev['index']})")
            parsed = [(current["index"], *r[1:]) for r in parsed]
        current["rows"].extend(parsed)

    for reason, n in rejected_rows.items():
        notes.append(f"{source}:{first_line[reason]}: {n} row(s) not read: {reason}")
    if not raw_tables:
        raise NcclTestsError(
            f"{source}: no nccl-tests table found (expected a column header line like "
            "'#       size         count      type   redop    root     time   algbw   busbw #wrong ...')")
    tables: list[NcclTestsTable] = []
    rejected: list[RejectedTable] = []
    for t in raw_tables:
        result = _interpret(t, source, collective, ranks, collective_source)
        if isinstance(result, str):
            rejected.append(RejectedTable(t["index"], t["header_line"], result,
                                          len({r[1] for r in t["rows"]})))
        else:
            tables.append(result)
    if not tables:
        first = rejected[0]
        more = f" (and {len(rejected) - 1} other table(s): " + "; ".join(
            f"line {r.header_line}: {r.reason}" for r in rejected[1:]) + ")" if len(rejected) > 1 else ""
        row_notes = f"; {'; '.join(notes)}" if notes else ""
        raise NcclTestsError(f"{source}:{first.header_line}: {first.reason}{more}{row_notes}")
    return NcclTestsOutput(source=source, tables=tables, skipped=dict(skipped), rejected_rows=dict(rejected_rows),
                           rejected_tables=rejected, notes=notes, lines=len(lines))


def _ratio_fits(coll: str, ratio: float) -> bool:
    """Whether ``busbw / algbw = ratio`` is possible for ``coll`` on some rank count >= 2."""
    if coll == "all_reduce":
        return 1.0 - 0.02 <= ratio < 2.0
    if coll in ("all_gather", "reduce_scatter", "all_to_all"):
        return 0.5 - 0.02 <= ratio < 1.0
    return abs(ratio - 1.0) <= 0.02


def _interpret(t: dict, source: str, hint: str | None, ranks_given: int | None,
               hint_source: str) -> NcclTestsTable | str:
    """A :class:`NcclTestsTable` from the rows of one column header, or why it cannot be used."""
    if not t["rows"]:
        return "a table header without any readable data row (the output is cut short or the run failed)"
    rows = pl.DataFrame(t["rows"], schema=_SCHEMA, orient="row")
    notes = list(t["notes"])
    # rows precise enough for ratios (algbw printed with 2 decimals)
    precise = rows.filter((pl.col("algbw_gb_s") >= 1.0) & (pl.col("time_us") > 0))
    if rows.filter(pl.col("algbw_gb_s") > 0).height and rows["busbw_gb_s"].max() == 0:
        return "busbw is 0 on every row: a run on 1 rank (nothing crosses a link); run on >= 2 GPUs"
    # the size convention: algbw = k size / time with k = 1 (total size) or p (old per-rank size)
    size_convention, per_rank_p = "total", None
    if precise.height:
        k = (precise["algbw_gb_s"] * precise["time_us"] * 1e3 / precise["size_bytes"])
        k_med = float(k.median())
        if math.isfinite(k_med) and k_med >= 1.5 and abs(k_med - round(k_med)) < 0.02 * k_med:
            per_rank_p = round(k_med)
            size_convention = "per rank (old nccl-tests)"
            notes.append(f"algbw = {per_rank_p} x size / time: sizes are per rank (old nccl-tests); "
                         f"read as total sizes of {per_rank_p} ranks")
        elif not abs(k_med - 1) <= 0.02:  # NaN and inf too (a huge number in a row)
            line = int(precise["line"][0])
            return (f"algbw is not size/time (line {line}: {precise['algbw_gb_s'][0]} GB/s vs "
                    f"{precise['size_bytes'][0]:.0f} B / {precise['time_us'][0]} us): columns misaligned?")
        kk = per_rank_p or 1
        bad = precise.filter((pl.col("algbw_gb_s") - kk * pl.col("size_bytes") / pl.col("time_us") / 1e3).abs()
                              > 0.02 * pl.col("algbw_gb_s") + 0.02)
        if bad.height:
            return (f"algbw is not size/time on {bad['line'].n_unique()} row(s), first line {bad['line'][0]}: "
                    "columns misaligned?")
    if per_rank_p:
        rows = rows.with_columns(pl.col("size_bytes") * per_rank_p)
        precise = precise.with_columns(pl.col("size_bytes") * per_rank_p)
    ratio = float("nan")
    if precise.height:
        r = precise["busbw_gb_s"] / precise["algbw_gb_s"]
        ratio = float(r.median())
        lo, hi = float(r.min()), float(r.max())
        if ratio > 0 and (hi - lo) > RATIO_TOLERANCE * ratio + 0.01:
            at_lo = int(precise["line"][int(r.arg_min())])
            at_hi = int(precise["line"][int(r.arg_max())])
            return (f"busbw/algbw varies from {lo:.3f} (line {at_lo}) to {hi:.3f} (line {at_hi}): rows of runs on "
                    "different rank counts under one header? give each run its own column header")
    # the collective: the header line wins, then the caller's hint, then the ratio and redop
    coll, coll_src = None, ""
    if t["collective"]:
        try:
            coll, coll_src = canonical_collective(t["collective"]), "Collective test starting"
        except ValueError:
            notes.append(f"unknown collective {t['collective']!r} in the 'Collective test starting' line")
    if hint:
        try:
            h = canonical_collective(hint)
        except ValueError as exc:
            return str(exc)
        if coll is None and hint_source == "file name" and ratio == ratio and not _ratio_fits(h, ratio):
            notes.append(f"the file name says {h} but busbw/algbw = {ratio:.3f} fits no {h} run: not used")
        elif coll is None:
            coll, coll_src = h, hint_source
        elif h != coll:
            notes.append(f"the {hint_source} says {h}, the 'Collective test starting' line {coll}: {coll} used")
    # ranks: the Rank lines, then the caller's, then the ratio
    p, p_src = None, ""
    if t["ranks"]:
        p, p_src = max(t["ranks"]) + 1, "rank lines"
        if ranks_given and ranks_given != p:
            notes.append(f"--ranks {ranks_given} given, the Rank lines say {p}: {p} used")
    elif ranks_given:
        p, p_src = ranks_given, "given"
    if per_rank_p:
        if p is not None and p != per_rank_p:
            return (f"algbw = {per_rank_p} x size / time (old per-rank sizes of {per_rank_p} ranks) "
                    f"but {p} ranks ({p_src})")
        p, p_src = per_rank_p, p_src or "algbw x time / size (old per-rank sizes)"
    redop = str(rows["redop"][0]).lower()
    if coll is None:
        if ratio != ratio:
            return "cannot tell the collective: every algbw is below 1 GB/s; give --collective and --ranks"
        if abs(ratio - 1.0) < 2e-3:
            return "busbw equals algbw (broadcast, reduce or send/receive?): give the collective (--collective)"
        if redop in ("none", "-"):
            coll, coll_src = "all_gather", "busbw/algbw and redop"
            notes.append("no redop and busbw < algbw: read as all_gather (all_to_all has the same factor and steps)")
        elif ratio > 1.0 + 1e-3:
            coll, coll_src = "all_reduce", "busbw/algbw and redop"
        else:
            coll, coll_src = "reduce_scatter", "busbw/algbw and redop"
    if per_rank_p and coll not in ("all_gather", "reduce_scatter", "all_to_all"):
        return (f"algbw = {per_rank_p} x size / time, the old per-rank sizes of all-gather/reduce-scatter, "
                f"in a {coll} table: columns misaligned?")
    if p is None:
        if coll == "send_recv":
            p, p_src = 2, "send/receive (pairs)"
        elif coll in ("broadcast", "reduce"):
            return f"{coll}: busbw equals algbw for any rank count; give the ranks (--ranks)"
        elif ratio != ratio:
            return f"{coll}: cannot tell the ranks (no Rank lines, every algbw below 1 GB/s); give --ranks"
        else:
            # all-reduce: r = 2 (p-1)/p -> p = 2 / (2 - r); all-gather and the others: r = (p-1)/p -> p = 1 / (1 - r)
            est = 2.0 / (2.0 - ratio) if coll == "all_reduce" and ratio < 2 else (
                1.0 / (1.0 - ratio) if ratio < 1 else float("inf"))
            if not math.isfinite(est) or est > 1e5:
                return f"busbw/algbw = {ratio:.3f} fits no rank count of {coll}; give --collective and --ranks"
            p, p_src = max(round(est), 1), "busbw/algbw"
    if p < 2:
        return f"{coll} on {p} rank: nothing crosses a link; run on >= 2 GPUs"
    expect = bus_factor(coll, p)
    if ratio == ratio and abs(ratio - expect) > 0.02 * expect + 0.01:
        return (f"busbw/algbw = {ratio:.3f} does not match {coll} on {p} ranks (expected {expect:.3f}); "
                "give the right --collective/--ranks")
    return NcclTestsTable(
        collective=coll, ranks=int(p), rows=rows, header_line=t["header_line"], avg_busbw_gb_s=t["avg"],
        complete=t["avg"] is not None, devices=[t["devices"][k] for k in sorted(t["devices"])], ranks_source=p_src,
        collective_source=coll_src, index=t["index"], size_convention=size_convention, notes=notes)


def read_nccl_tests(path: str | Path, *, collective: str | None = None, ranks: int | None = None) -> NcclTestsOutput:
    """Read and parse an nccl-tests output file (:func:`parse_nccl_tests`).

    ``collective`` (or else the collective the file name names, ``all_gather_perf.txt``) is used
    for tables without a ``Collective test starting`` line; that line wins where present.

    Raises:
        NcclTestsError: unreadable file or no usable table (naming the file and line).
    """
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise NcclTestsError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    src = "given"
    if collective is None:
        stem = path.stem.lower()
        for name in ("all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter", "reducescatter",
                     "alltoall", "all_to_all", "broadcast", "sendrecv", "send_recv"):
            if name in stem:
                collective, src = name, "file name"
                break
    return parse_nccl_tests(text, source=str(path), collective=collective, ranks=ranks, collective_source=src)


def fuzz_target(path: str | Path) -> dict[str, int | dict[str, int]]:
    """Read ``path`` as nccl-tests output and return its :meth:`NcclTestsOutput.accounting`, after
    fitting every table (a fit that cannot be made is counted in ``unfittable_tables``).

    For fuzzing (``benchmarks/fuzz_readers.py``): a file either raises :class:`NcclTestsError` (a
    one-line message naming the file) or returns an accounting with ``balanced == 1``.
    """
    out = read_nccl_tests(path)
    acc = out.accounting()
    unfittable = 0
    for t in out.tables:
        try:
            t.fit()
        except ValueError:
            unfittable += 1
    acc["unfittable_tables"] = unfittable
    return acc
