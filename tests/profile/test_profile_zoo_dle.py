"""The zoo models of the Lambda / NVIDIA DeepLearningExamples benchmarks against published sizes and
hand counts (sources cited per test)."""

from __future__ import annotations

import polars as pl
import pytest
import torch

from ddlscope.profile import ZOO, profile_model
from ddlscope.profile.zoo.transformer_xl import XL_PAPER_BASE, TransformerXL, zipf_cluster_fractions
from ddlscope.profile.zoo.vision import SSD_DEFAULT_BOXES


def _params(name: str, **sizes: int) -> int:
    with torch.device("meta"):
        model, _ = ZOO[name].factory(**ZOO[name].sizes(**sizes))
    return sum(p.numel() for p in model.parameters())


def test_gnmt_parameter_count():
    # shared embedding 32,320 x 1,024; classifier 1,024 x 32,320 + 32,320; an LSTM(i, h) has 4h (i + h) + 8h
    # parameters: encoder bidirectional 2 x (4096 x 2048 + 8192), LSTM(2048, 1024), 2 x LSTM(1024, 1024);
    # decoder LSTM(1024, 1024) + 3 x LSTM(2048, 1024); attention 2 x 1024^2 + 1024 + 1 + 1024
    lstm = lambda i, h: 4 * h * (i + h) + 8 * h  # noqa: E731
    expected = (32_320 * 1024 + 1024 * 32_320 + 32_320 + 2 * lstm(1024, 1024) + lstm(2048, 1024)
                + 2 * lstm(1024, 1024) + lstm(1024, 1024) + 3 * lstm(2048, 1024) + 2 * 1024**2 + 2049)
    assert _params("gnmt") == expected == 160_671_297  # "GNMT v2 ~160 M" (DeepLearningExamples)


def test_gnmt_lstms_are_fused_compute_bound_rows():
    b, s = 4, 10
    r = profile_model("gnmt", batch_size=b, seq_len=s)
    rnn = r.ops.filter(pl.col("op").str.starts_with("aten._cudnn_rnn"))
    # 4 encoder + 4 decoder nn.LSTM calls: one forward and one backward row each, all compute-bound
    assert rnn.group_by("op").len().sort("op")["len"].to_list() == [8, 8]
    assert (rnn["class_by_type"] == "compute_bound").all()
    # forward MACs per token: encoder 2 x 4 x (1024 + 1024) x 1024 (bidirectional) + 4 x 3072 x 1024 + 2 x 4 x 2048
    # x 1024; decoder 4 x 2048 x 1024 + 3 x 4 x 3072 x 1024
    per_token = (2 * 4 * 2048 + 4 * 3072 + 2 * 4 * 2048 + 4 * 2048 + 3 * 4 * 3072) * 1024
    fwd = rnn.filter(pl.col("phase") == "forward")["flops"].sum()
    assert fwd == 2 * per_token * b * s
    assert rnn.filter(pl.col("phase") == "backward")["flops"].sum() == 2 * fwd
    assert not r.totals["unpriced_ops"]


def test_bert_squad_parameter_counts():
    # Devlin et al. 2019: BERT-base 110 M, BERT-large 340 M (with the 30,522 vocabulary; the padded 30,528 and
    # the 2-way span head add 6 x H + 2 H + 2); within 3 %
    assert _params("bert_base_squad") == pytest.approx(110e6, rel=0.03)
    assert _params("bert_large_squad") == pytest.approx(340e6, rel=0.03)
    # the span head: H x 2 + 2
    with torch.device("meta"):
        model, batch = ZOO["bert_base_squad"].factory(batch_size=2, seq_len=384)
    assert model.qa_outputs.weight.shape == (2, 768) and batch["input_ids"].shape == (2, 384)


def test_bert_squad_adds_the_padding_mask_to_every_layers_scores():
    """DeepLearningExamples' modeling.py adds the extended mask (batch x 1 x 1 x L) to each layer's
    B x A x L x L scores: with math attention one add per layer, reading the FP32 scores and the mask
    and writing the scores (4 bytes each); no backward kernel (the add passes its gradient through)."""
    b, s, layers, heads = 2, 64, 12, 12
    r = profile_model("bert_base_squad", batch_size=b, seq_len=s, attention="math", precision="fp32")
    scores = b * heads * s * s
    fwd = r.ops.filter((pl.col("phase") == "forward") & (pl.col("op") == "aten.add")
                       & (pl.col("shape") == f"{b}x{heads}x{s}x{s}"))
    assert fwd.height == layers
    assert fwd["total_bytes"].to_list() == [4 * (2 * scores + b * s)] * layers


