"""``profile_model``: one training step of a PyTorch model -> op table, parameter table, totals and
the :class:`~ddlscope.specs.workload.Workload` the step-time model takes.

The step is traced on the meta device (no memory is allocated for tensors and nothing is computed;
only shapes and dtypes flow), so a 10-GB embedding table or a full Reddit graph profiles in
seconds on a laptop. See ``docs/profile.md`` for the method, the columns and the limitations.
"""

from __future__ import annotations

import importlib
import inspect
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import polars as pl
import torch

from ddlscope.profile.costs import COMPUTE_BOUND_OPS, rows_touched, tensor_bytes, tensors_in
from ddlscope.profile.optimizers import BertAdam
from ddlscope.profile.tracer import PHASES, StepFunctionMode, StepRecorder, rnn_autocast_check, storage_key
from ddlscope.specs.catalog import Catalog, builtin_catalog
from ddlscope.specs.system import GPUSpec
from ddlscope.specs.workload import Workload

Optimizer = Literal["sgd", "adam", "adamw", "bert_adam"]
OPTIMIZERS: tuple[str, ...] = ("sgd", "adam", "adamw", "bert_adam")
PROFILE_PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16")
ATTENTIONS: tuple[str, ...] = ("fused", "math")
AMP_MODES: tuple[str, ...] = ("autocast", "o2")
"""How 16-bit mixed precision runs (``profile_model(amp=...)``): ``autocast`` casts per call
(``torch.autocast``, apex O1); ``o2`` runs the model in 16 bit with FP32 master weights (apex O2)."""
EMBEDDING_GRADIENTS: tuple[str, ...] = ("sparse", "dense")
DEFAULT_GPU = "V100-SXM2-16GB"
"""Roofline reference GPU when none is given: the PAI study's V100 (IISWC 2019)."""

PhaseEnum = pl.Enum(list(PHASES))
ClassEnum = pl.Enum(["compute_bound", "memory_bound"])
ParamKindEnum = pl.Enum(["dense", "sparse", "frozen"])

OP_COLUMNS: dict[str, str] = {
    "op_index": "position of the op in the step (0-based, dispatch order)",
    "phase": "forward, backward or optimizer",
    "op": "ATen operator (e.g. aten.mm); analytic rows start with 'ddlscope.'",
    "module": "qualified name of the module that ran it (backward: the module whose forward created "
              "the autograd node; optimizer: the module holding the parameter updated); '' for the top level",
    "table": "embedding table (parameter name) an embedding look-up or its backward uses, else null",
    "dtype": "dtype of the first result",
    "shape": "shape of the first result, e.g. 64x2048x7x7",
    "flops": "floating-point operations (2 per multiply-accumulate)",
    "read_bytes": "bytes read from device memory",
    "write_bytes": "bytes written to device memory",
    "total_bytes": "read_bytes + write_bytes",
    "intensity_flops_per_byte": "arithmetic intensity flops / total_bytes (null when no bytes move)",
    "class_by_type": "compute_bound for matmul/convolution-class ops, memory_bound for the rest (PAI study)",
    "class_by_roofline": "compute_bound when the intensity reaches the reference GPU's ridge point",
    "roofline_s": "ideal time on the reference GPU: max(flops / peak, total_bytes / bandwidth)",
    "estimated": "true for analytic rows (sparse-table updates, AMP gradient unscaling), false if traced",
    "unpriced": "true for an op of a compute-heavy kind (matmul, convolution, attention, recurrent, linear "
                "algebra, FFT) that has no FLOP formula: its flops are 0 (not estimated), its bytes are counted; "
                "totals['unpriced_ops'] lists them",
    "gemm_aligned": "matrix multiplies (mm, bmm, addmm, baddbmm, addbmm): true when both operands and the result "
                    "have 16-byte-aligned leading dimensions (cuBLAS's vectorised tensor-core kernels), false "
                    "otherwise (an align1 kernel: a vocabulary of odd size); null for every other op",
}
"""Columns of :attr:`ProfileResult.ops`, one row per op call that does work, with meanings."""

PARAM_COLUMNS: dict[str, str] = {
    "name": "parameter name (state-dict key)",
    "shape": "shape, e.g. 30522x768",
    "dtype": "dtype",
    "numel": "elements",
    "bytes": "numel x itemsize",
    "kind": "dense, sparse (embedding table used only by row look-ups) or frozen (no gradient)",
    "rows": "table rows (first dimension; null for dense parameters)",
    "row_bytes": "bytes per row (null for dense)",
    "lookups_per_step": "index elements looked up per step for the batch, a broadcast index counted once "
                        "(null for parameters that are not looked up)",
    "position_lookups_per_step": "the part of lookups_per_step with position-like indices (a model buffer or "
                                 "an arange, e.g. position ids), assumed distinct rows",
    "rows_touched_per_step": "expected distinct rows touched per step: min(N, P + N (1 - (1 - 1/N)^(k - P))), "
                             "input-driven look-ups as uniform draws",
    "touched_bytes_per_step": "rows_touched_per_step x row_bytes (null for dense)",
}
"""Columns of :attr:`ProfileResult.params`, one row per parameter tensor."""


class ProfileError(ValueError):
    """A model that cannot be profiled: unknown name, bad factory, factory error, GPU-only code,
    an op without a meta kernel, or an output without a loss. The message says which and why."""


