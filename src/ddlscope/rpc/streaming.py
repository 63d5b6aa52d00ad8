"""Streaming RPC dissection: logs larger than memory, on one machine or as Ray tasks.

The log is never held whole. :func:`plan_stream` reads only the server column of every input file
(Parquet files or row groups, CSV/TSV files, or folders of them) and cuts the log into
*partitions*, each a set of whole servers of about ``partition_rows`` rows. With a spill folder
and several partitions, every file is read once and its rows scattered into one Arrow IPC file per
partition (:func:`scatter_partitions`); otherwise a partition is read lazily (a Polars scan
filtered on its servers; Parquet row groups whose statistics exclude them are skipped). Each
partition goes through the same per-partition code as the in-memory path
(:func:`~ddlscope.rpc.validate.normalize`, :func:`~ddlscope.rpc.dissect.split_implausible`,
:func:`~ddlscope.rpc.dissect.annotate` with ``contributors=False`` and the in-flight
measures of :data:`STREAM_MEASURES`: cut to the columns the streamed tables read); only
mergeable partial results leave a partition.

Three passes over the partitions:

1. **check**: rows, rejected rows, RPCs above the plausible latency bound, the iteration steps
   (:func:`~ddlscope.rpc.size_phase.iteration_steps`) and the rows that prevent a substage split,
   so the log-wide decisions of the in-memory path are taken once for the whole log; the checked
   rows (:data:`SPILLED_COLUMNS`) are spilled to a temporary Arrow IPC file per partition
   (``spill``), which the next passes read instead of the input;
2. **sketch**: :func:`~ddlscope.rpc.dissect.annotate` (cut as above) per partition, then: the percentiles of the
   groupings whose groups lie in one partition (server, connection: :data:`DISJOINT_GROUPINGS`),
   by the in-memory code itself; for the others (all, op, iteration quarter:
   :data:`MERGED_GROUPINGS`) the count per (group, stage, value bin) and the count, sum and
   maximum per (group, stage); and the concurrency fit's raw moments
   (:func:`~ddlscope.rpc.concurrency.concurrency_moments`);
3. **refine**: for the bins holding the two order statistics each percentile of a merged grouping
   interpolates, the count of every distinct value in them; the percentiles are then *exact* (the
   same type-7 interpolation as :func:`~ddlscope.rpc.decompose.grouped_quantiles`), not a
   sketch's approximation.

Bins (:func:`value_bins`) keep :data:`BIN_MANTISSA_BITS` significant bits of a value (a relative
width of 2^-9 = 0.2 %), so the refine pass holds the distinct values of a few narrow bins per group
and stage. Memory is a function of the partition size and of the number of groups (operations,
servers, connections, iteration quarters) and bins, not of the rows of the log.

Exactness (tested against :func:`~ddlscope.rpc.dissect.dissect`): counts, means, maxima and
percentiles per grouping equal the in-memory values; the concurrency fit equals it up to float
summation order (moments summed per partition). In-flight counts ``server``,
``server_other_conn`` and ``connection`` are exact because a partition holds whole servers (a
connection belongs to one server); ``worker`` in-flight counts span servers, so the streaming fit
leaves that measure out. Two checks of the in-memory reader are per partition here: a duplicate
``(worker_id, rpc_id)`` on two different servers is not caught, and text ids (encoded by their
sorted order over the whole log) are refused. The CSV reader of the streaming path reads plain CSV
(no line with more fields than the header; ``log_line`` = row + 1 for the header; quoted fields
with line breaks shift the line numbers).

Engines: ``local`` runs the partitions one after another in this process; ``ray`` runs each
partition as a Ray task (``pip install ddlscope[ray]``; ``address`` of an existing cluster, or a
local one: :func:`ddlscope.engine.ray_session`) and merges the partial results in partition
order, exactly as the local engine does.
"""

from __future__ import annotations

import contextlib
import functools
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import polars as pl

from ddlscope.engine import ENGINES, check_engine, ray_available, ray_session  # noqa: F401 (re-exported)
from ddlscope.rpc.concurrency import (
    concurrency_moments,
    fit_from_moments,
    merge_concurrency_moments,
)
from ddlscope.rpc.decompose import (
    QUANTILES,
    decompose,
    quantile_label,
    substage_bad_rows,
    type7_ranks,
    type7_value,
)
from ddlscope.rpc.dissect import (
    MAX_PLAUSIBLE_LATENCY_US,
    PERCENTILE_GROUPS,
    annotate,
    no_rows_message,
    percentile_table,
    split_implausible,
)
from ddlscope.rpc.readers import RpcLog, detect_format
from ddlscope.rpc.schema import (
    CLIENT_TIMESTAMPS,
    LATENCY_COLUMN,
    OPS,
    SERVER_TIMESTAMPS,
    SUBSTAGE_COLUMNS,
    stage_column,
    stages_of,
)
from ddlscope.rpc.size_phase import PHASE_BINS, add_iteration_phase, iteration_steps, merge_iteration_steps
from ddlscope.rpc.validate import ColumnMapping, empty_rejected, normalize, rejected_counts

STREAM_FORMATS: tuple[str, ...] = ("csv", "tsv", "parquet")
"""Input formats the streaming path reads lazily (JSON lines and OTLP: read them in memory)."""
BIN_MANTISSA_BITS = 10
"""Significant bits a value bin keeps (:func:`value_bins`): values below 2^10 ns have a bin each,
larger ones share a bin with those of the same top 10 bits (relative width 2^-9)."""
STREAM_MEASURES: tuple[str, ...] = ("server", "server_other_conn", "connection")
"""In-flight measures the streaming path fits (exact per server partition; ``worker`` spans servers)."""
DEFAULT_PARTITION_ROWS = 2_000_000
"""Rows a partition aims at (whole servers: a server with more rows is a partition of its own)."""


@dataclass(frozen=True)
class LogFile:
    """One input file of a streamed log: ``path`` and its ``fmt`` (:data:`STREAM_FORMATS`)."""

    path: str
    fmt: str


@dataclass(frozen=True)
class Partition:
    """Whole servers of the log, read together.

    Attributes:
        index: 0-based position (partial results merge in this order).
        servers: the server column's values, as stripped text; None for the rows without one
            (they are rejected by the checks, as in the in-memory path).
        rows: input rows of these servers (before the checks).
    """

    index: int
    servers: tuple[str, ...] | None
    rows: int