def test_transformer_xl_parameter_counts():
    # the paper's base (d_model 410, 10 heads of 41, d_inner 2100, 16 layers, div_val 1): Dai et al. 2019,
    # Table 1: 151 M. Hand count: tied embedding/softmax 267,735 x 410, per layer qkv 410 x 1230 + r 410^2 +
    # o 410^2 + FF (410 x 2100 + 2100 + 2100 x 410 + 410) + 2 layer norms 4 x 410, softmax biases 267,735,
    # cluster head 3 x 410 + 3, relative biases 2 x 410
    layer = 410 * 1230 + 2 * 410**2 + 410 * 2100 + 2100 + 2100 * 410 + 410 + 4 * 410
    expected = 267_735 * 410 + 16 * layer + 267_735 + 3 * 410 + 3 + 2 * 410
    with torch.device("meta"):
        paper_base = sum(p.numel() for p in TransformerXL(**XL_PAPER_BASE).parameters())
    assert paper_base == expected == 151_107_538
    assert paper_base == pytest.approx(151e6, rel=0.01)
    # DeepLearningExamples' base (d_model 512, 8 x 64 heads, d_inner 2048): the same count at 512
    layer = 512 * 1536 + 2 * 512**2 + 512 * 2048 + 2048 + 2048 * 512 + 512 + 4 * 512
    assert _params("transformer_xl_base") == 267_735 * 512 + 16 * layer + 267_735 + 3 * 512 + 3 + 2 * 512
    # large, div_val 4 (adaptive input dims 1024/256/64/16 for 20k/20k/160k/67,735 words, projections to 1024,
    # the head projection untied): hand count 285,170,506 (the paper's Table 1 says 257 M)
    layer = 1024 * 3072 + 2 * 1024**2 + 1024 * 4096 + 4096 + 4096 * 1024 + 1024 + 4 * 1024
    tables = 20_000 * 1024 + 20_000 * 256 + 160_000 * 64 + 67_735 * 16
    projs = 1024 * (1024 + 256 + 64 + 16) + 1024 * 1024
    assert _params("transformer_xl_large") == 18 * layer + tables + projs + 267_735 + 3 * 1024 + 3 + 2 * 1024


def test_transformer_xl_full_softmax_as_lambda_runs_it():
    """Without ``--adaptive`` (Lambda's runs): no tail clusters, so 3 x d + 3 parameters fewer than the
    adaptive base, and the softmax head is one (T B) x 512 @ 512 x 267,735 product over every token."""
    layer = 512 * 1536 + 2 * 512**2 + 512 * 2048 + 2048 + 2048 * 512 + 512 + 4 * 512
    assert _params("transformer_xl_base_softmax") == 267_735 * 512 + 16 * layer + 267_735 + 2 * 512
    # large with one 1024-wide input table (div_val 1), no projections, tied softmax
    layer = 1024 * 3072 + 2 * 1024**2 + 1024 * 4096 + 4096 + 4096 * 1024 + 1024 + 4 * 1024
    assert _params("transformer_xl_large_softmax") == 267_735 * 1024 + 18 * layer + 267_735 + 2 * 1024
    b, t = 2, 16
    r = profile_model("transformer_xl_base_softmax", batch_size=b, seq_len=t)
    head = r.ops.filter((pl.col("phase") == "forward") & (pl.col("op") == "aten.addmm")
                        & (pl.col("shape") == f"{b * t}x267735"))
    assert head["flops"].to_list() == [2 * b * t * 512 * 267_735]
    # the log-softmax reads and writes the (T B) x 267,735 FP32 logits
    lsm = r.ops.filter((pl.col("phase") == "forward") & (pl.col("op") == "aten._log_softmax"))
    assert lsm["total_bytes"].to_list() == [2 * 4 * b * t * 267_735]


def test_transformer_xl_tail_fractions():
    # Zipf exponent 1 over 267,735 words: P(rank <= r) = H(r) / H(V), H(n) = ln n + 0.5772
    import math

    h = lambda n: math.log(n) + 0.5772156649  # noqa: E731
    assert zipf_cluster_fractions() == pytest.approx(
        ((h(40_000) - h(20_000)) / h(267_735), (h(200_000) - h(40_000)) / h(267_735),
         (h(267_735) - h(200_000)) / h(267_735)))


