"""Standard communication cost formulas, usable on Python numbers and on Polars expressions.

Every function is plain arithmetic, so the same code prices one collective in a test and a column
of ten million in the vectorised model.

Sources:

- alpha-beta model ``t = alpha + n / beta``: R. Hockney, "The communication challenge for MPP:
  Intel Paragon and Meiko CS-2", Parallel Computing 20(3), 1994.
- ring all-reduce moves ``2 (p-1)/p * S`` bytes per rank in ``2 (p-1)`` steps; ring all-gather and
  reduce-scatter ``(p-1)/p * S`` in ``p-1`` steps: R. Thakur, R. Rabenseifner, W. Gropp,
  "Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1), 2005; P. Patarasuk
  and X. Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations", JPDC 2009.
- algorithm and bus bandwidth: NVIDIA nccl-tests, doc/PERFORMANCE.md: ``algbw = S / t`` and, for
  all-reduce, ``busbw = algbw * 2 (p-1)/p``; for all-gather and reduce-scatter
  ``busbw = algbw * (p-1)/p`` (with ``S`` the total size); broadcast and reduce ``busbw = algbw``.
  All-to-all and send/receive are not in that document: their factors, ``(p-1)/p`` and 1, are the
  ``getBw`` functions of nccl-tests' src/alltoall.cu and src/sendrecv.cu.

Collective names: :data:`COLLECTIVES` is the one list of canonical names (the names PyTorch's
``torch.distributed`` and its profiler annotations use, ``nccl:all_reduce``...);
:func:`canonical_collective` also accepts nccl-tests' spellings (``alltoall``, ``sendrecv``,
``all_reduce_perf``...), listed in :data:`COLLECTIVE_ALIASES`.
"""

from __future__ import annotations

import numbers
from typing import TypeVar

import numpy as np
import polars as pl

N = TypeVar("N")  # float, numpy array or polars Expr

COLLECTIVES: tuple[str, ...] = (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send_recv",
)
"""The canonical collective names (``torch.distributed``'s and its ``nccl:*`` profiler annotations')."""

COLLECTIVE_ALIASES: dict[str, str] = {
    **{name: name for name in COLLECTIVES},
    "allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all", "alltoallv": "all_to_all", "all_to_allv": "all_to_all",
    "all_to_all_single": "all_to_all", "all_gather_into_tensor": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter", "bcast": "broadcast",
    "sendrecv": "send_recv",
}
"""Accepted spellings (lower case, ``-`` read as ``_``) and their canonical name: nccl-tests' binary
names (``alltoall``, ``sendrecv``, ``all_reduce``...; a ``_perf`` or ``_mpi`` suffix is dropped),
the names without underscores, and ``torch.distributed``'s function names."""

_BUS_FACTOR_HALF = ("all_gather", "reduce_scatter", "all_to_all")


def canonical_collective(name: str) -> str:
    """The canonical name (:data:`COLLECTIVES`) of ``name``: any spelling of
    :data:`COLLECTIVE_ALIASES`, case-insensitive, ``-`` as ``_``, a ``_perf``/``_mpi`` suffix dropped
    (``all_reduce_perf``, ``AllReduce``, ``all-to-all``, ``alltoall``, ``sendrecv``).

    Raises:
        ValueError: an unknown collective (the message lists the canonical names).
    """
    key = name.strip().lower().replace("-", "_").removesuffix("_mpi").removesuffix("_perf")
    for k in (key, key.replace("_", "")):
        if k in COLLECTIVE_ALIASES:
            return COLLECTIVE_ALIASES[k]
    raise ValueError(f"collective: unknown {name!r}; expected one of {', '.join(COLLECTIVES)} "
                     "(or an nccl-tests name such as alltoall, sendrecv)")


def _canonical_expr(collective: pl.Expr) -> pl.Expr:
    """Canonical names of a String column of collective names, by the rule of
    :func:`canonical_collective` (the same spellings); unknown names become null."""
    key = (collective.str.to_lowercase().str.strip_chars().str.replace_all("-", "_", literal=True)
           .str.replace(r"_mpi$", "").str.replace(r"_perf$", ""))
    exact = key.replace_strict(COLLECTIVE_ALIASES, default=None, return_dtype=pl.String)
    squashed = key.str.replace_all("_", "", literal=True).replace_strict(COLLECTIVE_ALIASES, default=None,
                                                                         return_dtype=pl.String)
    return pl.coalesce(exact, squashed)


def bus_factor(collective: str | pl.Expr, ranks: N) -> N:
    """nccl-tests' ``busbw / algbw`` of ``collective`` on ``ranks`` ranks: the bytes each rank's link
    carries per byte of the collective's size ``S`` (module docstring):

    ``2 (p-1)/p`` all-reduce; ``(p-1)/p`` all-gather, reduce-scatter, all-to-all (``S`` the total
    size); 1 broadcast, reduce, send/receive.

    Args:
        collective: a name (any spelling :func:`canonical_collective` accepts), or a Polars String
            expression of names (the same spellings; an unknown name gives null, not an error).
        ranks: ``p``: a number, numpy array or Polars expression.

    Returns:
        The factor, of ``ranks``' kind (an expression if either argument is one).

    Raises:
        ValueError: an unknown collective name, or a number ``ranks < 1``.
    """
    if isinstance(collective, pl.Expr):
        p = ranks if isinstance(ranks, pl.Expr) else pl.lit(ranks)
        name = _canonical_expr(collective)
        return (pl.when(name == "all_reduce").then(2 * (p - 1) / p)
                .when(name.is_in(_BUS_FACTOR_HALF)).then((p - 1) / p)
                .when(name.is_not_null()).then(pl.lit(1.0)))  # type: ignore[return-value]
    _check_ranks(ranks)
    c = canonical_collective(collective)
    if c == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if c in _BUS_FACTOR_HALF:
        return (ranks - 1) / ranks
    return _constant(1.0, ranks)


