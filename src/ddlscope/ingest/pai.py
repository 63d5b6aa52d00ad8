"""Reader of the Alibaba PAI GPU cluster trace 2020 (``alibaba/clusterdata``, cluster-trace-gpu-v2020).

The trace is seven headerless CSV tables (column names in the ``.header`` files, units in the
trace's README; Weng et al., "MLaaS in the Wild", NSDI'22):

==================  =========================================================================
table               use here
==================  =========================================================================
pai_job_table       one row per job: ``job_name`` (the job id), ``inst_id``, ``status``
pai_task_table      the job's tasks: role (``task_name``), ``inst_num`` instances, each with
                    ``plan_gpu`` % of a GPU (100 = one GPU) of type ``gpu_type``
pai_instance_table  the instances: ``machine`` they ran on, start/end times (run time)
pai_machine_spec    per machine: ``gpu_type``, ``cap_gpu`` (GPUs per machine)
pai_group_tag_table per ``inst_id``: ``workload`` tag (~9 % of instances), ``gpu_type_spec``
pai_sensor_table    per instance (``worker_name``): measured GPU utilisation and memory
pai_machine_metric  machine-level metrics: accepted, not read (no population column needs it)
==================  =========================================================================

Only the job and task tables are required; without the others the placement, the run time, the
tags or the measurements are unknown (the report says which tables were missing).

**Rules** (every one also in docs/ingest.md). Times equal to 0 mean *unknown* (the trace's own
analysis scripts treat them so).

Task roles, from ``task_name`` (case-insensitive): ``ps`` is a parameter server;
``evaluator`` and ``OpenmpiTracker`` are auxiliary (evaluation; the MPI launcher); every other
task name (``worker``, ``chief``, ``tensorflow``, ``PyTorchWorker``, ``xComputeWorker``, ...)
is a training worker. A worker task requesting no GPU (``plan_gpu`` empty or 0) is a CPU worker and
does not count towards the GPU placement.

GPUs per instance = ceil(plan_gpu / 100). A ``plan_gpu`` that is not a multiple of 100 (e.g.
50 = half a GPU: GPU sharing) is a *fractional* request: by default the job is attributed with
one GPU per such instance and ``shared_gpu`` true; with ``fractional_gpus="exclude"`` it is not
attributed (reason ``fractional GPU request``). ``gpu_request`` keeps the fraction:
sum over all the job's tasks of inst_num x plan_gpu / 100, so ``gpu_time_s`` weighs what the job
held.

Architecture (W = GPU worker instances = sum of ``inst_num`` of the worker tasks with GPUs;
g = the largest GPUs-per-instance among them; P = instances of ``ps`` tasks; M = distinct
machines of the worker instances in the instance table):

1. P >= 1 -> ``ps_worker``, ``num_workers`` = W, ``num_ps`` = P, ``num_servers`` = M (null if
   unknown);
2. W = 1, g = 1 -> ``1w1g``;
3. W = 1, g > 1 -> ``allreduce_local`` by default, ``1wng`` with ``multi_gpu_instance="1wng"``:
   the trace does not record how one process drives several GPUs; the frameworks PAI ran in
   2020 (TensorFlow MirroredStrategy, Horovod, PyTorch DDP) all-reduce over NCCL, while ``1wng``
   (parameters on the host) is the TensorFlow 1.x pattern the 2019 study still saw;
4. W >= 2 on one machine (M = 1) -> ``allreduce_local``;
5. W >= 2 on M >= 2 machines -> ``allreduce_cluster``; ``num_servers`` = M when the GPUs divide
   evenly over the M machines (hierarchical all-reduce needs an even split), else null (as few
   servers as fit);
6. W >= 2 with the placement unknown (no instance rows, or none naming a machine): as few servers
   as fit the W x g GPUs on servers of ``server_gpus`` GPUs (``--server-gpus``; default
   :data:`DEFAULT_SERVER_GPUS` = 8, as for the generic tables): ``allreduce_local`` on one server
   when they fit it, else ``allreduce_cluster`` with ``num_servers`` null.

Duration: the run time of the worker instances, max(end) - min(start) over the deduplicated
instances (the instance table repeats a ``worker_name`` when an instance is restarted; the last
start is kept); if unknown, the same over the worker tasks. Not the job's own times: its
``start_time`` is the submission time, so they include the queueing delay.

GPU type: the worker task's ``gpu_type`` (what the job was assigned), else the machine's
``gpu_type``, else the group tag's ``gpu_type_spec`` (what was asked for); mapped to the
catalog through its aliases (``V100`` -> ``V100-SXM2-16GB``, ``V100M32`` -> ``V100-SXM2-32GB``,
``P100`` -> ``P100-PCIE-16GB``, ``T4`` -> ``T4``). ``MISC`` (older K40m/K80/M60, mixed) is not
in the catalog: reason ``GPU type not in catalog``.

Model: the ``workload`` tag of the job's ``inst_id`` (first non-empty one), through the model
map; no tag -> ``no workload tag`` unless a model mix is given.

Measurements: ``measured_gpu_util_percent`` = mean ``gpu_wrk_util`` over the worker instances;
``measured_peak_gpu_memory_bytes`` = max ``max_gpu_wrk_mem`` x 2^30 (the trace says "GB"; its
``plan_mem`` values, e.g. 29.296875 = 30000/1024, show binary gigabytes).

Repeated rows. A line identical to an earlier line of the same table (an exact duplicate) is
counted in ``duplicate_rows`` and not used; it says nothing new, so it does not make its job
malformed. A restarted instance repeats its ``worker_name`` in the instance table: the row with
the latest start is kept, the others are counted in ``superseded_rows``; so are sensor rows
followed by a later row of the same ``worker_name`` (the last in file order is kept). A repeated
key with different content in the job, task or machine table is a conflict: a malformed row
(``duplicate key``; the first is kept). Each count is a column of ``IngestReport.tables`` and a
note names the table and the rule.

Malformed rows (wrong field count, unparsable number, non-whole count, negative GPUs or
counts, unknown job status, end before start, missing or conflicting duplicate key) are reported
with file and line. A job whose job-table row is malformed is not in the population (it has no trusted id); a
job with a malformed task, instance or group_tag row is in it, not attributed (reason
``malformed <table> row``). Malformed sensor and machine rows only lose their measurements.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import polars as pl

from ddlscope.ingest.population import (
    NO_GPU,
    NO_GPU_WORKER,
    NO_TASK_ROWS,
    NO_WORKLOAD_TAG,
    IngestOptions,
    finalize,
    malformed_reason,
)
from ddlscope.ingest.report import IngestReport
from ddlscope.ingest.table import ColumnKind, TableRead, read_delimited
from ddlscope.model.jobs import ArchitectureEnum
from ddlscope.specs.traits import TRAITS, single_server_kinds

FORMAT = "pai-v2020"

#: table -> (file stem, columns in file order, kinds of the columns read). From the trace's
#: ``.header`` files (cluster-trace-gpu-v2020/data/*.header).
TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "job": ("pai_job_table", ("job_name", "inst_id", "user", "status", "start_time", "end_time")),
    "task": ("pai_task_table", ("job_name", "task_name", "inst_num", "status", "start_time", "end_time",
                                "plan_cpu", "plan_mem", "plan_gpu", "gpu_type")),
    "instance": ("pai_instance_table", ("job_name", "task_name", "inst_name", "worker_name", "inst_id",
                                        "status", "start_time", "end_time", "machine")),
    "sensor": ("pai_sensor_table", ("job_name", "task_name", "worker_name", "inst_id", "machine", "gpu_name",
                                    "cpu_usage", "gpu_wrk_util", "avg_mem", "max_mem", "avg_gpu_wrk_mem",
                                    "max_gpu_wrk_mem", "read", "write", "read_count", "write_count")),
    "group_tag": ("pai_group_tag_table", ("inst_id", "user", "gpu_type_spec", "group", "workload")),
    "machine_spec": ("pai_machine_spec", ("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu")),
    "machine_metric": ("pai_machine_metric", ("worker_name", "machine", "start_time", "end_time",
                                              "machine_cpu_iowait", "machine_cpu_kernel", "machine_cpu_usr",
                                              "machine_gpu", "machine_load_1", "machine_net_receive",
                                              "machine_num_worker", "machine_cpu")),
}
REQUIRED_TABLES = ("job", "task")
UNUSED_TABLES = ("machine_metric",)

_KINDS: dict[str, dict[str, ColumnKind]] = {
    "job": {"job_name": "str", "inst_id": "str", "status": "str", "start_time": "float", "end_time": "float"},
    "task": {"job_name": "str", "task_name": "str", "inst_num": "int", "start_time": "float", "end_time": "float",
             "plan_gpu": "float", "gpu_type": "str"},
    "instance": {"job_name": "str", "task_name": "str", "inst_name": "str", "worker_name": "str",
                 "start_time": "float", "end_time": "float", "machine": "str"},
    "sensor": {"worker_name": "str", "gpu_wrk_util": "float", "max_gpu_wrk_mem": "float"},
    "group_tag": {"inst_id": "str", "gpu_type_spec": "str", "workload": "str"},
    "machine_spec": {"machine": "str", "gpu_type": "str", "cap_gpu": "int"},
}
"""The columns read from each table and how they are parsed: the ones the population uses. Every
line's field count is checked against the full schema; numbers are checked in these columns."""

