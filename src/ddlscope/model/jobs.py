"""The Jobs table: one row per (job, scenario), flat numeric columns the model reads.

A job is a (Workload, Architecture, System) triple plus two modifiers; :func:`job_row` flattens
one into a dict, :func:`jobs_frame` stacks rows into a Polars DataFrame with the schema
:data:`JOB_SCHEMA`. Ingest code (cluster traces, scenario application) may build the same columns
directly; :func:`check_jobs_frame` tells what is missing.

Units are in the names: ``_bytes``, ``_flops`` (count), ``_flop_per_s``, ``_bytes_per_s``,
``_s`` (seconds). Bandwidths are per direction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

from ddlscope.specs.architecture import ARCHITECTURES, SHARDINGS, Architecture
from ddlscope.specs.overlap import overlap_fraction
from ddlscope.specs.system import GPUSpec, LinkSpec, System
from ddlscope.specs.workload import PRECISIONS, Workload

ArchitectureEnum = pl.Enum(list(ARCHITECTURES))
ShardingEnum = pl.Enum(list(SHARDINGS))
PrecisionEnum = pl.Enum(list(PRECISIONS))

#: column -> (dtype, meaning). The single definition of the Jobs table.
JOB_SCHEMA: dict[str, tuple[pl.DataType, str]] = {
    "job_id": (pl.Int64, "job identifier"),
    # workload (per replica per step)
    "workload": (pl.String, "workload name"),
    "batch_size": (pl.Int64, "samples per replica per step"),
    "precision": (PrecisionEnum, "fp32 | tf32 | fp16 | bf16"),
    "compute_bound_flops": (pl.Float64, "FLOPs of compute-bound ops"),
    "memory_bound_bytes": (pl.Float64, "bytes moved by memory-bound ops"),
    "memory_bound_flops": (pl.Float64, "FLOPs of memory-bound ops"),
    "input_bytes": (pl.Float64, "input bytes copied host to GPU"),
    "stored_input_bytes": (pl.Float64, "input bytes read from storage"),
    "dense_param_bytes": (pl.Float64, "dense parameter = gradient bytes"),
    "num_gradient_tensors": (pl.Int64, "gradient messages per step"),
    "sparse_bytes_per_step": (pl.Float64, "embedding bytes touched"),
    "embedding_table_bytes": (pl.Float64, "embedding table bytes"),
    "peak_memory_bytes": (pl.Float64, "peak GPU memory of a replica (null: unknown)"),
    # architecture
    "architecture": (ArchitectureEnum, "training architecture"),
    "num_workers": (pl.Int64, "worker processes"),
    "gpus_per_worker": (pl.Int64, "GPUs per worker"),
    "num_ps": (pl.Int64, "parameter-server shards"),
    "num_servers": (pl.Int64, "servers holding the GPUs"),
    # system
    "system": (pl.String, "system name"),
    "gpu": (pl.String, "GPU name"),
    "gpu_peak_fp32_flop_per_s": (pl.Float64, "peak FP32"),
    "gpu_peak_tf32_flop_per_s": (pl.Float64, "peak TF32"),
    "gpu_peak_fp16_flop_per_s": (pl.Float64, "peak FP16 tensor"),
    "gpu_peak_bf16_flop_per_s": (pl.Float64, "peak BF16 tensor"),
    "gpu_memory_bandwidth_bytes_per_s": (pl.Float64, "GPU memory bandwidth"),
    "gpu_memory_bytes": (pl.Float64, "GPU memory capacity"),
    "server_gpus": (pl.Int64, "GPUs per server"),
    "pcie": (pl.String, "PCIe link name"),
    "pcie_bandwidth_bytes_per_s": (pl.Float64, "PCIe x16 bandwidth per direction"),
    "pcie_latency_s": (pl.Float64, "PCIe alpha"),
    "gpus_per_pcie_root": (pl.Int64, "GPUs sharing one host uplink"),
    "nvlink": (pl.String, "NVLink name, empty if none"),
    "nvlink_bandwidth_bytes_per_s": (pl.Float64, "NVLink per GPU per direction, 0 if none"),
    "nvlink_latency_s": (pl.Float64, "NVLink alpha"),
    "nic": (pl.String, "NIC link name"),
    "nic_bandwidth_bytes_per_s": (pl.Float64, "one NIC per direction"),
    "nic_latency_s": (pl.Float64, "NIC alpha"),
    "nics_per_server": (pl.Int64, "NICs per server"),
    "storage_read_bytes_per_s": (pl.Float64, "storage read bandwidth per server"),
    "pcie_link_efficiency": (pl.Float64, "achieved share of the PCIe bandwidth (null: eff_pcie)"),
    "nvlink_link_efficiency": (pl.Float64, "achieved share of the NVLink bandwidth (null: eff_nvlink)"),
    "nic_link_efficiency": (pl.Float64, "achieved share of the NIC bandwidth (null: eff_network)"),
    "eff_compute": (pl.Float64, "efficiency"),
    "eff_memory": (pl.Float64, "efficiency"),
    "eff_pcie": (pl.Float64, "efficiency"),
    "eff_nvlink": (pl.Float64, "efficiency"),
    "eff_network": (pl.Float64, "efficiency"),
    "eff_storage": (pl.Float64, "efficiency"),
    # modifiers
    "overlap_fraction": (pl.Float64, "fraction of communication that may overlap computation; "
                         "null: the scheduled overlap (ddlscope.model.overlap)"),
    "memory_bound_scale": (pl.Float64, "factor on memory-bound bytes (op fusion)"),
}

OPTIONAL_JOB_COLUMNS: tuple[str, ...] = ("pcie_link_efficiency", "nvlink_link_efficiency", "nic_link_efficiency")
"""Columns of :data:`JOB_SCHEMA` a Jobs table may lack (the model reads them as null: the system's
efficiency applies). The link's transport (:meth:`ddlscope.specs.system.LinkSpec.achieved_efficiency`)
fills them; a system whose efficiency for the slot is set explicitly (a calibrated profile, a
system file) leaves them null, so that efficiency wins."""

ARCHITECTURE_OPTION_COLUMNS: dict[str, tuple[pl.DataType, str]] = {
    "sharding": (ShardingEnum, "fsdp sharding (ddlscope.specs.traits.SHARDINGS); null: zero3 for fsdp"),
    "num_params": (pl.Float64, "parameters of the model (count; null: unknown, fsdp then gathers "
                   "dense_param_bytes and its memory fit is unknown)"),
    "tp": (pl.Int64, "3d: tensor-parallel GPUs (null: 1)"),
    "pp": (pl.Int64, "3d: pipeline stages (null: 1)"),
    "virtual_stages": (pl.Int64, "3d: virtual stages per GPU, interleaved schedule (null: 1, 1F1B)"),
    "microbatches": (pl.Int64, "3d: micro-batches per step, gradient accumulation (null: 1)"),
    "cp": (pl.Int64, "3d: context-parallel GPUs (null: 1)"),
    "num_layers": (pl.Int64, "transformer layers of the model (null: unknown)"),
    "layer_activation_bytes": (pl.Float64, "bytes of one layer's output activation for one micro-batch "
                               "(b s h x element size; what TP all-reduces and PP sends; null: unknown)"),
    "layer_kv_bytes": (pl.Float64, "bytes of one layer's keys and values for one micro-batch (what CP passes "
                       "round its ring; null: 2 x layer_activation_bytes)"),
    "ep": (pl.Int64, "3d: expert-parallel GPUs, of the data-parallel group (null: 1)"),
    "experts_per_token": (pl.Int64, "mixture of experts: top-k experts per token (null: dense)"),
    "expert_params": (pl.Float64, "mixture of experts: parameters in the experts, all layers (null: dense)"),
}
"""Columns only some architectures read (``fsdp``), outside :data:`JOB_SCHEMA` so that the tables of
the other architectures are unchanged: :func:`job_row` writes them where set, :func:`jobs_frame`
keeps them where any row has them, and the step-time model reads an absent one as null."""

_names = list(JOB_SCHEMA)
WORKLOAD_COLUMNS: tuple[str, ...] = tuple(_names[_names.index("workload") : _names.index("architecture")])
"""The columns :func:`workload_columns` fills: a workload's name, batch size and per-replica per-step
demand (FLOPs, bytes, tensors, peak memory)."""
SYSTEM_COLUMNS: tuple[str, ...] = tuple(_names[_names.index("system") : _names.index("overlap_fraction")])
"""The columns :func:`system_columns` fills: everything a scenario may swap with the hardware."""


def workload_columns(w: Workload) -> dict[str, Any]:
    """The workload's columns of :data:`JOB_SCHEMA`."""
    return {
        "workload": w.name,
        "batch_size": w.batch_size,
        "precision": w.precision,
        "compute_bound_flops": w.compute_bound_flops,
        "memory_bound_bytes": w.memory_bound_bytes,
        "memory_bound_flops": w.memory_bound_flops,
        "input_bytes": w.input_bytes,
        "stored_input_bytes": w.input_bytes if w.stored_input_bytes is None else w.stored_input_bytes,
        "dense_param_bytes": w.dense_param_bytes,
        "num_gradient_tensors": w.num_gradient_tensors,
        "sparse_bytes_per_step": w.sparse_bytes_per_step,
        "embedding_table_bytes": w.embedding_table_bytes,
        "peak_memory_bytes": w.peak_memory_bytes,
    }


