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
- compute-bound and memory-bound, two paths:

  * *op-level* (rows with the ``priced_*`` columns of :func:`ddlscope.model.compute.price_jobs`
    for the row's own ``gpu`` and ``precision``): every op of the workload's op table priced on the
    GPU by the roofline with size-dependent per-generation efficiencies, launch gaps per kernel
    (see :mod:`ddlscope.model.compute`); ``memory_bound_s`` = priced seconds x
    ``memory_bound_scale`` (a fusion scenario scales the memory-bound time as it scales the
    bytes); ``host_s`` = the fixed per-step host cost of the GPU's generation; the scheduled
    overlap's ``backward_fraction`` = the priced backward's share of the GPU time
    (``priced_backward_fraction``, where the column is given).
  * *totals* (other rows, e.g. a user's workload file without an op table): compute-bound =
    ``compute_bound_flops / (peak[precision] * eff_compute)`` (roofline, compute roof);
    memory-bound = ``max(memory_bound_bytes * memory_bound_scale / B_mem,
    memory_bound_flops / (peak_fp32 * eff_compute))`` (roofline, memory roof); ``host_s`` = 0.
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
  ``fsdp``                sharded data parallelism, priced by :mod:`ddlscope.model.sharded`
                          through :mod:`ddlscope.model.arch_costs` (all-gathers and
                          reduce-scatters per sharding; its own memory need and prefetch overlap).
  ======================  =====================================================================

  Which formula a row gets is read from the traits table :data:`ddlscope.specs.traits.TRAITS`
  (``host_parameters``, ``dense_ring``, ``sparse_allgather``, ``sparse_alltoall``, ``cost``).

- overlap: ``hidden = min(overlap_fraction * comm, compute_bound + memory_bound)``;
  ``step = data_io + compute_bound + memory_bound + host + comm - hidden``. ``overlap_fraction = 0`` is the
  PAI study's additive model.

Output columns added by :func:`breakdown` (per job x scenario):

``num_gpus``, ``gpus_per_server_used``, ``fits_placement`` (bool), ``fits_gpu_memory`` (bool,
null if the peak memory is unknown), ``gpu_memory_needed_bytes`` (what one GPU needs: the replica's
peak less what the architecture moves off or splits, the sharded state for ``fsdp``/``3d``; null
if the peak memory is unknown; ``fits_gpu_memory`` is it ``<= gpu_memory_bytes``), ``storage_s``,
``h2d_s``, ``data_io_s``, ``compute_bound_s``,
``memory_bound_s``, ``host_s``, ``pcie_s``, ``nvlink_s``, ``network_s``, ``comm_s``, ``exposed_comm_s``,
``step_s``, ``samples_per_s`` (global: ``batch_size * num_gpus / step_s``), ``pcie_bytes``,
``nvlink_bytes``, ``network_bytes``, ``share_data_io``, ``share_compute_bound``,
``share_memory_bound``, ``share_pcie``, ``share_nvlink``, ``share_network`` (each communication
share is its link's part of the *exposed* communication; the six plus ``share_host`` sum to 1),
``share_comm``, ``share_host``,
``bottleneck`` (the component with the largest share) and ``bottleneck_link`` (the link class with
the largest communication time, ``none`` without communication).
"""

from __future__ import annotations

import polars as pl

from ddlscope.model import arch_costs
from ddlscope.model.collectives import (
    alltoall_bytes_to_peers,
    alpha_beta_s,
    ring_allgather_bytes_per_rank,
    ring_allgather_steps,
    ring_allreduce_bytes_per_rank,
    ring_allreduce_steps,
)
from ddlscope.model.jobs import (
    ARCHITECTURE_OPTION_COLUMNS,
    JOB_SCHEMA,
    OPTIONAL_JOB_COLUMNS,
    check_jobs_frame,
    with_known_architectures,
)
from ddlscope.model.overlap import SCHEDULE_COLUMNS, schedule_passes, with_schedule_defaults
from ddlscope.specs.traits import kinds_where

COMPONENTS: tuple[str, ...] = ("data_io", "compute_bound", "memory_bound", "pcie", "nvlink", "network")
"""The six step-time components, in report order."""
LINKS: tuple[str, ...] = ("pcie", "nvlink", "network")
"""Link classes of weight/gradient communication."""

ComponentEnum = pl.Enum(list(COMPONENTS))
LinkEnum = pl.Enum([*LINKS, "none"])

OUTPUT_COLUMNS: tuple[str, ...] = (
    "num_gpus", "gpus_per_server_used", "fits_placement", "fits_gpu_memory", "gpu_memory_needed_bytes",
    "storage_s", "h2d_s", "data_io_s", "compute_bound_s", "memory_bound_s", "host_s",
    "pcie_s", "nvlink_s", "network_s", "comm_s", "exposed_comm_s", "hidden_comm_s", "sync_wait_s",
    "launch_exposed_s",
    "pcie_exposed_s", "nvlink_exposed_s", "network_exposed_s", "pcie_hidden_s", "nvlink_hidden_s",
    "network_hidden_s", "step_s", "samples_per_s",
    "pcie_bytes", "nvlink_bytes", "network_bytes",
    *(f"share_{c}" for c in COMPONENTS), "share_comm", "share_host", "bottleneck", "bottleneck_link",
)

ENGINE = "streaming"
"""The Polars engine that collects the model (:func:`collect`): ``"streaming"`` evaluates the passes
batch by batch (morsels of rows that stay in the CPU's caches, spread over the cores, the compiled
schedule called per batch) instead of one whole-table column per operation; the results are
bit-identical to ``"in-memory"``'s (every output column compared bit for bit on the benchmark's 10 M
rows and on the model's tests) in about half the wall time on the 2-core development machine
(docs/model.md, Speed)."""

c = pl.col


def collect(lf: pl.LazyFrame, engine: str | None = None) -> pl.DataFrame:
    """Collect a model query (:func:`breakdown_lazy` and what is built on it) with ``engine``
    (default :data:`ENGINE`; ``"in-memory"``, ``"streaming"`` or ``"auto"``, Polars' names).

    Raises:
        ValueError: an engine Polars does not know (Polars' own error).
    """
    return lf.collect(engine=engine or ENGINE)


def _indicator(cond: pl.Expr, nullable: bool = True) -> pl.Expr:
    """``cond`` as a 0/1 Float64 factor: 1.0 where true, 0.0 where false, null where null (the
    values of ``cond.cast(pl.Float64)``, which costs about 4x this ``when`` in Polars 2.1: 28 vs
    7 ms on 10 M rows). ``nullable`` false (the caller knows ``cond`` has no null): one branch,
    and a result without a validity mask for the terms it multiplies to carry."""
    if not nullable:
        return pl.when(cond).then(1.0).otherwise(0.0)
    return pl.when(cond).then(1.0).when(cond.not_()).then(0.0)


def _argmax(names: tuple[str, ...], cols: list[pl.Expr], best: pl.Expr, dtype: pl.DataType,
            none_label: str | None) -> pl.Expr:
    """The name of the largest of ``cols`` (the first wins ties); ``none_label`` if all are <= 0.

    ``best`` is their maximum, written by an earlier pass (one ``max_horizontal``): the first
    column equal to it wins. The names are ``dtype`` (Enum) literals: no per-row look-up from index
    to name (``replace_strict`` to an Enum cost 5x more on 3 M rows, Polars 2.1).
    """
    def label(name: str) -> pl.Expr:
        return pl.lit(name, dtype=dtype)

    out = pl.when(cols[0] == best).then(label(names[0]))
    for name, col in zip(names[1:-1], cols[1:-1], strict=True):
        out = out.when(col == best).then(label(name))
    out = out.otherwise(label(names[-1]))
    if none_label is not None:
        out = pl.when(best <= 0).then(label(none_label)).otherwise(out)
    return out


def breakdown_lazy(jobs: pl.DataFrame | pl.LazyFrame, costed: bool | None = None) -> pl.LazyFrame:
    """The model as a lazy query: ``jobs`` (columns of :data:`ddlscope.model.jobs.JOB_SCHEMA`)
    with the output columns of this module's docstring appended.

    Evaluated in passes (placement and link bandwidths; components, bytes, messages and memory fit;
    link times; overlap (the compiled schedule of :mod:`ddlscope.model.overlap`); shares and maxima;
    bottlenecks): each pass reads the previous
    passes' columns by name, so no sub-expression is evaluated twice (Polars' common-sub-expression
    elimination does not reach across the nested ``when`` chains; one expression graph was 2-3x
    slower). The ``__``-prefixed
    temporaries are dropped; the output is ``jobs``' columns then :data:`OUTPUT_COLUMNS`.

    ``costed``: whether rows of an architecture with its own cost function
    (:mod:`ddlscope.model.arch_costs`: ``fsdp``, ``3d``) may be present; ``None`` finds out for a
    DataFrame and assumes so for a LazyFrame. ``False`` with such rows prices them wrongly: only a
    caller that knows (:func:`ddlscope.model.scenarios.whatif_blocks`) passes it.

    Raises:
        ValueError: a required column is missing (all are named); an architecture the traits table
            does not know (:func:`~ddlscope.model.jobs.with_known_architectures`).
    """
    check_jobs_frame(jobs)
    in_cols = jobs.collect_schema().names()
    priced = "priced_compute_bound_s" in in_cols
    jobs_in = jobs
    # rows of an architecture priced by its own cost function (arch_costs); a DataFrame says so for free-ish
    if costed is None:
        costed = not isinstance(jobs_in, pl.DataFrame) or bool(
            jobs_in["architecture"].is_in(arch_costs.costed_kinds()).any())
    extra = costed
    # a DataFrame tells whether the indicators' inputs hold a null (a LazyFrame: assume so)
    if isinstance(jobs_in, pl.DataFrame):
        null_arch = jobs_in["architecture"].null_count() > 0
        null_sparse = jobs_in["sparse_bytes_per_step"].null_count() > 0
    else:
        null_arch = null_sparse = True
    jobs = with_model_defaults(with_known_architectures(jobs))
    # the backward's share of the step from the op-level prices where this row's GPU and precision were priced
    priced_backward = priced and "priced_backward_fraction" in in_cols
    if priced_backward:
        jobs = jobs.with_columns(backward_fraction=pl.when(
            c("priced_backward_fraction").is_not_null() & (c("priced_gpu") == c("gpu"))
            & (c("priced_precision") == c("precision").cast(pl.String))
        ).then(c("priced_backward_fraction")).otherwise(c("backward_fraction")))
    f = pl.Float64
    arch = c("architecture")
    S, E = c("dense_param_bytes"), c("sparse_bytes_per_step")

    # -- pass 1: placement, effective bandwidths, architecture indicators ------------------------
    num_gpus = c("num_workers") * c("gpus_per_worker")
    per_server = (num_gpus + c("num_servers") - 1) // c("num_servers")
    lf = jobs.lazy().with_columns(
        num_gpus=num_gpus,
        gpus_per_server_used=per_server,
        fits_placement=per_server <= c("server_gpus"),
        __p=num_gpus.cast(f),
        __g=per_server.cast(f),
        __m=c("num_servers").cast(f),
        __r=pl.min_horizontal(per_server, c("gpus_per_pcie_root")).cast(f),
        __k=c("num_gradient_tensors").cast(f),
        # a link's transport (its achieved share, ddlscope.model.jobs.OPTIONAL_JOB_COLUMNS) or the system's efficiency
        # host copies over PCIe at eff_pcie; GPU-to-GPU collectives over PCIe at the link's transport share
        __B_pcie=c("pcie_bandwidth_bytes_per_s") * c("eff_pcie"),
        __B_pcie_coll=c("pcie_bandwidth_bytes_per_s") * pl.coalesce(c("pcie_link_efficiency"), c("eff_pcie")),
        __B_nv=c("nvlink_bandwidth_bytes_per_s") * pl.coalesce(c("nvlink_link_efficiency"), c("eff_nvlink")),
        __B_nic=c("nic_bandwidth_bytes_per_s") * pl.coalesce(c("nic_link_efficiency"), c("eff_network")),
        __peak=pl.when(c("precision") == "fp32").then(c("gpu_peak_fp32_flop_per_s"))
        .when(c("precision") == "tf32").then(c("gpu_peak_tf32_flop_per_s"))
        .when(c("precision") == "fp16").then(c("gpu_peak_fp16_flop_per_s"))
        .otherwise(c("gpu_peak_bf16_flop_per_s")),
        __workers_per_server=((c("num_workers") + c("num_servers") - 1) // c("num_servers")).cast(f),
        __ps_shards=pl.max_horizontal(c("num_ps"), 1).cast(f),
        __flat=pl.when(c("num_servers") > 1).then(c("flat_ring")).otherwise(0.0),
        # architecture indicators as 0/1 factors, stored once (each is read by several terms below)
        # (the architectures' flags from the traits table, ddlscope.specs.traits)
        __sp=_indicator(E > 0, null_sparse),
        __is_host_ps=_indicator(arch.is_in(kinds_where("host_parameters")), null_arch),
        __is_ring=_indicator(arch.is_in(kinds_where("dense_ring")), null_arch),
        __is_gather=_indicator(arch.is_in(kinds_where("sparse_allgather")), null_arch),
        __is_pearl=_indicator(arch.is_in(kinds_where("sparse_alltoall")), null_arch),
    )
    p, g, m, r, k = c("__p"), c("__g"), c("__m"), c("__r"), c("__k")
    B_pcie, B_nv, B_nic = c("__B_pcie"), c("__B_nv"), c("__B_nic")
    sp, is_host_ps, is_ring, is_gather, is_pearl = (c(f"__{x}") for x in ("sp", "is_host_ps", "is_ring", "is_gather",
                                                                        "is_pearl"))
    # cheap per row (an Enum or a number compared): recomputed where used rather than stored
    has_nv = c("nvlink_bandwidth_bytes_per_s") > 0
    is_ps = arch.is_in(kinds_where("parameter_servers"))
    tables_on_ps = _indicator(arch.is_in(kinds_where("tables_off_gpu", "ps")), null_arch)
    tables_split = _indicator(arch.is_in(kinds_where("tables_off_gpu", "split")), null_arch)

    # -- pass 2: data I/O, computation, bytes and messages per link class ------------------------
    # host traffic (GPU <-> host memory over the shared PCIe uplink): up, then down
    # intra-server collective traffic (per GPU): the dense ring (reduce-scatter + all-gather among the
    # server's g GPUs), the sparse rows' hierarchical all-gather (each GPU gathers the m E rows its
    # server holds from its g-1 neighbours), and pearl's two all-to-alls with the g-1 neighbours
    # flat: NCCL's ring through all p GPUs across servers (flat_ring = 1, m > 1): every server's NIC
    # carries 2 (p-1)/p S in 2 (p-1) steps, its intra-server segments run concurrently with the
    # (slower) NIC segments and add nothing; else the hierarchical all-reduce of DESIGN.md
    flat = c("__flat")
    intra_bytes = (
        is_ring * (1 - flat) * ring_allreduce_bytes_per_rank(S, g)
        + is_gather * ring_allgather_bytes_per_rank(g * m * E, g)
        + is_pearl * 2 * alltoall_bytes_to_peers(E, p, g - 1)
    )
    intra_msgs = (
        is_ring * (1 - flat) * k * ring_allreduce_steps(g)
        + is_gather * sp * ring_allgather_steps(g)
        + is_pearl * sp * 2 * (g - 1)
    )
    # network traffic (per NIC): a PS job's busiest NIC is a worker server's or a shard's (the fan-in);
    # a collective job's server puts all its g GPUs on its NICs: the ring of the m servers over the
    # dense gradients (each GPU its S/g shard: S per server), the sparse rows' all-gather across
    # servers, and pearl's all-to-all with the p-g GPUs of other servers
    nics = c("nics_per_server").cast(f)
    worker_bytes = S + c("gpus_per_worker").cast(f) * E
    ps_net_bytes = 2 * pl.max_horizontal(c("__workers_per_server") * worker_bytes / nics,
                                         c("num_workers").cast(f) * worker_bytes / c("__ps_shards"))
    ring_net_bytes = (
        is_ring * ((1 - flat) * ring_allreduce_bytes_per_rank(S, m) + flat * ring_allreduce_bytes_per_rank(S, p))
        + is_gather * g * ring_allgather_bytes_per_rank(m * E, m)
        + is_pearl * 2 * g * alltoall_bytes_to_peers(E, p, p - g)
    ) / nics
    compute_bound_s = c("compute_bound_flops") / (c("__peak") * c("eff_compute"))
    memory_bound_s = pl.max_horizontal(
        c("memory_bound_bytes") * c("memory_bound_scale") / (c("gpu_memory_bandwidth_bytes_per_s") * c("eff_memory")),
        c("memory_bound_flops") / (c("gpu_peak_fp32_flop_per_s") * c("eff_compute")),
    )
    host_s: pl.Expr = pl.lit(0.0)
    if priced:  # op-level prices (ddlscope.model.compute.price_jobs) where they are for this row's GPU and precision
        valid = (c("priced_compute_bound_s").is_not_null() & (c("priced_gpu") == c("gpu"))
                 & (c("priced_precision") == c("precision").cast(pl.String)))
        compute_bound_s = pl.when(valid).then(c("priced_compute_bound_s")).otherwise(compute_bound_s)
        memory_bound_s = pl.when(valid).then(c("priced_memory_bound_s") * c("memory_bound_scale")).otherwise(
            memory_bound_s)
        host_s = pl.when(valid).then(c("priced_host_s")).otherwise(0.0)
    storage_s = g * c("stored_input_bytes") / (c("storage_read_bytes_per_s") * c("eff_storage"))
    # a replica's memory: the embedding tables live on the PS shards (ps_worker) or are split over
    # the p GPUs (pearl)
    table = c("embedding_table_bytes")
    needed = c("peak_memory_bytes") - table * (tables_on_ps + tables_split * (1 - 1 / p))
    net_msgs = (is_ring * k * ((1 - flat) * ring_allreduce_steps(m) + flat * ring_allreduce_steps(p))
                + is_gather * sp * ring_allgather_steps(m)
                + is_pearl * sp * 2 * (p - g))
    if extra:  # the architectures with their own cost function (0 on the other rows)
        # their terms in passes of their own (the default memory need, then every term as a column), so
        # that what the terms share is evaluated once (arch_costs.term_columns)
        ctx = arch_costs.context(counts=True, p=p, g=g, m=m, k=k, S=S, nics=nics, needed=c("__needed_default"))
        lf = (lf.with_columns(__needed_default=needed, **arch_costs.count_columns())
              .with_columns(**arch_costs.term_columns(ctx)))
        needed = c("__needed_default")
        x = arch_costs.extra_terms(arch, ctx, columns=True)
        intra_bytes, intra_msgs = intra_bytes + x["intra_bytes"], intra_msgs + x["intra_msgs"]
        ring_net_bytes, net_msgs = ring_net_bytes + x["network_bytes"], net_msgs + x["network_msgs"]
        needed = x["needed"]
        # model parallelism and the pipeline bubble scale the replica's compute (ddlscope.model.pipeline)
        compute_bound_s, memory_bound_s = compute_bound_s * x["compute_scale"], memory_bound_s * x["compute_scale"]
    lf = lf.with_columns(
        fits_gpu_memory=needed <= c("gpu_memory_bytes"),
        gpu_memory_needed_bytes=needed,
        storage_s=storage_s,
        h2d_s=pl.when(c("input_bytes") > 0).then(c("pcie_latency_s") + r * c("input_bytes") / B_pcie).otherwise(0.0),
        compute_bound_s=compute_bound_s,
        memory_bound_s=memory_bound_s,
        host_s=host_s,
        __host_bytes=is_host_ps * 2 * r * (S + E),
        __host_msgs=is_host_ps * 2 * k,
        __intra_bytes=intra_bytes,
        __intra_msgs=intra_msgs,
        network_bytes=pl.when(is_ps).then(ps_net_bytes).otherwise(ring_net_bytes),
        **({"__replicas": x["replicas"]} if extra else {}),
        __network_msgs=pl.when(is_ps).then(2 * (k / c("__ps_shards")).ceil()).otherwise(net_msgs),
    )

    # -- pass 3: the intra-server traffic goes on NVLink where the server has it, else on PCIe ---
    # (its PCIe share once, as a column: read by pcie_bytes and by the PCIe time below)
    lf = lf.with_columns(__intra_on_pcie=pl.when(has_nv).then(0.0).otherwise(c("__intra_bytes")))
    intra_on_pcie = c("__intra_on_pcie")
    lf = lf.with_columns(
        data_io_s=c("storage_s") + c("h2d_s"),
        pcie_bytes=c("__host_bytes") + intra_on_pcie,
        __pcie_msgs=c("__host_msgs") + pl.when(has_nv).then(0.0).otherwise(c("__intra_msgs")),
        nvlink_bytes=pl.when(has_nv).then(c("__intra_bytes")).otherwise(0.0),
        nvlink_s=pl.when(has_nv).then(
            alpha_beta_s(c("__intra_msgs"), c("nvlink_latency_s"), c("__intra_bytes"), B_nv)
        ).otherwise(0.0),
        network_s=alpha_beta_s(c("__network_msgs"), c("nic_latency_s"), c("network_bytes"), B_nic),
    )
    host_pcie_s = alpha_beta_s(c("__pcie_msgs"), c("pcie_latency_s"), c("pcie_bytes") - intra_on_pcie, B_pcie)
    lf = lf.with_columns(pcie_s=host_pcie_s
                         + intra_on_pcie / c("__B_pcie_coll"))
    lf = lf.with_columns(comm_s=c("pcie_s") + c("nvlink_s") + c("network_s"))
    # a DataFrame knows its null count for free: without a scheduled row the schedule is not built
    scheduled = not isinstance(jobs_in, pl.DataFrame) or jobs_in["overlap_fraction"].null_count() > 0
    # the schedule's parameters the table lacks are one default on every row (with_model_defaults)
    constants = {k: v for k, (_, v, _) in SCHEDULE_COLUMNS.items()
                 if k not in in_cols and not (priced_backward and k == "backward_fraction")}
    out = _shares(_step(lf, scheduled, extra, constants), priced, extra)
    return out.select(*in_cols, *(o for o in OUTPUT_COLUMNS if o not in in_cols))


def with_model_defaults(lf: pl.LazyFrame) -> pl.LazyFrame:
    """``lf`` with the optional Jobs columns it lacks: the links' achieved shares as null
    (:data:`~ddlscope.model.jobs.OPTIONAL_JOB_COLUMNS`) and the scheduled overlap's parameters at
    their defaults (:data:`~ddlscope.model.overlap.SCHEDULE_COLUMNS`)."""
    names = lf.collect_schema().names()
    missing = {k: pl.lit(None, dtype=JOB_SCHEMA[k][0]) for k in OPTIONAL_JOB_COLUMNS if k not in names}
    missing |= {k: pl.lit(None, dtype=t) for k, (t, _) in ARCHITECTURE_OPTION_COLUMNS.items() if k not in names}
    return with_schedule_defaults(lf.with_columns(**missing) if missing else lf)


def _step(lf: pl.LazyFrame, scheduled: bool = True, extra: bool = False,
          constants: dict[str, float] | None = None) -> pl.LazyFrame:
    """Pass 2: overlap and step time from the components.

    ``constants``: the schedule's parameters at their defaults on every row (the Jobs table lacked
    them), passed to :func:`~ddlscope.model.overlap.schedule_passes` as scalars.

    ``overlap_fraction`` null: the scheduled overlap of :mod:`ddlscope.model.overlap` (buckets
    queued behind the backward, the last exposed, plus the wait for the slowest rank); a number
    ``f``: ``hidden = min(f comm, compute)``, no wait (``f = 0`` is the PAI study's additive model).
    """
    compute_s = c("compute_bound_s") + c("memory_bound_s")
    # the host's per-step time (op-priced rows) neither hides communication nor is hidden by it
    if not scheduled:  # every row has a fraction: the PAI study's model or a fixed overlap
        fraction = c("comm_s") - pl.min_horizontal(c("overlap_fraction") * c("comm_s"), compute_s)
        lf = lf.with_columns(sync_wait_s=pl.lit(0.0), exposed_comm_s=fraction)
    else:  # the compiled schedule prices both kinds of row (a fraction where one is given)
        lf = schedule_passes(lf, compute_s=compute_s, ranks=c("__p"),
                             timeline="timeline_tau" in lf.collect_schema().names(), constants=constants,
                             tensors=c("__k"))
        exposed = c("__sched_exposed_s")
        if extra:  # an architecture's own overlap (FSDP's prefetch, ddlscope.model.arch_costs), scheduled rows
            own = arch_costs.scheduled_exposed(c("architecture"), exposed, c("comm_s"), compute_s,
                                               c("__k"), c("__sched_wait_s"))
            exposed = pl.when(c("overlap_fraction").is_null()).then(own).otherwise(exposed)
        lf = lf.with_columns(sync_wait_s=c("__sched_wait_s"), exposed_comm_s=exposed)
    step = c("data_io_s") + compute_s + c("exposed_comm_s") + c("host_s")
    # the exposed time beyond the links' own time and the wait: per-collective launch latency the
    # schedule puts on the critical path (the last bucket's launch after a short backward), not link time
    lf = lf.with_columns(launch_exposed_s=(c("exposed_comm_s") - c("sync_wait_s") - c("comm_s")).clip(lower_bound=0.0))
    # what the shares read, once: 1 / step, and the exposed (with and without the wait) per unit of communication
    has_comm = c("comm_s") > 0
    return lf.with_columns(
        step_s=step,
        hidden_comm_s=c("comm_s") + c("sync_wait_s") + c("launch_exposed_s") - c("exposed_comm_s"),
        __inv_step=1.0 / step,
        __exposed_per_comm=pl.when(has_comm).then(c("exposed_comm_s") / c("comm_s")).otherwise(0.0),
        # the links' own exposed time, without the wait for the slowest rank (sync_wait_s) and the
        # launch latency beyond the links' time (launch_exposed_s), both reported apart
        __link_exposed_per_comm=pl.when(has_comm).then(
            (c("exposed_comm_s") - c("sync_wait_s") - c("launch_exposed_s")) / c("comm_s")).otherwise(0.0),
    )


def _shares(lf: pl.LazyFrame, priced: bool = False, extra: bool = False) -> pl.LazyFrame:
    """Passes 3-5: throughput, shares and bottleneck from the step time."""
    inv_step, exposed_per_comm, link_exposed_per_comm = c("__inv_step"), c("__exposed_per_comm"), c(
        "__link_exposed_per_comm")
    lf = lf.with_columns(
        samples_per_s=c("batch_size") * (c("__replicas") if extra else c("num_gpus")) * inv_step,
        share_data_io=c("data_io_s") * inv_step,
        share_compute_bound=c("compute_bound_s") * inv_step,
        share_memory_bound=c("memory_bound_s") * inv_step,
        share_comm=c("exposed_comm_s") * inv_step,
        share_host=c("host_s") * inv_step if priced else pl.lit(0.0),
        **{f"__exposed_{x}_s": c(f"{x}_s") * exposed_per_comm for x in LINKS},
    )
    candidates = [c(f"{x}_s") for x in COMPONENTS[:3]] + [c(f"__exposed_{x}_s") for x in LINKS]
    link_s = [c(f"{x}_s") for x in LINKS]
    lf = lf.with_columns(
        **{f"share_{x}": c(f"__exposed_{x}_s") * inv_step for x in LINKS},
        **{f"{x}_exposed_s": c(f"{x}_s") * link_exposed_per_comm for x in LINKS},
        # never below 0: rounding must not give a tiny negative hidden time (the launch latency beyond
        # the links' time is launch_exposed_s, so the links' exposed share is at most 1)
        **{f"{x}_hidden_s": c(f"{x}_s") * (1 - link_exposed_per_comm).clip(lower_bound=0.0) for x in LINKS},
        __best_component=pl.max_horizontal(candidates),
        __best_link=pl.max_horizontal(link_s),
    )
    return lf.with_columns(
        bottleneck=_argmax(COMPONENTS, candidates, c("__best_component"), ComponentEnum, None),
        bottleneck_link=_argmax(LINKS, link_s, c("__best_link"), LinkEnum, "none"),
    )


def breakdown(jobs: pl.DataFrame | pl.LazyFrame, engine: str | None = None) -> pl.DataFrame:
    """Evaluate the step-time model on every row of ``jobs``; see the module docstring.

    Args:
        jobs: a Jobs table (:data:`ddlscope.model.jobs.JOB_SCHEMA` columns), one row per job x
            scenario. Extra columns are kept.
        engine: the Polars engine (:func:`collect`; default :data:`ENGINE`, streaming); the
            output does not depend on it.

    Returns:
        ``jobs`` with :data:`OUTPUT_COLUMNS` appended (seconds, bytes, shares in [0, 1]).

    Raises:
        ValueError: a required column is missing.
    """
    return collect(breakdown_lazy(jobs), engine)
