"""Micro-benchmarks of one device through PyTorch: matmul throughput, STREAM memory bandwidth,
element-wise throughput. Each returns a Polars DataFrame.

Timing: an operation is repeated until one repetition lasts ``target_s`` (at least ``min_reps``
calls), and the best of ``repeats`` repetitions is kept: the rate the device sustains when nothing
else interferes, the STREAM convention (McCalpin, "Memory Bandwidth and Machine Balance in Current
High Performance Computers", IEEE TCCA Newsletter 1995: best of ten trials). On a GPU the device is
synchronised around each repetition.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence

import polars as pl
import torch

DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

MATMUL_SIZES: tuple[int, ...] = (16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
"""Square matmul sides of the default sweep (``n x n @ n x n``)."""
ELEMENTWISE_ELEMENTS: tuple[int, ...] = tuple(4**k for k in range(4, 13))
"""Element counts of the element-wise sweep: 256 to 16.8 M (1 KB to 64 MB per FP32 operand)."""

MATMUL_COLUMNS: dict[str, str] = {
    "precision": "fp32, tf32, fp16 or bf16",
    "n": "matrix side (m = n = k)",
    "flops": "2 n^3 per call",
    "bytes": "3 n^2 x itemsize (read A, B, write C once)",
    "intensity_flops_per_byte": "flops / bytes = 2 n / (3 itemsize)",
    "time_s": "best time per call",
    "flop_per_s": "flops / time_s",
    "peak_flop_per_s": "the device's peak for the precision",
    "efficiency": "flop_per_s / peak_flop_per_s",
}
STREAM_COLUMNS: dict[str, str] = {
    "kernel": "copy (c = a) or triad (a = b + s c)",
    "elements": "array length",
    "array_bytes": "bytes of one array",
    "bytes": "bytes counted per call: copy 2 x array, triad 3 x array (STREAM convention)",
    "time_s": "best time per call",
    "bandwidth_gb_s": "bytes / time_s / 1e9",
}
ELEMENTWISE_COLUMNS: dict[str, str] = {
    "op": "add (c = a + b, allocating c) or relu (c = relu(a), allocating c)",
    "elements": "elements per operand",
    "bytes": "bytes read + written: add 3 x, relu 2 x operand bytes",
    "time_s": "best time per call (including the output's allocation, as in training)",
    "bandwidth_gb_s": "bytes / time_s / 1e9",
}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}
"""Clocks: ``wall`` (``time.perf_counter``) and ``cpu``, the calling thread's CPU time
(``time.thread_time``): on a device of one CPU core running one thread it is the time the core
worked for the call, whatever else the host runs (a shared machine's other processes do not
inflate it, as they do wall time)."""


def time_call(fn: Callable[[], object], device: str = "cpu", *, target_s: float = 0.05, repeats: int = 3,
              min_reps: int = 2, clock: str = "wall") -> float:
    """Best time (s) per call of ``fn`` over ``repeats`` repetitions of ``reps`` calls each, where
    ``reps`` makes a repetition last about ``target_s`` (after one warm-up call), on ``clock``
    (:data:`CLOCKS`)."""
    now = CLOCKS[clock]
    fn()
    _sync(device)
    t0 = now()
    fn()
    _sync(device)
    one = max(now() - t0, 1e-7)
    reps = max(min_reps, int(target_s / one))
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        t0 = now()
        for _ in range(reps):
            fn()
        _sync(device)
        best = min(best, (now() - t0) / reps)
    return best


def bench_matmul(
    peak_flop_per_s: dict[str, float],
    *,
    device: str = "cpu",
    precisions: Sequence[str] = ("fp32",),
    sizes: Sequence[int] = MATMUL_SIZES,
    target_s: float = 0.05,
    repeats: int = 3,
    clock: str = "wall",
    progress: Callable[[], None] | None = None,
) -> pl.DataFrame:
    """Square matmul throughput and efficiency against the peak: columns :data:`MATMUL_COLUMNS`.

    ``tf32`` enables TF32 matmuls (``torch.backends.cuda.matmul.allow_tf32``) on a GPU.

    Raises:
        ValueError: an unknown precision.
    """
    rows = []
    for prec in precisions:
        if prec not in DTYPES:
            raise ValueError(f"precision: expected one of {', '.join(DTYPES)}, got {prec!r}")
        dtype = DTYPES[prec]
        if device.startswith("cuda"):  # pragma: no cover - needs a GPU
            torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
        itemsize = torch.empty((), dtype=dtype).element_size()
        for n in sizes:
            a = torch.randn(n, n, device=device).to(dtype)
            b = torch.randn(n, n, device=device).to(dtype)
            c = torch.empty(n, n, device=device, dtype=dtype)
            t = time_call(lambda a=a, b=b, c=c: torch.mm(a, b, out=c), device, target_s=target_s, repeats=repeats,
                          clock=clock)
            flops, nbytes = 2.0 * n**3, 3.0 * n * n * itemsize
            rows.append({"precision": prec, "n": n, "flops": flops, "bytes": nbytes,
                         "intensity_flops_per_byte": flops / nbytes, "time_s": t, "flop_per_s": flops / t,
                         "peak_flop_per_s": peak_flop_per_s[prec], "efficiency": flops / t / peak_flop_per_s[prec]})
            if progress:
                progress()
    return pl.DataFrame(rows)


def stream_elements(llc_bytes: float, itemsize: int = 4) -> int:
    """STREAM array length: each array at least 4x the last-level cache (McCalpin's rule), at
    least 16 M elements."""
    return int(max(4 * llc_bytes / itemsize, 16 * 2**20))


def bench_stream(
    *, device: str = "cpu", elements: int = 32 * 2**20, target_s: float = 0.1, repeats: int = 5, clock: str = "wall",
) -> pl.DataFrame:
    """STREAM copy and triad in FP32 on preallocated arrays: columns :data:`STREAM_COLUMNS`.

    Bytes counted as STREAM does (McCalpin 1995): copy reads ``a`` and writes ``c`` (2 arrays),
    triad reads ``b``, ``c`` and writes ``a`` (3 arrays); write-allocate traffic is not counted.
    """
    a = torch.rand(elements, device=device)
    b = torch.rand(elements, device=device)
    c = torch.rand(elements, device=device)
    array = elements * 4
    t_copy = time_call(lambda: c.copy_(a), device, target_s=target_s, repeats=repeats, clock=clock)
    t_triad = time_call(lambda: torch.add(b, c, alpha=3.0, out=a), device, target_s=target_s, repeats=repeats,
                        clock=clock)
    return pl.DataFrame([
        {"kernel": "copy", "elements": elements, "array_bytes": array, "bytes": 2 * array, "time_s": t_copy,
         "bandwidth_gb_s": 2 * array / t_copy / 1e9},
        {"kernel": "triad", "elements": elements, "array_bytes": array, "bytes": 3 * array, "time_s": t_triad,
         "bandwidth_gb_s": 3 * array / t_triad / 1e9},
    ])


def bench_elementwise(
    *,
    device: str = "cpu",
    elements: Sequence[int] = ELEMENTWISE_ELEMENTS,
    target_s: float = 0.05,
    repeats: int = 3,
    clock: str = "wall",
    cold_bytes: float = 0.0,
    progress: Callable[[], None] | None = None,
) -> pl.DataFrame:
    """Out-of-place element-wise throughput over sizes, FP32: columns :data:`ELEMENTWISE_COLUMNS`.

    The result is allocated by each call, as a training step's element-wise ops allocate theirs:
    small tensors measure the per-op overhead (dispatch, allocation), large ones the memory
    bandwidth plus the cost of fresh pages. With ``cold_bytes > 0`` the calls cycle through as many
    distinct input tensors as make up ``cold_bytes`` (set it to twice the last-level cache): each
    call then reads inputs that are not in cache, as a training step's ops read activations written
    long before, instead of the same cache-hot operands again.
    """
    rows = []
    for n in elements:
        sets = max(1, math.ceil(cold_bytes / (2 * 4 * n))) if cold_bytes > 0 else 1
        pool = [(torch.rand(n, device=device), torch.rand(n, device=device)) for _ in range(sets)]
        it = itertools.cycle(pool)

        def add(it=it) -> torch.Tensor:
            a, b = next(it)
            return torch.add(a, b)

        def relu(it=it) -> torch.Tensor:
            return torch.relu(next(it)[0])

        t_add = time_call(add, device, target_s=target_s, repeats=repeats, clock=clock, min_reps=min(sets, 64))
        t_relu = time_call(relu, device, target_s=target_s, repeats=repeats, clock=clock, min_reps=min(sets, 64))
        for op, nbytes, t in (("add", 3 * 4 * n, t_add), ("relu", 2 * 4 * n, t_relu)):
            rows.append({"op": op, "elements": n, "bytes": float(nbytes), "time_s": t,
                         "bandwidth_gb_s": nbytes / t / 1e9})
        del pool, it
        if progress:
            progress()
    return pl.DataFrame(rows)


CONV_CHANNELS: tuple[int, ...] = (16, 32, 64, 128, 256)
"""Channel counts of the convolution sweep (3x3, stride 1, batch 8, 16 x 16 maps, C in = C out)."""
CONV_COLUMNS: dict[str, str] = {
    "op": "convolution (forward) or convolution_backward (input and weight gradients)",
    "precision": "fp32",
    "channels": "input = output channels",
    "flops": "2 N H W C_out C_in 9 (forward); twice that for the two gradients",
    "bytes": "input, weight and output once each (backward: grad_out, input, weight read; grads written)",
    "intensity_flops_per_byte": "flops / bytes",
    "time_s": "best time per call",
    "efficiency": "flops / time_s / peak",
}


def bench_conv(
    peak_flop_per_s: float,
    *,
    device: str = "cpu",
    channels: Sequence[int] = CONV_CHANNELS,
    batch: int = 8,
    size: int = 16,
    target_s: float = 0.05,
    repeats: int = 3,
    clock: str = "wall",
    progress: Callable[[], None] | None = None,
) -> pl.DataFrame:
    """3x3 convolution forward and backward (``aten.convolution`` and ``aten.convolution_backward``
    with input and weight gradients) in FP32: columns :data:`CONV_COLUMNS`. Convolutions are priced
    on their own curve because the library kernels (oneDNN, cuDNN) reach other efficiencies than a
    square GEMM of the same arithmetic intensity, the backward especially."""
    rows = []
    aten = torch.ops.aten
    for c in channels:
        x = torch.randn(batch, c, size, size, device=device)
        w = torch.randn(c, c, 3, 3, device=device)
        y = torch.nn.functional.conv2d(x, w, padding=1)
        g = torch.randn_like(y)
        fwd = time_call(lambda x=x, w=w: aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
                        device, target_s=target_s, repeats=repeats, clock=clock)
        bwd = time_call(lambda g=g, x=x, w=w: aten.convolution_backward(
            g, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, False]),
            device, target_s=target_s, repeats=repeats, clock=clock)
        flops = 2.0 * batch * size * size * c * c * 9
        act, wb = batch * c * size * size * 4.0, c * c * 9 * 4.0
        for op, f, nbytes, t in (("convolution", flops, 2 * act + wb, fwd),
                                 ("convolution_backward", 2 * flops, 3 * act + 2 * wb, bwd)):
            rows.append({"op": op, "precision": "fp32", "channels": c, "flops": f, "bytes": nbytes,
                         "intensity_flops_per_byte": f / nbytes, "time_s": t,
                         "efficiency": f / t / peak_flop_per_s})
        if progress:
            progress()
    return pl.DataFrame(rows)


def _tiny_mlp_step(layers: int, width: int) -> tuple[Callable[[], None], Callable[[], None]]:
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, weight_decay=1e-4)
    x = torch.randn(1, width)

    def step() -> None:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, step


def bench_op_overhead(*, layers: int = 32, width: int = 4, target_s: float = 0.1, repeats: int = 3,
                      clock: str = "wall") -> dict[str, float]:
    """Framework cost per operator of a training step: a step (forward, backward, SGD update) of
    ``layers`` tiny ``Linear(width, width)`` layers, whose ops move and compute almost nothing,
    divided by the ATen operators it dispatches (counted with a ``TorchDispatchMode``).

    Returns ``{"op_overhead_s": ..., "ops_per_step": ..., "step_s": ...}``.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    step, _ = _tiny_mlp_step(layers, width)
    step()
    counter = _Count()
    with counter:
        step()
    t = time_call(step, "cpu", target_s=target_s, repeats=repeats, clock=clock)
    return {"op_overhead_s": t / max(counter.n, 1), "ops_per_step": float(counter.n), "step_s": t}
