"""One short GPU run that measures what the compute model assumes, beside its predictions (issue 14).

Where the shared tables say the model errs, each figure is printed beside the model's prediction for
the same work.

The open questions, and the check that answers each (docs/model.md, "What would settle the rest"):

1. **Misaligned GEMMs.** Transformer-XL's 267,735-word softmax is the largest GEMM of the Lambda
   rows the model over-predicts most on A100/H100 (+35-110 % under AMP). 267,735 is odd: cuBLAS
   cannot use its 16-byte-aligned tensor-core kernels (cuBLAS documentation, "Tensor Core Usage";
   pytorch/pytorch#146817 shows an ``align1`` kernel on A100). The model now prices such a GEMM at
   ``MISALIGNED_GEMM_FLOP_PER_SM_CYCLE`` (410 FLOP per SM per cycle, fitted on the Lambda
   Transformer-XL rows, ``benchmarks/fidelity_misaligned_gemm.py``), and 267,736 words at the
   tensor-core rate. Check ``vocab_head``: the projection and its cross-entropy at both sizes, FP16
   and TF32: the measured rate of the odd size is the number the fit stands in for.
2. **16-bit element-wise kernels.** The model prices memory-bound ops at ``memory_eff`` of the
   DRAM bandwidth whatever their dtype, so AMP halves their time. Check ``elementwise``: a chain of
   element-wise ops on 2^26 elements in FP32 and FP16.
3. **NCHW tensor-core convolutions.** The model adds cuDNN's layout transposes
   (``TRANSPOSE_PASSES`` x the convolution's bytes, memory-bound). Lambda's NCHW ResNet-50 under
   AMP is over-predicted by 21-39 % on A100/H100, DeepLearningExamples' NHWC one is not. Check
   ``resnet50`` in FP16, NCHW and channels-last, and TF32 NCHW.
4. **The tensor clock.** The model holds A100 SXM4 / H100 SXM5 at their boost clock under tensor
   load (``GPUSpec.sustained_tensor_fraction``). Check ``clock``: the SM clock and board power
   ``nvidia-smi`` reports during 15 s of FP16 GEMMs, beside the model's clock.

Every step check profiles the same factory on the meta device (:func:`ddlscope.profile.profile_model`,
SGD with momentum, as the run trains it) and prices it on this GPU with the catalog defaults
(:func:`ddlscope.model.compute.predict_single_gpu`); the run trains it here: forward (under
``torch.autocast`` for FP16, with a ``GradScaler``), backward, SGD step, gradients set to None; the
median of ``--steps`` timed steps after ``--warmup``, the device synchronised around each.

Columns of ``steps.csv``: ``check``, ``workload``, ``precision``, ``layout``, ``batch``,
``predicted_ms``, ``measured_ms`` (per step), ``error`` (predicted / measured - 1), and the model's
``compute_bound_ms`` / ``memory_bound_ms`` / ``host_ms``. ``clock.csv``: the clock check's samples
summarised (median SM clock MHz, power W, the model's tensor clock MHz).

Run on a GPU machine (about 3 minutes on an H100):
``PYTHONPATH=src python benchmarks/device_checks_compute.py --out "$OUT"``.
``--smoke`` runs every step check at tiny sizes on the CPU, priced for ``--gpu`` (default
A100-SXM4-80GB): it checks that the script runs, not the model (a CPU is not that GPU).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import torch
from torch import nn

from ddlscope.model.compute import SingleGpuCase, predict_single_gpu
from ddlscope.profile import profile_model
from ddlscope.specs.catalog import CatalogError, builtin_catalog
from ddlscope.validate.models import call_model, real_batch

TXL_BASE_D_MODEL = 512
"""Transformer-XL base's model width (DeepLearningExamples ``wt103_base.yaml``: ``d_model 512``)."""
WT103_WORDS = 267_735
"""WikiText-103's word vocabulary (:data:`ddlscope.profile.zoo.transformer_xl.WT103_VOCAB`): odd."""