def test_transformer_xl_attention_and_tokens():
    b, t = 2, 16
    r = profile_model("transformer_xl_base", batch_size=b, seq_len=t)
    fwd = r.ops.filter((pl.col("phase") == "forward") & (pl.col("module") == "layers.0.attn"))
    # scores over mem_len + tgt_len = 32 keys: the AC term (q + u) k^T is a bmm of 2 x 8 heads of 16 x 64 by
    # 64 x 32: 2 x 16 x 16 x 64 x 32 FLOPs
    bmm = fwd.filter(pl.col("op") == "aten.bmm")["flops"].to_list()
    assert 2 * 16 * 16 * 64 * 32 in bmm
    # the qkv projection runs on mem + current tokens: (32 x 2) x 512 @ 512 x 1536
    qkv = r.ops.filter((pl.col("phase") == "forward") & (pl.col("module") == "layers.0.attn.qkv_net"))
    assert qkv.filter(pl.col("op") == "aten.mm")["flops"].to_list() == [2 * 64 * 512 * 1536]
    assert r.workload.batch_size == b and not r.totals["unpriced_ops"]


def test_ssd300_boxes_and_trunk():
    # Liu et al. 2016: 38^2 x 4 + 19^2 x 6 + 10^2 x 6 + 5^2 x 6 + 3^2 x 4 + 1 x 4 = 8,732 default boxes
    assert SSD_DEFAULT_BOXES == 5776 + 2166 + 600 + 150 + 36 + 4 == 8732
    with torch.device("meta"):
        model, (_images, boxes, labels) = ZOO["ssd300"].factory(batch_size=2, image_size=300)
    assert boxes.shape == (2, 4, 8732) and labels.shape == (2, 8732)
    # the trunk is torchvision's ResNet-50 up to layer3: stem 9,408 + 128, layer1 215,808, layer2 1,219,584,
    # layer3 7,098,368 parameters
    trunk = sum(p.numel() for p in model.feature_extractor.parameters())
    assert trunk == 9_408 + 128 + 215_808 + 1_219_584 + 7_098_368
    # heads: 3x3 convolutions from (1024, 512, 512, 256, 256, 256) channels to boxes x (4 + 81), with biases
    heads = sum(9 * c * n * 85 + n * 85 for c, n in zip((1024, 512, 512, 256, 256, 256), (4, 6, 6, 6, 4, 4),
                                                          strict=True))
    assert sum(p.numel() for m in (model.loc, model.conf) for p in m.parameters()) == heads


def test_ncf_dle_parameter_count():
    # (138,493 users + 26,744 items) x (64 GMF + 128 MLP) + MLP 256x256+256 + 256x128+128 + 128x64+64 + final 129
    assert _params("ncf_dle") == 165_237 * 192 + 65_792 + 32_896 + 8_256 + 129 == 31_832_577


def _waveglow_hand_count(c: int) -> int:
    # one WN of n_half = h and c channels (weight norm: weight_v, weight_g (one per output channel) and bias):
    # start c h + 2c; end 2h c + 2h; 8 dilated 3-wide in-layers 2c x c x 3 + 4c; 8 conditioning 1x1 from 640
    # mel x group channels 2c x 640 + 4c; 7 residual/skip 1x1 2c x c + 4c and the last c x c + 2c
    def wn(h: int) -> int:
        return (c * h + 2 * c + 2 * h * c + 2 * h + 8 * (2 * c * c * 3 + 4 * c) + 8 * (2 * c * 640 + 4 * c)
                + 7 * (2 * c * c + 4 * c) + c * c + 2 * c)

    # upsampling ConvTranspose1d(80, 80, 1024) + bias; 1x1 invertible convolutions of 8, 6, 4 channels, 4 of each
    return 80 * 80 * 1024 + 80 + 4 * (64 + 36 + 16) + 4 * (wn(4) + wn(3) + wn(2))


def test_speech_parameter_counts():
    from ddlscope.profile.zoo.speech import WaveGlow

    # WaveGlow with NVIDIA/waveglow's 256 WN channels: Prenger et al., ICASSP 2019: 87.88 M parameters
    with torch.device("meta"):
        paper = sum(p.numel() for p in WaveGlow(channels=256).parameters())
    assert paper == _waveglow_hand_count(256) == 87_879_272
    assert paper == pytest.approx(87.88e6, rel=1e-4)
    # the zoo entry: DeepLearningExamples' default --wn-channels 512 (what Lambda ran)
    assert _params("waveglow") == _waveglow_hand_count(512) == 268_294_760
    # Tacotron 2 as DeepLearningExamples defines it: 28,193,153 (about 28.2 M)
    assert _params("tacotron2") == 28_193_153


