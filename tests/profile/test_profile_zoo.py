"""The zoo against published sizes and FLOP counts (sources cited per test)."""

from __future__ import annotations

import pytest
import torch

from ddlscope.profile import ZOO, profile_model
from ddlscope.profile.costs import expected_unique_rows
from ddlscope.profile.zoo.recsys import CRITEO_KAGGLE_TABLE_ROWS


def _params(name: str, **sizes: int) -> int:
    with torch.device("meta"):
        model, _ = ZOO[name].factory(**ZOO[name].sizes(**sizes))
    return sum(p.numel() for p in model.parameters())


def test_resnet_parameter_counts():
    # torchvision model documentation (ResNet50_Weights.IMAGENET1K_V1 / ResNet18_Weights): 25,557,032
    # and 11,689,512 parameters at 1000 classes; He et al. 2016 give "25.6 M" for ResNet-50
    assert _params("resnet50") == 25_557_032
    assert _params("resnet18") == 11_689_512
    assert _params("resnet18_cifar") == 11_173_962  # kuangliu/pytorch-cifar ResNet18
    # NeuMF on ml-1m, 32 factors, 3 layers: embeddings (6040 + 3706) x (32 + 128) = 1,559,360; MLP
    # 256*128+128 + 128*64+64 + 64*32+32 = 43,232; prediction 64 + 1 = 65
    assert _params("ncf") == 1_559_360 + 43_232 + 65


def test_resnet50_forward_macs_per_image():
    # torchvision docs list 4.09 GFLOPS (multiply-adds) for ResNet-50 at 224 x 224 (He et al. 2016,
    # Table 1: 3.8e9 for v1; v1.5's strided 3x3 adds ~0.3e9). Our matmul-class forward FLOPs / 2
    # per image must be within 3 %.
    r = profile_model("resnet50", batch_size=2, image_size=224)
    fwd = r.ops.filter((r.ops["phase"] == "forward") & (r.ops["class_by_type"] == "compute_bound"))
    macs_per_image = fwd["flops"].sum() / 2 / 2
    assert macs_per_image == pytest.approx(4.09e9, rel=0.03)
    # training: the backward computes input and weight gradients (2x forward) except the input
    # gradient of the first convolution (the image needs none): 3 x forward - conv1's forward
    conv1 = fwd.filter(fwd["module"] == "conv1")["flops"].sum()
    assert r.totals["compute_bound_flops"] == pytest.approx(3 * fwd["flops"].sum() - conv1, rel=1e-9)


def test_resnet18_forward_macs_per_image():
    # torchvision docs: ResNet-18 1.81 GFLOPS (multiply-adds) at 224 x 224
    r = profile_model("resnet18", batch_size=1)
    fwd = r.ops.filter((r.ops["phase"] == "forward") & (r.ops["class_by_type"] == "compute_bound"))
    assert fwd["flops"].sum() / 2 == pytest.approx(1.81e9, rel=0.03)


def test_bert_and_gpt2_parameter_counts():
    # Devlin et al., NAACL 2019, sec. 3: BERT-base 110 M, BERT-large 340 M parameters
    assert _params("bert_base") == pytest.approx(110e6, rel=0.03)
    assert _params("bert_large") == pytest.approx(340e6, rel=0.03)
    # OpenAI's released GPT-2 small, "124M": 124,439,808 with the tied LM head
    assert _params("gpt2") == 124_439_808


def test_transformer_nmt_parameter_count():
    # shared embedding 37,000 x 512; encoder layer 4 x 512^2 + 4 x 512 (attention) + 2 x 512 x 2048 + 2048
    # + 512 (FFN) + 2 x 2 x 512 (layer norms) = 3,152,384; decoder layer adds a cross-attention block and
    # a layer norm: 4,204,032; plus the final encoder and decoder layer norms 2 x 1,024
    expected = 37_000 * 512 + 6 * 3_152_384 + 6 * 4_204_032 + 2 * 1_024
    assert _params("transformer_nmt") == expected == 63_084_544
    # Vaswani et al. 2017, Table 3: "65 M" for the base model (within 3 %)
    assert expected == pytest.approx(65e6, rel=0.03)