@dataclass(frozen=True)
class ProfileResult:
    """The profile of one training step of one model replica.

    Attributes:
        model: the model's name (zoo name or factory spec).
        ops: one row per op call that does work (columns :data:`OP_COLUMNS`).
        params: one row per parameter tensor (columns :data:`PARAM_COLUMNS`).
        totals: the step's totals (FLOPs per phase, bytes, parameters, memory; see
            ``docs/profile.md``), JSON-ready.
        workload: the :class:`~ddlscope.specs.workload.Workload` for the step-time model.
        settings: the sizes and options the step was traced with (batch_size, seq_len or
            image_size, precision, optimizer, attention, embedding_gradients, gpu).
    """

    model: str
    ops: pl.DataFrame
    params: pl.DataFrame
    totals: dict[str, Any]
    workload: Workload
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def embedding_tables(self) -> pl.DataFrame:
        """The rows of :attr:`params` that are embedding tables (sparse, or dense tables used by
        look-ups)."""
        return self.params.filter(pl.col("rows").is_not_null())

    def summary(self, by: Literal["op", "module", "phase"] = "op") -> pl.DataFrame:
        """The op table grouped by ``op`` (with its type class), ``module`` or ``phase``: calls,
        flops, total_bytes, roofline_s and share of the roofline time, sorted by roofline time.

        Raises:
            ValueError: an unknown ``by``.
        """
        keys = {"op": ["op", "class_by_type"], "module": ["module"], "phase": ["phase"]}.get(by)
        if keys is None:
            raise ValueError(f"by: expected op, module or phase, got {by!r}")
        total = self.ops["roofline_s"].sum() or 1.0
        return (
            self.ops.group_by(keys)
            .agg(
                calls=pl.len(),
                flops=pl.col("flops").sum(),
                total_bytes=pl.col("total_bytes").sum(),
                roofline_s=pl.col("roofline_s").sum(),
            )
            .with_columns(
                intensity_flops_per_byte=pl.when(pl.col("total_bytes") > 0)
                .then(pl.col("flops") / pl.col("total_bytes")),
                share=pl.col("roofline_s") / total,
            )
            .sort("roofline_s", descending=True)
        )


# -- resolving the model ------------------------------------------------------------------------
def _resolve(model: str | Callable[..., Any]) -> tuple[str, Callable[..., Any], Any]:
    """``(name, factory, zoo entry or None)`` for a zoo name, ``package.module:factory`` or callable."""
    from ddlscope.profile.zoo import ZOO

    if callable(model):
        name = getattr(model, "__qualname__", None) or type(model).__name__
        return f"{getattr(model, '__module__', '?')}:{name}", model, None
    if not isinstance(model, str) or not model.strip():
        raise ProfileError(f"model: expected a zoo name or 'package.module:factory', got {model!r}")
    spec = model.strip()
    key = spec.lower().replace("-", "_")
    if key in ZOO:
        entry = ZOO[key]
        return entry.name, entry.factory, entry
    if ":" not in spec:
        raise ProfileError(
            f"model {spec!r}: not a zoo model (known: {', '.join(sorted(ZOO))}) and not "
            "'package.module:factory'")
    module_name, _, attr = spec.partition(":")
    module = _import_user_module(spec, module_name)
    factory: Any = module
    for part in attr.split("."):
        if not hasattr(factory, part):
            raise ProfileError(f"model {spec!r}: module {module_name!r} has no attribute {attr!r}")
        factory = getattr(factory, part)
    if not callable(factory):
        raise ProfileError(f"model {spec!r}: {attr!r} is a {type(factory).__name__}, not a callable factory")
    return spec, factory, None


def _import_user_module(spec: str, module_name: str) -> Any:
    """Import ``module_name`` of a ``module:factory`` spec; a module of the current folder is found
    without ``PYTHONPATH`` (``python -m`` puts the folder on ``sys.path``, the installed ``ddlscope``
    command does not: the folder is added at the end of ``sys.path`` when the first import finds
    nothing, so an installed package of the same name still wins).

    Raises:
        ProfileError: the module is found nowhere (the message says where it looked and how to
            point at it) or fails while importing (its error is named).
    """
    top = module_name.split(".")[0]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        cwd = str(Path.cwd())
        if exc.name != top or cwd in sys.path:
            if exc.name == top:
                raise ProfileError(
                    f"model {spec!r}: cannot import module {module_name!r}: {top!r} is not on the Python path nor "
                    f"in the current folder ({cwd}); run from the folder that holds {top}.py (or {top}/), or set "
                    "PYTHONPATH to it") from exc
            raise ProfileError(
                f"model {spec!r}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}") from exc
        sys.path.append(cwd)
        return _import_user_module(spec, module_name)
    except Exception as exc:  # any import-time failure is the user's module's
        raise ProfileError(
            f"model {spec!r}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}") from exc


_GPU_WORDS = ("cuda", "nvidia", "gpu", "nccl", "cudnn", "copy out of meta tensor")


def _needs_gpu(exc: BaseException) -> bool:
    """Whether ``exc`` comes from GPU-only code: CUDA/NCCL/cuDNN errors on a CPU-only build, or
    moving a meta-device model to a device (``.cuda()`` on a machine with a GPU)."""
    text = f"{type(exc).__name__} {exc}".lower()
    return any(w in text for w in _GPU_WORDS)