@dataclass
class StreamPlan:
    """What :func:`plan_stream` found: the files, their mapping, the server column and the partitions."""

    files: list[LogFile]
    mapping: ColumnMapping
    server_source: str
    partitions: list[Partition]
    rows: int
    notes: list[str] = field(default_factory=list)
    file_rows: list[int] = field(default_factory=list)


def expand_inputs(paths: str | Path | Sequence[str | Path], input_format: str = "auto") -> list[LogFile]:
    """The files of ``paths``: files as given, folders replaced by their ``.parquet``/``.pq``/``.csv``/
    ``.tsv`` files (recursively, in sorted order; hidden files and ``_``-prefixed ones skipped).

    Raises:
        FileNotFoundError: a path does not exist.
        ValueError: no file, a format the streaming path does not read (naming the file), a file
            given twice.
    """
    if isinstance(paths, str | Path):
        paths = [paths]
    out: list[LogFile] = []
    seen: set[Path] = set()
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or folder")
        suffixes = (".parquet", ".pq", ".csv", ".tsv")
        found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in suffixes
                       and not any(part.startswith((".", "_")) for part in f.relative_to(p).parts)) \
            if p.is_dir() else [p]
        if p.is_dir() and not found:
            raise ValueError(f"{p}: a folder without .parquet, .pq, .csv or .tsv files")
        for f in found:
            fmt = detect_format(f) if input_format == "auto" else input_format
            if fmt == "csv" and f.suffix.lower() == ".tsv":
                fmt = "tsv"
            if fmt not in STREAM_FORMATS:
                raise ValueError(f"{f}: {fmt} is not streamed (streaming reads {', '.join(STREAM_FORMATS)}); "
                                 "dissect it without --streaming")
            if f.resolve() in seen:
                raise ValueError(f"{f}: the same log file given twice; give each file once")
            seen.add(f.resolve())
            out.append(LogFile(str(f), fmt))
    if not out:
        raise ValueError("no log files given")
    return out


def scan_log_file(f: LogFile) -> pl.LazyFrame:
    """A lazy scan of one file: ``log_line`` (Int64; Parquet: row number from 1, CSV/TSV: line
    number, the header being line 1), the file's columns (CSV/TSV: all as text, as the in-memory
    reader reads the schema's columns), ``log_file`` (String)."""
    if f.fmt == "parquet":
        lf = pl.scan_parquet(f.path).with_row_index("log_line", offset=1)
    else:
        lf = pl.scan_csv(f.path, separator="\t" if f.fmt == "tsv" else ",", infer_schema=False,
                         missing_columns="insert").with_row_index("log_line", offset=2)
    return lf.with_columns(pl.col("log_line").cast(pl.Int64), pl.lit(f.path).alias("log_file"))


def _collect(lf: pl.LazyFrame, f: LogFile) -> pl.DataFrame:
    """``lf.collect()``, a reader error turned into a ValueError naming the file."""
    try:
        return lf.collect()
    except pl.exceptions.PolarsError as e:
        first = str(e).strip().splitlines()[0]
        raise ValueError(f"{f.path}: not readable as {f.fmt} by the streaming reader ({first}); dissect it without "
                         "--streaming, whose reader rejects malformed lines one by one with file:line") from e


def _server_key(source: str) -> pl.Expr:
    return pl.col(source).cast(pl.String).str.strip_chars()


def plan_stream(paths: str | Path | Sequence[str | Path], *, mapping: ColumnMapping | None = None,
                input_format: str = "auto", partition_rows: int = DEFAULT_PARTITION_ROWS) -> StreamPlan:
    """Plan a streamed dissection: read the server column of every file and group whole servers
    into partitions of about ``partition_rows`` rows (in sorted order of the server text).

    Raises:
        FileNotFoundError, ValueError: as :func:`expand_inputs`; a file without the server column
            (named with the mapping); ``partition_rows`` below 1.
    """
    if partition_rows < 1:
        raise ValueError(f"partition_rows: expected at least 1, got {partition_rows}")
    mapping = mapping or ColumnMapping()
    files = expand_inputs(paths, input_format)
    inverse = {new: old for old, new in mapping.columns.items()}
    source = inverse.get("server_id", "server_id")
    counts = []
    notes = []
    readable = []
    for f in files:
        lf = scan_log_file(f)
        try:
            names = lf.collect_schema().names()
        except pl.exceptions.NoDataError:  # a 0-byte CSV: no header either
            notes.append(f"{f.path}: empty file, no rows")
            continue
        readable.append(f)
        if source not in names:
            raise ValueError(f"{f.path}: no column {source!r} (server_id"
                             + (f" through the mapping {source}=server_id" if source != "server_id" else "")
                             + f"); the file has {', '.join(n for n in names if n not in ('log_line', 'log_file'))}")
        c = _collect(lf.select(_server_key(source).alias("server")).group_by("server").len(), f)
        if c.height == 0:
            notes.append(f"{f.path}: no data rows (only a header)")
        counts.append(c)
    if not readable:
        where = ", ".join(f.path for f in files)
        raise ValueError(f"{where}: the file is empty" if len(files) == 1 else f"every log file is empty ({where})")
    files = readable
    per_server = (pl.concat(counts).group_by("server").agg(pl.col("len").sum())
                  .sort("server", nulls_last=True))
    partitions: list[Partition] = []
    chunk: list[str] = []
    rows = 0
    for server, n in per_server.iter_rows():
        if server is None:
            continue
        if chunk and rows + n > partition_rows:
            partitions.append(Partition(len(partitions), tuple(chunk), rows))
            chunk, rows = [], 0
        chunk.append(server)
        rows += n
    if chunk:
        partitions.append(Partition(len(partitions), tuple(chunk), rows))
    nulls = per_server.filter(pl.col("server").is_null())
    if nulls.height:
        partitions.append(Partition(len(partitions), None, int(nulls.get_column("len").item())))
    total = int(per_server.get_column("len").sum()) if per_server.height else 0
    return StreamPlan(files=files, mapping=mapping, server_source=source, partitions=partitions, rows=total,
                      notes=notes, file_rows=[int(c.get_column("len").sum()) for c in counts])


def _scattered(raw_dir: str | Path, file_index: int, part: Partition) -> Path:
    return Path(raw_dir) / f"file-{file_index:06d}" / f"__part={part.index}"