DEFAULT_SERVER_GPUS = 8
"""GPUs per server of rule 6 (placement unknown) unless ``IngestOptions.server_gpus`` says otherwise:
the 8-GPU servers of the PAI study (IISWC 2019) and of the generic tables' default."""

JOB_STATUSES: tuple[str, ...] = ("Running", "Terminated", "Failed", "Waiting")
"""Job statuses of the trace's README; any other value makes the job row malformed."""

PS_TASKS: tuple[str, ...] = ("ps",)
AUXILIARY_TASKS: tuple[str, ...] = ("evaluator", "OpenmpiTracker")
"""Task names that are neither parameter servers nor training workers (compared case-insensitively)."""

GIB = float(2**30)

SUPERSEDED_RULES: dict[str, str] = {
    "instance": "instance (job, task_name, worker_name): a restart, the row with the latest start_time is kept",
    "sensor": "worker_name: the last row in file order is kept",
}
"""Tables whose repeated keys are records replaced by a later one, and the rule (the report's note):
``superseded_rows`` of :attr:`IngestReport.tables` counts the rows so replaced."""

# problems of malformed rows found by the rules below
MISSING_KEY = "missing key"
DUPLICATE_KEY = "duplicate key"
UNKNOWN_STATUS = "unknown status"
NEGATIVE = "negative value"
END_BEFORE_START = "end before start"
IMPLAUSIBLE = "implausible value"
MAX_PLAN_GPU = 100.0 * 1024
"""The largest ``plan_gpu`` taken (percent of a GPU): 1,024 GPUs per instance, far above any server
of the trace (its machines hold at most 8); a larger request is a corrupt row (rejected, not cast
to an overflowing GPU count)."""

