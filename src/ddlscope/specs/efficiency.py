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
CUDA-core peak). The host issues the ops asynchronously, ``cpu_dispatch_us`` each (eager PyTorch's
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
"""The numeric fields of :class:`ComputeEfficiency` a fit may change (the order of a parameter vector;
``tf32_gemm_eff`` is ``None`` until set: start a fit from :attr:`ComputeEfficiency.tf32_eff`)."""


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

    def provenance(self) -> str:
        """One line: the generation and where its values come from (distinct sources, in field order)."""
        seen = list(dict.fromkeys(self.source.get(k, "built-in default (assumption)") for k in FITTABLE))
        return f"{self.generation}: " + "; ".join(seen)
