"""The one table of training-architecture traits: what each architecture allows and causes.

Every part of ddlscope that needs to know an architecture's rules reads them from :data:`TRAITS`:
the spec's validator (:class:`ddlscope.specs.architecture.Architecture`), the step-time model's
flags (:mod:`ddlscope.model.step_time`), the what-if port (:func:`ddlscope.model.scenarios._port`),
the ingest checks of an explicitly given architecture (:mod:`ddlscope.ingest.generic`,
:mod:`ddlscope.ingest.pai`), the trace baseline (:mod:`ddlscope.measure.baseline`) and the built-in
population (:mod:`ddlscope.population.builtin`). Adding an architecture means adding its row here
and, where its traffic is not one of the flags below, its cost function
(:data:`ddlscope.model.arch_costs.COSTS`); an architecture the table does not know is an error
everywhere (:func:`traits_of`).

Reconstruction: the six PAI architectures (Wang et al., IISWC 2019) are placed as the names denote
(the study's text is not available to us); ``fsdp`` follows PyTorch FSDP (Zhao et al., "PyTorch
FSDP: Experiences on Scaling Fully Sharded Data Parallel", VLDB 2023) and ZeRO (Rajbhandari et al.,
"ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", SC 2020).

=====================  =======  ============  =====================================================
kind                   servers  links         collectives per step (``S`` dense gradient bytes)
=====================  =======  ============  =====================================================
``1w1g``               1        pcie (input)  none
``1wng``               1        pcie          gradients up, weights down over the host's PCIe
``ps_worker``          >= 1     pcie, network push gradients / pull weights to P PS shards
``allreduce_local``    1        intra         ring all-reduce of S (sparse rows all-gathered)
``allreduce_cluster``  >= 2     intra, net    hierarchical all-reduce (intra RS/AG, inter ring)
``pearl``              >= 1     intra, net    dense all-reduce; embeddings two all-to-alls
``fsdp``               >= 1     intra, net    sharded: all-gather params, reduce-scatter grads
``3d``                 >= 1     intra, net    TP all-reduces, PP sends, EP all-to-alls, DP all-reduce
=====================  =======  ============  =====================================================

``intra`` is NVLink where the server has it, else PCIe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Link = Literal["pcie", "intra", "network"]


@dataclass(frozen=True)
class ArchitectureTraits:
    """The rules of one training architecture.

    Placement (read by the validator, the port, ingest):

    - ``one_worker``: exactly one worker process drives all the job's GPUs (``1w1g``, ``1wng``).
    - ``min_gpus`` / ``max_gpus``: GPUs in all (for a one-worker kind: the worker's GPUs);
      ``max_gpus`` ``None`` means unbounded.
    - ``parameter_servers``: the kind has >= 1 PS shard; every other kind has 0.
    - ``single_server``: all GPUs sit in one server.
    - ``min_servers``: fewest servers (``allreduce_cluster``: 2).
    - ``even_split``: the GPUs must divide evenly over the servers.

    Traffic (read by the step-time model as 0/1 flags; formulas in :mod:`ddlscope.model.step_time`):

    - ``host_parameters``: gradients up and weights down over the host's PCIe (``1wng``,
      ``ps_worker``); also the push/pull overlap schedule.
    - ``dense_ring``: ring (or hierarchical) all-reduce of the dense gradients.
    - ``sparse_allgather``: sparse (embedding) gradient rows all-gathered.
    - ``sparse_alltoall``: embedding rows exchanged by two all-to-alls (``pearl``).
    - ``tables_off_gpu``: where the embedding tables live if not on each GPU: ``"ps"`` (on the PS
      shards) or ``"split"`` (partitioned over the p GPUs); reduces the memory a GPU needs.
    - ``cost``: the name of an extra cost function in :data:`ddlscope.model.arch_costs.COSTS`
      (bytes and messages per link, memory, overlap), ``None`` for the flag-priced kinds.
    - ``sharded``: the kind reads a ``sharding`` (``fsdp``).
    - ``model_parallel``: the kind reads ``tp``, ``pp``, ``cp``, ``ep``, ``virtual_stages`` and
      ``microbatches`` (``3d``).
    - ``port_target``: a what-if may port a job to the kind (``3d``: no, its plan is the job's).

    Descriptive (docs, ``ddlscope`` help): ``placement``, ``links`` (link classes used),
    ``collectives`` (per step), ``port`` (what a what-if port to the kind sets).

    Population: ``builtin_placements`` = the (workers, GPUs per worker, PS shards) of the built-in
    PAI population (:mod:`ddlscope.population.builtin`); ``builtin_min_table_bytes`` = the smallest
    embedding table a model needs to be placed so (``pearl``: 1 GB).
    """

    kind: str
    placement: str
    one_worker: bool
    min_gpus: int
    max_gpus: int | None
    parameter_servers: bool
    single_server: bool
    min_servers: int
    even_split: bool
    links: tuple[Link, ...]
    collectives: str
    port: str
    host_parameters: bool = False
    dense_ring: bool = False
    sparse_allgather: bool = False
    sparse_alltoall: bool = False
    tables_off_gpu: Literal["ps", "split"] | None = None
    cost: str | None = None
    sharded: bool = False
    model_parallel: bool = False
    port_target: bool = True
    builtin_placements: tuple[tuple[int, int, int], ...] = field(default=())
    builtin_min_table_bytes: float = 0.0


TRAITS: dict[str, ArchitectureTraits] = {t.kind: t for t in (
    ArchitectureTraits(
        kind="1w1g", placement="one worker, one GPU",
        one_worker=True, min_gpus=1, max_gpus=1, parameter_servers=False, single_server=True, min_servers=1,
        even_split=False, links=("pcie",), collectives="none (only the input copy host to GPU)",
        port="one worker with one GPU on one server; applies to one-GPU jobs only",
        builtin_placements=((1, 1, 0),),
    ),
    ArchitectureTraits(
        kind="1wng", placement="one worker, n >= 2 GPUs of one server, parameters held on the host",
        one_worker=True, min_gpus=2, max_gpus=None, parameter_servers=False, single_server=True, min_servers=1,
        even_split=False, links=("pcie",),
        collectives="gradients up and weights down over the shared PCIe uplink (one message per tensor each way)",
        port="one worker with all p GPUs on one server; applies where 2 <= p <= server GPUs",
        host_parameters=True,
        builtin_placements=tuple((1, n, 0) for n in (2, 4, 8)),
    ),
    ArchitectureTraits(
        kind="ps_worker", placement="N workers x g GPUs, P parameter-server shards, across servers",
        one_worker=False, min_gpus=1, max_gpus=None, parameter_servers=True, single_server=False, min_servers=1,
        even_split=False, links=("pcie", "network"),
        collectives="each worker pushes gradients to and pulls weights from the P shards (PCIe, then the NIC; "
                    "sparse embeddings only the rows a step touches)",
        port="one worker per GPU on ceil(p / server GPUs) servers, num_ps shards (default one per server)",
        host_parameters=True, tables_off_gpu="ps",
        builtin_placements=tuple((n, 1, max(1, n // 4)) for n in (2, 4, 8, 16, 32, 64)),
    ),
    ArchitectureTraits(
        kind="allreduce_local", placement="n >= 2 GPUs of one server",
        one_worker=False, min_gpus=2, max_gpus=None, parameter_servers=False, single_server=True, min_servers=1,
        even_split=False, links=("intra",),
        collectives="ring all-reduce of the dense gradients on NVLink (PCIe without); sparse rows all-gathered",
        port="one worker per GPU, all p GPUs on one server; applies where 2 <= p <= server GPUs",
        dense_ring=True, sparse_allgather=True,
        builtin_placements=tuple((n, 1, 0) for n in (2, 4, 8)),
    ),
    ArchitectureTraits(
        kind="allreduce_cluster", placement="m >= 2 servers x g GPUs",
        one_worker=False, min_gpus=2, max_gpus=None, parameter_servers=False, single_server=False, min_servers=2,
        even_split=True, links=("intra", "network"),
        collectives="hierarchical all-reduce: intra-server reduce-scatter + all-gather, inter-server ring on the "
                    "NICs (or NCCL's flat ring); sparse rows all-gathered hierarchically",
        port="one worker per GPU on m = ceil(p / server GPUs) servers; applies where m >= 2 and m divides p",
        dense_ring=True, sparse_allgather=True,
        builtin_placements=tuple((n, 1, 0) for n in (16, 32, 64)),
    ),
    ArchitectureTraits(
        kind="pearl", placement="embedding tables partitioned over the GPUs, dense part replicated",
        one_worker=False, min_gpus=2, max_gpus=None, parameter_servers=False, single_server=False, min_servers=1,
        even_split=True, links=("intra", "network"),
        collectives="dense all-reduce as allreduce_cluster; embedding rows exchanged by two all-to-alls "
                    "(look-up, gradient)",
        port="one worker per GPU on m = ceil(p / server GPUs) servers; applies where m divides p",
        dense_ring=True, sparse_alltoall=True, tables_off_gpu="split",
        builtin_placements=tuple((n, 1, 0) for n in (8, 16, 32, 64)), builtin_min_table_bytes=1e9,
    ),
    ArchitectureTraits(
        kind="fsdp", placement="n >= 2 GPUs on m servers, parameters, gradients and optimizer state sharded",
        one_worker=False, min_gpus=2, max_gpus=None, parameter_servers=False, single_server=False, min_servers=1,
        even_split=True, links=("intra", "network"),
        collectives="per sharding (ddlscope.model.sharded): zero3/FULL_SHARD all-gather parameters in forward "
                    "and backward + reduce-scatter gradients; zero2/SHARD_GRAD_OP and zero1 one all-gather + "
                    "one reduce-scatter; HYBRID_SHARD zero3 inside a server + all-reduce of the shards across",
        port="one worker per GPU on m = ceil(p / server GPUs) servers, sharding of the scenario (default zero3); "
             "applies where m divides p",
        cost="fsdp", sharded=True,
    ),
    ArchitectureTraits(
        kind="3d", placement="tp x cp x pp x dp GPUs: tensor parallel within a server, context parallel, pipeline "
                            "stages, data-parallel replicas (ep of them splitting the experts)",
        one_worker=False, min_gpus=2, max_gpus=None, parameter_servers=False, single_server=False, min_servers=1,
        even_split=True, links=("intra", "network"),
        collectives="per micro-batch and layer 4 TP all-reduces of the activations (intra-server); PP sends of the "
                    "activations and their gradients between stages; with experts (ep > 1) 4 all-to-alls of the "
                    "routed tokens per MoE layer (intra-server while the EP group fits a server); per step the DP "
                    "all-reduce of each GPU's gradient shard, the experts' over dp/ep replicas "
                    "(ddlscope.model.pipeline)",
        port="not a port target (a plan, ddlscope.model.pipeline; tp, pp and micro-batches are the job's)",
        cost="3d", model_parallel=True, port_target=False,
    ),
)}
"""Every known architecture's traits, in report order."""

ARCHITECTURES: tuple[str, ...] = tuple(TRAITS)
"""The known architectures' names, in report order."""
PAI_ARCHITECTURES: tuple[str, ...] = ("1w1g", "1wng", "ps_worker", "allreduce_local", "allreduce_cluster", "pearl")
"""The six architectures of the PAI study (IISWC 2019)."""

SHARDINGS: tuple[str, ...] = ("zero1", "zero2", "zero3", "hybrid")
"""FSDP/ZeRO sharding strategies: ``zero1`` optimizer state sharded; ``zero2`` (FSDP
``SHARD_GRAD_OP``) gradients too; ``zero3`` (FSDP ``FULL_SHARD``) parameters too; ``hybrid`` (FSDP
``HYBRID_SHARD``) ``zero3`` within a server, replicated across servers."""
SHARDING_ALIASES: dict[str, str] = {
    **{s: s for s in SHARDINGS},
    "full_shard": "zero3", "shard_grad_op": "zero2", "hybrid_shard": "hybrid",
    "zero-1": "zero1", "zero-2": "zero2", "zero-3": "zero3",
}
"""Accepted spellings (any case) of a sharding: ZeRO stage names and PyTorch FSDP's
``ShardingStrategy`` members."""


def canonical_sharding(name: str) -> str:
    """The sharding of :data:`SHARDINGS` that ``name`` spells (``FULL_SHARD`` -> ``zero3``).

    Raises:
        ValueError: an unknown name, listing the accepted ones.
    """
    key = str(name).strip().lower()
    if key not in SHARDING_ALIASES:
        raise ValueError(f"sharding: unknown {name!r}; expected one of {', '.join(SHARDINGS)} "
                         "(or FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD)")
    return SHARDING_ALIASES[key]


def traits_of(kind: str) -> ArchitectureTraits:
    """The traits of architecture ``kind``.

    Raises:
        ValueError: ``kind`` is not in :data:`TRAITS` (names the known ones).
    """
    try:
        return TRAITS[str(kind)]
    except KeyError:
        raise ValueError(f"architecture: unknown {kind!r}; expected one of {', '.join(ARCHITECTURES)}") from None


def kinds_where(trait: str, value: object = True) -> list[str]:
    """The architectures whose ``trait`` equals ``value`` (``kinds_where("single_server")``)."""
    return [k for k, t in TRAITS.items() if getattr(t, trait) == value]


def single_server_kinds() -> list[str]:
    """The architectures that run on one server (``1w1g``, ``1wng``, ``allreduce_local``)."""
    return kinds_where("single_server")


def collective_data_parallel_kind(ranks: int, gpus_per_server: int, all_to_all: bool) -> str:
    """The architecture of a data-parallel collective job seen in a trace: ``1w1g`` for one rank,
    ``pearl`` with all-to-all collectives (embeddings exchanged), else the ring all-reduce kind
    whose placement fits: ``allreduce_local`` when the ranks fit one server, else
    ``allreduce_cluster`` (:mod:`ddlscope.measure.baseline`)."""
    if ranks <= 1:
        return "1w1g"
    if all_to_all:
        return "pearl"
    local = TRAITS["allreduce_local"]
    return "allreduce_local" if local.single_server and ranks <= gpus_per_server else "allreduce_cluster"
