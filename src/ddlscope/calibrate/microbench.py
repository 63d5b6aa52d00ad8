"""Micro-benchmarks of one device through PyTorch: matmul throughput, STREAM memory bandwidth,
element-wise throughput. Each returns a Polars DataFrame.

Timing: an operation is repeated until one repetition lasts ``target_s`` (at least ``min_reps``
calls), and the median of ``repeats`` repetitions is kept. STREAM keeps the best of its trials
(McCalpin, "Memory Bandwidth and Machine Balance in Current High Performance Computers", IEEE TCCA
Newsletter 1995), the rate reached when nothing interferes; ddlscope calibrates a model of training
steps, which run through whatever the host does meanwhile, so it keeps the typical repetition (on
a quiet host the two agree; ``stat="best"`` gives STREAM's). On a GPU the device is synchronised
around each repetition.
"""

from __future__ import annotations

import itertools
import math
import statistics
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


def time_call(fn: Callable[[], object], device: str = "cpu", *, target_s: float = 0.05, repeats: int = 5,
              min_reps: int = 2, clock: str = "wall", stat: str = "median") -> float:
    """Median (``stat="best"``: minimum) time (s) per call of ``fn`` over ``repeats`` repetitions of
    ``reps`` calls each, where ``reps`` makes a repetition last about ``target_s`` (after one warm-up
    call), on ``clock`` (:data:`CLOCKS`)."""
    now = CLOCKS[clock]
    fn()
    _sync(device)
    t0 = now()
    fn()
    _sync(device)
    one = max(now() - t0, 1e-7)
    reps = max(min_reps, int(target_s / one))
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = now()
        for _ in range(reps):
            fn()
        _sync(device)
        times.append((now() - t0) / reps)
    return min(times) if stat == "best" else float(statistics.median(times))


