"""Compute efficiencies per GPU generation: the fittable parameters of the op-level pricing.

The op-level model (:mod:`ddlscope.model.compute`) prices every op of a profiled step on a GPU by
the roofline with size-dependent efficiencies, the Calculon way (Isaev et al., "Calculon: a
methodology and tool for high-level co-design of systems and large language models", SC 2023:
efficiency as a function of the kernel's size). For one op of ``F`` FLOPs moving ``Q`` bytes::

    eff_c(F) = eff_max * F / (F + F_half)        F_half = peak * eff_max * compute_fill_s
    eff_m(Q) = memory_eff * Q / (Q + Q_half)     Q_half = bandwidth * memory_eff * memory_fill_s
    time     = max(F / (peak * eff_c(F)), Q / (bandwidth * eff_m(Q))) + kernel_launch_s

The saturating curve is written with its half-saturation point as a *time* (``compute_fill_us``,
``memory_fill_us``) because then ``F / (peak * eff_c(F)) = F / (peak * eff_max) + compute_fill_s``:
a kernel pays a fixed fill (ramp-up, wave quantisation tail, DRAM latency) on top of its
saturated time, and a bigger GPU of the same generation needs proportionally bigger kernels to
saturate (NVIDIA, "Matrix Multiplication Background User's Guide", 2023, section 3.2 "Wave
quantization"; Yu et al., "Habitat", USENIX ATC 2021, wave scaling). ``eff_max`` is
``tensor_gemm_eff`` for GEMM/convolution on tensor cores, ``cuda_gemm_eff`` for GEMM/convolution
on the CUDA (vector) cores, and ``vector_eff`` for the FLOPs of element-wise ops (against the FP32
CUDA-core peak). A fused attention kernel (FlashAttention; PyTorch's scaled-dot-product kernels)
is not a GEMM: it interleaves two matrix products with an online softmax and reaches a smaller
fraction of the tensor peak, ``attention_eff`` for FlashAttention-2-class kernels and
``attention_v1_eff`` for FlashAttention (v1), counted in the FLOPs the kernel executes (the causal
half skipped); Dao, "FlashAttention-2", 2023, abstract and sec. 4.1: on A100 FlashAttention-2
reaches 50-73 % of the theoretical maximum, about 2x FlashAttention's 25-40 %. The host issues the
ops asynchronously, ``cpu_dispatch_us`` each (eager PyTorch's
per-op dispatch and launch cost): where the GPU's kernels are shorter, the step waits for the host,
``host = step_overhead + max(0, ops * cpu_dispatch - GPU time)``; ``step_overhead_us`` is host
time per step (framework, zero_grad, loss-scaler check, data-loader hand-off) that does not scale
with the batch.

The built-in values live in the catalog (``[compute_efficiency."<generation>"]`` of
``specs/data/catalog.toml``), each with its source; values marked "assumption" there are not
measurements. ``ddlscope validate --measurements --fit-on`` fits them (see
:func:`ddlscope.model.compute.predict_single_gpu`).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from ddlscope.specs.base import SPEC_CONFIG

FITTABLE: tuple[str, ...] = ("tensor_gemm_eff", "tf32_gemm_eff", "cuda_gemm_eff", "vector_eff", "compute_fill_us",
                             "memory_eff", "memory_fill_us", "kernel_launch_us", "cpu_dispatch_us", "step_overhead_us")
"""The numeric fields of :class:`ComputeEfficiency` a fit may change (the attention-kernel
efficiencies are not among them: the single-GPU tables the fits run on hold few fused-attention
rows, so a fit could not tell them from ``tensor_gemm_eff``) (the order of a parameter vector;
``tf32_gemm_eff`` is ``None`` until set: start a fit from :attr:`ComputeEfficiency.tf32_eff`)."""
FLASH_V1_RELATIVE_SPEED = 0.5
"""FlashAttention (v1) speed as a fraction of FlashAttention-2's on the same GPU, where the catalog
gives no v1 efficiency: Dao, "FlashAttention-2" (2023), abstract: FlashAttention-2 yields "around
2x speedup compared to FlashAttention"."""