def test_tacotron2_cells_are_fused():
    b, frames = 2, 6
    r = profile_model("tacotron2", batch_size=b, seq_len=frames)
    ops = r.ops
    # two LSTMCells per mel frame, each one fused element-wise kernel forward and one backward
    assert ops.filter(pl.col("op") == "aten._thnn_fused_lstm_cell").height == 2 * frames
    assert ops.filter(pl.col("op") == "aten._thnn_fused_lstm_cell_backward_impl").height == 2 * frames
    # the encoder's bidirectional LSTM is one fused cuDNN call: 2 directions x 4 gates x (512 + 256) x 256 per symbol
    enc = ops.filter(pl.col("op") == "aten._cudnn_rnn")
    assert enc["flops"].item() == 2 * 2 * 4 * (512 + 256) * 256 * b * 100


def test_waveglow_logdet_is_listed_unpriced():
    # log det W of the 12 invertible 1x1 convolutions (8x8, 6x6, 4x4 matrices) has no FLOP formula: listed
    r = profile_model("waveglow", batch_size=1, seq_len=512)
    assert set(r.totals["unpriced_ops"]) <= {"aten._linalg_slogdet", "aten.linalg_lu_solve", "aten.linalg_lu_factor_ex"}
    assert r.totals["unpriced_ops"].get("aten._linalg_slogdet") == 12


def test_more_vision_parameter_counts_and_macs():
    # torchvision's model documentation: ResNet-101 44,549,160, ResNet-152 60,192,808, VGG-16 138,357,544,
    # MobileNetV2 3,504,872 parameters
    assert _params("resnet101") == 44_549_160
    assert _params("resnet152") == 60_192_808
    assert _params("vgg16") == 138_357_544
    assert _params("mobilenet_v2") == 3_504_872
    # MobileNetV2: Sandler et al. 2018, Table 4: 300 M multiply-adds per 224 x 224 image (its depthwise
    # convolutions priced with C_in / groups = 1 input channel per output); within 3 %
    r = profile_model("mobilenet_v2", batch_size=2)
    fwd = r.ops.filter((pl.col("phase") == "forward") & (pl.col("class_by_type") == "compute_bound"))
    assert fwd["flops"].sum() / 2 / 2 == pytest.approx(300e6, rel=0.03)
    # ShuffleNet V2 1.0x: torchvision 2,278,604 parameters; Ma et al. 2018, Table 5: 146 M multiply-adds
    assert _params("shufflenet_v2") == 2_278_604
    r = profile_model("shufflenet_v2", batch_size=2)
    fwd = r.ops.filter((pl.col("phase") == "forward") & (pl.col("class_by_type") == "compute_bound"))
    assert fwd["flops"].sum() / 2 / 2 == pytest.approx(146e6, rel=0.03)
    # Inception-v3: torchvision 27,161,264 parameters (auxiliary head included) and 5.71 G multiply-adds per
    # 299 x 299 image without the auxiliary head (which inference does not run); within 3 %
    assert _params("inception_v3") == 27_161_264
    r = profile_model("inception_v3", batch_size=2)
    fwd = r.ops.filter((pl.col("phase") == "forward") & (pl.col("class_by_type") == "compute_bound")
                       & ~pl.col("module").str.starts_with("aux"))
    assert fwd["flops"].sum() / 2 / 2 == pytest.approx(5.71e9, rel=0.03)


def test_transformer_big_and_lstm_lm_parameter_counts():
    # Vaswani et al. 2017, Table 3: big 213 M. Hand count: shared embedding 37,000 x 1024; encoder layer
    # 4 x 1024^2 + 4 x 1024 + 2 x 1024 x 4096 + 4096 + 1024 + 4 x 1024 = 12,596,224; decoder layer adds
    # cross-attention 4 x 1024^2 + 4 x 1024 and a layer norm 2 x 1024; final norms 2 x 2 x 1024
    enc = 4 * 1024**2 + 4 * 1024 + 2 * 1024 * 4096 + 4096 + 1024 + 4 * 1024
    dec = enc + 4 * 1024**2 + 4 * 1024 + 2 * 1024
    assert _params("transformer_big") == 37_000 * 1024 + 6 * enc + 6 * dec + 4 * 1024 == 214_249_472
    assert _params("transformer_big") == pytest.approx(213e6, rel=0.01)
    # Zaremba et al. 2014, large: 66 M. Embedding 10,000 x 1,500; 2 LSTM layers 4 x 1500 x 3000 + 8 x 1500;
    # softmax 1,500 x 10,000 + 10,000
    assert _params("lstm_lm") == 15_000_000 + 2 * (18_000_000 + 12_000) + 15_010_000 == 66_034_000
    # training FLOPs: LSTM 3 x 2 x 2 layers x 4 x 3000 x 1500 per token, softmax 3 x 2 x 1500 x 10,000 per
    # token, over 20 x 35 = 700 tokens
    r = profile_model("lstm_lm")
    assert r.totals["compute_bound_flops"] == 700 * (3 * 2 * 2 * 4 * 3000 * 1500 + 3 * 2 * 1500 * 10_000)


