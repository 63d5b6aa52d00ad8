"""Decoder LLM workloads from configurations: parameter counts against published ones, FLOPs by hand."""

import polars as pl
import pytest
from pydantic import ValidationError

from ddlscope.profile.llm import (
    BUILTIN_CONFIGS,
    MIXTRAL_8X7B,
    DecoderConfig,
    activation_bytes,
    decoder_op_table,
    decoder_workload,
    flops_per_token_mfu,
    mpt_configs,
)
from ddlscope.shared_data import find_shared_data

LLAMA2_7B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
             "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000, "hidden_act": "silu",
             "max_position_embeddings": 4096, "tie_word_embeddings": False}
LLAMA2_70B = {**LLAMA2_7B, "hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
              "num_hidden_layers": 80, "num_key_value_heads": 8}


def test_hf_configs_give_the_published_parameter_counts():
    # Meta's Llama 2 model card: 7B = 6,738,415,616 and 70B = 68,976,648,192 parameters (grouped-query, gated MLP)
    small, big = DecoderConfig.from_hf(LLAMA2_7B), DecoderConfig.from_hf(LLAMA2_70B)
    assert small.gated_mlp and not small.tied_embeddings and big.kv == 8
    assert small.num_params == 6_738_415_616
    assert big.num_params == 68_976_648_192
    builtin = DecoderConfig.from_hf(BUILTIN_CONFIGS["llama-2-70b"], name="llama-2-70b")  # `plan llama-2-70b`
    assert builtin.num_params == 68_976_648_192 and builtin.kv == 8 and builtin.layers == 80
    with pytest.raises(ValueError, match=r"none of \['vocab_size'\] given"):
        DecoderConfig.from_hf({k: v for k, v in LLAMA2_7B.items() if k != "vocab_size"})
    with pytest.raises(ValidationError, match="kv_heads: expected a divisor of heads"):
        DecoderConfig(layers=1, hidden=64, heads=8, kv_heads=3, vocab=10, seq_len=8)


def test_mpt_shapes_match_llm_foundry_parameter_counts():
    data = find_shared_data()
    if data is None:
        pytest.skip("no shared data")
    folder = data / "llm_foundry_mpt"
    cfgs = mpt_configs(folder / "mpt_model_shapes.csv")
    rows = pl.read_csv(folder / "mpt_training_throughput.csv")
    # every one of the 139 measured rows: our count + the benchmark's biases (11 h per block + the final
    # norm's) + a learned positional embedding of the row's sequence length = its NumParams, exactly
    for r in rows.iter_rows(named=True):
        cfg = cfgs[r["Model"]]
        biases = (11 * cfg.layers + 1) * cfg.hidden
        assert cfg.num_params + biases + r["SeqLen (T)"] * cfg.hidden == r["NumParams"], r


def test_flops_by_hand():
    cfg = DecoderConfig(layers=2, hidden=64, heads=4, vocab=100, seq_len=32, causal_skip=False)
    T = 3 * 32  # micro-batch of 3 sequences
    ops = decoder_op_table(cfg, 3)
    gemm = ops.filter(pl.col("op") == "aten.mm")["flops"].sum()
    # 6 T (L (4 h^2 + 2 h f) + V h): forward 2x, backward 4x the projections and the LM head
    assert gemm == 6 * T * (2 * (4 * 64**2 + 2 * 64 * 256) + 100 * 64)
    attn = ops.filter(pl.col("op").str.contains("flash_attention"))["flops"].sum()
    assert attn == (4 + 10) * 2 * T * 32 * 64  # 4 T s h forward, 2.5x backward, per layer
    skip = decoder_op_table(cfg.model_copy(update={"causal_skip": True}), 3)
    assert skip.filter(pl.col("op").str.contains("flash_attention"))["flops"].sum() == attn / 2
    # full recomputation repeats each layer's forward: + 2 T L (4 h^2 + 2 h f) GEMM FLOPs
    full = decoder_op_table(cfg, 3, recompute="full").filter(pl.col("op") == "aten.mm")["flops"].sum()
    assert full - gemm == 2 * T * 2 * (4 * 64**2 + 2 * 64 * 256)
    # llm-foundry's MFU count: 6 N + 12 L h s per token
    assert flops_per_token_mfu(cfg) == 6 * cfg.num_params + 12 * 2 * 64 * 32
    with pytest.raises(ValueError, match="precision: expected fp16 or bf16"):
        decoder_op_table(cfg, 1, precision="fp32")


