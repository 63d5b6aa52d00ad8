r"""3D parallelism (Megatron-LM): tensor (``tp``), context (``cp``), pipeline (``pp``, 1F1B or
interleaved with ``v`` virtual stages) and data (``dp``) parallelism: compute per GPU, the pipeline
bubble, collectives per step on their links, memory per GPU. Plain arithmetic on numbers or Polars
expressions.

Sources: M. Shoeybi et al., "Megatron-LM", 2019 (sec. 3: two all-reduces of the activations in the
forward and two in the backward of each transformer layer, on the tensor-parallel group); D.
Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", SC 2021 (sec. 2.2: the 1F1B bubble ``(pp - 1) / M`` of the ideal time, interleaved
``(pp - 1) / (M v)``; sec. 4.1: the scatter/gather of the point-to-point tensor over the ``tp``
ranks); V. Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
2022 (sequence parallelism divides every activation by ``tp``; 1F1B keeps ``pp`` micro-batches in
flight on the first stage, i.e. the activations of ``L`` layers); H. Liu et al., "Ring Attention
with Blockwise Transformers for Near-Infinite Context", 2023 (context parallelism: each of ``cp``
GPUs holds ``s / cp`` of the sequence and passes its keys and values round a ring, ``cp - 1`` hops,
overlapped with the blockwise attention; the backward passes them again with their gradients). The
cost model is our reconstruction from them.

Placement: ``tp`` innermost (within a server, ``tp <= g``), then ``cp``, then ``pp``, then
``dp``; ``dp = p / (tp cp pp)``. The Workload is one micro-batch of the whole model (``b`` sequences):
``A = layer_activation_bytes`` (``b s h`` x 2 bytes, the tensor TP reduces and PP sends),
``KV = layer_kv_bytes`` (a layer's keys and values, ``2 A`` where unknown), ``L`` layers, ``S``
gradient bytes, ``k`` gradient buckets, ``M`` micro-batches per step.

Per GPU per step:

- compute: the micro-batch's time ``t`` split over ``tp cp pp`` GPUs, run ``M + (pp - 1)/v``
  times (the bubble): ``scale = (M + (pp - 1) / v) / (tp cp pp)`` on the compute-bound and
  memory-bound time (the bubble is counted as compute time, the GPUs idle in it).
- TP (intra-server link): ``4 M L/pp`` all-reduces of the GPU's ``A / cp``: ``2 (tp-1)/tp A/cp``
  each, ``2 (tp-1)`` steps.
- CP: ``M L/pp`` x three passes (forward keys/values; backward keys/values and their gradients)
  of ``(cp-1)/cp KV/tp`` in ``cp - 1`` hops; on the intra-server link when ``tp cp <= g``, else on
  the NICs shared by the server's ``g`` GPUs.
- PP: ``2 M v`` sends of ``A / (tp cp)`` (activation forward, gradient backward) per GPU; on the
  NICs (shared by the server's ``g`` GPUs) when a pipeline spans servers (``tp cp pp > g``), else
  on the intra-server link.
- DP: all-reduce of the GPU's ``S / (tp pp)`` gradients once per step over the ``cp dp`` replicas
  of its parameters, hierarchical as ``allreduce_cluster``: ``g_r = max(1, g / (tp pp))`` members
  per server, ``m_r = cp dp / g_r`` servers; the server's NICs carry ``g / g_r`` groups' rings.
- memory: ``U / (tp pp) + (peak - U) / (tp cp)`` (model state split over the tensor and pipeline
  GPUs, activations of ``L`` layers' worth of micro-batches divided by ``tp cp``; ``U`` as
  :func:`ddlscope.model.sharded.unsharded_state_bytes`).
- overlap: none (TP on the critical path, blocking point-to-point sends, the DP all-reduce after the
  last micro-batch: Megatron without ``--overlap-grad-reduce``).
- samples per step: ``b M dp``.
"""

from __future__ import annotations

import polars as pl

from ddlscope.model.collectives import ring_allreduce_bytes_per_rank, ring_allreduce_steps
from ddlscope.model.sharded import ADAM_STATE_BYTES_PER_PARAM_FP32, ADAM_STATE_BYTES_PER_PARAM_MIXED


def bubble_fraction(pp: int, microbatches: int, virtual_stages: int = 1) -> float:
    """The pipeline bubble as a fraction of the ideal step: ``(pp - 1) / (M v)`` (Narayanan et al.,
    SC 2021, sec. 2.2).

    Raises:
        ValueError: a count < 1.
    """
    if min(pp, microbatches, virtual_stages) < 1:
        raise ValueError(f"pp, microbatches, virtual_stages: expected >= 1, got {pp}, {microbatches}, {virtual_stages}")
    return (pp - 1) / (microbatches * virtual_stages)


