"""Trace one training step on the meta device: every ATen op with its FLOPs, bytes and module.

Two PyTorch modes cooperate:

- :class:`StepRecorder`, a ``TorchDispatchMode`` (below autograd), sees every ATen operator the
  forward, the backward and the optimizer run, with the shapes and dtypes of its tensors. It
  records one row per op that does work (views and aliases are only counted), attributes it to a
  module (forward: the innermost ``nn.Module`` running; backward: the module whose forward op
  created the autograd node being executed, matched through the node's sequence number;
  optimizer: the module holding the parameter being updated), notes which parameters are used only as embedding
  look-up tables, and follows live memory (a storage is live from the op that creates it until
  Python frees it, which on the meta device is exactly when eager PyTorch would).
- :class:`StepFunctionMode`, a ``TorchFunctionMode`` (above autograd), picks the kernels a CUDA
  device would run where the meta device would pick others (fused dropout, fused attention) and
  applies automatic mixed precision the way CUDA autocast does (PyTorch AMP documentation, "CUDA
  Ops that can autocast to float16" and "... to float32": matmul/convolution-class calls run in
  16 bit, precision-sensitive calls in FP32, parameters cast once per forward) and, with
  ``fused_attention``, routes
  ``scaled_dot_product_attention`` to the fused memory-efficient kernel a GPU would run instead of
  the materialised math path the meta device would pick; without it, to the unfused eager sequence
  (:func:`eager_attention`) that code writing attention by hand runs.
"""

from __future__ import annotations

import contextlib
import types
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from ddlscope.profile.costs import (
    EMBEDDING_BACKWARD_OPS,
    EMBEDDING_LOOKUP_OPS,
    distinct_elements,
    gemm_aligned,
    is_unpriced,
    op_bytes,
    op_flops,
    tensor_bytes,
    tensors_in,
)

PHASES: tuple[str, ...] = ("forward", "backward", "optimizer")
aten_arange = torch.ops.aten.arange
_SHIFTS = frozenset([torch.ops.aten.add, torch.ops.aten.sub, torch.ops.aten._to_copy, torch.ops.aten.clone])

OP_RECORD_FIELDS: tuple[str, ...] = (
    "op_index", "phase", "op", "module", "table", "dtype", "shape", "flops", "read_bytes", "write_bytes",
    "estimated", "unpriced", "gemm_aligned",
)
_NO_ALIAS_CHECK = frozenset([torch.ops.aten._cudnn_rnn])
"""Ops whose meta kernel returns an input as an extra result (``_cudnn_rnn`` returns ``weight_buf``):
recorded as work, not taken for views."""


def storage_key(t: torch.Tensor) -> int:
    """An identity of ``t``'s storage, shared by all views of it (the StorageImpl address)."""
    return t.untyped_storage()._cdata


