r"""The step-time model: where one training step's time goes, vectorised over a Jobs table.

Reconstruction of the analytical framework of the PAI study (Wang et al., "Characterizing Deep
Learning Training Workloads on Alibaba-PAI", IISWC 2019): a step is data I/O + compute-bound +
memory-bound + weight/gradient communication per link class, each component priced on its
resource. The study's text is not available to us; every formula below is our reconstruction from
the standard costs cited in :mod:`ddlscope.model.collectives`.

Notation, per row (job x scenario): ``p`` GPUs (replicas), ``m`` servers, ``g = ceil(p/m)`` GPUs
per server, ``r = min(g, gpus_per_pcie_root)`` GPUs sharing one host uplink, ``S`` dense gradient
bytes, ``E`` sparse (embedding) bytes touched per replica, ``k`` gradient messages, ``N`` workers
with ``gw`` GPUs each, ``P`` PS shards. ``B_x`` is a link's bandwidth times its efficiency and
``a_x`` its latency. The *intra-server* link is NVLink where the server has it, else PCIe.

Components (seconds per step):

- data I/O = storage read ``g * stored_input / B_storage`` (a server's storage shared by its GPUs) +
  host-to-GPU copy ``a_pcie + r * input / B_pcie`` (GPUs behind one uplink share it).
- compute-bound = ``compute_bound_flops / (peak[precision] * eff_compute)`` (roofline, compute roof).
- memory-bound = ``max(memory_bound_bytes * memory_bound_scale / B_mem,
  memory_bound_flops / (peak_fp32 * eff_compute))`` (roofline, memory roof).
- communication, by architecture. ``*_bytes`` is what the busiest link of a class carries per
  step in its busiest direction, summed over sequential phases; time = ``messages * a + bytes / B``:

  ======================  =====================================================================
  ``1w1g``                none.
  ``1wng``                PCIe, parameters on the host: gradients up then weights down over the
                          shared uplink, ``bytes = 2 r (S + E)``, ``messages = 2k``.
  ``ps_worker``           PCIe as ``1wng`` (GPU to host memory), plus network: each worker pushes
                          then pulls ``W = S + gw E``; a server's NICs carry its ``ceil(N/m)``
                          workers, each PS shard's NIC carries ``N W / P`` (the fan-in):
                          ``bytes = 2 max(ceil(N/m) W / nics, N W / P)``,
                          ``messages = 2 ceil(k / P)`` (a tensor per RPC, shards in parallel).
  ``allreduce_local``     ring all-reduce on the intra link, ``2 (p-1)/p S`` bytes in
                          ``2 (p-1)`` steps per tensor; sparse gradients all-gathered,
                          ``(p-1) E`` in ``p-1`` steps.
  ``allreduce_cluster``   hierarchical: intra reduce-scatter + all-gather ``2 (g-1)/g S``; the
                          ``m`` servers ring-all-reduce, each GPU its ``S/g`` shard, all sharing
                          the server's NICs: ``2 (m-1)/m S`` per server in ``2 (m-1)`` steps.
                          Sparse all-gather hierarchically: NIC ``g (m-1) E``, intra
                          ``(g-1) m E``.
  ``pearl``               dense part as ``allreduce_cluster`` (``m`` may be 1); embedding rows
                          exchanged by two all-to-alls (look-up, gradient): intra
                          ``2 (g-1)/p E``, NIC ``2 g (p-g)/p E`` per server, ``2 (g-1)`` and
                          ``2 (p-g)`` steps.
  ======================  =====================================================================

- overlap: ``hidden = min(overlap_fraction * comm, compute_bound + memory_bound)``;
  ``step = data_io + compute_bound + memory_bound + comm - hidden``. ``overlap_fraction = 0`` is the
  PAI study's additive model.

Output columns added by :func:`breakdown` (per job x scenario):

``num_gpus``, ``gpus_per_server_used``, ``fits_placement`` (bool), ``fits_gpu_memory`` (bool,
null if the peak memory is unknown), ``storage_s``, ``h2d_s``, ``data_io_s``, ``compute_bound_s``,
``memory_bound_s``, ``pcie_s``, ``nvlink_s``, ``network_s``, ``comm_s``, ``exposed_comm_s``,
``step_s``, ``samples_per_s`` (global: ``batch_size * num_gpus / step_s``), ``pcie_bytes``,
``nvlink_bytes``, ``network_bytes``, ``share_data_io``, ``share_compute_bound``,
``share_memory_bound``, ``share_pcie``, ``share_nvlink``, ``share_network`` (each communication
share is its link's part of the *exposed* communication; the six sum to 1), ``share_comm``,
``bottleneck`` (the component with the largest share) and ``bottleneck_link`` (the link class with
the largest communication time, ``none`` without communication).
"""

