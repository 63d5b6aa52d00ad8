"""Streaming offload simulation: a key column larger than memory (``ddlscope rpc offload --streaming``).

:func:`simulate_offload_streaming` reads one categorical column of CSV/TSV/Parquet files (a file,
or a folder of partition files read in sorted path order as one stream) in batches of
``chunk_rows`` rows with the reader of :mod:`ddlscope.skew.streaming` (Polars' streaming engine),
replays it as data-parallel training (:func:`~ddlscope.skew.streams.emulate_training`: ``workers``
workers of ``batch_events`` events per mini-batch) and returns the same
:class:`~ddlscope.skew.offload.OffloadResult` as :func:`~ddlscope.skew.offload.simulate_offload` on
:func:`~ddlscope.skew.offload.prepare_trace` of the in-memory replay -- every row and figure, equal,
for all four hot-set policies (no policy is approximated; none is refused).

How:

* **Pass 1** (the column, batch by batch): dense key ids by first appearance (the ``value -> key``
  table of :mod:`ddlscope.skew.streaming`, ``N`` rows); the ids are spilled as int32 (4 bytes per
  event) to one file under ``TMPDIR`` (removed at the end, also on error). Then the number of
  events ``M`` gives the iterations ``I = ceil(M / (workers * batch_events))`` and the warm-up.
* **Replay, block by block**: blocks of whole iterations (``max(1, chunk_rows // (workers *
  batch_events))`` of them, so about ``chunk_rows`` events) are read back from the spill (plain
  reads at an offset, not a memory map: mapped pages would count in the resident set) and replayed
  as the in-memory replay does: per worker mini-batch its distinct keys in first-appearance order,
  one pull and one push each, the pulls of an iteration before its pushes. A replayed iteration
  is thus the list ``D`` of (mini-batch, key) firsts; its pushes and its pulls are both ``D``, so
  the pull figures equal the push figures, and a push is the first of its key in the iteration
  when the key first appears in ``D``.
* **Pass 2** (replay): the warm-up counts per key (``static``), the evaluation counts per key
  (``oracle``), and ``lfu`` itself (exact cumulative counts, ranked at each refresh by the
  in-memory ranking); ``static`` is evaluated as soon as the warm-up is over.
* **Pass 3** (replay of the evaluated iterations, with ``oracle``): the ``oracle`` ranks are known
  only once every evaluated iteration has been counted.
* **Space-Saving**, sequential: one replay per capacity, the summary kept from block to block
  (one capacity at a time, so its counters -- at most ``min(N, space_saving_counters ×
  capacity)`` -- are held for one capacity only, as in memory).

Per (policy, capacity) only integer event counts are accumulated (pushes, resident pushes, first
pushes resident, installs, refreshes) and turned into the table's figures by the same function as
in memory (``offload._metrics_of_counts``), so the table is equal bit for bit.

Memory: ``O(N)`` (the key table, a few int64 arrays of ``N``: counts, ranks; the Space-Saving
summary of one capacity) plus ``O(B)`` for a block of ``B = max(chunk_rows, workers ×
batch_events)`` events; not a function of the rows. Disk: 4 bytes per event in ``TMPDIR``.

Not streamed: text files, RPC logs (with their stage times for the latency estimate) and
update-count tables, as in :mod:`ddlscope.skew.streaming`; more than ``2^31 - 1`` distinct keys
(the int32 spill) is refused.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ddlscope.skew.offload import (
    _NOT_RANKED,
    DEFAULT_REFRESH_ITERATIONS,
    DEFAULT_SPACE_SAVING_COUNTERS,
    POLICIES,
    OffloadResult,
    SpaceSaving,
    SwitchLayout,
    _count_leq,
    _metrics_of_counts,
    _offload_row,
    _ranks_from_counts,
    _sweep_notes,
    _sweep_setup,
    budgets_for,
)
from ddlscope.skew.streaming import DEFAULT_CHUNK_ROWS, _KeyIds, column_batches, column_files
from ddlscope.skew.streams import (
    DEFAULT_REPLAY_BATCH_EVENTS,
    DEFAULT_REPLAY_WORKERS,
    replay_hint_events,
    replay_note,
    skipped_text,
)

MAX_SPILL_KEYS = 2**31 - 1
"""Most distinct keys the int32 spill holds."""

_SPILL_DTYPE = np.dtype("<i4")


@dataclass(frozen=True)
class _Block:
    """Replayed iterations ``first_iteration .. first_iteration + k - 1``.

    Attributes:
        first_iteration: the block's first iteration (0-based, of the whole stream).
        keys: key id of each push of the block's iterations, in trace order (the pulls are the
            same keys, before the pushes of their iteration), int64.
        starts: index into ``keys`` of each iteration's first push, shape ``(k + 1,)``.
        first: True on the first push of its key in its iteration.
    """

    first_iteration: int
    keys: np.ndarray
    starts: np.ndarray
    first: np.ndarray

    @property
    def num_iterations(self) -> int:
        """Iterations in the block."""
        return self.starts.size - 1


def replay_block(ids: np.ndarray, first_iteration: int, workers: int, batch_events: int,
                 num_keys: int) -> _Block:
    """Replay raw events as data-parallel training (as :func:`~ddlscope.skew.streams.emulate_training`).

    Args:
        ids: key ids of the raw events of whole iterations (the last may be partial), starting at
            an iteration boundary, int64.
        first_iteration: the iteration of ``ids[0]``.
        workers, batch_events: the replay (``workers × batch_events`` events per iteration).
        num_keys: key ids are ``0..num_keys-1``.

    Returns:
        The block: per iteration the distinct keys of each worker's mini-batch in first-appearance
        order (one push each, one pull each), and which push is the first of its key in the iteration.
    """
    per_iter = workers * batch_events
    n = np.int64(max(num_keys, 1))
    minibatch = np.arange(ids.size, dtype=np.int64) // batch_events
    _, firsts = np.unique(minibatch * n + ids, return_index=True)  # first occurrence of each (mini-batch, key)
    firsts.sort()
    keys = ids[firsts]
    it = firsts // per_iter
    k = math.ceil(ids.size / per_iter)
    starts = np.searchsorted(it, np.arange(k + 1))
    first = np.zeros(keys.size, dtype=bool)
    _, first_push = np.unique(it * n + keys, return_index=True)
    first[first_push] = True
    return _Block(first_iteration, keys, starts, first)


def _blocks(spill: Path, num_events: int, workers: int, batch_events: int, num_keys: int, block_iterations: int,
            start_iteration: int = 0) -> Iterator[_Block]:
    """The replayed blocks from ``start_iteration`` on, read from the spill file."""
    per_iter = workers * batch_events
    n_iter = math.ceil(num_events / per_iter)
    for i0 in range(start_iteration, n_iter, block_iterations):
        a, b = i0 * per_iter, min(num_events, (i0 + block_iterations) * per_iter)
        ids = np.fromfile(spill, dtype=_SPILL_DTYPE, count=b - a, offset=a * _SPILL_DTYPE.itemsize)
        if ids.size != b - a:
            raise OSError(f"{spill}: the spill file ended early ({ids.size} of {b - a} events at event {a})")
        yield replay_block(ids.astype(np.int64), i0, workers, batch_events, num_keys)


class _Hits:
    """Evaluated pushes, resident pushes and resident first pushes, per capacity (int64 counts)."""

    def __init__(self, caps: np.ndarray) -> None:
        self.caps = caps
        self.pushes = 0
        self.hits = np.zeros(caps.size, dtype=np.int64)
        self.forwards = np.zeros(caps.size, dtype=np.int64)

    def add_ranks(self, ranks: np.ndarray, first: np.ndarray) -> None:
        """Pushes whose key has rank ``ranks`` (resident at capacity ``c`` when rank <= c)."""
        self.pushes += int(ranks.size)
        self.hits += _count_leq(np.sort(ranks), self.caps)
        self.forwards += _count_leq(np.sort(ranks[first]), self.caps)

    def metrics(self, j: int) -> dict[str, float]:
        """The figures of capacity ``j``: pulls and pull hits equal pushes and push hits (a replayed
        mini-batch pulls and pushes each of its distinct keys once)."""
        hits = int(self.hits[j])
        return _metrics_of_counts(self.pushes, self.pushes, hits, hits, int(self.forwards[j]), True)


@dataclass
class StreamedOffload:
    """:func:`simulate_offload_streaming`'s result: the simulation and how it ran.

    Attributes:
        result: the :class:`~ddlscope.skew.offload.OffloadResult` (as the in-memory one).
        source: ``path:column``; num_keys: distinct keys; num_events: raw events (non-empty cells).
        replay_note: the note of the replay as training (as :func:`~ddlscope.skew.streams.emulate_training`'s).
        skipped: cells left out, by reason (``empty value``) -> count.
        files: the input files, in reading order; batches: batches read; rows: input rows.
        passes: passes over the spilled events (replays), besides the read.
        spill_bytes: size of the spill file (bytes).
        wall_s: wall time (s).
    """

    result: OffloadResult
    source: str
    num_keys: int
    num_events: int
    replay_note: str
    skipped: dict[str, int]
    files: list[str]
    batches: int
    rows: int
    passes: int
    spill_bytes: int
    wall_s: float


def simulate_offload_streaming(
    path: str | Path,
    column: str,
    layout: SwitchLayout | None = None,
    budgets_bytes: list[int] | None = None,
    policies: tuple[str, ...] = POLICIES,
    warmup_iterations: int | None = None,
    refresh_iterations: int = DEFAULT_REFRESH_ITERATIONS,
    space_saving_counters: float = DEFAULT_SPACE_SAVING_COUNTERS,
    workers: int = DEFAULT_REPLAY_WORKERS,
    batch_events: int = DEFAULT_REPLAY_BATCH_EVENTS,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    on_batch: Callable[[str, int], None] | None = None,
) -> StreamedOffload:
    """The switch offload what-if of one key column, read in batches (see the module docstring);
    equal to ``simulate_offload(prepare_trace(emulate_training(read_categorical_column(path, column),
    workers, batch_events)), ...)``.

    Args:
        path: a CSV/TSV/Parquet file or a folder of them (:func:`~ddlscope.skew.streaming.column_files`).
        column: the categorical column; every non-empty value is one raw event, in row order.
        layout, policies, warmup_iterations, refresh_iterations, space_saving_counters: as
            :func:`~ddlscope.skew.offload.simulate_offload`.
        budgets_bytes: switch memory budgets (bytes); default
            :func:`~ddlscope.skew.offload.budgets_for` the distinct keys (as ``rpc offload``).
        workers, batch_events: the replay as data-parallel training (>= 1 each).
        chunk_rows: input rows per batch, and about the events per replayed block (>= 1).
        on_batch: called as ``on_batch(pass_name, count)`` after each batch read (``count``: its rows;
            pass names starting with ``read``) or block replayed (its pushes; ``replay ...``), for progress.

    Returns:
        :class:`StreamedOffload`.

    Raises:
        FileNotFoundError: no such file or folder.
        ValueError: an argument out of range (checked before reading); a file without the column
            or unreadable (named); no non-empty value; a replay of fewer than 2 iterations (with a
            hint); more than :data:`MAX_SPILL_KEYS` distinct keys; a warm-up of the trace's
            iterations or more.
    """
    t0 = time.perf_counter()
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise ValueError(f"policies: expected some of {', '.join(POLICIES)}, got {list(policies)}")
    if workers < 1 or batch_events < 1:
        raise ValueError(f"workers and batch_events must be >= 1, got {workers} and {batch_events}")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows: expected at least 1, got {chunk_rows}")
    if refresh_iterations < 1:
        raise ValueError(f"refresh_iterations: expected >= 1, got {refresh_iterations}")
    if space_saving_counters < 1:
        raise ValueError(f"space_saving_counters: expected >= 1 counter per entry, got {space_saving_counters}")
    if warmup_iterations is not None and warmup_iterations < 1:
        raise ValueError(f"warmup_iterations: expected >= 1, got {warmup_iterations}")
    if budgets_bytes is not None and (not budgets_bytes or any(b < 0 for b in budgets_bytes)):
        raise ValueError(f"budgets_bytes: expected one or more budgets >= 0, got {list(budgets_bytes)}")
    layout = layout or SwitchLayout()
    files = column_files(path)
    spill_dir = Path(tempfile.mkdtemp(prefix="ddlscope-offload-"))
    try:
        return _run(files, column, f"{path}:{column}", spill_dir / "ids.i32", layout, budgets_bytes, policies,
                    warmup_iterations, refresh_iterations, space_saving_counters, workers, batch_events, chunk_rows,
                    on_batch, t0)
    finally:
        shutil.rmtree(spill_dir, ignore_errors=True)


def _run(files: list, column: str, source: str, spill: Path, layout: SwitchLayout, budgets_bytes: list[int] | None,
         policies: tuple[str, ...], warmup_iterations: int | None, refresh: int, ss_counters: float, workers: int,
         batch_events: int, chunk_rows: int, on_batch: Callable[[str, int], None] | None,
         t0: float) -> StreamedOffload:
    # --- pass 1: key ids, spilled
    keys = _KeyIds()
    m = rows = batches = empty = 0
    with open(spill, "wb") as out:
        for values in column_batches(files, column, chunk_rows):
            rows += values.len()
            blank = values.is_null() | (values.str.strip_chars() == "")
            empty += int(blank.sum())
            ids = keys.ids(values.filter(~blank))
            if keys.table.height > MAX_SPILL_KEYS:
                raise ValueError(f"{source}: more than {MAX_SPILL_KEYS:,} distinct keys: the streamed simulation "
                                 "spills int32 key ids")
            ids.astype(_SPILL_DTYPE).tofile(out)
            m += ids.size
            batches += 1
            if on_batch is not None:
                on_batch("read: key ids, spilled", values.len())
    skipped = {"empty value": empty} if empty else {}
    if m == 0:
        raise ValueError(f"{source}: no key events found (skipped: {skipped_text(skipped)})")
    n = keys.table.height
    del keys  # the labels are not part of the simulation's output
    if (hint := replay_hint_events(m, workers, batch_events)) is not None:
        raise ValueError(f"{source}: the offload simulation needs at least 2 iterations (warm-up + evaluation): "
                         f"{hint}")
    n_iter = math.ceil(m / (workers * batch_events))
    budgets, warmup, caps = _sweep_setup(n_iter, layout, budgets_bytes if budgets_bytes is not None
                                         else budgets_for(n, layout), policies, warmup_iterations, refresh,
                                         ss_counters)
    top = int(caps.max()) if caps.size else 0
    block_iterations = max(1, chunk_rows // (workers * batch_events))

    def blocks(start: int = 0) -> Iterator[_Block]:
        return _blocks(spill, m, workers, batch_events, n, block_iterations, start)

    def progress(name: str, blk: _Block) -> None:
        if on_batch is not None:
            on_batch(name, int(blk.keys.size))

    per_policy: dict[str, tuple[list[dict[str, float]], list[int], list[int]]] = {}
    passes = 0
    # --- pass 2: static, lfu, and the oracle's counts
    rank_policies = [p for p in ("static", "lfu", "oracle") if p in policies]
    if rank_policies:
        passes += 1
        warm_counts = np.zeros(n, dtype=np.int64)
        eval_counts = np.zeros(n, dtype=np.int64)
        static_ranks: np.ndarray | None = None
        lfu_counts = np.zeros(n, dtype=np.int64)
        lfu_ranks = lfu_prev = np.full(n, _NOT_RANKED, dtype=np.int64)
        lfu_installs = np.zeros(caps.size, dtype=np.int64)
        lfu_refreshes = 0
        hits = {p: _Hits(caps) for p in rank_policies}
        for blk in blocks():
            k, i0 = blk.num_iterations, blk.first_iteration
            split = int(blk.starts[min(max(warmup - i0, 0), k)])  # pushes of warm-up iterations: [0, split)
            warm, evaluated, first = blk.keys[:split], blk.keys[split:], blk.first[split:]
            if warm.size:
                warm_counts += np.bincount(warm, minlength=n)
                lfu_counts += np.bincount(warm, minlength=n)
            if i0 + k > warmup:  # the block has evaluated iterations
                if "static" in hits:
                    if static_ranks is None:
                        static_ranks = _ranks_from_counts(warm_counts, top)
                    hits["static"].add_ranks(static_ranks[evaluated], first)
                if "oracle" in hits:
                    eval_counts += np.bincount(evaluated, minlength=n)
                if "lfu" in hits:
                    per_event = np.empty(evaluated.size, dtype=np.int64)
                    for j in range(max(warmup - i0, 0), k):
                        a, b = int(blk.starts[j]), int(blk.starts[j + 1])
                        if (i0 + j - warmup) % refresh == 0:
                            lfu_ranks = _ranks_from_counts(lfu_counts, top)
                            lfu_installs += (_count_leq(np.sort(lfu_ranks), caps)
                                             - _count_leq(np.sort(np.maximum(lfu_ranks, lfu_prev)), caps))
                            lfu_prev = lfu_ranks
                            lfu_refreshes += 1
                        per_event[a - split:b - split] = lfu_ranks[blk.keys[a:b]]
                        lfu_counts += np.bincount(blk.keys[a:b], minlength=n)
                    hits["lfu"].add_ranks(per_event, first)
            progress(f"replay 1: {', '.join(p if p != 'oracle' else 'oracle counts' for p in rank_policies)}", blk)
        if "static" in hits and static_ranks is not None:  # (warmup < n_iter: set by the first evaluated block)
            installs = _count_leq(np.sort(static_ranks[static_ranks != _NOT_RANKED]), caps)
            per_policy["static"] = ([hits["static"].metrics(j) for j in range(caps.size)],
                                    [int(x) for x in installs], [1] * caps.size)
        if "lfu" in hits:
            per_policy["lfu"] = ([hits["lfu"].metrics(j) for j in range(caps.size)],
                                 [int(x) for x in lfu_installs], [lfu_refreshes] * caps.size)
        # --- pass 3: the oracle, over the evaluated iterations
        if "oracle" in hits:
            passes += 1
            oracle_ranks = _ranks_from_counts(eval_counts, top)
            for blk in blocks(warmup):
                hits["oracle"].add_ranks(oracle_ranks[blk.keys], blk.first)
                progress("replay 2: oracle", blk)
            installs = _count_leq(np.sort(oracle_ranks[oracle_ranks != _NOT_RANKED]), caps)
            per_policy["oracle"] = ([hits["oracle"].metrics(j) for j in range(caps.size)],
                                    [int(x) for x in installs], [1] * caps.size)
    # --- Space-Saving: one sequential replay per capacity
    if "space_saving" in policies:
        ss_rows: tuple[list[dict[str, float]], list[int], list[int]] = ([], [], [])
        for cap in caps.tolist():
            passes += 1
            metrics, installs_c, refreshes = _space_saving_streamed(blocks(), n, warmup, refresh, int(cap),
                                                                    ss_counters, progress)
            ss_rows[0].append(metrics)
            ss_rows[1].append(installs_c)
            ss_rows[2].append(refreshes)
        per_policy["space_saving"] = ss_rows
    rows_out: list[dict[str, Any]] = []
    for policy in policies:
        metrics, installs_l, refreshes_l = per_policy[policy]
        for j, (budget, cap) in enumerate(zip(budgets, caps.tolist(), strict=True)):
            rows_out.append(_offload_row(policy, budget, cap, dict(metrics[j]), installs_l[j], refreshes_l[j],
                                         layout))
    result = OffloadResult(pl.DataFrame(rows_out), layout, warmup, n_iter - warmup, refresh,
                           _sweep_notes(layout, warmup, n_iter, refresh))
    return StreamedOffload(result, source, n, m, replay_note(m, workers, batch_events), skipped,
                           [f.path for f in files], batches, rows, passes, m * _SPILL_DTYPE.itemsize,
                           time.perf_counter() - t0)


def _space_saving_streamed(blocks: Iterator[_Block], n: int, warmup: int, refresh: int, capacity: int,
                           counters_factor: float, progress: Callable[[str, _Block], None],
                           ) -> tuple[dict[str, float], int, int]:
    """The ``space_saving`` policy at one capacity over the replayed blocks, as
    ``offload._space_saving_policy``: the summary fed every push in order, the top ``capacity``
    installed at each refresh. Returns the figures, installs and refreshes."""
    ss = SpaceSaving(max(capacity, math.ceil(counters_factor * capacity)))
    mask = np.zeros(n, dtype=bool)
    installs = refreshes = pushes = hits = forwards = 0
    for blk in blocks:
        keys = blk.keys.tolist()
        for j in range(blk.num_iterations):
            i = blk.first_iteration + j
            a, b = int(blk.starts[j]), int(blk.starts[j + 1])
            if i >= warmup:
                if (i - warmup) % refresh == 0:
                    new = np.zeros(n, dtype=bool)
                    new[ss.top(capacity)] = True
                    installs += int((new & ~mask).sum())
                    mask = new
                    refreshes += 1
                resident = mask[blk.keys[a:b]]
                pushes += b - a
                hits += int(resident.sum())
                forwards += int((resident & blk.first[a:b]).sum())
            ss.update(keys[a:b])
        progress(f"replay: space_saving, {capacity:,} keys", blk)
    return _metrics_of_counts(pushes, pushes, hits, hits, forwards, True), installs, refreshes