class StepRecorder(TorchDispatchMode):
    """Records the ATen ops of a training step (see the module docstring).

    Args:
        module_names: ``id(module) -> qualified name`` for the model's modules.
        param_names: ``storage_key -> parameter name`` for the model's parameters.
        static_storages: storage keys that exist before the step (parameters, buffers, inputs,
            optimizer state); they are not counted as memory the step allocates.

    Attributes filled while tracing: ``records`` (column lists, :data:`OP_RECORD_FIELDS`),
    ``lookups`` (table name -> index elements looked up in the forward, a broadcast index counted
    once), ``position_lookups`` (the part whose indices are position-like: a model buffer or the
    result of ``arange``), ``dense_uses`` (parameter names used by
    any op other than a row look-up), ``view_ops``, ``host_ops``, memory ``events``
    (``(op_index, allocation_id, delta_bytes)``; an allocation id numbers each storage the step
    creates, since storage addresses are reused).
    """

    def __init__(self, module_names: dict[int, str], param_names: dict[int, str], static_storages: set[int],
                 buffer_storages: set[int] | None = None):
        super().__init__()
        self.module_names = module_names
        self.param_names = param_names
        self.owner_names: dict[int, str] = dict(param_names)
        self.static = set(static_storages)
        self.phase = "forward"
        self.records: dict[str, list[Any]] = {f: [] for f in OP_RECORD_FIELDS}
        self.op_index = 0
        self.view_ops = 0
        self.host_ops = 0
        self.phase_ops: dict[str, int] = defaultdict(int)
        self.lookups: dict[str, int] = defaultdict(int)
        self.position_lookups: dict[str, int] = defaultdict(int)
        self._positional: set[int] = set(buffer_storages or ())
        self.lookup_row_bytes: dict[str, int] = {}
        self.dense_uses: set[str] = set()
        self.sparse_tables: dict[str, float] = {}
        self.sparse_grads: dict[int, int] = {}
        self._node_info: dict[int, tuple[str, str | None]] = {}
        self._stack: list[str] = [""]
        self._hooks: list[Any] = []
        # live memory
        self.live: dict[int, tuple[int, int]] = {}
        self.live_bytes = 0
        self._next_alloc = 0
        self.events: list[tuple[int, int, int]] = []
        self._finalizers: list[weakref.finalize] = []
        self._tracking = True
        self._cacheable: dict[Any, bool] = {}
        self._meta_cache: dict[Any, Any] = {}
        self._composite: dict[Any, bool] = {}

    # -- module attribution ---------------------------------------------------------------------
    def install_module_hooks(self) -> None:
        """Follow the running module with global forward pre/post hooks (removed by
        :meth:`remove_module_hooks`)."""
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        def pre(mod: torch.nn.Module, _args: Any) -> None:
            self._stack.append(self.module_names.get(id(mod), type(mod).__name__))

        def post(_mod: torch.nn.Module, _args: Any, _out: Any) -> None:
            if len(self._stack) > 1:
                self._stack.pop()

        self._hooks = [register_module_forward_pre_hook(pre), register_module_forward_hook(post, always_call=True)]

    def remove_module_hooks(self) -> None:
        """Remove the hooks of :meth:`install_module_hooks`."""
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def _current_module(self, tensors: list[torch.Tensor]) -> tuple[str, str | None]:
        if self.phase == "forward":
            return self._stack[-1], None
        if self.phase == "backward":
            node = torch._C._current_autograd_node()
            if node is not None:
                return self._node_info.get(node._sequence_nr(), ("", None))
            return "", None
        for t in tensors:
            name = self.owner_names.get(storage_key(t))
            if name is not None:
                return name, None
        return "", None

    def add_owners(self, owners: dict[int, str]) -> None:
        """Attribute more storages (parameters, gradients, optimizer state) to a module name for
        the optimizer phase."""
        self.owner_names.update(owners)

    # -- memory ---------------------------------------------------------------------------------
    def _allocate(self, t: torch.Tensor, nbytes: int | None = None) -> None:
        s = t.untyped_storage()
        key = s._cdata
        if key in self.static or key in self.live:
            return
        n = s.nbytes() if nbytes is None else nbytes
        alloc = self._next_alloc
        self._next_alloc += 1
        self.live[key] = (alloc, n)
        self.live_bytes += n
        self.events.append((self.op_index, alloc, n))
        self._finalizers.append(weakref.finalize(s, self._free, key))

    def _free(self, key: int) -> None:
        if not self._tracking:
            return
        hit = self.live.pop(key, None)
        self.sparse_grads.pop(key, None)  # the address may be reused by the next storage
        self._positional.discard(key)
        if hit is not None:
            self.live_bytes -= hit[1]
            self.events.append((self.op_index, hit[0], -hit[1]))

    def allocation_of(self, t: torch.Tensor) -> int | None:
        """The allocation id of ``t``'s storage if the step allocated it and it is still live."""
        hit = self.live.get(storage_key(t))
        return None if hit is None else hit[0]

    def stop_tracking(self) -> None:
        """Stop following memory and drop the storage finalizers."""
        self._tracking = False
        for f in self._finalizers:
            f.detach()
        self._finalizers.clear()

    # -- the dispatch hook ----------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self._decomposes(func):
            # Under torch.inference_mode() the autograd keys are skipped, so composite ops (linear,
            # conv2d, matmul...) reach this mode whole; run their decomposition here so that their
            # kernels (addmm, convolution, bmm...) are recorded as under no_grad.
            with self:
                r = func.decompose(*args, **kwargs)
            if r is not NotImplemented:
                return r
        out = self._meta_call(func, args, kwargs)
        inputs = tensors_in(args) + tensors_in(kwargs)
        outputs = tensors_in(out)
        if not any(t.is_meta for t in inputs) and not any(t.is_meta for t in outputs):
            self.host_ops += 1  # host-side bookkeeping on CPU scalars (e.g. an optimizer's step count)
            return out
        mutable = func._schema.is_mutable
        if func.is_view or (not mutable and outputs and func.overloadpacket not in _NO_ALIAS_CHECK
                            and _aliases(outputs, inputs)):
            self.view_ops += 1
            return out
        packet = func.overloadpacket
        if mutable:
            written = _written_args(func, args, kwargs)
            read, _ = op_bytes(func, args, kwargs, written)
            write = sum(tensor_bytes(t) for t in written)
        else:
            read, write = op_bytes(func, args, kwargs, outputs)
        flops = op_flops(func, args, kwargs, out, outputs)
        module, table = self._current_module(inputs)
        alloc_bytes: int | None = None

        if self.phase == "forward":
            if packet in EMBEDDING_LOOKUP_OPS:
                table = self.param_names.get(storage_key(args[0]))
                if table is not None:
                    n = distinct_elements(args[1])
                    self.lookups[table] += n
                    if storage_key(args[1]) in self._positional:
                        self.position_lookups[table] += n
                    weight = args[0]
                    self.lookup_row_bytes[table] = weight.element_size() * (weight.shape[-1] if weight.dim() > 1 else 1)
            for i, t in enumerate(inputs):
                name = self.param_names.get(storage_key(t))
                if name is not None and not (table == name and i == 0):
                    self.dense_uses.add(name)
            if torch.is_grad_enabled():
                self._node_info.setdefault(torch._C._autograd._get_sequence_nr() - 1, (module, table))
        elif self.phase == "backward" and packet in EMBEDDING_BACKWARD_OPS and table in self.sparse_tables:
            # a sparse table's gradient is the touched rows only (IndexedSlices / sparse COO)
            alloc_bytes = int(self.sparse_tables[table] * self.lookup_row_bytes.get(table, 0))
            write = alloc_bytes
            for t in outputs:
                self.sparse_grads[storage_key(t)] = alloc_bytes
        elif self.phase == "backward" and self.sparse_grads:
            sizes = [self.sparse_grads.get(storage_key(t)) for t in inputs]
            if any(n is not None for n in sizes) and outputs:
                # accumulating the gradients of a table looked up more than once: sparse gradients
                # are concatenated (rows of each look-up), not summed as dense tables
                sparse_in = sum(n for n in sizes if n is not None)
                full = tensor_bytes(outputs[0])
                read = sparse_in + sum(tensor_bytes(t) for t, n in zip(inputs, sizes, strict=True) if n is None)
                alloc_bytes = write = min(sparse_in, full)
                flops = write / max(1, outputs[0].element_size())
                for t in outputs:
                    self.sparse_grads[storage_key(t)] = alloc_bytes

        if packet is aten_arange or (packet in _SHIFTS and inputs and storage_key(inputs[0]) in self._positional
                                     and len(inputs) == 1):
            # position-like indices: an arange, shifted by a number or copied (e.g. arange(S) + offset)
            self._positional.update(storage_key(t) for t in outputs)
        rec = self.records
        rec["op_index"].append(self.op_index)
        rec["phase"].append(self.phase)
        rec["op"].append(str(packet))
        rec["module"].append(module)
        rec["table"].append(table)
        first = outputs[0] if outputs else (inputs[0] if inputs else None)
        rec["dtype"].append(str(first.dtype).removeprefix("torch.") if first is not None else "")
        rec["shape"].append("x".join(map(str, first.shape)) if first is not None else "")
        rec["flops"].append(flops)
        rec["read_bytes"].append(read)
        rec["write_bytes"].append(write)
        rec["estimated"].append(False)
        rec["unpriced"].append(is_unpriced(packet))
        rec["gemm_aligned"].append(gemm_aligned(func, args, outputs))
        self.phase_ops[self.phase] += 1
        if self._tracking:
            for t in outputs:
                if t.is_meta:
                    self._allocate(t, alloc_bytes)
        self.op_index += 1
        return out


    def _decomposes(self, func: Any) -> bool:
        hit = self._composite.get(func)
        if hit is None:
            hit = self._composite[func] = torch._C._dispatch_has_kernel_for_dispatch_key(
                func.name(), "CompositeImplicitAutograd")
        return hit

    # -- memoised meta kernels ---------------------------------------------------------------------
    def _meta_call(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """``func(*args, **kwargs)``, memoised on the argument metadata.

        Most meta kernels are Python reference implementations (about 0.5 ms per call); a model
        repeats the same ops on the same shapes layer after layer, so the result's metadata is
        cached per (op, argument shapes, strides, dtypes, other arguments) and rebuilt with
        ``empty_strided``. Only ops whose results are fresh tensors (functional, no views, no
        data-dependent shapes) or that return their mutated first argument (plain in-place ops)
        are cached.
        """
        ok = self._cacheable.get(func)
        if ok is None:
            ok = self._cacheable[func] = _cacheable(func)
        if not ok:
            return func(*args, **kwargs)
        key = _meta_key((func, args, kwargs))
        if key is None:
            return func(*args, **kwargs)
        template = self._meta_cache.get(key)
        if template is not None:
            return _instantiate(template, args)
        out = func(*args, **kwargs)
        fresh = [t for t in tensors_in(out) if not (args and t is args[0])]
        if fresh and _aliases(fresh, tensors_in(args) + tensors_in(kwargs)):
            self._cacheable[func] = False  # aliases without saying so in its schema (e.g. _unsafe_view)
            return out
        template = _template(out, args)
        if template is not None:
            self._meta_cache[key] = template
        return out


_SCALAR_TYPES = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


def _meta_key(obj: Any) -> Any:
    """A hashable description of ``obj``'s metadata, or None if it holds something unknown."""
    if isinstance(obj, torch.Tensor):
        if not obj.is_meta:
            return None
        return (tuple(obj.shape), obj.stride(), obj.dtype)
    if isinstance(obj, _SCALAR_TYPES):
        return (type(obj), obj)
    if isinstance(obj, list | tuple):
        parts = []
        for x in obj:
            k = _meta_key(x)
            if k is None and x is not None:
                return None
            parts.append(k)
        return (type(obj), tuple(parts))
    if isinstance(obj, dict):
        parts = []
        for name, x in obj.items():
            k = _meta_key(x)
            if k is None and x is not None:
                return None
            parts.append((name, k))
        return ("dict", tuple(parts))
    if callable(obj) and hasattr(obj, "_schema"):
        return obj
    return None


def _cacheable(func: Any) -> bool:
    tags = set(func.tags)
    if func.is_view or tags & {torch.Tag.inplace_view, torch.Tag.dynamic_output_shape,
                               torch.Tag.data_dependent_output}:
        return False
    schema = func._schema
    written = [a for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    if not written:
        return all(r.alias_info is None for r in schema.returns)
    first = schema.arguments[0] if schema.arguments else None
    return (len(written) == 1 and written[0] is not None and first is not None and written[0].name == first.name
            and torch.Tag.inplace in tags and len(schema.returns) == 1
            and schema.returns[0].alias_info is not None and not func.name().endswith(("resize_", "set_")))


def _template(out: Any, args: tuple) -> Any:
    if isinstance(out, torch.Tensor):
        if args and out is args[0]:
            return ("self",)
        if not out.is_meta:
            return None
        return ("tensor", tuple(out.shape), out.stride(), out.dtype)
    if isinstance(out, list | tuple):
        parts = [_template(x, args) for x in out]
        if any(p is None for p, x in zip(parts, out, strict=True) if x is not None):
            return None
        return (type(out), parts)
    if isinstance(out, int | float | bool) or out is None:
        return ("value", out)
    return None


def _instantiate(template: Any, args: tuple) -> Any:
    kind = template[0]
    if kind == "tensor":
        return torch.empty_strided(template[1], template[2], dtype=template[3], device="meta")
    if kind == "self":
        return args[0]
    if kind == "value":
        return template[1]
    return kind(_instantiate(t, args) if t is not None else None for t in template[1])


def _aliases(outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> bool:
    keys = {storage_key(t) for t in inputs if t.is_meta}
    return any(t.is_meta and storage_key(t) in keys for t in outputs)


def _written_args(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors a mutating op writes (schema arguments marked ``(a!)``)."""
    written: list[torch.Tensor] = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        written.extend(tensors_in(value))
    return written


# -- automatic mixed precision and fused attention ----------------------------------------------
def _names(*objs: Any) -> list[Any]:
    return [o for o in objs if o is not None]


T = torch.Tensor
LOWER_PRECISION_CALLS: frozenset[Any] = frozenset(_names(
    torch.matmul, T.matmul, T.__matmul__, T.__rmatmul__, torch.mm, T.mm, torch.bmm, T.bmm, torch.addmm, T.addmm,
    torch.baddbmm, T.baddbmm, torch.addbmm, T.addbmm, torch.mv, T.mv, torch.addmv, T.addmv, torch.addr, T.addr,
    torch.einsum, torch.chain_matmul, torch.linalg.multi_dot, torch.linalg.vecdot, F.linear, F.bilinear,
    torch.conv1d, torch.conv2d, torch.conv3d, torch.conv_transpose1d, torch.conv_transpose2d,
    torch.conv_transpose3d, torch.conv_tbc, torch.prelu, F.prelu, torch.lstm_cell, torch.gru_cell,
    torch.rnn_tanh_cell, torch.rnn_relu_cell, F.scaled_dot_product_attention,
))
"""Calls CUDA autocast runs in 16 bit (PyTorch AMP docs, "CUDA Ops that can autocast to float16")."""

FP32_CALLS: frozenset[Any] = frozenset(_names(
    torch.acos, torch.asin, torch.cosh, torch.erfinv, torch.exp, T.exp, torch.expm1, torch.log, T.log,
    torch.log10, torch.log2, torch.log1p, torch.reciprocal, T.reciprocal, torch.rsqrt, T.rsqrt, torch.sinh,
    torch.tan, torch.pow, T.pow, T.__pow__, T.__rpow__, T.__rtruediv__, torch.softmax, T.softmax, F.softmax,
    F.softmin, torch.log_softmax, T.log_softmax, F.log_softmax, torch.cumprod, T.cumprod, torch.cumsum,
    T.cumsum, torch.dist, torch.cdist, torch.pdist, torch.sum, T.sum, torch.prod, T.prod, torch.norm, T.norm,
    torch.renorm, F.layer_norm, torch.layer_norm, F.group_norm, torch.group_norm, F.normalize,
    F.cosine_similarity, F.cross_entropy, F.nll_loss, F.mse_loss, F.l1_loss, F.smooth_l1_loss, F.huber_loss,
    F.kl_div, F.binary_cross_entropy_with_logits, F.poisson_nll_loss, F.margin_ranking_loss,
    F.hinge_embedding_loss, F.soft_margin_loss, F.multilabel_margin_loss, F.multi_margin_loss,
    F.triplet_margin_loss, F.cosine_embedding_loss, F.softplus, F.ctc_loss,
))
"""Calls CUDA autocast runs in FP32 (PyTorch AMP docs, "CUDA Ops that can autocast to float32")."""

_SDPA = F.scaled_dot_product_attention


def _unguarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of a Python-level ``torch.nn.functional`` function whose own ``__torch_function__``
    check is off, so a function mode sees the calls inside it (used for
    ``multi_head_attention_forward``, which a mode would otherwise see only as a whole)."""
    namespace = dict(fn.__globals__)
    for name in ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic"):
        namespace[name] = lambda *_a, **_k: False
    copy = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


class StepFunctionMode(TorchFunctionMode):
    """AMP casts (``amp_dtype`` float16/bfloat16, or None for none) and fused attention.

    Casting follows CUDA autocast: floating tensors other than float64 are cast to the call's
    precision; a parameter (leaf requiring grad) is cast once per forward and the copy reused
    (autocast's weight-cast cache), so its gradient returns to FP32 through one cast in the
    backward. Active during the forward only, as ``torch.autocast`` is in PyTorch's AMP recipe.
    """

    def __init__(self, amp_dtype: torch.dtype | None, fused_attention: bool):
        super().__init__()
        self.amp_dtype = amp_dtype
        self.fused_attention = fused_attention
        self._cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._mha = _unguarded(F.multi_head_attention_forward)

    def clear_cache(self) -> None:
        """Drop the per-forward weight-cast cache (``torch.autocast`` does so on exit)."""
        self._cache.clear()

    def _cast(self, obj: Any, dtype: torch.dtype) -> Any:
        if isinstance(obj, torch.Tensor):
            if not obj.is_floating_point() or obj.dtype in (dtype, torch.float64):
                return obj
            if obj.is_leaf and obj.requires_grad:
                hit = self._cache.get(id(obj))
                if hit is None or hit[1].dtype != dtype:
                    hit = (obj, obj.to(dtype))
                    self._cache[id(obj)] = hit
                return hit[1]
            return obj.to(dtype)
        if isinstance(obj, list | tuple):
            return type(obj)(self._cast(x, dtype) for x in obj)
        return obj

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.multi_head_attention_forward:
            with self:
                return self._mha(*args, **kwargs)
        if self.amp_dtype is not None:
            if func in LOWER_PRECISION_CALLS:
                args = self._cast(args, self.amp_dtype)
                kwargs = {k: self._cast(v, self.amp_dtype) for k, v in kwargs.items()}
            elif func in FP32_CALLS:
                args = self._cast(args, torch.float32)
                kwargs = {k: self._cast(v, torch.float32) for k, v in kwargs.items()}
        if func is _SDPA:
            if self.fused_attention:
                return fused_attention(*args, **kwargs)
            with self:  # each call of the unfused path is seen, and cast, by this mode
                return eager_attention(*args, **kwargs)
        if func is torch.lstm_cell:
            out = fused_lstm_cell(*args, **kwargs)
            if out is not None:
                return out
        if func in _RNN_MODES:
            out = fused_rnn(func, args, kwargs, self.amp_dtype, self._cast)
            if out is not None:
                return out
        if func is F.dropout:
            return fused_dropout(*args, **kwargs)
        return func(*args, **kwargs)


def fused_dropout(input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
    """``F.dropout`` as a CUDA device runs it: one ``native_dropout`` kernel that reads the input
    and writes the output and a boolean mask (``aten::dropout`` takes this fused path on CUDA for
    ``0 < p < 1``; on the meta device it would decompose into ``bernoulli_``, ``div_`` and ``mul``
    with a full-precision mask). In-place dropout and other cases keep ``F.dropout``."""
    if training and 0.0 < p < 1.0 and not inplace and input.numel() > 0:
        return torch.native_dropout(input, p, True)[0]
    return F.dropout(input, p, training, inplace)


def _match_kv_heads(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    enable_gqa: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(key, value)`` with their heads (dimension -3) repeated to the query's under grouped-query
    attention (Ainslie et al., EMNLP 2023; SDPA's ``enable_gqa``); unchanged where they match or have
    no head dimension.

    Raises:
        RuntimeError: head counts that ``enable_gqa`` cannot reconcile.
    """
    if key.dim() < 3 or key.size(-3) == query.size(-3):
        return key, value
    if not enable_gqa or query.size(-3) % key.size(-3):
        raise RuntimeError(f"scaled_dot_product_attention: {query.size(-3)} query heads vs {key.size(-3)} key heads")
    rep = query.size(-3) // key.size(-3)
    return key.repeat_interleave(rep, dim=-3), value.repeat_interleave(rep, dim=-3)


def fused_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False,
) -> torch.Tensor:
    """``scaled_dot_product_attention`` through ``aten._scaled_dot_product_efficient_attention``,
    the fused kernel (Rabe and Staats, "Self-attention does not need O(n^2) memory", 2021; the
    xFormers/FlashAttention family) that a CUDA GPU runs: Q, K, V, the optional bias and the output
    move through memory, the ``L x S`` score matrix does not.

    Shapes: ``query (B, H, L, E)``, ``key``/``value`` ``(B, H_kv, S, E)``; 3-D inputs get a head
    dimension. A boolean mask becomes an additive bias (as PyTorch's own SDPA does). Unsupported
    combinations (more than 4 dimensions, a mask together with ``is_causal``) fall back to the
    math path. Returns ``(B, H, L, E_v)`` (or 3-D for 3-D input).
    """
    if query.dim() not in (3, 4) or key.dim() != query.dim() or (is_causal and attn_mask is not None):
        return _SDPA(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                     scale=scale, enable_gqa=enable_gqa)
    squeeze = query.dim() == 3
    if squeeze:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
    key, value = _match_kv_heads(query, key, value, enable_gqa)
    bias = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            bias = torch.zeros(attn_mask.shape, dtype=query.dtype, device=query.device).masked_fill_(
                attn_mask.logical_not(), float("-inf"))
        else:
            bias = attn_mask if attn_mask.dtype == query.dtype else attn_mask.to(query.dtype)
        while bias.dim() < 4:
            bias = bias.unsqueeze(0)
        bias = bias.expand(query.size(0), query.size(1), query.size(2), key.size(2))
    need_lse = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad)
    out = torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, bias, need_lse, dropout_p, is_causal, scale=scale)[0]
    return out.squeeze(1) if squeeze else out


def eager_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False,
) -> torch.Tensor:
    """``scaled_dot_product_attention`` as unfused eager code writes it (the ``math`` attention):
    ``softmax(Q K^T x scale + mask)``, dropout, times ``V``, one call each, the ``L x S`` scores
    written and read between them. This is the sequence of NVIDIA DeepLearningExamples' BERT
    (``modeling.py``, ``BertSelfAttention.forward``: ``torch.matmul``, scale, mask add,
    ``F.softmax``, dropout, ``torch.matmul``) and of Hugging Face's ``eager`` attention. Called
    inside :class:`StepFunctionMode`, each call is cast as CUDA autocast casts it (the matmuls in
    16 bit, the softmax in FP32). PyTorch's own math kernel differs: it upcasts 16-bit inputs to
    FP32 throughout unless ``allow_fp16_bf16_reduction_math_sdp`` is set.

    Shapes: ``query (..., L, E)``, ``key (..., S, E)``, ``value (..., S, E_v)``; ``enable_gqa``
    repeats the key/value heads (dimension -3) to the query's. Returns ``(..., L, E_v)``.

    Raises:
        RuntimeError: query and key head counts that ``enable_gqa`` cannot reconcile.
    """
    key, value = _match_kv_heads(query, key, value, enable_gqa)
    factor = scale if scale is not None else query.size(-1) ** -0.5
    scores = torch.matmul(query, key.transpose(-2, -1)) * factor
    if is_causal:
        keep = torch.ones(query.size(-2), key.size(-2), dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(keep.logical_not(), float("-inf"))
    if attn_mask is not None:
        scores = (scores.masked_fill(attn_mask.logical_not(), float("-inf")) if attn_mask.dtype == torch.bool
                  else scores + attn_mask)
    probs = F.softmax(scores, dim=-1)
    if dropout_p > 0.0:
        probs = fused_dropout(probs, dropout_p, True)
    return torch.matmul(probs, value)


# -- recurrent layers as cuDNN runs them --------------------------------------------------------
_RNN_MODES: dict[Any, int] = {torch.rnn_relu: 0, torch.rnn_tanh: 1, torch.lstm: 2, torch.gru: 3}
"""``torch._VF`` calls of ``nn.RNN``/``nn.LSTM``/``nn.GRU`` -> cuDNN mode (``cudnnRNNMode_t``)."""
_RNN_LIB: torch.library.Library | None = None


def _register_rnn_backward_meta() -> None:
    """A meta kernel for ``aten::_cudnn_rnn_backward``, which PyTorch lacks (``_cudnn_rnn`` has one):
    gradients shaped like ``input``, ``hx``, ``cx`` and each weight, the ones ``output_mask`` leaves
    out empty (cuDNN returns undefined tensors for them)."""
    global _RNN_LIB
    if _RNN_LIB is not None or torch._C._dispatch_has_kernel_for_dispatch_key("aten::_cudnn_rnn_backward", "Meta"):
        return
    lib = torch.library.Library("aten", "IMPL")

    def backward(input, weight, weight_stride0, weight_buf, hx, cx, output, grad_output, grad_hy, grad_cy, mode,
                 hidden_size, proj_size, num_layers, batch_first, dropout, train, bidirectional, batch_sizes,
                 dropout_state, reserve, output_mask):
        empty = input.new_empty(0)
        return (input.new_empty(input.shape) if output_mask[0] else empty,
                hx.new_empty(hx.shape) if output_mask[1] else empty,
                cx.new_empty(cx.shape) if cx is not None and output_mask[2] else empty,
                [w.new_empty(w.shape) for w in weight] if output_mask[3] else [])

    lib.impl("_cudnn_rnn_backward", backward, "Meta")
    _RNN_LIB = lib


def fused_rnn(func: Any, args: tuple, kwargs: dict, amp_dtype: torch.dtype | None,
              cast: Callable[[Any, torch.dtype], Any]) -> Any:
    """``torch.lstm``/``gru``/``rnn_tanh``/``rnn_relu`` (what ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN``
    call) as a CUDA device runs them: one ``aten._cudnn_rnn`` call for all layers and time steps
    (forward) and one ``aten._cudnn_rnn_backward`` (the backward), priced by
    :func:`ddlscope.profile.costs.rnn_macs`, instead of the per-time-step ``mm``/element-wise ops
    the meta device's composite implementation would run. Under AMP the inputs and weights run in
    ``amp_dtype``, as PyTorch's cuDNN RNN autocast does (``aten/src/ATen/cudnn/AutocastRNN.cpp``).

    Handles the padded (``.input``) overload: ``lstm(input, (h0, c0), params, has_biases, num_layers,
    dropout, train, bidirectional, batch_first)``, ``gru/rnn_*(input, h0, params, ...)``. Returns
    ``(output, h_n, c_n)`` for LSTM, ``(output, h_n)`` otherwise; None (the caller runs the original)
    for packed sequences, LSTMs with projections, keyword calls or non-meta tensors.
    """
    if kwargs or len(args) != 9 or not isinstance(args[2], list | tuple):
        return None
    mode = _RNN_MODES[func]
    x, hx, params = args[0], args[1], list(args[2])
    has_biases, num_layers, dropout, train, bidirectional, batch_first = args[3:9]
    if mode == 2:
        if not (isinstance(hx, list | tuple) and len(hx) == 2):
            return None
        h0, c0 = hx
    else:
        h0, c0 = hx, None
    per = 4 if has_biases else 2
    dirs = 2 if bidirectional else 1
    if not isinstance(x, torch.Tensor) or not x.is_meta or x.dim() != 3 or len(params) != num_layers * dirs * per:
        return None
    if amp_dtype is not None:
        x, h0, params = cast(x, amp_dtype), cast(h0, amp_dtype), cast(params, amp_dtype)
        c0 = cast(c0, amp_dtype) if c0 is not None else None
    _register_rnn_backward_meta()
    out, hy, cy, _reserve, _buf = torch.ops.aten._cudnn_rnn(
        x, list(params), per, x.new_empty(0), h0, c0, mode, h0.shape[-1], 0, num_layers, batch_first,
        float(dropout), bool(train), bool(bidirectional), [], None)
    return (out, hy, cy) if mode == 2 else (out, hy)


def fused_lstm_cell(input: torch.Tensor, hx: Any, w_ih: torch.Tensor, w_hh: torch.Tensor,
                    b_ih: torch.Tensor | None = None, b_hh: torch.Tensor | None = None) -> Any:
    """``torch.lstm_cell`` (``nn.LSTMCell``) as a CUDA device runs it (``aten/src/ATen/native/RNN.cpp``,
    ``LSTMCell`` with CUDA tensors): the two gate matmuls ``x W_ih^T`` and ``h W_hh^T``, then one
    fused element-wise kernel ``aten._thnn_fused_lstm_cell`` (biases, gate non-linearities, cell and
    hidden updates) and its one backward kernel, instead of the dozen element-wise ops of the meta
    device's composite path. Returns ``(h', c')``; None (the caller runs the original) without biases
    or for other argument forms."""
    if b_ih is None or b_hh is None or not isinstance(hx, list | tuple) or len(hx) != 2 or not input.is_meta:
        return None
    h, c = hx
    hy, cy, _ = torch.ops.aten._thnn_fused_lstm_cell(F.linear(input, w_ih), F.linear(h, w_hh), c, b_ih, b_hh)
    return hy, cy


@contextlib.contextmanager
def rnn_autocast_check(active: bool) -> Iterator[None]:
    """While ``active``, make ``nn.LSTM``/``nn.GRU``'s input check see autocast as enabled
    (``torch._C._is_any_autocast_enabled``, the one eager use of that flag, ``torch/nn/modules/rnn.py``):
    under CUDA autocast an RNN accepts a 16-bit input with FP32 weights, as our AMP emulation gives it."""
    if not active:
        yield
        return
    original = torch._C._is_any_autocast_enabled
    torch._C._is_any_autocast_enabled = lambda: True
    try:
        yield
    finally:
        torch._C._is_any_autocast_enabled = original