from __future__ import annotations

import polars as pl

from ddlscope.model.jobs import check_jobs_frame

COMPONENTS: tuple[str, ...] = ("data_io", "compute_bound", "memory_bound", "pcie", "nvlink", "network")
"""The six step-time components, in report order."""
LINKS: tuple[str, ...] = ("pcie", "nvlink", "network")
"""Link classes of weight/gradient communication."""

ComponentEnum = pl.Enum(list(COMPONENTS))
LinkEnum = pl.Enum([*LINKS, "none"])

OUTPUT_COLUMNS: tuple[str, ...] = (
    "num_gpus", "gpus_per_server_used", "fits_placement", "fits_gpu_memory",
    "storage_s", "h2d_s", "data_io_s", "compute_bound_s", "memory_bound_s",
    "pcie_s", "nvlink_s", "network_s", "comm_s", "exposed_comm_s", "step_s", "samples_per_s",
    "pcie_bytes", "nvlink_bytes", "network_bytes",
    *(f"share_{c}" for c in COMPONENTS), "share_comm", "bottleneck", "bottleneck_link",
)

c = pl.col


def _argmax(names: tuple[str, ...], cols: list[pl.Expr], dtype: pl.DataType, none_label: str | None) -> pl.Expr:
    """The name of the largest of ``cols`` (first wins ties); ``none_label`` if all are 0."""
    top = pl.max_horizontal(cols)
    expr = None
    for name, col in zip(names, cols, strict=True):
        expr = (pl.when(col == top).then(pl.lit(name)) if expr is None
                else expr.when(col == top).then(pl.lit(name)))
    out = expr.otherwise(pl.lit(None))
    if none_label is not None:
        out = pl.when(top <= 0).then(pl.lit(none_label)).otherwise(out)
    return out.cast(dtype)