def test_flash_v1_unpadding_and_the_two_losses_by_hand():
    cfg = DecoderConfig(layers=2, hidden=64, heads=4, kv_heads=2, vocab=100, seq_len=32)
    T, h, kv_d = 3 * 32, 64, 2 * 16  # micro-batch 3; key/value width a_kv d = 32
    base = decoder_op_table(cfg, 3)
    v1 = decoder_op_table(cfg.model_copy(update={"flash_attention_version": 1}), 3)
    # the same FLOPs under another kernel name (priced at the v1 efficiency, model/compute.py)
    assert set(v1.filter(pl.col("op").str.contains("flash"))["op"]) == {
        "ddlscope.flash_attention_v1", "ddlscope.flash_attention_v1_backward"}
    assert v1["flops"].sum() == base["flops"].sum() and v1["total_bytes"].sum() == base["total_bytes"].sum()
    # unpadding: forward gathers q, k, v (read + write: 2 x (T h + 2 T a_kv d) elements) and pads the
    # output (3 T h); backward scatters (3 x (T h + 2 T a_kv d)) and gathers (2 T h); 2 bytes each, per layer
    unpad = decoder_op_table(cfg.model_copy(update={"unpad_tokens": True}), 3)
    extra = unpad.filter(pl.col("op").str.starts_with("flash_attn."))
    qkv = T * h + 2 * T * kv_d
    assert extra.group_by("op").agg(pl.col("total_bytes").sum()).sort("op").rows() == [
        ("flash_attn.pad_input", 2 * 2 * 3 * T * h), ("flash_attn.pad_input_backward", 2 * 2 * 2 * T * h),
        ("flash_attn.unpad_input", 2 * 2 * 2 * qkv), ("flash_attn.unpad_input_backward", 2 * 2 * 3 * qkv)]
    # full recomputation gathers again in the recomputed forward
    again = decoder_op_table(cfg.model_copy(update={"unpad_tokens": True}), 3, recompute="full")
    assert again.filter(pl.col("op") == "flash_attn.unpad_input")["total_bytes"].sum() == 2 * 2 * 2 * 2 * qkv
    # PyTorch's cross-entropy under autocast: cast to FP32 (2 + 4 bytes per logit), log_softmax
    # 3 x 4 each way, nll_loss backward's 4-byte gradient, the cast back (4 + 2): 34 bytes per logit
    def loss_bytes(ops: pl.DataFrame) -> float:
        return ops.filter(pl.col("module") == "loss")["total_bytes"].sum()
    assert loss_bytes(base) == (6 + 12 + 4 + 12 + 6) * T * 100
    # the fused kernel: reads the 16-bit logits twice forward, reads them and writes the gradient backward
    fused = decoder_op_table(cfg.model_copy(update={"fused_cross_entropy": True}), 3)
    assert loss_bytes(fused) == (4 + 4) * T * 100
    assert activation_bytes(cfg.model_copy(update={"fused_cross_entropy": True}), 3) == \
        activation_bytes(cfg, 3) - 2 * T * 100 * 2  # 16-bit logits and gradient instead of FP32
    with pytest.raises(ValidationError, match="flash_attention_version"):
        DecoderConfig(layers=1, hidden=64, heads=4, vocab=10, seq_len=8, flash_attention_version=3)