def _call_factory(name: str, factory: Callable[..., Any], sizes: dict[str, int]) -> tuple[torch.nn.Module, Any]:
    """Call the factory on the meta device with the size keywords it accepts."""
    try:
        sig = inspect.signature(factory)
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())
        accepted = {k for k, p in sig.parameters.items()
                    if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    except (TypeError, ValueError):
        takes_any, accepted = True, set()
    refused = [k for k in sizes if not takes_any and k not in accepted]
    if refused:
        raise ProfileError(
            f"model {name!r}: the factory does not take {', '.join(refused)} "
            f"(its parameters: {', '.join(sorted(accepted)) or 'none'})")
    try:
        with torch.device("meta"):
            made = factory(**sizes)
    except ProfileError:
        raise
    except Exception as exc:
        if _needs_gpu(exc):
            raise ProfileError(
                f"model {name!r}: the factory needs a GPU ({type(exc).__name__}: {exc}). ddlscope profile "
                "builds the model on the meta device: create the model and its inputs without .cuda() or "
                "device='cuda'") from exc
        raise ProfileError(f"model {name!r}: the factory raised {type(exc).__name__}: {exc}") from exc
    if not (isinstance(made, tuple | list) and len(made) == 2 and isinstance(made[0], torch.nn.Module)):
        got = type(made).__name__ if not isinstance(made, tuple | list) else \
            f"a {type(made).__name__} of {len(made)} ({', '.join(type(x).__name__ for x in made)})"
        raise ProfileError(
            f"model {name!r}: the factory returned {got}; expected (torch.nn.Module, example_input_batch)")
    module, batch = made
    tensors = [*module.parameters(), *module.buffers(), *tensors_in(batch)]
    foreign = sorted({t.device.type for t in tensors} - {"meta", "cpu"})
    if foreign:
        raise ProfileError(
            f"model {name!r}: the factory put tensors on {', '.join(foreign)}; it needs a GPU. ddlscope profile "
            "builds the model on the meta device: create the model and its inputs without a device")
    if any(t.device.type == "cpu" for t in tensors):
        module = module.to("meta")
        batch = _to_meta(batch)
    return module, batch


def _to_meta(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj if obj.is_meta else obj.to("meta")
    if isinstance(obj, list | tuple):
        return type(obj)(_to_meta(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _to_meta(v) for k, v in obj.items()}
    return obj


def _run_model(module: torch.nn.Module, batch: Any) -> Any:
    if isinstance(batch, dict):
        return module(**batch)
    if isinstance(batch, tuple | list):
        return module(*batch)
    return module(batch)


def _loss_of(name: str, output: Any) -> torch.Tensor:
    """The tensor to call backward on: a scalar output, ``output.loss`` (Hugging Face),
    ``output["loss"]``, or the first tensor of a tuple."""
    loss: Any = output
    if not isinstance(output, torch.Tensor):
        if getattr(output, "loss", None) is not None:
            loss = output.loss
        elif isinstance(output, dict) and output.get("loss") is not None:
            loss = output["loss"]
        elif isinstance(output, tuple | list) and tensors_in(output):
            loss = tensors_in(output)[0]
        else:
            raise ProfileError(f"model {name!r}: the model returned {type(output).__name__}; expected a loss "
                               "tensor, an output with .loss, or a tensor to back-propagate from")
    if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
        raise ProfileError(f"model {name!r}: the model's output does not require grad (no trainable parameter "
                           "reaches it); nothing to back-propagate")
    return loss


def _make_optimizer(kind: str, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """``sgd``: momentum 0.9, weight decay 1e-4 (He et al., CVPR 2016, ImageNet recipe);
    ``adam``: Adam, betas (0.9, 0.999), no weight decay (Kingma and Ba, ICLR 2015);
    ``adamw``: AdamW, weight decay 0.01 (Loshchilov and Hutter, ICLR 2019; BERT's recipe);
    ``bert_adam``: NVIDIA DeepLearningExamples' FP32 BERT optimizer as its code writes it
    (:class:`ddlscope.profile.optimizers.BertAdam`), weight decay 0.01 on the matrices and none on
    the vectors (the scripts' groups: no decay for biases and LayerNorm weights).
    The single-tensor implementations are traced (``foreach=False``): they move the same bytes as
    the multi-tensor ``foreach`` kernels PyTorch uses on GPUs, attributed per parameter."""
    if kind == "bert_adam":
        return BertAdam([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.01},
                         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}])
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4, foreach=False)
    if kind == "adam":
        return torch.optim.Adam(params, lr=1e-3, foreach=False)
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=False)