def scatter_partitions(plan: StreamPlan, raw_dir: str | Path, progress: _Progress | None = None) -> bool:
    """Read every file once and write its rows, as :func:`scan_log_file` gives them, into one
    Arrow IPC file per (file, partition) under ``raw_dir`` (Polars' streaming sink, uncompressed:
    about 190 bytes a row of the benchmark's log), so that :func:`read_partition` reads a
    partition's own rows instead of scanning every file once per partition (a log of ``P``
    partitions in ``F`` files was read ``P`` times: quadratic in the log's size).

    Returns:
        True when every file was scattered; False when a file could not be read this way (nothing
        is then used from ``raw_dir``: the partitions are read by filtered scans, whose reader
        errors name the file, as before).
    """
    index = {s: p.index for p in plan.partitions if p.servers is not None for s in p.servers}
    nulls = next((p.index for p in plan.partitions if p.servers is None), None)
    server = _server_key(plan.server_source)
    key = server.replace_strict(index, default=None, return_dtype=pl.Int32)
    if nulls is not None:
        key = pl.when(server.is_null()).then(pl.lit(nulls, pl.Int32)).otherwise(key)
    task = progress.task("scatter", len(plan.files), unit="files") if progress is not None else None
    for i, f in enumerate(plan.files):
        try:
            scan_log_file(f).with_columns(key.alias("__part")).sink_ipc(
                pl.PartitionBy(Path(raw_dir) / f"file-{i:06d}", key="__part", include_key=False),
                compression="uncompressed", mkdir=True)
        except pl.exceptions.PolarsError:
            return False
        if progress is not None:
            progress.advance(task, plan.file_rows[i] if i < len(plan.file_rows) else 0)
    return True


def read_partition(plan: StreamPlan, part: Partition, raw_dir: str | Path | None = None) -> pl.DataFrame:
    """The raw rows of one partition (every file's rows of its servers), as the in-memory reader
    gives them to :func:`~ddlscope.rpc.validate.normalize`: from the files of
    :func:`scatter_partitions` in ``raw_dir`` when given (the same rows in the same order), else by
    a filtered scan of every file."""
    if raw_dir is not None:
        frames = []
        for i in range(len(plan.files)):
            folder = _scattered(raw_dir, i, part)
            if folder.is_dir():
                frames.append(pl.read_ipc(sorted(folder.glob("*.ipc"))))
        frames = [f for f in frames if f.height]
        if frames:
            return pl.concat(frames, how="diagonal_relaxed") if len(frames) > 1 else frames[0]
    key = _server_key(plan.server_source)
    cond = key.is_null() if part.servers is None else key.is_in(list(part.servers))
    frames = [_collect(scan_log_file(f).filter(cond), f) for f in plan.files]
    frames = [f for f in frames if f.height] or frames[:1]
    return pl.concat(frames, how="diagonal_relaxed") if len(frames) > 1 else frames[0]


def _checked(plan: StreamPlan, part: Partition, raw_dir: str | Path | None = None,
             ) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    raw = read_partition(plan, part, raw_dir)
    if raw_dir is not None:  # read once: free the disk
        import shutil

        for i in range(len(plan.files)):
            shutil.rmtree(_scattered(raw_dir, i, part), ignore_errors=True)
    what = plan.files[0].path if len(plan.files) == 1 else f"{len(plan.files)} log files"
    rows, rejected, notes = normalize(raw, plan.mapping, what)
    text_ids = [n for n in notes if "given as text" in n]
    if text_ids:
        raise ValueError(f"streaming needs integer ids ({'; '.join(text_ids)}{_first_text_id(raw, plan, text_ids)}): "
                         "text ids are encoded by their order over the whole log; dissect without --streaming or "
                         "map the ids to integers")
    return rows, rejected, notes


def _first_text_id(raw: pl.DataFrame, plan: StreamPlan, text_ids: list[str]) -> str:
    """``; first at FILE:LINE: COLUMN = 'value'`` for the first row of ``raw`` whose id (of the
    ``text_ids`` notes) is not an integer, or ``""`` where the rows carry no file and line."""
    inverse = {new: old for old, new in plan.mapping.columns.items()}
    for note in text_ids:
        name = note.split(" ", 1)[0]
        col = inverse.get(name, name)
        if col not in raw.columns or not {"log_file", "log_line"} <= set(raw.columns):
            continue
        v = pl.col(col).cast(pl.String).str.strip_chars()
        bad = raw.filter(v.cast(pl.Int64, strict=False).is_null() & (v != "")).head(1)
        if bad.height:
            r = bad.row(0, named=True)
            return f"; first at {r['log_file']}:{r['log_line']}: {col} = {r[col]!r}"
    return ""


# --- value bins ------------------------------------------------------------------------------

def value_bins(values: np.ndarray, bits: int = BIN_MANTISSA_BITS) -> np.ndarray:
    """Monotone bins of non-negative int64 values: ``v`` itself below ``2^bits``, else
    ``shift * 2^(bits-1) + (v >> shift)`` with ``shift = bit_length(v) - bits`` (the value's top
    ``bits`` bits: a bin spans 2^-(bits-1) of its values). Monotone non-decreasing in ``v``, so the
    k-th smallest value lies in the bin where the bins' cumulative count passes k.

    Raises:
        ValueError: a negative value (stages are checked non-negative before).
    """
    v = np.asarray(values, np.int64)
    if v.size and int(v.min()) < 0:
        raise ValueError(f"value_bins: negative value {int(v.min())}")
    # e = bit_length(v) from the float64 exponent field (frexp's exponent, read off the bits), or
    # one more where the conversion rounded up to the next power of two (corrected below); below
    # 2^bits the shift is 0 and the bin is v itself
    e = (v.astype(np.float64).view(np.int64) >> 52) - 1022
    e -= (v >> np.maximum(e - 1, 0)) == 0
    shift = np.maximum(e - bits, 0, out=e)
    out = v >> shift
    out += shift << (bits - 1)
    return out


DISJOINT_GROUPINGS: tuple[str, ...] = ("server", "connection")
"""Groupings whose groups lie in one partition each (a partition holds whole servers, a connection
belongs to one server): their percentiles are computed inside the partition by the in-memory code
(:func:`~ddlscope.rpc.dissect.percentile_table`, exact) and the partitions' rows concatenated."""
MERGED_GROUPINGS: tuple[str, ...] = tuple(g for g in PERCENTILE_GROUPS if g not in DISJOINT_GROUPINGS)
"""Groupings whose groups span partitions (all, op, iteration quarter): two-pass exact percentiles."""


def _stage_cols(frame: pl.DataFrame) -> list[tuple[str, str]]:
    return [(s, stage_column(s)) for s in stages_of(frame)] + [("latency", LATENCY_COLUMN)]


# --- the three passes (top-level functions: they run as Ray tasks too) --------------------------