def test_mpt_configs_run_as_llm_foundry_trains_them():
    data = find_shared_data()
    if data is None:
        pytest.skip("no shared data")
    shapes = data / "llm_foundry_mpt" / "mpt_model_shapes.csv"
    cfg = mpt_configs(shapes)["7b"]
    assert cfg.unpad_tokens and cfg.fused_cross_entropy and cfg.flash_attention_version == 2 and cfg.causal_skip
    assert mpt_configs(shapes, flash_attention_version=1)["7b"].flash_attention_version == 1


def test_workload_and_memory():
    cfg = DecoderConfig(layers=2, hidden=64, heads=4, vocab=100, seq_len=32)
    w, ops = decoder_workload(cfg, 3, grad_bytes_per_param=4.0)
    assert w.batch_size == 3 and w.num_params == cfg.num_params and w.num_gradient_tensors == 3
    assert w.dense_param_bytes == 4 * cfg.num_params
    assert w.compute_bound_flops == ops.filter(pl.col("class_by_type") == "compute_bound")["flops"].sum()
    # Korthikanti et al. 2022 with flash attention: 34 s b h per layer, + FP32 logits and their gradient
    assert activation_bytes(cfg, 3) == 2 * 34 * 32 * 3 * 64 + 4 * 32 * 3 * 100 * 2
    # without flash attention the scores add 5 a s / h per element
    no_flash = cfg.model_copy(update={"flash_attention": False})
    assert activation_bytes(no_flash, 3) == 2 * 32 * 3 * 64 * (34 + 5 * 4 * 32 / 64) + 4 * 32 * 3 * 100 * 2
    # the replica's peak: unsharded Adam state (2 + 12 bytes per parameter + 4-byte gradients) + activations
    assert w.peak_memory_bytes == pytest.approx(18 * cfg.num_params + activation_bytes(cfg, 3))


def test_analytic_flops_equal_the_meta_device_trace_of_gpt2():
    # the profiler traces Hugging Face's GPT-2 small on the meta device; the analytic op table of the
    # same config (no causal skip: the traced SDPA kernel does the full s x s work) gives its GEMM and
    # attention FLOPs exactly (biases and the positional embedding add no compute-bound FLOPs)
    transformers = pytest.importorskip("transformers")
    from ddlscope.profile import profile_model

    traced = profile_model("gpt2", batch_size=2, seq_len=128, precision="bf16")
    cfg = DecoderConfig.from_hf(transformers.GPT2Config().to_dict(), seq_len=128)
    assert (cfg.layers, cfg.hidden, cfg.heads, cfg.ffn, cfg.vocab) == (12, 768, 12, 3072, 50257)
    assert cfg.tied_embeddings and cfg.norm_bias and not cfg.gated_mlp
    w, _ = decoder_workload(cfg.model_copy(update={"causal_skip": False}), 2)
    assert w.compute_bound_flops == traced.totals["compute_bound_flops"] == 193_973_059_584


def test_mixtral_parameters_by_hand():
    """Mixtral-8x7B (its Hugging Face config): 46.7 B parameters, 12.9 B active per token (Mistral AI,
    "Mixtral of experts", 2023), computed here from the shapes."""
    cfg = DecoderConfig.from_hf(MIXTRAL_8X7B, seq_len=4096)
    assert (cfg.layers, cfg.hidden, cfg.heads, cfg.kv, cfg.ffn, cfg.vocab) == (32, 4096, 32, 8, 14336, 32000)
    assert cfg.gated_mlp and not cfg.tied_embeddings and (cfg.num_experts, cfg.experts_per_token) == (8, 2)
    h, d, f = 4096, 128, 14336
    attn = h * (h + 2 * 8 * d) + h * h      # q + k, v of 8 heads + output: 41,943,040
    expert = 3 * h * f                      # gate, up, down: 176,160,768
    router, norms = h * 8, 2 * h
    emb = 2 * 32000 * h                     # untied embedding and LM head
    total = 32 * (attn + 8 * expert + router + norms) + emb + h
    active = 32 * (attn + 2 * expert + router + norms) + emb + h
    assert (total, active) == (46_702_792_704, 12_879_925_248)
    assert cfg.num_params == total and cfg.active_params == active
    assert cfg.expert_params == 32 * 8 * expert
    assert round(total / 1e9, 1) == 46.7 and round(active / 1e9, 1) == 12.9
    # a dense config: active = all, no experts
    dense = DecoderConfig.from_hf(LLAMA2_7B)
    assert (dense.num_experts, dense.active_params, dense.expert_params) == (1, dense.num_params, 0.0)
    with pytest.raises(ValidationError, match="experts_per_token: expected <= num_experts = 2"):
        DecoderConfig(layers=1, hidden=64, heads=8, vocab=10, seq_len=8, num_experts=2, experts_per_token=3)