SPARSE_UPDATE_WORDS: dict[str, tuple[int, int, float, int]] = {
    "sgd": (2, 1, 2.0, 0),
    "adam": (4, 3, 12.0, 2),
    "adamw": (4, 3, 14.0, 2),
    "bert_adam": (4, 3, 14.0, 2),
}
"""Sparse-table optimizer update per touched table element: ``(words read, words written, FLOPs,
state words per table element)``, a word being one element of the table's dtype. SGD (plain, as
``torch.optim.SGD`` has no momentum for sparse gradients): read gradient and weight, write the
weight; 2 FLOPs (multiply-add). Adam/AdamW (lazy/sparse Adam as ``torch.optim.SparseAdam`` and
TensorFlow's sparse apply): read gradient, weight and both moments, write weight and both
moments; about 12 FLOPs (two moment updates, square root, divide, scale-add), AdamW (and
DeepLearningExamples' BertAdam, decoupled decay as well) 2 more for the decoupled weight decay.
The two moments are state of the table's full size."""


# -- the step -----------------------------------------------------------------------------------
def profile_model(
    model: str | Callable[..., Any],
    *,
    batch_size: int | None = None,
    seq_len: int | None = None,
    image_size: int | None = None,
    precision: str = "fp32",
    optimizer: str = "sgd",
    gpu: str | GPUSpec | None = None,
    attention: str = "fused",
    embedding_gradients: str = "sparse",
    catalog: Catalog | None = None,
    amp: str = "autocast",
) -> ProfileResult:
    """Trace one training step (forward, backward, optimizer update) of ``model`` on the meta device.

    Args:
        model: a zoo name (:data:`ddlscope.profile.zoo.ZOO`), ``"package.module:factory"``, or a
            callable. A factory returns ``(model, example_input_batch)``; it is called on the meta
            device with whichever of ``batch_size``, ``seq_len``, ``image_size`` are given (a
            given size it does not take is an error). The batch is passed as ``model(**batch)``
            (dict), ``model(*batch)`` (tuple/list) or ``model(batch)``; the model returns a loss
            (scalar tensor, ``.loss``, ``["loss"]``) or a tensor back-propagated with ones.
        batch_size, seq_len, image_size: sizes (zoo defaults when None).
        precision: ``fp32``; ``tf32`` (same trace, TF32 matmul peak); ``fp16``/``bf16`` automatic
            mixed precision (CUDA autocast lists, FP32 master weights and gradients; fp16 adds the
            gradient scaler's unscale pass).
        optimizer: ``sgd``, ``adam``, ``adamw`` or ``bert_adam`` (see :func:`_make_optimizer`).
        gpu: catalog GPU name or spec for the roofline columns (default :data:`DEFAULT_GPU`).
        attention: ``fused`` (SDPA through the fused memory-efficient kernel, as on a GPU) or
            ``math`` (the materialised ``L x S`` score path as unfused eager code runs it: matmul,
            scale, mask, softmax, dropout, matmul, each cast as autocast casts it;
            :func:`ddlscope.profile.tracer.eager_attention`).
        embedding_gradients: ``sparse`` (tables used only by row look-ups exchange and update the
            rows a step touches) or ``dense`` (whole-table gradients, PyTorch ``sparse=False``
            DDP semantics).
        catalog: the hardware catalog for ``gpu`` names (default: built-in).
        amp: with ``fp16``/``bf16``, how mixed precision runs (:data:`AMP_MODES`): ``autocast``
            (the default: ``torch.autocast`` / apex O1 casts per call, FP32 weights cast once per
            forward, the softmax and normalisations in FP32) or ``o2`` (apex ``opt_level="O2"``
            with ``keep_batchnorm_fp32=False``, as NVIDIA DeepLearningExamples' BERT fine-tuning
            runs: the whole model in 16 bit, no per-call casts; the optimizer steps FP32 master
            weights, the 16-bit gradients copied into them (the copy unscales and checks for
            overflow, apex ``multi_tensor_scale``) and the updated masters copied back). Ignored
            for fp32/tf32.

    Returns:
        A :class:`ProfileResult`.

    Raises:
        ProfileError: bad model spec or factory, GPU-only factory, untraceable op, no loss, or a
            model that rejects its input at these sizes (``profile resnet18 at --batch-size 1,
            --image-size 7: the model cannot run at this size (PyTorch: ...)``).
        ValueError: an unknown precision, optimizer, attention or embedding_gradients value, or a
            non-positive size.
    """
    for value, allowed, what in ((precision, PROFILE_PRECISIONS, "precision"), (optimizer, OPTIMIZERS, "optimizer"),
                                 (attention, ATTENTIONS, "attention"), (amp, AMP_MODES, "amp"),
                                 (embedding_gradients, EMBEDDING_GRADIENTS, "embedding_gradients")):
        if value not in allowed:
            raise ValueError(f"{what}: expected one of {', '.join(allowed)}, got {value!r}")
    for value, what in ((batch_size, "batch_size"), (seq_len, "seq_len"), (image_size, "image_size")):
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise ValueError(f"{what}: expected a positive integer, got {value!r}")
    gpu_spec = gpu if isinstance(gpu, GPUSpec) else (catalog or builtin_catalog()).gpu(gpu or DEFAULT_GPU)
    mixed = precision in ("fp16", "bf16")  # an AMP mode applies to 16-bit mixed precision only
    o2 = mixed and amp == "o2"

    name, factory, entry = _resolve(model)
    sizes: dict[str, int] = {}
    if entry is not None:
        sizes = entry.sizes(batch_size=batch_size, seq_len=seq_len, image_size=image_size)
    else:
        sizes = {k: v for k, v in (("batch_size", batch_size), ("seq_len", seq_len), ("image_size", image_size))
                 if v is not None}
    started = time.perf_counter()
    module, batch = _call_factory(name, factory, sizes)
    module.train()
    # PyTorch's sparse=True embeddings produce sparse-layout gradients the meta device cannot hold;
    # their cost is the same row-wise one that lookup-only tables get here anyway (see
    # ``embedding_gradients``), so they are traced as dense-layout tables.
    for sub in module.modules():
        if isinstance(sub, torch.nn.Embedding | torch.nn.EmbeddingBag) and sub.sparse:
            sub.sparse = False
    try:
        trace = _trace_step(name, module, batch, precision, optimizer, attention, embedding_gradients, o2=o2)
    except _ModelInputError as exc:  # the model's own check of its input (BatchNorm of one value...)
        at = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in sizes.items()) or "its default sizes"
        raise ProfileError(f"profile {name} at {at}: the model cannot run at this size (PyTorch: {exc})") from None
    trace_s = time.perf_counter() - started

    input_bytes = sum(tensor_bytes(t) for t in tensors_in(batch))
    b = sizes.get("batch_size") or _infer_batch(batch)
    stored = None
    if entry is not None and entry.stored_input_bytes_per_sample is not None:
        stored = entry.stored_input_bytes_per_sample * b
    ops = _finish_ops(trace["records"], gpu_spec, precision)
    params = trace["params"]
    totals = _totals(name, ops, params, trace, sizes, b, precision, optimizer, attention, gpu_spec,
                     input_bytes, trace_s, embedding_gradients)
    workload = Workload(
        name=name,
        batch_size=b,
        precision=precision,  # type: ignore[arg-type]
        compute_bound_flops=totals["compute_bound_flops"],
        memory_bound_bytes=totals["memory_bound_bytes"],
        memory_bound_flops=totals["memory_bound_flops"],
        input_bytes=float(input_bytes),
        stored_input_bytes=stored,
        dense_param_bytes=float(totals["dense_param_bytes"]),
        num_gradient_tensors=int(totals["num_gradient_tensors"]),
        sparse_bytes_per_step=float(totals["sparse_bytes_per_step"]),
        embedding_table_bytes=float(totals["embedding_table_bytes"]),
        peak_memory_bytes=float(totals["peak_memory_bytes"]),
        source=f"ddlscope profile {name} (batch {b}"
        + "".join(f", {k} {v}" for k, v in sizes.items() if k != "batch_size")
        + f", {precision}{' (apex O2)' if o2 else ''}, {optimizer}, "
        f"attention {attention}; torch {torch.__version__})",
    )
    settings = {"batch_size": b, **{k: v for k, v in sizes.items() if k != "batch_size"}, "precision": precision,
                "optimizer": optimizer, "attention": attention, "embedding_gradients": embedding_gradients,
                "amp": amp if mixed else "none",
                "gpu": gpu_spec.name}
    return ProfileResult(model=name, ops=ops, params=params, totals=totals, workload=workload, settings=settings)


