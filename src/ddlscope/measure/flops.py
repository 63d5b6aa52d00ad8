"""FLOPs of the compute-bound operators a trace recorded with their input shapes.

The profiler records ``Input Dims`` on CPU operators when run with ``record_shapes=True``;
execution traces always hold ``input_shapes``. Counted operators (the leaves that launch the GEMM
and attention kernels, so nothing is counted twice; ``aten::linear`` / ``aten::matmul`` are
composites whose children are counted):

======================================================  ==========================================
operator (input order)                                  FLOPs
======================================================  ==========================================
``aten::mm`` (A[m,k], B[k,n])                           ``2 m k n``
``aten::addmm`` (bias, A[m,k], B[k,n])                  ``2 m k n``
``aten::bmm`` (A[b,m,k], B[b,k,n])                      ``2 b m k n``
``aten::baddbmm`` (bias, A[b,m,k], B[b,k,n])            ``2 b m k n``
``aten::_scaled_dot_product_{flash,efficient,cudnn}``   ``4 b h s s_k d`` (Q K^T and P V)
``_attention`` (Q[b,h,s,d], K[b,h,s_k,d], ...)
the same ``..._attention_backward`` (dO, Q, K, ...)     ``10 b h s s_k d`` (2.5 x forward)
======================================================  ==========================================

Sources: a multiply-add is 2 FLOPs (the usual GEMM count, e.g. cuBLAS and MLPerf); attention
forward ``4 N^2 d`` per head and backward ``2.5 x`` forward as counted in T. Dao, "FlashAttention-2"
(2023), section 4. Convolutions are *not* counted: their output size depends on stride and padding,
which the profiler does not record; their kernels stay outside the counted coverage.
"""

from __future__ import annotations

import polars as pl

c = pl.col

FLOP_OPERATORS: tuple[str, ...] = (
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
    "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_flash_attention_backward", "aten::_scaled_dot_product_efficient_attention_backward",
    "aten::_scaled_dot_product_cudnn_attention_backward",
)


def _d(dims: pl.Expr, i: int, j: int) -> pl.Expr:
    return dims.list.get(i, null_on_oob=True).list.get(j, null_on_oob=True).cast(pl.Float64)


def op_flops(ops: pl.DataFrame) -> pl.DataFrame:
    """``ops`` with ``flops`` (Float64; null for operators not counted or shapes missing).

    Args:
        ops: any frame with ``name`` and ``input_dims`` (raw JSON text of the input shapes, a
            list per input: ``[[m, k], [k, n]]``).
    """
    counted = c("name").is_in(FLOP_OPERATORS) & c("input_dims").is_not_null()
    dims = pl.when(counted).then(c("input_dims")).str.json_decode(pl.List(pl.List(pl.Int64)))
    name = c("name")
    attn_fwd = name.str.contains(r"^aten::_scaled_dot_product_.*_attention$")
    attn_bwd = name.str.contains(r"^aten::_scaled_dot_product_.*_attention_backward$")
    flops = (
        pl.when(name == "aten::mm").then(2 * _d(dims, 0, 0) * _d(dims, 0, 1) * _d(dims, 1, 1))
        .when(name == "aten::addmm").then(2 * _d(dims, 1, 0) * _d(dims, 1, 1) * _d(dims, 2, 1))
        .when(name == "aten::bmm").then(2 * _d(dims, 0, 0) * _d(dims, 0, 1) * _d(dims, 0, 2) * _d(dims, 1, 2))
        .when(name == "aten::baddbmm").then(2 * _d(dims, 1, 0) * _d(dims, 1, 1) * _d(dims, 1, 2) * _d(dims, 2, 2))
        .when(attn_fwd).then(4 * _d(dims, 0, 0) * _d(dims, 0, 1) * _d(dims, 0, 2) * _d(dims, 1, 2) * _d(dims, 0, 3))
        .when(attn_bwd).then(10 * _d(dims, 1, 0) * _d(dims, 1, 1) * _d(dims, 1, 2) * _d(dims, 2, 2) * _d(dims, 1, 3))
    )
    return ops.with_columns(flops=pl.when(counted).then(flops).cast(pl.Float64))
