"""The Workload spec: what one training step demands of one replica (one GPU's share).

The workload is the *application* input of the step-time model, kept apart from the placement
(:class:`~ddlscope.specs.architecture.Architecture`) and the hardware
(:class:`~ddlscope.specs.system.System`), as Calculon keeps application, execution and system apart.
It holds totals only; the per-op table it may come from is produced by ``ddlscope profile``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from ddlscope.specs.base import SPEC_CONFIG
from ddlscope.specs.errors import describe_validation
from ddlscope.specs.files import read_toml_or_json

Precision = Literal["fp32", "tf32", "fp16", "bf16"]
"""Arithmetic precision of a step: ``fp32`` plain FP32; ``tf32`` FP32 storage with TF32 tensor-core
matmuls; ``fp16`` / ``bf16`` automatic mixed precision (16-bit tensor-core matmuls with FP32
accumulate and FP32 master weights and gradients)."""

PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16")

MIXED_PRECISION_BYTES_FACTOR = 0.5
"""Memory-bound bytes of a step moved from 32-bit to 16-bit arithmetic are multiplied by this
(element-wise and normalisation ops stream 2-byte instead of 4-byte activations). An approximation
stated here: AMP's FP32 master weights and optimizer update do not shrink, so the true factor lies
a little above 0.5."""


def precision_bytes_factor(source: str, target: str) -> float:
    """Factor on memory-bound bytes when a step moves from precision ``source`` to ``target``:
    :data:`MIXED_PRECISION_BYTES_FACTOR` from 32 to 16 bit, its inverse back, 1 otherwise
    (``fp32``/``tf32`` stream 4-byte, ``fp16``/``bf16`` 2-byte activations)."""
    was16, to16 = source in ("fp16", "bf16"), target in ("fp16", "bf16")
    if to16 and not was16:
        return MIXED_PRECISION_BYTES_FACTOR
    if was16 and not to16:
        return 1.0 / MIXED_PRECISION_BYTES_FACTOR
    return 1.0


class Workload(BaseModel):
    """Per-step demand of one data-parallel replica.

    All quantities are per training step (iteration) and per replica, where a replica is the model
    copy on one GPU that processes ``batch_size`` samples. Forward, backward and optimizer update
    are all included.

    Fields (units in the names):

    - ``batch_size``: samples per replica per step (> 0).
    - ``precision``: one of :data:`PRECISIONS`; selects the GPU's peak FLOP/s.
    - ``compute_bound_flops``: FLOPs of compute-bound ops (matmul, convolution, attention
      matmuls); timed against the GPU's peak FLOP/s.
    - ``memory_bound_bytes``: bytes read plus written by memory-bound ops (element-wise,
      normalisation, reductions, embedding look-ups, optimizer update); timed against the GPU's
      memory bandwidth.
    - ``memory_bound_flops``: FLOPs of those memory-bound ops (a roofline floor; usually tiny).
    - ``input_bytes``: input batch bytes copied host to GPU (decoded tensors).
    - ``stored_input_bytes``: input bytes read from storage per step (compressed records, e.g.
      JPEG); ``None`` means the same as ``input_bytes``.
    - ``dense_param_bytes``: bytes of the dense parameters, equal to the dense gradient bytes
      exchanged per step (in the precision gradients are communicated in).
    - ``num_gradient_tensors``: how many separately communicated gradient messages (tensors, or
      buckets after fusion) a step sends; each pays the link latency (the alpha of the alpha-beta
      model). At least 1 when ``dense_param_bytes`` > 0.
    - ``sparse_bytes_per_step``: embedding-table bytes a replica's batch touches per step
      (rows touched x bytes per row); pulled before and pushed after the step in parameter-server
      training, exchanged with all-to-all in ``pearl``.
    - ``embedding_table_bytes``: total size of the sparse (embedding) tables.
    - ``peak_memory_bytes``: optional peak GPU memory of one replica (weights, gradients, optimizer
      state, activations, embedding tables held on the GPU); used to flag jobs that do not fit.
    - ``num_params``: optional parameter count of the model (dense and sparse); the sharded
      architectures (``fsdp``) read it for the bytes of a parameter all-gather and the memory each
      sharding saves (:mod:`ddlscope.model.sharded`). ``None``: unknown.
    - ``num_layers``, ``layer_activation_bytes``: optional, for ``3d``: transformer layers and the
      bytes of one layer's output activation for the batch (what tensor parallelism all-reduces and
      a pipeline stage sends; :mod:`ddlscope.model.pipeline`); ``layer_kv_bytes``: one layer's keys
      and values for the batch (what context parallelism passes round its ring).
    - ``num_experts``, ``experts_per_token``, ``expert_params``: optional, a mixture of experts
      (every transformer layer an MoE block): experts per layer (> 1), top-k routing (``1 <= k <=
      num_experts``) and the parameters in the experts of all layers (``<= num_params``); what
      ``3d``'s expert parallelism (``ep``) splits and exchanges (:mod:`ddlscope.model.pipeline`).
      ``None``: a dense model.

    Raises:
        pydantic.ValidationError: a negative, infinite or NaN quantity, a batch that is not a
            positive integer, an unknown precision, gradient bytes without gradient tensors, sparse
            bytes touched larger than the tables, or no work at all. The error names the field and
            what was expected.
    """

    model_config = SPEC_CONFIG

    name: str = Field("workload", description="label of the workload (model name, job name)")
    batch_size: int = Field(..., gt=0, strict=True, description="samples per replica per step")
    precision: Precision = "fp32"
    compute_bound_flops: float = Field(..., ge=0)
    memory_bound_bytes: float = Field(..., ge=0)
    memory_bound_flops: float = Field(0.0, ge=0)
    input_bytes: float = Field(0.0, ge=0)
    stored_input_bytes: float | None = Field(None, ge=0)
    dense_param_bytes: float = Field(0.0, ge=0)
    num_gradient_tensors: int = Field(0, ge=0, strict=True)
    sparse_bytes_per_step: float = Field(0.0, ge=0)
    embedding_table_bytes: float = Field(0.0, ge=0)
    peak_memory_bytes: float | None = Field(None, ge=0)
    num_params: float | None = Field(None, ge=0)
    num_layers: int | None = Field(None, ge=1, strict=True)
    layer_activation_bytes: float | None = Field(None, ge=0)
    layer_kv_bytes: float | None = Field(None, ge=0)
    num_experts: int | None = Field(None, ge=1, strict=True)
    experts_per_token: int | None = Field(None, ge=1, strict=True)
    expert_params: float | None = Field(None, ge=0)
    source: str = Field("", description="where the numbers come from (profile command, file)")

    def at(self, *, batch_size: int | None = None, precision: str | None = None) -> Workload:
        """This workload at another batch size and/or precision, without re-profiling.

        Per-sample quantities (FLOPs, memory-bound bytes, input bytes, sparse bytes touched, capped
        at the tables) scale with the batch; parameters and gradients do not; the peak memory becomes
        unknown (activations scale, weights and optimizer state do not). A precision change scales
        the memory-bound bytes by :func:`precision_bytes_factor`, as the mixed-precision scenario
        does. Re-profile (``ddlscope profile``) for exact figures.

        Raises:
            ValueError: ``batch_size`` < 1 (checked first, so the error is not followed by the
                negative demands it would scale to).
            pydantic.ValidationError: a precision the spec rejects.
        """
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size: expected a whole number >= 1, got {batch_size}")
        changes = _scaled(self, batch_size, precision)
        return Workload.model_validate({**self.model_dump(), **changes}) if changes else self

    @model_validator(mode="after")
    def _consistent(self) -> Workload:
        if not (self.compute_bound_flops or self.memory_bound_bytes or self.memory_bound_flops or self.input_bytes
                or self.dense_param_bytes or self.sparse_bytes_per_step):
            raise ValueError(
                "every demand is 0; expected some work per step (compute_bound_flops, "
                "memory_bound_bytes, input_bytes, dense_param_bytes or sparse_bytes_per_step > 0)"
            )
        if self.dense_param_bytes > 0 and self.num_gradient_tensors < 1:
            raise ValueError(
                "num_gradient_tensors: expected >= 1 when dense_param_bytes > 0 "
                f"(got {self.num_gradient_tensors}); every gradient message pays the link latency"
            )
        if self.sparse_bytes_per_step > 0 and self.embedding_table_bytes < self.sparse_bytes_per_step:
            raise ValueError(
                "embedding_table_bytes: expected >= sparse_bytes_per_step "
                f"({self.sparse_bytes_per_step:g}), got {self.embedding_table_bytes:g}; a step cannot "
                "touch more embedding bytes than the tables hold"
            )
        moe = (self.num_experts, self.experts_per_token, self.expert_params)
        if any(x is not None for x in moe) and any(x is None for x in moe):
            raise ValueError("num_experts, experts_per_token, expert_params: a mixture of experts gives all three, "
                             f"got {moe}")
        if self.num_experts is not None and self.experts_per_token > self.num_experts:  # type: ignore[operator]
            raise ValueError(f"experts_per_token: expected <= num_experts = {self.num_experts}, got "
                             f"{self.experts_per_token}")
        if (self.expert_params is not None and self.num_params is not None
                and self.expert_params > self.num_params):
            raise ValueError(f"expert_params: expected <= num_params = {self.num_params:g}, got "
                             f"{self.expert_params:g}")
        return self


def _scaled(w: Workload, batch_size: int | None, precision: str | None) -> dict:
    changes: dict = {}
    if batch_size is not None and batch_size != w.batch_size:
        f = batch_size / w.batch_size
        changes = {
            "batch_size": batch_size,
            "compute_bound_flops": w.compute_bound_flops * f,
            "memory_bound_bytes": w.memory_bound_bytes * f,
            "memory_bound_flops": w.memory_bound_flops * f,
            "input_bytes": w.input_bytes * f,
            "stored_input_bytes": None if w.stored_input_bytes is None else w.stored_input_bytes * f,
            "sparse_bytes_per_step": min(w.sparse_bytes_per_step * f, w.embedding_table_bytes),
            "layer_activation_bytes": None if w.layer_activation_bytes is None else w.layer_activation_bytes * f,
            "layer_kv_bytes": None if w.layer_kv_bytes is None else w.layer_kv_bytes * f,
            "peak_memory_bytes": None,  # weights and optimizer state do not scale, activations do: unknown
        }
    if precision is not None and precision != w.precision:
        base = changes.get("memory_bound_bytes", w.memory_bound_bytes)
        changes |= {"precision": precision, "memory_bound_bytes": base * precision_bytes_factor(w.precision, precision)}
    return changes


def load_workload(path: str | Path) -> Workload:
    """Read a Workload from a TOML or JSON file: the fields at the top level or in a
    ``[workload]`` table (the output of ``ddlscope profile --format json`` is accepted too, via its
    ``workload`` object).

    Raises:
        ValueError: unreadable or unparsable file, or fields that do not validate (naming the file
            and the field).
    """
    path = Path(path)
    data = read_toml_or_json(path, section="workload")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a table of workload fields")
    try:
        return Workload.model_validate(data)
    except ValidationError as exc:
        errs = describe_validation(exc)
        raise ValueError(f"{path}: {errs}") from exc
