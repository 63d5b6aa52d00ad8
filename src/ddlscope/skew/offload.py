"""What an in-network aggregator (a programmable switch) holding a hot set would take off the
parameter servers: a trace-driven simulation over memory budgets and hot-set policies.

The model (reconstruction; the IMC 2020 study proposes offloading hot parameters to in-network
computation, and its authors' later Libra work aggregates only hot parameters on switches):

* **Memory.** The switch holds ``capacity = floor(budget_bytes / entry_bytes)`` rows. An entry is
  the row, ``embedding_dim × value_bytes`` (default 4-byte values: switch ALUs add 32-bit
  integers, so SwitchML converts gradients to 32-bit fixed point — Sapio et al., NSDI 2021;
  ``data_t`` is ``bit<32>`` in microsoft/SwitchML ``p4/types.p4``), plus per-entry overhead:
  an 8-byte parameter key for the exact-match look-up of a sparse row (Libra-style key-addressed
  aggregation), a 4-byte worker bitmap (SwitchML's ``worker_bitmap_t`` is ``bit<32>``; ATP keeps a
  similar per-aggregator bitmap — Lao et al., NSDI 2021) and a 4-byte counter (SwitchML keeps an
  8-bit count of workers; we give 32 bits so it can also hold the access count LFU and
  Space-Saving need): 16 bytes per entry by default. Match-table overheads of the switch ASIC
  (hash ways, action data) are not modelled.
* **Time.** The trace is a sequence of iterations. The control plane installs the hot set at
  iteration boundaries (every ``refresh_iterations``); within an iteration the set is fixed.
  The first ``warmup_iterations`` only train the policies; all figures are over the rest (the
  evaluation iterations), the same events for every policy.
* **Pushes.** A push of a resident key is aggregated in the switch; at the end of the iteration
  the switch forwards one aggregated update per resident key to the server, which applies it
  (optimizer state stays on the server). A push of a non-resident key goes to the server as
  before. Server work = updates applied.
* **Pulls.** A pull of a resident key is answered by the switch, which keeps a current copy: the
  server writes each aggregated row back after applying it (one row per resident key updated
  per iteration). Installing a key (a hot-set change) also moves one row from the server.
* **Bytes at the server.** Every row message (a push, a pull response, a forwarded aggregate, a
  write-back, an install) costs ``embedding_dim × wire_value_bytes + wire_key_bytes``.

Hot-set policies (the hotness of a key = its update count; pull count when there are no pushes):

* ``static``: the top ``capacity`` keys of the warm-up iterations, installed once;
* ``lfu``: at each refresh, the top ``capacity`` keys by exact cumulative count of all earlier
  iterations (perfect LFU, counted by the servers, installed by the control plane);
* ``space_saving``: at each refresh, the ``capacity`` keys with the largest counts in a
  Space-Saving summary (Metwally, Agrawal & El Abbadi, ICDT 2005) of
  ``space_saving_counters × capacity`` counters (default 4x) fed every hot event so far, in
  order (when the summary is full, an unmonitored key replaces the key with the smallest count,
  ties broken by the earliest to reach that count, and inherits that count plus its weight).
  The summary lives beside the rows (in the switch's spare registers or the control plane; its
  memory is not charged to the budget);
* ``oracle``: the top ``capacity`` keys of the evaluation iterations themselves, installed once —
  the best any static set can do (uses the future; an upper bound, not a policy).

Ranking ties are broken by first appearance of the key in the trace.
"""

from __future__ import annotations

import heapq
import json
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ddlscope.skew.latency import estimate_latency_gain
from ddlscope.skew.streams import KeyStream

POLICIES: tuple[str, ...] = ("static", "lfu", "space_saving", "oracle")
"""Hot-set policies (module docstring)."""

DEFAULT_KEY_BYTES = 8
"""Per-entry key: a 64-bit parameter key."""
DEFAULT_METADATA_BYTES = 8
"""Per-entry metadata: a 32-bit worker bitmap (SwitchML ``worker_bitmap_t``) + a 32-bit counter."""
DEFAULT_VALUE_BYTES = 4
"""In-switch value: 32-bit integer (SwitchML ``data_t``)."""

DEFAULT_EMBEDDING_DIM = 64
"""Values per embedding row (a common embedding width of sparse CTR models)."""
DEFAULT_WIRE_VALUE_BYTES = 4
"""Bytes per value on the wire: fp32 gradients and rows."""
DEFAULT_REFRESH_ITERATIONS = 1
"""The control plane re-installs the hot set every iteration (``lfu``, ``space_saving``)."""

DEFAULT_SPACE_SAVING_COUNTERS = 4.0
"""Space-Saving counters per switch entry. A counter (key + count, 12 B) is far smaller than an
entry (a row), and Space-Saving only guarantees the keys above ``total / counters`` (Metwally et
al. 2005), so the summary keeps more counters than the switch has entries and the top ones are
installed."""

