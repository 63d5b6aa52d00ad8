"""The job-population table every trace reader produces, and the rules shared by the readers.

One row per job of the trace, attributed or not (:data:`POPULATION_SCHEMA`). A job is
*attributed* when the population model can evaluate it: a zoo model (or workload feature columns)
and a placement it can price; otherwise ``reason`` says why not. Rules, in the order they are
tried (the first that applies is the job's reason):

0. ``excluded by status: <status>``: the job's status is not among the selected ones
   (``IngestOptions.statuses``, ``--status``; default :data:`DEFAULT_STATUSES`: the jobs that ran,
   so a Waiting or Pending job, which never held a GPU, is counted here, not evaluated);
1. the reader's own reasons (PAI: ``malformed task/instance/group_tag row`` of the job, ``no task
   rows``, ``no GPU requested``, ``GPUs only on non-training tasks``);
2. ``GPU count missing``: the trace gives no GPU count;
3. ``no GPU requested``: zero GPUs (CPU-only jobs; Gavel skips such rows, we count them);
4. ``fractional GPU request``: a share of a GPU (GPU sharing), only when the caller asks for
   ``fractional_gpus="exclude"``; by default such jobs are attributed with ``shared_gpu`` true;
5. ``GPU type not in catalog``: the trace names a GPU type the hardware catalog does not know
   (PAI's ``MISC`` = older K40m/K80/M60 mixed together; see ``trace_gpu``);
6. ``no workload tag`` (PAI) / ``no model label`` (other tables): nothing names the model and no
   model mix or feature columns were given;
7. ``label not mapped to a zoo model``: the label (``trace_model``) has no zoo model in the
   model map (e.g. ``xlnet``, Gavel's ``LM``).

A job without duration is still attributed (``duration_s``/``gpu_time_s`` null); the report
counts such jobs (``IngestReport.jobs_without_duration``), and each aggregate states how it
weighs them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import polars as pl

from ddlscope.ingest.models import ModelMap, assign_model_mix, load_model_map
from ddlscope.model.jobs import JOB_SCHEMA, WORKLOAD_COLUMNS, ArchitectureEnum
from ddlscope.specs.catalog import Catalog, CatalogError, builtin_catalog

#: column -> (dtype, meaning). The single definition of the job-population table.
POPULATION_SCHEMA: dict[str, tuple[pl.DataType, str]] = {
    "job_id": (pl.String, "job identifier (PAI job_name; file:line where the trace has no id)"),
    "source": (pl.String, "file the job's row was read from"),
    "line": (pl.Int64, "line of the job's row in source (1-based; row number for Parquet)"),
    "trace_model": (pl.String, "model label as the trace gives it (PAI workload tag, Gavel family)"),
    "model": (pl.String, "zoo model name; null when none"),
    "model_source": (pl.String, "where model comes from: trace, mix, features; null when none"),
    "batch_size": (pl.Int64, "samples per GPU per step; null: the zoo default"),
    "architecture": (ArchitectureEnum, "training architecture (ddlscope.specs.architecture)"),
    "num_workers": (pl.Int64, "worker processes"),
    "gpus_per_worker": (pl.Int64, "GPUs per worker"),
    "num_ps": (pl.Int64, "parameter-server shards (ps_worker), else 0"),
    "num_servers": (pl.Int64, "servers holding the GPUs; null: as few as fit"),
    "num_gpus": (pl.Int64, "num_workers x gpus_per_worker (data-parallel replicas)"),
    "gpu_request": (pl.Float64, "GPUs the job requested, fractions included, all its tasks"),
    "shared_gpu": (pl.Boolean, "a worker requested a fraction of a GPU (GPU sharing)"),
    "server_gpus": (pl.Int64, "GPUs per machine of the job's machines per the trace; null: unknown"),
    "trace_gpu": (pl.String, "GPU type as the trace gives it"),
    "gpu": (pl.String, "catalog GPU name; null: unknown (the system's GPU is used)"),
    "num_steps": (pl.Int64, "training steps (iterations) when the trace gives them"),
    "duration_s": (pl.Float64, "run time of the job, seconds"),
    "gpu_time_s": (pl.Float64, "duration_s x gpu_request, GPU-seconds (weight of GPU-time aggregates)"),
    "status": (pl.String, "job status as the trace gives it"),
    "measured_gpu_util_percent": (pl.Float64, "mean measured GPU utilisation of the workers, % of one GPU"),
    "measured_peak_gpu_memory_bytes": (pl.Float64, "largest measured GPU memory of a worker, bytes"),
    "attributed": (pl.Boolean, "the population model can evaluate the job"),
    "reason": (pl.String, "why the job is not attributed; null when attributed"),
}

#: Workload columns of the model's Jobs table (:data:`ddlscope.model.jobs.WORKLOAD_COLUMNS`) a generic
#: trace may carry per job instead of a model name ("feature columns"); passed through under the same
#: names. All of them but ``workload`` (the name: the population's ``model``) and ``batch_size`` (a
#: population column of its own).
FEATURE_COLUMNS: dict[str, pl.DataType] = {
    name: JOB_SCHEMA[name][0] for name in WORKLOAD_COLUMNS if name not in ("workload", "batch_size")
}
REQUIRED_FEATURES: tuple[str, ...] = ("compute_bound_flops", "memory_bound_bytes")
"""Feature columns that must all be non-null for a job to be attributed by features."""

# reasons (the categories of the accounting)
GPU_COUNT_MISSING = "GPU count missing"
NO_GPU = "no GPU requested"
NO_GPU_WORKER = "GPUs only on non-training tasks"
NO_TASK_ROWS = "no task rows"
FRACTIONAL_GPU = "fractional GPU request"
GPU_NOT_IN_CATALOG = "GPU type not in catalog"
NO_WORKLOAD_TAG = "no workload tag"
NO_MODEL_LABEL = "no model label"
LABEL_NOT_MAPPED = "label not mapped to a zoo model"


EXCLUDED_BY_STATUS = "excluded by status"
"""Reason prefix of a job whose status is not selected: ``excluded by status: Waiting``."""

#: status class -> the trace statuses it holds (compared case-insensitively). From the traces'
#: documentation: PAI 2020 job table ``status`` (README of cluster-trace-gpu-v2020: Running,
#: Terminated, Failed, Waiting), Alibaba 2023 ``pod_phase`` (Running, Failed, Pending, Succeeded;
#: Kubernetes pod phases), Philly's job log (Pass, Failed, Killed; Jeon et al., ATC'19) and the
#: usual scheduler words (Slurm's COMPLETED, CANCELLED, PENDING, ...).
STATUS_CLASSES: dict[str, tuple[str, ...]] = {
    "finished": ("Terminated", "Succeeded", "Completed", "Finished", "Success", "Done", "Pass", "Passed"),
    "failed": ("Failed", "Killed", "Cancelled", "Canceled", "Error", "Timeout"),
    "running": ("Running",),
    "waiting": ("Waiting", "Pending", "Queued"),
}
OTHER_STATUS = "other"
"""Class of a status in no :data:`STATUS_CLASSES` class (a generic table's own word)."""
NO_STATUS = "unknown"
"""Class of a job whose trace gives no status (Gavel, Pollux's Philly list, an empty field)."""
STATUS_CLASS_NAMES: tuple[str, ...] = (*STATUS_CLASSES, OTHER_STATUS, NO_STATUS)
DEFAULT_STATUSES: tuple[str, ...] = ("finished", "failed", "running", OTHER_STATUS, NO_STATUS)
"""The jobs that ran (``--status ran``, the default): every status but ``waiting``. A Waiting (PAI)
or Pending (Kubernetes) job never got its GPUs: it has no run time, held no GPU-time and has no
step to price, so evaluating it like a finished job would count jobs that did not train. A failed
job did run, on its GPUs, until it failed (its GPU time was spent), and a running one was running
at the trace's end: both are kept. A status of no class and a job without one are kept too: nothing
says they did not run."""
STATUS_ALIASES: dict[str, tuple[str, ...] | None] = {"ran": DEFAULT_STATUSES, "all": None}


def parse_statuses(text: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """``--status`` -> the selected status terms (lower case), ``None`` for every job.

    Args:
        text: ``"all"`` (every job), ``"ran"`` (:data:`DEFAULT_STATUSES`), or a comma-separated
            list of status classes (:data:`STATUS_CLASS_NAMES`) and/or statuses as the trace
            spells them (case-insensitive), e.g. ``"terminated,failed"`` or ``"finished,waiting"``;
            ``None``: the default.

    Raises:
        ValueError: an empty list, or ``all``/``ran`` mixed with other terms.
    """
    if text is None:
        return DEFAULT_STATUSES
    items = [t.strip().lower() for t in (text.split(",") if isinstance(text, str) else text)]
    items = [t for t in items if t]
    if not items:
        raise ValueError(f"--status: expected all, ran, or a list of status classes ({', '.join(STATUS_CLASS_NAMES)}) "
                         "or trace statuses, e.g. terminated,failed")
    for alias, value in STATUS_ALIASES.items():
        if alias in items:
            if len(items) > 1:
                raise ValueError(f"--status: {alias!r} stands alone; got {','.join(items)}")
            return value
    return tuple(dict.fromkeys(items))


def status_class(status: pl.Expr) -> pl.Expr:
    """The :data:`STATUS_CLASSES` class of each status (``other`` for a status of no class,
    ``unknown`` where it is null or blank)."""
    low = status.str.strip_chars().str.to_lowercase()
    out = pl.when(low.is_null() | (low == "")).then(pl.lit(NO_STATUS))
    for name, values in STATUS_CLASSES.items():
        out = out.when(low.is_in([v.lower() for v in values])).then(pl.lit(name))
    return out.otherwise(pl.lit(OTHER_STATUS))


def status_selected(status: pl.Expr, statuses: Sequence[str] | None) -> pl.Expr:
    """Whether each job's status is selected: its class or its own spelling (case-insensitive)
    is among ``statuses`` (``None``: every job)."""
    if statuses is None:
        return pl.lit(True)
    terms = [t.lower() for t in statuses]
    low = status.str.strip_chars().str.to_lowercase()
    return status_class(status).is_in(terms) | low.is_in(terms).fill_null(False)


def check_status_terms(statuses: Sequence[str] | None, seen: Sequence[str | None]) -> None:
    """Reject a ``--status`` term that is neither a class, nor a status any class lists, nor a status
    of the trace (``seen``: its distinct statuses): a typo would silently exclude jobs.

    Raises:
        ValueError: naming the term, the classes and the trace's statuses.
    """
    if statuses is None:
        return
    known = set(STATUS_CLASS_NAMES) | {v.lower() for vs in STATUS_CLASSES.values() for v in vs}
    in_trace = {s.strip().lower() for s in seen if s}
    bad = [t for t in statuses if t not in known and t not in in_trace]
    if bad:
        found = ", ".join(sorted({s for s in seen if s})) or "none"
        raise ValueError(f"--status: {', '.join(repr(b) for b in bad)} is neither a status class "
                         f"({', '.join(STATUS_CLASS_NAMES)}) nor a status of the trace (found: {found})")


def status_note(population: pl.DataFrame, statuses: Sequence[str] | None) -> str | None:
    """The sentence counting the jobs excluded by status, per status (``None`` when none is)."""
    if population.height == 0 or statuses is None:
        return None
    out = population.filter(pl.col("reason").str.starts_with(EXCLUDED_BY_STATUS).fill_null(False))
    if out.height == 0:
        return None
    counts = out.group_by(pl.col("status").fill_null("(none)")).agg(n=pl.len())
    counts = counts.sort("n", "status", descending=[True, False])
    per = ", ".join(f"{st} {n:,}" for st, n in counts.iter_rows())
    chosen = "ran" if tuple(statuses) == DEFAULT_STATUSES else ",".join(statuses)
    why = (" (the default: jobs that ran; Waiting/Pending jobs never held their GPUs)"
           if chosen == "ran" else "")
    return (f"{out.height:,} job(s) excluded by status ({per}): --status {chosen}{why}; "
            "--status all evaluates every job")


def malformed_reason(table: str) -> str:
    """The reason of a job one of whose rows in ``table`` is malformed."""
    return f"malformed {table} row"


FractionalPolicy = Literal["attribute", "exclude"]
MultiGpuPolicy = Literal["allreduce_local", "1wng"]


@dataclass
class IngestOptions:
    """Choices that shape attribution (the API and CLI options of the same names).

    - ``model_map``: label -> zoo model map (built-in extended by the user's).
    - ``model_mix``: ``{zoo_name: weight}`` (normalised) assigned to jobs without any model label
      by :func:`~ddlscope.ingest.models.assign_model_mix`; ``None``: such jobs stay unattributed.
    - ``fractional_gpus``: ``attribute`` (default) counts a fractional request as one GPU per
      worker (ceil(plan_gpu / 100)) and flags ``shared_gpu``; ``exclude`` makes it a reason.
    - ``multi_gpu_instance``: architecture of one worker with several GPUs (see docs/ingest.md).
    - ``server_gpus``: GPUs per server assumed when a generic table gives only a GPU count
      (``None``: the format's default, 8).
    - ``catalog``: hardware catalog for GPU names.
    - ``statuses``: the job statuses evaluated (classes of :data:`STATUS_CLASSES`, ``other``,
      ``unknown``, or statuses as the trace spells them; lower case, see :func:`parse_statuses`);
      other jobs get the reason ``excluded by status: <status>``. Default
      :data:`DEFAULT_STATUSES` (the jobs that ran); ``None``: every job.
    """

    model_map: ModelMap = field(default_factory=load_model_map)
    model_mix: Mapping[str, float] | None = None
    fractional_gpus: FractionalPolicy = "attribute"
    multi_gpu_instance: MultiGpuPolicy = "allreduce_local"
    server_gpus: int | None = None
    catalog: Catalog = field(default_factory=builtin_catalog)
    statuses: tuple[str, ...] | None = DEFAULT_STATUSES

    def __post_init__(self) -> None:
        if self.fractional_gpus not in ("attribute", "exclude"):
            raise ValueError(f"fractional_gpus: expected 'attribute' or 'exclude', got {self.fractional_gpus!r}")
        if self.multi_gpu_instance not in ("allreduce_local", "1wng"):
            raise ValueError(
                f"multi_gpu_instance: expected 'allreduce_local' or '1wng', got {self.multi_gpu_instance!r}"
            )
        if self.server_gpus is not None and self.server_gpus < 1:
            raise ValueError(f"server_gpus: expected >= 1, got {self.server_gpus}")


def catalog_gpu_names(values: Sequence[str | None], catalog: Catalog) -> dict[str, str | None]:
    """Trace GPU type -> catalog GPU name (``None`` when the catalog does not know it), for the
    distinct values of a column (a handful; the look-up uses the catalog's aliases, e.g. PAI's
    ``V100`` -> ``V100-SXM2-16GB``, ``V100M32`` -> ``V100-SXM2-32GB``, ``P100`` ->
    ``P100-PCIE-16GB``, ``T4`` -> ``T4``)."""
    out: dict[str, str | None] = {}
    for v in values:
        if v is None or v in out:
            continue
        try:
            out[v] = catalog.gpu(v).name
        except CatalogError:
            out[v] = None
    return out


def count_architecture(
    num_gpus: pl.Expr, num_workers: pl.Expr, num_ps: pl.Expr, server_gpus: pl.Expr, multi_gpu: MultiGpuPolicy
) -> pl.Expr:
    """Architecture of a job known only by counts (generic tables), as an Enum expression.

    Rules: ``num_ps`` > 0 -> ``ps_worker``; one GPU -> ``1w1g``; a single worker (``num_workers``
    = 1 given) with several GPUs -> ``multi_gpu`` (``allreduce_local`` or ``1wng``); several
    GPUs that fit one server (<= ``server_gpus``) -> ``allreduce_local``; more ->
    ``allreduce_cluster``. Null where ``num_gpus`` is null or < 1.
    """
    kind = (
        pl.when(num_gpus.is_null() | (num_gpus < 1)).then(None)
        .when(num_ps.fill_null(0) > 0).then(pl.lit("ps_worker"))
        .when(num_gpus == 1).then(pl.lit("1w1g"))
        .when(num_workers == 1).then(pl.lit(multi_gpu))
        .when(num_gpus <= server_gpus).then(pl.lit("allreduce_local"))
        .otherwise(pl.lit("allreduce_cluster"))
    )
    return kind.cast(ArchitectureEnum)


def finalize(
    frame: pl.LazyFrame,
    opts: IngestOptions,
    *,
    no_label_reason: str,
    extra_columns: Sequence[str] = (),
) -> pl.DataFrame:
    """Apply the shared attribution rules and return the population in schema order.

    ``frame`` holds the :data:`POPULATION_SCHEMA` columns except ``model``, ``model_source``,
    ``gpu``, ``gpu_time_s`` (optional: a trace value is kept), ``attributed`` and ``reason``, plus
    ``pre_reason`` (the reader's own reason, String, null when none) and any
    :data:`FEATURE_COLUMNS` / ``extra_columns`` to pass through. See the module docstring for the
    rules.
    """
    names = frame.collect_schema().names()
    features = [c for c in FEATURE_COLUMNS if c in names]
    has_features = (
        pl.all_horizontal([pl.col(c).is_not_null() for c in REQUIRED_FEATURES])
        if all(c in features for c in REQUIRED_FEATURES)
        else pl.lit(False)
    )
    label = pl.col("trace_model")
    model = opts.model_map.expr(label)
    lf = frame.with_columns(_label_model=model, _features=has_features)
    if opts.model_mix:
        mix = assign_model_mix(label.is_null() & ~pl.col("_features"), opts.model_mix)
        lf = lf.with_columns(_mix_model=mix)
    else:
        lf = lf.with_columns(_mix_model=pl.lit(None, dtype=pl.String))
    lf = lf.with_columns(
        model=pl.coalesce("_label_model", "_mix_model"),
        model_source=pl.when(pl.col("_label_model").is_not_null()).then(pl.lit("trace"))
        .when(pl.col("_mix_model").is_not_null()).then(pl.lit("mix"))
        .when(pl.col("_features")).then(pl.lit("features")),
    )
    # GPU names: the distinct trace values only (a handful), looked up in the catalog
    distinct = lf.select(pl.col("trace_gpu").unique()).collect()["trace_gpu"].to_list()
    gpu_map = catalog_gpu_names(distinct, opts.catalog)
    lf = lf.with_columns(
        gpu=pl.col("trace_gpu").replace_strict(list(gpu_map), list(gpu_map.values()), default=None,
                                               return_dtype=pl.String)
    )
    status = pl.col("status") if "status" in names else pl.lit(None, dtype=pl.String)
    if opts.statuses is not None:
        check_status_terms(opts.statuses, lf.select(status.unique()).collect().to_series().to_list())
    reason = (
        pl.when(~status_selected(status, opts.statuses))
        .then(pl.format(f"{EXCLUDED_BY_STATUS}: {{}}", status.fill_null("(none)")))
        .when(pl.col("pre_reason").is_not_null()).then(pl.col("pre_reason"))
        .when(pl.col("num_gpus").is_null() & pl.col("gpu_request").is_null()).then(pl.lit(GPU_COUNT_MISSING))
        .when(pl.col("gpu_request").fill_null(0) <= 0).then(pl.lit(NO_GPU))
        .when(pl.lit(opts.fractional_gpus == "exclude") & pl.col("shared_gpu")).then(pl.lit(FRACTIONAL_GPU))
        .when(pl.col("trace_gpu").is_not_null() & pl.col("gpu").is_null()).then(pl.lit(GPU_NOT_IN_CATALOG))
        .when(pl.col("model").is_null() & ~pl.col("_features") & label.is_null()).then(pl.lit(no_label_reason))
        .when(pl.col("model").is_null() & ~pl.col("_features")).then(pl.lit(LABEL_NOT_MAPPED))
    )
    gpu_time = pl.col("duration_s") * pl.col("gpu_request")
    if "gpu_time_s" in names:
        gpu_time = pl.coalesce("gpu_time_s", gpu_time)
    lf = lf.with_columns(reason=reason, gpu_time_s=gpu_time).with_columns(attributed=pl.col("reason").is_null())
    cols = [pl.col(c).cast(dtype) if c in names or c in _DERIVED else pl.lit(None, dtype=dtype).alias(c)
            for c, (dtype, _) in POPULATION_SCHEMA.items()]
    cols += [pl.col(c).cast(FEATURE_COLUMNS[c]) for c in features]
    cols += [pl.col(c) for c in extra_columns]
    return lf.select(cols).collect()


_DERIVED = frozenset({"model", "model_source", "gpu", "gpu_time_s", "attributed", "reason"})


def duration_counts(population: pl.DataFrame) -> tuple[int, int]:
    """``(jobs, attributed jobs)`` of ``population`` whose ``duration_s`` is null (the trace gives
    no run time: Gavel, or PAI jobs without instance or task times). Their ``gpu_time_s`` is null
    too, unless the trace gives it itself; how an aggregate weighs them is the aggregate's choice
    (``ddlscope characterize`` estimates it from the job's steps where the trace gives them)."""
    missing = population.get_column("duration_s").is_null()  # a mask, not a filtered copy of the table
    return int(missing.sum()), int((missing & population.get_column("attributed")).sum() or 0)


def empty_population() -> pl.DataFrame:
    """A population table with no rows (the :data:`POPULATION_SCHEMA` columns)."""
    return pl.DataFrame(schema={c: t for c, (t, _) in POPULATION_SCHEMA.items()})