def _infer_batch(batch: Any) -> int:
    ts = tensors_in(batch)
    return int(ts[0].shape[0]) if ts and ts[0].dim() > 0 else 1


class _ModelInputError(Exception):
    """A model's own ValueError during the traced step: its input does not suit it (too small)."""


def _trace_step(name: str, module: torch.nn.Module, batch: Any, precision: str, optimizer: str, attention: str,
                embedding_gradients: str, o2: bool = False) -> dict[str, Any]:
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    if o2 and amp_dtype is not None:  # apex O2: the model and its floating inputs in 16 bit
        module.to(amp_dtype)
        batch = _cast_floats(batch, amp_dtype)
    named = list(module.named_parameters())
    trainable = [(n, p) for n, p in named if p.requires_grad]
    param_names = {storage_key(p): n for n, p in named}
    buffers = {storage_key(t) for t in module.buffers()}
    static = {storage_key(t) for t in [*module.parameters(), *tensors_in(batch)]} | buffers
    module_names = {id(m): n for n, m in module.named_modules()}
    rec = StepRecorder(module_names, param_names, static, buffers)
    fmode = StepFunctionMode(None if o2 else amp_dtype, fused_attention=attention == "fused")

    for p in module.parameters():
        p.grad = None
    rec.install_module_hooks()
    try:
        with torch.device("meta"):
            try:
                with rec:
                    rec.phase = "forward"
                    with fmode, rnn_autocast_check(amp_dtype is not None and not o2):
                        output = _run_model(module, batch)
                        loss = _loss_of(name, output)
                    fmode.clear_cache()  # as leaving torch.autocast does; autograd keeps what it saved
                    del output
                    activation_bytes = rec.live_bytes
                    forward_end = rec.op_index
                    lookups = dict(rec.lookups)
                    positions = dict(rec.position_lookups)
                    sparse = {}
                    if embedding_gradients == "sparse":
                        for table, k in lookups.items():
                            if table not in rec.dense_uses:
                                rows = dict(named)[table].shape[0]
                                sparse[table] = rows_touched(rows, k, positions.get(table, 0))
                    rec.sparse_tables = sparse
                    rec.phase = "backward"
                    if loss.numel() == 1:
                        loss.backward()
                    else:
                        loss.backward(torch.ones_like(loss))
                    del loss
            except ProfileError:
                raise
            except ValueError as exc:  # PyTorch's checks of the input's shape raise ValueError
                raise _ModelInputError(str(exc).split("\n")[0]) from exc
            except NotImplementedError as exc:
                raise ProfileError(f"model {name!r}: an operator cannot run on the meta device: {exc}".split("\n")[0]
                                   ) from exc
            except RuntimeError as exc:
                msg = str(exc).split("\n")[0]
                if "meta" in msg.lower() and ("item" in msg.lower() or "data-dependent" in msg.lower()
                                              or "cannot be called" in msg.lower()):
                    raise ProfileError(
                        f"model {name!r}: the model reads tensor values ({msg}); ddlscope profile traces "
                        "shapes only (meta device), so data-dependent Python control flow cannot be traced"
                    ) from exc
                raise ProfileError(f"model {name!r}: the step failed on the meta device: {msg}") from exc
    finally:
        rec.remove_module_hooks()
    backward_end = rec.op_index

    grad_keys = {rec.allocation_of(p.grad) for _, p in trainable if p.grad is not None} - {None}

    # -- optimizer: state warmed up outside the trace (a steady-state step), then one traced step
    dense_trainable = [(n, p) for n, p in trainable if n not in sparse]
    # apex O2: the optimizer updates FP32 master copies of the 16-bit weights
    masters = ({n: torch.nn.Parameter(p.detach().float()) for n, p in dense_trainable if p.grad is not None}
               if o2 else {})
    stepped = [(n, masters.get(n, p)) for n, p in dense_trainable]
    opt = _make_optimizer(optimizer, [p for _, p in stepped]) if stepped else None
    state_bytes = 0
    if opt is not None:
        for n, p in dense_trainable:
            if n in masters:
                masters[n].grad = p.grad.float()
        opt.step()  # initialise the state (momentum buffers, moments) untraced
        owners = {}
        for (n, p), (_, q) in zip(dense_trainable, stepped, strict=True):
            owner = n.rpartition(".")[0]  # the module holding the parameter
            for t in {id(x): x for x in (p, q, p.grad, q.grad) if x is not None}.values():
                owners[storage_key(t)] = owner
            if q is not p:  # a master weight is optimizer state: 4 bytes per parameter
                rec.static.add(storage_key(q))
                rec.static.add(storage_key(q.grad))
                state_bytes += tensor_bytes(q)
            for v in opt.state[q].values():
                if isinstance(v, torch.Tensor) and v.is_meta:
                    owners[storage_key(v)] = owner
                    rec.static.add(storage_key(v))
                    state_bytes += tensor_bytes(v)
        rec.add_owners(owners)
        rec.phase = "optimizer"
        with rec:
            for n, p in dense_trainable:  # 16-bit gradients into the FP32 masters (unscaled on the way)
                if n in masters:
                    masters[n].grad.copy_(p.grad)
            opt.step()
            with torch.no_grad():
                for n, p in dense_trainable:  # the updated masters back into the 16-bit model
                    if n in masters:
                        p.copy_(masters[n])
    rec.stop_tracking()

    # -- analytic rows: sparse-table updates and the fp16 gradient scaler
    named_d = dict(named)
    read_w, write_w, flops_per, state_w = SPARSE_UPDATE_WORDS[optimizer]
    for table, table_rows in sparse.items():
        p = named_d[table]
        touched = table_rows * (p.shape[-1] if p.dim() > 1 else 1)
        state_bytes += state_w * p.numel() * p.element_size()
        if o2:  # apex O2 keeps an FP32 master of every parameter, the tables' too
            state_bytes += 4 * p.numel()
        _append(rec, "optimizer", f"ddlscope.sparse_{optimizer}_update", table.rpartition(".")[0], table, p,
                touched * flops_per,
                touched * p.element_size() * read_w, touched * p.element_size() * write_w)
    grads = [p.grad for _, p in dense_trainable if p.grad is not None]
    if optimizer == "bert_adam" and grads:
        # BertAdam's global gradient norm before its loop (apex multi_tensor_l2norm): every gradient
        # read once, a multiply-add per element, one FP32 result; one row over all of them (one
        # multi-tensor launch sequence, not a kernel per parameter), shaped as their elements
        elems = sum(g.numel() for g in grads)
        _append(rec, "optimizer", "ddlscope.multi_tensor_l2norm", "", None,
                torch.empty(elems, dtype=grads[0].dtype, device="meta"), 2.0 * elems,
                sum(tensor_bytes(g) for g in grads), 4)
    if precision == "fp16" and not o2:  # under O2 the master-gradient copy unscales
        # GradScaler.unscale_ (PyTorch AMP): _amp_foreach_non_finite_check_and_unscale_ reads and
        # writes every gradient once, multiplying by 1/scale and checking for inf/NaN
        for n, p in trainable:
            elems = sparse[n] * (p.shape[-1] if p.dim() > 1 else 1) if n in sparse else p.numel()
            nbytes = elems * p.element_size()
            _append(rec, "optimizer", "ddlscope.amp_unscale_grads", n.rpartition(".")[0], n if n in sparse else None, p,
                    2.0 * elems, nbytes, nbytes)

    params = _param_table(named, sparse, lookups, positions, rec.lookup_row_bytes)
    events = rec.events
    return {
        "records": rec.records,
        "params": params,
        "activation_bytes": activation_bytes,
        "events": events,
        "grad_keys": grad_keys,
        "forward_end": forward_end,
        "backward_end": backward_end,
        "state_bytes": state_bytes,
        "view_ops": rec.view_ops,
        "host_ops": rec.host_ops,
        "sparse": sparse,
    }


