"""profile_model: bad factories and models get clear errors; options; mixed precision."""

from __future__ import annotations

import polars as pl
import pytest
import torch
from torch import nn

from ddlscope.profile import OP_COLUMNS, PARAM_COLUMNS, ProfileError, profile_model


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).sum()


def good(batch_size: int = 2) -> tuple[nn.Module, torch.Tensor]:
    return Net(), torch.zeros(batch_size, 4)


def test_factory_that_raises():
    def factory() -> tuple[nn.Module, torch.Tensor]:
        raise RuntimeError("boom")

    with pytest.raises(ProfileError, match=r"factory raised RuntimeError: boom"):
        profile_model(factory)


@pytest.mark.parametrize(("factory", "said"), [
    (lambda: (1, 2), r"returned a tuple of 2 \(int, int\)"),
    (lambda: Net(), r"returned Net"),
    ("builtins:dict", r"returned dict"),
])
def test_factory_without_a_module(factory, said):
    with pytest.raises(ProfileError, match=said + r".*expected \(torch.nn.Module, example_input_batch\)"):
        profile_model(factory)


def test_factory_that_needs_a_gpu():
    def on_gpu() -> tuple[nn.Module, torch.Tensor]:
        return Net().cuda(), torch.zeros(2, 4, device="cuda")

    with pytest.raises(ProfileError, match=r"needs a GPU"):
        profile_model(on_gpu)


@pytest.mark.parametrize(("spec", "said"), [
    ("no_such_model", r"not a zoo model \(known: .*resnet50"),
    ("no_such_package.mod:factory", r"cannot import module 'no_such_package.mod'"),
    ("ddlscope.profile.zoo.vision:no_such_factory", r"has no attribute 'no_such_factory'"),
    ("ddlscope.profile.zoo:IMAGENET_MEAN_JPEG_BYTES", r"is a float, not a callable factory"),
    ("", r"expected a zoo name"),
])
def test_bad_model_specs(spec, said):
    with pytest.raises(ProfileError, match=said):
        profile_model(spec)


def test_size_the_factory_does_not_take():
    with pytest.raises(ProfileError, match=r"does not take seq_len"):
        profile_model(good, seq_len=128)
    with pytest.raises(ValueError, match=r"seq_len: model 'resnet18' has no sequence length"):
        profile_model("resnet18", seq_len=128)


def test_model_that_reads_values():
    class Branchy(Net):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.lin(x)
            return y.sum() if y.sum() > 0 else y.mean()

    with pytest.raises(ProfileError, match=r"reads tensor values .* data-dependent"):
        profile_model(lambda: (Branchy(), torch.zeros(2, 4)))


def test_output_without_gradient():
    class Frozen(Net):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.sum()

    with pytest.raises(ProfileError, match=r"does not require grad"):
        profile_model(lambda: (Frozen(), torch.zeros(2, 4)))


@pytest.mark.parametrize(("kw", "said"), [
    ({"precision": "fp8"}, "precision: expected one of fp32, tf32, fp16, bf16"),
    ({"optimizer": "lamb"}, "optimizer: expected one of sgd, adam, adamw"),
    ({"attention": "flash"}, "attention: expected one of fused, math"),
    ({"amp": "O3"}, "amp: expected one of autocast, o2"),
    ({"batch_size": 0}, "batch_size: expected a positive integer"),
])
def test_bad_options(kw, said):
    with pytest.raises(ValueError, match=said):
        profile_model(good, **kw)


def test_user_factory_by_path_and_batch_passthrough():
    r = profile_model("ddlscope.profile.zoo.vision:resnet18", batch_size=2, image_size=32)
    assert r.model == "ddlscope.profile.zoo.vision:resnet18"
    assert r.workload.batch_size == 2
    assert r.workload.input_bytes == 2 * 3 * 32 * 32 * 4 + 2 * 8  # FP32 images + int64 labels
    assert list(r.ops.columns) == list(OP_COLUMNS)
    assert list(r.params.columns) == list(PARAM_COLUMNS)


def test_non_scalar_output_and_cpu_built_model():
    # the model is built on the CPU explicitly and returns a (B, 4) tensor: moved to meta, seeded with ones
    def factory() -> tuple[nn.Module, torch.Tensor]:
        return nn.Linear(4, 4, device="cpu"), torch.zeros(3, 4, device="cpu")

    r = profile_model(factory)
    assert r.workload.batch_size == 3
    assert r.totals["dense_params"] == 4 * 4 + 4


def test_workload_fields_are_the_totals():
    r = profile_model(good, batch_size=8)
    w, t = r.workload, r.totals
    assert w.compute_bound_flops == t["compute_bound_flops"] > 0
    assert w.memory_bound_bytes == t["memory_bound_bytes"] > 0
    assert w.dense_param_bytes == (4 * 4 + 4) * 4 and w.num_gradient_tensors == 2
    assert w.peak_memory_bytes == t["peak_memory_bytes"]
    # forward, backward and optimizer bytes split the step's total
    assert t["forward_bytes"] + t["backward_bytes"] + t["optimizer_bytes"] == t["total_bytes"]
    assert t["compute_bound_flops"] + t["memory_bound_flops"] == pytest.approx(t["total_flops"])


