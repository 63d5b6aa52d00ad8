r"""Sharded data parallelism (PyTorch FSDP, DeepSpeed ZeRO): collectives per step, memory per GPU,
exposed communication. Plain arithmetic on numbers or Polars expressions, like
:mod:`ddlscope.model.collectives`, which prices every collective here.

Sources: S. Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", SC 2020 (sec. 5 memory: ``2Ψ`` fp16 parameters + ``2Ψ`` gradients + ``KΨ`` optimizer
state, ``K = 12`` for mixed-precision Adam: an fp32 master copy, momentum and variance; sec. 7
communication: stages 1 and 2 move ``2Ψ`` per step like data parallelism, stage 3 ``3Ψ``); Y. Zhao
et al., "PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel", VLDB 2023 (sec. 3:
``FULL_SHARD`` all-gathers each unit's parameters before its forward and again before its
backward, reduce-scatters its gradients after; ``SHARD_GRAD_OP`` keeps the parameters gathered from
the forward through the backward; ``HYBRID_SHARD`` shards within a group, a server here, and
all-reduces the shards across the groups; the next unit's all-gather is prefetched while the
current one computes). The cost model below is our reconstruction from them.

Notation per row: ``p`` GPUs, ``m`` servers, ``g = p/m`` GPUs per server, ``Ψ`` parameters,
``w`` bytes per parameter of the compute precision (2 for fp16/bf16, 4 for fp32/tf32), ``P = wΨ``
the bytes of one parameter all-gather (``S`` where ``Ψ`` is unknown), ``S`` the gradient bytes
reduced per step (``dense_param_bytes``), ``k`` FSDP units (``num_gradient_tensors``: one
collective of each kind per unit).

======================  ==================================  =========================================
sharding                collectives per step (per unit)      state per GPU (d = p; hybrid d = g)
======================  ==================================  =========================================
``zero1``               RS of S, AG of P                     ``wΨ + S + KΨ/d``
``zero2``/SHARD_GRAD_OP RS of S, AG of P                     ``wΨ + (S + KΨ)/d``
``zero3``/FULL_SHARD    AG of P (fwd), AG of P (bwd), RS S   ``(wΨ + S + KΨ)/d + 2wΨ/k`` (two units
                                                             gathered: the current and the prefetch)
``hybrid``/HYBRID_SHARD zero3 among a server's g GPUs, +     as zero3 with d = g
                        all-reduce of the S/g shard across m
======================  ==================================  =========================================

Links: on one server every collective is a ring on the intra-server link (NVLink, else PCIe):
``(p-1)/p`` of its size per rank in ``p-1`` steps. Across servers NCCL's all-gather and
reduce-scatter are rings through all ``p`` GPUs (no tree), so each server's NICs carry
``(p-1)/p`` of each collective, shared over its ``nics`` NICs, and the intra-server hops run
concurrently with the slower NIC hops (as the flat ring of :mod:`ddlscope.model.step_time`).
``hybrid`` keeps the zero3 traffic on the intra link and puts ``2 (m-1)/m S`` per server on the NICs.

Memory: ``needed = peak_memory_bytes - U + state`` with ``U = wΨ + S + KΨ`` the unsharded state a
replica's peak includes (an assumption: the workload's peak is that of data-parallel training with
Adam); ``K = 12`` at 16-bit precision (mixed precision), 8 at fp32/tf32 (momentum and variance).
"""

from __future__ import annotations

from typing import TypeVar

import polars as pl

from ddlscope.model.collectives import (
    ring_allgather_bytes_per_rank,
    ring_allgather_steps,
    ring_allreduce_bytes_per_rank,
    ring_allreduce_steps,
)
from ddlscope.specs.traits import SHARDINGS, canonical_sharding

N = TypeVar("N")  # float or polars Expr

ADAM_STATE_BYTES_PER_PARAM_MIXED = 12.0
"""``K`` of ZeRO (SC 2020, sec. 5.1): fp32 master parameters, momentum and variance, 4 bytes each."""
ADAM_STATE_BYTES_PER_PARAM_FP32 = 8.0
"""Adam's momentum and variance at fp32 (the parameters are their own master copy)."""

#: sharding -> (all-gathers of the parameters per unit, reduce-scatters of the gradients per unit)
COLLECTIVES_PER_UNIT: dict[str, tuple[int, int]] = {"zero1": (1, 1), "zero2": (1, 1), "zero3": (2, 1),
                                                     "hybrid": (2, 1)}