def _megatron_flops(b: int, s: int, layers: int, h: int, vocab: int, attention_factor: float) -> float:
    """Training FLOPs of a transformer with FFN 4h (Narayanan et al., SC 2021, sec. 5.1, without
    activation recomputation): 72 B s l h^2 (1 + s/(6h) + V/(12 l h)). The three terms: 24 h^2 FLOPs per
    token and layer for the QKV, output and FFN matmuls (6 N T with N = 12 l h^2), the attention
    matmuls Q K^T and A V (4 s h per token and layer, x3 for training: 12 B s^2 l h), and the LM head
    (6 B s h V). ``attention_factor`` scales the attention term: 1 for the math path, 14/12 for the
    fused kernel whose backward recomputes Q K^T (5 matmuls instead of 4; Dao et al. 2022)."""
    return 72 * b * s * layers * h * h * (1 + s / (6 * h) * attention_factor + vocab / (12 * layers * h))


@pytest.mark.parametrize(("attention", "factor"), [("math", 1.0), ("fused", 14 / 12)])
def test_bert_base_training_flops(attention, factor):
    b, s, layers, h, vocab = 2, 128, 12, 768, 30_522
    r = profile_model("bert_base", batch_size=b, seq_len=s, attention=attention)
    # BertForPreTraining adds the MLM transform (h x h on every token, 6 B s h^2), the pooler (h x h on
    # the [CLS] token, 6 B h^2) and the next-sentence classifier (h x 2, 6 B h 2)
    expected = _megatron_flops(b, s, layers, h, vocab, factor) + 6 * b * s * h * h + 6 * b * h * h + 12 * b * h
    assert r.totals["compute_bound_flops"] == pytest.approx(expected, rel=0.03)
    # position ids come from a model buffer (0..127): 128 distinct rows of the 512-row position table;
    # the two token types are input-driven: 2 (1 - (1/2)^256) = 2 rows
    pos = r.params.filter(r.params["name"] == "bert.embeddings.position_embeddings.weight").row(0, named=True)
    assert (pos["kind"], pos["position_lookups_per_step"], pos["rows_touched_per_step"]) == ("sparse", s, s)
    if attention == "math":
        # the rule of thumb 6 N T (N = all 110.1 M parameters, T = B s tokens; Kaplan et al. 2020,
        # sec. 2.1) plus the attention term 12 B s^2 l h, within 3 %
        n = _params("bert_base")
        assert r.totals["compute_bound_flops"] == pytest.approx(6 * n * b * s + 12 * b * s * s * layers * h, rel=0.03)


@pytest.mark.parametrize(("attention", "factor"), [("math", 1.0), ("fused", 14 / 12)])
def test_gpt2_training_flops(attention, factor):
    b, s, layers, h, vocab = 1, 1024, 12, 768, 50_257
    r = profile_model("gpt2", batch_size=b, seq_len=s, attention=attention)
    assert r.totals["compute_bound_flops"] == pytest.approx(_megatron_flops(b, s, layers, h, vocab, factor), rel=0.03)
    if attention == "math":
        # 6 N T + attention: 6 x 124,439,808 x 1,024 + 12 x 1,024^2 x 12 x 768 = 8.806e11
        assert r.totals["compute_bound_flops"] == pytest.approx(6 * 124_439_808 * 1024 + 12 * 1024**2 * 12 * 768,
                                                                rel=0.03)
    # the tied token embedding is also the LM head: dense; the position table is only looked up: sparse,
    # and its indices are arange(1024): all 1024 rows of 768 FP32 are touched
    assert r.totals["embedding_table_bytes"] == 1024 * 768 * 4
    assert r.totals["dense_param_bytes"] == (124_439_808 - 1024 * 768) * 4
    assert r.totals["sparse_bytes_per_step"] == pytest.approx(1024 * 768 * 4)


