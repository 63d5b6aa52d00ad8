"""Streaming skew analysis: a key column larger than memory (``ddlscope rpc skew --streaming``).

:func:`analyze_skew_streaming` reads one categorical column of CSV/TSV/Parquet files (a file, or a
folder of partition files read in sorted path order as one stream) in batches of ``chunk_rows``
rows (Polars' streaming engine: Parquet row groups, CSV batches) and returns the same
:class:`~ddlscope.skew.frequency.SkewAnalysis` as :func:`~ddlscope.skew.frequency.analyze_skew`
on :func:`~ddlscope.skew.streams.read_categorical_column` -- every table and figure, computed
exactly, not from sketches. Only state whose size is a function of the distinct keys ``N`` (and of
the windows) is held between batches; the events themselves are spilled as key ids (int32/int64
``.npy``, 4-8 bytes per event, under ``TMPDIR``, removed at the end) for the second pass.

Pass 1, batch by batch:

* **key ids** by first appearance (a ``value -> key`` table, ``N`` rows) and the **count per key**
  (``N`` int64): the rank-frequency table, the Zipf and power-law fits and the coverage are then
  the in-memory functions on these counts;
* **reuse distance** (LRU stack distance), exact: the batch is prefixed with the LRU stack (every
  key seen so far once, least recently used first), and
  :func:`~ddlscope.skew.locality.reuse_distances` run on that. This is exact because the distinct
  keys accessed between an access and the previous access to its key are the same in the stack
  as in the full history (the stack keeps each key at its last access). The distances go into an
  exact histogram (at most ``N`` bins), from which the median, p90 (NumPy's linear quantile,
  replayed on the two order statistics) and the LRU hit-ratio curve follow;
* **reuse time** (accesses in between), from the last position of every key: counted in value
  bins (:func:`~ddlscope.rpc.streaming.value_bins`, the top 10 bits of a value).

Pass 2, over the spilled key ids: the reuse times again, keeping only the distinct values (with
their counts) of the one or two bins that hold the median's order statistics, so the median is
**exact** (two-pass; a bin spans at most 0.2 % of its values, so few distinct values);
and the **hot-set churn** per window of ``window`` events by the in-memory
:func:`~ddlscope.skew.frequency.hot_set_churn` on blocks of whole windows, each block prefixed with
the window before it (the previous hot set), since the hot set's ties are broken by the global
rank, known only after pass 1.

Tested equal to the in-memory analysis (every table and summary figure) on the Criteo, Avazu and
Alimama samples of the shared data and on synthetic Zipf streams written as Parquet partitions and
CSV (``tests/skew/test_skew_streaming.py``).

Not streamed: text files, RPC logs and update-count tables (their event order is a sort over the
whole input) and ``--vocabulary`` (a column has no integer keys); ``rpc offload --streaming`` reads
the same sources with this reader (:mod:`ddlscope.skew.offload_streaming`). The CSV reader
is Polars' plain one: a line with more fields than the header stops the run with an error naming
the file, and lines with fewer fields are read with nulls (empty values), as the in-memory reader
pads them.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from ddlscope.rpc.streaming import value_bins
from ddlscope.skew.frequency import (
    COVERAGE_FRACTIONS,
    DEFAULT_HOT_FRACTION,
    DEFAULT_WINDOW_EVENTS,
    SkewAnalysis,
    count_fits,
    coverage,
    hot_set_churn,
    rank_frequency,
)
from ddlscope.skew.locality import default_cache_sizes, reuse_distances
from ddlscope.skew.streams import skipped_text

DEFAULT_CHUNK_ROWS = 1_000_000
"""Input rows per batch of :func:`analyze_skew_streaming`."""
STREAM_SUFFIXES: dict[str, str] = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".tsv": "tsv",
                                   ".txt": "csv"}
"""File suffixes a folder is searched for, and their format (``.txt``: CSV, as the Criteo samples)."""
EVENT_KINDS: tuple[str, ...] = ("updates", "accesses", "all")
"""``events`` values (a column's events are raw occurrences: every kind counts all of them)."""


@dataclass(frozen=True)
class ColumnFile:
    """One input file: ``path`` and ``fmt`` (``csv``, ``tsv`` or ``parquet``)."""

    path: str
    fmt: str


def column_files(path: str | Path) -> list[ColumnFile]:
    """The files of ``path``: a file as given (``.parquet``/``.pq`` Parquet, ``.tsv`` TSV, anything
    else CSV), a folder replaced by its ``.parquet``, ``.pq``, ``.csv``, ``.tsv`` and ``.txt`` files
    (recursively, sorted by path; hidden and ``_``-prefixed files skipped).

    Raises:
        FileNotFoundError: no such file or folder.
        ValueError: a folder without such files.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file or folder")
    if not p.is_dir():
        return [ColumnFile(str(p), STREAM_SUFFIXES.get(p.suffix.lower(), "csv").replace("txt", "csv"))]
    found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in STREAM_SUFFIXES
                   and not any(part.startswith((".", "_")) for part in f.relative_to(p).parts))
    if not found:
        raise ValueError(f"{p}: a folder without {', '.join(STREAM_SUFFIXES)} files")
    return [ColumnFile(str(f), STREAM_SUFFIXES[f.suffix.lower()]) for f in found]


def _scan(f: ColumnFile) -> pl.LazyFrame:
    if f.fmt == "parquet":
        return pl.scan_parquet(f.path)
    return pl.scan_csv(f.path, separator="\t" if f.fmt == "tsv" else ",", infer_schema=False,
                       missing_columns="insert")


def column_batches(files: Sequence[ColumnFile], column: str, chunk_rows: int) -> Iterator[pl.Series]:
    """The values of ``column`` (as String; null for an empty CSV cell) in batches of about
    ``chunk_rows`` rows, file after file.

    Raises:
        ValueError: a file without ``column`` (the message lists its columns), or one the reader
            cannot parse (named).
    """
    for f in files:
        lf = _scan(f)
        try:
            names = lf.collect_schema().names()
        except pl.exceptions.PolarsError as e:
            raise ValueError(f"{f.path}: not readable as {f.fmt} ({str(e).strip().splitlines()[0]})") from e
        if column not in names:
            raise ValueError(f"{f.path}: no column {column!r} (columns: {', '.join(names)})")
        try:
            for batch in lf.select(pl.col(column).cast(pl.String)).collect_batches(chunk_size=chunk_rows):
                yield batch.get_column(column)
        except pl.exceptions.PolarsError as e:
            raise ValueError(f"{f.path}: not readable as {f.fmt} by the streaming reader "
                             f"({str(e).strip().splitlines()[0]}); analyse it without --streaming") from e


class _KeyIds:
    """Dense key ids by first appearance over the whole stream (a ``value -> key`` table)."""

    def __init__(self) -> None:
        self.table = pl.DataFrame(schema={"value": pl.String, "key": pl.Int64})

    def ids(self, values: pl.Series) -> np.ndarray:
        """The ids of ``values`` (non-null), new values numbered in order of first appearance."""
        frame = values.alias("value").to_frame()
        new = frame.unique(maintain_order=True).join(self.table, on="value", how="anti", maintain_order="left")
        if new.height:
            new = new.with_columns(pl.int_range(self.table.height, self.table.height + new.height,
                                                dtype=pl.Int64).alias("key"))
            self.table = pl.concat([self.table, new])
        return frame.join(self.table, on="value", how="left", maintain_order="left").get_column("key").to_numpy()


def _grow(arr: np.ndarray, size: int, fill: int = 0) -> np.ndarray:
    """``arr`` extended to ``size`` elements with ``fill``."""
    if arr.size >= size:
        return arr
    return np.concatenate([arr, np.full(max(size, 2 * arr.size) - arr.size, fill, dtype=arr.dtype)])


def _last_positions(ids: np.ndarray) -> np.ndarray:
    """The positions of each key's last occurrence in ``ids``, in increasing order."""
    _, first_of_reversed = np.unique(ids[::-1], return_index=True)
    return np.sort(ids.size - 1 - first_of_reversed)


def _reuse_times(ids: np.ndarray, last_pos: np.ndarray, offset: int) -> np.ndarray:
    """Reuse times of a batch whose first event is at stream position ``offset``; ``last_pos[key]``
    is the key's last position before the batch (``-1``: never); ``-1`` for a first access."""
    pos = np.arange(offset, offset + ids.size, dtype=np.int64)
    prev = last_pos[ids].copy()
    order = np.argsort(ids, kind="stable")
    same = ids[order][1:] == ids[order][:-1]
    prev[order[1:][same]] = pos[order[:-1][same]]
    return np.where(prev >= 0, pos - prev - 1, -1)


def _update_last(last_pos: np.ndarray, ids: np.ndarray, offset: int) -> None:
    at = _last_positions(ids)
    last_pos[ids[at]] = offset + at


def numpy_median_of(a: float, b: float, n: int) -> float:
    """``np.median`` of ``n`` values whose middle order statistics (ranks ``(n-1)//2`` and
    ``n//2``) are ``a`` and ``b``: the mean of one (odd ``n``) or both, as NumPy computes it."""
    return float(np.mean(np.array([a] if n % 2 else [a, b], dtype=np.int64)))


def numpy_quantile_of(sorted_at: Callable[[int], int], n: int, q: float) -> float:
    """``np.quantile(x, q)`` (method ``linear``, Hyndman & Fan type 7) of ``n`` int64 values, from
    ``sorted_at(i)``, the ``i``-th smallest: NumPy 2's virtual index ``(n - 1) q`` and its
    two-sided interpolation (``b - (b - a)(1 - g)`` for ``g >= 0.5``), replayed so that the figure
    is bit-for-bit NumPy's."""
    vi = np.float64(n - 1) * q
    lo = int(np.floor(vi))
    gamma = np.float64(vi - lo)
    lo_c, hi_c = min(max(lo, 0), n - 1), min(max(lo + 1, 0), n - 1)
    if vi < 0:
        lo_c = hi_c = 0
    elif vi >= n - 1:
        lo_c = hi_c = n - 1
    a, b = np.int64(sorted_at(lo_c)), np.int64(sorted_at(hi_c))
    diff = b - a
    return float(b - diff * (1 - gamma)) if gamma >= 0.5 else float(a + diff * gamma)


def _rank_in_hist(hist: np.ndarray, rank: int) -> int:
    """The ``rank``-th (0-based) smallest value of a histogram ``hist[value] = count``."""
    return int(np.searchsorted(np.cumsum(hist), rank, side="right"))


@dataclass
class StreamedSkew:
    """:func:`analyze_skew_streaming`'s result: the analysis and how it ran.

    Attributes:
        analysis: the :class:`~ddlscope.skew.frequency.SkewAnalysis` (as the in-memory one).
        files: the input files, in reading order; batches: batches read; rows: input rows.
        wall_s: wall time (s).
    """

    analysis: SkewAnalysis
    files: list[str]
    batches: int
    rows: int
    wall_s: float


def analyze_skew_streaming(
    path: str | Path,
    column: str,
    events: str = "updates",
    window: int = DEFAULT_WINDOW_EVENTS,
    hot_fraction: float = DEFAULT_HOT_FRACTION,
    support: int | None = None,
    fractions: tuple[float, ...] = COVERAGE_FRACTIONS,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    on_batch: Callable[[str, int], None] | None = None,
) -> StreamedSkew:
    """The frequency model of one key column, read in batches (see the module docstring).

    Args:
        path: a CSV/TSV/Parquet file or a folder of them (:func:`column_files`).
        column: the categorical column; every non-empty value is one event, in row order.
        events, window, hot_fraction, support, fractions: as :func:`~ddlscope.skew.frequency.analyze_skew`.
        chunk_rows: input rows per batch (>= 1).
        on_batch: called as ``on_batch(pass_name, rows)`` after each batch (progress).

    Raises:
        FileNotFoundError: no such file or folder.
        ValueError: ``events``, ``window``, ``hot_fraction`` or ``chunk_rows`` out of range; a file
            without the column or unreadable (named); no non-empty value.
    """
    t0 = time.perf_counter()
    if events not in EVENT_KINDS:
        raise ValueError(f"events: expected one of {', '.join(EVENT_KINDS)}, got {events!r}")
    if not 0 < hot_fraction <= 1:
        raise ValueError(f"hot_fraction: expected (0, 1], got {hot_fraction}")
    if window < 1:
        raise ValueError(f"window: expected >= 1 events, got {window}")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows: expected at least 1, got {chunk_rows}")
    files = column_files(path)
    source = f"{path}:{column}"
    spill = Path(tempfile.mkdtemp(prefix="ddlscope-skew-"))
    try:
        return _run(files, column, source, spill, events, window, hot_fraction, support, fractions, chunk_rows,
                    on_batch, t0)
    finally:
        shutil.rmtree(spill, ignore_errors=True)


def _run(files: list[ColumnFile], column: str, source: str, spill: Path, events: str, window: int,
         hot_fraction: float, support: int | None, fractions: tuple[float, ...], chunk_rows: int,
         on_batch: Callable[[str, int], None] | None, t0: float) -> StreamedSkew:
    keys = _KeyIds()
    counts = np.zeros(1024, dtype=np.int64)
    last_pos = np.full(1024, -1, dtype=np.int64)
    stack = np.zeros(0, dtype=np.int64)  # every key seen once, least recently used first
    dist_hist = np.zeros(1024, dtype=np.int64)
    time_bins: dict[int, int] = {}
    empty = rows = m = batches = 0
    spilled: list[Path] = []
    # --- pass 1
    for values in column_batches(files, column, chunk_rows):
        rows += values.len()
        blank = values.is_null() | (values.str.strip_chars() == "")
        empty += int(blank.sum())
        ids = keys.ids(values.filter(~blank))
        if ids.size:
            n = keys.table.height
            counts, last_pos = _grow(counts, n), _grow(last_pos, n, -1)
            counts[:n] += np.bincount(ids, minlength=n)
            both = np.concatenate([stack, ids])
            dist = reuse_distances(both)[stack.size:]
            warm = dist[dist >= 0]
            if warm.size:
                dist_hist = _grow(dist_hist, int(warm.max()) + 1)
                dist_hist[:int(warm.max()) + 1] += np.bincount(warm)
            stack = both[_last_positions(both)]
            rt = _reuse_times(ids, last_pos, m)
            b, nb = np.unique(value_bins(rt[rt >= 0]), return_counts=True)
            for k, v in zip(b.tolist(), nb.tolist(), strict=True):
                time_bins[k] = time_bins.get(k, 0) + v
            _update_last(last_pos, ids, m)
            dtype = np.int32 if n < 2**31 else np.int64
            spilled.append(spill / f"ids-{batches:06d}.npy")
            np.save(spilled[-1], ids.astype(dtype))
            m += ids.size
        batches += 1
        if on_batch is not None:
            on_batch("pass 1 of 2: counts, reuse distances", values.len())
    if m == 0:
        skipped = {"empty value": empty} if empty else {}
        raise ValueError(f"{source}: no key events found (skipped: {skipped_text(skipped)})")
    n = keys.table.height
    counts = counts[:n]
    # --- the figures of the counts, by the in-memory functions
    seen, zipf, power_law, lognormal, comparison = count_fits(counts, support)
    n_warm = int(dist_hist.sum())
    # --- pass 2: exact reuse-time median, hot-set churn
    hot_keys = max(1, math.ceil(hot_fraction * seen - 1e-9))
    lo_rank, hi_rank = (n_warm - 1) // 2, n_warm // 2
    bins = np.array(sorted(time_bins), dtype=np.int64)
    cum = np.cumsum([time_bins[b] for b in bins.tolist()]) if bins.size else np.zeros(0, np.int64)
    wanted = {int(bins[np.searchsorted(cum, r, side="right")]) for r in (lo_rank, hi_rank)} if n_warm else set()
    in_wanted: dict[int, int] = {}
    last_pos = np.full(n, -1, dtype=np.int64)
    churn_parts: list[pl.DataFrame] = []
    pending = np.zeros(0, dtype=np.int64)
    prev_window = np.zeros(0, dtype=np.int64)
    done_windows = 0
    offset = 0
    desc = f"{window} events"

    def churn_block(block: np.ndarray, has_prev: bool, first_window: int) -> None:
        ev = pl.DataFrame({"key": block, "count": np.ones(block.size, dtype=np.int64)}).with_columns(
            pl.lit(None, dtype=pl.Int64).alias("iteration"))
        part, _ = hot_set_churn(ev, counts, hot_keys, window)
        if has_prev:
            part = part.slice(1)
        churn_parts.append(part.with_columns((pl.col("window") + first_window).cast(pl.Int64)))

    for f in spilled:
        ids = np.load(f).astype(np.int64)
        rt = _reuse_times(ids, last_pos, offset)
        warm_rt = rt[rt >= 0]
        if wanted:  # the distinct values of the wanted bins and their counts (a bin spans <= 0.2 % of its values)
            v, nv = np.unique(warm_rt[np.isin(value_bins(warm_rt), list(wanted))], return_counts=True)
            for k, x in zip(v.tolist(), nv.tolist(), strict=True):
                in_wanted[k] = in_wanted.get(k, 0) + x
        _update_last(last_pos, ids, offset)
        offset += ids.size
        pending = np.concatenate([pending, ids])
        whole = pending.size // window * window
        if whole:
            churn_block(np.concatenate([prev_window, pending[:whole]]), prev_window.size > 0,
                        done_windows - (1 if prev_window.size else 0))
            prev_window = pending[whole - window:whole]
            done_windows += whole // window
            pending = pending[whole:]
        if on_batch is not None:
            on_batch("pass 2 of 2: reuse times, churn", ids.size)
    if pending.size:
        churn_block(np.concatenate([prev_window, pending]), prev_window.size > 0,
                    done_windows - (1 if prev_window.size else 0))
    churn = pl.concat(churn_parts, rechunk=True)  # one chunk: the summary's means sum in the in-memory order
    # --- reuse summary: exact order statistics
    if n_warm:
        def dist_at(i: int) -> int:
            return _rank_in_hist(dist_hist, i)
        vals = np.array(sorted(in_wanted), dtype=np.int64)
        vcum = np.cumsum([in_wanted[v] for v in vals.tolist()])
        below = int(cum[np.searchsorted(bins, min(wanted)) - 1]) if np.searchsorted(bins, min(wanted)) else 0

        def time_at(i: int) -> int:
            return int(vals[np.searchsorted(vcum, i - below, side="right")])
        reuse_summary = {
            "cold_miss_share": float(1 - n_warm / m),
            "reuse_distance_median": numpy_median_of(dist_at(lo_rank), dist_at(hi_rank), n_warm),
            "reuse_distance_p90": numpy_quantile_of(dist_at, n_warm, 0.9),
            "reuse_time_median": numpy_median_of(time_at(lo_rank), time_at(hi_rank), n_warm),
        }
        top = int(np.flatnonzero(dist_hist)[-1]) + 1
    else:
        reuse_summary = {"cold_miss_share": float(1 - n_warm / m), "reuse_distance_median": float("nan"),
                         "reuse_distance_p90": float("nan"), "reuse_time_median": float("nan")}
        top = 1
    sizes = default_cache_sizes(top)
    cumd = np.concatenate([[0], np.cumsum(dist_hist)])
    hits = cumd[np.minimum(sizes, dist_hist.size)]  # distances < size
    reuse = pl.DataFrame({"cache_keys": sizes, "lru_hit_ratio": hits / m,
                          "accesses": np.full(sizes.size, m, dtype=np.int64)})
    key_table = keys.table.select("key", pl.col("value").alias("label"), pl.lit(None, dtype=pl.Int64).alias("table_id"),
                                  pl.lit(None, dtype=pl.Int64).alias("raw_key"))
    analysis = SkewAnalysis(
        source=source, kind="column", events_kind=events, num_events=int(counts.sum()), num_keys=seen,
        ranks=rank_frequency(counts, key_table), zipf=zipf, power_law=power_law, lognormal=lognormal,
        comparison=comparison, coverage=coverage(counts, fractions), reuse=reuse, reuse_summary=reuse_summary,
        churn=churn, churn_window=desc, hot_keys=hot_keys,
        skipped={"empty value": empty} if empty else {},
        notes=(f"column {column!r}: one event per non-empty cell",),
    )
    return StreamedSkew(analysis, [f.path for f in files], batches, rows, time.perf_counter() - t0)