_SUFFIXES = (".csv", ".csv.gz", ".tar.gz", ".tgz")


def _table_of(path: Path) -> str | None:
    name = path.name
    for table, (stem, _) in TABLES.items():
        if any(name == stem + s for s in _SUFFIXES):
            return table
    return None


def find_tables(paths: Sequence[str | Path]) -> dict[str, Path]:
    """Table -> file for a directory holding the tables and/or explicit table files.

    Files are recognised by name: ``pai_<table>.csv``, ``.csv.gz``, ``.tar.gz`` or ``.tgz``
    (as distributed). A directory contributes every such file in it.

    Raises:
        FileNotFoundError: a path that does not exist.
        ValueError: a file whose name is not a PAI table, a table given twice, or a missing
            job or task table (listing what was found).
    """
    found: dict[str, Path] = {}
    for p in (Path(x) for x in paths):
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        candidates = sorted(p.iterdir()) if p.is_dir() else [p]
        for c in candidates:
            table = _table_of(c)
            if table is None:
                if p.is_dir():
                    continue
                stems = ", ".join(stem for stem, _ in TABLES.values())
                raise ValueError(f"{c}: not a PAI 2020 table file; expected one of {stems} (.csv, .csv.gz, .tar.gz)")
            if table in found and found[table] != c:
                raise ValueError(f"{TABLES[table][0]}: given twice ({found[table]} and {c}); keep one")
            found[table] = c
    missing = [TABLES[t][0] for t in REQUIRED_TABLES if t not in found]
    if missing:
        where = ", ".join(str(p) for p in paths)
        have = ", ".join(str(v) for v in found.values()) or "none"
        raise ValueError(f"{where}: PAI 2020 trace needs {' and '.join(missing)} (.csv/.csv.gz/.tar.gz); found: {have}")
    return found