class VocabHead(nn.Module):
    """The output projection of a word-level language model and its loss: ``(tokens, d) ->`` logits
    ``(tokens, words)`` by ``Linear(d, words, bias=False)``, then mean cross-entropy. Inputs:
    ``x`` (tokens, d) float, ``target`` (tokens,) int64."""

    def __init__(self, d_model: int, words: int):
        super().__init__()
        self.proj = nn.Linear(d_model, words, bias=False)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(self.proj(x), target)


def vocab_head(words: int, tokens: int) -> Callable[..., tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]]:
    """A factory of :class:`VocabHead` at Transformer-XL base's width and ``words`` words, the batch
    ``batch_size`` x ``tokens`` tokens (``factory(batch_size=...)``, the zoo's convention)."""

    def factory(batch_size: int = 1) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
        n = batch_size * tokens
        return VocabHead(TXL_BASE_D_MODEL, words), (torch.zeros(n, TXL_BASE_D_MODEL),
                                                     torch.zeros(n, dtype=torch.int64))

    factory.__name__ = f"vocab_head_{words}"
    return factory


class ElementwiseChain(nn.Module):
    """``ops`` element-wise passes over its input, each ``y = relu(y * w + 1)`` with ``w`` a 0-dim
    parameter (a 0-dim tensor keeps a 16-bit input 16-bit under type promotion), then the mean:
    memory-bound work in the input's dtype. Input ``x`` of any shape."""

    def __init__(self, ops: int):
        super().__init__()
        self.ops = ops
        self.w = nn.Parameter(torch.tensor(1.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for _ in range(self.ops):
            y = torch.relu(y * self.w + 1.0)
        return y.float().mean()


def elementwise(elements: int, dtype: torch.dtype, ops: int = 8) -> Callable[..., tuple[nn.Module, torch.Tensor]]:
    """A factory of :class:`ElementwiseChain` on ``batch_size`` x ``elements`` values of ``dtype``."""

    def factory(batch_size: int = 1) -> tuple[nn.Module, torch.Tensor]:
        return ElementwiseChain(ops), torch.zeros(batch_size, elements, dtype=dtype)

    factory.__name__ = f"elementwise_{str(dtype).removeprefix('torch.')}"
    return factory


def resnet50(image_size: int) -> Callable[..., tuple[nn.Module, Any]]:
    """The zoo's ResNet-50 v1.5 at ``image_size``."""
    from ddlscope.profile.zoo.vision import resnet50 as zoo_resnet50

    def factory(batch_size: int = 1) -> tuple[nn.Module, Any]:
        return zoo_resnet50(batch_size=batch_size, image_size=image_size)

    factory.__name__ = "resnet50"
    return factory


@dataclass(frozen=True)
class StepCheck:
    """One measured step beside its prediction: ``check`` (the question, module docstring),
    ``workload`` (label), ``factory`` (zoo convention), ``batch``, ``precision`` (``fp32``, ``tf32``,
    ``fp16``), ``layout`` (``nchw`` or ``nhwc``: ``channels_last`` for the run, ``conv_layout`` for
    the model; ``-`` for a model without convolutions)."""

    check: str
    workload: str
    factory: Callable[..., tuple[nn.Module, Any]]
    batch: int
    precision: str
    layout: str = "-"


def transformer_xl_base_softmax(seq_len: int) -> Callable[..., tuple[nn.Module, Any]]:
    """The zoo's ``transformer_xl_base_softmax`` (the model of Lambda's Transformer-XL base rows) at
    ``seq_len`` tokens."""
    from ddlscope.profile.zoo.transformer_xl import transformer_xl_base_softmax as zoo_txl

    def factory(batch_size: int = 1) -> tuple[nn.Module, Any]:
        return zoo_txl(batch_size=batch_size, seq_len=seq_len)

    factory.__name__ = "transformer_xl_base_softmax"
    return factory


def step_checks(smoke: bool) -> dict[str, StepCheck]:
    """The step checks of the module docstring by key; ``smoke``: tiny sizes, FP32 in place of
    FP16 autocast (a CPU has none worth timing), BF16 data for the 16-bit element-wise check and
    vocabularies of 1,001 / 1,008 words."""
    tokens = 16 if smoke else 4096  # Lambda's Transformer-XL base rows: 14-104 x 192 tokens
    elements = 1 << (10 if smoke else 26)
    image, batch = (32, 2) if smoke else (224, 256)
    txl_batch, txl_seq = (1, 8) if smoke else (16, 192)
    amp = "fp32" if smoke else "fp16"
    out: dict[str, StepCheck] = {}
    for p in ("tf32", amp):
        for kind, words in (("odd", WT103_WORDS), ("aligned", WT103_WORDS + 1)):
            w = (1001 if kind == "odd" else 1008) if smoke else words
            out[f"vocab {kind} {p}"] = StepCheck("vocab_head", f"{TXL_BASE_D_MODEL} x {w:,} words, {tokens} tokens",
                                                 vocab_head(w, tokens), 1, p)
    for bits, p, dtype in (("32-bit", "fp32", torch.float32),
                           ("16-bit", "fp32" if smoke else "fp16", torch.bfloat16 if smoke else torch.float16)):
        out[f"elementwise {bits}"] = StepCheck("elementwise", f"8 passes over {elements:,} {str(dtype)[6:]}",
                                               elementwise(elements, dtype), 1, p)
    out["resnet50 tf32 nchw"] = StepCheck("resnet50", f"ResNet-50 {image}px", resnet50(image), batch, "tf32", "nchw")
    for layout in ("nchw", "nhwc"):
        out[f"resnet50 {amp} {layout}"] = StepCheck("resnet50", f"ResNet-50 {image}px", resnet50(image), batch,
                                                    amp, layout)
    for p in ("tf32", amp):
        out[f"txl {p}"] = StepCheck("transformer_xl", f"Transformer-XL base, full softmax, {txl_seq} tokens",
                                    transformer_xl_base_softmax(txl_seq), txl_batch, p)
    return out


def quotient_pairs(smoke: bool) -> list[tuple[str, str, str]]:
    """(what, numerator key, denominator key) of :func:`step_checks`: the quotients that answer the
    questions of the module docstring without the model's absolute calibration."""
    amp = "fp32" if smoke else "fp16"
    return [
        ("misaligned over aligned vocabulary, TF32", "vocab odd tf32", "vocab aligned tf32"),
        (f"misaligned over aligned vocabulary, {amp.upper()}", f"vocab odd {amp}", f"vocab aligned {amp}"),
        ("element-wise 32-bit over 16-bit data", "elementwise 32-bit", "elementwise 16-bit"),
        (f"ResNet-50 TF32 over {amp.upper()} (AMP speed-up)", "resnet50 tf32 nchw", f"resnet50 {amp} nchw"),
        (f"ResNet-50 {amp.upper()} NCHW over NHWC", f"resnet50 {amp} nchw", f"resnet50 {amp} nhwc"),
        (f"Transformer-XL TF32 over {amp.upper()} (AMP speed-up)", "txl tf32", f"txl {amp}"),
    ]


def predict(check: StepCheck, gpu: str) -> dict[str, float]:
    """The model's step for ``check`` on catalog GPU ``gpu``, catalog defaults: ``predicted_ms``,
    ``compute_bound_ms``, ``memory_bound_ms``, ``host_ms``."""
    prof = profile_model(check.factory, batch_size=check.batch, precision=check.precision, optimizer="sgd", gpu=gpu)
    case = SingleGpuCase(prof.ops, gpu, check.precision, check.batch, label=check.workload,
                         conv_layout="nhwc" if check.layout == "nhwc" else "nchw")
    row = predict_single_gpu([case]).row(0, named=True)
    return {"predicted_ms": 1e3 * row["step_s"], "compute_bound_ms": 1e3 * row["compute_bound_s"],
            "memory_bound_ms": 1e3 * row["memory_bound_s"], "host_ms": 1e3 * row["host_s"]}


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


@contextlib.contextmanager
def _precision(p: str) -> Iterator[None]:
    """TF32 matmuls and convolutions on for ``tf32`` and ``fp16`` (as NGC containers run), off for
    ``fp32``; restored after."""
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    on = p != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def measure(check: StepCheck, device: str, steps: int, warmup: int) -> float:
    """Median milliseconds of one training step of ``check`` on ``device`` (module docstring)."""
    torch.manual_seed(0)
    model, batch = check.factory(batch_size=check.batch)
    fmt = torch.channels_last if check.layout == "nhwc" else torch.contiguous_format

    def move(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            x = x.to(device)
            return x.contiguous(memory_format=fmt) if x.dim() == 4 else x
        return type(x)(move(v) for v in x) if isinstance(x, tuple | list) else x

    model = model.to(device, memory_format=fmt) if check.layout == "nhwc" else model.to(device)
    batch = move(real_batch(batch))
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, weight_decay=1e-4)
    amp = check.precision == "fp16"
    scaler = torch.amp.GradScaler(device, enabled=amp)

    def step() -> None:
        with torch.autocast(device, dtype=torch.float16, enabled=amp):
            loss = call_model(model, batch)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    times = []
    with _precision(check.precision):
        for i in range(warmup + steps):
            _sync(device)
            t0 = time.perf_counter()
            step()
            _sync(device)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


SMI_FIELDS = ("clocks.sm", "clocks.max.sm", "power.draw", "power.limit", "temperature.gpu")
"""``nvidia-smi --query-gpu`` fields the clock check samples (``nvidia-smi --help-query-gpu``: SM clock
MHz, its maximum MHz, board power W, the enforced power limit W, temperature C)."""


def parse_smi(text: str) -> pl.DataFrame:
    """``nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits`` lines -> one row per
    line, one Float64 column per field; a line that is not numbers (``[N/A]``, a cut last line) is a
    null row, counted by the caller, not dropped."""
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            rows.append([float(p) for p in parts] if len(parts) == len(SMI_FIELDS) else [None] * len(SMI_FIELDS))
        except ValueError:
            rows.append([None] * len(SMI_FIELDS))
    return pl.DataFrame(rows, schema={f: pl.Float64 for f in SMI_FIELDS}, orient="row")


def clock_check(gpu: str, seconds: float = 15.0) -> pl.DataFrame:  # pragma: no cover - needs a GPU
    """Median SM clock and power over ``seconds`` of 8192^3 FP16 GEMMs (FP32 accumulate, cuBLAS's
    default for ``torch.matmul`` of FP16), sampled every 250 ms by ``nvidia-smi``, the first 3 s left
    out (boost settling), beside the model's tensor clock (boost x ``sustained_tensor_fraction``)."""
    spec = builtin_catalog().gpu(gpu)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits",
                            "-lms", "250", "-i", "0"], stdout=subprocess.PIPE, text=True)
    stop = threading.Event()
    calls = 0

    def work() -> None:
        nonlocal calls
        while not stop.is_set():
            torch.matmul(a, b)
            calls += 1
            if calls % 16 == 0:
                torch.cuda.synchronize()

    t0 = time.perf_counter()
    th = threading.Thread(target=work)
    th.start()
    time.sleep(seconds)
    stop.set()
    th.join()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    smi.terminate()
    out, _ = smi.communicate(timeout=10)
    s = parse_smi(out)
    kept = s.slice(12).drop_nulls()  # 3 s of 250 ms samples
    return pl.DataFrame({
        "gpu": [spec.name], "samples": [kept.height], "unreadable_samples": [s.null_count()["clocks.sm"][0]],
        "sm_clock_mhz_median": [kept["clocks.sm"].median()], "max_clock_mhz": [kept["clocks.max.sm"].max()],
        "power_w_median": [kept["power.draw"].median()], "power_limit_w": [kept["power.limit"].max()],
        "temperature_c_max": [kept["temperature.gpu"].max()],
        "gemm_tflop_per_s": [calls * 2 * 8192**3 / wall / 1e12],
        "catalog_boost_mhz": [spec.boost_clock_mhz],
        "model_tensor_clock_mhz": [spec.boost_clock_mhz * spec.sustained_tensor_fraction()],
    })


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("device_checks"), help="folder for steps.csv, clock.csv")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (checks the script, not the model)")
    ap.add_argument("--only", default=None, help="comma-separated check keys (default: all; the keys are "
                    "printed in the table)")
    ap.add_argument("--gpu", default=None, help="catalog GPU to price for (default: the CUDA device's; "
                    "A100-SXM4-80GB with --smoke)")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        raise SystemExit(f"--steps: expected >= 1, got {args.steps}; --warmup: expected >= 0, got {args.warmup}")
    cat = builtin_catalog()
    if not args.smoke and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run on a GPU machine, or --smoke to check the script on the CPU")
    device = "cpu" if args.smoke else "cuda"
    wanted_gpu = args.gpu or ("A100-SXM4-80GB" if args.smoke else torch.cuda.get_device_name(0))
    try:
        gpu = cat.gpu(wanted_gpu).name
    except CatalogError as exc:
        raise SystemExit(f"--gpu: {exc}") from None
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"device {device} ({torch.cuda.get_device_name(0) if device == 'cuda' else 'CPU, smoke'}), "
          f"priced as {gpu}; torch {torch.__version__}"
          + (f", CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}" if device == "cuda" else ""))
    rows = []
    checks = step_checks(args.smoke)
    if args.only is not None:
        wanted = [k.strip() for k in args.only.split(",") if k.strip()]
        if not wanted:
            raise SystemExit(f"--only: no check named; expected some of {list(checks)}")
        unknown = [k for k in wanted if k not in checks]
        if unknown:
            raise SystemExit(f"--only: unknown check(s) {unknown}; expected some of {list(checks)}")
        checks = {k: checks[k] for k in wanted}
    for key, check in checks.items():
        t0 = time.perf_counter()
        pred = predict(check, gpu)
        ms = measure(check, device, args.steps, args.warmup)
        if device == "cuda":
            torch.cuda.empty_cache()  # the model and batch of the last check are gone
        rows.append({"key": key, "check": check.check, "workload": check.workload, "precision": check.precision,
                     "layout": check.layout, "batch": check.batch, "measured_ms": ms, **pred,
                     "error": pred["predicted_ms"] / ms - 1})
        print(f"  {key:<20} {check.workload:<50} {check.precision:<5} {check.layout:<5} "
              f"predicted {pred['predicted_ms']:9.2f} ms  measured {ms:9.2f} ms  ({time.perf_counter() - t0:.0f} s)",
              flush=True)
    steps = pl.DataFrame(rows)
    steps.write_csv(args.out / "steps.csv")
    pl.Config.set_tbl_width_chars(200)
    pl.Config.set_tbl_rows(50)
    pl.Config.set_tbl_hide_dataframe_shape(True)
    print("\nper training step, ms (error = predicted / measured - 1):")
    print(steps.select("key", "workload", "precision", "layout", "batch",
                       *(pl.col(c).round(2) for c in ("predicted_ms", "measured_ms")), pl.col("error").round(3)))
    by_key = {r["key"]: r for r in rows}
    print("\nquotients of step times, measured and predicted (the model's absolute calibration cancels):")
    for what, a, b in quotient_pairs(args.smoke):
        if a not in by_key or b not in by_key:
            continue
        m = by_key[a]["measured_ms"] / by_key[b]["measured_ms"]
        p = by_key[a]["predicted_ms"] / by_key[b]["predicted_ms"]
        print(f"  {what:<52} measured {m:6.3f}  predicted {p:6.3f}  (predicted / measured {p / m:.3f})")
    if device == "cuda":
        clock = clock_check(gpu)
        clock.write_csv(args.out / "clock.csv")
        print("\ntensor clock under 15 s of 8192^3 FP16 GEMMs (nvidia-smi, 250 ms samples, first 3 s left out):")
        print(clock)
    print(f"\nwritten: {args.out / 'steps.csv'}" + (f", {args.out / 'clock.csv'}" if device == "cuda" else ""))


if __name__ == "__main__":
    sys.exit(main())
