"""The op-level model against the kernels of two real ResNet-50 training steps, class by class.

Two of the shared HTA traces (``shared/data/hta_traces``, SOURCES.md) are ResNet-50 v1.5 steps:
``ns_resolution_trace`` on a V100 SXM2 32 GB (FP32, CUDA cores) and ``nccl_parser_config`` on an
A100 SXM4 40 GB (``A100-PG509-200``; TF32 kernels, ``tf32f32`` in their names), both NCHW, batch 32 per
GPU: the max-pool forward kernel's grid, 25,088 blocks of 256 threads, one output each, is
32 x 64 x 56 x 56; 53 batch-norm kernels per step are ResNet-50's 53 BN layers. Their kernel time
per step (the steps after the first; the all-reduce kernels left out) is summed by class from the
kernel names and set beside the model's prediction of the same step (the zoo's ``resnet50`` at batch
32, SGD, op by op on the same GPU, catalog defaults), with the optimizer step as multi-tensor
kernels (``foreach``, what both traces ran: three ``multi_tensor_apply`` ops of three launches) and
as a kernel per parameter (``for_loop``).

The model's SGD has weight decay (He et al.'s recipe: one more multi-tensor op, 1.12 GB of optimizer
traffic per step); the traced runs have none (three ops, 0.82 GB), which accounts for the model's
optimizer being about 4/3 of the measured one.

Classes: ``conv`` (cuDNN/CUTLASS convolution and GEMM kernels, the 1 x 1 convolutions cuDNN runs as
GEMMs included), ``transpose`` (cuDNN's ``nchwToNhwc`` / ``nhwcToNchw``), ``batch_norm`` (forward and
backward), ``elementwise`` (ReLU, the residual adds, their backward), ``optimizer`` and ``pool``.

Run: ``PYTHONPATH=src python benchmarks/trace_resnet50_kernels.py`` (about 30 s).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import polars as pl

from ddlscope.model import compute
from ddlscope.profile import profile_model
from ddlscope.shared_data import find_shared_data

TRACES = (("hta_traces/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "V100-SXM2-32GB", "fp32"),
          ("hta_traces/nccl_parser_config/nccl_data.json.gz", "A100-SXM4-40GB", "tf32"))
"""(trace, catalog GPU, precision) of the two ResNet-50 steps."""
BATCH = 32
CLASSES = ("conv", "transpose", "batch_norm", "elementwise", "optimizer", "pool")


def kernel_class(name: str) -> str | None:
    """The class of a CUDA kernel of these traces by its name (module docstring); None for the
    all-reduce and the kernels of no class (memsets, small offsets kernels)."""
    if "nccl" in name:
        return None
    if "nchwToNhwc" in name or "nhwcToNchw" in name:
        return "transpose"
    if "bn_fw" in name or "bn_bw" in name:
        return "batch_norm"
    if "multi_tensor_apply" in name:
        return "optimizer"
    if "pool" in name:
        return "pool"
    if re.search(r"gemm|xmma|scudnn|cudnn::cnn|wgrad|dgrad|fprop|ImplicitGemm|ReduceSplitK|winograd", name, re.I):
        return "conv"
    if "elementwise" in name or "reduce_kernel" in name:
        return "elementwise"
    return None


def measured_ms(path: Path) -> dict[str, float]:
    """Kernel milliseconds per step by class, over the trace's ProfilerSteps after the first."""
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    steps = sorted((e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep")),
                   key=lambda e: e["ts"])[1:]
    out = dict.fromkeys(CLASSES, 0.0)
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "kernel":
            continue
        cls = kernel_class(e["name"])
        if cls and any(s["ts"] <= e["ts"] <= s["ts"] + s["dur"] for s in steps):
            out[cls] += float(e["dur"]) / 1e3 / len(steps)
    return out


def model_ms(gpu: str, precision: str, optimizer_kernels: str) -> dict[str, float]:
    """The model's milliseconds per step by class for ResNet-50 at :data:`BATCH` (module docstring),
    from :func:`ddlscope.model.compute.price_ops`."""
    ops = profile_model("resnet50", batch_size=BATCH, precision=precision, optimizer="sgd", gpu=gpu).ops
    priced = compute.price_ops([compute.SingleGpuCase(ops, gpu, precision, BATCH, optimizer_kernels=optimizer_kernels)])
    op = pl.col("op")
    cls = (pl.when(pl.col("phase") == "optimizer").then(pl.lit("optimizer"))
           .when(op.is_in(["aten.convolution", "aten.convolution_backward", "aten.mm", "aten.addmm"]))
           .then(pl.lit("conv"))
           .when(op.str.contains("batch_norm")).then(pl.lit("batch_norm"))
           .when(op.str.contains("pool")).then(pl.lit("pool")).otherwise(pl.lit("elementwise")))
    t = priced.with_columns(cls=cls)
    out = {k: 1e3 * float(t.filter(pl.col("cls") == k)["op_s"].sum()) for k in CLASSES}
    out["transpose"] = 1e3 * float(t["transpose_s"].sum())
    return out


def main() -> None:
    data = find_shared_data()
    if data is None:
        raise SystemExit("shared/data not found (set DDLSCOPE_SHARED_DATA)")
    pl.Config.set_tbl_hide_dataframe_shape(True)
    pl.Config.set_tbl_rows(20)
    for rel, gpu, precision in TRACES:
        meas = measured_ms(Path(data) / rel)
        each, loop = model_ms(gpu, precision, "foreach"), model_ms(gpu, precision, "for_loop")
        t = pl.DataFrame({"class": [*CLASSES, "total"],
                          "measured_ms": [*(meas[k] for k in CLASSES), sum(meas.values())],
                          "model_foreach_ms": [*(each[k] for k in CLASSES), sum(each.values())],
                          "model_for_loop_ms": [*(loop[k] for k in CLASSES), sum(loop.values())]})
        t = t.with_columns(pl.col("^.*_ms$").round(2),
                           error_foreach=(pl.col("model_foreach_ms") / pl.col("measured_ms") - 1).round(3))
        print(f"\nResNet-50, batch {BATCH}, {precision.upper()}, NCHW on {gpu} ({rel.split('/')[1]}): "
              "kernel ms per step")
        print(t)


if __name__ == "__main__":
    main()
