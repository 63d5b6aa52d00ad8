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
  all-reduce, ``busbw = algbw * 2 (p-1)/p``; for all-gather, reduce-scatter and all-to-all
  ``busbw = algbw * (p-1)/p`` (with ``S`` the total size).
"""

from __future__ import annotations

from typing import TypeVar

N = TypeVar("N")  # float, numpy array or polars Expr


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


def allreduce_busbw(size_bytes: N, time_s: N, ranks: N) -> N:
    """nccl-tests bus bandwidth of an all-reduce, bytes/s: ``S/t * 2 (p-1)/p``."""
    return size_bytes / time_s * 2 * (ranks - 1) / ranks


def allgather_busbw(size_bytes: N, time_s: N, ranks: N) -> N:
    """nccl-tests bus bandwidth of an all-gather / reduce-scatter / all-to-all, bytes/s:
    ``S/t * (p-1)/p`` with ``S`` the total size."""
    return size_bytes / time_s * (ranks - 1) / ranks


def algbw(size_bytes: N, time_s: N) -> N:
    """nccl-tests algorithm bandwidth, bytes/s: ``S / t``."""
    return size_bytes / time_s
