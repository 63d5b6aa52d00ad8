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
overlapped with the blockwise attention; the backward passes them again with their gradients);
expert parallelism: D. Lepikhin et al., "GShard: Scaling Giant Models with Conditional Computation
and Automatic Sharding", 2020 (sec. 2.2: the experts of a layer split over devices, tokens
dispatched to them and combined back by two all-to-alls), S. Rajbhandari et al., "DeepSpeed-MoE:
Advancing Mixture-of-Experts Inference and Training", ICML 2022 (sec. 4-5: expert parallelism
within the data-parallel group, the experts' gradients reduced among the ``dp / ep`` replicas of
each expert, the dense ones over all ``dp``), and the Megatron-Core MoE documentation
(``--expert-model-parallel-size`` taken from the data-parallel ranks; the all-to-all token
dispatcher, dispatch and combine in the forward and their gradients in the backward). The cost
model is our reconstruction from them.

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
- EP (mixture of experts, ``ep`` > 1; every layer an MoE block of ``E`` experts, top-``k``): the
  ``ep`` GPUs of an expert-parallel group are ``ep`` consecutive members of the data-parallel group
  (``ep`` divides ``dp`` and ``E``), each holding ``E / ep`` experts of every layer. Per MoE layer
  and micro-batch four all-to-alls (dispatch and combine in the forward, their gradients in the
  backward), ``4 M L / pp`` per step, each sending the GPU's routed token copies ``X = k A / (tp
  cp)`` (``T / (tp cp)`` tokens after the sequence-parallel split, ``k`` copies, ``h`` x 2 bytes)
  less the share it keeps: ``X (ep - 1) / ep`` in ``ep - 1`` messages. The group's members sit
  ``tp cp pp`` ranks apart, so ``g_e = min(ep, max(1, floor(g / (tp cp pp))))`` of them share a
  server: ``X (g_e - 1) / ep`` (``g_e - 1`` messages) on the intra-server link, ``X (ep - g_e) /
  ep`` (``ep - g_e`` messages) on the NICs shared by the server's ``g`` GPUs (all of it intra when
  the group fits a server, ``g_e = ep``). Perfect load balance (capacity factor 1); the experts
  split over ``tp`` like the dense MLP, their TP traffic in the TP all-reduces above. Memory:
  the experts' share ``U_e = (w + K) N_e + S_e`` of the model state (``N_e`` expert parameters,
  ``S_e = S N_e / N`` their gradients) is divided by ``ep``. DP: the dense gradients ``(S - S_e) /
  (tp pp)`` all-reduced over the ``cp dp`` replicas as below, the experts' ``S_e / (ep tp pp)``
  over their ``cp dp / ep`` replicas, ``g_x = max(1, floor(g_r / min(ep, max(1, dp_s))))`` of them
  per server (``dp_s = g / (tp cp pp)`` data-parallel ranks per server), ``m_x = cp dp / (ep
  g_x)`` servers, the server's NICs carrying ``g / g_x`` such rings; ``k`` more messages per ring
  step. At ``ep = 1`` nothing of this applies (a dense model's figures are exactly those without
  EP; an MoE model's experts are reduced with the dense gradients).
- memory: ``U / (tp pp) + (peak - U) / (tp cp)`` (model state split over the tensor and pipeline
  GPUs, activations of ``L`` layers' worth of micro-batches divided by ``tp cp``; ``U`` as
  :func:`ddlscope.model.sharded.unsharded_state_bytes`; with EP ``U - U_e + U_e / ep`` in place of
  ``U``).
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
    ``layer_activation_bytes``, ``layer_kv_bytes``, ``ep``, ``experts_per_token``, ``expert_params``
    (null: 1, 1, 1, 1, 1, 1 layer, 0 bytes, ``2 A``, 1, dense, dense)."""
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
    ep = ctx["ep"].fill_null(1).cast(f)
    N = ctx["num_params"]
    Ne = ctx["expert_params"].fill_null(0.0)
    topk = ctx["experts_per_token"].fill_null(0).cast(f)
    moe_ep = (ep > 1) & (topk > 0)
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
    # EP: the experts' gradient share (0 for a dense model or at ep = 1: reduced with the dense ones)
    S_e = pl.when(moe_ep & (N > 0)).then(S * Ne / N).otherwise(0.0)
    shard = (S - S_e) / (tp * pp)
    dp_intra = ring_allreduce_bytes_per_rank(shard, g_dp)
    dp_net = (g / g_dp) * ring_allreduce_bytes_per_rank(shard, m_dp)
    dp_s = g / (tp * cp * pp)  # data-parallel ranks per server (< 1: a replica spans servers)
    g_x = pl.max_horizontal((g_dp / pl.min_horizontal(ep, pl.max_horizontal(dp_s, 1.0))).floor(), 1.0)
    m_x = cp * dp / (ep * g_x)
    shard_x = S_e / (ep * tp * pp)
    ex_intra = pl.when(moe_ep).then(ring_allreduce_bytes_per_rank(shard_x, g_x)).otherwise(0.0)
    ex_net = pl.when(moe_ep).then((g / g_x) * ring_allreduce_bytes_per_rank(shard_x, m_x)).otherwise(0.0)
    ex_intra_msgs = pl.when(moe_ep).then(k * ring_allreduce_steps(g_x)).otherwise(0.0)
    ex_net_msgs = pl.when(moe_ep).then(k * ring_allreduce_steps(m_x)).otherwise(0.0)
    # EP all-to-alls: 4 per MoE layer and micro-batch, X (ep-1)/ep each, split by where the peers sit
    g_e = pl.min_horizontal(ep, pl.max_horizontal(dp_s.floor(), 1.0))
    n_a2a = 4 * M * L / pp
    X = topk * A / (tp * cp)
    a2a_intra = pl.when(moe_ep).then(n_a2a * X * (g_e - 1) / ep).otherwise(0.0)
    a2a_net = pl.when(moe_ep).then(n_a2a * X * (ep - g_e) / ep).otherwise(0.0)
    a2a_intra_msgs = pl.when(moe_ep).then(n_a2a * (g_e - 1)).otherwise(0.0)
    a2a_net_msgs = pl.when(moe_ep).then(n_a2a * (ep - g_e)).otherwise(0.0)
    w = pl.when(ctx["precision"].is_in(["fp16", "bf16"])).then(2.0).otherwise(4.0)  # no String cast per row
    K = pl.when(w == 2.0).then(ADAM_STATE_BYTES_PER_PARAM_MIXED).otherwise(ADAM_STATE_BYTES_PER_PARAM_FP32)
    U = (w + K) * N + S
    U_e = pl.when(moe_ep).then((w + K) * Ne + S_e).otherwise(0.0)
    held = U - U_e + U_e / ep
    return {
        "intra_bytes": (tp_bytes + pl.when(cp_on_net).then(0.0).otherwise(cp_bytes)
                        + pl.when(pp_on_net).then(0.0).otherwise(pp_bytes) + dp_intra + ex_intra + a2a_intra),
        "intra_msgs": (tp_msgs + pl.when(cp_on_net).then(0.0).otherwise(cp_msgs)
                       + pl.when(pp_on_net).then(0.0).otherwise(pp_msgs) + k * ring_allreduce_steps(g_dp)
                       + ex_intra_msgs + a2a_intra_msgs),
        "network_bytes": (pl.when(cp_on_net).then(g * cp_bytes).otherwise(0.0)
                          + pl.when(pp_on_net).then(g * pp_bytes).otherwise(0.0) + dp_net + ex_net
                          + g * a2a_net) / nics,
        "network_msgs": (pl.when(cp_on_net).then(cp_msgs).otherwise(0.0)
                         + pl.when(pp_on_net).then(pp_msgs).otherwise(0.0) + k * ring_allreduce_steps(m_dp)
                         + ex_net_msgs + a2a_net_msgs),
        "needed": held / (tp * pp) + (ctx["needed"] - U) / (tp * cp),
        "compute_scale": (M + (pp - 1) / v) / (tp * cp * pp),
        "replicas": dp * M,
    }
