"""How many passes over its tensor a training batch norm costs, measured on a real Kineto trace.

The op-level model (:mod:`ddlscope.model.compute`) prices a memory-bound op by the bytes its
operands and results hold. A training batch norm reads its input more than once: the batch
statistics must be known before any element is normalised (forward: read x for mean and variance,
read x again and write y), and the backward needs ``sum(dy)`` and ``sum(dy * x_hat)`` over the batch
before any ``dx`` (read dy and x, then read them again and write dx): 3 passes where the counted
bytes say 2, 5 where they say 3 (Ioffe and Szegedy, ICML 2015, the backward formulas; cuDNN's
non-persistent spatial kernels ``bn_fw_tr_1C11_kernel_NCHW`` / ``bn_bw_1C11_kernel_new``).

This script measures it on ``param_dlrm/resnet_kineto.json.gz`` (30 iterations of an FP32
ResNet-18 on an RTX 2080 Ti; the trace has no shapes, but 20 batch-norm and 17 ReLU kernels per
iteration fix the network: ResNet-18's 20 BN layers (stem, 2 per basic block, 3 downsample) and
17 ReLUs). In ResNet-18 every ReLU follows a BN on a tensor of the same shape, so the ratio of BN
to ReLU kernel time per element, times the ReLU's passes (forward ``clamp_min``: read x, write y =
2; backward ``threshold_backward``: read dy and y, write dx = 3), is the BN's passes, whatever the
batch size and the image size (both cancel), provided both kernels stream at the same bandwidth.

Elements per image at 224 px (channels x height x width of each tensor):
ReLU: stem 64x112x112 + 4 x 64x56x56 + 4 x 128x28x28 + 4 x 256x14x14 + 4 x 512x7x7;
BN: the same plus stem's BN is the stem ReLU's tensor, and the 3 downsample BNs add one block
output each at stages 2-4 (128x28x28, 256x14x14, 512x7x7).

Run: ``python benchmarks/trace_batchnorm_passes.py [TRACE]`` (default: the shared trace).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

RELU_ELEMENTS = 64 * 112 * 112 + 4 * 64 * 56 * 56 + 4 * 128 * 28 * 28 + 4 * 256 * 14 * 14 + 4 * 512 * 7 * 7
BN_ELEMENTS = RELU_ELEMENTS + 128 * 28 * 28 + 256 * 14 * 14 + 512 * 7 * 7


def kernel_times_us(trace: Path) -> dict[str, float]:
    """Total kernel time (us) per class: ``bn_forward``, ``bn_backward``, ``relu_forward``,
    ``relu_backward``, and the kernel counts of each (``<class>_count``)."""
    with gzip.open(trace) if trace.suffix == ".gz" else open(trace) as f:
        events = json.load(f)["traceEvents"]
    out: dict[str, float] = {}
    rules = {"bn_forward": ("bn_fw_tr_1C11",), "bn_backward": ("bn_bw_1C11",),
             "relu_forward": ("launch_clamp_scalar",), "relu_backward": ("threshold_kernel",)}
    for e in events:
        if e.get("cat") != "kernel":
            continue
        for key, pats in rules.items():
            if any(p in e["name"] for p in pats):
                out[key] = out.get(key, 0.0) + float(e["dur"])
                out[f"{key}_count"] = out.get(f"{key}_count", 0.0) + 1
    return out


def main() -> None:
    if len(sys.argv) > 1:
        trace = Path(sys.argv[1])
    else:
        from ddlscope.shared_data import find_shared_data

        data = find_shared_data()
        if data is None:
            raise SystemExit("shared/data not found (set DDLSCOPE_SHARED_DATA)")
        trace = data / "param_dlrm" / "resnet_kineto.json.gz"
    t = kernel_times_us(trace)
    per_elem = BN_ELEMENTS / RELU_ELEMENTS
    fwd = t["bn_forward"] / t["relu_forward"] / per_elem * 2
    bwd = t["bn_backward"] / t["relu_backward"] / per_elem * 3
    print(f"trace: {trace}")
    print(f"kernels: BN forward {t['bn_forward_count']:.0f}, BN backward {t['bn_backward_count']:.0f}, "
          f"ReLU forward {t['relu_forward_count']:.0f}, ReLU backward {t['relu_backward_count']:.0f}")
    print(f"time (ms, all iterations): BN fwd {t['bn_forward'] / 1e3:.1f}, BN bwd {t['bn_backward'] / 1e3:.1f}, "
          f"ReLU fwd {t['relu_forward'] / 1e3:.1f}, ReLU bwd {t['relu_backward'] / 1e3:.1f}")
    print(f"BN / ReLU elements (ResNet-18): {per_elem:.4f}")
    print(f"batch norm forward: {fwd:.2f} passes over its tensor (counted bytes: 2; two-pass algorithm: 3)")
    print(f"batch norm backward: {bwd:.2f} passes over its tensor (counted bytes: 3; two-pass algorithm: 5)")


if __name__ == "__main__":
    main()
