r"""Op-level compute pricing: every op of a profiled step priced on a target GPU.

The totals path of :mod:`ddlscope.model.step_time` prices a step's compute as
``compute_bound_flops / (peak * eff_compute)``: one efficiency for every GPU and every op, so a
cross-GPU prediction is the datasheet peak ratio and the step time falls to zero with the batch.
This module prices each op of the op table :func:`ddlscope.profile.profile_model` yields (columns
``phase``, ``op``, ``dtype``, ``flops``, ``total_bytes``, ``class_by_type``) on one GPU by the
roofline with size-dependent efficiencies of the GPU's generation
(:class:`~ddlscope.specs.efficiency.ComputeEfficiency`, defaults in the catalog, each with its
source)::

    t_op = max(F / (peak_q * eff_max) + k * compute_fill,  Q / (bw * memory_eff) + k * memory_fill)
           + k * kernel_launch
    gpu  = sum over ops of t_op
    host = step_overhead + max(0, ops * cpu_dispatch - gpu)
    step = gpu + host

with ``F`` the op's FLOPs, ``Q`` its bytes read + written, ``k`` its kernels (2 for
``aten.convolution_backward``, which computes the input and the weight gradient, else 1; the
optimizer step's rows share the launches of the multi-tensor ops PyTorch runs them as,
:data:`OPTIMIZER_KERNELS`), ``ops`` the host's dispatches (one per op, the optimizer's likewise
regrouped). This is
the saturating efficiency curve ``eff(F) = eff_max * F / (F + F_half)`` of Calculon (Isaev et
al., SC 2023) with ``F_half = peak_q * eff_max * compute_fill`` (see
:mod:`ddlscope.specs.efficiency`). The peak ``peak_q`` and ``eff_max``:

- GEMM/convolution (``class_by_type == compute_bound``): ``q`` is the op's arithmetic — ``fp16`` /
  ``bf16`` for 16-bit results, ``tf32`` for FP32 results when the step runs TF32, else ``fp32``;
  ``eff_max = tensor_gemm_eff`` (``tf32_gemm_eff`` for ``tf32`` where set) where the GPU has tensor cores for ``q``
  (:meth:`~ddlscope.specs.system.GPUSpec.has_tensor_cores`), else ``cuda_gemm_eff``. On tensor
  cores ``peak_q`` is the datasheet peak times the clock fraction the board's power limit sustains
  under tensor load (:meth:`~ddlscope.specs.system.GPUSpec.sustained_tensor_fraction`; 1 for a
  board without ``board_power_w``; above 1 for a board that boosts beyond its rated boost clock).
- fused attention (:data:`FLASH_V2_OPS`: FlashAttention-2 and PyTorch's scaled-dot-product
  kernels; :data:`FLASH_V1_OPS`: FlashAttention v1) on 16-bit tensor cores:
  ``eff_max = fused_attention_eff`` / ``flash_v1_eff`` (:class:`~ddlscope.specs.efficiency.ComputeEfficiency`:
  the kernel, an online softmax between two matrix products, reaches less of the peak than a GEMM).
- every other op (element-wise, normalisation, reductions, optimizer): the FP32 CUDA-core peak
  with ``vector_eff``; tensor cores never.

A tensor-core convolution on NCHW activations (PyTorch's default layout; ``conv_layout`` of a
case) also pays cuDNN's NCHW<->NHWC transposes: ``TRANSPOSE_PASSES * Q`` more bytes, memory-bound
(:data:`TRANSPOSE_PASSES`).

Each op's time counts as compute-bound or memory-bound time by its type class (the PAI study's
split, IISWC 2019), so the model's components keep their meaning; ``step_overhead`` is the host
component (``host_s``): the fixed per-step cost, plus the time the GPU waits for the host where
issuing the ops (``cpu_dispatch`` each, the host running ahead asynchronously) takes longer than
running them.

Two entry points share the arithmetic:

- :func:`predict_single_gpu`: a list of (op table, GPU, precision, batch) cases -> one row each
  (step time, per-phase and per-class seconds, samples/s, the efficiencies used). The function a
  fit calls (``ddlscope validate --measurements --fit-on``): pass a :class:`ComputeEfficiency`
  per generation to override the catalog's.
- :func:`price_jobs`: the population path. What depends only on (workload, GPU, precision) is
  priced once per distinct triple (a small frame) and joined into a Jobs table as the ``priced_*``
  columns :func:`ddlscope.model.step_time.breakdown_lazy` uses where present.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from ddlscope.specs.catalog import Catalog, CatalogError, builtin_catalog
from ddlscope.specs.efficiency import FITTABLE, ComputeEfficiency
from ddlscope.specs.system import GPUSpec

c = pl.col

OP_INPUT_COLUMNS: tuple[str, ...] = ("phase", "op", "dtype", "flops", "total_bytes", "class_by_type")
"""The op-table columns the pricing reads (see :data:`ddlscope.profile.api.OP_COLUMNS`)."""
PRICED_COLUMNS: tuple[str, ...] = ("priced_gpu", "priced_precision", "priced_compute_bound_s",
                                   "priced_memory_bound_s", "priced_host_s", "priced_backward_fraction",
                                   "compute_efficiency_source")
"""Columns :func:`price_jobs` joins into a Jobs table (``priced_backward_fraction``: the backward
pass's share of the priced GPU time, ``backward_s / (compute_bound_s + memory_bound_s)``, which the
scheduled overlap uses in place of ``backward_fraction`` on the rows it priced)."""
TWO_KERNEL_OPS = frozenset({"aten.convolution_backward"})
CONV_OPS = frozenset({"aten.convolution", "aten.convolution_backward"})
FLASH_V2_OPS = frozenset({
    "ddlscope.flash_attention", "ddlscope.flash_attention_backward",
    *(f"aten._scaled_dot_product_{kind}_attention{suffix}"
      for kind in ("flash", "efficient", "cudnn", "fused") for suffix in ("", "_backward")),
    "aten._scaled_dot_product_fused_attention_overrideable",
    "aten._scaled_dot_product_fused_attention_overrideable_backward",
    "aten._flash_attention_forward", "aten._flash_attention_backward",
    "aten._efficient_attention_forward", "aten._efficient_attention_backward",
})
"""Fused attention kernels priced at ``fused_attention_eff``: the analytic decoder's FlashAttention-2
rows (:mod:`ddlscope.profile.llm`) and PyTorch's scaled-dot-product kernels (its flash backend is
FlashAttention-2 since PyTorch 2.2, release notes)."""
FLASH_V1_OPS = frozenset({"ddlscope.flash_attention_v1", "ddlscope.flash_attention_v1_backward"})
"""FlashAttention v1 kernels (flash-attn 1.x; the analytic decoder with ``flash_attention_version=1``),
priced at ``flash_v1_eff``."""
TRANSPOSE_PASSES = 2.0
"""Extra memory traffic, in multiples of a tensor-core convolution's own bytes, when its activations
are NCHW: cuDNN's tensor-core kernels work on NHWC and transpose NCHW inputs and outputs around
them (NVIDIA, "Convolutional Layers User's Guide", 2023, section "Tensor layouts in memory: NCHW vs
NHWC"); each transpose reads and writes the tensor once, so 2 x the bytes the convolution moves
(an upper-side approximation: the weights, which the count includes, are small at training
batches). Such a convolution also launches 2 transpose kernels per kernel. NVIDIA's
DeepLearningExamples ResNet-50 runs AMP as ``memory_format: nhwc`` (``configs.yml``); PyTorch's
default, and Lambda's benchmark configuration, is NCHW."""
"""Ops that launch two GEMM-class kernels (input gradient and weight gradient, cuDNN dgrad + wgrad)."""
GEMM_ALIGNMENT_BYTES = 16
"""The leading-dimension alignment cuBLAS/CUTLASS tensor-core GEMM kernels vectorise on: 16 bytes,
8 FP16/BF16 or 4 FP32 elements (NVIDIA, "Matrix Multiplication Background User's Guide", 2023,
section "Tensor Core Requirements": dimensions that are multiples of 16 bytes use the Tensor Cores
most efficiently). A matrix whose leading dimension is not such a multiple gets an ``align1``
kernel, one element per load (pytorch/pytorch#146817: a BF16 ``linear`` with an odd size runs
``cutlass_..._wmma_tensorop_bf16_..._align1`` on an A100, about 100 times slower)."""

MISALIGNED_GEMM_FLOP_PER_SM_CYCLE = 410.0
"""The rate of a tensor-core GEMM whose leading dimension is not 16-byte aligned
(:data:`GEMM_ALIGNMENT_BYTES`; the op table's ``gemm_aligned`` false), FLOP per SM per clock
cycle: such a GEMM runs at ``min(peak x eff, this x sm_count x boost clock x the held clock
fraction)``. cuBLAS gives it an ``align1`` kernel, which loads one element per instruction, so its
rate is set by the SM's load issue, not by its tensor cores, and is the same in FP16 and TF32.

**Fitted**, no published figure being at hand: on the 52 Lambda one-GPU Transformer-XL rows
(base and large, FP16 and TF32, 12 GPUs; their full softmax over 267,735 words puts 65 % (base) and
46 % (large) of the step's FLOPs in three misaligned GEMMs), on a grid of 10 FLOP/SM/cycle
minimising the median absolute throughput error: 410 (18.9 -> 3.7 % on those rows); leave one GPU
out, the folds take 390-440 and the held-out GPUs' median absolute error goes from 18.9 to 4.9 %
(``benchmarks/fidelity_misaligned_gemm.py``). What the rows
say beyond the fit: the implied rate is the same in FP16 and TF32 on every tensor-core GPU (A100
55-69 TFLOP/s in both, H100 SXM5 83-97), as a load-bound kernel's is and a tensor-core-bound one's
is not. It is 205 FMA per SM per cycle: a fifth of an A100 SM's dense FP16 tensor rate, a twentieth
of an H100's, so it binds on the large boards (A100, H100, RTX A6000, RTX 6000 Ada, A10 in FP16)
and not on the ones whose own tensor rate is lower (RTX 3090's half-rate FP32 accumulation, V100 in
TF32 on CUDA cores)."""
BATCH_NORM_PASSES: dict[str, float] = {
    **dict.fromkeys(("aten.native_batch_norm", "aten._native_batch_norm_legit",
                     "aten._native_batch_norm_legit_functional", "aten.cudnn_batch_norm",
                     "aten.miopen_batch_norm"), 3.0 / 2.0),
    **dict.fromkeys(("aten.native_batch_norm_backward", "aten.cudnn_batch_norm_backward",
                     "aten.batch_norm_backward", "aten.miopen_batch_norm_backward"), 5.0 / 3.0),
}
"""Memory traffic of a training batch norm in multiples of the bytes its operands and results hold
(what the op table counts): the batch statistics are needed before any element is normalised, so
the forward reads its input twice (mean and variance, then normalise and write: 3 passes where
the count says 2) and the backward reads the gradient and the input twice (``sum(dy)`` and
``sum(dy x_hat)`` over the batch first, then ``dx``: 5 passes where the count says 3); Ioffe and
Szegedy, ICML 2015, the backward formulas; cuDNN's non-persistent spatial kernels. Measured on
the shared Kineto trace of an FP32 ResNet-18 on an RTX 2080 Ti (``benchmarks/trace_batchnorm_passes.py``:
batch-norm kernel time per element against the ReLU's on the same tensors): 3.53 passes forward,
5.75 backward. Inference-mode batch norm (running statistics, ``_no_training``) is one pass, as
counted. cuDNN's persistent kernels (small tensors that fit on chip; NHWC) read once: an
upper-side approximation there."""


OPTIMIZER_KERNELS: tuple[str, ...] = ("foreach", "for_loop")
"""How the optimizer step launches its element-wise work on a GPU. ``foreach`` (the default): as
``torch.optim``'s multi-tensor implementation, the default on CUDA since PyTorch 2.0 (the
``foreach`` argument of every ``torch.optim`` optimizer: left unset, the for-loop is used only off
CUDA), and as apex's ``FusedAdam``/``multi_tensor_scale``: one op per update term over every
parameter, packed into :func:`foreach_launch_blocks` launches. ``for_loop``: one kernel per
parameter per term (PyTorch before 2.0, ``foreach=False``). The bytes and FLOPs are the same; the
kernels, their fills and launch gaps, and the host's dispatches differ. The profile traces the
single-tensor loop (:func:`ddlscope.profile.api._make_optimizer`), so ``foreach`` regroups its rows."""
FOREACH_MAX_TENSORS: tuple[int, ...] = (110, 64, 48, 36, 30)
"""Tensors one multi-tensor launch holds, for an op over 1-5 tensor lists (PyTorch
``ATen/native/cuda/MultiTensorApply.cuh``, ``depth_to_max_tensors``; apex's ``multi_tensor_apply``
has the same)."""
FOREACH_MAX_BLOCKS = 320
"""Thread blocks (chunks) one multi-tensor launch holds (``depth_to_max_blocks``, every depth)."""
FOREACH_CHUNK_ELEMENTS = 65_536
"""Elements of a tensor one thread block of a multi-tensor launch processes (``kChunkSize``)."""


FOREACH_MAX_NUMEL = 1 << 44
"""The largest tensor :func:`foreach_launch_blocks` packs (17.6 T elements, 70 TB of FP32: more than
any GPU holds)."""


def foreach_launch_blocks(numels: Iterable[int], lists: int) -> list[int]:
    """Thread blocks of each kernel launch of one multi-tensor (``torch._foreach_*``) op over
    tensors of ``numels`` elements, in order, reading or writing ``lists`` tensor lists (1-5; more
    count as 5). PyTorch's ``multi_tensor_apply`` packing: each tensor adds ``ceil(numel /``
    :data:`FOREACH_CHUNK_ELEMENTS` ``)`` blocks; a launch is issued when it holds
    :data:`FOREACH_MAX_BLOCKS` blocks (a tensor cut there continues in the next launch), when it
    holds the depth's :data:`FOREACH_MAX_TENSORS` tensors, or at the last tensor; empty tensors are
    skipped. Measured on the shared Kineto traces of ResNet-50 with foreach SGD (hta_traces
    ``ns_resolution_trace``, V100, and ``nccl_parser_config``, A100): 508 blocks of 161 parameters in
    launches of 180, 320 and 8 blocks for one list (``_foreach_mul_``), 71, 155 and 282 for two
    (``_foreach_add_``), as this packing gives.

    Raises:
        ValueError: ``lists`` not an integer >= 1, or a numel not an integer in
            ``[0,`` :data:`FOREACH_MAX_NUMEL` ``]`` (naming its position).
    """
    if isinstance(lists, bool) or not isinstance(lists, numbers.Integral) or lists < 1:
        raise ValueError(f"lists: expected an integer >= 1, got {lists!r}")
    sizes = list(numels)
    for i, n in enumerate(sizes):
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 0 <= n <= FOREACH_MAX_NUMEL:
            raise ValueError(f"numels[{i}]: expected an integer from 0 to {FOREACH_MAX_NUMEL} (2^44), got {n!r}")
    sizes = [int(n) for n in sizes]
    lists = int(lists)
    max_tensors = FOREACH_MAX_TENSORS[min(lists, len(FOREACH_MAX_TENSORS)) - 1]
    launches: list[int] = []
    tensors = blocks = 0
    last = max((i for i, n in enumerate(sizes) if n > 0), default=-1)
    for i, n in enumerate(sizes):
        if n == 0:
            continue
        chunks = -(-n // FOREACH_CHUNK_ELEMENTS)
        tensors += 1
        while chunks:
            room = FOREACH_MAX_BLOCKS - blocks
            if chunks < room:  # the tensor ends inside this launch
                blocks += chunks
                chunks = 0
                if tensors == max_tensors or i == last:
                    launches.append(blocks)
                    blocks = tensors = 0
                continue
            chunks -= room  # the launch fills up: issued; the tensor goes on in the next one, if it has more
            launches.append(FOREACH_MAX_BLOCKS)
            blocks, tensors = 0, (1 if chunks else 0)
            whole = chunks // FOREACH_MAX_BLOCKS - (1 if chunks and chunks % FOREACH_MAX_BLOCKS == 0 else 0)
            if whole > 0:  # launches this tensor fills on its own, counted at once
                launches.extend([FOREACH_MAX_BLOCKS] * whole)
                chunks -= whole * FOREACH_MAX_BLOCKS
    return launches


def _foreach_kernels(ops: pl.DataFrame) -> pl.Series:
    """Per op row: its share of the launches of the multi-tensor op it belongs to under
    ``foreach`` (:data:`OPTIMIZER_KERNELS`), else null. The traced single-tensor optimizer rows
    (phase ``optimizer``, ATen ops and ``ddlscope.amp_unscale_grads``, whose PyTorch kernel
    ``_amp_foreach_non_finite_check_and_unscale_`` is multi-tensor) form one family per op name
    and tensor-list count (tensors read, plus the result unless the op is in place, ``_``; ``copy_``
    two); a family's launches (:func:`foreach_launch_blocks` over its rows' result sizes, in
    order) are spread evenly over its rows. A family merges the calls of one op name that a
    for-loop step makes per parameter (SGD's two ``add_``) into one packing, which can count one
    launch per call fewer than the calls packed apart."""
    op = c("op").cast(pl.String)
    itemsize = c("dtype").cast(pl.String).replace_strict(
        {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}, default=4, return_dtype=pl.Int64)
    numel = (c("shape").cast(pl.String).fill_null("").str.split("x")
             .list.eval(pl.element().cast(pl.Int64, strict=False).fill_null(1).product()).list.first().fill_null(1))
    eligible = (c("phase").cast(pl.String) == "optimizer") & (
        op.str.starts_with("aten.") | (op == "ddlscope.amp_unscale_grads"))
    reads = (c("read_bytes").cast(pl.Float64) / (numel * itemsize).cast(pl.Float64).clip(1.0)).ceil()
    lists = (pl.when(op == "ddlscope.amp_unscale_grads").then(1.0)
             .when(op == "aten.copy_").then(2.0)
             .otherwise(reads + pl.when(op.str.ends_with("_")).then(0.0).otherwise(1.0))).clip(1.0, 5.0)
    frame = ops.select(op=op, numel=numel, lists=lists.cast(pl.Int64), eligible=eligible)
    families = (frame.filter(c("eligible")).group_by("op", "lists", maintain_order=True)
                .agg(numels=c("numel"), rows=pl.len()))
    launches = [len(foreach_launch_blocks(n, int(d))) for n, d in zip(families["numels"], families["lists"],
                                                                      strict=True)]
    share = families.select("op", "lists", foreach_kernels=pl.Series(launches, dtype=pl.Float64) / c("rows"))
    return (frame.join(share, on=["op", "lists"], how="left", maintain_order="left")
            .select(pl.when(c("eligible")).then(c("foreach_kernels")).otherwise(None).alias("foreach_kernels"))
            .to_series())


@dataclass(frozen=True)
class SingleGpuCase:
    """One single-GPU step to price.

    Attributes:
        ops: the op table of one step (:data:`OP_INPUT_COLUMNS` at least), profiled at ``batch_size``.
        gpu: a catalog GPU name or a :class:`GPUSpec`.
        precision: ``fp32``, ``tf32``, ``fp16`` or ``bf16`` (the step's arithmetic; ``tf32`` runs the
            FP32 GEMMs of the op table on TF32 tensor cores where the GPU has them).
        batch_size: samples per step (for ``samples_per_s``).
        label: a name for the row (e.g. the measurement row it predicts).
        conv_layout: the activations' memory format, ``nchw`` (PyTorch's default contiguous
            format) or ``nhwc`` (``channels_last``): with ``nchw`` every tensor-core convolution
            pays layout transposes (:data:`TRANSPOSE_PASSES`).
        optimizer_kernels: ``foreach`` (default) or ``for_loop``: how the optimizer step launches
            its kernels (:data:`OPTIMIZER_KERNELS`).
    """

    ops: pl.DataFrame
    gpu: str | GPUSpec
    precision: str
    batch_size: int
    label: str = ""
    conv_layout: str = "nchw"
    optimizer_kernels: str = "foreach"


def _check_ops(ops: pl.DataFrame, where: str) -> None:
    missing = [k for k in OP_INPUT_COLUMNS if k not in ops.columns]
    if missing:
        raise ValueError(f"{where}: op table lacks column(s) {missing}; expected the op table of "
                         "ddlscope.profile.profile_model (ddlscope.profile.api.OP_COLUMNS)")


def op_features(ops: pl.DataFrame, optimizer_kernels: str = "foreach") -> pl.DataFrame:
    """The GPU-independent features of each op: ``phase``, ``op``, ``is_gemm`` (compute-bound by type),
    ``dtype`` (the op's result type: ``float16``/``bfloat16`` GEMMs run on 16-bit tensor cores),
    ``flops``, ``bytes`` (the bytes moved: the op table's ``total_bytes``, x :data:`BATCH_NORM_PASSES` for a
    training batch norm), ``kernels`` (2 for :data:`TWO_KERNEL_OPS`, else 1; with ``optimizer_kernels``
    ``foreach`` an optimizer row's share of its multi-tensor launches, :func:`_foreach_kernels`, when
    the op table has ``shape`` and ``read_bytes``), ``dispatches`` (host dispatches: 1 per row, the
    same share for those optimizer rows), ``is_conv``, ``misaligned`` (a GEMM the op table marks
    ``gemm_aligned`` false; false where the column is absent: :data:`MISALIGNED_GEMM_FLOP_PER_SM_CYCLE`)
    and ``attention`` (``v1`` / ``v2`` for the fused attention kernels of :data:`FLASH_V1_OPS` /
    :data:`FLASH_V2_OPS`, else null).

    Raises:
        ValueError: a column of :data:`OP_INPUT_COLUMNS` is missing, ``gemm_aligned`` is there but
            not Boolean, or ``optimizer_kernels`` is not one of :data:`OPTIMIZER_KERNELS`.
    """
    _check_ops(ops, "op table")
    if optimizer_kernels not in OPTIMIZER_KERNELS:
        raise ValueError(f"optimizer_kernels: expected foreach or for_loop, got {optimizer_kernels!r}")
    if "gemm_aligned" in ops.columns and ops.schema["gemm_aligned"] not in (pl.Boolean, pl.Null):
        got = ops.schema["gemm_aligned"]
        raise ValueError(f"op table: gemm_aligned must be Boolean (true, false or null), got {got}")
    grouped = optimizer_kernels == "foreach" and {"shape", "read_bytes"} <= set(ops.columns)
    share = _foreach_kernels(ops) if grouped else pl.Series("foreach_kernels", [None] * ops.height,
                                                            dtype=pl.Float64)
    per_row = pl.when(c("op").is_in(list(TWO_KERNEL_OPS))).then(2.0).otherwise(1.0)
    return ops.with_columns(share).select(
        c("phase").cast(pl.String),
        c("op").cast(pl.String),
        is_gemm=c("class_by_type").cast(pl.String) == "compute_bound",
        dtype=c("dtype").cast(pl.String),
        flops=c("flops").cast(pl.Float64).fill_null(0.0),
        bytes=c("total_bytes").cast(pl.Float64).fill_null(0.0)
        * c("op").cast(pl.String).replace_strict(BATCH_NORM_PASSES, default=1.0, return_dtype=pl.Float64),
        kernels=pl.coalesce(c("foreach_kernels"), per_row),
        dispatches=pl.coalesce(c("foreach_kernels"), pl.lit(1.0)),
        is_conv=c("op").is_in(list(CONV_OPS)),
        misaligned=(c("class_by_type").cast(pl.String) == "compute_bound") & ~c("gemm_aligned").fill_null(True)
        if "gemm_aligned" in ops.columns else pl.lit(False),
        attention=pl.when(c("op").is_in(list(FLASH_V1_OPS))).then(pl.lit("v1"))
        .when(c("op").is_in(list(FLASH_V2_OPS))).then(pl.lit("v2")).otherwise(pl.lit(None, pl.String)),
    )


def _gpu_params(gpu: GPUSpec, precision: str, eff: ComputeEfficiency) -> dict[str, float | bool | str]:
    """Per-case numbers: peaks (FLOP/s), tensor-core flags, bandwidth (B/s) and efficiencies (s)."""
    p = gpu.peak_tflops
    fp32_arith = "tf32" if precision == "tf32" else "fp32"
    # tensor-core peaks at the clock the board's power limit sustains under tensor load
    held = gpu.sustained_tensor_fraction()

    def peak(q: str) -> float:
        return getattr(p, q) * 1e12 * (held if gpu.has_tensor_cores(q) else 1.0)

    # a misaligned tensor-core GEMM's rate: per SM and clock cycle, at the clock the board holds
    known = gpu.sm_count is not None and gpu.boost_clock_mhz is not None
    misaligned = (MISALIGNED_GEMM_FLOP_PER_SM_CYCLE * gpu.sm_count * gpu.boost_clock_mhz * 1e6 * held
                  if known else float("inf"))
    return {
        "misaligned_peak": misaligned,
        "peak_f32": peak(fp32_arith),
        "tc_f32": gpu.has_tensor_cores(fp32_arith),
        "peak_fp32": p.fp32 * 1e12,
        "peak_fp16": peak("fp16"),
        "tc_fp16": gpu.has_tensor_cores("fp16"),
        "peak_bf16": peak("bf16"),
        "tc_bf16": gpu.has_tensor_cores("bf16"),
        "bw": gpu.memory_bandwidth_gb_s * 1e9,
        "tensor_eff": eff.tensor_gemm_eff,
        "tf32_eff": eff.tf32_eff,
        "cuda_eff": eff.cuda_gemm_eff,
        "vector_eff": eff.vector_eff,
        "attn_eff": eff.fused_attention_eff,
        "attn_v1_eff": eff.flash_v1_eff,
        "compute_fill_s": eff.compute_fill_us * 1e-6,
        "memory_eff": eff.memory_eff,
        "memory_fill_s": eff.memory_fill_us * 1e-6,
        "launch_s": eff.kernel_launch_us * 1e-6,
        "host_s": eff.step_overhead_us * 1e-6,
        "dispatch_s": eff.cpu_dispatch_us * 1e-6,
    }


UNCAPPED_NOTE = ("; misaligned tensor-core GEMMs priced without their cap: the catalog gives this GPU no "
                 "sm_count or boost_clock_mhz (a --catalog file that sets both applies "
                 "MISALIGNED_GEMM_FLOP_PER_SM_CYCLE, docs/model.md)")
"""Appended to a case's ``compute_efficiency_source`` when it prices a misaligned GEMM (``gemm_aligned``
false) on tensor cores of a GPU whose entry lacks ``sm_count`` or ``boost_clock_mhz`` (A10G, B200)."""


def _on_tensor_cores() -> pl.Expr:
    """Whether each op's arithmetic runs on tensor cores: its dtype's flag (16-bit result: ``tc_fp16``
    / ``tc_bf16``, else the case's FP32/TF32 flag ``tc_f32``) from :func:`_gpu_params`."""
    is16 = c("dtype") == "float16"
    isbf = c("dtype") == "bfloat16"
    return pl.when(is16).then(c("tc_fp16")).when(isbf).then(c("tc_bf16")).otherwise(c("tc_f32"))


def _op_seconds() -> pl.Expr:
    """Seconds of each op from :func:`op_features` columns joined with :func:`_gpu_params` columns."""
    is16 = c("dtype") == "float16"
    isbf = c("dtype") == "bfloat16"
    gemm_peak = pl.when(is16).then(c("peak_fp16")).when(isbf).then(c("peak_bf16")).otherwise(c("peak_f32"))
    tc = _on_tensor_cores()
    tensor_eff = (pl.when(c("attention") == "v1").then(c("attn_v1_eff"))
                  .when(c("attention") == "v2").then(c("attn_eff"))
                  .when(is16 | isbf).then(c("tensor_eff")).otherwise(c("tf32_eff")))
    gemm_eff = pl.when(tc).then(tensor_eff).otherwise(c("cuda_eff"))
    gemm_rate = pl.when(tc & c("misaligned")).then(pl.min_horizontal(gemm_peak * gemm_eff, c("misaligned_peak"))
                                                   ).otherwise(gemm_peak * gemm_eff)
    peak = pl.when(c("is_gemm")).then(gemm_rate).otherwise(c("peak_fp32") * c("vector_eff"))
    k = c("kernels")
    compute_s = pl.when(c("flops") > 0).then(c("flops") / peak + k * c("compute_fill_s")).otherwise(0.0)
    memory_s = pl.when(c("bytes") > 0).then(c("bytes") / (c("bw") * c("memory_eff")) + k * c("memory_fill_s")
                                            ).otherwise(0.0)
    return pl.max_horizontal(compute_s, memory_s) + k * c("launch_s")


def _transpose_seconds() -> pl.Expr:
    """Seconds of the NCHW<->NHWC transposes around a tensor-core convolution (0 elsewhere)."""
    tc = _on_tensor_cores()
    k = 2.0 * c("kernels")
    t = TRANSPOSE_PASSES * c("bytes") / (c("bw") * c("memory_eff")) + k * (c("memory_fill_s") + c("launch_s"))
    return pl.when(c("is_conv") & tc & c("nchw") & (c("bytes") > 0)).then(t).otherwise(0.0)


def _resolve_gpu(gpu: str | GPUSpec, catalog: Catalog) -> GPUSpec:
    return gpu if isinstance(gpu, GPUSpec) else catalog.gpu(gpu)


def efficiency_for(gpu: GPUSpec, catalog: Catalog,
                   overrides: Mapping[str, ComputeEfficiency] | ComputeEfficiency | None = None) -> ComputeEfficiency:
    """The efficiencies to price ``gpu`` with: ``overrides`` (one object for every GPU, or a
    mapping generation -> object, ``default`` for GPUs without a generation), else the catalog's
    entry for the GPU's generation (:meth:`Catalog.efficiency_for`)."""
    if isinstance(overrides, ComputeEfficiency):
        return overrides
    if overrides:
        hit = overrides.get(gpu.generation or "default")
        if hit is not None:
            return hit
    return catalog.efficiency_for(gpu)


def _source_line(gpu: GPUSpec, eff: ComputeEfficiency, catalog_entry: ComputeEfficiency, precision: str) -> str:
    """Where the efficiencies of one case come from, for the output's ``compute_efficiency_source``
    (with the power-limited tensor clock where the case's GEMMs run on tensor cores)."""
    values = (f"tensor {eff.tensor_gemm_eff:g} (tf32 {eff.tf32_eff:g}), cuda {eff.cuda_gemm_eff:g}, "
              f"vector {eff.vector_eff:g}, attention {eff.fused_attention_eff:g} (v1 {eff.flash_v1_eff:g}), "
              f"memory {eff.memory_eff:g}, fill {eff.compute_fill_us:g}/{eff.memory_fill_us:g} us, "
              f"launch {eff.kernel_launch_us:g} us, dispatch {eff.cpu_dispatch_us:g} us/op, "
              f"host {eff.step_overhead_us:g} us")
    held = gpu.sustained_tensor_fraction()
    if held != 1.0 and gpu.has_tensor_cores(precision):
        why = (f"the {gpu.board_power_w:g} W board power limit" if held < 1.0 else
               f"the {gpu.board_power_w:g} W board power leaves headroom above it, up to {gpu.max_clock_mhz:g} MHz")
        values += f"; tensor cores at {held:.3f} of the boost clock ({why}, docs/model.md)"
    if eff == catalog_entry:
        return (f"catalog default for {eff.generation} ({gpu.name}): {values}; sources: "
                f"`ddlscope catalog efficiencies --sources`")
    changed = [k for k in FITTABLE if getattr(eff, k) != getattr(catalog_entry, k)]
    notes = sorted({eff.source.get(k, "given by the caller") for k in changed})
    return (f"{eff.generation} ({gpu.name}): {values}; {', '.join(changed) or 'none'} overridden "
            f"({'; '.join(notes) or 'given by the caller'}), the rest catalog defaults")


PHASE_COLUMNS: tuple[str, ...] = ("forward_s", "backward_s", "optimizer_s")


def _priced(cases: Sequence[SingleGpuCase], efficiencies, catalog: Catalog | None
            ) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """Per-case facts (``case``, ``label``, ``gpu``, ``generation``, ``precision``, ``batch_size``,
    ``step_overhead_s``, ``dispatch_s``, ``compute_efficiency_source``) and every op of every case
    priced in one vectorised pass (:func:`op_features` columns, ``case``, the GPU's parameters,
    ``op_s``, ``transpose_s``; None without cases). Raises as :func:`predict_single_gpu`."""
    cat = catalog or builtin_catalog()
    frames, meta = [], []
    for i, case in enumerate(cases):
        where = f"case {i}" + (f" ({case.label})" if case.label else "")
        if case.precision not in ("fp32", "tf32", "fp16", "bf16"):
            raise ValueError(f"{where}: precision: expected fp32, tf32, fp16 or bf16, got {case.precision!r}")
        if case.conv_layout not in ("nchw", "nhwc"):
            raise ValueError(f"{where}: conv_layout: expected nchw or nhwc, got {case.conv_layout!r}")
        if case.optimizer_kernels not in OPTIMIZER_KERNELS:
            raise ValueError(f"{where}: optimizer_kernels: expected foreach (multi-tensor, fused optimizers "
                             f"included) or for_loop, got {case.optimizer_kernels!r}")
        if case.batch_size < 1:
            raise ValueError(f"{where}: batch_size: expected >= 1, got {case.batch_size}")
        _check_ops(case.ops, where)
        gpu = _resolve_gpu(case.gpu, cat)
        eff = efficiency_for(gpu, cat, efficiencies)
        params = _gpu_params(gpu, case.precision, eff)
        meta.append({"case": i, "label": case.label, "gpu": gpu.name, "generation": gpu.generation or "default",
                     "precision": case.precision, "batch_size": case.batch_size, "step_overhead_s": params["host_s"],
                     "dispatch_s": params["dispatch_s"],
                     "compute_efficiency_source": _source_line(gpu, eff, cat.efficiency_for(gpu), case.precision)})
        frames.append(op_features(case.ops, case.optimizer_kernels).with_columns(
            case=pl.lit(i), nchw=pl.lit(case.conv_layout == "nchw"),
            **{k: pl.lit(v) for k, v in params.items() if k not in ("host_s", "dispatch_s")}))
    schema = {"case": pl.Int64, "label": pl.String, "gpu": pl.String, "generation": pl.String,
              "precision": pl.String, "batch_size": pl.Int64, "step_overhead_s": pl.Float64,
              "dispatch_s": pl.Float64, "compute_efficiency_source": pl.String}
    info = pl.DataFrame(meta, schema=schema)
    if not frames:
        return info, None
    ops = pl.concat(frames, how="vertical_relaxed").with_columns(op_s=_op_seconds(), transpose_s=_transpose_seconds())
    # a misaligned GEMM on tensor cores of a GPU without sm_count / boost clock ran uncapped: say so
    uncapped = ops.filter(c("misaligned") & _on_tensor_cores() & c("misaligned_peak").is_infinite())["case"].unique()
    if uncapped.len():
        info = info.with_columns(compute_efficiency_source=pl.when(c("case").is_in(uncapped.implode()))
                                 .then(c("compute_efficiency_source") + UNCAPPED_NOTE)
                                 .otherwise(c("compute_efficiency_source")))
    return info, ops


def price_ops(
    cases: Sequence[SingleGpuCase],
    efficiencies: Mapping[str, ComputeEfficiency] | ComputeEfficiency | None = None,
    catalog: Catalog | None = None,
) -> pl.DataFrame:
    """Every op of every case priced, one row per op row of the cases' op tables, in order: ``case``
    (index into ``cases``), ``label``, ``phase``, ``op``, ``is_gemm``, ``is_conv``, ``dtype``,
    ``flops``, ``bytes`` (moved, batch-norm passes included), ``kernels``, ``dispatches``, ``op_s``
    (seconds: the roofline with fills and launch gaps of the module docstring) and ``transpose_s``
    (seconds of the NCHW layout transposes charged to a tensor-core convolution, else 0). The rows
    :func:`predict_single_gpu` sums; the arguments and errors are its own.
    """
    info, ops = _priced(cases, efficiencies, catalog)
    cols = ["case", "label", "phase", "op", "is_gemm", "is_conv", "dtype", "flops", "bytes", "kernels",
            "dispatches", "op_s", "transpose_s"]
    if ops is None:
        return pl.DataFrame(schema={"case": pl.Int64, "label": pl.String})
    return ops.join(info.select("case", "label"), on="case", how="left", maintain_order="left").select(cols)


def predict_single_gpu(
    cases: Sequence[SingleGpuCase],
    efficiencies: Mapping[str, ComputeEfficiency] | ComputeEfficiency | None = None,
    catalog: Catalog | None = None,
) -> pl.DataFrame:
    """Single-GPU step time of each case, every op priced (see the module docstring).

    Args:
        cases: the steps to price (:class:`SingleGpuCase`: op table, GPU, precision, batch, label).
        efficiencies: overrides of the catalog's compute efficiencies: one
            :class:`ComputeEfficiency` for every case, or a mapping generation -> object (a fit's
            parameters; generations it lacks keep the catalog's).
        catalog: for GPU names and default efficiencies (default: built-in).

    Returns:
        One row per case, in order: ``label``, ``gpu`` (canonical name), ``generation``,
        ``precision``, ``batch_size``, ``compute_bound_s``, ``memory_bound_s`` (ops by type class,
        launch gaps included; memory-bound includes ``transpose_s``, the NCHW layout transposes of
        tensor-core convolutions), ``transpose_s``, ``launch_s`` (the launch-gap part of those),
        ``host_s`` (the fixed per-step cost plus any wait for the host to issue the ops),
        ``forward_s``, ``backward_s``, ``optimizer_s`` (ops by phase, transposes included),
        ``step_s`` = compute + memory + host, ``samples_per_s`` = batch / step, ``kernels``,
        ``ops`` (host dispatches, Float64: one per op row, the optimizer's rows counted as their
        multi-tensor launches under ``foreach``), ``compute_efficiency_source``.

    Raises:
        CatalogError: an unknown GPU name.
        ValueError: an op table without the needed columns, a batch < 1, an unknown precision.
    """
    info, ops = _priced(cases, efficiencies, catalog)
    if ops is None:
        return info.drop("case", "dispatch_s").rename({"step_overhead_s": "host_s"})
    extra_kernels = pl.when(c("transpose_s") > 0).then(2.0 * c("kernels")).otherwise(0.0)
    ops = ops.with_columns(launch=(c("kernels") + extra_kernels) * c("launch_s"),
                           all_kernels=c("kernels") + extra_kernels)
    per = ops.group_by("case").agg(
        compute_bound_s=c("op_s").filter(c("is_gemm")).sum(),
        memory_bound_s=c("op_s").filter(~c("is_gemm")).sum() + c("transpose_s").sum(),
        transpose_s=c("transpose_s").sum(),
        launch_s=c("launch").sum(),
        kernels=c("all_kernels").sum(),
        ops=c("dispatches").sum(),
        **{f"{ph}_s": (c("op_s") + c("transpose_s")).filter(c("phase") == ph).sum()
           for ph in ("forward", "backward", "optimizer")},
    )
    out = info.join(per, on="case", how="left").sort("case")
    gpu_s = c("compute_bound_s") + c("memory_bound_s")
    return out.with_columns(
        host_s=c("step_overhead_s") + pl.max_horizontal(c("ops") * c("dispatch_s") - gpu_s, 0.0),
    ).with_columns(
        step_s=gpu_s + c("host_s"),
    ).with_columns(samples_per_s=c("batch_size") / c("step_s")).select(
        "label", "gpu", "generation", "precision", "batch_size", "compute_bound_s", "memory_bound_s", "transpose_s",
        "launch_s",
        "host_s", *PHASE_COLUMNS, "step_s", "samples_per_s", "kernels", "ops", "compute_efficiency_source",
    )


def _spec_from_columns(row: Mapping[str, object]) -> GPUSpec:
    """A GPU not in the catalog (a user's system file entry), rebuilt from its Jobs columns: no
    generation (the ``default`` efficiencies), tensor cores inferred from the peaks."""
    from ddlscope.specs.system import PeakTflops

    return GPUSpec(name=str(row["gpu"]), peak_tflops=PeakTflops(**{
        p: float(row[f"gpu_peak_{p}_flop_per_s"]) / 1e12 for p in ("fp32", "tf32", "fp16", "bf16")}),
        memory_bandwidth_gb_s=float(row["gpu_memory_bandwidth_bytes_per_s"]) / 1e9,
        memory_gb=float(row["gpu_memory_bytes"]) / 1e9)


def price_jobs(
    jobs: pl.DataFrame,
    op_tables: Mapping[str | tuple[str, str], pl.DataFrame],
    efficiencies: Mapping[str, ComputeEfficiency] | ComputeEfficiency | None = None,
    catalog: Catalog | None = None,
    gpus: Mapping[str, GPUSpec] | None = None,
    conv_layout: str = "nchw",
    optimizer_kernels: str = "foreach",
) -> pl.DataFrame:
    """``jobs`` with the :data:`PRICED_COLUMNS` joined: each distinct (workload, GPU, precision)
    of a job whose ``workload`` has an op table in ``op_tables`` is priced once by
    :func:`predict_single_gpu`; other jobs get nulls there (the totals path prices them).

    ``op_tables`` is keyed by workload name (one table for every precision of that workload) or by
    ``(workload, precision)`` (a table profiled at that precision: a mixed-precision run's op
    table holds FP16 GEMMs and FP16 activations, which an FP32 table priced at ``fp16`` does not).
    A row takes the ``(workload, precision)`` table, else that of the precision with the same
    profile (``fp32`` and ``tf32`` share one: TF32 changes the arithmetic, not the tensors), else
    the workload's own key; with only per-precision keys and none for the row's precision, the
    row is not priced.

    ``priced_gpu`` and ``priced_precision`` record what was priced: the step-time model uses the
    priced seconds only on rows whose ``gpu`` and ``precision`` still match (a scenario that
    swaps the GPU or precision falls back to the totals path unless ``price_jobs`` runs again on
    its rows, as :func:`ddlscope.model.scenarios.whatif` does when given the op tables). The op
    table of a workload must be profiled at the jobs' batch size. A job's GPU
    is looked up by its ``gpu`` name in ``gpus`` (e.g. a system file's own entry), then in the
    catalog, else rebuilt from its Jobs columns (no generation: the ``default`` efficiencies).
    ``conv_layout`` is every workload's activation layout, ``optimizer_kernels`` how its optimizer
    step launches (:class:`SingleGpuCase`).

    Raises:
        ValueError: an op table without the needed columns.
    """
    cat = catalog or builtin_catalog()
    priced_cols = [k for k in PRICED_COLUMNS if k in jobs.columns]
    jobs = jobs.drop(priced_cols)
    keys = ["workload", "gpu", "precision"]
    gpu_cols = ["gpu_peak_fp32_flop_per_s", "gpu_peak_tf32_flop_per_s", "gpu_peak_fp16_flop_per_s",
                "gpu_peak_bf16_flop_per_s", "gpu_memory_bandwidth_bytes_per_s", "gpu_memory_bytes"]
    names = {k if isinstance(k, str) else k[0] for k in op_tables}
    distinct = (jobs.filter(c("workload").is_in(list(names)))
                .select(*keys, "batch_size", *gpu_cols).unique(subset=keys, keep="first", maintain_order=True))
    tables = [_op_table_for(op_tables, row["workload"], str(row["precision"]))
              for row in distinct.iter_rows(named=True)]
    distinct = distinct.filter(pl.Series([t is not None for t in tables], dtype=pl.Boolean))
    tables = [t for t in tables if t is not None]
    cases = []
    for row, op_table in zip(distinct.iter_rows(named=True), tables, strict=True):
        gpu = (gpus or {}).get(row["gpu"])
        if gpu is None:
            try:
                gpu = cat.gpu(row["gpu"])
            except CatalogError:
                gpu = _spec_from_columns(row)
        cases.append(SingleGpuCase(op_table, gpu, str(row["precision"]), int(row["batch_size"]),
                                   conv_layout=conv_layout, optimizer_kernels=optimizer_kernels))
    priced = predict_single_gpu(cases, efficiencies, cat)
    table = distinct.select(keys).with_columns(
        priced_gpu=c("gpu"),
        priced_precision=c("precision").cast(pl.String),
        priced_compute_bound_s=priced["compute_bound_s"],
        priced_memory_bound_s=priced["memory_bound_s"],
        priced_host_s=priced["host_s"],
        priced_backward_fraction=_backward_share(priced),
        compute_efficiency_source=priced["compute_efficiency_source"],
    ) if cases else distinct.select(keys).with_columns(
        priced_gpu=pl.lit(None, pl.String), priced_precision=pl.lit(None, pl.String),
        priced_compute_bound_s=pl.lit(None, pl.Float64), priced_memory_bound_s=pl.lit(None, pl.Float64),
        priced_host_s=pl.lit(None, pl.Float64), priced_backward_fraction=pl.lit(None, pl.Float64),
        compute_efficiency_source=pl.lit(None, pl.String))
    return jobs.join(table, on=keys, how="left", maintain_order="left")


def _backward_share(priced: pl.DataFrame) -> pl.Series:
    """The backward's share of each priced case's GPU time (:data:`PRICED_COLUMNS`); null where the
    case has no GPU time."""
    gpu_s = priced["compute_bound_s"] + priced["memory_bound_s"]
    return pl.select(pl.when(gpu_s > 0).then(priced["backward_s"] / gpu_s).otherwise(None)).to_series()


_SAME_PROFILE = {"fp32": "tf32", "tf32": "fp32"}


def _op_table_for(op_tables: Mapping[str | tuple[str, str], pl.DataFrame], workload: str,
                  precision: str) -> pl.DataFrame | None:
    """The op table :func:`price_jobs` prices a (workload, precision) row with (its docstring), or
    ``None``."""
    for key in ((workload, precision), (workload, _SAME_PROFILE.get(precision, precision)), workload):
        if key in op_tables:
            return op_tables[key]
    return None