def _spill_path(ctx: dict[str, Any], part: Partition) -> Path | None:
    return Path(ctx["spill_dir"]) / f"partition-{part.index:06d}.arrow" if ctx.get("spill_dir") else None


SPILLED_COLUMNS: tuple[str, ...] = (
    "log_file", "log_line", "worker_id", "server_id", "connection_id", "iteration", "op", "connection_event",
    *CLIENT_TIMESTAMPS, *SERVER_TIMESTAMPS, *SUBSTAGE_COLUMNS)
"""The checked columns the sketch and refine passes read (:func:`~ddlscope.rpc.dissect.annotate`,
:func:`~ddlscope.rpc.dissect.split_implausible`, the group keys): the only ones spilled."""


def pass_check(plan: StreamPlan, part: Partition, ctx: dict[str, Any]) -> dict[str, Any]:
    """Pass 1 on one partition: counts, rejected rows, RPCs over ``ctx["bound_us"]``, iteration
    steps of the rows under and over the bound, substage bad rows
    (:func:`~ddlscope.rpc.decompose.substage_bad_rows`). With ``ctx["spill_dir"]`` the checked
    rows are written there (Arrow IPC), so the later passes read them instead of parsing and checking
    the input again."""
    rows, rejected, notes = _checked(plan, part, ctx.get("raw_dir"))
    spill = _spill_path(ctx, part)
    if spill is not None:
        # Arrow IPC, uncompressed: 2 M rows written in 0.14 s and read in 0.15 s (lz4 Parquet: 0.74, 0.42 s)
        rows.select(c for c in SPILLED_COLUMNS if c in rows.columns).write_ipc(spill, compression="uncompressed")
    lat = pl.col("client_done_ns") - pl.col("client_issue_ns")
    over = lat > int(ctx["bound_us"] * 1e3)
    n_over = rows.select(over.sum()).item() if rows.height else 0
    return {"rows": rows.height, "raw_rows": part.rows, "over": n_over, "rejected": rejected, "notes": notes,
            "steps_under": iteration_steps(rows.filter(~over)), "steps_over": iteration_steps(rows.filter(over)),
            "substage_bad": substage_bad_rows(rows), "substage_bad_under": substage_bad_rows(rows.filter(~over)),
            "servers": rows.get_column("server_id").n_unique() if rows.height else 0,
            "connections": rows.select(pl.struct("worker_id", "server_id", "connection_id").n_unique()).item()
            if rows.height else 0}


def _kept(plan: StreamPlan, part: Partition, ctx: dict[str, Any]) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    spill = _spill_path(ctx, part)
    rows = pl.read_ipc(spill) if spill is not None else _checked(plan, part)[0]
    return split_implausible(rows, ctx["bound_us"], decided=ctx["set_aside"]) if rows.height else \
        (rows, empty_rejected(), {})


BIN_SPACE = 1 << 15
"""Bins per (group, stage) code block: :func:`value_bins` of any int64 is below 28 160."""


def _key_codes(rpcs: pl.DataFrame, g: str) -> tuple[np.ndarray, list[str]]:
    """The group of each RPC in merged grouping ``g`` as a code (the Enum's physical order; 0 for
    ``all``) and the labels of the codes."""
    col = PERCENTILE_GROUPS[g]
    if col is None:
        return np.zeros(rpcs.height, np.int64), ["all"]
    series = rpcs.get_column(col)
    return series.to_physical().to_numpy().astype(np.int64), list(series.dtype.categories)