def _cast_floats(obj: Any, dtype: torch.dtype) -> Any:
    """``obj`` (a tensor, or a dict/list/tuple of them) with its floating tensors cast to ``dtype``."""
    if isinstance(obj, torch.Tensor):
        return obj.to(dtype) if obj.is_floating_point() else obj
    if isinstance(obj, dict):
        return {k: _cast_floats(v, dtype) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_cast_floats(v, dtype) for v in obj)
    return obj


def _append(rec: StepRecorder, phase: str, op: str, module: str, table: str | None, p: torch.Tensor,
            flops: float, read: float, write: float) -> None:
    r = rec.records
    r["op_index"].append(rec.op_index)
    r["phase"].append(phase)
    r["op"].append(op)
    r["module"].append(module)
    r["table"].append(table)
    r["dtype"].append(str(p.dtype).removeprefix("torch."))
    r["shape"].append("x".join(map(str, p.shape)))
    r["flops"].append(float(flops))
    r["read_bytes"].append(round(read))
    r["write_bytes"].append(round(write))
    r["estimated"].append(True)
    r["unpriced"].append(False)
    r["gemm_aligned"].append(None)
    rec.op_index += 1


COMPUTE_BOUND_NAMES: frozenset[str] = frozenset(str(p) for p in COMPUTE_BOUND_OPS)