class ComputeEfficiency(BaseModel):
    """The op-pricing parameters of one GPU generation (see the module docstring for the formulas).

    Fields:
        generation: the generation these apply to (``default`` for the generation-neutral entry).
        tensor_gemm_eff: fraction of the tensor-core peak a large GEMM/convolution reaches, (0, 1].
        tf32_gemm_eff: the same for TF32 tensor-core GEMMs/convolutions (FP32 data); ``None``: as
            ``tensor_gemm_eff``.
        cuda_gemm_eff: fraction of the CUDA-core peak (FP32, or P100's FP16) a large GEMM/convolution
            reaches, (0, 1].
        vector_eff: fraction of the FP32 CUDA-core peak the FLOPs of element-wise ops reach, (0, 1].
        attention_eff: fraction of the 16-bit tensor peak a FlashAttention-2-class fused attention
            kernel (flash-attn 2.x, PyTorch's SDPA flash/efficient/cuDNN kernels) reaches, forward
            and backward, (0, 1]; ``None``: as ``tensor_gemm_eff`` (:attr:`fused_attention_eff`).
        attention_v1_eff: the same for FlashAttention v1 (flash-attn 1.x), (0, 1]; ``None``: half
            of :attr:`fused_attention_eff` (FlashAttention-2 is about 2x faster, Dao 2023,
            abstract) (:attr:`flash_v1_eff`).
        compute_fill_us: half-saturation point of the GEMM efficiency curve, as a time in
            microseconds (>= 0).
        memory_eff: fraction of the DRAM bandwidth a large streaming kernel reaches, (0, 1].
        memory_fill_us: half-saturation point of the bandwidth curve, microseconds (>= 0).
        kernel_launch_us: GPU-side gap per kernel (launch and dependency), microseconds (>= 0).
        cpu_dispatch_us: host time to issue one op (eager dispatch + launch), microseconds (>= 0);
            the step is host-bound where the ops' total exceeds the GPU time.
        step_overhead_us: host time per step independent of the batch, microseconds (>= 0).
        source: where each value comes from (field name -> citation, or "fitted on ...").

    Raises:
        pydantic.ValidationError: a value out of range or an unknown field, naming the field.
    """

    model_config = SPEC_CONFIG

    generation: str = "default"
    tensor_gemm_eff: float = Field(0.7, gt=0, le=1)
    tf32_gemm_eff: float | None = Field(None, gt=0, le=1)
    cuda_gemm_eff: float = Field(0.8, gt=0, le=1)
    vector_eff: float = Field(0.5, gt=0, le=1)
    attention_eff: float | None = Field(None, gt=0, le=1)
    attention_v1_eff: float | None = Field(None, gt=0, le=1)
    compute_fill_us: float = Field(5.0, ge=0)
    memory_eff: float = Field(0.8, gt=0, le=1)
    memory_fill_us: float = Field(2.0, ge=0)
    kernel_launch_us: float = Field(3.0, ge=0)
    cpu_dispatch_us: float = Field(10.0, ge=0)
    step_overhead_us: float = Field(2000.0, ge=0)
    source: dict[str, str] = Field(default_factory=dict)

    def with_values(self, values: dict[str, float], note: str) -> ComputeEfficiency:
        """A copy with ``values`` (fields of :data:`FITTABLE`) replaced and ``note`` as their source
        (e.g. ``"fitted on rows 1-4 of lambda.csv"``).

        Raises:
            ValueError: a name not in :data:`FITTABLE`.
            pydantic.ValidationError: a value out of range.
        """
        bad = sorted(set(values) - set(FITTABLE))
        if bad:
            raise ValueError(f"compute efficiency: unknown parameter(s) {bad}; expected some of {list(FITTABLE)}")
        data = self.model_dump()
        data.update(values)
        data["source"] = {**self.source, **{k: note for k in values}}
        return ComputeEfficiency.model_validate(data)

    @property
    def tf32_eff(self) -> float:
        """The TF32 GEMM efficiency in use: :attr:`tf32_gemm_eff`, else :attr:`tensor_gemm_eff`."""
        return self.tensor_gemm_eff if self.tf32_gemm_eff is None else self.tf32_gemm_eff

    @property
    def fused_attention_eff(self) -> float:
        """The FlashAttention-2-class kernel efficiency in use: :attr:`attention_eff`, else
        :attr:`tensor_gemm_eff` (a generation without a published attention-kernel measurement)."""
        return self.tensor_gemm_eff if self.attention_eff is None else self.attention_eff

    @property
    def flash_v1_eff(self) -> float:
        """The FlashAttention v1 kernel efficiency in use: :attr:`attention_v1_eff`, else
        :data:`FLASH_V1_RELATIVE_SPEED` x :attr:`fused_attention_eff`."""
        return FLASH_V1_RELATIVE_SPEED * self.fused_attention_eff if self.attention_v1_eff is None \
            else self.attention_v1_eff

    def provenance(self) -> str:
        """One line: the generation and where its values come from (distinct sources, in field order)."""
        seen = list(dict.fromkeys(self.source.get(k, "built-in default (assumption)") for k in FITTABLE))
        return f"{self.generation}: " + "; ".join(seen)