@dataclass(frozen=True)
class EmbeddingDim:
    """The embedding dimension of an offload simulation and where it came from.

    Attributes:
        dim: values per row.
        source: ``option`` (``--dim``), ``run.json`` (the ps-train run folder of the log),
            ``message sizes`` (inferred from the log's pull responses) or ``assumed``
            (:data:`DEFAULT_EMBEDDING_DIM`).
        detail: one sentence saying how it was found (for the notes, and a warning when assumed).
    """

    dim: int
    source: str
    detail: str

    @property
    def assumed(self) -> bool:
        """Whether nothing gave the dimension (a warning is due)."""
        return self.source == "assumed"


def embedding_dim_from_run_json(log_path: str | Path) -> tuple[int | None, str]:
    """The embedding dimension written by ``ddlscope ps-train`` in the ``run.json`` beside the
    log: ``model.tables[].dim`` (all tables alike), else ``effective.dim``.

    Returns:
        ``(dim or None, detail)``: None when there is no readable ``run.json``, it gives no
        dimension, or its tables differ (the detail says which).
    """
    run = Path(log_path).parent / "run.json"
    if not run.is_file():
        return None, f"no {run}"
    try:
        data = json.loads(run.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"{run}: not readable as JSON ({exc})"
    tables = (data.get("model") or {}).get("tables") if isinstance(data, dict) else None
    dims = sorted({t.get("dim") for t in tables if isinstance(t, dict)}) if isinstance(tables, list) else []
    dims = [d for d in dims if isinstance(d, int) and not isinstance(d, bool) and d >= 1]
    if len(dims) > 1:
        return None, f"{run}: the tables have dimensions {', '.join(map(str, dims))}; give --dim"
    if dims:
        return dims[0], f"{run}: model.tables dim {dims[0]}"
    eff = (data.get("effective") or {}).get("dim") if isinstance(data, dict) else None
    if isinstance(eff, int) and not isinstance(eff, bool) and eff >= 1:
        return eff, f"{run}: effective.dim {eff}"
    return None, f"{run}: no embedding dimension in it"


MIN_SIZE_FIT_RPCS = 3
"""Pull responses (with distinct key counts) needed to read the dimension from message sizes."""


def embedding_dim_from_sizes(frame: pl.DataFrame, wire_value_bytes: int = DEFAULT_WIRE_VALUE_BYTES,
                             ) -> tuple[int | None, str]:
    """The embedding dimension a log's ``pull_sparse`` responses imply: each response carries the
    ``num_keys`` rows asked for, so ``response_bytes = header + num_keys × dim × wire_value_bytes``
    and the least-squares slope of ``response_bytes`` on ``num_keys`` over the RPCs is ``dim ×
    wire_value_bytes`` (ps-train's framing: a fixed header plus the raw float32 block,
    :mod:`ddlscope.pstrain.wire`; other frameworks' per-message overhead is constant too).

    Accepted when at least :data:`MIN_SIZE_FIT_RPCS` pulls with keys and 2 distinct key counts fit
    with R² >= 0.999 and a slope within 2 % of a whole number of values.

    Returns:
        ``(dim or None, detail)``.
    """
    need = {"op", "num_keys", "response_bytes"}
    if not need <= set(frame.columns):
        return None, f"the log has no {', '.join(sorted(need - set(frame.columns)))} column"
    pulls = frame.filter((pl.col("op").cast(pl.String) == "pull_sparse") & (pl.col("num_keys") > 0)).select(
        pl.col("num_keys").cast(pl.Float64), pl.col("response_bytes").cast(pl.Float64)).drop_nulls()
    if pulls.height < MIN_SIZE_FIT_RPCS or pulls.get_column("num_keys").n_unique() < 2:
        return None, f"{pulls.height} pull_sparse RPC(s) with keys, too few distinct key counts to fit sizes"
    x, y = pulls.get_column("num_keys").to_numpy(), pulls.get_column("response_bytes").to_numpy()
    xc, yc = x - x.mean(), y - y.mean()
    slope = float(xc @ yc / (xc @ xc))
    ss = float(yc @ yc)
    r2 = 1.0 - float(((yc - slope * xc) ** 2).sum()) / ss if ss > 0 else 0.0
    values = slope / wire_value_bytes
    dim = round(values)
    if dim < 1 or abs(values - dim) > 0.02 * dim or r2 < 0.999:
        return None, (f"pull_sparse response bytes grow by {slope:.4g} B per key (R² {r2:.4f}): not a whole number "
                      f"of {wire_value_bytes}-byte values")
    return dim, (f"pull_sparse responses grow by {slope:.4g} B per key over {pulls.height:,} RPCs (R² {r2:.4f}): "
                 f"{dim} values of {wire_value_bytes} B")


def choose_embedding_dim(given: int | None, log_path: str | Path | None = None, frame: pl.DataFrame | None = None,
                         wire_value_bytes: int = DEFAULT_WIRE_VALUE_BYTES) -> EmbeddingDim:
    """The embedding dimension to simulate with: ``given`` (``--dim``) when set; else the log's
    ps-train ``run.json`` (:func:`embedding_dim_from_run_json`); else the log's pull response
    sizes (:func:`embedding_dim_from_sizes`); else :data:`DEFAULT_EMBEDDING_DIM`, assumed.

    Args:
        given: the user's dimension, or None.
        log_path: the RPC log file (for its ``run.json``), or None for other sources.
        frame: the log's rows with ``op``, ``num_keys`` and ``response_bytes``, or None.
        wire_value_bytes: bytes per value in a message.

    Raises:
        ValueError: ``given`` is below 1.
    """
    if given is not None:
        if given < 1:
            raise ValueError(f"--dim: expected >= 1, got {given}")
        return EmbeddingDim(given, "option", f"embedding dimension {given} (--dim)")
    why: list[str] = []
    if log_path is not None:
        dim, detail = embedding_dim_from_run_json(log_path)
        if dim is not None:
            return EmbeddingDim(dim, "run.json", f"embedding dimension {dim} from {detail}")
        why.append(detail)
    if frame is not None:
        dim, detail = embedding_dim_from_sizes(frame, wire_value_bytes)
        if dim is not None:
            return EmbeddingDim(dim, "message sizes", f"embedding dimension {dim}: {detail}")
        why.append(detail)
    reason = f" ({'; '.join(why)})" if why else " (the source is a key stream without message sizes)"
    return EmbeddingDim(DEFAULT_EMBEDDING_DIM, "assumed",
                        f"embedding dimension not known{reason}: assuming {DEFAULT_EMBEDDING_DIM}; give --dim")


_NOT_RANKED = np.iinfo(np.int64).max


@dataclass(frozen=True)
class SwitchLayout:
    """Sizes of a switch entry and of a row message (module docstring for the defaults' sources).

    Attributes:
        embedding_dim: values per row.
        value_bytes: bytes per value in switch memory (4: 32-bit integer registers).
        key_bytes: per-entry key bytes (8).
        metadata_bytes: per-entry metadata bytes (8: worker bitmap + counter).
        wire_value_bytes: bytes per value on the wire (4 for fp32, 2 for fp16/bf16 gradients).
        wire_key_bytes: bytes of the key in a message (8).
    """

    embedding_dim: int = DEFAULT_EMBEDDING_DIM
    value_bytes: int = DEFAULT_VALUE_BYTES
    key_bytes: int = DEFAULT_KEY_BYTES
    metadata_bytes: int = DEFAULT_METADATA_BYTES
    wire_value_bytes: int = DEFAULT_WIRE_VALUE_BYTES
    wire_key_bytes: int = 8

    def __post_init__(self) -> None:
        for name in ("embedding_dim", "value_bytes", "wire_value_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected >= 1, got {getattr(self, name)}")
        for name in ("key_bytes", "metadata_bytes", "wire_key_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: expected >= 0, got {getattr(self, name)}")

    @property
    def entry_bytes(self) -> int:
        """Switch memory per resident row: ``dim × value_bytes + key_bytes + metadata_bytes``."""
        return self.embedding_dim * self.value_bytes + self.key_bytes + self.metadata_bytes

    @property
    def message_bytes(self) -> int:
        """Bytes of one row in a message: ``dim × wire_value_bytes + wire_key_bytes``."""
        return self.embedding_dim * self.wire_value_bytes + self.wire_key_bytes

    def capacity_keys(self, budget_bytes: int) -> int:
        """Rows that fit in ``budget_bytes``: ``floor(budget / entry_bytes)``."""
        if budget_bytes < 0:
            raise ValueError(f"budget_bytes: expected >= 0, got {budget_bytes}")
        return int(budget_bytes) // self.entry_bytes


@dataclass(frozen=True)
class OffloadTrace:
    """A trace ready for simulation: NumPy arrays in iteration order (stable within one).

    Attributes:
        iteration: dense iteration index ``0..I-1`` per event, shape ``(M,)``.
        key: key id per event; push: True for a push, False for a pull; count: multiplicity.
        first_push: True on the first push of each (iteration, key).
        hot: the events that count towards hotness (pushes, or pulls when there are none).
        rpc: the RPC of each event as a dense index ``0..R-1`` into ``rpcs`` (-1 for an event
            without an RPC), shape ``(M,)``; None when no event has an RPC.
        rpcs: the RPCs, one row per index of ``rpc``: ``worker_id`` (Int64, null when the log has
            none), ``rpc_id`` (Int64). An RPC is named by the pair (the schema's ``rpc_id`` need
            only be unique per worker, as :mod:`ddlscope.rpc.validate` checks it); None with ``rpc``.
        starts: index of each iteration's first event, shape ``(I + 1,)`` (last = M).
        num_keys: key ids are ``0..num_keys-1``.
        iteration_values: the original iteration numbers, shape ``(I,)``.
    """

    iteration: np.ndarray
    key: np.ndarray
    push: np.ndarray
    count: np.ndarray
    first_push: np.ndarray
    hot: np.ndarray
    rpc: np.ndarray | None
    rpcs: pl.DataFrame | None
    starts: np.ndarray
    num_keys: int
    iteration_values: np.ndarray

    @property
    def num_iterations(self) -> int:
        """Iterations in the trace."""
        return self.starts.size - 1

    @property
    def has_pulls(self) -> bool:
        """Whether any event is a pull."""
        return bool((~self.push).any())


def prepare_trace(stream: KeyStream) -> OffloadTrace:
    """The :class:`OffloadTrace` of a stream of ``pull``/``push`` events with iterations
    (use :func:`~ddlscope.skew.streams.emulate_training` first for raw streams).

    Raises:
        ValueError: ``access`` events, events without an iteration, or fewer than 2 iterations.
    """
    ev = stream.events
    if (ev["op"] == "access").any():
        raise ValueError(f"{stream.source}: raw 'access' events; replay them as training first (emulate_training)")
    if not stream.has_iterations:
        raise ValueError(f"{stream.source}: every event needs an iteration for the offload simulation")
    ev = ev.with_row_index("_pos").with_columns(
        (pl.col("iteration").rank("dense") - 1).cast(pl.Int64).alias("_it")).sort("_it", "_pos")
    it = ev["_it"].to_numpy()
    n_iter = int(it[-1]) + 1 if it.size else 0
    if n_iter < 2:
        raise ValueError(f"{stream.source}: the offload simulation needs at least 2 iterations "
                         f"(warm-up + evaluation), got {n_iter}")
    key = ev["key"].to_numpy().astype(np.int64)
    push = (ev["op"] == "push").to_numpy()
    first_push = np.zeros(it.size, dtype=bool)
    pidx = np.flatnonzero(push)
    codes = it[pidx] * np.int64(stream.num_keys) + key[pidx]
    _, first_idx = np.unique(codes, return_index=True)
    first_push[pidx[first_idx]] = True
    hot = push if push.any() else ~push
    rpc, rpcs = None, None
    if ev["rpc_id"].null_count() < ev.height:
        # an RPC is the pair (worker_id, rpc_id): rpc ids may restart on every worker
        rpcs = (ev.filter(pl.col("rpc_id").is_not_null()).select("worker_id", "rpc_id")
                .unique(maintain_order=True).with_row_index("_rpc"))
        rpc = (ev.select("worker_id", "rpc_id")
               .join(rpcs, on=["worker_id", "rpc_id"], how="left", nulls_equal=True, maintain_order="left")
               ["_rpc"].cast(pl.Int64).fill_null(-1).to_numpy())
        rpcs = rpcs.drop("_rpc")
    return OffloadTrace(
        iteration=it, key=key, push=push, count=ev["count"].to_numpy().astype(np.int64), first_push=first_push,
        hot=hot, rpc=rpc, rpcs=rpcs,
        starts=np.searchsorted(it, np.arange(n_iter + 1)), num_keys=stream.num_keys,
        iteration_values=np.sort(ev["iteration"].unique().to_numpy()),
    )


# -- ranks: static, oracle, lfu ---------------------------------------------------------------------
def _ranks_from_counts(counts: np.ndarray, top: int) -> np.ndarray:
    """Rank (1 = hottest) of every key by count, ties by smaller id; keys with count 0 or ranked
    below ``top`` get ``_NOT_RANKED``. Shape ``(N,)``."""
    n = counts.size
    ranks = np.full(n, _NOT_RANKED, dtype=np.int64)
    seen = np.flatnonzero(counts > 0)
    if seen.size == 0 or top <= 0:
        return ranks
    score = counts[seen] * np.int64(n + 1) + (n - 1 - seen)  # unique; larger = hotter
    if top < seen.size:
        part = np.argpartition(-score, top - 1)[:top]
        order = part[np.argsort(-score[part], kind="stable")]
    else:
        order = np.argsort(-score, kind="stable")
    ranks[seen[order]] = np.arange(1, order.size + 1)
    return ranks


def _count_leq(sorted_vals: np.ndarray, caps: np.ndarray) -> np.ndarray:
    return np.searchsorted(sorted_vals, caps, side="right")


def _rank_policy(trace: OffloadTrace, policy: str, warmup: int, refresh: int, caps: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, int]:
    """Per-event rank of the key at its iteration (evaluation events only), installs per capacity,
    and refreshes."""
    n, top = trace.num_keys, int(caps.max()) if caps.size else 0
    lo = trace.starts[warmup]
    w = np.where(trace.hot, trace.count, 0)
    if policy in ("static", "oracle"):
        sl = slice(0, lo) if policy == "static" else slice(lo, None)
        counts = np.bincount(trace.key[sl], weights=w[sl], minlength=n).astype(np.int64)
        ranks = _ranks_from_counts(counts, top)
        ranked = np.sort(ranks[ranks != _NOT_RANKED])
        return ranks[trace.key[lo:]], _count_leq(ranked, caps).astype(np.int64), 1
    # lfu: cumulative counts before each refresh iteration
    counts = np.bincount(trace.key[:lo], weights=w[:lo], minlength=n).astype(np.int64)
    out = np.empty(trace.key.size - lo, dtype=np.int64)
    installs = np.zeros(caps.size, dtype=np.int64)
    prev = np.full(n, _NOT_RANKED, dtype=np.int64)
    ranks = prev
    refreshes = 0
    for i in range(warmup, trace.num_iterations):
        a, b = trace.starts[i], trace.starts[i + 1]
        if (i - warmup) % refresh == 0:
            ranks = _ranks_from_counts(counts, top)
            installs += _count_leq(np.sort(ranks), caps) - _count_leq(np.sort(np.maximum(ranks, prev)), caps)
            prev = ranks
            refreshes += 1
        out[a - lo:b - lo] = ranks[trace.key[a:b]]
        counts += np.bincount(trace.key[a:b], weights=w[a:b], minlength=n).astype(np.int64)
    return out, installs, refreshes


# -- Space-Saving ---------------------------------------------------------------------------------
class SpaceSaving:
    """The Space-Saving heavy-hitter summary (Metwally, Agrawal & El Abbadi, ICDT 2005).

    Keeps at most ``capacity`` (key -> count) counters. A monitored key's count grows by the
    event's weight; an unmonitored key, when the summary is full, replaces the key with the
    smallest count (ties: the one that reached that count first) and starts from that count plus
    its weight. Every key with true frequency above ``total / capacity`` is monitored, and no
    count underestimates (paper, Lemma 3 and Theorem 1).

    Implementation: the paper's Stream-Summary — keys grouped in buckets of equal count, each an
    insertion-ordered ``OrderedDict`` (so the first key of the smallest bucket is the one that
    reached that count first) — plus a lazy min-heap of the bucket counts for weighted updates.
    O(1) dict operations per event, O(log buckets) when a new count value appears.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity: expected >= 0, got {capacity}")
        self.capacity = int(capacity)
        self._count: dict[int, int] = {}
        self._bucket: dict[int, OrderedDict[int, None]] = {}
        self._levels: list[int] = []  # lazy min-heap of bucket counts

    def update(self, keys: list[int], weights: list[int] | None = None) -> None:
        """Feed events in order (``keys`` and optional ``weights`` >= 1, default 1 each)."""
        cap = self.capacity
        if cap == 0:
            return
        count, bucket, levels = self._count, self._bucket, self._levels
        get, bget = count.get, bucket.get
        push, pop = heapq.heappush, heapq.heappop
        new_bucket = OrderedDict
        for k, w in zip(keys, weights if weights is not None else [1] * len(keys), strict=True):
            c = get(k)
            if c is not None:
                b = bucket[c]
                del b[k]
                if not b:
                    del bucket[c]
                c += w
            elif len(count) < cap:
                c = w
            else:
                while levels[0] not in bucket:
                    pop(levels)
                m = levels[0]
                b = bucket[m]
                evicted, _ = b.popitem(last=False)
                del count[evicted]
                if not b:
                    del bucket[m]
                c = m + w
            nb = bget(c)
            if nb is None:
                nb = bucket[c] = new_bucket()
                push(levels, c)
                if len(levels) > 4 * len(bucket) + 1024:
                    levels[:] = list(bucket)
                    heapq.heapify(levels)
            nb[k] = None
            count[k] = c

    def keys(self) -> np.ndarray:
        """The monitored keys (int64, unordered)."""
        return np.fromiter(self._count, dtype=np.int64, count=len(self._count))

    def top(self, k: int) -> np.ndarray:
        """The ``k`` monitored keys with the largest counts (ties: smaller key first), int64."""
        keys = self.keys()
        if keys.size <= k:
            return keys
        counts = np.fromiter(self._count.values(), dtype=np.int64, count=keys.size)
        bound = np.int64(keys.max()) + 1
        score = counts * bound + (bound - 1 - keys)  # unique; larger = hotter
        return keys[np.argpartition(-score, k - 1)[:k]]

    def counts(self) -> dict[int, int]:
        """Monitored key -> its (over-)estimated count."""
        return dict(self._count)


@dataclass(frozen=True)
class _HotEvents:
    """The hot events of a trace as Python lists for the Space-Saving loop, built once per
    simulation (not per capacity).

    Attributes:
        starts: index into ``keys`` of each iteration's first hot event, shape ``(I + 1,)``.
        keys: key id per hot event, in order; weights: its count, or None when every count is 1.
    """

    starts: np.ndarray
    keys: list[int]
    weights: list[int] | None

    @classmethod
    def of(cls, trace: OffloadTrace) -> _HotEvents:
        """The hot events of ``trace``."""
        hot_idx = np.flatnonzero(trace.hot)
        unit = bool(np.all(trace.count[hot_idx] == 1))
        return cls(np.searchsorted(hot_idx, trace.starts), trace.key[hot_idx].tolist(),
                   None if unit else trace.count[hot_idx].tolist())

    def slice(self, a: int, b: int) -> tuple[list[int], list[int] | None]:
        """Keys and weights of the hot events ``a..b-1``."""
        return self.keys[a:b], None if self.weights is None else self.weights[a:b]


def _space_saving_policy(trace: OffloadTrace, hot: _HotEvents, warmup: int, refresh: int, capacity: int,
                         counters_factor: float) -> tuple[np.ndarray, int, int]:
    """Per-event residency (evaluation events), installs and refreshes for one capacity."""
    lo = trace.starts[warmup]
    ss = SpaceSaving(max(capacity, math.ceil(counters_factor * capacity)))
    hot_starts = hot.starts
    ss.update(*hot.slice(0, hot_starts[warmup]))
    mask = np.zeros(trace.num_keys, dtype=bool)
    out = np.empty(trace.key.size - lo, dtype=bool)
    installs = refreshes = 0
    for i in range(warmup, trace.num_iterations):
        a, b = trace.starts[i], trace.starts[i + 1]
        if (i - warmup) % refresh == 0:
            new = np.zeros(trace.num_keys, dtype=bool)
            new[ss.top(capacity)] = True
            installs += int((new & ~mask).sum())
            mask = new
            refreshes += 1
        out[a - lo:b - lo] = mask[trace.key[a:b]]
        ss.update(*hot.slice(hot_starts[i], hot_starts[i + 1]))
    return out, installs, refreshes


# -- metrics ------------------------------------------------------------------------------------
def _metrics(trace: OffloadTrace, lo: int, resident: np.ndarray, layout: SwitchLayout) -> dict[str, float]:
    push, cnt = trace.push[lo:], trace.count[lo:]
    return _metrics_of_counts(
        pushes=int(cnt[push].sum()), pulls=int(cnt[~push].sum()), push_hits=int(cnt[push & resident].sum()),
        pull_hits=int(cnt[~push & resident].sum()), forwards=int((trace.first_push[lo:] & resident).sum()),
        has_pulls=trace.has_pulls)


def _metrics_of_counts(pushes: int, pulls: int, push_hits: int, pull_hits: int, forwards: int,
                       has_pulls: bool) -> dict[str, float]:
    """The figures of one (policy, capacity) from its event counts over the evaluated iterations
    (the module docstring's model); shared by :func:`simulate_offload` and the streamed simulation
    (:mod:`ddlscope.skew.offload_streaming`), so both compute them alike."""
    writebacks = forwards if has_pulls else 0
    updates = pushes - push_hits + forwards
    return {
        "pushes": pushes, "pulls": pulls,
        "push_aggregated_fraction": push_hits / pushes if pushes else float("nan"),
        "pull_served_fraction": pull_hits / pulls if pulls else float("nan"),
        "server_updates_baseline": pushes, "server_updates": updates,
        "server_updates_saved_fraction": 1 - updates / pushes if pushes else float("nan"),
        "_row_messages": (pushes - push_hits + forwards) + (pulls - pull_hits) + writebacks,
        "_baseline_messages": pushes + pulls,
        "switch_writebacks": writebacks,
    }


def _offload_row(policy: str, budget: int, capacity: int, metrics: dict[str, float], installs: int,
                 refreshes: int, layout: SwitchLayout) -> dict[str, Any]:
    """One row of :attr:`OffloadResult.table` (without the latency columns) from
    :func:`_metrics_of_counts`' figures; ``metrics`` is consumed (its ``_`` entries removed)."""
    messages = metrics.pop("_row_messages") + installs
    base = metrics.pop("_baseline_messages")
    row: dict[str, Any] = {"policy": policy, "budget_bytes": int(budget), "capacity_keys": int(capacity), **metrics}
    row |= {
        "server_bytes_baseline": base * layout.message_bytes,
        "server_bytes": messages * layout.message_bytes,
        "server_bytes_saved": (base - messages) * layout.message_bytes,
        "server_bytes_saved_fraction": 1 - messages / base if base else float("nan"),
        "switch_installs": installs, "refreshes": refreshes,
    }
    return row


@dataclass
class OffloadResult:
    """The sweep's outcome.

    Attributes:
        table: one row per (policy, budget): ``policy``, ``budget_bytes``, ``capacity_keys``,
            ``push_aggregated_fraction``, ``pull_served_fraction``, ``server_updates_baseline``,
            ``server_updates``, ``server_updates_saved_fraction``, ``server_bytes_baseline``,
            ``server_bytes``, ``server_bytes_saved``, ``server_bytes_saved_fraction``,
            ``switch_installs``, ``switch_writebacks``, ``refreshes``, and with stage times the
            ``latency_*`` columns of :func:`~ddlscope.skew.latency.estimate_latency_gain`.
        layout: the entry/message sizes.
        warmup_iterations, evaluation_iterations, refresh_iterations: the time split.
        notes: assumptions worth showing with the table.
    """

    table: pl.DataFrame
    layout: SwitchLayout
    warmup_iterations: int
    evaluation_iterations: int
    refresh_iterations: int
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Headline figures: the layout and time split, per policy the row (budget) with the largest
        ``server_bytes_saved_fraction``, and the whole curve."""
        best = (self.table.sort("server_bytes_saved_fraction", descending=True, nulls_last=True)
                .unique(subset="policy", keep="first", maintain_order=True))
        return {
            "entry_bytes": self.layout.entry_bytes, "message_bytes": self.layout.message_bytes,
            "warmup_iterations": self.warmup_iterations, "evaluation_iterations": self.evaluation_iterations,
            "refresh_iterations": self.refresh_iterations,
            "best_by_policy": {r["policy"]: r for r in best.to_dicts()},
            "curve": self.table.to_dicts(),
        }


@dataclass(frozen=True)
class _LatencyIndex:
    """Stage times matched to the trace's RPCs, built once per simulation.

    Attributes:
        stages: the stage-time rows of the RPCs with keys in the evaluated iterations (input order).
        stage_rpc: each of those rows' RPC index into ``trace.rpcs``, shape ``(S,)``.
        event_rpc: the RPC index of each evaluated event that has an RPC, shape ``(E,)``.
        event_mask: which evaluated events have an RPC, shape ``(M - lo,)``.
        event_count: the multiplicity of the events of ``event_rpc``, shape ``(E,)``.
        total: keys (weighted by count) per RPC over the evaluated events, shape ``(R,)``.
    """

    stages: pl.DataFrame
    stage_rpc: np.ndarray
    event_rpc: np.ndarray
    event_mask: np.ndarray
    event_count: np.ndarray
    total: np.ndarray

    @classmethod
    def build(cls, trace: OffloadTrace, lo: int, stage_times: pl.DataFrame) -> _LatencyIndex:
        """Match ``stage_times`` to the RPCs of the evaluated events (from index ``lo``) by
        (``worker_id``, ``rpc_id``).

        Raises:
            ValueError: the trace has no RPCs, or ``stage_times`` lacks ``worker_id``/``rpc_id``.
        """
        if trace.rpc is None or trace.rpcs is None:
            raise ValueError("stage_times: the trace has no RPC ids to match them with")
        missing = [c for c in ("worker_id", "rpc_id") if c not in stage_times.columns]
        if missing:
            raise ValueError(f"stage_times: expected columns worker_id and rpc_id (an RPC is the pair); "
                             f"missing {', '.join(missing)}")
        rpc = trace.rpc[lo:]
        mask = rpc >= 0
        event_rpc, event_count = rpc[mask], trace.count[lo:][mask]
        total = np.bincount(event_rpc, weights=event_count, minlength=trace.rpcs.height)
        index = trace.rpcs.with_row_index("_rpc").with_columns(pl.col("_rpc").cast(pl.Int64))
        matched = (stage_times.with_columns(pl.col("worker_id").cast(pl.Int64), pl.col("rpc_id").cast(pl.Int64))
                   .join(index, on=["worker_id", "rpc_id"], how="inner", maintain_order="left"))
        stage_rpc = matched["_rpc"].to_numpy()
        keep = total[stage_rpc] > 0
        return cls(matched.drop("_rpc").filter(pl.Series(keep)), stage_rpc[keep], event_rpc, mask, event_count,
                   total)

    def handled_fraction(self, resident: np.ndarray) -> np.ndarray:
        """``h`` per row of :attr:`stages`: the share of the RPC's keys (weighted by count) whose
        event is resident in the switch; ``resident`` has one flag per evaluated event."""
        handled = np.bincount(self.event_rpc, weights=self.event_count * resident[self.event_mask],
                              minlength=self.total.size)
        return handled[self.stage_rpc] / self.total[self.stage_rpc]


def default_budgets(min_bytes: int = 64 * 1024, max_bytes: int = 64 * 1024 * 1024) -> list[int]:
    """Budgets doubling from ``min_bytes`` to ``max_bytes`` (default 64 KiB .. 64 MiB, 11 points)."""
    out, b = [], int(min_bytes)
    while b <= max_bytes:
        out.append(b)
        b *= 2
    return out


def budgets_for(num_keys: int, layout: SwitchLayout, min_bytes: int = 64 * 1024,
                max_bytes: int = 64 * 1024 * 1024) -> list[int]:
    """A doubling budget sweep for ``num_keys`` distinct keys: from ``min_bytes`` up to the first
    budget that holds every key (at most ``max_bytes``). When ``min_bytes`` already holds them
    all, the sweep doubles from one entry instead (1, 2, 4, ... keys).
    """
    if layout.capacity_keys(min_bytes) >= num_keys:
        min_bytes = layout.entry_bytes
    out = []
    for b in default_budgets(min_bytes, max_bytes):
        out.append(b)
        if layout.capacity_keys(b) >= num_keys:
            break
    return out


def _sweep_setup(n_iter: int, layout: SwitchLayout, budgets_bytes: list[int] | None, policies: tuple[str, ...],
                 warmup_iterations: int | None, refresh_iterations: int, space_saving_counters: float,
                 ) -> tuple[list[int], int, np.ndarray]:
    """The checked sweep of :func:`simulate_offload` for a trace of ``n_iter`` iterations: the
    budgets (bytes), the warm-up iterations and the capacity (keys) per budget.

    Raises:
        ValueError: as :func:`simulate_offload` (budgets, policies, warm-up, refresh, counters).
    """
    budgets = list(budgets_bytes) if budgets_bytes is not None else default_budgets()
    if not budgets or any(b < 0 for b in budgets):
        raise ValueError(f"budgets_bytes: expected one or more budgets >= 0, got {budgets}")
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise ValueError(f"policies: expected some of {', '.join(POLICIES)}, got {list(policies)}")
    warmup = max(1, math.ceil(0.1 * n_iter)) if warmup_iterations is None else int(warmup_iterations)
    if not 1 <= warmup < n_iter:
        raise ValueError(f"warmup_iterations: expected 1..{n_iter - 1} (the trace has {n_iter} iterations), "
                         f"got {warmup}")
    if space_saving_counters < 1:
        raise ValueError(f"space_saving_counters: expected >= 1 counter per entry, got {space_saving_counters}")
    if refresh_iterations < 1:
        raise ValueError(f"refresh_iterations: expected >= 1, got {refresh_iterations}")
    caps = np.array([layout.capacity_keys(b) for b in budgets], dtype=np.int64)
    return budgets, warmup, caps


def _sweep_notes(layout: SwitchLayout, warmup: int, n_iter: int, refresh_iterations: int) -> list[str]:
    """The layout and time-split notes of an :class:`OffloadResult`."""
    return [
        f"entry = {layout.embedding_dim} x {layout.value_bytes} B + {layout.key_bytes} B key + "
        f"{layout.metadata_bytes} B metadata = {layout.entry_bytes} B; row message = {layout.message_bytes} B",
        f"iterations: {warmup} warm-up, {n_iter - warmup} evaluated; hot set refreshed every "
        f"{refresh_iterations} iteration(s) (lfu, space_saving)",
    ]


def simulate_offload(
    trace: OffloadTrace,
    layout: SwitchLayout | None = None,
    budgets_bytes: list[int] | None = None,
    policies: tuple[str, ...] = POLICIES,
    warmup_iterations: int | None = None,
    refresh_iterations: int = DEFAULT_REFRESH_ITERATIONS,
    stage_times: pl.DataFrame | None = None,
    space_saving_counters: float = DEFAULT_SPACE_SAVING_COUNTERS,
) -> OffloadResult:
    """Simulate a switch holding a hot set, for every policy and memory budget.

    Args:
        trace: from :func:`prepare_trace`.
        layout: entry and message sizes (default :class:`SwitchLayout`).
        budgets_bytes: switch memory budgets (default :func:`default_budgets`).
        policies: a subset of :data:`POLICIES`.
        warmup_iterations: iterations that only train the policies (default ``ceil(10 %)`` of
            the iterations, at least 1, leaving at least 1 to evaluate).
        refresh_iterations: the control plane re-installs the hot set every this many iterations
            (``lfu`` and ``space_saving``).
        space_saving_counters: counters of the Space-Saving summary per switch entry (>= 1).
        stage_times: per-RPC stage times for the latency estimate: one row per RPC with
            ``worker_id`` and ``rpc_id`` (the pair names the RPC, matched to ``trace.rpcs``) and
            one column per stage (see :func:`~ddlscope.skew.latency.stage_seconds`), e.g.
            :func:`ddlscope.rpc.decompose` of the same log; needs ``trace.rpc``. Only the RPCs
            with keys in the evaluated iterations count.

    Returns:
        :class:`OffloadResult`.

    Raises:
        ValueError: an unknown policy, a bad budget, warm-up or refresh, stage times for a trace
            without RPCs, or stage times without ``worker_id``/``rpc_id`` columns.
    """
    layout = layout or SwitchLayout()
    n_iter = trace.num_iterations
    budgets, warmup, caps = _sweep_setup(n_iter, layout, budgets_bytes, policies, warmup_iterations,
                                         refresh_iterations, space_saving_counters)
    lo = int(trace.starts[warmup])
    latency = _LatencyIndex.build(trace, lo, stage_times) if stage_times is not None else None
    hot = _HotEvents.of(trace) if "space_saving" in policies else None
    rows: list[dict[str, Any]] = []
    for policy in policies:
        per_cap: list[tuple[np.ndarray, int, int]] = []
        if policy == "space_saving" and hot is not None:
            per_cap = [_space_saving_policy(trace, hot, warmup, refresh_iterations, int(c), space_saving_counters)
                       for c in caps]
        else:
            ranks, installs, refreshes = _rank_policy(trace, policy, warmup, refresh_iterations, caps)
            per_cap = [(ranks <= c, int(installs[j]), refreshes) for j, c in enumerate(caps)]
        for (resident, installs_c, refreshes), budget, cap in zip(per_cap, budgets, caps, strict=True):
            row = _offload_row(policy, budget, cap, _metrics(trace, lo, resident, layout), installs_c, refreshes,
                               layout)
            if latency is not None:
                row |= estimate_latency_gain(latency.stages, latency.handled_fraction(resident))
            rows.append(row)
    notes = _sweep_notes(layout, warmup, n_iter, refresh_iterations)
    if latency is not None:
        notes.append(f"latency: over the {latency.stages.height:,} RPCs with keys in the evaluated iterations; server "
                     "stages scaled by the share of each RPC's keys left to the server")
    table = pl.DataFrame(rows)
    return OffloadResult(table, layout, warmup, n_iter - warmup, refresh_iterations, notes)
