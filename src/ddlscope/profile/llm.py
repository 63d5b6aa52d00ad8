r"""Decoder-only LLM workloads from a model configuration, without weights: an analytic op table of
one training micro-batch (forward + backward), one layer's ops repeated for every layer, and the
:class:`~ddlscope.specs.workload.Workload` totals it sums to.

A config is a :class:`DecoderConfig`: layers ``L``, hidden ``h``, heads ``a``, key/value heads
``a_kv`` (grouped-query attention; ``a`` without), head size ``d = h / a``, MLP hidden ``f``
(gated MLPs, SwiGLU, have three projections), vocabulary ``V``, sequence ``s``.
:meth:`DecoderConfig.from_hf` reads Hugging Face configs (Llama/Mistral, GPT-NeoX, GPT-2, MPT);
:func:`mpt_configs` the MPT shapes of ``../shared/data/llm_foundry_mpt/mpt_model_shapes.csv``.

Per micro-batch of ``b`` sequences, ``T = b s`` tokens, per layer (FLOPs = 2 per multiply-add):

- GEMMs (compute-bound): QKV ``2 T h (h + 2 a_kv d)``, attention output ``2 T h^2``, MLP
  ``2 T h f`` per projection (2, or 3 when gated). Backward: two GEMMs of the forward's FLOPs each
  (input and weight gradient).
- attention: ``4 T s h`` forward (``QK^T`` and ``PV``), halved by the causal mask where flash
  attention skips the masked blocks (``causal_skip``) (Dao, "FlashAttention-2", 2023, sec. 3.1;
  FlashAttention v1 skips them too: flash-attn 1.x ``fmha_fprop_kernel_1xN.h`` starts each key
  block's loop at the diagonal under ``Is_causal``); backward 2.5x the forward (five matrix
  products to the forward's two, same paper, sec. 3.1.2). The op is ``ddlscope.flash_attention``
  (FlashAttention-2) or ``ddlscope.flash_attention_v1`` (``flash_attention_version = 1``), priced
  at the attention-kernel efficiencies of :class:`~ddlscope.specs.efficiency.ComputeEfficiency`.
  Without flash attention the scores are materialised: ``+ 2 b a s^2`` 16-bit elements written and
  read for the softmax (memory-bound), and the mask halves nothing.
- ``unpad_tokens`` (llm-foundry's ``flash_attn_fn``: ``bert_padding.unpad_input`` gathers the
  query, key and value tokens into the variable-length kernel's packed layout and ``pad_input``
  scatters the output back): forward, each gather reads and writes its tensor (``2 x (T h + 2 T
  a_kv d)`` elements) and the pad writes zeros and scatters (``3 T h``); backward, the gathers'
  gradients are zero-filled scatters (``3 x (T h + 2 T a_kv d)``) and the pad's a gather
  (``2 T h``); 16-bit elements, memory-bound, per layer.
- memory-bound (16-bit activations, bytes read + written): two layer norms ``2 x 2 T h x 2``, two
  residual adds ``3 T h x 2`` each, the activation ``2 T f x 2`` (gated: ``3 T f x 2``); the
  backward moves twice the forward's bytes.
- once per micro-batch: the embedding look-up ``T h x 2``, a final layer norm, the LM head GEMM
  ``2 T h V`` (backward 2x) and the cross-entropy. PyTorch's (default): autocast runs
  ``cross_entropy`` in FP32 (PyTorch "Automatic Mixed Precision" op reference: ``log_softmax``,
  ``nll_loss`` and ``cross_entropy`` autocast to float32), so the 16-bit logits are cast (``T V``
  read at 2 bytes, written at 4), ``log_softmax`` moves ``3 T V x 4`` bytes forward and its
  backward as much, ``nll_loss``'s backward writes the ``T V`` FP32 gradient (4 bytes each) and the
  cast's backward converts it back (4 + 2 bytes). ``fused_cross_entropy`` (flash-attn's
  ``CrossEntropyLoss``, llm-foundry's default ``loss_fn: fused_crossentropy``): one kernel reads the
  16-bit logits twice (maximum, then the exponential sum) forward and the backward reads them and
  writes their 16-bit gradient, ``2 x 2`` bytes per logit each way.
- mixture of experts (``num_experts`` ``E`` > 1, top-``k`` routing, every layer's MLP an MoE
  block, as Mixtral): the router GEMM ``2 T h E``; each projection of the ``E`` experts (size
  ``f``, gated as configured) runs on the ``T k`` routed token copies, ``2 T k h f`` FLOPs per
  projection, its weights read for all ``E`` experts (``E h f x 2`` bytes, priced as one grouped
  GEMM); the activation on ``T k`` tokens; the token permutation before the experts and the
  weighted un-permutation after, ``2 x 2 T k h x 2`` bytes (read and write) forward, twice that
  backward. Parameters count all ``E`` experts and the router (``h E``); FLOPs per token count the
  ``k`` active experts (:attr:`DecoderConfig.active_params`). Load balance is assumed perfect
  (capacity factor 1, no dropped tokens). Our reconstruction (Fedus et al., "Switch Transformers",
  JMLR 2022; Jiang et al., "Mixtral of Experts", 2024).
- activation recomputation: ``full`` runs every layer's forward again in the backward (its FLOPs
  and bytes, the "4 instead of 3" of llm-foundry's HFU); ``selective`` recomputes only the
  attention core (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
  Models", 2022).

The sums match the standard accounting: ``6 N T`` for the GEMMs plus ``12 L h s T`` for attention
(Narayanan et al., SC 2021, eq. 3; llm-foundry's MFU) with ``N`` the parameters, less the causal
half where flash attention applies. The optimizer step is left out (once per gradient-accumulation
window, on the GPU's shard: under 2 % of a step of the shapes here).

Memory (bytes per replica, :attr:`~ddlscope.specs.workload.Workload.peak_memory_bytes`): the
unsharded Adam state of :func:`ddlscope.model.sharded.unsharded_state_bytes` plus activations,
Korthikanti et al. 2022, eq. 2: ``s b h (34 + 5 a s / h)`` bytes per layer (``34 s b h`` with flash
attention, which keeps no scores), ``2 s b h`` per layer with full recomputation plus one layer's
full activations, ``34 s b h`` with selective; plus the logits ``4 T V x 2`` (FP32 logits and
their gradient; ``2 T V x 2`` with ``fused_cross_entropy``, which keeps them in 16 bit). A mixture
of experts keeps the MLP's ``19 s b h`` (Korthikanti's MLP share of the
34) for each of the ``k`` copies of a token: ``34 + 19 (k - 1)`` (our reconstruction).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Literal

import polars as pl
from pydantic import BaseModel, Field, model_validator

from ddlscope.model.compute import GEMM_ALIGNMENT_BYTES
from ddlscope.model.sharded import unsharded_state_bytes
from ddlscope.specs.base import SPEC_CONFIG
from ddlscope.specs.workload import Workload

Recompute = Literal["none", "selective", "full"]
ACT_BYTES = 2.0
"""Bytes of a 16-bit activation element."""

MIXTRAL_8X7B: dict[str, Any] = {
    "_name_or_path": "mistralai/Mixtral-8x7B-v0.1", "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral", "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "num_attention_heads": 32, "num_experts_per_tok": 2,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": None, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 32000,
}
"""The Hugging Face ``config.json`` of Mixtral-8x7B (``mistralai/Mixtral-8x7B-v0.1``; the keys the
shape reads and their published values): 32 layers, hidden 4096, 32 heads, 8 key/value heads, 8
SwiGLU experts of 14336, top-2, vocabulary 32000, untied embeddings. ``DecoderConfig.from_hf``
gives 46,702,792,704 parameters, 12,879,925,248 active per token (Mistral AI, "Mixtral of
experts", 2023: 46.7B total, 12.9B per token)."""
LLAMA_2_70B: dict[str, Any] = {
    "_name_or_path": "meta-llama/Llama-2-70b-hf", "architectures": ["LlamaForCausalLM"],
    "model_type": "llama", "hidden_act": "silu", "hidden_size": 8192, "intermediate_size": 28672,
    "max_position_embeddings": 4096, "num_attention_heads": 64, "num_hidden_layers": 80,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "torch_dtype": "float16",
    "vocab_size": 32000,
}
"""The Hugging Face ``config.json`` of Llama-2-70B (``meta-llama/Llama-2-70b-hf``; the keys the shape
reads and their published values): 80 layers, hidden 8192, 64 heads, 8 key/value heads (grouped-query
attention), SwiGLU MLP of 28672, vocabulary 32000, untied embeddings. ``DecoderConfig.from_hf`` gives
68,976,648,192 parameters, the count of Meta's Llama 2 model card."""
BUILTIN_CONFIGS: dict[str, dict[str, Any]] = {"mixtral-8x7b": MIXTRAL_8X7B, "llama-2-70b": LLAMA_2_70B}
"""Hugging Face configs known by name (``ddlscope plan mixtral-8x7b``, ``ddlscope plan llama-2-70b``)."""


class DecoderConfig(BaseModel):
    """The shape of a decoder-only transformer (no weights).

    Fields: ``name``; ``layers``, ``hidden``, ``heads`` (>= 1, ``hidden`` divisible by ``heads``);
    ``kv_heads`` (grouped-query attention, dividing ``heads``; ``None`` = ``heads``);
    ``ffn_hidden`` (``None`` = 4 x hidden); ``gated_mlp`` (SwiGLU: three projections);
    ``vocab``; ``seq_len``; ``tied_embeddings`` (the LM head reuses the embedding);
    ``flash_attention``; ``flash_attention_version`` (2: FlashAttention-2, flash-attn 2.x and
    PyTorch's SDPA flash kernel; 1: FlashAttention v1, flash-attn 1.x, the PyTorch 1.13-era
    stacks); ``causal_skip`` (flash attention skips the blocks the causal mask hides, halving the
    attention work, as both versions do; false: the kernel does the full ``s x s`` work);
    ``unpad_tokens`` (the attention packs the tokens for a variable-length kernel and unpacks the
    output, as llm-foundry's ``flash_attn_fn`` does: module docstring); ``fused_cross_entropy``
    (the loss is flash-attn's fused kernel on 16-bit logits rather than PyTorch's FP32
    ``cross_entropy``); ``norm_bias`` (layer norms with a bias: GPT-2, GPT-NeoX; Llama's RMSNorm
    and MPT's ``no_bias`` norms have a weight only); ``num_experts`` (mixture of experts: every
    layer's MLP is ``num_experts`` experts of ``ffn_hidden``, plus a router of ``hidden x
    num_experts``; 1 = dense) and ``experts_per_token`` (top-k routing, ``1 <= k <=
    num_experts``; 1 for a dense model).

    Raises:
        pydantic.ValidationError: a count < 1, heads not dividing hidden, kv_heads not dividing
            heads or experts_per_token above num_experts, naming the field.
    """

    model_config = SPEC_CONFIG

    name: str = "decoder"
    layers: int = Field(..., ge=1)
    hidden: int = Field(..., ge=1)
    heads: int = Field(..., ge=1)
    kv_heads: int | None = Field(None, ge=1)
    ffn_hidden: int | None = Field(None, ge=1)
    gated_mlp: bool = False
    vocab: int = Field(..., ge=1)
    seq_len: int = Field(..., ge=1)
    tied_embeddings: bool = True
    flash_attention: bool = True
    flash_attention_version: Literal[1, 2] = 2
    causal_skip: bool = True
    unpad_tokens: bool = False
    fused_cross_entropy: bool = False
    norm_bias: bool = False
    num_experts: int = Field(1, ge=1)
    experts_per_token: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _shapes(self) -> DecoderConfig:
        if self.hidden % self.heads:
            raise ValueError(f"heads: expected a divisor of hidden = {self.hidden}, got {self.heads}")
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(f"kv_heads: expected a divisor of heads = {self.heads}, got {self.kv_heads}")
        if self.experts_per_token > self.num_experts:
            raise ValueError(f"experts_per_token: expected <= num_experts = {self.num_experts}, got "
                             f"{self.experts_per_token}")
        return self

    @property
    def moe(self) -> bool:
        """A mixture of experts (``num_experts`` > 1)."""
        return self.num_experts > 1

    @property
    def ffn(self) -> int:
        """MLP hidden size ``f``."""
        return self.ffn_hidden or 4 * self.hidden

    @property
    def kv(self) -> int:
        """Key/value heads ``a_kv``."""
        return self.kv_heads or self.heads

    def _params(self, experts: int) -> float:
        h, d = self.hidden, self.hidden // self.heads
        attn = h * (h + 2 * self.kv * d) + h * h
        mlp = experts * (3 if self.gated_mlp else 2) * h * self.ffn
        router = h * self.num_experts if self.moe else 0
        norm = (2 if self.norm_bias else 1) * h
        per_layer = attn + mlp + router + 2 * norm
        emb = self.vocab * h * (1 if self.tied_embeddings else 2)
        return float(self.layers * per_layer + emb + norm)

    @property
    def num_params(self) -> float:
        """Parameters: per layer ``h (h + 2 a_kv d) + h^2`` attention, ``(2 or 3) h f`` MLP (times
        ``E`` experts, plus the router's ``h E``, in a mixture of experts), two norms of ``h``
        (``2 h`` with ``norm_bias``); ``V h`` embedding (twice untied), the final norm. Biases of
        the projections are left out (MPT, Llama and Mixtral have none). Llama-2-7B's config gives
        6,738,415,616 and Llama-2-70B's 68,976,648,192, their published counts; Mixtral-8x7B's
        46,702,792,704 ("46.7B", Mistral AI)."""
        return self._params(self.num_experts)

    @property
    def active_params(self) -> float:
        """Parameters a token passes through: :attr:`num_params` with the ``k`` routed experts only
        (the router counted); the dense count for a dense model. Mixtral-8x7B: 12,879,925,248
        ("12.9B active", Mistral AI)."""
        return self._params(self.experts_per_token) if self.moe else self.num_params

    @property
    def expert_params(self) -> float:
        """Parameters in the experts of all layers (``L E (2 or 3) h f``; 0 for a dense model):
        what expert parallelism splits (:mod:`ddlscope.model.pipeline`)."""
        return float(self.layers * self.num_experts * (3 if self.gated_mlp else 2) * self.hidden * self.ffn) \
            if self.moe else 0.0

    @classmethod
    def from_hf(cls, config: dict[str, Any], *, seq_len: int | None = None, name: str | None = None) -> DecoderConfig:
        """From a Hugging Face ``config.json`` dict: Llama/Mistral (``num_hidden_layers``,
        ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``, ``intermediate_size``,
        gated), GPT-NeoX (same keys, ``hidden_act`` gelu: not gated), GPT-2 (``n_layer``,
        ``n_embd``, ``n_head``, ``n_inner``) and MPT (``n_layers``, ``d_model``, ``n_heads``,
        ``expansion_ratio``, ``max_seq_len``); Mixtral adds ``num_local_experts`` and
        ``num_experts_per_tok`` (:data:`MIXTRAL_8X7B`).

        Raises:
            ValueError: a key the shape needs is missing (naming the keys looked for).
        """
        def get(*keys: str, default: Any = None) -> Any:
            for k in keys:
                if config.get(k) is not None:
                    return config[k]
            if default is not None:
                return default
            raise ValueError(f"config: none of {list(keys)} given; expected a decoder config "
                             "(Llama, GPT-NeoX, GPT-2 or MPT keys)")

        hidden = int(get("hidden_size", "n_embd", "d_model"))
        act = str(config.get("hidden_act", config.get("activation_function", "gelu"))).lower()
        ffn = config.get("intermediate_size") or config.get("n_inner")
        if ffn is None and config.get("expansion_ratio") is not None:
            ffn = int(config["expansion_ratio"] * hidden)
        attn_cfg = config.get("attn_config") or {}
        return cls(
            name=name or str(config.get("_name_or_path") or config.get("model_type") or "decoder"),
            layers=int(get("num_hidden_layers", "n_layer", "n_layers")),
            hidden=hidden,
            heads=int(get("num_attention_heads", "n_head", "n_heads")),
            kv_heads=config.get("num_key_value_heads") or attn_cfg.get("kv_n_heads"),
            ffn_hidden=int(ffn) if ffn else None,
            gated_mlp=act in ("silu", "swiglu", "swish") and "intermediate_size" in config,
            num_experts=int(config.get("num_local_experts") or 1),
            experts_per_token=int(config.get("num_experts_per_tok") or 1) if config.get("num_local_experts") else 1,
            vocab=int(get("vocab_size")),
            seq_len=int(get("max_position_embeddings", "n_positions", "max_seq_len") if seq_len is None else seq_len),
            tied_embeddings=bool(config.get("tie_word_embeddings", config.get("model_type") in ("gpt2", "mpt"))),
            norm_bias=config.get("model_type") in ("gpt2", "gpt_neox"),
            flash_attention=str(attn_cfg.get("attn_impl", "flash")) in ("flash", "triton")
            if attn_cfg else True,
        )


def mpt_configs(path: str | Path, seq_len: int = 2048, causal_skip: bool = True,
                flash_attention_version: Literal[1, 2] = 2) -> dict[str, DecoderConfig]:
    """The MPT shapes of llm-foundry's pretraining YAMLs (``mpt_model_shapes.csv``: ``model``,
    ``d_model``, ``n_heads``, ``n_layers``, ``expansion_ratio``, ``vocab_size``, ``attn_impl``,
    ``kv_n_heads``), keyed by size (``125m`` ... ``70b``); tied embeddings, GELU MLP, and as
    llm-foundry trains them: ``attn_impl: flash`` through ``flash_attn_fn``, which unpads the tokens
    (``unpad_tokens``), and the fused cross-entropy (``fused_cross_entropy``; llm-foundry's
    ``ComposerMPTCausalLM`` default ``loss_fn: fused_crossentropy``). ``flash_attention_version``:
    the flash-attn release of the run (1 for llm-foundry's 2023 stack, which pinned
    ``flash-attn==1.0.3.post0``; 2 today).

    Raises:
        FileNotFoundError: no such file; ValueError: a row with a missing or non-numeric field
            (naming the line).
    """
    out: dict[str, DecoderConfig] = {}
    with open(path, newline="") as fh:
        for line, row in enumerate(csv.DictReader(fh), start=2):
            try:
                out[row["model"]] = DecoderConfig(
                    name=f"mpt-{row['model']}", layers=int(row["n_layers"]), hidden=int(row["d_model"]),
                    heads=int(row["n_heads"]), kv_heads=int(row["kv_n_heads"]) if row.get("kv_n_heads") else None,
                    ffn_hidden=int(float(row["expansion_ratio"]) * int(row["d_model"])), vocab=int(row["vocab_size"]),
                    seq_len=seq_len, tied_embeddings=True, flash_attention=row["attn_impl"] in ("flash", "triton"),
                    flash_attention_version=flash_attention_version, causal_skip=causal_skip,
                    unpad_tokens=row["attn_impl"] == "flash", fused_cross_entropy=True)
            except (KeyError, ValueError, TypeError) as exc:
                raise ValueError(f"{path}:{line}: {exc}") from None
    return out


def _ops(cfg: DecoderConfig, batch: int, recompute: Recompute, dtype: str) -> list[dict[str, Any]]:
    """The op rows of one micro-batch (module docstring), one layer's block repeated ``L`` times."""
    b, s, h, V, L = batch, cfg.seq_len, cfg.hidden, cfg.vocab, cfg.layers
    T = b * s
    d = h // cfg.heads
    f = cfg.ffn
    e = ACT_BYTES
    rows: list[dict[str, Any]] = []

    def gemm(phase: str, op: str, module: str, m: int, n: int, k: int, weights: int = 1) -> None:
        total = e * (m * k + k * n + m * n) if weights == 1 else e * (m * k + weights * k * n + m * n)
        # cuBLAS's vectorised tensor-core kernels need 16-byte-aligned leading dimensions (m, n and k
        # are each one in the forward or a backward GEMM): a vocabulary of odd size is not (GPT-2's 50,257)
        aligned = all((x * e) % GEMM_ALIGNMENT_BYTES == 0 for x in (m, n, k))
        rows.append({"phase": phase, "op": op, "module": module, "dtype": dtype, "flops": 2.0 * m * n * k,
                     "total_bytes": total, "class_by_type": "compute_bound", "gemm_aligned": aligned})

    def mem(phase: str, op: str, module: str, nbytes: float) -> None:
        rows.append({"phase": phase, "op": op, "module": module, "dtype": dtype, "flops": 0.0,
                     "total_bytes": float(nbytes), "class_by_type": "memory_bound"})

    qkv = h + 2 * cfg.kv * d
    causal = 0.5 if cfg.flash_attention and cfg.causal_skip else 1.0
    attn_fwd = 4.0 * T * s * h * causal
    attn_bytes = e * 4 * T * h  # q, k, v read, output written (flash: no scores in memory)
    scores = e * 2 * b * cfg.heads * s * s * 2.0  # written by QK^T, read/written by softmax (no flash)
    proj = [("qkv", h, qkv), ("attn_out", h, h)] + (
        [("mlp_gate", h, f), ("mlp_up", h, f), ("mlp_down", f, h)] if cfg.gated_mlp
        else [("mlp_up", h, f), ("mlp_down", f, h)])
    E, top = cfg.num_experts, cfg.experts_per_token
    Tk = T * top  # routed token copies (T for a dense model)
    mlp = {"mlp_gate", "mlp_up", "mlp_down"}
    act_bytes = e * (3 if cfg.gated_mlp else 2) * Tk * f
    permute = e * 2 * Tk * h * 2  # MoE: permute + un-permute, each reads and writes T k h elements
    flash = "ddlscope.flash_attention" + ("_v1" if cfg.flash_attention_version == 1 else "")
    unpad = cfg.flash_attention and cfg.unpad_tokens
    qkv_elems = T * h + 2 * T * cfg.kv * d

    def layer_forward(phase: str, i: int, core_only: bool = False) -> None:
        mod = f"layers.{i}"
        if unpad:
            mem(phase, "flash_attn.unpad_input", f"{mod}.attn", e * 2 * qkv_elems)
        rows.append({"phase": phase, "op": flash if cfg.flash_attention else "aten.bmm",
                     "module": f"{mod}.attn", "dtype": dtype, "flops": attn_fwd, "total_bytes": attn_bytes,
                     "class_by_type": "compute_bound"})
        if unpad:
            mem(phase, "flash_attn.pad_input", f"{mod}.attn", e * 3 * T * h)
        if not cfg.flash_attention:
            mem(phase, "aten._softmax", f"{mod}.attn", scores)
        if core_only:
            return
        if not cfg.moe:
            for name, k, n in proj:
                gemm(phase, "aten.mm", f"{mod}.{name}", T, n, k)
        else:
            for name, k, n in proj:
                if name in mlp:
                    gemm(phase, "aten.mm", f"{mod}.experts.{name}", Tk, n, k, weights=E)
                else:
                    gemm(phase, "aten.mm", f"{mod}.{name}", T, n, k)
            gemm(phase, "aten.mm", f"{mod}.router", T, E, h)
            mem(phase, "moe.permute", f"{mod}.experts", permute)
        mem(phase, "aten.native_layer_norm", f"{mod}.norm_1", e * 2 * T * h)
        mem(phase, "aten.native_layer_norm", f"{mod}.norm_2", e * 2 * T * h)
        mem(phase, "aten.add", f"{mod}.residual", e * 3 * T * h * 2)
        mem(phase, "aten.gelu" if not cfg.gated_mlp else "aten.silu_mul", f"{mod}.act", act_bytes)

    # forward
    mem("forward", "aten.embedding", "wte", e * T * h)
    for i in range(L):
        layer_forward("forward", i)
    mem("forward", "aten.native_layer_norm", "norm_f", e * 2 * T * h)
    gemm("forward", "aten.mm", "lm_head", T, V, h)
    if cfg.fused_cross_entropy:
        mem("forward", "flash_attn.cross_entropy", "loss", e * 2 * T * V)
    else:
        mem("forward", "aten._to_copy", "loss", (e + 4.0) * T * V)
        mem("forward", "aten._log_softmax", "loss", 4.0 * 3 * T * V)
    # backward (reverse order), with the recomputed forward of each layer first
    if cfg.fused_cross_entropy:
        mem("backward", "flash_attn.cross_entropy_backward", "loss", e * 2 * T * V)
    else:
        mem("backward", "aten.nll_loss_backward", "loss", 4.0 * T * V)
        mem("backward", "aten._log_softmax_backward_data", "loss", 4.0 * 3 * T * V)
        mem("backward", "aten._to_copy", "loss", (4.0 + e) * T * V)
    gemm("backward", "aten.mm", "lm_head", T, h, V)
    gemm("backward", "aten.mm", "lm_head", h, V, T)
    mem("backward", "aten.native_layer_norm_backward", "norm_f", 2 * e * 2 * T * h)
    for i in reversed(range(L)):
        mod = f"layers.{i}"
        if recompute != "none":
            layer_forward("backward", i, core_only=recompute == "selective")
        if unpad:
            mem("backward", "flash_attn.pad_input_backward", f"{mod}.attn", e * 2 * T * h)
        rows.append({"phase": "backward", "op": f"{flash}_backward" if cfg.flash_attention
                     else "aten.bmm", "module": f"{mod}.attn", "dtype": dtype, "flops": 2.5 * attn_fwd,
                     "total_bytes": 2 * attn_bytes, "class_by_type": "compute_bound"})
        if unpad:
            mem("backward", "flash_attn.unpad_input_backward", f"{mod}.attn", e * 3 * qkv_elems)
        if not cfg.flash_attention:
            mem("backward", "aten._softmax_backward_data", f"{mod}.attn", scores)
        if not cfg.moe:
            for name, k, n in proj:
                gemm("backward", "aten.mm", f"{mod}.{name}", T, k, n)  # input gradient
                gemm("backward", "aten.mm", f"{mod}.{name}", k, n, T)  # weight gradient
        else:
            for name, k, n in proj:
                if name in mlp:
                    gemm("backward", "aten.mm", f"{mod}.experts.{name}", Tk, k, n, weights=E)
                    gemm("backward", "aten.mm", f"{mod}.experts.{name}", k, n, Tk, weights=E)
                else:
                    gemm("backward", "aten.mm", f"{mod}.{name}", T, k, n)
                    gemm("backward", "aten.mm", f"{mod}.{name}", k, n, T)
            gemm("backward", "aten.mm", f"{mod}.router", T, h, E)
            gemm("backward", "aten.mm", f"{mod}.router", h, E, T)
            mem("backward", "moe.permute_backward", f"{mod}.experts", 2 * permute)
        mem("backward", "aten.native_layer_norm_backward", f"{mod}.norm_1", 2 * e * 2 * T * h)
        mem("backward", "aten.native_layer_norm_backward", f"{mod}.norm_2", 2 * e * 2 * T * h)
        mem("backward", "aten.add", f"{mod}.residual", 2 * e * 3 * T * h * 2)
        mem("backward", "aten.gelu_backward" if not cfg.gated_mlp else "aten.silu_mul_backward", f"{mod}.act",
            2 * act_bytes)
    mem("backward", "aten.embedding_dense_backward", "wte", e * T * h * 2)
    return rows


def decoder_op_table(cfg: DecoderConfig, micro_batch: int, *, precision: str = "bf16",
                     recompute: Recompute = "none") -> pl.DataFrame:
    """The op table of one training micro-batch (columns ``phase``, ``op``, ``module``, ``dtype``,
    ``flops``, ``total_bytes``, ``class_by_type``, ``gemm_aligned`` (null for the rows that are not
    matrix multiplies; :func:`ddlscope.profile.costs.gemm_aligned`): what :func:`ddlscope.model.compute.price_jobs`
    reads), module docstring's formulas.

    Raises:
        ValueError: ``micro_batch`` < 1, an unknown ``recompute`` or a precision other than
            ``fp16``/``bf16`` (the formulas count 16-bit activations).
    """
    if micro_batch < 1:
        raise ValueError(f"micro_batch: expected >= 1 sequence, got {micro_batch}")
    if recompute not in ("none", "selective", "full"):
        raise ValueError(f"recompute: expected none, selective or full, got {recompute!r}")
    if precision not in ("fp16", "bf16"):
        raise ValueError(f"precision: expected fp16 or bf16 (16-bit activations), got {precision!r}")
    dtype = "bfloat16" if precision == "bf16" else "float16"
    schema = {"phase": pl.String, "op": pl.String, "module": pl.String, "dtype": pl.String, "flops": pl.Float64,
              "total_bytes": pl.Float64, "class_by_type": pl.String, "gemm_aligned": pl.Boolean}
    return pl.DataFrame(_ops(cfg, micro_batch, recompute, dtype), schema=schema)


def activation_bytes(cfg: DecoderConfig, micro_batch: int, recompute: Recompute = "none") -> float:
    """Activation memory of one micro-batch on one GPU (bytes; Korthikanti et al. 2022, eq. 2, no
    tensor parallelism; module docstring)."""
    s, b, h, a, L = cfg.seq_len, micro_batch, cfg.hidden, cfg.heads, cfg.layers
    base = 34.0 if not cfg.moe else 34.0 + 19.0 * (cfg.experts_per_token - 1)
    per_layer = s * b * h * (base + (0 if cfg.flash_attention else 5 * a * s / h))
    logits = (ACT_BYTES if cfg.fused_cross_entropy else 4.0) * s * b * cfg.vocab * 2
    if recompute == "full":
        return L * 2.0 * s * b * h + per_layer + logits
    if recompute == "selective":
        return L * base * s * b * h + logits
    return L * per_layer + logits


def flops_per_token_mfu(cfg: DecoderConfig, num_params: float | None = None) -> float:
    """Model FLOPs per token as llm-foundry's MFU counts them: ``6 N + 12 L h s`` (no causal
    discount, no recomputation; ``N`` = ``num_params`` or :attr:`DecoderConfig.active_params`, the
    parameters a token passes through: all of them for a dense model)."""
    n = cfg.active_params if num_params is None else num_params
    return 6.0 * n + 12.0 * cfg.layers * cfg.hidden * cfg.seq_len


def decoder_workload(cfg: DecoderConfig, micro_batch: int, *, precision: str = "bf16",
                     recompute: Recompute = "none", grad_bytes_per_param: float = 4.0,
                     name: str | None = None) -> tuple[Workload, pl.DataFrame]:
    """The per-replica demand of one training micro-batch of ``cfg`` and its op table.

    ``grad_bytes_per_param``: bytes per parameter of the reduced gradients (4: FP32 reduction,
    PyTorch FSDP's ``MixedPrecision`` with ``reduce_dtype=float32``, llm-foundry's ``DEFAULT``; 2:
    ``PURE`` bf16). ``num_gradient_tensors`` = ``L + 1``: one FSDP unit per block plus the root
    (embedding, final norm), as llm-foundry wraps an MPT. ``batch_size`` = ``micro_batch``
    sequences. A mixture of experts also sets ``num_experts``, ``experts_per_token`` and
    ``expert_params`` (what ``3d``'s expert parallelism reads).

    Returns:
        ``(workload, ops)``; ``workload.name`` = ``name`` or ``"<cfg.name>/mb<b>/<recompute>"``
        (the key :func:`ddlscope.model.compute.price_jobs` matches op tables by).

    Raises:
        ValueError: as :func:`decoder_op_table`.
    """
    ops = decoder_op_table(cfg, micro_batch, precision=precision, recompute=recompute)
    n = cfg.num_params
    gemm = ops.filter(pl.col("class_by_type") == "compute_bound")
    grads = grad_bytes_per_param * n
    w = Workload(
        name=name or f"{cfg.name}/mb{micro_batch}/{recompute}",
        batch_size=micro_batch,
        precision=precision,  # type: ignore[arg-type]
        compute_bound_flops=float(gemm["flops"].sum()),
        memory_bound_bytes=float(ops.filter(pl.col("class_by_type") == "memory_bound")["total_bytes"].sum()),
        input_bytes=8.0 * micro_batch * cfg.seq_len,  # int64 token ids
        dense_param_bytes=grads,
        num_gradient_tensors=cfg.layers + 1,
        num_params=n,
        num_layers=cfg.layers,
        layer_activation_bytes=ACT_BYTES * micro_batch * cfg.seq_len * cfg.hidden,
        layer_kv_bytes=ACT_BYTES * 2 * micro_batch * cfg.seq_len * cfg.kv * (cfg.hidden // cfg.heads),
        **({"num_experts": cfg.num_experts, "experts_per_token": cfg.experts_per_token,
            "expert_params": cfg.expert_params} if cfg.moe else {}),
        peak_memory_bytes=unsharded_state_bytes(n, grads, precision) + activation_bytes(cfg, micro_batch, recompute),
        source=f"ddlscope.profile.llm analytic decoder ({cfg.layers} layers, hidden {cfg.hidden}, seq {cfg.seq_len})",
    )
    return w, ops
