"""The device a calibration measures: a share of this host's CPU, or a local CUDA GPU.

On a GPU the peak FLOP/s and memory bandwidth are the catalog's datasheet figures (the GPU is
looked up by the name CUDA reports). A CPU has no datasheet entry in the catalog, so its peak is
derived from its instruction set and clock:

    peak FLOP/s = cores x clock (Hz) x FLOPs per cycle per core

with FP32 FLOPs per cycle 64 for AVX-512 (two 512-bit FMA units x 16 lanes x 2), 32 for AVX2 with
FMA (two 256-bit FMA units x 8 x 2), 16 for AVX and 8 for SSE (Intel 64 and IA-32 Architectures
Optimization Reference Manual, and AMD's Software Optimization Guides for Zen 2-4: two 256-bit
FMA pipes). BF16/FP16 run at twice the FP32 rate with AVX512_BF16/AVX512_FP16 (two 16-bit products
per 32-bit lane), 1024 FLOPs per cycle with AMX (Intel, "Intel Advanced Matrix Extensions
overview"); without such units they run at the FP32 rate (the catalog's convention for GPUs without
16-bit tensor cores). The clock is the highest of ``cpuinfo_max_freq`` (sysfs) and ``cpu MHz``
(/proc/cpuinfo); a turbo clock above it makes measured efficiencies exceed 1, in which case the
measured maximum is taken as the peak (and the profile says so).
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path

PRECISIONS_CPU: tuple[str, ...] = ("fp32", "bf16")
_ISA_NAME = {64: "AVX-512", 32: "AVX2+FMA", 16: "AVX"}


@dataclass
class DeviceInfo:
    """What a calibration knows about its device before measuring.

    Attributes:
        kind: ``cpu`` or ``cuda``.
        name: model name (``AMD EPYC 7763 x 1 core``, ``NVIDIA H100 80GB HBM3``).
        cores: CPU cores per device (1 for a GPU).
        clock_hz: CPU clock used for the peak (0 for a GPU).
        isa: the instruction-set features the peak is derived from.
        peak_flop_per_s: peak FLOP/s per precision (fp32, tf32, fp16, bf16).
        peak_source: how the peak was obtained.
        memory_gb: device memory (GPU) or host memory (CPU), GB.
        native_precisions: precisions with native arithmetic (a CPU without BF16 units lists only
            fp32: bf16 matmuls there run through conversions, far below any peak).
        devices_per_host: devices of this kind on the host (GPUs; CPU cores / cores per device).
    """

    kind: str
    name: str
    cores: int
    clock_hz: float
    isa: list[str]
    peak_flop_per_s: dict[str, float]
    peak_source: str
    memory_gb: float
    native_precisions: list[str]
    devices_per_host: int
    notes: list[str] = field(default_factory=list)


def _cpuinfo() -> dict[str, str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    first = text.split("\n\n")[0]
    out: dict[str, str] = {}
    for line in first.splitlines():
        key, _, value = line.partition(":")
        out[key.strip()] = value.strip()
    mhz = [float(m) for m in re.findall(r"^cpu MHz\s*:\s*([0-9.]+)", text, flags=re.M)]
    if mhz:
        out["cpu MHz"] = str(max(mhz))
    return out


def _clock_hz(info: dict[str, str]) -> float:
    best = 0.0
    with contextlib.suppress(OSError, ValueError):
        best = float(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()) * 1e3
    with contextlib.suppress(ValueError):
        best = max(best, float(info.get("cpu MHz", "0")) * 1e6)
    return best


def cpu_flops_per_cycle(flags: set[str]) -> dict[str, int]:
    """FP32/BF16/FP16 FLOPs per cycle per core from CPU feature flags (module docstring)."""
    if "avx512f" in flags:
        fp32 = 64
    elif "avx2" in flags and "fma" in flags:
        fp32 = 32
    elif "avx" in flags:
        fp32 = 16
    else:
        fp32 = 8
    bf16 = 1024 if "amx_bf16" in flags else (2 * fp32 if "avx512_bf16" in flags else fp32)
    fp16 = 1024 if "amx_fp16" in flags else (2 * fp32 if "avx512_fp16" in flags else fp32)
    return {"fp32": fp32, "tf32": fp32, "bf16": bf16, "fp16": fp16}


def describe_cpu(cores_per_device: int = 1) -> DeviceInfo:
    """The CPU share of one device (``cores_per_device`` cores) on this host.

    Raises:
        ValueError: ``cores_per_device`` outside ``1..os.cpu_count()``, or no clock found.
    """
    total = os.cpu_count() or 1
    if not 1 <= cores_per_device <= total:
        raise ValueError(f"cores_per_device: expected 1..{total} (this host's cores), got {cores_per_device}")
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    clock = _clock_hz(info)
    if clock <= 0:
        raise ValueError("cpu: cannot read the clock from /proc/cpuinfo or sysfs; cannot derive a peak")
    per_cycle = cpu_flops_per_cycle(flags)
    peak = {p: cores_per_device * clock * n for p, n in per_cycle.items()}
    isa = sorted(f for f in flags if f in {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16",
                                           "avx512_fp16", "amx_bf16", "amx_fp16"})
    native = ["fp32"] + [p for p in ("bf16", "fp16") if per_cycle[p] > per_cycle["fp32"]]
    try:
        mem_kb = float(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
    except (OSError, AttributeError):
        mem_kb = 0.0
    model = info.get("model name", platform.processor() or "cpu")
    return DeviceInfo(
        kind="cpu", name=f"{model} x {cores_per_device} core{'s' if cores_per_device > 1 else ''}",
        cores=cores_per_device, clock_hz=clock, isa=isa, peak_flop_per_s=peak,
        peak_source=(f"{cores_per_device} core(s) x {clock / 1e9:.3f} GHz x {per_cycle['fp32']} FP32 FLOP/cycle "
                     f"({_ISA_NAME.get(per_cycle['fp32'], 'AVX/SSE')})"),
        memory_gb=mem_kb * 1024 / 1e9, native_precisions=native, devices_per_host=total // cores_per_device,
    )


def describe_cuda(catalog_gpu_lookup) -> DeviceInfo:  # pragma: no cover - needs a GPU
    """The local CUDA GPU 0, with its peak from the catalog entry ``catalog_gpu_lookup(name)``.

    Raises:
        ValueError: no CUDA device, or a GPU the catalog does not know (give it with --catalog).
    """
    import torch

    if not torch.cuda.is_available():
        raise ValueError("cuda: no CUDA device on this host")
    name = torch.cuda.get_device_name(0)
    try:
        spec = catalog_gpu_lookup(name)
    except ValueError as exc:
        raise ValueError(f"cuda: {exc}; add the GPU to a catalog file (--catalog)") from exc
    t = spec.peak_tflops
    props = torch.cuda.get_device_properties(0)
    return DeviceInfo(
        kind="cuda", name=spec.name, cores=1, clock_hz=0.0, isa=[],
        peak_flop_per_s={"fp32": t.fp32 * 1e12, "tf32": t.tf32 * 1e12, "fp16": t.fp16 * 1e12, "bf16": t.bf16 * 1e12},
        peak_source=f"catalog entry {spec.name!r}: {spec.source}", memory_gb=props.total_memory / 1e9,
        native_precisions=["fp32", "tf32", "fp16", "bf16"], devices_per_host=torch.cuda.device_count(),
    )