"""Collectives each FSDP unit issues per step (module docstring's table)."""


def param_bytes_per_param(precision: str) -> float:
    """``w``: bytes of one parameter at the compute precision (2 for fp16/bf16, else 4)."""
    return 2.0 if precision in ("fp16", "bf16") else 4.0


def fsdp_link_bytes(sharding: str, gather_bytes: float, grad_bytes: float, ranks: int, servers: int,
                    nics: int = 1) -> dict[str, float]:
    """Bytes per step of one GPU's intra-server link and one server's NIC, and the ring steps of each,
    for one FSDP unit's collectives (multiply the steps by the units for the latency terms).

    Args:
        sharding: a :data:`~ddlscope.specs.traits.SHARDINGS` name or FSDP's (``FULL_SHARD``).
        gather_bytes: ``P``, the bytes of one parameter all-gather (all units together).
        grad_bytes: ``S``, the gradient bytes reduced per step.
        ranks, servers, nics: ``p``, ``m`` (dividing ``p``), NICs per server.

    Returns:
        ``intra_bytes``, ``intra_steps``, ``network_bytes`` (per NIC), ``network_steps``.

    Raises:
        ValueError: an unknown sharding, ``servers`` not dividing ``ranks``.
    """
    s = canonical_sharding(sharding)
    if ranks % servers:
        raise ValueError(f"servers: {servers} servers do not divide {ranks} GPUs evenly")
    ag, rs = COLLECTIVES_PER_UNIT[s]
    p, m = ranks, servers
    g = p // m
    if s == "hybrid":
        intra = ag * ring_allgather_bytes_per_rank(gather_bytes, g) + rs * ring_allgather_bytes_per_rank(grad_bytes, g)
        net = ring_allreduce_bytes_per_rank(grad_bytes, m) / nics if m > 1 else 0.0
        return {"intra_bytes": intra, "intra_steps": (ag + rs) * ring_allgather_steps(g),
                "network_bytes": net, "network_steps": ring_allreduce_steps(m) if m > 1 else 0}
    total = ag * ring_allgather_bytes_per_rank(gather_bytes, p) + rs * ring_allgather_bytes_per_rank(grad_bytes, p)
    steps = (ag + rs) * ring_allgather_steps(p)
    if m == 1:
        return {"intra_bytes": total, "intra_steps": steps, "network_bytes": 0.0, "network_steps": 0}
    return {"intra_bytes": 0.0, "intra_steps": 0, "network_bytes": total / nics, "network_steps": steps}


def fsdp_state_bytes(sharding: str, num_params: float, grad_bytes: float, precision: str, ranks: int,
                     gpus_per_server: int, units: int) -> float:
    """Model state one GPU holds under ``sharding`` (bytes): parameters, gradients, Adam state and,
    for ``zero3``/``hybrid``, two units of gathered parameters (module docstring's table).

    Args:
        num_params: ``Ψ``; grad_bytes: ``S``; precision: the compute precision (``w`` and ``K``);
        ranks: ``p``; gpus_per_server: ``g`` (the shard group of ``hybrid``); units: ``k`` >= 1.

    Raises:
        ValueError: an unknown sharding or precision-free nonsense (``units`` < 1).
    """
    s = canonical_sharding(sharding)
    if units < 1:
        raise ValueError(f"units: expected >= 1 FSDP unit, got {units}")
    w = param_bytes_per_param(precision)
    K = ADAM_STATE_BYTES_PER_PARAM_MIXED if w == 2.0 else ADAM_STATE_BYTES_PER_PARAM_FP32
    d = gpus_per_server if s == "hybrid" else ranks
    params, opt = w * num_params, K * num_params
    if s == "zero1":
        return params + grad_bytes + opt / d
    if s == "zero2":
        return params + (grad_bytes + opt) / d
    return (params + grad_bytes + opt) / d + 2 * params / units


def unsharded_state_bytes(num_params: float, grad_bytes: float, precision: str) -> float:
    """``U = wΨ + S + KΨ``: the model state of an unsharded data-parallel replica (bytes)."""
    w = param_bytes_per_param(precision)
    K = ADAM_STATE_BYTES_PER_PARAM_MIXED if w == 2.0 else ADAM_STATE_BYTES_PER_PARAM_FP32
    return (w + K) * num_params + grad_bytes


