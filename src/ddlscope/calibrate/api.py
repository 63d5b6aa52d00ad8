"""``run_calibration``: measure this host and build its System profile.

What becomes of each measurement (the spec fields the step-time model reads):

- device peak FLOP/s per precision: a GPU's from the catalog (datasheet); a CPU's from its ISA and
  clock (:mod:`ddlscope.calibrate.device`), raised to the best measured matmul rate if that is
  higher (a turbo clock).
- device memory bandwidth ``B_mem``: a GPU's datasheet figure; on a CPU the highest bandwidth any
  memory benchmark reached (element-wise ops on cache-resident tensors; a CPU's "memory" for
  small tensors is its cache hierarchy). STREAM copy/triad (McCalpin) are kept as measured.
- per-op framework overhead (a CPU's training step of tiny layers, per ATen op), the convolution
  curves and the curves of op families far from streaming speed (normalisation, softmax,
  dropout), for the op-mix efficiencies.
- timings on a one-core CPU device use the thread's CPU time (``clock = "cpu"``), so the other
  processes of a shared host do not inflate them; otherwise wall time.
- ``efficiency.compute``: the matmul efficiency of the largest size of the sweep (large kernels),
  FP32 (or the first precision measured). ``efficiency.memory``: STREAM triad / ``B_mem``.
  Workloads of small ops get op-mix efficiencies from the curves instead
  (:mod:`ddlscope.calibrate.opmix`).
- the link between devices: the all-reduce alpha-beta fit (per-step latency, bus bandwidth),
  efficiency 1 (the fit *is* the achieved rate). On a CPU host it is a ``host`` link in the
  ``pcie`` slot; on GPUs the measured NCCL link replaces the base server's NVLink (or PCIe if it
  has none).
- nccl-tests tables given by the user: each table's fit replaces the link of its slot (``nvlink``,
  ``pcie`` or ``nic``).
- NIC and storage of a CPU host are not measured: the NIC is the catalog link ``nic`` (default
  ``eth-10g``) and storage 1 GB/s, both marked assumed in the file.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl
import torch

from ddlscope.calibrate.collbench import COLLECTIVE_SIZES, bench_collectives, fit_collectives
from ddlscope.calibrate.device import DeviceInfo, describe_cpu, describe_cuda
from ddlscope.calibrate.fit import AlphaBetaFit
from ddlscope.calibrate.microbench import (
    CLOCKS,
    CONV_CHANNELS,
    DTYPES,
    ELEMENTWISE_ELEMENTS,
    FAMILY_ELEMENTS,
    MATMUL_SIZES,
    bench_conv,
    bench_elementwise,
    bench_families,
    bench_matmul,
    bench_op_overhead,
    bench_stream,
    stream_elements,
)
from ddlscope.calibrate.nccl_tests import NcclTestsTable
from ddlscope.calibrate.profile_file import Calibration
from ddlscope.specs.catalog import Catalog, CatalogError, builtin_catalog

SLOTS = ("nvlink", "pcie", "nic")
QUICK_MATMUL_SIZES = (16, 32, 64, 128, 256, 512)
QUICK_ELEMENTWISE = tuple(4**k for k in range(4, 13, 2))
QUICK_COLLECTIVE_SIZES = tuple(4 * 16**k for k in range(1, 6))
QUICK_CONV_CHANNELS = (16, 64, 128)
QUICK_FAMILY_ELEMENTS = (4**6, 4**8, 4**10)


@dataclass
class CalibrationPlan:
    """What :func:`run_calibration` measures; ``steps`` counts progress units."""

    device: str = "cpu"
    cores_per_device: int = 1
    precisions: tuple[str, ...] = ()
    matmul_sizes: tuple[int, ...] = MATMUL_SIZES
    elementwise_elements: tuple[int, ...] = ELEMENTWISE_ELEMENTS
    collective_sizes: tuple[int, ...] = COLLECTIVE_SIZES
    conv_channels: tuple[int, ...] = CONV_CHANNELS
    family_elements: tuple[int, ...] = FAMILY_ELEMENTS
    ranks: int | None = None
    target_s: float = 0.05
    collectives: bool = True
    clock: str = "auto"

    def check(self) -> None:
        """Check the plan before anything is measured, so a bad option costs no benchmark time.

        Raises:
            ValueError: a device other than ``cpu``/``cuda``, a clock other than ``auto``/``wall``/
                ``cpu`` (or ``cpu`` on a device that is not one CPU core), ``cores_per_device < 1``,
                an unknown precision, fewer than 2 collective ranks, or ``target_s <= 0``; naming
                the option.
        """
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device: expected cpu or cuda, got {self.device!r}")
        if self.clock not in ("auto", *CLOCKS):
            raise ValueError(f"clock: expected auto, wall or cpu, got {self.clock!r}")
        if self.cores_per_device < 1:
            raise ValueError(f"cores_per_device: expected >= 1, got {self.cores_per_device}")
        if self.resolved_clock() == "cpu" and (self.device != "cpu" or self.cores_per_device != 1):
            raise ValueError("clock: the cpu clock (thread CPU time) measures a device of one CPU core only")
        bad = [p for p in self.precisions if p not in DTYPES]
        if bad:
            raise ValueError(f"precision: expected some of {', '.join(DTYPES)}, got {', '.join(map(repr, bad))}")
        if self.collectives and self.ranks is not None and self.ranks < 2:
            raise ValueError(f"processes: a collective needs >= 2 processes, got {self.ranks} "
                             "(or skip them: --no-collectives)")
        if self.target_s <= 0:
            raise ValueError(f"target_s: expected > 0 seconds per repetition, got {self.target_s}")

    def resolved_clock(self) -> str:
        """``cpu`` (thread CPU time) for a one-core CPU device, else ``wall``, unless set."""
        if self.clock != "auto":
            return self.clock
        return "cpu" if self.device == "cpu" and self.cores_per_device == 1 else "wall"

    @classmethod
    def quick(cls, **kw: Any) -> CalibrationPlan:
        """Fewer sizes and shorter timings (for tests and a first look; about 20 s on 2 cores)."""
        return cls(matmul_sizes=QUICK_MATMUL_SIZES, elementwise_elements=QUICK_ELEMENTWISE,
                   collective_sizes=QUICK_COLLECTIVE_SIZES, conv_channels=QUICK_CONV_CHANNELS,
                   family_elements=QUICK_FAMILY_ELEMENTS, target_s=0.02, **kw)


def _host_llc_bytes() -> float:
    try:
        return float(os.sysconf("SC_LEVEL3_CACHE_SIZE") or os.sysconf("SC_LEVEL2_CACHE_SIZE") or 32 * 2**20)
    except (ValueError, OSError, AttributeError):
        return 32 * 2**20


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-." else "-" for ch in text.lower()).strip("-")


def run_calibration(
    plan: CalibrationPlan | None = None,
    *,
    catalog: Catalog | None = None,
    base_server: str | None = None,
    nic: str = "eth-10g",
    nccl_tables: Sequence[tuple[NcclTestsTable, str, str]] = (),
    progress: Callable[[str, int, int], None] | None = None,
) -> Calibration:
    """Measure this host (``plan``) and build its :class:`Calibration` (module docstring).

    Args:
        plan: what to measure; ``None`` measures nothing (only ``nccl_tables`` on ``base_server``).
        catalog: catalog for look-ups (built-in by default); the profile's entries are added to it.
        base_server: catalog server the profile starts from (required on GPUs and without a plan).
        nic: NIC link of a CPU host's profile (assumed, not measured).
        nccl_tables: ``(table, slot, origin)`` triples from nccl-tests output; each table's fit
            becomes the link of ``slot`` (``nvlink``, ``pcie``, ``nic``).
        progress: ``progress(task, completed, total)`` after each measurement.

    Raises:
        ValueError: a bad plan (:meth:`CalibrationPlan.check`, before any measurement), an unknown
            slot, or no plan and no base server.
        CatalogError: unknown catalog names.
        RuntimeError: a collective benchmark process failed.
    """
    if plan is not None:
        plan.check()
    catalog = catalog or builtin_catalog()
    for _, slot, _ in nccl_tables:
        if slot not in SLOTS:
            raise ValueError(f"nccl-tests slot: expected one of {', '.join(SLOTS)}, got {slot!r}")
    meta: dict[str, Any] = {
        "host": socket.gethostname(), "created": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "load_average_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "torch": torch.__version__, "python": platform.python_version(),
    }
    tables: dict[str, pl.DataFrame] = {}
    fits: list[dict[str, Any]] = []
    if plan is None and base_server is None:
        raise ValueError("calibrate: nothing to do: no benchmarks and no --system to apply nccl-tests fits to")

    entries: dict[str, Any] = {"gpu": {}, "link": {}, "server": {}}
    if plan is not None:
        info = _measure_device(plan, catalog, tables, meta, progress)
        coll_fit = None
        if plan.collectives and (plan.ranks or info.devices_per_host) >= 2:
            coll_fit = _measure_collectives(plan, info, tables, fits, progress)
        entries = _device_entries(info, tables, coll_fit, catalog, base_server, nic, meta)
    else:
        base = catalog.server(base_server)
        entries["system"] = {"server": base.name, "name": f"{base.name} (calibrated)"}
    for table, slot, origin in nccl_tables:
        try:
            f = table.fit()
        except ValueError as exc:
            raise ValueError(f"{origin}: {exc}") from None
        fits.append({**f.as_dict(), "origin": origin, "slot": slot})
        _apply_link(entries, catalog, f, slot, origin)
    catalog.add({k: v for k, v in entries.items() if k in ("gpu", "link", "server")}, origin="calibration")
    sys_spec = dict(entries["system"])
    try:
        system = catalog.system(**sys_spec)
    except CatalogError as exc:
        raise CatalogError(f"calibration: the measured system does not validate: {exc}") from exc
    return Calibration(system=system, entries=entries, meta=meta, tables=tables, fits=fits)


def _measure_device(plan: CalibrationPlan, catalog: Catalog, tables: dict[str, pl.DataFrame],
                    meta: dict[str, Any], progress: Callable[[str, int, int], None] | None) -> DeviceInfo:
    if plan.device == "cpu":
        info = describe_cpu(plan.cores_per_device)
        torch.set_num_threads(plan.cores_per_device)
        dev = "cpu"
    elif plan.device == "cuda":  # pragma: no cover - needs a GPU
        info = describe_cuda(catalog.gpu)
        dev = "cuda"
    else:
        raise ValueError(f"device: expected cpu or cuda, got {plan.device!r}")
    precisions = plan.precisions or tuple(p for p in ("fp32", "bf16") if p in info.native_precisions) or ("fp32",)
    if dev == "cuda" and not plan.precisions:  # pragma: no cover - needs a GPU
        precisions = ("fp32", "tf32", "bf16")
    skipped = [p for p in ("bf16",) if dev == "cpu" and p not in info.native_precisions and p not in precisions]
    if skipped:
        info.notes.append(f"{', '.join(skipped)} not measured: no native unit on this CPU "
                          f"(ISA {', '.join(info.isa)}); it runs through conversions far below any peak")
    total_mm = len(precisions) * len(plan.matmul_sizes)
    done = 0

    def tick(task: str, total: int) -> Callable[[], None]:
        def f() -> None:
            nonlocal done
            done += 1
            if progress:
                progress(task, done, total)
        return f

    clock = plan.resolved_clock()
    if clock == "cpu" and (dev != "cpu" or plan.cores_per_device != 1):
        raise ValueError("clock: the cpu clock (thread CPU time) measures a device of one CPU core only")
    cold = 2 * _host_llc_bytes() if dev == "cpu" else 0.0
    tables["matmul"] = bench_matmul(info.peak_flop_per_s, device=dev, precisions=precisions, clock=clock,
                                    sizes=plan.matmul_sizes, target_s=plan.target_s, cold_bytes=cold,
                                    progress=tick("matmul", total_mm))
    best = tables["matmul"].group_by("precision").agg(pl.col("flop_per_s").max())
    for prec, rate in best.iter_rows():
        if rate > info.peak_flop_per_s[prec]:
            info.notes.append(f"{prec}: measured {rate / 1e9:.1f} GFLOP/s above the derived peak "
                              f"{info.peak_flop_per_s[prec] / 1e9:.1f} (turbo clock?); the measured rate is the peak")
            info.peak_flop_per_s[prec] = rate
    tables["matmul"] = tables["matmul"].with_columns(
        peak_flop_per_s=pl.col("precision").replace_strict(info.peak_flop_per_s, return_dtype=pl.Float64))
    tables["matmul"] = tables["matmul"].with_columns(efficiency=pl.col("flop_per_s") / pl.col("peak_flop_per_s"))
    done = 0
    tables["conv"] = bench_conv(info.peak_flop_per_s["fp32"], device=dev, channels=plan.conv_channels, clock=clock,
                                target_s=plan.target_s, cold_bytes=cold,
                                progress=tick("convolution", len(plan.conv_channels)))
    n_stream = stream_elements(_host_llc_bytes()) if dev == "cpu" else 64 * 2**20
    tables["stream"] = bench_stream(device=dev, elements=n_stream, target_s=max(plan.target_s, 0.05), clock=clock)
    if progress:
        progress("stream", 1, 1)
    done = 0
    tables["elementwise"] = bench_elementwise(
        device=dev, elements=plan.elementwise_elements, target_s=plan.target_s, clock=clock,
        cold_bytes=cold,
        progress=tick("element-wise", len(plan.elementwise_elements)))
    done = 0
    tables["families"] = bench_families(device=dev, elements=plan.family_elements, target_s=plan.target_s, clock=clock,
                                        progress=tick("norm/softmax/dropout/embedding", 9))
    overhead = bench_op_overhead(clock=clock, target_s=max(plan.target_s, 0.05)) if dev == "cpu" else None
    meta.update({"device_kind": info.kind, "device": info.name, "cores_per_device": info.cores,
                 "clock_hz": info.clock_hz, "isa": info.isa, "peak_source": info.peak_source, "clock": clock,
                 "op_overhead_s": overhead["op_overhead_s"] if overhead else None,
                 "notes": info.notes})
    return info


def _measure_collectives(plan: CalibrationPlan, info: DeviceInfo, tables: dict[str, pl.DataFrame],
                         fits: list[dict[str, Any]], progress: Callable[[str, int, int], None] | None) -> AlphaBetaFit:
    ranks = plan.ranks or min(info.devices_per_host, 8)
    backend = "nccl" if info.kind == "cuda" else "gloo"
    total = 3 * len(plan.collective_sizes)
    count = 0

    def tick() -> None:
        nonlocal count
        count += 1
        if progress:
            progress(f"{backend} collectives x {ranks}", count, total)

    frame = bench_collectives(ranks=ranks, backend=backend, threads_per_rank=info.cores if info.kind == "cpu" else 1,
                              sizes=plan.collective_sizes, progress=tick)
    tables["collectives"] = frame
    by = fit_collectives(frame)
    for f in by.values():
        fits.append({**f.as_dict(), "origin": f"{backend} on {ranks} local processes", "slot": "measured"})
    return by["all_reduce"]


def _device_entries(info: DeviceInfo, tables: dict[str, pl.DataFrame], coll: AlphaBetaFit | None, catalog: Catalog,
                    base_server: str | None, nic: str, meta: dict[str, Any]) -> dict[str, Any]:
    host = _slug(str(meta["host"])) or "host"
    mm = tables["matmul"]
    first = mm["precision"][0]
    big = mm.filter(pl.col("precision") == first).sort("n")["efficiency"][-1]
    stream = tables["stream"]
    triad = float(stream.filter(pl.col("kernel") == "triad")["bandwidth_gb_s"][0])
    ew_best = float(tables["elementwise"]["bandwidth_gb_s"].max())
    entries: dict[str, Any] = {"gpu": {}, "link": {}, "server": {}}
    link_name = None
    if info.kind == "cpu":
        gpu_name = f"cpu:{info.name}"
        mem_bw = max(triad, ew_best, float(stream["bandwidth_gb_s"].max()))
        entries["gpu"][gpu_name] = {
            "peak_tflops": {p: info.peak_flop_per_s[p] / 1e12 for p in ("fp32", "tf32", "fp16", "bf16")},
            "memory_bandwidth_gb_s": mem_bw,
            "memory_gb": info.memory_gb / max(info.devices_per_host, 1),
            "source": (f"ddlscope calibrate on {meta['host']}, {meta['created']}: peak {info.peak_source}; memory "
                       f"bandwidth = the best measured ({mem_bw:.1f} GB/s; STREAM triad {triad:.1f} GB/s); memory = "
                       "host memory / devices"),
        }
        if coll is not None:
            link_name = f"{host}-gloo"
            entries["link"][link_name] = {
                "kind": "host", "bandwidth_gb_s": coll.bandwidth_gb_s, "latency_us": coll.latency_us,
                "source": (f"ddlscope calibrate: gloo all_reduce on {coll.ranks} processes of {meta['host']}, "
                           f"alpha-beta fit over {coll.points} sizes ({coll.min_size_bytes:.0f}-"
                           f"{coll.max_size_bytes:.0f} B), rms relative residual {coll.rms_rel_residual:.2f}"),
            }
        else:
            link_name = f"{host}-memory"
            entries["link"][link_name] = {
                "kind": "host", "bandwidth_gb_s": float(stream.filter(pl.col("kernel") == "copy")["bandwidth_gb_s"][0]),
                "latency_us": 0.0, "source": "ddlscope calibrate: STREAM copy (no collective measured)"}
        server = f"calibrated-{host}"
        catalog.link(nic)
        entries["server"][server] = {
            "gpu": gpu_name, "gpus_per_server": info.devices_per_host, "pcie": link_name,
            "gpus_per_pcie_root": info.devices_per_host, "nvlink": "", "nic": nic, "nics_per_server": 1,
            "storage_read_gb_s": 1.0,
            "source": (f"ddlscope calibrate on {meta['host']}: {info.devices_per_host} device(s) of "
                       f"{info.cores} core(s); processes communicate through host memory ({link_name}); "
                       f"NIC {nic} and storage 1 GB/s assumed, not measured"),
        }
        entries["system"] = {"server": server, "name": server,
                             "efficiency": {"compute": min(float(big), 1.0), "memory": min(triad / mem_bw, 1.0),
                                            "pcie": 1.0}}
    else:  # pragma: no cover - needs a GPU
        if base_server is None:
            raise ValueError("calibrate: on GPUs give --system, the catalog server type of this host")
        base = catalog.server(base_server)
        gpu = catalog.gpu(info.name)
        server = f"{base.name}-calibrated-{host}"
        entries["server"][server] = {**base.model_dump(exclude={"name"}), "source": f"{base.source}; calibrated"}
        eff = {"compute": min(float(big), 1.0), "memory": min(triad / gpu.memory_bandwidth_gb_s, 1.0)}
        if coll is not None:
            slot = "nvlink" if base.nvlink else "pcie"
            link_name = f"{host}-nccl-{slot}"
            entries["link"][link_name] = {
                "kind": slot, "bandwidth_gb_s": coll.bandwidth_gb_s, "latency_us": coll.latency_us,
                "source": f"ddlscope calibrate: NCCL all_reduce on {coll.ranks} GPUs, alpha-beta fit"}
            entries["server"][server][slot] = link_name
            eff[slot] = 1.0
        entries["system"] = {"server": server, "name": server, "efficiency": eff}
    return entries


def _apply_link(entries: dict[str, Any], catalog: Catalog, fit: AlphaBetaFit, slot: str, origin: str) -> None:
    """Replace the link of ``slot`` in the profile by ``fit`` (nccl-tests)."""
    kind = {"nvlink": "nvlink", "pcie": "pcie", "nic": "infiniband"}[slot]
    system = entries["system"]
    server_name = system["server"]
    server = entries["server"].get(server_name)
    if server is None:
        base = catalog.server(server_name)
        server = {**base.model_dump(exclude={"name"})}
        new_name = f"{base.name}-calibrated"
        entries["server"][new_name] = server
        system["server"] = new_name
    if slot == "nic":
        old = server.get("nic")
        kind = catalog.link(old).kind if old in catalog.links else "infiniband"
    name = f"nccl-tests-{fit.collective}-{slot}-{len(entries['link'])}"
    entries["link"][name] = {
        "kind": kind, "bandwidth_gb_s": fit.bandwidth_gb_s, "latency_us": fit.latency_us,
        "source": (f"nccl-tests {fit.collective} on {fit.ranks} ranks ({origin}): alpha-beta fit over {fit.points} "
                   f"sizes, rms relative residual {fit.rms_rel_residual:.3f}"),
    }
    server[slot] = name
    system.setdefault("efficiency", {})[{"nic": "network"}.get(slot, slot)] = 1.0