def tp_bytes_per_step(activation_bytes: float, tp: int, layers: int, pp: int, microbatches: int) -> float:
    """Bytes one GPU sends on the tensor-parallel group per step: ``4 M L/pp x 2 (tp-1)/tp A``."""
    return 4 * microbatches * layers / pp * ring_allreduce_bytes_per_rank(activation_bytes, tp)


def pipeline_terms(ctx: dict[str, pl.Expr]) -> dict[str, pl.Expr]:
    """The ``3d`` rows' link bytes, messages, memory, compute scale and samples per step as
    expressions (module docstring); ``ctx`` as :func:`ddlscope.model.arch_costs.context` gives it,
    with ``tp``, ``cp``, ``pp``, ``virtual_stages``, ``microbatches``, ``num_layers``,
    ``layer_activation_bytes``, ``layer_kv_bytes`` (null: 1, 1, 1, 1, 1, 1 layer, 0 bytes,
    ``2 A``)."""
    p, g, k, S, nics = (ctx[x] for x in ("p", "g", "k", "S", "nics"))
    f = pl.Float64
    tp = ctx["tp"].fill_null(1).cast(f)
    cp = ctx["cp"].fill_null(1).cast(f)
    pp = ctx["pp"].fill_null(1).cast(f)
    v = ctx["virtual_stages"].fill_null(1).cast(f)
    M = ctx["microbatches"].fill_null(1).cast(f)
    L = ctx["num_layers"].fill_null(1).cast(f)
    A = ctx["layer_activation_bytes"].fill_null(0.0)
    KV = pl.coalesce(ctx["layer_kv_bytes"], 2 * A)
    dp = p / (tp * cp * pp)
    tp_bytes = 4 * M * L / pp * ring_allreduce_bytes_per_rank(A / cp, tp)
    tp_msgs = 4 * M * L / pp * ring_allreduce_steps(tp)
    cp_bytes = 3 * M * L / pp * (cp - 1) / cp * KV / tp
    cp_msgs = 3 * M * L / pp * (cp - 1)
    cp_on_net = tp * cp > g
    pp_bytes = pl.when(pp > 1).then(2 * M * v * A / (tp * cp)).otherwise(0.0)
    pp_msgs = pl.when(pp > 1).then(2 * M * v).otherwise(0.0)
    pp_on_net = tp * cp * pp > g
    g_dp = pl.max_horizontal((g / (tp * pp)).floor(), 1.0)
    m_dp = cp * dp / g_dp
    shard = S / (tp * pp)
    dp_intra = ring_allreduce_bytes_per_rank(shard, g_dp)
    dp_net = (g / g_dp) * ring_allreduce_bytes_per_rank(shard, m_dp)
    w = pl.when(ctx["precision"].cast(pl.String).is_in(["fp16", "bf16"])).then(2.0).otherwise(4.0)
    K = pl.when(w == 2.0).then(ADAM_STATE_BYTES_PER_PARAM_MIXED).otherwise(ADAM_STATE_BYTES_PER_PARAM_FP32)
    U = (w + K) * ctx["num_params"] + S
    return {
        "intra_bytes": (tp_bytes + pl.when(cp_on_net).then(0.0).otherwise(cp_bytes)
                        + pl.when(pp_on_net).then(0.0).otherwise(pp_bytes) + dp_intra),
        "intra_msgs": (tp_msgs + pl.when(cp_on_net).then(0.0).otherwise(cp_msgs)
                       + pl.when(pp_on_net).then(0.0).otherwise(pp_msgs) + k * ring_allreduce_steps(g_dp)),
        "network_bytes": (pl.when(cp_on_net).then(g * cp_bytes).otherwise(0.0)
                          + pl.when(pp_on_net).then(g * pp_bytes).otherwise(0.0) + dp_net) / nics,
        "network_msgs": (pl.when(cp_on_net).then(cp_msgs).otherwise(0.0)
                         + pl.when(pp_on_net).then(pp_msgs).otherwise(0.0) + k * ring_allreduce_steps(m_dp)),
        "needed": U / (tp * pp) + (ctx["needed"] - U) / (tp * cp),
        "compute_scale": (M + (pp - 1) / v) / (tp * cp * pp),
        "replicas": dp * M,
    }