def _read(table: str, path: Path) -> TableRead:
    return read_delimited(path, table=table, columns=TABLES[table][1], types=_KINDS[table], has_header="auto")


def _times(read: TableRead) -> TableRead:
    """0 = unknown time -> null; then reject rows ending before they start."""
    read = _with(read, [pl.when(pl.col(c) > 0).then(pl.col(c)).alias(c) for c in ("start_time", "end_time")])
    return read.reject(
        pl.col("end_time") < pl.col("start_time"),
        END_BEFORE_START,
        pl.format("end_time {} < start_time {}", pl.col("end_time"), pl.col("start_time")),
    )


def _with(read: TableRead, exprs: list[pl.Expr]) -> TableRead:
    return replace(read, frame=read.frame.with_columns(exprs))


def _dedupe(read: TableRead, keys: list[str], what: str) -> TableRead:
    """Reject every row after the first with the same ``keys`` (exact duplicates were removed before:
    these rows conflict with the first)."""
    dup = ~(pl.struct(keys) if len(keys) > 1 else pl.col(keys[0])).is_first_distinct()
    return read.reject(dup, DUPLICATE_KEY, pl.format(f"{what} {{}} seen before with other values; the first is kept",
                                                 pl.concat_str(keys, separator="/")))


def _missing(read: TableRead, key: str) -> TableRead:
    return read.reject(pl.col(key).is_null(), MISSING_KEY, f"empty {key}")


def _validate(table: str, read: TableRead) -> TableRead:
    """Reject the rows of ``table`` that break the trace's rules (see the module docstring)."""
    if table == "job":
        read = _missing(read, "job_name").reject(
            ~pl.col("status").is_in(list(JOB_STATUSES)) | pl.col("status").is_null(),
            UNKNOWN_STATUS,
            pl.format(f"status '{{}}'; expected one of {', '.join(JOB_STATUSES)}", pl.col("status").fill_null("")),
        )
        return _dedupe(_times(read), ["job_name"], "job_name")
    if table == "task":
        read = _missing(read, "job_name")
        read = read.reject(pl.col("plan_gpu") < 0, NEGATIVE, pl.format("plan_gpu {}; expected >= 0", "plan_gpu"))
        read = read.reject(pl.col("plan_gpu") > MAX_PLAN_GPU, IMPLAUSIBLE,
                           pl.format(f"plan_gpu {{}}; expected <= {MAX_PLAN_GPU:.0f} (1,024 GPUs per instance)",
                                     "plan_gpu"))
        read = read.reject(pl.col("inst_num") < 0, NEGATIVE, pl.format("inst_num {}; expected >= 0", "inst_num"))
        return _dedupe(_times(read), ["job_name", "task_name"], "task")
    if table == "instance":
        return _times(_missing(read, "job_name"))
    if table == "group_tag":
        return _missing(read, "inst_id")
    if table == "machine_spec":
        read = _missing(read, "machine")
        read = read.reject(pl.col("cap_gpu") < 0, NEGATIVE, pl.format("cap_gpu {}; expected >= 0", "cap_gpu"))
        return _dedupe(read, ["machine"], "machine")
    if table == "sensor":
        return read.reject(
            (pl.col("gpu_wrk_util") < 0) | (pl.col("max_gpu_wrk_mem") < 0), NEGATIVE,
            pl.format("gpu_wrk_util {}, max_gpu_wrk_mem {}; expected >= 0", "gpu_wrk_util", "max_gpu_wrk_mem"),
        )
    return read