def _stage_values(rpcs: pl.DataFrame) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Per stage (its index in :func:`_stage_cols`): its values (int64 ns) and their bins."""
    for i, (_, col) in enumerate(_stage_cols(rpcs)):
        v = rpcs.get_column(col).to_numpy().astype(np.int64)
        yield i, v, value_bins(v)


def _keys(labels: list[str], codes: np.ndarray, g: str) -> pl.Series:
    return pl.Series("key", np.asarray(labels, dtype=object)[codes], pl.String).cast(_KEY_DTYPES[g])


def pass_sketch(plan: StreamPlan, part: Partition, ctx: dict[str, Any]) -> dict[str, Any]:
    """Pass 2 on one partition: per merged grouping, the (group, stage, bin) counts and the (group,
    stage) counts, sums and maxima; the percentiles of the disjoint groupings (whole in this
    partition); the concurrency moments of :data:`STREAM_MEASURES`; the RPCs set aside as implausible."""
    rows, set_aside, info = _kept(plan, part, ctx)
    if rows.height == 0:
        return {"hist": {}, "stats": {}, "percentiles": None, "moments": None, "set_aside": set_aside,
                "implausible": info, "notes": [], "stages": None}
    # cut to what the streamed tables read: no worker in-flight sweep, no connection events or
    # message bytes (the same values in the columns kept, the same notes)
    rpcs, notes = annotate(rows, threads=ctx["threads"], steps=ctx["steps"], substage_bad=ctx["substage_bad"],
                           measures=STREAM_MEASURES, contributors=False)
    codes = {g: _key_codes(rpcs, g) for g in MERGED_GROUPINGS}
    hist: dict[str, list[pl.DataFrame]] = {g: [] for g in MERGED_GROUPINGS}
    for stage, _, bins in _stage_values(rpcs):
        for g, (kc, labels) in codes.items():
            count = np.bincount(kc * BIN_SPACE + bins, minlength=len(labels) * BIN_SPACE)
            nz = np.flatnonzero(count)
            hist[g].append(pl.DataFrame([_keys(labels, nz // BIN_SPACE, g),
                                         pl.Series("stage", np.full(len(nz), stage), pl.Int16),
                                         pl.Series("b", nz % BIN_SPACE, pl.Int64),
                                         pl.Series("n", count[nz], pl.Int64)]))
    cols = [c for _, c in _stage_cols(rpcs)]
    stats = {}
    for g in MERGED_GROUPINGS:
        key = pl.lit("all") if PERCENTILE_GROUPS[g] is None else pl.col(PERCENTILE_GROUPS[g])
        wide = rpcs.group_by(key.alias("key")).agg(
            pl.len().cast(pl.Int64).alias("rpcs"), *(pl.col(c).sum().alias(f"s{i}") for i, c in enumerate(cols)),
            *(pl.col(c).max().alias(f"m{i}") for i, c in enumerate(cols)))
        stats[g] = pl.concat([wide.select(pl.col("key").cast(_KEY_DTYPES[g]), pl.lit(i, pl.Int16).alias("stage"),
                                          "rpcs", pl.col(f"s{i}").alias("sum"), pl.col(f"m{i}").alias("max"))
                              for i in range(len(cols))])
    return {"hist": {g: pl.concat(v) for g, v in hist.items()}, "stats": stats,
            "percentiles": percentile_table(rpcs, {g: PERCENTILE_GROUPS[g] for g in DISJOINT_GROUPINGS}),
            "moments": concurrency_moments(rpcs, STREAM_MEASURES), "set_aside": set_aside, "implausible": info,
            "notes": notes, "stages": stages_of(rpcs)}


def pass_refine(plan: StreamPlan, part: Partition, ctx: dict[str, Any]) -> dict[str, pl.DataFrame]:
    """Pass 3 on one partition: per grouping, the count of each distinct value in the target
    bins (``ctx["targets"]``: grouping -> (key, stage, b))."""
    rows, _, _ = _kept(plan, part, ctx)
    if rows.height == 0:
        return {}
    rpcs = add_iteration_phase(decompose(rows, substage_bad=ctx["substage_bad"]), ctx["steps"])
    codes = {g: _key_codes(rpcs, g) for g in MERGED_GROUPINGS}
    out: dict[str, list[pl.DataFrame]] = {g: [] for g in MERGED_GROUPINGS}
    masks: dict[tuple[str, int], np.ndarray] = {}  # (grouping, stage) -> whether each key/bin code is a target
    for g, targets in ctx["targets"].items():
        labels = codes[g][1]
        index = {label: i for i, label in enumerate(labels)}
        t = targets.with_columns(pl.col("key").cast(pl.String).replace_strict(index, return_dtype=pl.Int64))
        for (stage,), ts in t.group_by("stage"):
            mask = np.zeros(len(labels) * BIN_SPACE, np.bool_)
            mask[ts.get_column("key").to_numpy() * BIN_SPACE + ts.get_column("b").to_numpy()] = True
            masks[g, stage] = mask
    for stage, v, bins in _stage_values(rpcs):
        for g in ctx["targets"]:
            kc, labels = codes[g]
            if (g, stage) not in masks:
                continue
            code = kc * BIN_SPACE + bins
            hit = masks[g, stage][code]
            counted = pl.DataFrame({"code": code[hit], "v": v[hit]}).group_by("code", "v").len()
            c = counted.get_column("code").to_numpy()
            out[g].append(pl.DataFrame([_keys(labels, c // BIN_SPACE, g),
                                        pl.Series("stage", np.full(len(c), stage), pl.Int16),
                                        pl.Series("b", c % BIN_SPACE, pl.Int64), counted.get_column("v"),
                                        counted.get_column("len").cast(pl.Int64).alias("n")]))
    return {g: pl.concat(v) for g, v in out.items() if v}


# --- engines --------------------------------------------------------------------------------

class _Progress:
    """Rows read, partitions done, rate and ETA on stderr (rich), over every pass."""

    def __init__(self, plan: StreamPlan, passes: int, enabled: bool) -> None:
        self.enabled = enabled and plan.rows > 0
        self.total = plan.rows * passes
        self.done_rows = 0  # over every pass (the rate)
        self._pass_rows: dict[Any, int] = {}  # per pass (the "rows read" of its bar)
        self._bar = None
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                 TextColumn("{task.fields[rows]} of " + f"{plan.rows:,} rows read"),
                                 MofNCompleteColumn(),
                                 TextColumn("{task.fields[unit]}"), TextColumn("{task.fields[rate]} rows/s"),
                                 TimeRemainingColumn(), console=Console(stderr=True), transient=False)
            self._bar.start()
        self.t0 = time.perf_counter()

    def task(self, name: str, n: int, unit: str = "partitions") -> Any:
        """A bar for one pass over ``n`` partitions (or files: ``unit``)."""
        if self._bar is None:
            return None
        return self._bar.add_task(name, total=n, rows="0", rate="-", unit=unit)

    def advance(self, task: Any, rows: int) -> None:
        """One partition of ``rows`` rows done: the pass's rows read, and the rate over every pass."""
        self.done_rows += rows
        self._pass_rows[task] = self._pass_rows.get(task, 0) + rows
        if self._bar is not None:
            dt = max(time.perf_counter() - self.t0, 1e-9)
            self._bar.update(task, advance=1, rows=f"{self._pass_rows[task]:,}", rate=f"{self.done_rows / dt:,.0f}")

    def close(self) -> None:
        """Stop the display."""
        if self._bar is not None:
            self._bar.stop()


def _run_local(fn: Callable, plan: StreamPlan, ctx: Any, progress: _Progress, name: str) -> list[Any]:
    task = progress.task(name, len(plan.partitions))
    out = []
    for part in plan.partitions:
        out.append(fn(plan, part, ctx))
        progress.advance(task, part.rows)
    return out