def collective_steps(collective: str | pl.Expr, ranks: N) -> N:
    """Sequential latency terms (messages one rank sends in turn) of ``collective`` on ``ranks``
    ranks: ``2 (p-1)`` for a ring all-reduce, ``p-1`` for ring all-gather and reduce-scatter,
    pairwise all-to-all and pipelined-chain broadcast and reduce, 1 for send/receive (Thakur,
    Rabenseifner and Gropp, IJHPCA 2005).

    Args and returns as :func:`bus_factor`.

    Raises:
        ValueError: an unknown collective name, or a number ``ranks < 1``.
    """
    if isinstance(collective, pl.Expr):
        p = ranks if isinstance(ranks, pl.Expr) else pl.lit(ranks)
        name = _canonical_expr(collective)
        return (pl.when(name == "all_reduce").then(2 * (p - 1))
                .when(name == "send_recv").then(pl.lit(1))
                .when(name.is_not_null()).then(p - 1))  # type: ignore[return-value]
    _check_ranks(ranks)
    c = canonical_collective(collective)
    if c == "all_reduce":
        return 2 * (ranks - 1)
    if c == "send_recv":
        return _constant(1, ranks)
    return ranks - 1


def _check_ranks(ranks: object) -> None:
    if isinstance(ranks, numbers.Real) and ranks < 1:
        raise ValueError(f"ranks: expected >= 1, got {ranks}")


def _constant(value: float, like: N) -> N:
    """``value`` in the kind of ``like``: an array of its shape, an expression of its length (null
    where ``like`` is null; a bare ``pl.lit`` would be one row in a ``select``), or the number."""
    if isinstance(like, pl.Expr):
        return like * 0 + value  # type: ignore[return-value]
    if isinstance(like, np.ndarray):
        return np.full(like.shape, value)  # type: ignore[return-value]
    return value  # type: ignore[return-value]


def alpha_beta_s(messages: N, latency_s: N, nbytes: N, bandwidth_bytes_per_s: N) -> N:
    """Time in seconds to send ``nbytes`` as ``messages`` messages over a link (Hockney model).

    ``t = messages * alpha + nbytes / beta``, alpha = ``latency_s`` (s), beta =
    ``bandwidth_bytes_per_s`` (bytes/s, > 0).
    """
    return messages * latency_s + nbytes / bandwidth_bytes_per_s


def ring_allreduce_bytes_per_rank(size_bytes: N, ranks: N) -> N:
    """Bytes each rank sends (and receives) in a ring all-reduce of ``size_bytes``: 2 (p-1)/p * S.

    Approaches ``2 S`` as ``ranks`` grows; 0 for one rank.
    """
    return 2 * (ranks - 1) / ranks * size_bytes


def ring_allreduce_steps(ranks: N) -> N:
    """Sequential steps (latency terms) of a ring all-reduce: 2 (p-1)."""
    return 2 * (ranks - 1)


def ring_allgather_bytes_per_rank(size_bytes: N, ranks: N) -> N:
    """Bytes each rank receives in a ring all-gather (or sends in a reduce-scatter) whose *total*
    output is ``size_bytes``: (p-1)/p * S, in p-1 steps."""
    return (ranks - 1) / ranks * size_bytes


def ring_allgather_steps(ranks: N) -> N:
    """Sequential steps (latency terms) of a ring all-gather or reduce-scatter: p-1."""
    return ranks - 1


def alltoall_bytes_per_rank(size_bytes: N, ranks: N) -> N:
    """Bytes each rank sends to the others in an all-to-all of ``size_bytes`` per rank: (p-1)/p * S."""
    return (ranks - 1) / ranks * size_bytes


def alltoall_bytes_to_peers(size_bytes: N, ranks: N, peers: N) -> N:
    """Bytes a rank sends to ``peers`` of the other ranks in an all-to-all of ``size_bytes`` per
    rank (each of the ``ranks`` destinations gets ``S / p``): ``S * peers / p``. With ``peers = p-1``
    it is :func:`alltoall_bytes_per_rank`; splitting the peers into those on the same server and
    the others splits the traffic between the intra-server link and the NIC."""
    return size_bytes * peers / ranks


def algbw(size_bytes: N, time_s: N) -> N:
    """nccl-tests algorithm bandwidth, bytes/s: ``S / t``."""
    return size_bytes / time_s


def busbw(collective: str | pl.Expr, size_bytes: N, time_s: N, ranks: N) -> N:
    """nccl-tests bus bandwidth of any collective, bytes/s: ``S/t * bus_factor(collective, p)``
    (:func:`bus_factor`; null for an unknown name in an expression).

    Raises:
        ValueError: an unknown collective name, or a number ``ranks < 1``.
    """
    return algbw(size_bytes, time_s) * bus_factor(collective, ranks)
