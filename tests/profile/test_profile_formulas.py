"""FLOP formulas of compute-class ops (issue 13): grouped/depthwise convolutions, ops run under
torch.inference_mode(), fused attention kernels, cuDNN-style recurrent layers, unpriced ops.
Every expected value is hand arithmetic written next to it."""

from __future__ import annotations

import polars as pl
import pytest
import torch
from torch import nn

from ddlscope.profile import profile_model
from ddlscope.profile.costs import attention_flops, conv_macs, rnn_macs


def _rows(result, phase: str, module: str, op: str | None = None) -> pl.DataFrame:
    f = result.ops.filter((pl.col("phase") == phase) & (pl.col("module") == module))
    return f.filter(pl.col("op") == op) if op else f


class Depthwise(nn.Module):
    """1x1 stem 3 -> 32 (so the depthwise layer's input needs a gradient), then a 3x3 depthwise
    convolution (groups = channels = 32, padding 1), a 3x3 grouped convolution 32 -> 64 in 4 groups,
    and a 2x2/2 transposed convolution 64 -> 16 in 4 groups."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 1, bias=False)
        self.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False)
        self.grouped = nn.Conv2d(32, 64, 3, padding=1, groups=4, bias=False)
        self.up = nn.ConvTranspose2d(64, 16, 2, stride=2, groups=4, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.grouped(self.dw(self.stem(x)))).sum()


@pytest.fixture(scope="module")
def depthwise():
    return profile_model(lambda: (Depthwise(), torch.zeros(2, 3, 6, 6)))


def test_depthwise_convolution_backward_flops(depthwise):
    # depthwise 3x3 on 2 x 32 x 6 x 6 (padding 1: 6 x 6 out): MACs = N x prod(out) x C_out x (C_in / groups) x k
    # = 2 x 36 x 32 x (32 / 32) x 9 = 20,736 per pass, 41,472 FLOPs. The backward computes the input
    # gradient and the weight gradient, each 41,472: 82,944. (torch.utils.flop_counter multiplies the
    # weight gradient by groups: 41,472 + 32 x 41,472 = 1,368,576.)
    fwd = _rows(depthwise, "forward", "dw", "aten.convolution")["flops"].sum()
    bwd = _rows(depthwise, "backward", "dw", "aten.convolution_backward")["flops"].sum()
    assert fwd == 2 * (2 * 36 * 32 * 1 * 9) == 41_472
    assert bwd == 2 * 41_472 == 82_944


def test_grouped_convolution_flops(depthwise):
    # grouped 3x3, 32 -> 64, groups 4 (8 input channels per group), 6 x 6 out:
    # 2 x 36 x 64 x 8 x 9 = 331,776 MACs = 663,552 FLOPs per pass; backward 2 passes
    fwd = _rows(depthwise, "forward", "grouped", "aten.convolution")["flops"].sum()
    bwd = _rows(depthwise, "backward", "grouped", "aten.convolution_backward")["flops"].sum()
    assert fwd == 2 * 2 * 36 * 64 * 8 * 9 == 663_552
    assert bwd == 2 * fwd


def test_grouped_transposed_convolution_flops(depthwise):
    # transposed 2x2/2, 64 -> 16, groups 4: weight (64, 4, 2, 2), input 6 x 6 -> output 12 x 12. Each of the
    # 2 x 16 x 144 = 4,608 output elements receives one tap from each of the 64 / 4 = 16 input channels of
    # its group: 73,728 MACs = N x prod(input spatial) x C_in x (C_out / groups) x k = 2 x 36 x 64 x 4 x 4
    fwd = _rows(depthwise, "forward", "up", "aten.convolution")["flops"].sum()
    bwd = _rows(depthwise, "backward", "up", "aten.convolution_backward")["flops"].sum()
    assert fwd == 2 * (2 * 16 * 144 * 16) == 2 * (2 * 36 * 64 * 4 * 4) == 147_456
    assert bwd == 2 * fwd


def test_first_convolution_backward_has_no_input_gradient(depthwise):
    # the stem's input is the image (no gradient): only the weight gradient, 2 x 36 x 32 x 3 x 1 MACs
    bwd = _rows(depthwise, "backward", "stem", "aten.convolution_backward")["flops"].sum()
    assert bwd == 2 * (2 * 36 * 32 * 3)


def test_conv_macs_agrees_with_pytorch_where_pytorch_is_right():
    # groups = 1: torch.utils.flop_counter's conv formula (2 per MAC) is correct; ours must agree
    from torch.utils.flop_counter import conv_flop_count

    assert 2 * conv_macs((8, 64, 28, 28), (128, 64, 3, 3), (8, 128, 28, 28), False) == conv_flop_count(
        [8, 64, 28, 28], [128, 64, 3, 3], [8, 128, 28, 28])


class UnderInference(nn.Module):
    """A frozen feature extractor run under torch.inference_mode() inside the step, then a trained head."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen = nn.Linear(64, 64)
        self.conv = nn.Conv2d(3, 8, 3)
        self.head = nn.Linear(64, 4)

    def forward(self, x: torch.Tensor, img: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            y = self.frozen(x)
            z = torch.matmul(self.conv(img).flatten(1), torch.ones(8 * 14 * 14, 5))
        return self.head(y.clone()).sum() + z.sum().clone()


def test_inference_mode_ops_are_priced_as_under_no_grad():
    r = profile_model(lambda: (UnderInference(), (torch.zeros(16, 64), torch.zeros(2, 3, 16, 16))))
    fwd = r.ops.filter(pl.col("phase") == "forward")
    # Linear(64, 64) on 16 rows: one addmm, 2 x 16 x 64 x 64 = 131,072 FLOPs (not 4,096 "per element")
    lin = fwd.filter(pl.col("module") == "frozen")
    assert lin["op"].to_list() == ["aten.addmm"]
    assert lin["flops"].item() == 2 * 16 * 64 * 64 == 131_072
    assert lin["class_by_type"].item() == "compute_bound"
    # Conv2d(3, 8, 3) on 2 x 3 x 16 x 16 -> 14 x 14: 2 x (2 x 196 x 8 x 3 x 9) = 169,344 FLOPs
    conv = fwd.filter(pl.col("module") == "conv")
    assert conv.filter(pl.col("op") == "aten.convolution")["flops"].item() == 2 * 2 * 196 * 8 * 3 * 9
    # matmul (2 x 1568) @ (1568 x 5): 2 x 2 x 1568 x 5 = 31,360 FLOPs, compute-bound
    mm = fwd.filter(pl.col("op") == "aten.mm")
    assert mm["flops"].item() == 2 * 2 * 1568 * 5
    # no composite op is left whole in the table
    assert not fwd["op"].is_in(["aten.linear", "aten.conv2d", "aten.matmul"]).any()
    # all that compute: 131,072 + 169,344 + 31,360 + the head's 2 x 16 x 64 x 4 forward and its backward
    # (weight gradient only: y needs no gradient) 2 x 16 x 64 x 4
    assert r.totals["compute_bound_flops"] == 131_072 + 169_344 + 31_360 + 2 * (2 * 16 * 64 * 4)


class CpuFlashAttention(nn.Module):
    """A projection, then attention through the CPU flash kernel (which torch.utils.flop_counter has no
    formula for), then an FFT (an op of a compute-heavy kind that ddlscope has no formula for)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.proj(x)  # (B, H, L, D) = (2, 4, 16, 8)
        out = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, q)[0]
        return out.sum() + torch.fft.rfft(out, dim=-1).abs().sum()


@pytest.fixture(scope="module")
def cpu_attention():
    return profile_model(lambda: (CpuFlashAttention(), torch.zeros(2, 4, 16, 8)))


def test_cpu_flash_attention_flops(cpu_attention):
    ops = cpu_attention.ops
    # forward: Q K^T and P V, 2 matmuls of 2 B H Lq Lk D FLOPs: 4 x 2 x 4 x 16 x 16 x 8 = 65,536
    fwd = ops.filter(pl.col("op") == "aten._scaled_dot_product_flash_attention_for_cpu")
    assert fwd["flops"].item() == 4 * 2 * 4 * 16 * 16 * 8 == 65_536
    assert fwd["class_by_type"].item() == "compute_bound" and not fwd["unpriced"].item()
    # backward: 5 matmuls (Q K^T recomputed, dV, dP, dQ, dK), 2.5 x forward (Dao, FlashAttention-2, sec. 4.1)
    bwd = ops.filter(pl.col("op") == "aten._scaled_dot_product_flash_attention_for_cpu_backward")
    assert bwd["flops"].item() == 2.5 * 65_536 == 10 * 2 * 4 * 16 * 16 * 8


def test_attention_formula_on_gqa_shapes():
    # 8 query heads over 2 K/V heads, Lq 128, Lk 256, D 64, Dv 32: 2 B H Lq Lk (D + Dv)
    assert attention_flops((1, 8, 128, 64), (1, 2, 256, 64), (1, 2, 256, 32)) == 2 * 8 * 128 * 256 * (64 + 32)


def test_fused_efficient_attention_flops():
    # ddlscope's fused path (aten._scaled_dot_product_efficient_attention): B 2, H 12, L 128, D 64
    from ddlscope.profile.tracer import fused_attention

    class Att(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q = nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q = self.q(x)
            return fused_attention(q, q, q).sum()

    ops = profile_model(lambda: (Att(), torch.zeros(2, 12, 128, 64))).ops
    f = ops.filter(pl.col("op") == "aten._scaled_dot_product_efficient_attention")["flops"].item()
    b = ops.filter(pl.col("op") == "aten._scaled_dot_product_efficient_attention_backward")["flops"].item()
    assert f == 4 * 2 * 12 * 128 * 128 * 64
    assert b == 2.5 * f


def test_unpriced_ops_are_flagged_and_listed(cpu_attention):
    ops = cpu_attention.ops
    fft = ops.filter(pl.col("op").str.starts_with("aten._fft"))
    # rfft forward (_fft_r2c) and its backward (_fft_c2c...): no formula: 0 FLOPs, flagged, bytes counted
    assert fft.height >= 2 and fft["unpriced"].all()
    assert (fft["flops"] == 0).all() and (fft["total_bytes"] > 0).all()
    assert not ops.filter(~pl.col("op").str.starts_with("aten._fft"))["unpriced"].any()
    listed = cpu_attention.totals["unpriced_ops"]
    assert listed == {op: n for op, n in fft.group_by("op").len().iter_rows()}


def test_unpriced_line_in_cli_totals(cpu_attention):
    from ddlscope.cli.profile import _totals_lines

    line = _totals_lines(cpu_attention.totals)["unpriced ops (no FLOP formula; FLOPs 0, bytes counted)"]
    assert "aten._fft_r2c x1" in line


class TwoLayerLSTM(nn.Module):
    def __init__(self, bidirectional: bool = False) -> None:
        super().__init__()
        self.rnn = nn.LSTM(32, 64, num_layers=2, batch_first=True, bidirectional=bidirectional)
        self.gru = nn.GRU(64 * (2 if bidirectional else 1), 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.rnn(x)[0]
        return self.gru(y.transpose(0, 1))[0].sum()


@pytest.mark.parametrize("bidirectional", [False, True])
def test_recurrent_layers_are_one_fused_compute_bound_op(bidirectional):
    b, t, d = 4, 5, 2 if bidirectional else 1
    r = profile_model(lambda: (TwoLayerLSTM(bidirectional), torch.zeros(b, t, 32)))
    ops = r.ops
    steps = ops.filter(pl.col("phase") != "optimizer")
    lstm = steps.filter(pl.col("module") == "rnn")
    # one forward and one backward row per nn.LSTM call, compute-bound; no per-time-step ops: besides them
    # only the zero initial states (h0, c0) and nothing element-wise
    assert lstm.filter(pl.col("class_by_type") == "compute_bound")["op"].to_list() == [
        "aten._cudnn_rnn", "aten._cudnn_rnn_backward"]
    assert set(lstm.filter(pl.col("class_by_type") == "memory_bound")["op"]) == {"aten.zeros"}
    # LSTM: 2 FLOPs x 4 gates x (input + hidden) x hidden per token, layer and direction:
    # layer 1: 4 x (32 + 64) x 64 = 24,576; layer 2 takes the d x 64-wide output: 4 x (64 d + 64) x 64
    macs = d * (4 * (32 + 64) * 64 + 4 * (64 * d + 64) * 64) * b * t
    fused = lstm.filter(pl.col("class_by_type") == "compute_bound")
    assert fused["flops"][0] == 2 * macs
    # backward: data gradients and weight gradients, each as many MACs as the forward (3x for training)
    assert fused["flops"][1] == 4 * macs
    assert 2 * macs == 2 * rnn_macs(2, 32, 64, 2, bidirectional, b * t)
    # GRU(64 d, 16), time-major: 3 gates x (64 d + 16) x 16 per token. Its input needs a gradient (the
    # LSTM's output), so the backward is 2x forward
    gru = steps.filter((pl.col("module") == "gru") & (pl.col("class_by_type") == "compute_bound"))
    assert gru["op"].to_list() == ["aten._cudnn_rnn", "aten._cudnn_rnn_backward"]
    assert gru["flops"].to_list() == [2 * 3 * (64 * d + 16) * 16 * b * t, 4 * 3 * (64 * d + 16) * 16 * b * t]
    # every LSTM/GRU weight got its gradient (the SGD update runs on all of them)
    assert r.totals["num_gradient_tensors"] == 4 * 2 * d + 4


def test_recurrent_layers_under_amp_run_in_16_bit():
    # CUDA autocast runs cuDNN RNNs in float16 (aten/src/ATen/cudnn/AutocastRNN.cpp); a second nn.LSTM fed the
    # first one's float16 output must be accepted (its input check sees autocast enabled)
    class Stacked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.LSTM(8, 16), nn.LSTM(16, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x)[0])[0].float().sum()

    r = profile_model(lambda: (Stacked(), torch.zeros(5, 3, 8)), precision="fp16")
    rnn = r.ops.filter(pl.col("op").str.starts_with("aten._cudnn_rnn"))
    assert rnn.height == 4 and (rnn["dtype"] == "float16").all()
    assert not torch._C._is_any_autocast_enabled()  # the check is restored after the trace


def test_bert_adam_kernels_and_bytes_as_deeplearningexamples_writes_them():
    """DeepLearningExamples' BertAdam (optimization.py): per matrix (weight decay 0.01) 12 kernels, per
    vector (no decay) 10, and one global gradient-norm row over every gradient. Bytes by hand for a
    Linear(8, 4) weight (32 FP32 elements, 128 bytes a tensor): m.mul_ r m w m, m.add_ r m g w m,
    v.mul_, v.addcmul_ r v g g w v, sqrt r v w t1, add r t1 w t2, div r m t2 w u, mul r p w t3,
    add_ r u t3 w u, mul r u w t4, neg r t4 w t5, p.add_ r p t5 w p."""
    def factory(batch_size: int = 2):
        return nn.Sequential(nn.Linear(8, 4), nn.LayerNorm(4)), torch.zeros(batch_size, 8)

    r = profile_model(factory, batch_size=2, optimizer="bert_adam")
    opt = r.ops.filter(pl.col("phase") == "optimizer")
    weight = opt.filter(pl.col("shape") == "4x8")
    assert weight["op"].to_list() == ["aten.mul_", "aten.add_", "aten.mul_", "aten.addcmul_", "aten.sqrt",
                                      "aten.add", "aten.div", "aten.mul", "aten.add_", "aten.mul", "aten.neg",
                                      "aten.add_"]
    t = 128
    assert weight["read_bytes"].to_list() == [t, 2 * t, t, 3 * t, t, t, 2 * t, t, 2 * t, t, t, 2 * t]
    assert weight["write_bytes"].to_list() == [t] * 12
    # the three vectors (bias 4, LayerNorm weight and bias 4 each): no decay, 2 kernels fewer each
    assert opt.filter(pl.col("shape") == "4").height == 3 * 10
    norm = opt.filter(pl.col("op") == "ddlscope.multi_tensor_l2norm")
    assert norm["read_bytes"].to_list() == [4 * (32 + 4 + 4 + 4)] and norm["shape"].to_list() == ["44"]


def test_bert_adam_steps_as_an_optimizer_and_refuses_what_the_original_refuses():
    """On real CPU tensors: the first step moves a parameter by lr x (m / sqrt(v) + wd p), with
    m = (1 - b1) g and v = (1 - b2) g^2 (no bias correction), for p = 1; the closure is called and its
    loss returned; bad hyper-parameters and sparse gradients are refused."""
    from ddlscope.profile.optimizers import BertAdam

    w = nn.Parameter(torch.ones(3, 2))
    untouched = nn.Parameter(torch.ones(2))
    opt = BertAdam([{"params": [w], "weight_decay": 0.01}, {"params": [untouched], "weight_decay": 0.0}], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = w.sum() ** 2
        loss.backward()
        return loss

    assert opt.step(closure).item() == 36.0
    g = 2 * 6.0  # d(sum w)^2 / dw at w = 1
    expected = 1 - 0.1 * (0.1 * g / ((0.001 * g * g) ** 0.5 + 1e-6) + 0.01)
    assert torch.allclose(w.detach(), torch.full((3, 2), expected), atol=1e-6)
    assert torch.equal(untouched.detach(), torch.ones(2))  # no gradient: not stepped
    for bad, message in ((dict(lr=float("nan")), "lr must be a finite number"),
                         (dict(lr="0.1"), "lr must be a finite number"),
                         (dict(e=-1.0), "must be >= 0"), (dict(b1=1.0), r"in \[0, 1\)")):
        with pytest.raises(ValueError, match=message):
            BertAdam([w], **bad)
    emb = nn.Embedding(4, 2, sparse=True)
    emb(torch.tensor([1])).sum().backward()
    with pytest.raises(ValueError, match="sparse gradients"):
        BertAdam(emb.parameters()).step()


@pytest.mark.parametrize(("out_features", "precision", "aligned"), [
    (8, "fp32", True),    # 32-byte rows
    (4, "fp32", True),    # 16 bytes: the smallest aligned row in FP32
    (6, "fp32", False),   # 24 bytes
    (4, "fp16", False),   # 8 bytes in FP16 (the autocast copies are 16-bit)
    (8, "fp16", True),    # 16 bytes
])
def test_a_linear_layer_is_marked_aligned_by_its_leading_dimensions(out_features, precision, aligned):
    """``gemm_aligned``: the forward addmm and the weight-gradient mm of ``Linear(16, n)`` on a batch
    of 32 (the input needs no gradient) have ``n`` as a leading dimension (the result's row; the
    output gradient's row, read transposed), so both follow ``n x element size % 16``; every other
    op is null."""
    torch.manual_seed(0)
    ops = profile_model(lambda: (torch.nn.Linear(16, out_features), torch.zeros(32, 16)), precision=precision).ops
    gemms = ops.filter(pl.col("op").is_in(["aten.addmm", "aten.mm"]))
    assert gemms["phase"].to_list() == ["forward", "backward"]
    assert gemms["gemm_aligned"].to_list() == [aligned] * 2
    assert ops.filter(~pl.col("op").is_in(["aten.addmm", "aten.mm"]))["gemm_aligned"].null_count() == \
        ops.height - 2


def test_transformer_xl_full_softmax_has_three_misaligned_gemms():
    # 267,735 words: the logits' rows are odd, in FP16 and FP32 alike; the layers' GEMMs are aligned
    for precision in ("fp16", "tf32"):
        ops = profile_model("transformer_xl_base_softmax", batch_size=2, seq_len=192, precision=precision,
                            amp="o2").ops
        bad = ops.filter(pl.col("gemm_aligned").eq(False))
        assert bad["shape"].to_list() == ["384x267735", "384x512", "267735x512"]
        assert bad["flops"].to_list() == [2.0 * 384 * 267735 * 512] * 3
        assert ops.filter(pl.col("gemm_aligned").eq(True)).height > 0