def _run_threads(fn: Callable, plan: StreamPlan, ctx: Any, progress: _Progress, name: str,
                 workers: int) -> list[Any]:
    """:func:`_run_local` with up to ``workers`` partitions at a time in threads of this process (the
    work is Polars and NumPy, which release the GIL); results in partition order, as the local run's."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    task = progress.task(f"{name} ({workers} at a time)", len(plan.partitions))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ddlscope-partition") as pool:
        futures = {pool.submit(fn, plan, part, ctx): i for i, part in enumerate(plan.partitions)}
        out: list[Any] = [None] * len(futures)
        for fut in as_completed(futures):
            i = futures[fut]
            out[i] = fut.result()
            progress.advance(task, plan.partitions[i].rows)
    return out


def _run_ray(fn: Callable, plan: StreamPlan, ctx: Any, progress: _Progress, name: str) -> list[Any]:
    import ray

    task = progress.task(name + " (ray)", len(plan.partitions))
    remote = ray.remote(fn)
    plan_ref, ctx_ref = ray.put(plan), ray.put(ctx)
    refs = [remote.remote(plan_ref, part, ctx_ref) for part in plan.partitions]
    rows_of = {ref: part.rows for ref, part in zip(refs, plan.partitions, strict=True)}
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            progress.advance(task, rows_of[ref])
    return ray.get(refs)


# --- merging ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class StreamedDissection:
    """What :func:`dissect_streaming` found: the tables of :class:`~ddlscope.rpc.dissect.Dissection`
    that merge exactly over partitions (same columns and rows as the in-memory ones).

    Attributes:
        percentiles: :attr:`Dissection.percentiles <ddlscope.rpc.dissect.Dissection.percentiles>`
            (exact: two-pass, see the module docstring).
        stage_summary: :attr:`Dissection.stage_summary <ddlscope.rpc.dissect.Dissection.stage_summary>`.
        concurrency_fit: :func:`~ddlscope.rpc.concurrency.concurrency_fit` for :data:`STREAM_MEASURES`.
        rejected: rejected rows (``log_file``, ``log_line``, ``reason``, ``detail``), implausible last.
        rpcs: RPCs analysed; workers, servers, connections: distinct counts.
        files, notes: inputs and notes; implausible: as the Dissection's.
        stages: the stages analysed.
        summary: JSON-ready headline numbers (:func:`streamed_summary`; a new dict on each call).
        partitions, engine, wall_s, concurrent_partitions: how it ran (the last: partitions at a
            time in threads of this process, engine ``local``; None on Ray, whose scheduler runs
            as many tasks at a time as the cluster has CPUs).
    """

    percentiles: pl.DataFrame
    stage_summary: pl.DataFrame
    concurrency_fit: pl.DataFrame
    rejected: pl.DataFrame
    rpcs: int
    workers: int
    servers: int
    connections: int
    files: tuple[str, ...]
    notes: tuple[str, ...]
    implausible: Mapping[str, Any]
    partitions: int
    engine: str
    wall_s: float = 0.0
    stages: tuple[str, ...] = ()
    concurrent_partitions: int | None = 1

    @property
    def summary(self) -> dict[str, Any]:
        """:func:`streamed_summary` of this dissection."""
        return streamed_summary(self, self.stages)

    def rejected_counts(self) -> pl.DataFrame:
        """Rejected rows per reason (:func:`~ddlscope.rpc.validate.rejected_counts`)."""
        return rejected_counts(self.rejected)


_KEY_DTYPES: dict[str, pl.DataType] = {"all": pl.String, "op": pl.Enum(list(OPS)), "server": pl.Int64,
                                       "connection": pl.Int64, "iteration_phase": pl.Enum(list(PHASE_BINS))}


def _merge_hist(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """One grouping's histogram over the log, sorted by (key, stage, bin)."""
    return pl.concat(parts, how="vertical").group_by("key", "stage", "b").agg(pl.col("n").sum()).sort(
        "key", "stage", "b")