def test_dlrm_tables():
    b = 128
    r = profile_model("dlrm", batch_size=b)
    t = r.totals
    # 26 Criteo Kaggle tables, 33,762,577 rows of 16 FP32
    assert sum(CRITEO_KAGGLE_TABLE_ROWS) == 33_762_577
    assert t["embedding_tables"] == 26 and t["embedding_table_bytes"] == 33_762_577 * 16 * 4
    # one look-up per table per sample; a 3-row table is touched fully, 3 (1 - (2/3)^128) = 3.0
    assert t["sparse_lookups_per_step"] == 26 * b
    expected = sum(expected_unique_rows(n, b) for n in CRITEO_KAGGLE_TABLE_ROWS) * 16 * 4
    assert t["sparse_bytes_per_step"] == pytest.approx(expected, rel=1e-9)
    assert expected_unique_rows(3, b) == pytest.approx(3.0)
    # dense MLPs: bottom 13-512-256-64-16, top 367-512-256-1 (367 = 16 + 27 x 26 / 2), weights and biases
    bottom = 13 * 512 + 512 + 512 * 256 + 256 + 256 * 64 + 64 + 64 * 16 + 16
    top = 367 * 512 + 512 + 512 * 256 + 256 + 256 + 1
    assert t["dense_params"] == bottom + top
    assert r.workload.dense_param_bytes == (bottom + top) * 4 and r.workload.num_gradient_tensors == 14


def test_gcn_message_passing_flops():
    n = 1_000
    r = profile_model("gcn_reddit", batch_size=n)
    e = round(n * 114_615_892 / 232_965) + n  # Reddit's mean degree plus a self-loop per node
    fwd = r.ops.filter(r.ops["phase"] == "forward")
    # transforms: 2 N (602 x 128 + 128 x 41) FLOPs; aggregation: per edge and feature one multiply
    # (edge weight) and one add (scatter): 2 E (128 + 41)
    cb = fwd.filter(fwd["class_by_type"] == "compute_bound")["flops"].sum()
    assert cb == 2 * n * (602 * 128 + 128 * 41)
    gather = fwd.filter(fwd["op"] == "aten.index_select")
    assert gather["write_bytes"].sum() == e * (128 + 41) * 4
    scatter = fwd.filter(fwd["op"] == "aten.index_add_")["flops"].sum()
    assert scatter == e * (128 + 41)


PROFILED_ABOVE = {"resnet18", "resnet50", "bert_base", "gpt2", "dlrm", "gcn_reddit"}


LAMBDA_MODELS = {"ssd300", "bert_base_squad", "bert_large_squad", "gnmt", "ncf_dle", "tacotron2", "waveglow",
                 "transformer_xl_base", "transformer_xl_large", "transformer_xl_base_softmax",
                 "transformer_xl_large_softmax"}


def test_zoo_names():
    assert set(ZOO) == PROFILED_ABOVE | LAMBDA_MODELS | {
        "transformer_nmt", "bert_large", "mind", "wav2vec2_base", "resnet18_cifar", "ncf", "resnet101", "resnet152",
        "vgg16", "mobilenet_v2", "shufflenet_v2", "transformer_big", "lstm_lm", "deepspeech2", "inception_v3",
        "dcgan"}


@pytest.mark.parametrize("name", sorted(set(ZOO) - PROFILED_ABOVE))
def test_every_other_zoo_model_profiles(name):
    entry = ZOO[name]
    small = {"batch_size": 1000 if name == "gcn_reddit" else 2}
    if entry.seq_len is not None:
        small["seq_len"] = {"wav2vec2_base": 16_000, "deepspeech2": 64}.get(name, 16)
    if entry.image_size is not None:
        small["image_size"] = {"resnet18_cifar": 32, "ssd300": 300, "inception_v3": 299}.get(name, 64)
    if name == "waveglow":
        small["seq_len"] = 512
    r = profile_model(name, **small)
    t = r.totals
    assert t["forward_flops"] > 0 and t["backward_flops"] > t["forward_flops"] * 0.9
    assert t["optimizer_flops"] > 0 and t["memory_bound_bytes"] > 0
    assert r.workload.batch_size == small["batch_size"]
    assert entry.source and entry.description