def breakdown_lazy(jobs: pl.DataFrame | pl.LazyFrame) -> pl.LazyFrame:
    """The model as a lazy query: ``jobs`` (columns of :data:`ddlscope.model.jobs.JOB_SCHEMA`)
    with the output columns of this module's docstring appended.

    Raises:
        ValueError: a required column is missing (all are named).
    """
    check_jobs_frame(jobs)
    lf = jobs.lazy()
    arch = c("architecture")

    # -- placement ---------------------------------------------------------------------------
    lf = lf.with_columns(num_gpus=c("num_workers") * c("gpus_per_worker")).with_columns(
        gpus_per_server_used=(c("num_gpus") + c("num_servers") - 1) // c("num_servers"),
    ).with_columns(
        fits_placement=c("gpus_per_server_used") <= c("server_gpus"),
        _r=pl.min_horizontal(c("gpus_per_server_used"), c("gpus_per_pcie_root")).cast(pl.Float64),
        _has_nv=c("nvlink_bandwidth_bytes_per_s") > 0,
        _B_pcie=c("pcie_bandwidth_bytes_per_s") * c("eff_pcie"),
        _B_nv=c("nvlink_bandwidth_bytes_per_s") * c("eff_nvlink"),
        _B_nic=c("nic_bandwidth_bytes_per_s") * c("eff_network"),
        _p=c("num_gpus").cast(pl.Float64),
        _g=c("gpus_per_server_used").cast(pl.Float64),
        _m=c("num_servers").cast(pl.Float64),
        _k=c("num_gradient_tensors").cast(pl.Float64),
        _S=c("dense_param_bytes"),
        _E=c("sparse_bytes_per_step"),
        _sparse=(c("sparse_bytes_per_step") > 0).cast(pl.Float64),
    )

    # -- data I/O and computation --------------------------------------------------------------
    peak = (
        pl.when(c("precision") == "fp32").then(c("gpu_peak_fp32_flop_per_s"))
        .when(c("precision") == "tf32").then(c("gpu_peak_tf32_flop_per_s"))
        .when(c("precision") == "fp16").then(c("gpu_peak_fp16_flop_per_s"))
        .otherwise(c("gpu_peak_bf16_flop_per_s"))
    )
    lf = lf.with_columns(
        storage_s=c("_g") * c("stored_input_bytes") / (c("storage_read_bytes_per_s") * c("eff_storage")),
        h2d_s=pl.when(c("input_bytes") > 0)
        .then(c("pcie_latency_s") + c("_r") * c("input_bytes") / c("_B_pcie"))
        .otherwise(0.0),
        compute_bound_s=c("compute_bound_flops") / (peak * c("eff_compute")),
        memory_bound_s=pl.max_horizontal(
            c("memory_bound_bytes") * c("memory_bound_scale")
            / (c("gpu_memory_bandwidth_bytes_per_s") * c("eff_memory")),
            c("memory_bound_flops") / (c("gpu_peak_fp32_flop_per_s") * c("eff_compute")),
        ),
    )

    # -- communication: bytes and messages per link class ----------------------------------------
    p, g, m, k, S, E, r, sp = (c(x) for x in ("_p", "_g", "_m", "_k", "_S", "_E", "_r", "_sparse"))
    is_host_ps = arch.is_in(["1wng", "ps_worker"])
    is_ring = arch.is_in(["allreduce_local", "allreduce_cluster", "pearl"])
    is_gather = arch.is_in(["allreduce_local", "allreduce_cluster"])
    is_pearl = arch == "pearl"
    is_ps = arch == "ps_worker"
    f = pl.Float64

    # host traffic (GPU <-> host memory over the shared PCIe uplink)
    host_bytes = is_host_ps.cast(f) * 2 * r * (S + E)
    host_msgs = is_host_ps.cast(f) * 2 * k
    # intra-server collective traffic (per GPU)
    intra_bytes = (
        is_ring.cast(f) * 2 * (g - 1) / g * S
        + is_gather.cast(f) * (g - 1) * m * E
        + is_pearl.cast(f) * 2 * (g - 1) / p * E
    )
    intra_msgs = (
        is_ring.cast(f) * k * 2 * (g - 1)
        + is_gather.cast(f) * sp * (g - 1)
        + is_pearl.cast(f) * sp * 2 * (g - 1)
    )
    # network traffic (per NIC) and messages
    workers = c("num_workers").cast(f)
    workers_per_server = ((c("num_workers") + c("num_servers") - 1) // c("num_servers")).cast(f)
    ps_shards = pl.max_horizontal(c("num_ps"), 1).cast(f)
    nics = c("nics_per_server").cast(f)
    worker_bytes = S + c("gpus_per_worker").cast(f) * E
    ps_net_bytes = 2 * pl.max_horizontal(workers_per_server * worker_bytes / nics, workers * worker_bytes / ps_shards)
    ring_net_bytes = (
        is_ring.cast(f) * 2 * (m - 1) / m * S
        + is_gather.cast(f) * g * (m - 1) * E
        + is_pearl.cast(f) * 2 * g * (p - g) / p * E
    ) / nics
    net_bytes = pl.when(is_ps).then(ps_net_bytes).otherwise(ring_net_bytes)
    net_msgs = pl.when(is_ps).then(2 * (k / ps_shards).ceil()).otherwise(
        is_ring.cast(f) * k * 2 * (m - 1)
        + is_gather.cast(f) * sp * (m - 1)
        + is_pearl.cast(f) * sp * 2 * (p - g)
    )

    nv = c("_has_nv")
    lf = lf.with_columns(
        pcie_bytes=host_bytes + pl.when(nv).then(0.0).otherwise(intra_bytes),
        _pcie_msgs=host_msgs + pl.when(nv).then(0.0).otherwise(intra_msgs),
        nvlink_bytes=pl.when(nv).then(intra_bytes).otherwise(0.0),
        _nvlink_msgs=pl.when(nv).then(intra_msgs).otherwise(0.0),
        network_bytes=net_bytes,
        _network_msgs=net_msgs,
    ).with_columns(
        pcie_s=c("_pcie_msgs") * c("pcie_latency_s") + c("pcie_bytes") / c("_B_pcie"),
        nvlink_s=pl.when(nv)
        .then(c("_nvlink_msgs") * c("nvlink_latency_s") + c("nvlink_bytes") / c("_B_nv"))
        .otherwise(0.0),
        network_s=c("_network_msgs") * c("nic_latency_s") + c("network_bytes") / c("_B_nic"),
        data_io_s=c("storage_s") + c("h2d_s"),
    )

    # -- overlap, step time, shares --------------------------------------------------------------
    lf = lf.with_columns(
        comm_s=c("pcie_s") + c("nvlink_s") + c("network_s"),
        _compute_s=c("compute_bound_s") + c("memory_bound_s"),
    ).with_columns(
        exposed_comm_s=c("comm_s") - pl.min_horizontal(c("overlap_fraction") * c("comm_s"), c("_compute_s")),
    ).with_columns(
        step_s=c("data_io_s") + c("_compute_s") + c("exposed_comm_s"),
        _exposed_ratio=pl.when(c("comm_s") > 0).then(c("exposed_comm_s") / c("comm_s")).otherwise(0.0),
    ).with_columns(
        samples_per_s=c("batch_size") * c("num_gpus") / c("step_s"),
        share_data_io=c("data_io_s") / c("step_s"),
        share_compute_bound=c("compute_bound_s") / c("step_s"),
        share_memory_bound=c("memory_bound_s") / c("step_s"),
        share_pcie=c("pcie_s") * c("_exposed_ratio") / c("step_s"),
        share_nvlink=c("nvlink_s") * c("_exposed_ratio") / c("step_s"),
        share_network=c("network_s") * c("_exposed_ratio") / c("step_s"),
        share_comm=c("exposed_comm_s") / c("step_s"),
    )

    # -- memory capacity -------------------------------------------------------------------------
    table = c("embedding_table_bytes")
    needed = (
        pl.when(arch == "ps_worker").then(c("peak_memory_bytes") - table)
        .when(arch == "pearl").then(c("peak_memory_bytes") - table + table / p)
        .otherwise(c("peak_memory_bytes"))
    )
    lf = lf.with_columns(
        fits_gpu_memory=needed <= c("gpu_memory_bytes"),
        bottleneck=_argmax(COMPONENTS, [c(f"share_{x}") for x in COMPONENTS], ComponentEnum, None),
        bottleneck_link=_argmax(LINKS, [c(f"{x}_s") for x in LINKS], LinkEnum, "none"),
    )
    return lf.drop(pl.selectors.starts_with("_"))


def breakdown(jobs: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """Evaluate the step-time model on every row of ``jobs``; see the module docstring.

    Args:
        jobs: a Jobs table (:data:`ddlscope.model.jobs.JOB_SCHEMA` columns), one row per job x
            scenario. Extra columns are kept.

    Returns:
        ``jobs`` with :data:`OUTPUT_COLUMNS` appended (seconds, bytes, shares in [0, 1]).

    Raises:
        ValueError: a required column is missing.
    """
    return breakdown_lazy(jobs).collect()