def _merge_stats(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """One grouping's (key, stage) counts, sums and maxima over the log."""
    return pl.concat(parts, how="vertical").group_by("key", "stage").agg(
        pl.col("rpcs").sum(), pl.col("sum").sum(), pl.col("max").max())


def _targets(hist: pl.DataFrame, quantiles: Sequence[float]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """For every (key, stage) and quantile: the bins and in-bin ranks of its two order statistics.

    Returns ``(wanted, targets)``: ``wanted`` has key, stage, q (index), which (0 lo, 1 hi), b,
    rank_in_bin, frac; ``targets`` the distinct (key, stage, b)."""
    h = hist.with_columns(pl.col("n").cum_sum().alias("cum"))
    groups = h.group_by("key", "stage", maintain_order=True).agg(pl.col("n").sum().alias("total"),
                                                                 (pl.col("cum").first() - pl.col("n").first())
                                                                 .alias("before"))
    cum = h.get_column("cum").to_numpy()
    bins = h.get_column("b").to_numpy()
    rows = []
    total = groups.get_column("total").to_numpy()
    before = groups.get_column("before").to_numpy()
    for j, q in enumerate(quantiles):
        lo, hi, frac = type7_ranks(total, q)
        for which, rank in enumerate((lo, hi)):
            at = np.searchsorted(cum, before + rank, side="right")
            prev = np.where(at > 0, cum[np.maximum(at - 1, 0)], 0)
            rows.append(groups.select("key", "stage").with_columns(
                pl.lit(j).alias("q"), pl.lit(which).alias("which"), pl.Series("b", bins[at]),
                pl.Series("rank_in_bin", before + rank - prev), pl.Series("frac", frac)))
    wanted = pl.concat(rows)
    return wanted, wanted.select("key", "stage", "b").unique()


def _assemble(g: str, stats: pl.DataFrame, wanted: pl.DataFrame, values: pl.DataFrame | None,
              quantiles: Sequence[float], stage_order: list[str]) -> pl.DataFrame:
    picked = _pick(wanted, values.group_by("key", "stage", "b", "v").agg(pl.col("n").sum())
                   .sort("key", "stage", "b", "v"))
    qcols = [f"{quantile_label(q)}_us" for q in quantiles]
    wide = stats
    for j, c in enumerate(qcols):
        p = picked.filter(pl.col("q") == j)
        lo = p.filter(pl.col("which") == 0).select("key", "stage", pl.col("v").alias("a"), "frac")
        hi = p.filter(pl.col("which") == 1).select("key", "stage", pl.col("v").alias("bv"))
        both = lo.join(hi, on=["key", "stage"])
        both = both.with_columns(pl.Series(c, type7_value(both.get_column("a").to_numpy(),
                                                          both.get_column("bv").to_numpy(),
                                                          both.get_column("frac").to_numpy()) / 1e3))
        wide = wide.join(both.select("key", "stage", c), on=["key", "stage"], how="left")
    names = dict(enumerate(stage_order))
    # in NumPy, as grouped_quantiles computes them (Polars may turn a division into a product)
    total = wide.get_column("sum").to_numpy().astype(np.float64)
    count = wide.get_column("rpcs").to_numpy()
    wide = wide.with_columns(
        pl.Series("mean_us", total / count / 1e3),
        pl.Series("max_us", wide.get_column("max").to_numpy().astype(np.float64) / 1e3),
        pl.col("stage").alias("__o"),
        pl.col("stage").replace_strict(names, return_dtype=pl.String),
    ).sort("key", "__o")
    group = pl.lit("all") if g == "all" else pl.col("key").cast(pl.String)
    return wide.select(pl.lit(g).alias("grouping"), group.alias("group"), "stage", pl.col("rpcs").cast(pl.Int64),
                       "mean_us", *qcols, "max_us")


def _pick(wanted: pl.DataFrame, vals: pl.DataFrame) -> pl.DataFrame:
    """The value at ``rank_in_bin`` (0-based) of each wanted bin: with the distinct values of all
    bins sorted by (key, stage, b, v) and counted cumulatively over the whole table, the first
    value whose cumulative count exceeds the bin's start plus the rank."""
    vals = vals.with_columns(pl.col("n").cum_sum().alias("cum"))
    starts = vals.group_by("key", "stage", "b", maintain_order=True).agg(
        (pl.col("cum").first() - pl.col("n").first()).alias("start"))
    w = wanted.join(starts, on=["key", "stage", "b"], how="left", maintain_order="left")
    if w.get_column("start").null_count():
        raise RuntimeError("streaming percentiles: a target bin has no values in the refine pass (the input "
                           "changed between passes?)")
    idx = np.searchsorted(vals.get_column("cum").to_numpy(),
                          (w.get_column("start") + w.get_column("rank_in_bin")).to_numpy(), side="right")
    return w.with_columns(pl.Series("v", vals.get_column("v").to_numpy()[idx])).drop("start")


def dissect_streaming(
    paths: str | Path | Sequence[str | Path],
    *,
    mapping: ColumnMapping | None = None,
    input_format: str = "auto",
    partition_rows: int = DEFAULT_PARTITION_ROWS,
    engine: str = "local",
    address: str | None = None,
    num_cpus: int | None = None,
    threads: int = 2,
    concurrent_partitions: int = 1,
    progress: bool = False,
    spill: bool = True,
) -> StreamedDissection:
    """Dissect an RPC log without holding it in memory (see the module docstring for the method).

    Args:
        paths: log file(s) or folder(s) of partition files (Parquet, CSV, TSV).
        mapping: column/op names and the time unit, as for :func:`~ddlscope.rpc.readers.read_rpc_log`.
        input_format: ``auto`` (by suffix) or one of :data:`STREAM_FORMATS`.
        partition_rows: rows a partition aims at (memory per task is about this many rows).
        engine: ``local`` or ``ray`` (:data:`ENGINES`).
        address: Ray cluster address (``ray`` only; None starts a local cluster).
        num_cpus: CPUs of a local Ray cluster.
        threads: threads of the concurrency sweep inside a partition.
        concurrent_partitions: partitions processed at a time in threads of this process (engine
            ``local``; the results are the same bits in any order, merged in partition order). The
            passes are Polars and NumPy work that releases the GIL, so this uses more cores; peak
            memory grows with it (about one partition's working set each, see ``partition_rows``).
        progress: show rows read, partitions, rate and ETA on stderr.
        spill: scatter the input per partition (each file read once, :func:`scatter_partitions`)
            and write each partition's checked rows to a temporary folder (``TMPDIR``; about 190
            bytes a row at the peak, removed as it is read or at the end) in the first pass, so the
            other two read them back instead of parsing and checking the input again; not with a
            remote Ray cluster (its nodes do not share this machine's disk).

    Returns:
        A :class:`StreamedDissection`.

    Raises:
        ValueError: no RPC left after the checks (the rejection counts), an unknown engine, text
            ids, ``concurrent_partitions`` < 1 or > 1 with Ray, or the reader's errors;
            ImportError: ``ray`` without Ray installed.
    """
    check_engine(engine)
    if concurrent_partitions < 1:
        raise ValueError(f"concurrent_partitions: expected >= 1, got {concurrent_partitions}")
    if concurrent_partitions > 1 and engine != "local":
        raise ValueError("concurrent_partitions goes with engine local (Ray runs the partitions as concurrent "
                         "tasks, as many as the cluster has CPUs)")
    t0 = time.perf_counter()
    quantiles = QUANTILES  # those of the in-memory percentile table
    plan = plan_stream(paths, mapping=mapping, input_format=input_format, partition_rows=partition_rows)
    spilled = spill and (engine == "local" or address is None)  # a local cluster shares this machine's disk
    bar = _Progress(plan, 4 if spilled and len(plan.partitions) > 1 else 3, progress)
    with contextlib.ExitStack() as stack:
        stack.callback(bar.close)
        if engine == "ray":
            stack.enter_context(ray_session(address, num_cpus))
        if engine == "ray":
            run = _run_ray
        elif concurrent_partitions > 1 and len(plan.partitions) > 1:
            run = functools.partial(_run_threads, workers=concurrent_partitions)
        else:
            run = _run_local
        spill_dir = None
        if spilled:
            spill_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="ddlscope-spill-"))
        raw_dir = None
        if spill_dir is not None and len(plan.partitions) > 1:
            raw_dir = str(Path(spill_dir) / "raw")
            if not scatter_partitions(plan, raw_dir, bar):
                raw_dir = None
        checks = run(pass_check, plan, {"bound_us": MAX_PLAUSIBLE_LATENCY_US, "spill_dir": spill_dir,
                                        "raw_dir": raw_dir}, bar, "check")
        total = sum(c["rows"] for c in checks)
        n_over = sum(c["over"] for c in checks)
        rejected = [c["rejected"] for c in checks]
        notes = list(plan.notes) + list(dict.fromkeys(n for c in checks for n in c["notes"]))
        if total == 0:
            rej = pl.concat(rejected, how="vertical_relaxed") if rejected else empty_rejected()
            raise ValueError(no_rows_message(RpcLog(frame=pl.DataFrame(), rejected=rej,
                                                    files=[f.path for f in plan.files], notes=notes)))
        set_aside = bool(n_over) and 2 * n_over <= total
        steps = merge_iteration_steps([c["steps_under"] for c in checks]
                                      + ([] if set_aside else [c["steps_over"] for c in checks]))
        key = "substage_bad_under" if set_aside else "substage_bad"
        substage_bad: dict[str, int] = {}
        for c in checks:
            for st, n in c[key].items():
                substage_bad[st] = substage_bad.get(st, 0) + n
        ctx = {"bound_us": MAX_PLAUSIBLE_LATENCY_US, "set_aside": set_aside, "steps": steps,
               "substage_bad": substage_bad, "threads": threads, "spill_dir": spill_dir}
        sketches = run(pass_sketch, plan, ctx, bar, "sketch")
        hist = {g: _merge_hist([s["hist"][g] for s in sketches if s["hist"]]) for g in MERGED_GROUPINGS}
        wanted, targets = {}, {}
        for g in MERGED_GROUPINGS:
            wanted[g], targets[g] = _targets(hist[g], quantiles)
        refined = run(pass_refine, plan, {**ctx, "targets": targets}, bar, "refine")
    stages = next(s["stages"] for s in sketches if s["stages"] is not None)
    stage_order = [*stages, "latency"]
    stats = {g: _merge_stats([s["stats"][g] for s in sketches if s["stats"]]) for g in MERGED_GROUPINGS}
    merged = {g: _assemble(g, stats[g], wanted[g], pl.concat([r[g].with_columns(pl.col("key").cast(_KEY_DTYPES[g]))
                                                            for r in refined if g in r]), quantiles, stage_order)
              for g in MERGED_GROUPINGS}
    disjoint = pl.concat([s["percentiles"] for s in sketches if s["percentiles"] is not None])
    for g in DISJOINT_GROUPINGS:  # partitions are in server-text order: sort by the numeric id, stages kept in order
        merged[g] = disjoint.filter(pl.col("grouping") == g).sort(pl.col("group").cast(pl.Int64), maintain_order=True)
    percentiles = pl.concat([merged[g] for g in PERCENTILE_GROUPS])
    moments = merge_concurrency_moments([s["moments"] for s in sketches if s["moments"] is not None])
    fit = fit_from_moments(moments, tuple(stages), STREAM_MEASURES)
    set_aside_rows = [s["set_aside"] for s in sketches if s["set_aside"].height]
    rej = pl.concat(rejected, how="vertical_relaxed").sort("log_file", "log_line", maintain_order=True)
    if set_aside_rows:
        rej = pl.concat([rej, *set_aside_rows], how="vertical_relaxed")
    infos = [s["implausible"] for s in sketches if s["implausible"]]
    implausible: dict[str, Any] = {}
    if infos:
        worst = max(infos, key=lambda i: i["max_us"])
        implausible = {**worst, "rpcs": sum(i["rpcs"] for i in infos)}
    for s in sketches:
        notes.extend(n for n in s["notes"] if n not in notes)
    kept = total - sum(i["rpcs"] for i in infos)
    d = StreamedDissection(
        percentiles=percentiles, stage_summary=summary_from_percentiles(percentiles, stages),
        concurrency_fit=fit, rejected=rej, rpcs=kept, workers=steps.get_column("worker_id").n_unique(),
        servers=sum(c["servers"] for c in checks), connections=sum(c["connections"] for c in checks),
        files=tuple(f.path for f in plan.files), notes=tuple(notes), implausible=MappingProxyType(implausible),
        partitions=len(plan.partitions), engine=engine, wall_s=time.perf_counter() - t0, stages=tuple(stages),
        concurrent_partitions=min(concurrent_partitions, len(plan.partitions)) if engine == "local" else None)
    return d