def prefetch_exposed_s(comm_s: N, compute_s: N, units: N) -> N:
    """Exposed communication of a prefetching FSDP step (s): the first unit's all-gather cannot be
    hidden (nothing computes before it) and the rest hides behind the compute of the units while it
    lasts: ``comm/k + max(0, comm (1 - 1/k) - compute)``, with ``k`` units (>= 1)."""
    if isinstance(comm_s, pl.Expr):
        k = pl.max_horizontal(units, 1.0)
        return comm_s / k + pl.max_horizontal(comm_s * (1 - 1 / k) - compute_s, 0.0)
    k = max(units, 1.0)
    return comm_s / k + max(comm_s * (1 - 1 / k) - compute_s, 0.0)


# -- the same as Polars expressions, for the step-time model (ddlscope.model.arch_costs) -----------
def _sharding_is(sharding: pl.Expr, name: str) -> pl.Expr:
    """Rows of ``name`` (null: ``zero3``, FSDP's default ``FULL_SHARD``)."""
    return sharding.fill_null("zero3") == name


def fsdp_terms(ctx: dict[str, pl.Expr]) -> dict[str, pl.Expr]:
    """The FSDP rows' link bytes, messages and memory as expressions over a breakdown in progress.

    ``ctx`` (from :func:`ddlscope.model.arch_costs.context`): ``p``, ``g``, ``m`` (floats), ``k``
    (units), ``S``, ``nics``, ``precision``, ``sharding``, ``num_params``, ``needed`` (the memory
    the default rule gives: the replica's peak). Returns ``intra_bytes``, ``intra_msgs``,
    ``network_bytes`` (per NIC), ``network_msgs``, ``needed`` (bytes one GPU needs; null where
    ``num_params`` is). The module docstring gives the formulas.
    """
    p, g, m, k, S, nics = (ctx[x] for x in ("p", "g", "m", "k", "S", "nics"))
    sh, psi = ctx["sharding"], ctx["num_params"]
    w = pl.when(ctx["precision"].is_in(["fp16", "bf16"])).then(2.0).otherwise(4.0)  # no String cast per row
    P = pl.coalesce(psi * w, S)
    hybrid, zero3 = _sharding_is(sh, "hybrid"), _sharding_is(sh, "zero3")
    ag = pl.when(hybrid | zero3).then(2.0).otherwise(1.0)  # COLLECTIVES_PER_UNIT; one reduce-scatter each
    group = pl.when(hybrid).then(g).otherwise(p)
    coll = ag * ring_allgather_bytes_per_rank(P, group) + ring_allgather_bytes_per_rank(S, group)
    steps = k * (ag + 1) * ring_allgather_steps(group)
    on_intra = hybrid | (m <= 1)
    net_hybrid = pl.when(m > 1).then(ring_allreduce_bytes_per_rank(S, m)).otherwise(0.0)
    K = pl.when(w == 2.0).then(ADAM_STATE_BYTES_PER_PARAM_MIXED).otherwise(ADAM_STATE_BYTES_PER_PARAM_FP32)
    params, opt = w * psi, K * psi
    state = (pl.when(_sharding_is(sh, "zero1")).then(params + S + opt / group)
             .when(_sharding_is(sh, "zero2")).then(params + (S + opt) / group)
             .otherwise((params + S + opt) / group + 2 * params / pl.max_horizontal(k, 1.0)))
    return {
        "intra_bytes": pl.when(on_intra).then(coll).otherwise(0.0),
        "intra_msgs": pl.when(on_intra).then(steps).otherwise(0.0),
        "network_bytes": pl.when(hybrid).then(net_hybrid).when(m > 1).then(coll).otherwise(0.0) / nics,
        "network_msgs": pl.when(hybrid).then(pl.when(m > 1).then(k * ring_allreduce_steps(m)).otherwise(0.0))
        .when(m > 1).then(steps).otherwise(0.0),
        "needed": ctx["needed"] - (params + S + opt) + state,
    }


__all__ = ["ADAM_STATE_BYTES_PER_PARAM_FP32", "ADAM_STATE_BYTES_PER_PARAM_MIXED", "COLLECTIVES_PER_UNIT", "SHARDINGS",
           "fsdp_link_bytes", "fsdp_state_bytes", "fsdp_terms", "param_bytes_per_param", "prefetch_exposed_s",
           "unsharded_state_bytes"]