def test_deepspeech2_parameters_and_rnn_flops():
    # convolutions 32 x 41 x 11 + 32 and 32 x 32 x 21 x 11 + 32 with batch norms 2 x 64; the spectrogram's 161
    # bins become (161 + 40 - 41) // 2 + 1 = 81, then (81 + 20 - 21) // 2 + 1 = 41: RNN input 32 x 41 = 1,312.
    # BiLSTM(i, 1024): 2 (4 x 1024 (i + 1024) + 8 x 1024); four more BiLSTM(1024, 1024) each after a batch norm
    # (2,048); classifier batch norm 2,048 and 1,024 x 29 without bias
    bilstm = lambda i: 2 * (4 * 1024 * (i + 1024) + 8 * 1024)  # noqa: E731
    expected = (32 * 41 * 11 + 32 + 64 + 32 * 32 * 21 * 11 + 32 + 64 + bilstm(1312) + 4 * (2048 + bilstm(1024))
                + 2048 + 1024 * 29)
    assert _params("deepspeech2") == expected == 86_618_400
    b, t = 2, 64
    r = profile_model("deepspeech2", batch_size=b, seq_len=t)
    fwd = r.ops.filter(pl.col("op") == "aten._cudnn_rnn")
    # time is halved by the first convolution: 32 steps; per step and direction 2 x 4 (i + 1024) x 1024 FLOPs
    steps = t // 2
    assert fwd["flops"].to_list() == [2 * 2 * 4 * (i + 1024) * 1024 * b * steps for i in (1312, 1024, 1024, 1024, 1024)]
    assert (fwd["class_by_type"] == "compute_bound").all()


def test_dcgan_parameters_and_flops_by_hand():
    # PyTorch examples/dcgan: generator 3,576,704 and discriminator 2,765,568 parameters
    # (G: 100x512x16 + 512x256x16 + 256x128x16 + 128x64x16 + 64x3x16 weights, BN 2 x (512+256+128+64);
    #  D: 3x64x16 + 64x128x16 + 128x256x16 + 256x512x16 + 512x16, BN 2 x (128+256+512))
    g = 16 * (100 * 512 + 512 * 256 + 256 * 128 + 128 * 64 + 64 * 3) + 2 * (512 + 256 + 128 + 64)
    d = 16 * (3 * 64 + 64 * 128 + 128 * 256 + 256 * 512 + 512) + 2 * (128 + 256 + 512)
    assert (g, d) == (3_576_704, 2_765_568) and _params("dcgan") == g + d
    # forward multiply-adds per sample, convolution and transposed convolution = C_in x C_out x k^2 x
    # (the smaller side's positions): G 100x512x16x1 + 512x256x16x16 + 256x128x16x64 + 128x64x16x256
    # + 64x3x16x1024; D 3x64x16x1024 + 64x128x16x256 + 128x256x16x64 + 256x512x16x16 + 512x16;
    # one iteration runs G once and D three times
    g_mac = 100 * 512 * 16 + 512 * 256 * 16 * 16 + 256 * 128 * 16 * 64 + 128 * 64 * 16 * 256 + 64 * 3 * 16 * 1024
    d_mac = 3 * 64 * 16 * 1024 + 64 * 128 * 16 * 256 + 128 * 256 * 16 * 64 + 256 * 512 * 16 * 16 + 512 * 16
    r = profile_model("dcgan", batch_size=2, optimizer="adam")
    fwd = r.ops.filter((pl.col("phase") == "forward") & (pl.col("class_by_type") == "compute_bound"))
    assert fwd["flops"].sum() == pytest.approx(2 * 2 * (g_mac + 3 * d_mac), rel=1e-6)
    with pytest.raises(ValueError, match="64 x 64"):
        profile_model("dcgan", batch_size=2, image_size=128)