def gpu_columns(gpu: GPUSpec) -> dict[str, Any]:
    """The GPU's columns of :data:`JOB_SCHEMA` in base units (FLOP/s, bytes/s, bytes)."""
    return {
        "gpu": gpu.name,
        "gpu_peak_fp32_flop_per_s": gpu.peak_tflops.fp32 * 1e12,
        "gpu_peak_tf32_flop_per_s": gpu.peak_tflops.tf32 * 1e12,
        "gpu_peak_fp16_flop_per_s": gpu.peak_tflops.fp16 * 1e12,
        "gpu_peak_bf16_flop_per_s": gpu.peak_tflops.bf16 * 1e12,
        "gpu_memory_bandwidth_bytes_per_s": gpu.memory_bandwidth_gb_s * 1e9,
        "gpu_memory_bytes": gpu.memory_bytes,
    }


def link_columns(slot: str, link: LinkSpec | None) -> dict[str, Any]:
    """One link slot's columns (``pcie``, ``nvlink`` or ``nic``: name, bandwidth in bytes/s, latency
    in s, the transport's achieved share of the bandwidth or ``None``); ``None`` (no NVLink) gives an
    empty name, bandwidth 0, latency 0 and no efficiency."""
    if link is None:
        return {slot: "", f"{slot}_bandwidth_bytes_per_s": 0.0, f"{slot}_latency_s": 0.0,
                f"{slot}_link_efficiency": None}
    return {
        slot: link.name,
        f"{slot}_bandwidth_bytes_per_s": link.bandwidth_gb_s * 1e9,
        f"{slot}_latency_s": link.latency_us * 1e-6,
        f"{slot}_link_efficiency": link.achieved_efficiency(),
    }