def _finish_ops(records: dict[str, list[Any]], gpu: GPUSpec, precision: str) -> pl.DataFrame:
    """The op table from the recorder's columns: bytes totals, intensity, both classifications
    and the roofline time on ``gpu`` (vectorised; see :data:`OP_COLUMNS`).

    Peaks: matmul-class ops run at the GPU's peak for their dtype (16-bit tensor cores for float16
    and bfloat16; TF32 for float32 when ``precision`` is tf32, else FP32); every other op at the
    FP32 peak. Ridge point = peak / memory bandwidth (Williams et al., "Roofline", CACM 2009)."""
    c = pl.col
    peak = gpu.peak_tflops
    p32, p_mm32 = peak.fp32 * 1e12, (peak.tf32 if precision == "tf32" else peak.fp32) * 1e12
    bw = gpu.memory_bandwidth_gb_s * 1e9
    frame = pl.DataFrame(records, schema={
        "op_index": pl.Int64, "phase": PhaseEnum, "op": pl.String, "module": pl.String, "table": pl.String,
        "dtype": pl.String, "shape": pl.String, "flops": pl.Float64, "read_bytes": pl.Int64,
        "write_bytes": pl.Int64, "estimated": pl.Boolean, "unpriced": pl.Boolean, "gemm_aligned": pl.Boolean,
    })
    is_cb = c("op").is_in(list(COMPUTE_BOUND_NAMES))
    peak_expr = (
        pl.when(is_cb & (c("dtype") == "float16")).then(peak.fp16 * 1e12)
        .when(is_cb & (c("dtype") == "bfloat16")).then(peak.bf16 * 1e12)
        .when(is_cb).then(p_mm32)
        .otherwise(p32)
    )
    return (
        frame.with_columns(total_bytes=c("read_bytes") + c("write_bytes"), _peak=peak_expr)
        .filter((c("flops") > 0) | (c("total_bytes") > 0))
        .with_columns(
            intensity_flops_per_byte=pl.when(c("total_bytes") > 0).then(c("flops") / c("total_bytes")),
            class_by_type=pl.when(is_cb).then(pl.lit("compute_bound")).otherwise(pl.lit("memory_bound"))
            .cast(ClassEnum),
            class_by_roofline=pl.when(c("flops") / c("_peak") >= c("total_bytes") / bw)
            .then(pl.lit("compute_bound")).otherwise(pl.lit("memory_bound")).cast(ClassEnum),
            roofline_s=pl.max_horizontal(c("flops") / c("_peak"), c("total_bytes") / bw),
        )
        .select(list(OP_COLUMNS))
    )


