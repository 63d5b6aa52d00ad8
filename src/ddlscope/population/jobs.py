"""Job population -> Jobs table: attach each job's workload and system, every job accounted for.

Input: a job population (:data:`ddlscope.ingest.population.POPULATION_SCHEMA`: one row per job,
``attributed`` and ``reason``), from a trace reader or :mod:`ddlscope.population.builtin`.
Output: the Jobs table of the step-time model (:data:`ddlscope.model.jobs.JOB_SCHEMA`) for the
jobs that can be evaluated, plus the population with two more reasons filled in where a job cannot
be placed:

- ``does not fit its servers``: the job's GPUs per server exceed the server's (e.g. a shared-GPU
  PAI job counting more GPUs than its machine);
- ``cannot be profiled``: the workload of its model could not be profiled (message kept).

Workloads come from a :class:`~ddlscope.population.workloads.WorkloadLibrary` (one profile per
distinct model x batch size x precision) or, for jobs attributed by feature columns, from the
trace's own columns. Systems: each job runs on ``server_for[gpu]`` if given, else on
``default_server`` with its GPU swapped for the job's (``gpu`` column; null keeps the server's)
and, where the trace gives GPUs per machine (``server_gpus``), that many GPUs per server. The
work is done once per distinct key and joined, never per job.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from ddlscope.model.jobs import JOB_SCHEMA, SYSTEM_COLUMNS, system_columns
from ddlscope.population.workloads import WORKLOAD_COLUMNS, WorkloadLibrary
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import Catalog
from ddlscope.specs.overlap import overlap_fraction

c = pl.col
DOES_NOT_FIT = "does not fit its servers"
CANNOT_PROFILE = "cannot be profiled"
KEEP_COLUMNS = ("trace_job_id", "source", "model", "trace_model", "num_steps", "duration_s", "gpu_time_s",
                "shared_gpu", "status")
"""Population columns carried into the Jobs table (for the per-job report)."""


def _system_table(keys: pl.DataFrame, catalog: Catalog, default_server: str,
                  server_for: Mapping[str, str], link_transports: bool = False) -> pl.DataFrame:
    """System columns per distinct (``_gpu_in``, ``_server_gpus_in``, ``_server_in``) key."""
    rows = []
    for gpu, n, server in keys.iter_rows():
        base = server or (server_for.get(gpu) if gpu else None) or default_server
        cols = system_columns(catalog.system(base, gpu=gpu, gpus_per_server=n))
        if not link_transports:  # the links at the system's efficiencies (see assemble_jobs)
            cols.update(pcie_link_efficiency=None, nvlink_link_efficiency=None, nic_link_efficiency=None)
        rows.append({"_gpu_in": gpu, "_server_gpus_in": n, "_server_in": server,
                     **{k: cols[k] for k in SYSTEM_COLUMNS}})
    schema = {"_gpu_in": pl.String, "_server_gpus_in": pl.Int64, "_server_in": pl.String,
              **{k: JOB_SCHEMA[k][0] for k in SYSTEM_COLUMNS}}
    return pl.DataFrame(rows, schema=schema)


def _placement_table(jobs: pl.DataFrame) -> pl.DataFrame:
    """num_servers (resolved) or the reason the placement does not fit, per distinct placement."""
    keys = jobs.select("architecture", "num_workers", "gpus_per_worker", "num_ps", "_servers_in",
                       "server_gpus").unique()
    rows = []
    for arch, workers, gpw, ps, servers, g in keys.iter_rows():
        try:
            a = Architecture(kind=arch, num_workers=workers, gpus_per_worker=gpw, num_ps=ps, num_servers=servers)
            rows.append((arch, workers, gpw, ps, servers, g, a.servers_on(g), None))
        except ValueError as exc:
            rows.append((arch, workers, gpw, ps, servers, g, None, f"{DOES_NOT_FIT}: {exc}".splitlines()[0]))
    return pl.DataFrame(rows, schema={"architecture": JOB_SCHEMA["architecture"][0], "num_workers": pl.Int64,
                                      "gpus_per_worker": pl.Int64, "num_ps": pl.Int64, "_servers_in": pl.Int64,
                                      "server_gpus": pl.Int64, "_servers_out": pl.Int64, "_place_reason": pl.String},
                        orient="row")


def _join_beside(frame: pl.DataFrame, table: pl.DataFrame, left_on: list[str], right_on: list[str] | None = None
                 ) -> pl.DataFrame:
    """``frame.join(table, how="left", nulls_equal=True)`` in ``frame``'s row order, without
    copying ``frame``'s columns: only its key columns go through the join, and the table's other
    columns are put beside them (``table`` has one row per key, as the once-per-distinct tables
    here). A plain join where a column name is in both (the join's suffix decides its name)."""
    right_on = right_on or left_on
    if set(table.columns).difference(right_on) & set(frame.columns):
        return frame.join(table, left_on=left_on, right_on=right_on, how="left", nulls_equal=True)
    added = frame.select(left_on).join(table, left_on=left_on, right_on=right_on, how="left", nulls_equal=True,
                                       maintain_order="left").drop(left_on)
    return frame.hstack(added.get_columns())


def _keep(frame: pl.DataFrame, mask: pl.Expr) -> pl.DataFrame:
    """``frame.filter(mask)``, the frame itself (no copy) when every row passes."""
    rows = frame.select(mask.alias("_keep")).get_column("_keep")
    return frame if rows.all() and rows.null_count() == 0 else frame.filter(rows)


def assemble_jobs(
    population: pl.DataFrame,
    library: WorkloadLibrary,
    catalog: Catalog,
    *,
    default_server: str,
    server_for: Mapping[str, str] | None = None,
    precision: str = "fp32",
    overlap: str | float = "none",
    link_transports: bool = False,
    first_job_id: int = 0,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The Jobs table of a population's attributed jobs, and the population with placement reasons.

    Args:
        population: job population (``attributed``, ``reason``, ``model``, ``batch_size``,
            ``architecture``, ``num_workers``, ``gpus_per_worker``, ``num_ps``, ``num_servers``,
            optional ``gpu``, ``server_gpus``, ``server``, ``gpu_time_s``, feature columns).
        library: where workloads come from.
        catalog: hardware catalog.
        default_server: catalog server type jobs run on unless ``server_for`` or a ``server``
            column says otherwise.
        server_for: catalog GPU name -> server type.
        precision: precision of profiled workloads.
        overlap: overlap policy of every job.
        link_transports: price links at their catalog transports' achieved bandwidth
            (:meth:`~ddlscope.specs.system.LinkSpec.achieved_efficiency`); ``False`` (the default,
            the PAI-study reconstruction of ``characterize``) prices them at the system's stated
            efficiencies, so its headline figures stay those of docs/characterize.md.
        first_job_id: the ``job_id`` of the population's first row (a slice of a larger
            population: its offset, so the ids stay the rows' positions in the whole).

    Returns:
        ``(jobs, population)``: ``jobs`` has the :data:`~ddlscope.model.jobs.JOB_SCHEMA` columns
        (``job_id`` = ``first_job_id`` + the row's position in the population), ``gpu_time_s`` and
        :data:`KEEP_COLUMNS`; ``population`` is the input with ``job_id`` renamed
        ``trace_job_id``, the positional ``job_id``, and ``attributed``/``reason`` updated.

    Raises:
        CatalogError: an unknown server or GPU name in the options.
    """
    pop = population.rename({"job_id": "trace_job_id"}).with_row_index("job_id", offset=first_job_id)
    pop = pop.with_columns(c("job_id").cast(pl.Int64))
    for col, dtype in (("gpu", pl.String), ("server_gpus", pl.Int64), ("server", pl.String),
                       ("model_source", pl.String), ("trace_model", pl.String), ("gpu_time_s", pl.Float64)):
        if col not in pop.columns:
            pop = pop.with_columns(pl.lit(None, dtype).alias(col))
    cand = _keep(pop, c("attributed")).rename({"gpu": "_gpu_in", "server_gpus": "_server_gpus_in",
                                               "server": "_server_in", "num_servers": "_servers_in"})
    # workloads, once per distinct (model, batch, precision); feature-attributed jobs carry their own
    by_features = c("model_source") == "features"
    profiled = _keep(cand, ~by_features.fill_null(False))
    good_keys, failed = [], []
    for model, batch in profiled.select("model", "batch_size").unique().iter_rows():
        try:
            library.get(model, batch, precision)
            good_keys.append((model, batch, precision))
        except ValueError as exc:  # ProfileError is a ValueError
            failed.append({"model": model, "batch_size": batch, "_why": f"{CANNOT_PROFILE}: {exc}".splitlines()[0]})
    table = library.table(good_keys).drop("precision_key").rename({"batch_size": "_batch_actual"})
    profiled = _join_beside(profiled.drop([k for k in WORKLOAD_COLUMNS if k in profiled.columns and k != "batch_size"]),
                            table, ["model", "batch_size"], ["model", "batch_key"],
                            ).with_columns(batch_size=c("_batch_actual")).drop("_batch_actual")
    featured = cand.filter(by_features.fill_null(False)).with_columns(
        *(pl.lit(None, JOB_SCHEMA[k][0]).alias(k) for k in WORKLOAD_COLUMNS if k not in cand.columns))
    jobs = pl.concat([profiled, featured], how="diagonal_relaxed").with_columns(
        c("precision").fill_null(precision).cast(JOB_SCHEMA["precision"][0]),
        c("stored_input_bytes").fill_null(c("input_bytes")),
        *(c(k).fill_null(0) for k in ("memory_bound_flops", "input_bytes", "dense_param_bytes",
                                      "num_gradient_tensors", "sparse_bytes_per_step", "embedding_table_bytes")),
    )
    del cand, profiled, featured  # the wide intermediate copies: peak memory is a few copies of the Jobs table
    # systems, once per distinct (gpu, GPUs per machine, server)
    keys = ["_gpu_in", "_server_gpus_in", "_server_in"]
    systems = _system_table(jobs.select(keys).unique(), catalog, default_server, server_for or {},
                            link_transports)
    jobs = _join_beside(jobs, systems, keys)
    # placements, once per distinct placement
    place_keys = ["architecture", "num_workers", "gpus_per_worker", "num_ps", "_servers_in", "server_gpus"]
    jobs = _join_beside(jobs, _placement_table(jobs), place_keys)
    # the reasons found here
    why = jobs.select("job_id", "model", "batch_size", "_place_reason")
    if failed:
        why = why.join(pl.DataFrame(failed, schema={"model": pl.String, "batch_size": pl.Int64, "_why": pl.String}),
                       on=["model", "batch_size"], how="left", nulls_equal=True)
    else:
        why = why.with_columns(_why=pl.lit(None, pl.String))
    why = why.select("job_id", pl.coalesce("_why", "_place_reason").alias("_new_reason"))
    # job_id is the row's position in pop: the new reasons are scattered there (no copy of pop's columns)
    new_reason = pl.Series("_new_reason", [None], pl.String).extend_constant(None, pop.height - 1) \
        if pop.height else pl.Series("_new_reason", [], pl.String)
    if why.height:
        new_reason = new_reason.scatter(why.get_column("job_id") - first_job_id, why.get_column("_new_reason"))
    pop = pop.with_columns(reason=pl.coalesce(c("reason"), new_reason)).with_columns(attributed=c("reason").is_null())
    # the jobs still attributed, in their order (as a semi join on job_id, which is the row's position
    # in pop: a gather, no hash set of the ids); no copy when all are
    keep_rows = pop.get_column("attributed").gather(jobs.get_column("job_id") - first_job_id).fill_null(False)
    ok = jobs if keep_rows.all() else jobs.filter(keep_rows)
    del jobs, why, keep_rows
    ok = ok.with_columns(num_servers=c("_servers_out"), overlap_fraction=pl.lit(overlap_fraction(overlap)),
                         memory_bound_scale=pl.lit(1.0),
                         workload=pl.format("{} b{}", pl.coalesce("model", "trace_model", pl.lit("features")),
                                            c("batch_size")))
    keep = [k for k in KEEP_COLUMNS if k in ok.columns]
    out = ok.select(*(c(k).cast(t) for k, (t, _) in JOB_SCHEMA.items()), *keep)
    return out, pop