def system_columns(s: System) -> dict[str, Any]:
    """The system's columns of :data:`JOB_SCHEMA`, converted to base units (bytes/s, FLOP/s, s).

    ``<slot>_link_efficiency`` is the link's achieved share (its transport) unless the system's
    :class:`~ddlscope.specs.system.Efficiency` sets that slot explicitly (then null: ``eff_<slot>``)."""
    e = s.efficiency
    explicit = e.model_fields_set
    links = {slot: link_columns(slot, getattr(s, slot)) for slot in ("pcie", "nvlink", "nic")}
    for slot, field in (("pcie", "pcie"), ("nvlink", "nvlink"), ("nic", "network")):
        if field in explicit:  # the system's own efficiency for the slot wins over the link's
            links[slot][f"{slot}_link_efficiency"] = None
    link_eff = {f"{slot}_link_efficiency": links[slot].pop(f"{slot}_link_efficiency") for slot in links}
    return {
        "system": s.name,
        **gpu_columns(s.gpu),
        "server_gpus": s.gpus_per_server,
        **links["pcie"],
        "gpus_per_pcie_root": s.gpus_per_pcie_root,
        **links["nvlink"],
        **links["nic"],
        "nics_per_server": s.nics_per_server,
        "storage_read_bytes_per_s": s.storage_read_gb_s * 1e9,
        **link_eff,
        "eff_compute": e.compute,
        "eff_memory": e.memory,
        "eff_pcie": e.pcie,
        "eff_nvlink": e.nvlink,
        "eff_network": e.network,
        "eff_storage": e.storage,
    }