def _role(task_name: pl.Expr) -> pl.Expr:
    low = task_name.str.to_lowercase()
    return (
        pl.when(low.is_in([t.lower() for t in PS_TASKS])).then(pl.lit("ps"))
        .when(low.is_in([t.lower() for t in AUXILIARY_TASKS])).then(pl.lit("auxiliary"))
        .otherwise(pl.lit("worker"))
    )


def _malformed_keys(read: TableRead) -> pl.DataFrame:
    """The key (first field) of each malformed row of a job-referencing table."""
    return read.malformed.select(key=pl.col("text").str.split(read.separator).list.first()).unique()


def read_pai_v2020(
    paths: str | Path | Sequence[str | Path], opts: IngestOptions | None = None
) -> tuple[pl.DataFrame, IngestReport]:
    """Read a PAI 2020 trace into the job population (one row per valid job-table row).

    Args:
        paths: a directory holding the tables and/or the table files (see :func:`find_tables`).
        opts: attribution options (:class:`~ddlscope.ingest.population.IngestOptions`).

    Returns:
        ``(population, report)``: the population with the columns of
        :data:`~ddlscope.ingest.population.POPULATION_SCHEMA` and the :class:`IngestReport`.
        Rules: see the module docstring.

    Raises:
        FileNotFoundError, ValueError: missing tables or unreadable files (naming them).
    """
    opts = opts or IngestOptions()
    files = find_tables([paths] if isinstance(paths, str | Path) else list(paths))
    notes: list[str] = []

    reads: dict[str, TableRead] = {}
    for t, p in files.items():  # one table at a time: its raw line text is dropped once validated
        if t not in UNUSED_TABLES:
            reads[t] = _validate(t, _read(t, p).drop_exact_duplicates()).drop_raw()
    job, task = reads["job"], reads["task"]
    inst, tag, spec, sensor = (reads.get(t) for t in ("instance", "group_tag", "machine_spec", "sensor"))
    # joins and group-bys run on an integer job index (_jid), the job_name strings are joined once
    jobs = job.frame.lazy().with_row_index("_jid").select(
        "_jid", "job_name", "inst_id", "status", line="_line",
    )
    ids = jobs.select("job_name", "_jid")
    unmatched: dict[str, int] = {}

    # -- tasks -> per-job counts ------------------------------------------------------------------------
    tasks_df = task.frame.lazy().join(ids, on="job_name", how="inner").collect()
    unmatched["task"] = task.frame.height - tasks_df.height
    tasks = tasks_df.lazy()
    inst_lf = None
    if inst is not None:
        inst_df = inst.frame.lazy().join(ids, on="job_name", how="inner").collect()
        unmatched["instance"] = inst.frame.height - inst_df.height
        # one row per instance: a restarted instance repeats its worker_name; keep the last start.
        # Only the repeated rows (usually few) are sorted.
        keys = ["_jid", "task_name", "_key"]
        inst_df = inst_df.with_columns(_key=pl.coalesce("worker_name", "inst_name", pl.col("_line").cast(pl.String)))
        repeated = pl.struct(keys).is_duplicated()
        dups = inst_df.filter(repeated)
        if dups.height:
            kept = dups.sort("start_time", "_line", nulls_last=False).unique(subset=keys, keep="last")
            inst_df = pl.concat([inst_df.filter(~repeated), kept])
            reads["instance"] = replace(inst, superseded_rows=dups.height - kept.height)
        inst_lf = inst_df.lazy()
        counts = inst_lf.group_by("_jid", "task_name").agg(_seen=pl.len().cast(pl.Int64))
        tasks = tasks.join(counts, on=["_jid", "task_name"], how="left")
    else:
        tasks = tasks.with_columns(_seen=pl.lit(None, dtype=pl.Int64))
    plan = pl.col("plan_gpu").fill_null(0.0)
    tasks = tasks.with_columns(
        role=_role(pl.col("task_name").fill_null("")),
        n=pl.coalesce("inst_num", "_seen", pl.lit(0)).cast(pl.Int64),
        gpi=(plan / 100.0).ceil().cast(pl.Int64),
        frac=(plan > 0) & ((plan % 100.0) != 0),
    )
    tasks = tasks.collect().lazy()
    gpu_worker = (pl.col("role") == "worker") & (pl.col("gpi") > 0)
    per_job = tasks.group_by("_jid").agg(
        n_tasks=pl.len(),
        workers=pl.col("n").filter(gpu_worker).sum(),
        gpus_per_worker=pl.col("gpi").filter(gpu_worker).max(),
        num_ps=pl.col("n").filter(pl.col("role") == "ps").sum(),
        gpu_request=(pl.col("n") * plan / 100.0).sum(),
        shared_gpu=(pl.col("frac") & gpu_worker & (pl.col("n") > 0)).any(),
        task_gpu_type=pl.col("gpu_type").filter(gpu_worker).drop_nulls().first(),
        task_start=pl.col("start_time").filter(gpu_worker).min(),
        task_end=pl.col("end_time").filter(gpu_worker).max(),
    ).collect().lazy()

    # -- instances -> placement, run time, machine spec, sensors --------------------------------------
    placement = None
    if inst_lf is not None:
        roles = tasks.select("_jid", "task_name", "role", "gpi")
        winst = inst_lf.join(roles, on=["_jid", "task_name"], how="inner").filter(
            (pl.col("role") == "worker") & (pl.col("gpi") > 0)
        )
        if spec is not None:
            winst = winst.join(
                spec.frame.lazy().select("machine", m_gpu_type="gpu_type", m_cap_gpu="cap_gpu"), on="machine",
                how="left",
            )
        else:
            winst = winst.with_columns(m_gpu_type=pl.lit(None, dtype=pl.String), m_cap_gpu=pl.lit(None, dtype=pl.Int64))
        aggs = [
            pl.col("machine").drop_nulls().n_unique().alias("n_machines"),
            pl.col("start_time").min().alias("run_start"),
            pl.col("end_time").max().alias("run_end"),
            pl.col("m_gpu_type").drop_nulls().first().alias("machine_gpu_type"),
            pl.col("m_cap_gpu").max().alias("server_gpus"),
        ]
        if sensor is not None:
            # one sensor row per instance: a later row of the same worker_name supersedes an earlier one
            sens_df = sensor.frame.filter(pl.col("worker_name").is_null() | pl.col("worker_name").is_last_distinct())
            if sens_df.height < sensor.frame.height:
                reads["sensor"] = replace(sensor, superseded_rows=sensor.frame.height - sens_df.height)
            sens = sens_df.lazy().select("worker_name", "gpu_wrk_util", "max_gpu_wrk_mem")
            unmatched["sensor"] = sens_df.height - sens.join(
                inst_lf.select("worker_name"), on="worker_name", how="semi").select(pl.len()).collect().item()
            winst = winst.join(sens, on="worker_name", how="left")
            aggs += [
                pl.col("gpu_wrk_util").mean().alias("measured_gpu_util_percent"),
                (pl.col("max_gpu_wrk_mem").max() * GIB).alias("measured_peak_gpu_memory_bytes"),
            ]
        placement = winst.group_by("_jid").agg(aggs).collect().lazy()

    # -- group tags -> workload and requested GPU type -------------------------------------------------
    tags = None
    if tag is not None:
        tag_df = tag.frame.lazy().join(jobs.select("inst_id").drop_nulls(), on="inst_id", how="semi").collect()
        unmatched["group_tag"] = tag.frame.height - tag_df.height
        tags = tag_df.lazy().join(jobs.select("inst_id", "_jid"), on="inst_id", how="inner").group_by("_jid").agg(
            trace_model=pl.col("workload").drop_nulls().first(),
            gpu_type_spec=pl.col("gpu_type_spec").drop_nulls().first(),
            _n_tags=pl.col("workload").drop_nulls().n_unique(),
        ).collect().lazy()

    # -- one row per job --------------------------------------------------------------------------------
    lf = jobs.join(per_job, on="_jid", how="left")
    if placement is not None:
        lf = lf.join(placement, on="_jid", how="left")
    for name, dtype in (("n_machines", pl.UInt32), ("run_start", pl.Float64), ("run_end", pl.Float64),
                        ("machine_gpu_type", pl.String), ("server_gpus", pl.Int64),
                        ("measured_gpu_util_percent", pl.Float64), ("measured_peak_gpu_memory_bytes", pl.Float64)):
        if name not in lf.collect_schema().names():
            lf = lf.with_columns(pl.lit(None, dtype=dtype).alias(name))
    if tags is not None:
        lf = lf.join(tags, on="_jid", how="left")
    else:
        lf = lf.with_columns(trace_model=pl.lit(None, dtype=pl.String), gpu_type_spec=pl.lit(None, dtype=pl.String),
                             _n_tags=pl.lit(0, dtype=pl.UInt32))

    # jobs one of whose task/instance/group_tag rows is malformed
    bad_flags = []
    for table, key in (("task", "job_name"), ("instance", "job_name"), ("group_tag", "inst_id")):
        read = reads.get(table)
        if read is None or read.malformed.height == 0:
            continue
        keys = _malformed_keys(read).with_columns(pl.lit(True).alias(f"_bad_{table}"))
        lf = lf.join(keys.lazy(), left_on=key, right_on="key", how="left")
        bad_flags.append((table, pl.col(f"_bad_{table}").fill_null(False)))

    W, g, P, M = pl.col("workers").fill_null(0), pl.col("gpus_per_worker"), pl.col("num_ps").fill_null(0), pl.col(
        "n_machines")
    arch = (
        pl.when(W == 0).then(None)
        .when(P > 0).then(pl.lit("ps_worker"))
        .when((W == 1) & (g == 1)).then(pl.lit("1w1g"))
        .when(W == 1).then(pl.lit(opts.multi_gpu_instance))
        .when(M == 1).then(pl.lit("allreduce_local"))
        .when(M >= 2).then(pl.lit("allreduce_cluster"))
        # placement unknown (rule 6): one server when the GPUs fit it
        .when(W * g.fill_null(0) <= (opts.server_gpus or DEFAULT_SERVER_GPUS)).then(pl.lit("allreduce_local"))
        .otherwise(pl.lit("allreduce_cluster"))
        .cast(ArchitectureEnum)
    )
    known = pl.col("n_tasks").is_not_null()
    lf = lf.with_columns(architecture=arch, num_gpus=pl.when(known).then(W * g.fill_null(0)))
    a, n = pl.col("architecture"), pl.col("num_gpus")
    # the machines the trace gives, where the architecture's traits allow them (ddlscope.specs.traits):
    # one for a single-server kind; M when it is at least the kind's fewest servers and, for the kinds
    # whose GPUs divide evenly over their servers, divides the GPUs; else null (as few as fit)
    servers = pl.when(a.is_in(single_server_kinds())).then(pl.lit(1))
    for kind, t in TRAITS.items():
        if t.single_server:
            continue
        fits = (a == kind) & (t.min_servers <= M)
        if t.even_split:
            fits = fits & ((n % M.cast(pl.Int64).clip(1)) == 0)
        servers = servers.when(fits).then(M)
    pre = pl.when(pl.lit(False)).then(pl.lit(None, dtype=pl.String))
    for table, flag in bad_flags:
        pre = pre.when(flag).then(pl.lit(malformed_reason(table)))
    pre = (
        pre.when(pl.col("n_tasks").is_null()).then(pl.lit(NO_TASK_ROWS))
        .when(pl.col("gpu_request").fill_null(0) <= 0).then(pl.lit(NO_GPU))
        .when(W == 0).then(pl.lit(NO_GPU_WORKER))
    )
    run = pl.col("run_end") - pl.col("run_start")
    task_run = pl.col("task_end") - pl.col("task_start")
    lf = lf.with_columns(
        job_id=pl.col("job_name"),
        source=pl.lit(str(files["job"])),
        trace_model=pl.col("trace_model").str.strip_chars().replace("", None),
        num_workers=pl.when(W > 0).then(W),
        gpus_per_worker=pl.when(W > 0).then(g),
        num_ps=pl.when(W > 0).then(P),
        num_servers=servers.cast(pl.Int64),
        trace_gpu=pl.coalesce("task_gpu_type", "machine_gpu_type", "gpu_type_spec"),
        duration_s=pl.coalesce(run, task_run),
        shared_gpu=pl.col("shared_gpu").fill_null(False),
        gpu_request=pl.col("gpu_request"),
        batch_size=pl.lit(None, dtype=pl.Int64),
        num_steps=pl.lit(None, dtype=pl.Int64),
        pre_reason=pre,
    )
    population = finalize(lf.sort("_jid").collect().lazy(), opts, no_label_reason=NO_WORKLOAD_TAG)

    # -- notes ------------------------------------------------------------------------------------------
    absent = [TABLES[t][0] for t in TABLES if t not in files and t not in UNUSED_TABLES]
    if absent:
        notes.append("not given: " + ", ".join(absent) + " (" + _absent_effect(absent) + ")")
    for t in UNUSED_TABLES:
        if t in files:
            notes.append(f"{TABLES[t][0]}: given, not read (no column of the population comes from it)")
    for t, k in unmatched.items():
        if k:
            what = "a worker_name of no instance" if t == "sensor" else (
                "an inst_id of no job" if t == "group_tag" else "a job_name not in the job table")
            notes.append(f"{TABLES[t][0]}: {k:,} row(s) with {what} (not used)")
    for t, rule in SUPERSEDED_RULES.items():
        read = reads.get(t)
        if read is not None and read.superseded_rows:
            notes.append(f"{TABLES[t][0]}: {read.superseded_rows:,} row(s) superseded by a later record of the same "
                         f"{rule}; the superseded rows are not used")
    for t in TABLES:
        read = reads.get(t)
        if read is not None and read.duplicate_rows:
            notes.append(f"{TABLES[t][0]}: {read.duplicate_rows:,} exact duplicate row(s) of an earlier line "
                         "(not used)")
    conflicts = 0 if tags is None else (tags.select((pl.col("_n_tags") > 1).sum()).collect().item() or 0)
    if conflicts:
        notes.append(f"{conflicts:,} job(s) have several different workload tags; the first one is used")
    overfull = population.filter(
        pl.col("architecture").is_in(single_server_kinds()) & (pl.col("num_gpus") > pl.col("server_gpus"))
    ).height
    if overfull:
        notes.append(f"{overfull:,} single-machine job(s) count more GPUs than their machine has (GPU sharing: "
                     "ceil(plan_gpu/100) per instance); see shared_gpu")
    read_list = [reads[t] for t in TABLES if t in reads]
    report = IngestReport.build(FORMAT, [str(p) for p in files.values()], read_list, population, notes,
                                unmatched=unmatched)
    return population, report


def _absent_effect(absent: Sequence[str]) -> str:
    effects: Mapping[str, str] = {
        "pai_instance_table": "placement and run time unknown",
        "pai_group_tag_table": "no workload tags",
        "pai_machine_spec": "GPUs per machine unknown",
        "pai_sensor_table": "no measured GPU utilisation/memory",
        "pai_machine_metric": "not needed",
    }
    return "; ".join(effects.get(a, "") for a in absent if effects.get(a))
