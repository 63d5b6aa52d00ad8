"""Efficiencies for one workload from its op mix and the calibration curves.

The step-time model prices compute-bound work as ``F / (peak * eff_compute)`` and memory-bound work
as ``B / (B_mem * eff_memory)`` (:mod:`ddlscope.model.step_time`). A single efficiency per resource
fits large kernels; a step of small kernels (a CPU replica, small batches) runs each op at the
efficiency of *its* size. With the per-op table of ``ddlscope profile`` and the calibration curves,

    eff_compute = sum_i F_i / sum_i (F_i / e_c(x_i))                       over compute-bound ops i
    eff_memory  = sum_j B_j / (B_mem * (sum_j B_j / bw(B_j) + n_ops * c))  over memory-bound ops j

where ``e_c`` is read off the convolution curves at the op's arithmetic intensity for
``aten.convolution`` and ``aten.convolution_backward``, and off the square-matmul curve at the op's
FLOPs per call for the other matmul-class ops (interpolated in log ``x``, clamped at the sweep's
ends). Matmuls are indexed by work per call because a batched ``bmm`` of many small matrices has a
low intensity but amortises the call over the batch: the square sweep, where intensity and work
grow together, prices it by its work (by intensity it would be priced as one tiny matmul, 3x too
slow on MIND); a convolution's cost follows its intensity better than its work (oneDNN's
weight-heavy late-stage layers). ``bw(B)`` is the bandwidth at ``B`` bytes per op (interpolated in
log ``B``, clamped) on the curve of the op's family (:data:`ddlscope.calibrate.microbench.FAMILY_OPS`:
normalisations, softmax, dropout, embedding bag) where the calibration measured it, else on the
element-wise curve; ``n_ops`` all op calls of the step and ``c = max(op_overhead - t_small, 0)``
the framework cost per op of a training step (autograd, optimizer loop, Python; measured by
:func:`ddlscope.calibrate.microbench.bench_op_overhead`) beyond what the smallest element-wise op
``t_small`` already includes. The model has no per-op term, so that overhead is charged to the
memory-bound time, where small ops live. With these efficiencies the model's two terms equal the
sums of the per-op times exactly: the formulas of the model are unchanged, only the efficiency it is
given depends on the workload.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ddlscope.calibrate.microbench import FAMILY_OPS


@dataclass(frozen=True)
class OpMixEfficiency:
    """Efficiencies of one workload (see module docstring).

    Attributes:
        eff_compute: flops-weighted harmonic mean of the compute-bound ops' matmul efficiency.
        eff_memory: bytes-weighted harmonic mean of the memory-bound ops' bandwidth over ``B_mem``.
        compute_bound_s: ``sum F_i / (peak e_c(I_i))``, seconds.
        memory_bound_s: ``sum B_j / bw(B_j)``, seconds.
        compute_ops, memory_ops: op calls in each class.
    """

    eff_compute: float
    eff_memory: float
    compute_bound_s: float
    memory_bound_s: float
    compute_ops: int
    memory_ops: int


def _interp_log(x: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    order = np.argsort(xs)
    lx = np.log(np.maximum(xs[order], 1e-30))
    return np.interp(np.log(np.maximum(x, 1e-30)), lx, ys[order])


def opmix_efficiency(
    ops: pl.DataFrame,
    matmul: pl.DataFrame,
    elementwise: pl.DataFrame,
    *,
    peak_flop_per_s: float,
    memory_bandwidth_bytes_per_s: float,
    precision: str = "fp32",
    conv: pl.DataFrame | None = None,
    families: pl.DataFrame | None = None,
    op_overhead_s: float = 0.0,
    index: str = "flops",
    conv_index: str = "intensity",
) -> OpMixEfficiency:
    """Efficiencies of the workload whose op table is ``ops``.

    Args:
        ops: ``ProfileResult.ops`` (columns ``class_by_type``, ``flops``, ``total_bytes``,
            ``intensity_flops_per_byte``).
        matmul: the calibration's matmul curve (columns ``precision``, ``flops``,
            ``intensity_flops_per_byte``, ``efficiency``).
        elementwise: the element-wise curve (columns ``bytes``, ``bandwidth_gb_s``); rows of the
            same size (several ops) are averaged.
        peak_flop_per_s: the device's peak for ``precision`` (FLOP/s).
        memory_bandwidth_bytes_per_s: the device's memory bandwidth ``B_mem`` (bytes/s).
        precision: which matmul curve to use (falls back to ``fp32`` if the curve lacks it).
        conv: the convolution curves (columns ``op``, ``intensity_flops_per_byte``,
            ``efficiency``); without them convolutions use the matmul curve.
        families: the family curves (columns ``family``, ``bytes``, ``bandwidth_gb_s``).
        op_overhead_s: framework cost per op of a training step (s); 0 to leave it out.
        index, conv_index: ``flops`` or ``intensity``: what the matmul and the convolution curves
            are read at (defaults: see the module docstring).

    Returns:
        :class:`OpMixEfficiency`; efficiencies are capped at 1 (and fall back to the curve's
        median where a class has no op).

    Raises:
        ValueError: empty curves, or ``ops`` without the needed columns.
    """
    need = {"class_by_type", "flops", "total_bytes", "intensity_flops_per_byte"}
    if not need <= set(ops.columns):
        raise ValueError(f"ops: expected a profile op table with columns {sorted(need)}")
    curve = matmul.filter(pl.col("precision") == precision)
    if curve.is_empty():
        curve = matmul.filter(pl.col("precision") == "fp32")
    if curve.is_empty() or elementwise.is_empty():
        raise ValueError("calibration: the matmul and element-wise curves must not be empty")
    ew = elementwise.group_by("bytes").agg(pl.col("bandwidth_gb_s").mean()).sort("bytes")

    cb = ops.filter(pl.col("class_by_type") == "compute_bound", pl.col("flops") > 0)
    mb = ops.filter(pl.col("class_by_type") == "memory_bound", pl.col("total_bytes") > 0)
    flops = cb["flops"].to_numpy().astype(float)
    key = "flops" if index == "flops" else "intensity_flops_per_byte"
    ckey = "flops" if conv_index == "flops" else "intensity_flops_per_byte"
    x = cb[key].fill_null(0.0).to_numpy().astype(float)
    xc = cb[ckey].fill_null(0.0).to_numpy().astype(float)
    e_c = _interp_log(x, curve[key].to_numpy(), curve["efficiency"].to_numpy())
    if conv is not None and not conv.is_empty():
        names = cb["op"].cast(pl.String).to_numpy()
        for op in ("convolution", "convolution_backward"):
            part = conv.filter(pl.col("op") == op)
            mask = names == f"aten.{op}"
            if part.height and mask.any():
                e_c[mask] = _interp_log(xc[mask], part[ckey].to_numpy(), part["efficiency"].to_numpy())
    e_c = np.clip(e_c, 1e-6, 1.0)
    compute_s = float(np.sum(flops / (peak_flop_per_s * e_c)))
    nbytes = mb["total_bytes"].to_numpy().astype(float)
    xs, ys = ew["bytes"].to_numpy(), ew["bandwidth_gb_s"].to_numpy() * 1e9
    bw = _interp_log(nbytes, xs, ys)
    if families is not None and not families.is_empty():
        names = mb["op"].cast(pl.String).to_numpy()
        for fam, fam_ops in FAMILY_OPS.items():
            part = families.filter(pl.col("family") == fam).sort("bytes")
            mask = np.isin(names, fam_ops)
            if part.height and mask.any():
                bw[mask] = _interp_log(nbytes[mask], part["bytes"].to_numpy(), part["bandwidth_gb_s"].to_numpy() * 1e9)
    t_small = float(xs[0] / ys[0])
    overhead = max(op_overhead_s - t_small, 0.0) * ops.height
    memory_s = float(np.sum(nbytes / bw)) + overhead
    eff_c = float(flops.sum() / (peak_flop_per_s * compute_s)) if compute_s > 0 else float(
        np.median(curve["efficiency"].to_numpy()))
    eff_m = float(nbytes.sum() / (memory_bandwidth_bytes_per_s * memory_s)) if memory_s > 0 and nbytes.sum() > 0 \
        else float(np.median(ys) / memory_bandwidth_bytes_per_s)
    return OpMixEfficiency(
        eff_compute=min(eff_c, 1.0), eff_memory=min(eff_m, 1.0), compute_bound_s=compute_s, memory_bound_s=memory_s,
        compute_ops=cb.height, memory_ops=mb.height,
    )