def job_row(
    workload: Workload,
    architecture: Architecture,
    system: System,
    *,
    job_id: int = 0,
    overlap: str | float = "scheduled",
    memory_bound_scale: float = 1.0,
) -> dict[str, Any]:
    """One row of the Jobs table for a (workload, architecture, system) triple.

    Raises:
        ValueError: the job does not fit its placement (more GPUs per server than the server has;
            see :meth:`Architecture.servers_on`), a bad overlap, a scale outside (0, 1], or ``ep`` > 1
            on a workload without experts or not dividing its ``num_experts``.
    """
    if not 0.0 < memory_bound_scale <= 1.0:
        raise ValueError(f"memory_bound_scale: expected a factor in (0, 1], got {memory_bound_scale}")
    servers = architecture.servers_on(system.gpus_per_server)
    options: dict[str, Any] = {}
    if architecture.sharding is not None or architecture.kind == "fsdp":
        options["sharding"] = architecture.sharding or "zero3"
    if workload.num_params is not None:
        options["num_params"] = workload.num_params
    if architecture.ep > 1:
        if not workload.num_experts or workload.num_experts < 2:
            raise ValueError(f"ep: expert parallelism splits a mixture of experts; workload {workload.name!r} has "
                             f"no experts (num_experts {workload.num_experts}); expected ep=1")
        if workload.num_experts % architecture.ep:
            raise ValueError(f"ep: expected a divisor of the workload's num_experts = {workload.num_experts}, "
                             f"got ep={architecture.ep}")
    if architecture.kind == "3d":
        options.update(tp=architecture.tp, pp=architecture.pp, virtual_stages=architecture.virtual_stages,
                       microbatches=architecture.microbatches, cp=architecture.cp)
        if architecture.ep > 1:
            options["ep"] = architecture.ep
    for key in ("num_layers", "layer_activation_bytes", "layer_kv_bytes", "experts_per_token", "expert_params"):
        if getattr(workload, key) is not None:
            options[key] = getattr(workload, key)
    return {
        "job_id": job_id,
        **workload_columns(workload),
        "architecture": architecture.kind,
        "num_workers": architecture.num_workers,
        "gpus_per_worker": architecture.gpus_per_worker,
        "num_ps": architecture.num_ps,
        "num_servers": servers,
        **system_columns(system),
        "overlap_fraction": overlap_fraction(overlap),
        "memory_bound_scale": memory_bound_scale,
        **options,
    }


def jobs_frame(rows: Iterable[Mapping[str, Any]]) -> pl.DataFrame:
    """Stack :func:`job_row` dicts into a DataFrame with the :data:`JOB_SCHEMA` dtypes, plus the
    :data:`ARCHITECTURE_OPTION_COLUMNS` any row has (null in the rows without)."""
    rows = list(rows)
    schema = {name: dtype for name, (dtype, _) in JOB_SCHEMA.items()}
    schema.update({k: t for k, (t, _) in ARCHITECTURE_OPTION_COLUMNS.items() if any(k in r for r in rows)})
    return pl.DataFrame(rows, schema=schema)


def check_jobs_frame(frame: pl.DataFrame | pl.LazyFrame) -> None:
    """Raise ``ValueError`` naming every :data:`JOB_SCHEMA` column the frame lacks (those of
    :data:`OPTIONAL_JOB_COLUMNS` may be absent)."""
    names = frame.collect_schema().names()
    missing = [c for c in JOB_SCHEMA if c not in names and c not in OPTIONAL_JOB_COLUMNS]
    if missing:
        raise ValueError(f"jobs table: missing column(s) {missing}; see ddlscope.model.jobs.JOB_SCHEMA")


def with_known_architectures(frame: pl.DataFrame | pl.LazyFrame) -> pl.LazyFrame:
    """``frame`` (lazy) with ``architecture`` as :data:`ArchitectureEnum`: a String, Categorical or
    other Enum column is cast, so that an architecture the traits table
    (:data:`ddlscope.specs.traits.TRAITS`) does not know is an error, never a job priced as no
    architecture.

    Raises:
        ValueError: (a DataFrame, checked at once) ``architecture`` values that are not known,
            naming them and the known ones; a LazyFrame fails the same way when collected (Polars'
            conversion error names the value).
    """
    dtype = frame.collect_schema().get("architecture")
    if dtype == ArchitectureEnum:
        return frame.lazy()
    if isinstance(frame, pl.DataFrame):
        values = frame["architecture"].cast(pl.String).unique().drop_nulls().to_list()
        unknown = sorted(v for v in values if v not in ARCHITECTURES)
        if unknown:
            raise ValueError(f"jobs table: architecture {', '.join(map(repr, unknown))} unknown; expected one of "
                             f"{', '.join(ARCHITECTURES)} (ddlscope.specs.traits.TRAITS)")
    return frame.lazy().with_columns(pl.col("architecture").cast(pl.String).cast(ArchitectureEnum))
