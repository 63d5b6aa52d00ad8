"""PyTorch DistributedDataParallel's gradient buckets: how many all-reduces a step of DDP issues.

DDP packs gradients into buckets of ``bucket_cap_mb = 25`` MiB, the first of
``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES = 1 MiB`` (so the first all-reduce starts early),
and all-reduces each bucket once per step (PyTorch documentation, ``DistributedDataParallel``,
``bucket_cap_mb``). For ``S`` bytes of gradients the count is

    buckets(S) = 1 + ceil(max(S - 1 MiB, 0) / 25 MiB)        for S > 0, and 0 for S = 0

(a lower bound where a single parameter is larger than a bucket: DDP does not split parameters).
It is the ``num_gradient_tensors`` of a DDP workload: each bucket pays the collective's latency
terms once. One rule for both validations: :func:`ddp_buckets` on numbers (the local runs,
:mod:`ddlscope.validate.local`), :func:`ddp_buckets_expr` on a Polars column (the published
tables, :mod:`ddlscope.validate.published`).
"""

from __future__ import annotations

import math

import polars as pl

BUCKET_CAP_BYTES = 25 * 2**20
"""DDP's default bucket size, bytes (``bucket_cap_mb = 25``)."""
FIRST_BUCKET_BYTES = 2**20
"""DDP's first bucket, bytes (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``)."""


def ddp_buckets(gradient_bytes: float) -> int:
    """DDP's bucket count for ``gradient_bytes`` of gradients (bytes; module docstring); 0 for none."""
    if gradient_bytes <= 0:
        return 0
    return 1 + math.ceil(max(gradient_bytes - FIRST_BUCKET_BYTES, 0) / BUCKET_CAP_BYTES)


def ddp_buckets_expr(grad_bytes: pl.Expr) -> pl.Expr:
    """:func:`ddp_buckets` of a column of gradient bytes, as an Int64 expression (0 for none)."""
    return (
        pl.when(grad_bytes > 0)
        .then(1 + ((grad_bytes - FIRST_BUCKET_BYTES).clip(lower_bound=0) / BUCKET_CAP_BYTES).ceil())
        .otherwise(0)
        .cast(pl.Int64)
    )