def summary_from_percentiles(percentiles: pl.DataFrame, stages: Sequence[str]) -> pl.DataFrame:
    """:func:`~ddlscope.rpc.decompose.stage_summary` per op from the merged ``op`` percentiles:
    ``op``, ``rpcs``, ``latency_mean_us``, ``<stage>_mean_us`` and ``<stage>_share`` (mean stage
    over mean latency) -- the same means (sum / count), so the same values."""
    op = percentiles.filter(pl.col("grouping") == "op")
    wide = op.pivot(on="stage", index="group", values="mean_us")
    rpcs = op.filter(pl.col("stage") == "latency").select("group", "rpcs")
    cols = [pl.col("group").cast(pl.Enum(list(OPS))).alias("op"), pl.col("rpcs"),
            pl.col("latency").alias("latency_mean_us")]
    for s in stages:
        cols += [pl.col(s).alias(f"{s}_mean_us"), (pl.col(s) / pl.col("latency")).alias(f"{s}_share")]
    return wide.join(rpcs, on="group").select(cols).sort("op")


def streamed_summary(d: StreamedDissection, stages: Sequence[str]) -> dict[str, Any]:
    """JSON-ready headline numbers of a streamed dissection: the keys of the in-memory summary
    that merge (``files``, ``rpcs``, ``rejected_rows``, ``rejected_by_reason``, ``workers``,
    ``servers``, ``connections``, ``latency_us``, ``mean_stage_share``, ``dominant_stage``,
    ``stages``, ``implausible_latency``, ``notes``) plus ``streaming`` (engine, partitions,
    concurrent_partitions, wall_s, percentiles ``exact``)."""
    overall = d.percentiles.filter(pl.col("grouping") == "all")
    lat = overall.filter(pl.col("stage") == "latency").row(0, named=True)
    means = overall.filter(pl.col("stage") != "latency").select("stage", "mean_us").sort("mean_us", descending=True)
    shares = {st: (m / lat["mean_us"] if lat["mean_us"] else None) for st, m in means.iter_rows()}
    return {
        "files": list(d.files), "rpcs": d.rpcs, "rejected_rows": d.rejected.height,
        "rejected_by_reason": {r["reason"]: r["rows"] for r in d.rejected_counts().iter_rows(named=True)},
        "workers": d.workers, "servers": d.servers, "connections": d.connections,
        "latency_us": {k: lat[f"{k}_us"] for k in ("mean", "p50", "p90", "p99", "p99_9")},
        "mean_stage_share": shares, "dominant_stage": means.row(0)[0] if lat["max_us"] else None,
        "stages": list(stages),
        "implausible_latency": {"rpcs": 0, "bound_us": MAX_PLAUSIBLE_LATENCY_US, **d.implausible},
        "notes": list(d.notes),
        "streaming": {"engine": d.engine, "partitions": d.partitions,
                      "concurrent_partitions": d.concurrent_partitions, "wall_s": d.wall_s, "percentiles": "exact",
                      "concurrency_measures": list(STREAM_MEASURES)},
    }


PARTITIONED_TABLES: dict[str, str] = {"stage_percentiles": "grouping"}
"""Tables written as Parquet datasets too (``tables/<name>/<column>=<value>/*.parquet``, read by
any Arrow/Polars/DuckDB/Spark reader without loading the rest): name -> partition column."""


def write_streamed(d: StreamedDissection, out: str | Path) -> Path:
    """Write a streamed dissection's tables and summary into the report folder ``out``.

    Files: ``summary.json`` (:attr:`StreamedDissection.summary`); ``tables/stage_percentiles.csv``,
    ``stage_summary.csv``, ``concurrency_fit.csv``, ``rejected_rows.csv``; and each table of
    :data:`PARTITIONED_TABLES` as a hive-partitioned Parquet dataset (an earlier dataset of that
    name is replaced). The caller checks the folder first
    (:func:`~ddlscope.report.outdir.check_report_dir`).

    Returns:
        The path of ``summary.json``.
    """
    import json
    import shutil

    out = Path(out)
    tables = out / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    for name, frame in (("stage_percentiles", d.percentiles), ("stage_summary", d.stage_summary),
                        ("concurrency_fit", d.concurrency_fit), ("rejected_rows", d.rejected)):
        frame.write_csv(tables / f"{name}.csv")
    for name, col in PARTITIONED_TABLES.items():
        dataset = tables / name
        if dataset.is_dir():
            shutil.rmtree(dataset)
        {"stage_percentiles": d.percentiles}[name].write_parquet(dataset, partition_by=col)
    path = out / "summary.json"
    path.write_text(json.dumps(d.summary, indent=2, default=str) + "\n")
    return path
