"""The built-in population: ten zoo models (:data:`MODELS`) under each architecture and GPU count the PAI study
considers, on PAI-like servers. A reconstruction, not a trace.

The PAI study (Wang et al., IISWC 2019) characterises jobs of six architectures on 8-GPU V100
servers with and without NVLink, connected by 25 Gb/s Ethernet. Its job mix is not public, so
this population is a uniform grid (each combination once, equal duration, so GPU-time is
proportional to GPUs):

==================  ======================================================================
architecture        GPUs (and PS shards)
==================  ======================================================================
``1w1g``            1
``1wng``            2, 4, 8 (one worker)
``allreduce_local`` 2, 4, 8
``ps_worker``       2, 4, 8, 16, 32, 64 workers of one GPU, ``max(1, workers / 4)`` PS shards
                    (an assumption: PS shards scaled with the workers)
``allreduce_cluster`` 16, 32, 64 (8 GPUs per server)
``pearl``           8, 16, 32, 64 for models with embedding tables of at least 1 GB (PEARL is
                    the PAI architecture for huge embeddings)
==================  ======================================================================

on two servers: ``pai-v100-nvlink-8`` and ``pai-v100-pcie-8`` (catalog), each with one 25 Gb/s NIC.
Workloads: the models of :data:`MODELS` at their default sizes in FP32 (shipped profiles).
"""

from __future__ import annotations

import polars as pl

from ddlscope.ingest.population import POPULATION_SCHEMA
from ddlscope.population.workloads import WorkloadLibrary
from ddlscope.specs.traits import TRAITS

MODELS: tuple[str, ...] = (
    "resnet18", "resnet50", "transformer_nmt", "bert_base", "bert_large", "gpt2", "mind", "dlrm", "gcn_reddit",
    "wav2vec2_base",
)
"""The population's models: CNNs, Transformers, recommendation, a GNN and speech, the families of the PAI
study's job mix. A fixed list, so that a model added to the zoo does not change the reconstruction's
figures (each of these has a shipped FP32 profile)."""
SERVERS: tuple[str, ...] = ("pai-v100-nvlink-8", "pai-v100-pcie-8")
PEARL_MIN_TABLE_BYTES = TRAITS["pearl"].builtin_min_table_bytes
PLACEMENT_ORDER: tuple[str, ...] = ("1w1g", "1wng", "allreduce_local", "ps_worker", "allreduce_cluster", "pearl")
"""The order of the grid's architectures (job ids and row order as the reconstruction's figures have them)."""
PLACEMENTS: tuple[tuple[str, int, int, int], ...] = tuple(
    (kind, *placement) for kind in PLACEMENT_ORDER for placement in TRAITS[kind].builtin_placements)
"""(architecture, workers, GPUs per worker, PS shards) of the grid: each architecture's
``builtin_placements`` in the traits table (:data:`ddlscope.specs.traits.TRAITS`)."""

NOTE = (
    "The built-in population is a reconstruction, not a trace: a uniform grid of 10 zoo models under each "
    "architecture and GPU count the PAI study (IISWC 2019) considers, on 8 x V100 servers with and without NVLink "
    "and 25 Gb/s Ethernet, every job of equal duration. Its averages weight every combination equally; the study's "
    "weight its cluster's real job mix, which is dominated by 1w1g and PS/Worker jobs."
)


def builtin_population(
    library: WorkloadLibrary | None = None, models: list[str] | None = None, servers: tuple[str, ...] | None = None,
) -> pl.DataFrame:
    """The built-in job population (columns of :data:`~ddlscope.ingest.population.POPULATION_SCHEMA`
    plus ``server``), every row attributed.

    Args:
        library: where the models' table sizes come from (to select ``pearl`` models).
        models: zoo models (default :data:`MODELS`).
        servers: catalog server types (default :data:`SERVERS`, the PAI study's two).
    """
    library = library or WorkloadLibrary()
    if models is None:
        models = list(MODELS)
    rows = []
    for server in servers or SERVERS:
        for model in models:
            for arch, workers, gpw, ps in PLACEMENTS:
                min_table = TRAITS[arch].builtin_min_table_bytes
                if min_table > 0 and library.get(model, None, "fp32").embedding_table_bytes < min_table:
                    continue
                gpus = workers * gpw
                rows.append({
                    "job_id": f"{model}/{arch}/{gpus}gpu/{server}",
                    "source": "built-in population (reconstruction)",
                    "model": model, "model_source": "built-in", "trace_model": model,
                    "architecture": arch, "num_workers": workers, "gpus_per_worker": gpw, "num_ps": ps,
                    "num_gpus": gpus, "duration_s": 3600.0, "gpu_time_s": 3600.0 * gpus,
                    "server": server, "attributed": True,
                })
    schema = {k: t for k, (t, _) in POPULATION_SCHEMA.items()}
    schema["server"] = pl.String
    return pl.DataFrame(rows, schema={k: schema[k] for k in rows[0]})
