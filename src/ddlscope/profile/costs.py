"""FLOPs and bytes of one ATen operator call, from the shapes and dtypes of its tensors.

Every rule here works on tensor *metadata* only (sizes, strides, dtypes), so it runs on the meta
device. The functions are pure; :mod:`ddlscope.profile.tracer` calls them once per dispatched op.

FLOPs
    Matmul-class ops (``mm``, ``addmm``, ``bmm``, ``baddbmm``...) use the formulas PyTorch registers
    in ``torch.utils.flop_counter`` (2 FLOPs per multiply-accumulate; bias additions not counted).
    Convolutions (forward and backward), the fused scaled-dot-product-attention kernels and cuDNN's
    fused RNN use ours (:data:`OWN_FLOP_FORMULAS`): :func:`conv_macs` (PyTorch's weight-gradient
    formula is ``groups`` times too high), :func:`attention_flops` (``4 B H Lq Lk D`` forward,
    2.5x that backward, the recomputation of ``Q K^T`` included: Dao, "FlashAttention-2", 2023,
    sec. 4.1) and :func:`rnn_macs`. ``mv``, ``addmv``, ``dot`` and ``vdot`` are added with the same
    convention (``2 m n`` and ``2 n``). An op of a compute-heavy kind with no formula (linear
    algebra, FFT, an unknown matmul or convolution kernel: :func:`is_unpriced`) gets 0 FLOPs and
    is flagged *unpriced*, never estimated per element.
    Every other op is memory-bound and gets an *estimate*: ``k`` FLOPs per element of its largest
    operand, ``k`` from :data:`FLOPS_PER_ELEMENT` (1 by default; 0 for pure data movement such as
    copies, concatenation, gathers and fills); scatter-accumulations (``index_add_``,
    ``scatter_add_``, embedding backward) and ``embedding_bag`` pooling count one add per element
    added in, not per element of the (possibly huge) destination. These FLOPs only set the roofline floor of
    memory-bound time, which they practically never reach (intensity well under 1 FLOP/byte).

Bytes
    ``read_bytes`` = bytes of every tensor argument, ``write_bytes`` = bytes of every tensor
    result, where a tensor's bytes are ``itemsize x`` the number of *distinct* elements it
    addresses (a broadcast operand with stride 0 is read once: a bias of ``n`` elements added to
    an ``m x n`` matrix reads ``n`` elements, not ``m n``). The minimum-traffic assumption of the
    roofline model (Williams, Waterman and Patterson, "Roofline", CACM 52(4), 2009): each operand
    moves between DRAM and the chip once. Exceptions, each from what the kernel must touch:

    - views and aliases (``view``, ``t``, ``expand``, ``detach``, ``_unsafe_view``...): 0 bytes;
    - allocations (``empty*``): 0 bytes; fills and factories (``zeros``, ``fill_``, ``zero_``,
      ``*_like``, random initialisers): the result is written, nothing read;
    - ``copy_``: the source is read, the destination written (not read);
    - row gathers (``embedding``, ``index_select``, ``gather``, ``index.Tensor``): the indices
      plus the gathered rows are read (``numel(result) x itemsize``), not the whole table;
      ``_embedding_bag``: indices, offsets and ``numel(indices) x row bytes``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch.utils.flop_counter import flop_registry

from ddlscope.model.compute import GEMM_ALIGNMENT_BYTES

aten = torch.ops.aten

# -- FLOP formulas of compute-class ops (ours, where torch's are missing or wrong) ---------------
def conv_macs(x_shape: Sequence[int], w_shape: Sequence[int], out_shape: Sequence[int], transposed: bool) -> int:
    """Multiply-accumulates of one (grouped) convolution, the same for each of its three passes
    (forward, input gradient, weight gradient): ``N x prod(output spatial) x C_out x (C_in / groups)
    x prod(kernel)`` for a plain convolution. The weight's shape already holds the per-group
    channel count: ``(C_out, C_in / groups, *kernel)``, so MACs = ``N x prod(out spatial) x
    w[0] x w[1] x prod(kernel)``. A transposed convolution is the input-gradient of a plain one from
    its output to its input: weight ``(C_in, C_out / groups, *kernel)``, MACs = ``N x prod(input
    spatial) x w[0] x w[1] x prod(kernel)``.

    Each output element of a plain convolution is a dot product of ``(C_in / groups) x
    prod(kernel)`` terms; the input gradient and the weight gradient are convolutions over the same
    ``(output position, output channel, per-group input channel, kernel tap)`` index space, so they
    do the same number of multiply-accumulates (the standard accounting: e.g. Chetlur et al.,
    "cuDNN: Efficient Primitives for Deep Learning", 2014, sec. 2). ``torch.utils.flop_counter``
    multiplies the weight-gradient count by ``groups`` (its ``conv_backward_flop`` transposes the
    batch and channel axes of the full ``C_in``): 32x too high for a 32-channel depthwise layer.
    Padding is not discounted (the kernel's taps on the border are computed, as cuDNN does).
    """
    spatial = (x_shape if transposed else out_shape)[2:]
    return int(x_shape[0]) * math.prod(spatial) * int(w_shape[0]) * int(w_shape[1]) * math.prod(w_shape[2:])


def _conv_flops(args: Sequence[Any], out: Any) -> float:
    # convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    x, w, transposed = args[0], args[1], bool(args[6])
    y = out if isinstance(out, torch.Tensor) else out[0]
    return 2.0 * conv_macs(x.shape, w.shape, y.shape, transposed)


def _conv_backward_flops(args: Sequence[Any], out: Any) -> float:
    # convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    #                      output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias)
    grad_out, x, w, transposed, mask = args[0], args[1], args[2], bool(args[7]), args[10]
    macs = conv_macs(x.shape, w.shape, grad_out.shape, transposed)
    return 2.0 * macs * (int(bool(mask[0])) + int(bool(mask[1])))


def attention_flops(q_shape: Sequence[int], k_shape: Sequence[int], v_shape: Sequence[int]) -> float:
    """Forward FLOPs of fused scaled-dot-product attention on ``query (B, H, Lq, D)``, ``key (B, H_kv,
    Lk, D)``, ``value (B, H_kv, Lk, Dv)``: the two matmuls ``Q K^T`` and ``P V``, ``2 B H Lq Lk (D +
    Dv)`` = ``4 B H Lq Lk D`` for ``Dv = D`` (grouped-query K/V heads are broadcast to the ``H`` query
    heads; softmax and scaling are not counted). The convention of Dao, "FlashAttention-2", 2023,
    sec. 4.1 ("the forward pass FLOPs: 4 seqlen^2 head_dimension number_of_heads"); a causal mask
    is not discounted."""
    b, h, lq, d = (int(s) for s in q_shape)
    lk, dv = int(k_shape[2]), int(v_shape[3])
    return 2.0 * b * h * lq * lk * (d + dv)


ATTENTION_BACKWARD_FACTOR = 2.5
"""Backward FLOPs of fused attention over its forward FLOPs: five matmuls (``Q K^T`` recomputed,
``dV``, ``dP``, ``dQ``, ``dK``) against two, "the backward pass FLOPs are 2.5 times the forward"
(Dao, "FlashAttention-2", 2023, sec. 4.1; the recomputation is FlashAttention's, Dao et al.,
NeurIPS 2022, sec. 3.1). Equals ``torch.utils.flop_counter``'s ``sdpa_backward_flop_count``."""


def _attention_forward_flops(args: Sequence[Any], out: Any) -> float:
    return attention_flops(args[0].shape, args[1].shape, args[2].shape)


def _attention_backward_flops(args: Sequence[Any], out: Any) -> float:
    # (grad_out, query, key, value, ...)
    return ATTENTION_BACKWARD_FACTOR * attention_flops(args[1].shape, args[2].shape, args[3].shape)


RNN_GATES: dict[int, int] = {0: 1, 1: 1, 2: 4, 3: 3}
"""Gates per cell of the cuDNN RNN modes (``cudnnRNNMode_t``: 0 RNN_RELU, 1 RNN_TANH, 2 LSTM, 3 GRU)."""


def rnn_macs(mode: int, input_size: int, hidden_size: int, num_layers: int, bidirectional: bool,
             batch_steps: int) -> int:
    """Multiply-accumulates of the forward of a multi-layer RNN as cuDNN runs it (one fused call):
    per layer and direction, ``G (input + hidden) hidden`` per token for the input and recurrent
    matmuls ``W_ih x_t`` and ``W_hh h_(t-1)`` of the ``G`` gates (4 for LSTM, 3 for GRU, 1 for a
    plain RNN), times ``batch_steps`` = batch x time steps (the sum of the batch sizes of a packed
    sequence). Layers after the first take the previous layer's output (``hidden x directions``
    wide). Gate non-linearities and biases are not counted. The backward does the same MACs twice:
    once for the data gradients (``dx``, ``dh``) and once for the weight gradients (cuDNN's
    ``cudnnRNNBackwardData`` and ``cudnnRNNBackwardWeights``), so a training step is 3x forward.
    """
    gates, dirs = RNN_GATES.get(int(mode), 1), 2 if bidirectional else 1
    macs = 0
    for layer in range(num_layers):
        width = input_size if layer == 0 else hidden_size * dirs
        macs += dirs * gates * (width + hidden_size) * hidden_size * batch_steps
    return macs


def _rnn_args(args: Sequence[Any], offset: int) -> tuple[int, int, int, int, bool, int]:
    """(mode, input_size, hidden_size, layers, bidirectional, batch x steps) of ``_cudnn_rnn`` (offset 0)
    or ``_cudnn_rnn_backward`` (offset: its extra output/grad arguments)."""
    x = args[0]
    mode, hidden, layers = int(args[6 + offset]), int(args[7 + offset]), int(args[9 + offset])
    batch_first, bidirectional, batch_sizes = bool(args[10 + offset]), bool(args[13 + offset]), args[14 + offset]
    del batch_first  # batch x steps is the product of the first two dimensions either way
    batch_steps = sum(int(b) for b in batch_sizes) if batch_sizes else int(x.shape[0]) * int(x.shape[1])
    return mode, int(x.shape[-1]), hidden, layers, bidirectional, batch_steps


def _rnn_forward_flops(args: Sequence[Any], out: Any) -> float:
    return 2.0 * rnn_macs(*_rnn_args(args, 0))


def _rnn_backward_flops(args: Sequence[Any], out: Any) -> float:
    # _cudnn_rnn_backward(input, weight, weight_stride0, weight_buf, hx, cx, output, grad_output, grad_hy,
    #                     grad_cy, mode, ...): mode at 10 = 6 + 4; output_mask last
    mask = args[21]
    return 2.0 * rnn_macs(*_rnn_args(args, 4)) * (1 + int(bool(mask[3])))


OWN_FLOP_FORMULAS: dict[Any, Any] = {
    aten.convolution: _conv_flops,
    aten._convolution: _conv_flops,
    aten.convolution_overrideable: _conv_flops,
    aten.convolution_backward: _conv_backward_flops,
    aten.convolution_backward_overrideable: _conv_backward_flops,
    aten._scaled_dot_product_flash_attention: _attention_forward_flops,
    aten._scaled_dot_product_efficient_attention: _attention_forward_flops,
    aten._scaled_dot_product_cudnn_attention: _attention_forward_flops,
    aten._scaled_dot_product_flash_attention_for_cpu: _attention_forward_flops,
    aten._scaled_dot_product_fused_attention_overrideable: _attention_forward_flops,
    aten._scaled_dot_product_flash_attention_backward: _attention_backward_flops,
    aten._scaled_dot_product_efficient_attention_backward: _attention_backward_flops,
    aten._scaled_dot_product_cudnn_attention_backward: _attention_backward_flops,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _attention_backward_flops,
    aten._scaled_dot_product_fused_attention_overrideable_backward: _attention_backward_flops,
    aten._cudnn_rnn: _rnn_forward_flops,
    aten._cudnn_rnn_backward: _rnn_backward_flops,
}
"""ddlscope's own FLOP formulas (``f(args, out) -> FLOPs``), used before ``torch.utils.flop_counter``'s:
convolutions (:func:`conv_macs`, correct for grouped and depthwise convolutions), the fused
scaled-dot-product-attention kernels (:func:`attention_flops`, backward x
:data:`ATTENTION_BACKWARD_FACTOR`; including the CPU flash and "overrideable" kernels PyTorch has
no formula for) and cuDNN's fused RNN (:func:`rnn_macs`)."""

# -- classification by op type (the PAI study's way) ----------------------------------------------
_EXTRA_MATMUL = (aten.mv, aten.addmv, aten.dot, aten.vdot)

COMPUTE_BOUND_OPS: frozenset[Any] = frozenset([*flop_registry, *_EXTRA_MATMUL, *OWN_FLOP_FORMULAS])
"""Op packets counted as compute-bound *by type*: convolution and matrix-multiply class kernels
(GEMM/GEMV, convolution, fused attention). Everything else is memory-bound. Reconstruction of the
PAI study's split (Wang et al., IISWC 2019: "compute-bound" = convolution/GEMM-class operations,
"memory-bound" = element-wise, normalisation, reductions, embedding and data movement)."""

_GEMM_OPERANDS: dict[Any, tuple[int, ...]] = {
    aten.mm: (0, 1), aten.bmm: (0, 1), aten.addmm: (1, 2), aten.baddbmm: (1, 2), aten.addbmm: (1, 2),
}
"""Matrix-multiply packets and the positions of their two matrix operands (the result is the third)."""


def _leading_dimension_aligned(t: torch.Tensor) -> bool:
    """Whether the matrix ``t`` (its last two dimensions) has a leading dimension of a whole number of
    :data:`GEMM_ALIGNMENT_BYTES`: the stride of the dimension that is not unit-stride (row-major:
    the row stride; a transposed view, column-major: the column stride). A matrix with one row or
    one column, or with neither dimension unit-stride (PyTorch copies it first), counts as aligned."""
    if t.dim() < 2 or min(t.shape[-2:]) <= 1:
        return True
    s0, s1 = t.stride()[-2:]
    if s1 == 1:
        ld = s0
    elif s0 == 1:
        ld = s1
    else:
        return True
    return (ld * t.element_size()) % GEMM_ALIGNMENT_BYTES == 0


def gemm_aligned(func: Any, args: Sequence[Any], outputs: list[torch.Tensor]) -> bool | None:
    """For a matrix multiply (``mm``, ``bmm``, ``addmm``, ``baddbmm``, ``addbmm``): whether both
    operands and the result have 16-byte-aligned leading dimensions (:data:`GEMM_ALIGNMENT_BYTES`),
    i.e. whether cuBLAS can run its vectorised tensor-core kernels; ``None`` for any other op.

    Transformer-XL's full softmax over 267,735 words is the case that matters: the logits' row
    stride is odd, so the forward ``addmm`` and both backward ``mm`` are misaligned in FP16 and
    FP32 alike (the priced rate of such a GEMM: :data:`ddlscope.model.compute.MISALIGNED_GEMM_FLOP_PER_SM_CYCLE`).
    """
    where = _GEMM_OPERANDS.get(func.overloadpacket)
    if where is None:
        return None
    mats = [args[i] for i in where if i < len(args) and isinstance(args[i], torch.Tensor)]
    mats += [t for t in outputs[:1] if isinstance(t, torch.Tensor)]
    return all(_leading_dimension_aligned(t) for t in mats)


# -- bytes: special cases -------------------------------------------------------------------------
ALLOCATION_OPS: frozenset[Any] = frozenset([
    aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty, aten.new_empty_strided,
    aten.empty_permuted,
])
"""Ops that only allocate: no bytes moved (their results still count towards live memory)."""

WRITE_ONLY_OPS: frozenset[Any] = frozenset([
    aten.fill_, aten.zero_, aten.zeros, aten.ones, aten.full, aten.zeros_like, aten.ones_like,
    aten.full_like, aten.scalar_tensor, aten.new_zeros, aten.new_ones, aten.new_full, aten.arange,
    aten.normal_, aten.uniform_, aten.bernoulli_, aten.random_, aten.randn, aten.rand, aten.randint,
    aten.randperm, aten.randn_like, aten.rand_like, aten.randint_like, aten.eye, aten.linspace,
    aten.fill, aten.lift_fresh_copy, aten.exponential_, aten.geometric_, aten.log_normal_,
    aten.cauchy_,
])
"""Ops that write their result without reading their tensor arguments (fills, factories)."""

GATHER_OPS: dict[Any, tuple[int, ...]] = {
    aten.embedding: (1,),
    aten.index_select: (2,),
    aten.gather: (2,),
}
"""Row gathers: packet -> positions of the index arguments. Bytes read = the index tensors + the
gathered elements (``numel(result) x itemsize``)."""

EMBEDDING_BAG_OPS: frozenset[Any] = frozenset([
    aten._embedding_bag, aten._embedding_bag_forward_only, aten.embedding_bag,
])
"""``_embedding_bag(weight, indices, offsets, ..., per_sample_weights, ...)``: reads indices,
offsets, per-sample weights and one table row per index; writes all results."""

EMBEDDING_LOOKUP_OPS: frozenset[Any] = frozenset([aten.embedding, *EMBEDDING_BAG_OPS])
"""Ops that look rows up in an embedding table passed as their first argument."""

EMBEDDING_BACKWARD_OPS: frozenset[Any] = frozenset([
    aten.embedding_dense_backward, aten.embedding_backward, aten._embedding_bag_backward,
    aten._embedding_bag_dense_backward, aten._embedding_bag_sparse_backward,
    aten.embedding_sparse_backward,
])
"""Ops that produce the gradient of an embedding table."""

# -- FLOPs of memory-bound ops --------------------------------------------------------------------
_ZERO_FLOP = [
    aten._to_copy, aten.copy_, aten.clone, aten.cat, aten.stack, aten.constant_pad_nd, aten.index,
    aten.index_select, aten.gather, aten.embedding, aten.fill_,
    aten.zero_, aten.zeros, aten.ones, aten.full, aten.zeros_like, aten.ones_like, aten.full_like,
    aten.scalar_tensor, aten.new_zeros, aten.new_ones, aten.new_full, aten.arange, aten.contiguous,
    aten.repeat, aten.repeat_interleave, aten.roll, aten.flip, aten.split_with_sizes_copy,
    aten.slice_scatter, aten.select_scatter, aten.masked_fill, aten.masked_fill_, aten.tril,
    aten.triu, aten.lift_fresh_copy, aten.expand_copy, aten.permute_copy, aten.index_put,
    aten.index_put_, aten.select_backward, aten.slice_backward, aten.unfold_backward,
    aten.randperm,
    *ALLOCATION_OPS,
]
FLOPS_PER_ELEMENT: dict[Any, float] = {
    **{op: 0.0 for op in _ZERO_FLOP},
    # normalisation: mean, variance (subtract, square, accumulate), normalise (subtract, multiply),
    # affine (multiply, add) ~ 5 per element forward; the backward about 8
    aten.native_batch_norm: 5.0, aten._native_batch_norm_legit: 5.0,
    aten._native_batch_norm_legit_functional: 5.0, aten._native_batch_norm_legit_no_training: 2.0,
    aten.native_layer_norm: 5.0, aten.native_group_norm: 5.0,
    aten.native_batch_norm_backward: 8.0, aten.native_layer_norm_backward: 8.0,
    aten.native_group_norm_backward: 8.0, aten.batch_norm_backward: 8.0,
    # softmax: max, subtract, exp, sum, divide; backward: multiply, sum, subtract-multiply
    aten._softmax: 5.0, aten._log_softmax: 5.0, aten._safe_softmax: 5.0,
    aten._softmax_backward_data: 3.0, aten._log_softmax_backward_data: 3.0,
    # GELU (tanh or erf form) ~ 8 operations; its backward ~ 12
    aten.gelu: 8.0, aten.gelu_backward: 12.0,
    # fused multiply-add style pointwise ops
    aten.addcmul: 3.0, aten.addcmul_: 3.0, aten.addcdiv: 3.0, aten.addcdiv_: 3.0,
    aten.lerp: 3.0, aten.lerp_: 3.0,
}
"""Estimated FLOPs per element of the largest operand for memory-bound ops (default 1).
Operation counts of the textbook algorithms; estimates, stated as such."""


_ACCUMULATE_SOURCE: dict[Any, int] = {
    aten.index_add: 3, aten.index_add_: 3, aten.scatter_add: 3, aten.scatter_add_: 3,
    aten.embedding_dense_backward: 0, aten._embedding_bag_dense_backward: 0, aten._embedding_bag_backward: 0,
}
"""Scatter-accumulate ops: packet -> position of the tensor whose elements are added in (FLOPs = its
elements; the destination may be far larger and is not all touched)."""


def tensors_in(obj: Any) -> list[torch.Tensor]:
    """All tensors in ``obj`` (a tensor, or lists/tuples/dicts nesting them), in order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, list | tuple):
        return [t for item in obj for t in tensors_in(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in tensors_in(item)]
    return []


def distinct_elements(t: torch.Tensor) -> int:
    """Elements of ``t`` at distinct addresses: the product of the sizes of the dimensions whose
    stride is not 0 (a broadcast/expanded dimension reuses the same elements)."""
    n = 1
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if size == 0:
            return 0
        if stride != 0:
            n *= size
    return n


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a kernel moves to read or write ``t`` once: ``itemsize x distinct_elements(t)``."""
    return t.element_size() * distinct_elements(t)


def _sum_bytes(ts: Iterable[torch.Tensor]) -> int:
    return sum(tensor_bytes(t) for t in ts)


def op_bytes(func: Any, args: Sequence[Any], kwargs: dict[str, Any], outputs: list[torch.Tensor]) -> tuple[int, int]:
    """``(read_bytes, write_bytes)`` of one call of the OpOverload ``func`` (see the module
    docstring for the rules). ``outputs`` are its tensor results.

    Views and aliases are detected by the caller (they share storage with an input) and never
    reach this function.
    """
    packet = func.overloadpacket
    write = _sum_bytes(outputs)
    if packet in ALLOCATION_OPS:
        return 0, 0
    if packet in WRITE_ONLY_OPS:
        return 0, write
    if packet is aten.copy_:
        return tensor_bytes(args[1]) if isinstance(args[1], torch.Tensor) else 0, write
    if packet in GATHER_OPS:
        idx = [args[i] for i in GATHER_OPS[packet] if i < len(args) and isinstance(args[i], torch.Tensor)]
        return _sum_bytes(idx) + write, write
    if packet is aten.index:
        idx = [t for t in tensors_in(args[1])] if len(args) > 1 else []
        return _sum_bytes(idx) + write, write
    if packet in EMBEDDING_BAG_OPS:
        weight, indices = args[0], args[1]
        row_bytes = weight.element_size() * (weight.shape[-1] if weight.dim() > 1 else 1)
        others = [t for t in tensors_in(args[1:]) if t is not weight]
        return _sum_bytes(others) + indices.numel() * row_bytes, write
    read = _sum_bytes(tensors_in(args)) + _sum_bytes(tensors_in(kwargs))
    return read, write


def op_flops(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any, outputs: list[torch.Tensor]) -> float:
    """FLOPs of one call of ``func`` (see the module docstring): the registered
    ``torch.utils.flop_counter`` formula for matmul-class ops, else an estimate of ``k`` FLOPs per
    element of the largest operand."""
    packet = func.overloadpacket
    own = OWN_FLOP_FORMULAS.get(packet)
    if own is not None:
        return float(own(args, out))
    formula = flop_registry.get(packet)
    if formula is not None:
        return float(formula(*args, **kwargs, out_val=out))
    if is_unpriced(packet):
        return 0.0
    if packet in (aten.mv, aten.addmv):
        mat = args[0] if packet is aten.mv else args[1]
        return 2.0 * mat.shape[0] * mat.shape[1]
    if packet in (aten.dot, aten.vdot):
        return 2.0 * args[0].numel()
    if packet in EMBEDDING_BAG_OPS:  # sum/mean pooling: one add per looked-up element
        weight = args[0]
        return float(args[1].numel() * (weight.shape[-1] if weight.dim() > 1 else 1))
    if packet in _ACCUMULATE_SOURCE:  # one add per element scattered in
        src = args[_ACCUMULATE_SOURCE[packet]]
        return float(src.numel()) if isinstance(src, torch.Tensor) else 0.0
    k = FLOPS_PER_ELEMENT.get(packet, 1.0)
    if k == 0.0:
        return 0.0
    sizes = [t.numel() for t in tensors_in(args)] + [t.numel() for t in outputs]
    return k * float(max(sizes, default=0))


_HEAVY_SUBSTRINGS = ("convolution", "matmul", "attention", "rnn", "lstm", "gru", "linalg", "fft", "cholesky",
                     "svd", "einsum", "tensordot", "bilinear", "cdist", "kron")
_HEAVY_TOKENS = frozenset(["mm", "bmm", "mv", "addmm", "addbmm", "baddbmm", "addmv", "addr", "qr", "lu", "solve",
                           "eig", "eigh", "eigvals", "inverse", "det", "slogdet", "logdet", "pinv", "triangular",
                           "geqrf", "orgqr", "ormqr", "lstsq"])


@functools.cache
def is_unpriced(packet: Any) -> bool:
    """Whether an op (OpOverloadPacket) is of a compute-heavy kind (matmul, convolution, attention,
    recurrent layer, linear algebra, FFT), where a per-element estimate would be far off, judged by its name. Such an op
    without a FLOP formula (neither :data:`OWN_FLOP_FORMULAS` nor ``torch.utils.flop_counter``'s) is
    *unpriced*: :func:`op_flops` gives it 0 FLOPs, and the op table flags it (``unpriced``) and the
    profile lists it, rather than counting it silently."""
    if packet in OWN_FLOP_FORMULAS or packet in flop_registry or packet in _EXTRA_MATMUL:
        return False
    name = str(packet).rpartition(".")[2].lower()
    if "cell" in name or "norm" in name:
        # _thnn_fused_lstm_cell/_gru_cell (the gates' element-wise part), linalg_vector_norm (a reduction)
        return False
    tokens = [t for t in name.split("_") if t]
    return (any(w in name for w in _HEAVY_SUBSTRINGS) or any(t in _HEAVY_TOKENS for t in tokens)
            or any(t.startswith("conv") and not t.startswith("convert") for t in tokens))


def expected_unique_rows(num_rows: float, lookups: float) -> float:
    """Expected number of distinct rows touched by ``lookups`` independent uniform draws from a
    table of ``num_rows`` rows: ``N (1 - (1 - 1/N)^k)`` (the classical occupancy problem; Feller,
    "An Introduction to Probability Theory and Its Applications", vol. 1, ch. II). Computed as
    ``-N expm1(k log1p(-1/N))`` for accuracy with large ``N``.

    Uniform access is the most spread-out i.i.d. access pattern (the expected number of distinct
    rows is Schur-concave in the access probabilities), so for skewed (Zipf-like) real access this
    is an upper bound; it never exceeds ``min(N, k)``.

    Raises:
        ValueError: ``num_rows`` < 1 or ``lookups`` < 0.
    """
    if num_rows < 1 or lookups < 0:
        raise ValueError(f"expected_unique_rows: need num_rows >= 1 and lookups >= 0, got {num_rows}, {lookups}")
    if num_rows == 1:
        return 1.0 if lookups > 0 else 0.0
    return -num_rows * math.expm1(lookups * math.log1p(-1.0 / num_rows))


def rows_touched(num_rows: float, lookups: float, position_lookups: float = 0.0) -> float:
    """Expected distinct rows of a table touched per step.

    ``lookups`` counts the index elements at distinct addresses of every look-up (a broadcast index
    counts once); ``position_lookups`` is the part of them whose indices are position-like (a
    model buffer or an ``arange``, such as position ids ``0..S-1``), assumed distinct. The rest
    are input-driven and estimated as uniform draws (:func:`expected_unique_rows`):
    ``min(N, P + N (1 - (1 - 1/N)^(k - P)))``.

    Raises:
        ValueError: ``num_rows`` < 1, negative counts, or ``position_lookups`` > ``lookups``.
    """
    if position_lookups < 0 or position_lookups > lookups:
        raise ValueError(f"rows_touched: need 0 <= position_lookups <= lookups, got {position_lookups}, {lookups}")
    return min(float(num_rows), position_lookups + expected_unique_rows(num_rows, lookups - position_lookups))