def _param_table(named: list[tuple[str, torch.nn.Parameter]], sparse: dict[str, float], lookups: dict[str, int],
                 positions: dict[str, int], row_bytes: dict[str, int]) -> pl.DataFrame:
    """One row per parameter (columns :data:`PARAM_COLUMNS`). Rows touched:
    :func:`ddlscope.profile.costs.rows_touched` as a vectorised expression."""
    frame = pl.DataFrame({
        "name": [n for n, _ in named],
        "shape": ["x".join(map(str, p.shape)) for _, p in named],
        "dtype": [str(p.dtype).removeprefix("torch.") for _, p in named],
        "numel": [p.numel() for _, p in named],
        "bytes": [p.numel() * p.element_size() for _, p in named],
        "kind": ["frozen" if not p.requires_grad else "sparse" if n in sparse else "dense" for n, p in named],
        "rows": [p.shape[0] if n in lookups and p.dim() > 0 else None for n, p in named],
        "row_bytes": [row_bytes.get(n) if n in lookups else None for n, _ in named],
        "lookups_per_step": [lookups.get(n) for n, _ in named],
        "position_lookups_per_step": [positions.get(n, 0) if n in lookups else None for n, _ in named],
    }, schema_overrides={"numel": pl.Int64, "bytes": pl.Int64, "kind": ParamKindEnum, "rows": pl.Int64,
                         "row_bytes": pl.Int64, "lookups_per_step": pl.Int64, "position_lookups_per_step": pl.Int64})
    n = pl.col("rows").cast(pl.Float64)
    pos = pl.col("position_lookups_per_step").cast(pl.Float64)
    k = pl.col("lookups_per_step").cast(pl.Float64) - pos
    uniform = pl.when(n == 1).then(pl.min_horizontal(k, 1.0)).otherwise(-n * ((k * (-1.0 / n).log1p()).exp() - 1.0))
    touched = pl.min_horizontal(n, pos + uniform)
    return frame.with_columns(rows_touched_per_step=touched).with_columns(
        touched_bytes_per_step=pl.col("rows_touched_per_step") * pl.col("row_bytes"))


def _totals(name: str, ops: pl.DataFrame, params: pl.DataFrame, trace: dict[str, Any], sizes: dict[str, int],
            batch_size: int, precision: str, optimizer: str, attention: str, gpu: GPUSpec, input_bytes: int,
            trace_s: float, embedding_gradients: str) -> dict[str, Any]:
    c = pl.col

    def ssum(frame: pl.DataFrame, col: str) -> float:
        return float(frame[col].sum() or 0)

    per_phase = {ph: ops.filter(c("phase") == ph) for ph in PHASES}
    cb, mb = ops.filter(c("class_by_type") == "compute_bound"), ops.filter(c("class_by_type") == "memory_bound")
    dense, sparse = params.filter(c("kind") == "dense"), params.filter(c("kind") == "sparse")

    events = pl.DataFrame(trace["events"], schema={"op_index": pl.Int64, "key": pl.Int64, "delta": pl.Int64},
                          orient="row")
    peak_live = max(0, int(events["delta"].cum_sum().max() or 0)) if events.height else 0
    act = events.filter(~c("key").is_in(list(trace["grad_keys"])) & (c("op_index") < trace["backward_end"]))
    peak_act = max(0, int(act["delta"].cum_sum().max() or 0)) if act.height else 0
    param_bytes = int(params["bytes"].sum() or 0)
    state_bytes = int(trace["state_bytes"])
    totals: dict[str, Any] = {
        "model": name,
        "batch_size": batch_size,
        "seq_len": sizes.get("seq_len"),
        "image_size": sizes.get("image_size"),
        "precision": precision,
        "optimizer": optimizer,
        "attention": attention,
        "embedding_gradients": embedding_gradients,
        "gpu": gpu.name,
        **{f"{ph}_flops": ssum(per_phase[ph], "flops") for ph in PHASES},
        "total_flops": ssum(ops, "flops"),
        **{f"{ph}_bytes": ssum(per_phase[ph], "total_bytes") for ph in PHASES},
        "total_bytes": ssum(ops, "total_bytes"),
        "compute_bound_flops": ssum(cb, "flops"),
        "compute_bound_bytes": ssum(cb, "total_bytes"),
        "memory_bound_flops": ssum(mb, "flops"),
        "memory_bound_bytes": ssum(mb, "total_bytes"),
        "roofline_compute_bound_flops": ssum(ops.filter(c("class_by_roofline") == "compute_bound"), "flops"),
        "roofline_memory_bound_bytes": ssum(ops.filter(c("class_by_roofline") == "memory_bound"), "total_bytes"),
        "roofline_time_s": ssum(ops, "roofline_s"),
        "params": int(params["numel"].sum() or 0),
        "dense_params": int(dense["numel"].sum() or 0),
        "sparse_params": int(sparse["numel"].sum() or 0),
        "frozen_params": int(params.filter(c("kind") == "frozen")["numel"].sum() or 0),
        "param_bytes": param_bytes,
        "dense_param_bytes": int(dense["bytes"].sum() or 0),
        "num_gradient_tensors": dense.height,
        "embedding_tables": sparse.height,
        "embedding_table_bytes": int(sparse["bytes"].sum() or 0),
        "sparse_lookups_per_step": int(sparse["lookups_per_step"].sum() or 0),
        "sparse_rows_touched_per_step": ssum(sparse, "rows_touched_per_step"),
        "sparse_bytes_per_step": ssum(sparse, "touched_bytes_per_step"),
        "input_bytes": input_bytes,
        "activation_bytes": int(trace["activation_bytes"]),
        "peak_activation_bytes": peak_act,
        "optimizer_state_bytes": state_bytes,
        "peak_memory_bytes": param_bytes + state_bytes + input_bytes + peak_live,
        "ops": ops.height,
        "unpriced_ops": {op: int(n) for op, n in ops.filter(c("unpriced")).group_by("op").len().sort("op").iter_rows()},
        "view_ops": int(trace["view_ops"]),
        "host_ops": int(trace["host_ops"]),
        "trace_s": trace_s,
    }
    if not math.isfinite(totals["roofline_time_s"]):
        totals["roofline_time_s"] = None
    return totals