def test_moe_flops_and_memory_by_hand():
    # 2 layers, hidden 64, 4 SwiGLU experts of 96, top-2; micro-batch 3 x 32 tokens
    cfg = DecoderConfig(layers=2, hidden=64, heads=4, ffn_hidden=96, gated_mlp=True, vocab=100, seq_len=32,
                        causal_skip=False, num_experts=4, experts_per_token=2)
    T = 3 * 32
    w, ops = decoder_workload(cfg, 3)
    gemm = ops.filter(pl.col("op") == "aten.mm")["flops"].sum()
    # 6 T (L (4 h^2 + k 3 h f + h E) + V h): attention projections, the k routed experts, the router, LM head
    assert gemm == 6 * T * (2 * (4 * 64**2 + 2 * 3 * 64 * 96 + 64 * 4) + 100 * 64)
    # the experts' GEMMs read the weights of all 4 experts: forward up-projection bytes 2 (T k h + E h f + T k f)
    up = ops.filter((pl.col("module") == "layers.0.experts.mlp_up") & (pl.col("phase") == "forward"))
    assert up["total_bytes"].to_list() == [2 * (T * 2 * 64 + 4 * 64 * 96 + T * 2 * 96)]
    # permutation: 2 x (read + write) T k h 16-bit elements forward, twice that backward, per layer
    perm = ops.filter(pl.col("op").str.starts_with("moe.permute"))["total_bytes"].sum()
    assert perm == 2 * 3 * (2 * 2 * T * 2 * 64 * 2)
    # MFU counts the active parameters; the workload carries the experts for EP
    assert flops_per_token_mfu(cfg) == 6 * cfg.active_params + 12 * 2 * 64 * 32
    assert (w.num_experts, w.experts_per_token, w.expert_params) == (4, 2, 2 * 4 * 3 * 64 * 96)
    # activations: the MLP's 19 s b h kept for each of the k copies, 34 + 19 (k - 1) per layer
    assert activation_bytes(cfg, 3) == 2 * (34 + 19) * 32 * 3 * 64 + 4 * 32 * 3 * 100 * 2
    dense, _ = decoder_workload(cfg.model_copy(update={"num_experts": 1, "experts_per_token": 1}), 3)
    assert dense.num_experts is None and dense.expert_params is None


def test_an_odd_vocabulary_makes_the_head_gemms_misaligned():
    # GPT-2's 50,257 words: the head's forward and both backward GEMMs have the vocabulary as a leading
    # dimension (16-bit: 100,514 bytes, not a multiple of 16); padded to 50,304 (nanoGPT's) they align,
    # as do the layers' GEMMs at hidden 64 and 32 tokens
    from ddlscope.profile.llm import DecoderConfig, decoder_op_table

    for vocab, aligned in ((50257, False), (50304, True)):
        ops = decoder_op_table(DecoderConfig(layers=1, hidden=64, heads=4, vocab=vocab, seq_len=32), 1)
        head = ops.filter(pl.col("module") == "lm_head", pl.col("class_by_type") == "compute_bound")
        assert head.height == 3 and head["gemm_aligned"].to_list() == [aligned] * 3
        rest = ops.filter(pl.col("module") != "lm_head", pl.col("op") == "aten.mm")
        assert rest.height > 0 and rest["gemm_aligned"].all()
        assert ops.filter(pl.col("class_by_type") == "memory_bound")["gemm_aligned"].is_null().all()
