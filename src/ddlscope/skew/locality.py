"""Temporal locality of a key stream: reuse (LRU stack) distance and reuse time.

For an access at position ``t`` to a key last accessed at ``p < t``:

* **reuse distance** (LRU stack distance; Mattson, Gecsei, Slutz & Traiger, IBM Systems
  Journal 9(2), 1970) = the number of *distinct* other keys accessed in ``(p, t)``. An LRU cache
  of ``C`` keys hits exactly the accesses with reuse distance ``< C``, so the distribution is the
  LRU hit-ratio curve for every cache size at once;
* **reuse time** = ``t - p - 1``, the number of accesses in between.

The first access to a key has no reuse (a cold miss; reported as ``-1``).

Computation, ``O(M log M)`` for ``M`` accesses with NumPy only (no per-access Python loop):
with ``next[j]`` the position of the next access to the key at ``j`` (``M`` if none),

``distance(t) = (distinct keys in [0, t)) - 1 - #{j < p : next[j] > next[p]}``

because every distinct key seen before ``t`` has exactly one access ``j < t`` with
``next[j] >= t`` (its last), only the accessed key itself has ``next[j] = t = next[p]``, and those
of them with ``j < p`` are the keys *not* seen in ``(p, t)``. The first term is a running count of
first accesses; the last is a per-element inversion count, which a bottom-up merge sort of
``next`` yields level by level (one stable NumPy sort per level, ``ceil(log2 M)`` levels).
"""

from __future__ import annotations

import numpy as np
import polars as pl


def _prev_next(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Previous and next position of the same key (``-1`` / ``M`` when none); shape ``(M,)``."""
    m = keys.size
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    same = np.empty(m, dtype=bool)
    same[0] = False
    same[1:] = sk[1:] == sk[:-1]
    prev = np.full(m, -1, dtype=np.int64)
    nxt = np.full(m, m, dtype=np.int64)
    prev[order[1:][same[1:]]] = order[:-1][same[1:]]
    nxt[order[:-1][same[1:]]] = order[1:][same[1:]]
    return prev, nxt


def reuse_times(keys: np.ndarray) -> np.ndarray:
    """Accesses between consecutive accesses to the same key (``t - p - 1``; ``-1`` for a first
    access). ``keys``: integer key ids in access order, shape ``(M,)``; returns shape ``(M,)``."""
    keys = np.asarray(keys)
    if keys.size == 0:
        return np.zeros(0, dtype=np.int64)
    prev, _ = _prev_next(keys)
    return np.where(prev >= 0, np.arange(keys.size) - prev - 1, -1)


def reuse_distances(keys: np.ndarray) -> np.ndarray:
    """LRU stack distance of every access (module docstring); ``-1`` for a first access.

    Args:
        keys: integer key ids in access order, shape ``(M,)``.

    Returns:
        int64 array of shape ``(M,)``.
    """
    keys = np.asarray(keys)
    m = keys.size
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    prev, nxt = _prev_next(keys)
    first = prev < 0
    distinct_before = np.cumsum(first) - first  # distinct keys in [0, t)
    # inversions[p] = #{j < p : next[j] > next[p]}, by a bottom-up merge sort of next[]: at each
    # level, an element of a block's right half passes the left-half elements larger than it
    inversions = np.zeros(m, dtype=np.int64)
    big = np.int64(m + 1)
    pos = np.arange(m, dtype=np.int64)
    vals = nxt.copy()  # next[] in the current arrangement (sorted within blocks of 2^(level-1))
    ident = pos.copy()  # the original position of each element of the arrangement
    level = 1
    while (1 << (level - 1)) < m:
        half = 1 << (level - 1)
        block = pos >> level
        order = np.argsort(block * big + vals, kind="stable")  # merges the sorted halves of each block
        right = np.flatnonzero((order >> (level - 1)) & 1)  # new slots holding a right-half element
        # left-half elements smaller than it = its rank in the merged block - its rank in its half
        # (next[] values of reused positions are distinct, so there are no ties to break)
        left_smaller = (right - (block[right] << level)) - (order[right] & (half - 1))
        inversions[ident[order[right]]] += half - left_smaller
        vals = vals[order]
        ident = ident[order]
        level += 1
    out = np.full(m, -1, dtype=np.int64)
    q = np.flatnonzero(~first)
    out[q] = distinct_before[q] - 1 - inversions[prev[q]]
    return out


def default_cache_sizes(top: int) -> np.ndarray:
    """The cache sizes (keys) of :func:`reuse_distance_profile` by default: the powers of two
    ``1, 2, 4, ...`` up to the first at least ``top`` (the largest reuse distance + 1)."""
    return 2 ** np.arange(0, int(np.ceil(np.log2(max(top, 1)))) + 1)


def reuse_distance_profile(distances: np.ndarray, cache_sizes: np.ndarray | None = None) -> pl.DataFrame:
    """The LRU hit ratio for cache sizes (in keys) from reuse distances.

    Args:
        distances: :func:`reuse_distances` output (``-1`` = cold miss), shape ``(M,)``.
        cache_sizes: sizes in keys; default powers of two up to the largest distance + 1.

    Returns:
        Frame ``cache_keys`` (Int64), ``lru_hit_ratio`` (fraction of all accesses with distance
        ``< cache_keys``), ``accesses`` (M).
    """
    d = np.asarray(distances)
    m = d.size
    warm = np.sort(d[d >= 0])
    if cache_sizes is None:
        cache_sizes = default_cache_sizes(int(warm[-1]) + 1 if warm.size else 1)
    sizes = np.asarray(cache_sizes, dtype=np.int64)
    hits = np.searchsorted(warm, sizes, side="left")  # distances < size
    return pl.DataFrame({
        "cache_keys": sizes,
        "lru_hit_ratio": hits / m if m else np.zeros(sizes.size),
        "accesses": np.full(sizes.size, m, dtype=np.int64),
    })