def bench_matmul(
    peak_flop_per_s: dict[str, float],
    *,
    device: str = "cpu",
    precisions: Sequence[str] = ("fp32",),
    sizes: Sequence[int] = MATMUL_SIZES,
    target_s: float = 0.05,
    repeats: int = 5,
    clock: str = "wall",
    cold_bytes: float = 0.0,
    progress: Callable[[], None] | None = None,
) -> pl.DataFrame:
    """Square matmul throughput and efficiency against the peak: columns :data:`MATMUL_COLUMNS`.

    ``tf32`` enables TF32 matmuls (``torch.backends.cuda.matmul.allow_tf32``) on a GPU. With
    ``cold_bytes > 0`` the calls cycle through as many distinct operand pairs as fill
    ``cold_bytes`` (twice the last-level cache): operands come from memory, as a training step's
    weights and activations do, not from the cache the previous call filled.

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
            sets = max(1, math.ceil(cold_bytes / (2 * n * n * itemsize))) if cold_bytes > 0 else 1
            pool = [(torch.randn(n, n, device=device).to(dtype), torch.randn(n, n, device=device).to(dtype))
                    for _ in range(min(sets, 4096))]
            c = torch.empty(n, n, device=device, dtype=dtype)
            it = itertools.cycle(pool)

            def call(it=it, c=c) -> torch.Tensor:
                a, b = next(it)
                return torch.mm(a, b, out=c)

            t = time_call(call, device, target_s=target_s, repeats=repeats, clock=clock, min_reps=min(len(pool), 64))
            del pool
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
    stat: str = "best",
) -> pl.DataFrame:
    """STREAM copy and triad in FP32 on preallocated arrays: columns :data:`STREAM_COLUMNS`
    (best of ``repeats``, STREAM's convention, by default).

    Bytes counted as STREAM does (McCalpin 1995): copy reads ``a`` and writes ``c`` (2 arrays),
    triad reads ``b``, ``c`` and writes ``a`` (3 arrays); write-allocate traffic is not counted.
    """
    a = torch.rand(elements, device=device)
    b = torch.rand(elements, device=device)
    c = torch.rand(elements, device=device)
    array = elements * 4
    t_copy = time_call(lambda: c.copy_(a), device, target_s=target_s, repeats=repeats, clock=clock, stat=stat)
    t_triad = time_call(lambda: torch.add(b, c, alpha=3.0, out=a), device, target_s=target_s, repeats=repeats,
                        clock=clock, stat=stat)
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
    repeats: int = 5,
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
    repeats: int = 5,
    clock: str = "wall",
    cold_bytes: float = 0.0,
    progress: Callable[[], None] | None = None,
) -> pl.DataFrame:
    """3x3 convolution forward and backward (``aten.convolution`` and ``aten.convolution_backward``
    with input and weight gradients) in FP32: columns :data:`CONV_COLUMNS`. Convolutions are priced
    on their own curve because the library kernels (oneDNN, cuDNN) reach other efficiencies than a
    square GEMM of the same arithmetic intensity, the backward especially. ``cold_bytes`` as in
    :func:`bench_matmul`."""
    rows = []
    aten = torch.ops.aten
    for c in channels:
        one = (2 * batch * c * size * size + c * c * 9) * 4
        sets = max(1, math.ceil(cold_bytes / one)) if cold_bytes > 0 else 1
        pool = [(torch.randn(batch, c, size, size, device=device), torch.randn(c, c, 3, 3, device=device),
                 torch.randn(batch, c, size, size, device=device)) for _ in range(min(sets, 1024))]
        it = itertools.cycle(pool)

        def fwd_call(it=it) -> object:
            x, w, _ = next(it)
            return aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)

        def bwd_call(it=it) -> object:
            x, w, g = next(it)
            return aten.convolution_backward(g, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                             [True, True, False])

        reps = min(len(pool), 64)
        fwd = time_call(fwd_call, device, target_s=target_s, repeats=repeats, clock=clock, min_reps=reps)
        bwd = time_call(bwd_call, device, target_s=target_s, repeats=repeats, clock=clock, min_reps=reps)
        del pool
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


def bench_op_overhead(*, layers: int = 32, width: int = 4, target_s: float = 0.1, repeats: int = 5,
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


FAMILY_OPS: dict[str, tuple[str, ...]] = {
    "batch_norm": ("aten.native_batch_norm", "aten._native_batch_norm_legit",
                   "aten._native_batch_norm_legit_functional"),
    "batch_norm_backward": ("aten.native_batch_norm_backward",),
    "layer_norm": ("aten.native_layer_norm",),
    "layer_norm_backward": ("aten.native_layer_norm_backward",),
    "softmax": ("aten._softmax", "aten._log_softmax"),
    "softmax_backward": ("aten._softmax_backward_data", "aten._log_softmax_backward_data"),
    "dropout": ("aten.native_dropout",),
    "dropout_backward": ("aten.native_dropout_backward",),
    "embedding_bag": ("aten._embedding_bag", "aten._embedding_bag_forward_only"),
}
"""Memory-bound op families whose kernels run far from streaming speed on some devices (a CPU's
training-mode normalisations, its dropout random numbers, the exponentials of a softmax), by the
profiler's op names. Each is timed as PyTorch runs it and expressed as bandwidth over the bytes the
profiler counts for the op (:func:`ddlscope.profile.costs.op_bytes` of the captured call; dropout,
whose CPU path does not call the fused kernel, by the same rule by hand). Embedding-bag look-ups
run on a 20,000 x 16 table (DLRM's dimension). The dense gradients of embedding tables are left to
the element-wise curve: their cost follows the rows updated, not the bytes the profiler counts
(dominated by the zero-filled table), so a curve over bytes would misprice them."""
FAMILY_ELEMENTS: tuple[int, ...] = tuple(4**k for k in range(6, 12))
"""Element counts of the family sweep: 4,096 to 4.2 M."""
FAMILY_COLUMNS: dict[str, str] = {
    "family": "an op family of FAMILY_OPS",
    "elements": "elements of the activation",
    "bytes": "bytes the profiler counts for the op (read + written)",
    "time_s": "best time per call",
    "bandwidth_gb_s": "bytes / time_s / 1e9",
}


def _family_call(family: str, n: int, device: str) -> tuple[Callable[[], object], float]:
    """The benchmark call of ``family`` on an activation of ``n`` FP32 elements, and its bytes as
    the profiler counts them (``4 n`` per FP32 tensor of ``n`` elements, ``n`` per bool mask)."""
    aten = torch.ops.aten
    act = 4.0 * n
    if family.startswith("batch_norm"):
        c = 64
        x = torch.randn(8, c, max(n // (8 * c), 1), device=device)
        w, b = torch.ones(c, device=device), torch.zeros(c, device=device)
        rm, rv = torch.zeros(c, device=device), torch.ones(c, device=device)
        act = 4.0 * x.numel()
        if family == "batch_norm":
            return (lambda: aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)), 2 * act + 7 * 4 * c
        _, mean, invstd = aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
        g = torch.randn_like(x)
        return (lambda: aten.native_batch_norm_backward(g, x, w, rm, rv, mean, invstd, True, 1e-5,
                                                        [True, True, True])), 3 * act + 8 * 4 * c
    width = 1024
    x = torch.randn(max(n // width, 1), width, device=device)
    act = 4.0 * x.numel()
    rows = x.shape[0]
    if family.startswith("layer_norm"):
        w, b = torch.ones(width, device=device), torch.zeros(width, device=device)
        if family == "layer_norm":
            return (lambda: aten.native_layer_norm(x, [width], w, b, 1e-5)), 2 * act + 2 * 4 * width + 8 * rows
        _, mean, rstd = aten.native_layer_norm(x, [width], w, b, 1e-5)
        g = torch.randn_like(x)
        return (lambda: aten.native_layer_norm_backward(g, x, [width], mean, rstd, w, b, [True, True, True])), (
            3 * act + 4 * 4 * width + 8 * rows)
    if family == "softmax":
        return (lambda: aten._log_softmax(x, -1, False)), 2 * act
    if family == "softmax_backward":
        out = aten._log_softmax(x, -1, False)
        g = torch.randn_like(x)
        return (lambda: aten._log_softmax_backward_data(g, out, -1, torch.float32)), 3 * act
    if family == "dropout":
        return (lambda: torch.nn.functional.dropout(x, 0.1, True)), 2 * act + act / 4
    if family == "dropout_backward":
        mask = torch.rand_like(x) > 0.1
        g = torch.randn_like(x)
        return (lambda: aten.native_dropout_backward(g, mask, 1 / 0.9)), 2 * act + act / 4
    if family == "embedding_bag":
        rows, dim = 20_000, 16
        k = max(n // dim, 1)
        weight = torch.randn(rows, dim, device=device)
        idx = torch.randint(0, rows, (k,), device=device)
        offsets = torch.arange(k, device=device)

        def fn() -> object:
            return aten._embedding_bag(weight, idx, offsets, False, 0)

        return fn, _captured_bytes(fn, FAMILY_OPS[family])
    raise ValueError(f"family: expected one of {', '.join(FAMILY_OPS)}, got {family!r}")


def _captured_bytes(fn: Callable[[], object], names: Sequence[str]) -> float:
    """Bytes :func:`ddlscope.profile.costs.op_bytes` counts for the first op named in ``names`` that
    ``fn`` dispatches (the profiler's own rule, so the curve and the op table agree).

    Raises:
        ValueError: ``fn`` dispatches none of ``names``.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    from ddlscope.profile.costs import op_bytes, tensors_in

    found: list[float] = []

    class _Capture(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not found and str(func.overloadpacket) in names:
                read, write = op_bytes(func, args, kwargs or {}, tensors_in(out))
                found.append(float(read + write))
            return out

    with _Capture():
        fn()
    if not found:
        raise ValueError(f"family benchmark: none of {list(names)} was dispatched")
    return found[0]


def bench_families(
    *,
    device: str = "cpu",
    families: Sequence[str] = tuple(FAMILY_OPS),
    elements: Sequence[int] = FAMILY_ELEMENTS,
    target_s: float = 0.05,
    repeats: int = 5,
    clock: str = "wall",
    progress: Callable[[], None] | None = None,
) -> pl.DataFrame:
    """Throughput of the :data:`FAMILY_OPS` families over activation sizes: columns
    :data:`FAMILY_COLUMNS`. Dropout runs through ``torch.nn.functional.dropout`` (on a CPU: random
    numbers, scale, multiply; the profiler records the fused GPU kernel ``native_dropout`` with a
    bool mask, whose bytes are the ones counted)."""
    rows = []
    for fam in families:
        for n in elements:
            fn, nbytes = _family_call(fam, n, device)
            t = time_call(fn, device, target_s=target_s, repeats=repeats, clock=clock)
            rows.append({"family": fam, "elements": n, "bytes": float(nbytes), "time_s": t,
                         "bandwidth_gb_s": nbytes / t / 1e9})
        if progress:
            progress()
    return pl.DataFrame(rows)


def cpu_time_available() -> bool:
    """Whether this platform gives a thread's CPU time (``time.thread_time``), needed by the ``cpu`` clock."""
    try:
        return time.thread_time() >= 0
    except (OSError, AttributeError):  # pragma: no cover - platform dependent
        return False