def test_mixed_precision_fp16_and_bf16():
    fp32 = profile_model("resnet18", batch_size=2, image_size=64)
    fp16 = profile_model("resnet18", batch_size=2, image_size=64, precision="fp16")
    bf16 = profile_model("resnet18", batch_size=2, image_size=64, precision="bf16")
    for r, dtype in ((fp16, "float16"), (bf16, "bfloat16")):
        convs = r.ops.filter(pl.col("op").is_in(["aten.convolution", "aten.convolution_backward"]))
        assert set(convs["dtype"]) == {dtype}
        # same matmul-class FLOPs as FP32; FP32 master weights: gradients communicated in FP32
        assert r.totals["compute_bound_flops"] == fp32.totals["compute_bound_flops"]
        assert r.workload.dense_param_bytes == fp32.workload.dense_param_bytes == 11_689_512 * 4
        assert r.workload.precision == r.settings["precision"]
        # casts appear: each parameter cast to 16 bit once per forward
        assert r.ops.filter(pl.col("op") == "aten._to_copy").height > 0
    # fp16 adds the gradient scaler's unscale: read and write every FP32 gradient once
    unscale = fp16.ops.filter(pl.col("op") == "ddlscope.amp_unscale_grads")
    assert unscale.height == 62
    assert int(unscale["read_bytes"].sum()) == int(unscale["write_bytes"].sum()) == 11_689_512 * 4
    assert bf16.ops.filter(pl.col("op") == "ddlscope.amp_unscale_grads").height == 0
    # live after the forward: the 16-bit weight copies (11,689,512 x 2 B, saved for the backward)
    # plus 16-bit activations, which are fewer bytes than the FP32 ones
    copies = 11_689_512 * 2
    assert copies < fp16.totals["activation_bytes"] < copies + fp32.totals["activation_bytes"]


def test_apex_o2_runs_the_model_in_16_bit_and_steps_fp32_masters():
    """``amp="o2"`` (apex O2): 16-bit weights, activations and gradients, no per-call casts; the
    optimizer's FP32 masters are state (4 bytes per parameter beside Adam's 8), the gradient copy into
    them reads 2 and writes 4 bytes per parameter, the copy back reads 4 and writes 2."""
    n = 4 * 4 + 4
    auto = profile_model(good, batch_size=8, precision="fp16", optimizer="adam")
    o2 = profile_model(good, batch_size=8, precision="fp16", optimizer="adam", amp="o2")
    assert o2.settings["amp"] == "o2" and "apex O2" in o2.workload.source
    assert auto.workload.dense_param_bytes == n * 4 and o2.workload.dense_param_bytes == n * 2
    fwd = o2.ops.filter(pl.col("phase") == "forward")
    assert fwd.filter(pl.col("op") == "aten._to_copy").height == 0  # the input is cast before the step
    assert set(fwd.filter(pl.col("op") == "aten.addmm")["dtype"]) == {"float16"}
    assert auto.ops.filter(pl.col("op") == "ddlscope.amp_unscale_grads").height == 2
    assert o2.ops.filter(pl.col("op") == "ddlscope.amp_unscale_grads").height == 0
    copies = o2.ops.filter(pl.col("phase") == "optimizer", pl.col("op") == "aten.copy_")
    assert copies.height == 4  # weight and bias: gradient in, master back
    assert int(copies["read_bytes"].sum()) == n * 2 + n * 4 and int(copies["write_bytes"].sum()) == n * 4 + n * 2
    assert o2.totals["optimizer_state_bytes"] == n * 4 + 2 * n * 4
    # a sparse embedding table keeps its FP32 master too: DLRM's O2 state holds 4 bytes per table element
    fp32 = profile_model("dlrm", batch_size=4)
    dlrm = profile_model("dlrm", batch_size=4, precision="fp16", amp="o2")
    assert dlrm.totals["optimizer_state_bytes"] >= fp32.totals["embedding_table_bytes"]
    # fp32/tf32 have no AMP mode: amp is ignored
    assert profile_model(good, precision="fp32", amp="o2").settings["amp"] == "none"


def test_adam_state_and_update():
    sgd = profile_model(good, optimizer="sgd")
    adam = profile_model(good, optimizer="adam")
    params_bytes = (16 + 4) * 4
    assert sgd.totals["optimizer_state_bytes"] == params_bytes  # momentum buffer
    assert adam.totals["optimizer_state_bytes"] == 2 * params_bytes  # two moments
    assert adam.totals["optimizer_bytes"] > sgd.totals["optimizer_bytes"]


def test_tf32_uses_the_tf32_peak():
    r = profile_model(good, precision="tf32", gpu="A100-SXM4-80GB")
    mm = r.ops.filter(pl.col("op") == "aten.addmm").row(0, named=True)
    # A100 TF32 peak 156 TFLOP/s (datasheet); the addmm is tiny, so its roofline time is its bytes
    assert mm["roofline_s"] == pytest.approx(max(mm["flops"] / 156e12, mm["total_bytes"] / 2039e9))
    assert r.workload.precision == "tf32"


def test_module_factory_of_the_current_folder_needs_no_pythonpath(tmp_path, monkeypatch):
    """`ddlscope profile mynet:make` run where mynet.py is: the installed command's sys.path lacks
    the current folder, so it is searched after the path; a module found nowhere names both and says how."""
    import sys

    from ddlscope.profile.api import ProfileError, _resolve

    (tmp_path / "ddlscope_test_usernet.py").write_text(
        "import torch\n\ndef make(batch_size=4):\n    return torch.nn.Linear(3, 2), torch.randn(batch_size, 3)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "ddlscope_test_usernet", raising=False)
    name, factory, entry = _resolve("ddlscope_test_usernet:make")
    assert name == "ddlscope_test_usernet:make" and entry is None
    model, batch = factory(batch_size=4)
    assert tuple(batch.shape) == (4, 3) and model.weight.shape == (2, 3)
    assert sys.path[-1] == str(tmp_path)  # appended: an installed module of the same name still wins
    with pytest.raises(ProfileError, match=r"cannot import module 'ddlscope_no_such_net': 'ddlscope_no_such_net' is "
                       r"not on the Python path nor in the current folder .*set PYTHONPATH"):
        _resolve("ddlscope_no_such_net:make")
