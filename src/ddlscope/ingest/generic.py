"""Generic job tables (CSV, TSV, Parquet) read through a column mapping, and the built-in mappings
of the public populations (Gavel, Pollux's Philly list, Alibaba's 2023 GPU-sharing pods).

A :class:`TableMapping` says how to read the file (separator, header or column names) and which
source column gives each population *field* (:data:`FIELDS`): ``num_gpus = "scale_factor"``. A
field may instead be a constant for every row, take a regular expression's first capture group
of its column (``extract``), or be multiplied by a factor (``scale``; e.g. milli-GPU to GPU).

Rules (also in docs/ingest.md):

- GPUs: ``num_gpus`` (may be fractional; ``gpu_share`` multiplies it, e.g. a pod's share of one
  GPU) or ``num_workers`` x ``gpus_per_worker``. GPUs counted = ceil(num_gpus); a fraction
  flags ``shared_gpu``; ``gpu_request`` = num_gpus x gpu_share keeps it.
- Architecture: the ``architecture`` field when mapped (checked against the counts), else by
  :func:`~ddlscope.ingest.population.count_architecture`: PS shards -> ``ps_worker``; 1 GPU ->
  ``1w1g``; one worker (``num_workers`` = 1) with several GPUs -> ``allreduce_local`` (or
  ``1wng`` with ``multi_gpu_instance="1wng"``); up to ``server_gpus`` GPUs (default 8) ->
  ``allreduce_local``; more -> ``allreduce_cluster`` with ``num_servers`` null (as few as fit).
  Without ``num_workers``, one worker per GPU (the way DDP and Horovod run).
- Batch size: per GPU; ``batch_size_scope = "global"`` divides by the GPUs (rounded).
- Duration: ``duration_s``, else ``end_time_s - start_time_s``; ``gpu_time_s``: the trace's
  value when mapped, else duration_s x gpu_request.
- Model: the ``model`` field through the model map (``trace_model`` keeps the label). Jobs with
  no label get the model mix when one is given; feature columns (:data:`FEATURE_COLUMNS`)
  attribute a job without a model when ``compute_bound_flops`` and ``memory_bound_bytes`` are set.
- Malformed rows: wrong field count, unparsable number, ``inf``/``-inf``, non-whole count, a count
  above 2^53, negative count or time,
  end before start, a share outside [0, 1], a batch size < 1, an unknown precision, status (when
  ``status_values`` is given) or architecture, an architecture that does not fit its counts or
  its servers (``server_gpus`` GPUs each, the placement check ``characterize`` applies).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ddlscope.ingest.population import (
    FEATURE_COLUMNS,
    NO_MODEL_LABEL,
    IngestOptions,
    count_architecture,
    finalize,
)
from ddlscope.ingest.report import IngestReport
from ddlscope.ingest.table import (
    COUNT_TOO_LARGE,
    MAX_COUNT,
    ColumnKind,
    TableRead,
    parse_columns,
    read_delimited,
    read_parquet_table,
)
from ddlscope.model.jobs import ArchitectureEnum
from ddlscope.specs.architecture import ARCHITECTURES
from ddlscope.specs.errors import describe_validation
from ddlscope.specs.files import parse_pairs, read_toml_or_json
from ddlscope.specs.traits import TRAITS, kinds_where, single_server_kinds
from ddlscope.specs.workload import PRECISIONS

#: population field -> kind its source column is parsed as.
FIELDS: dict[str, ColumnKind] = {
    "job_id": "str",
    "model": "str",
    "batch_size": "int",
    "num_gpus": "float",
    "gpu_share": "float",
    "num_workers": "int",
    "gpus_per_worker": "int",
    "num_ps": "int",
    "num_servers": "int",
    "architecture": "str",
    "gpu": "str",
    "start_time_s": "float",
    "end_time_s": "float",
    "duration_s": "float",
    "gpu_time_s": "float",
    "num_steps": "int",
    "status": "str",
    **{c: ("str" if t == pl.String or isinstance(t, pl.Enum) else "int" if t == pl.Int64 else "float")
       for c, t in FEATURE_COLUMNS.items()},
}
FIELD_HELP: dict[str, str] = {
    "job_id": "job identifier (default: file:line)",
    "model": "model label, mapped to a zoo model by the model map",
    "batch_size": "samples per GPU per step (or global, see batch_size_scope)",
    "num_gpus": "GPUs of the job (fractions allowed)",
    "gpu_share": "share of each GPU (0-1]; scale milli-GPU with scale.gpu_share = 0.001",
    "num_workers": "worker processes",
    "gpus_per_worker": "GPUs per worker",
    "num_ps": "parameter-server shards",
    "num_servers": "servers holding the GPUs",
    "architecture": f"one of {', '.join(ARCHITECTURES)} (any case, '-' for '_')",
    "gpu": "GPU type (catalog name or alias)",
    "start_time_s": "start time, seconds",
    "end_time_s": "end time, seconds",
    "duration_s": "run time, seconds",
    "gpu_time_s": "GPU-seconds",
    "num_steps": "training steps",
    "status": "job status",
}



def expected_fields() -> str:
    """The mappable names for an error message: the population fields, then the feature columns."""
    fields = [f for f in FIELDS if f not in FEATURE_COLUMNS]
    return (f"a population field ({', '.join(fields)}) or a feature column "
            f"({', '.join(FEATURE_COLUMNS)}; per replica per step, see docs/ingest.md)")


# problems of malformed rows found by the mapping's rules
NEGATIVE = "negative value"
END_BEFORE_START = "end before start"
OUT_OF_RANGE = "value out of range"
UNKNOWN_STATUS = "unknown status"
UNKNOWN_ARCHITECTURE = "unknown architecture"
ARCHITECTURE_MISFIT = "architecture does not fit counts"
DUPLICATE_JOB_ID = "duplicate job_id"


class TableMapping(BaseModel):
    """How to read one kind of job table and which column gives each field.

    Fields:

    - ``name``: format name (shown in reports).
    - ``separator``: one character (``"tab"`` or ``"\\t"`` for tab); ignored for Parquet. ``None``
      (the default): by the file's name, a tab for ``.tsv``/``.tsv.gz``, else a comma.
    - ``has_header``: the first line names the columns.
    - ``columns``: the column names in order, for files without a header.
    - ``fields``: population field (:data:`FIELDS`) -> source column.
    - ``extract``: field -> regular expression; its first capture group of the column's text is
      the value (no match: null).
    - ``scale``: field -> factor the parsed number is multiplied by.
    - ``constants``: field -> value for every row (e.g. ``gpu = "P100"``).
    - ``keep``: source columns copied to the population as ``trace_<column>`` (text).
    - ``status_values``: the allowed statuses (others make the row malformed); ``None``: any.
    - ``models``: label -> zoo model entries added to the model map.
    - ``server_gpus``: GPUs per server for the count rule (default 8).
    - ``batch_size_scope``: ``per_gpu`` (default) or ``global``.

    Raises:
        pydantic.ValidationError: an unknown field name, a bad separator, a header-less mapping
            without ``columns``, a regex that does not compile or has no capture group.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = "csv"
    separator: str | None = None
    has_header: bool = True
    columns: list[str] | None = None
    fields: dict[str, str] = Field(default_factory=dict)
    extract: dict[str, str] = Field(default_factory=dict)
    scale: dict[str, float] = Field(default_factory=dict)
    constants: dict[str, str | int | float] = Field(default_factory=dict)
    keep: list[str] = Field(default_factory=list)
    status_values: list[str] | None = None
    models: dict[str, str] = Field(default_factory=dict)
    server_gpus: int = Field(8, ge=1)
    batch_size_scope: Literal["per_gpu", "global"] = "per_gpu"

    @field_validator("separator")
    @classmethod
    def _sep(cls, v: str | None) -> str | None:
        if v is None:
            return None
        v = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";"}.get(v, v)
        if len(v) != 1:
            raise ValueError(f"expected one character (or 'tab'), got {v!r}")
        return v

    @field_validator("fields", "extract", "scale", "constants")
    @classmethod
    def _known_fields(cls, v: dict[str, Any]) -> dict[str, Any]:
        unknown = [k for k in v if k not in FIELDS]
        if unknown:
            raise ValueError(f"unknown field(s) {unknown}; expected {expected_fields()}")
        return v

    @field_validator("extract")
    @classmethod
    def _regex(cls, v: dict[str, str]) -> dict[str, str]:
        import re

        for k, pattern in v.items():
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"extract.{k}: not a regular expression: {exc}") from None
            if compiled.groups < 1:
                raise ValueError(f"extract.{k}: expected a capture group (...) in {pattern!r}")
        return v

    def with_fields(self, fields: Mapping[str, str]) -> TableMapping:
        """A copy whose ``fields`` are updated by ``fields`` (``--map field=column``)."""
        return TableMapping.model_validate({**self.model_dump(), "fields": {**self.fields, **fields}})

    def source_columns(self) -> list[str]:
        """The source columns the mapping reads (fields and kept columns), in first-use order."""
        cols: list[str] = []
        for c in [*self.fields.values(), *self.keep]:
            if c not in cols:
                cols.append(c)
        return cols


GAVEL_COLUMNS = [
    "job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time", "scale_factor",
]

#: Built-in mappings of the public populations in ``shared/data`` (their SOURCES.md give the
#: columns): Gavel's Philly-derived traces (``parse_trace`` of stanford-futuredata/gavel
#: ``scheduler/utils.py``: 7 tab-separated fields, no header), the Philly job list as processed
#: by Pollux (``simulator/traces/philly.csv``), and Alibaba's 2023 GPU-sharing pods (FGD, ATC'23).
BUILTIN_FORMATS: dict[str, TableMapping] = {
    "gavel": TableMapping(
        name="gavel", separator="\t", has_header=False, columns=GAVEL_COLUMNS,
        fields={"model": "job_type", "batch_size": "job_type", "num_gpus": "scale_factor",
                "num_steps": "total_steps"},
        extract={"model": r"^\s*(.+?)(?:\s*\(batch size \d+\))?\s*$", "batch_size": r"\(batch size (\d+)\)"},
        keep=["arrival_time"],
    ),
    "philly-pollux": TableMapping(
        name="philly-pollux", separator=",", has_header=True,
        fields={"duration_s": "duration", "num_gpus": "num_gpus", "gpu_time_s": "gpu_time"},
        keep=["timestamp", "cluster"],
    ),
    "openb-v2023": TableMapping(
        name="openb-v2023", separator=",", has_header=True,
        fields={"job_id": "name", "num_gpus": "num_gpu", "gpu_share": "gpu_milli", "start_time_s": "scheduled_time",
                "end_time_s": "deletion_time", "status": "pod_phase", "gpu": "gpu_spec"},
        scale={"gpu_share": 0.001},
        status_values=["Running", "Failed", "Pending", "Succeeded"],
        keep=["qos"],
    ),
    "csv": TableMapping(name="csv"),
}


def load_mapping(path: str | Path, base: TableMapping | None = None) -> TableMapping:
    """A :class:`TableMapping` from a TOML/JSON file (its keys at the top level or in a
    ``[mapping]`` table), over ``base`` (e.g. a built-in format) when given.

    Raises:
        ValueError: an unreadable or unparsable file, or entries that do not validate (naming the
            file and the entry).
    """
    path = Path(path)
    data = read_toml_or_json(path, section="mapping")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a [mapping] table of column-mapping entries")
    merged = {**(base.model_dump() if base else {}), **data}
    if base is not None:
        for key in ("fields", "extract", "scale", "constants", "models"):
            if key in data and isinstance(data[key], dict):
                merged[key] = {**getattr(base, key), **data[key]}
    try:
        return TableMapping.model_validate(merged)
    except ValidationError as exc:
        errs = describe_validation(exc)
        raise ValueError(f"{path}: {errs}") from exc


def parse_map_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """``["num_gpus=gpus", "model=arch"]`` -> ``{"num_gpus": "gpus", "model": "arch"}``.

    Raises:
        ValueError: an entry without ``=``, a field given twice or an unknown field (listing the fields).
    """
    out = parse_pairs(pairs, what="--map", expected="field=column")
    for name in out:
        if name not in FIELDS:
            raise ValueError(f"--map: unknown field {name!r}; expected {expected_fields()}")
    return out


def _is_parquet(path: Path) -> bool:
    return path.suffix.lower() in (".parquet", ".pq")


def _read_file(path: Path, mapping: TableMapping) -> TableRead:
    wanted = mapping.source_columns()
    if not wanted:
        raise ValueError(f"{path}: the mapping names no column; map at least num_gpus (e.g. --map num_gpus=COLUMN)")
    types: dict[str, ColumnKind] = dict.fromkeys(wanted, "str")
    if _is_parquet(path):
        return read_parquet_table(path, table="jobs", types=types)
    return read_delimited(path, table="jobs", columns=mapping.columns, types=types,
                          separator=mapping.separator or default_separator(path), has_header=mapping.has_header)


def default_separator(path: Path) -> str:
    """The separator of a mapping that sets none: a tab for ``.tsv`` / ``.tsv.gz`` files, else a comma."""
    return "\t" if path.name.lower().endswith((".tsv", ".tsv.gz")) else ","


def _field_frame(read: TableRead, mapping: TableMapping) -> TableRead:
    """Field columns (``f_<field>``) from the source columns, parsed; bad rows rejected."""
    exprs = []
    for name, col in mapping.fields.items():
        text = pl.col(col).cast(pl.String)
        if name in mapping.extract:
            text = text.str.extract(mapping.extract[name], 1)
        exprs.append(text.alias(f"f_{name}"))
    for name, value in mapping.constants.items():
        if name not in mapping.fields:
            exprs.append(pl.lit(str(value)).alias(f"f_{name}"))
    read = replace(read, frame=read.frame.with_columns(exprs))
    kinds = {f"f_{n}": FIELDS[n] for n in [*mapping.fields, *mapping.constants]}
    labels = {f"f_{n}": (f"column {mapping.fields[n]} ({n})" if n in mapping.fields else f"constant {n}")
              for n in [*mapping.fields, *mapping.constants]}
    read = parse_columns(read, kinds, labels)
    frame = read.frame
    scales = [(pl.col(f"f_{n}") * factor).alias(f"f_{n}") for n, factor in mapping.scale.items()
              if f"f_{n}" in frame.columns]
    return replace(read, frame=frame.with_columns(scales)) if scales else read


def _validate(read: TableRead, mapping: TableMapping) -> TableRead:
    cols = set(read.frame.columns)

    def has(n: str) -> bool:
        return f"f_{n}" in cols

    def f(n: str) -> pl.Expr:
        return pl.col(f"f_{n}")

    for n in ("num_gpus", "num_workers", "gpus_per_worker", "num_ps", "num_servers", "duration_s", "gpu_time_s",
              "num_steps", "start_time_s", "end_time_s"):
        if has(n):
            read = read.reject(f(n) < 0, NEGATIVE, pl.format(f"{n} {{}}; expected >= 0", f(n)))
    if has("num_gpus"):  # a float field (fractions allowed) that is still a count
        src = mapping.fields.get("num_gpus")
        where = f"column {src} (num_gpus)" if src else "num_gpus"
        # the value as written (a float prints 2^63 - 1 as 9.223372036854776e+18)
        got = pl.format("'{}'", pl.col(src).cast(pl.String).str.strip_chars()) \
            if src in cols and "num_gpus" not in mapping.extract else f("num_gpus").cast(pl.String)
        read = read.reject(f("num_gpus") > MAX_COUNT, COUNT_TOO_LARGE,
                           pl.format(f"{where}: expected a count up to {MAX_COUNT}, got {{}}", got))
    if has("batch_size"):
        read = read.reject(f("batch_size") < 1, OUT_OF_RANGE,
                           pl.format("batch_size {}; expected >= 1", f("batch_size")))
    if has("gpu_share"):
        read = read.reject((f("gpu_share") < 0) | (f("gpu_share") > 1), OUT_OF_RANGE,
                           pl.format("gpu_share {}; expected a share of a GPU in [0, 1]", f("gpu_share")))
    if has("start_time_s") and has("end_time_s"):
        read = read.reject(f("end_time_s") < f("start_time_s"), END_BEFORE_START,
                           pl.format("end {} < start {}", f("end_time_s"), f("start_time_s")))
    if has("status") and mapping.status_values is not None:
        read = read.reject(~f("status").is_in(mapping.status_values) | f("status").is_null(), UNKNOWN_STATUS,
                           pl.format(f"status '{{}}'; expected one of {', '.join(mapping.status_values)}",
                                     f("status").fill_null("")))
    if has("precision"):
        read = read.reject(~f("precision").is_in(list(PRECISIONS)), OUT_OF_RANGE,
                           pl.format(f"precision '{{}}'; expected one of {', '.join(PRECISIONS)}", f("precision")))
    if has("architecture"):
        # case and '-' for '_' do not matter: PS_Worker, ps-worker, 1W1G name architectures
        known = f("architecture").str.to_lowercase().str.replace_all("-", "_", literal=True)
        read = replace(read, frame=read.frame.with_columns(
            pl.when(known.is_in(list(ARCHITECTURES))).then(known).otherwise(f("architecture")).alias("f_architecture")))
        read = read.reject(~f("architecture").is_in(list(ARCHITECTURES)), UNKNOWN_ARCHITECTURE,
                           pl.format(f"architecture '{{}}'; expected one of {', '.join(ARCHITECTURES)}",
                                     f("architecture")))
    return read


def _counts(frame: pl.LazyFrame, mapping: TableMapping, opts: IngestOptions) -> pl.LazyFrame:
    """GPU counts, architecture and placement columns from the parsed fields."""
    names = set(frame.collect_schema().names())

    def f(n: str, dtype: pl.DataType = pl.Int64) -> pl.Expr:
        return pl.col(f"f_{n}") if f"f_{n}" in names else pl.lit(None, dtype=dtype)

    nw_given, gpw_given = f("num_workers"), f("gpus_per_worker")
    requested = pl.coalesce(f("num_gpus", pl.Float64), (nw_given * gpw_given.fill_null(1)).cast(pl.Float64))
    share = f("gpu_share", pl.Float64).fill_null(1.0)
    n_int = requested.ceil().cast(pl.Int64)
    server = opts.server_gpus or mapping.server_gpus
    lf = frame.with_columns(
        _n=n_int,
        gpu_request=requested * share,
        shared_gpu=((requested > 0) & ((requested != requested.ceil()) | (share < 1))).fill_null(False),
    )
    n = pl.col("_n")
    if "f_architecture" in names:
        kind = pl.col("f_architecture").cast(ArchitectureEnum)
    else:
        kind = count_architecture(n, nw_given, f("num_ps"), pl.lit(server), opts.multi_gpu_instance)
    lf = lf.with_columns(architecture=kind)
    a = pl.col("architecture")
    one_gpu = [k for k, t in TRAITS.items() if t.one_worker and t.max_gpus == 1]  # 1w1g
    one_worker = kinds_where("one_worker")  # 1w1g, 1wng
    gpw = (
        pl.when(a.is_in(one_gpu)).then(pl.lit(1))
        .when(a.is_in(one_worker)).then(pl.coalesce(gpw_given, n))
        .otherwise(gpw_given.fill_null(1))
    )
    lf = lf.with_columns(gpus_per_worker=pl.when(a.is_not_null()).then(gpw).cast(pl.Int64))
    nw = (
        pl.when(a.is_in(one_worker)).then(pl.lit(1))
        .otherwise(pl.coalesce(nw_given, n // pl.col("gpus_per_worker").clip(1)))
    )
    ps = pl.when(a.is_in(kinds_where("parameter_servers"))).then(pl.coalesce(f("num_ps"), pl.lit(1))).otherwise(
        pl.lit(0))
    single = a.is_in(single_server_kinds())
    lf = lf.with_columns(
        num_workers=pl.when(a.is_not_null()).then(nw).cast(pl.Int64),
        num_ps=pl.when(a.is_not_null()).then(ps).cast(pl.Int64),
        num_servers=pl.when(a.is_null()).then(None).when(single & f("num_servers").is_null()).then(pl.lit(1))
        .otherwise(f("num_servers")).cast(pl.Int64),
    )
    return lf.with_columns(num_gpus=pl.col("num_workers") * pl.col("gpus_per_worker"))


def _misfit(a: pl.Expr, n: pl.Expr, nw: pl.Expr, gpw: pl.Expr, ps: pl.Expr, servers: pl.Expr,
            server_gpus: int) -> list[tuple[pl.Expr, pl.Expr]]:
    """``(condition, detail)`` pairs, one per rule an explicitly given architecture can break: the
    rules of the traits table (:data:`ddlscope.specs.traits.TRAITS`, as
    :class:`~ddlscope.specs.architecture.Architecture` applies them) and its placement check
    (``Architecture.servers_on``, which ``characterize`` applies) on servers of ``server_gpus``
    GPUs. Each detail says what was found and what was expected."""
    single = a.is_in(single_server_kinds())
    one_gpu = [k for k, t in TRAITS.items() if t.one_worker and t.max_gpus == 1]
    many_one_worker = [(k, t) for k, t in TRAITS.items() if t.one_worker and t.max_gpus != 1]
    spread = ~single
    per_server = (n + servers - 1) // servers  # ceil(n / servers), integers
    sg = server_gpus
    rules: list[tuple[pl.Expr, pl.Expr]] = [
        (a.is_in(one_gpu) & (n != 1), pl.format("{} with {} GPUs; expected exactly 1 GPU", a, n))]
    rules += [((a == k) & ((nw != 1) | (gpw < t.min_gpus)),
               pl.format(f"{{}} with {{}} worker(s) x {{}} GPU(s); expected 1 worker with >= {t.min_gpus} GPUs",
                         a, nw, gpw)) for k, t in many_one_worker]
    rules += [((a == k) & (ps < 1), pl.lit(f"{k} with 0 PS shards; expected num_ps >= 1"))
              for k in kinds_where("parameter_servers")]
    for floor in sorted({t.min_gpus for t in TRAITS.values() if not t.one_worker and t.min_gpus > 1}):
        multi = a.is_in([k for k, t in TRAITS.items() if not t.one_worker and t.min_gpus == floor])
        rules.append((multi & (n < floor), pl.format(f"{{}} with {{}} GPU(s); expected >= {floor} GPUs", a, n)))
    rules.append((single & (servers > 1),
                  pl.format("{} on {} servers; expected 1 server (a single-server architecture)", a, servers)))
    rules += [((a == k) & (servers < t.min_servers),
               pl.format(f"{k} on {{}} server; expected >= {t.min_servers} servers (else allreduce_local)", servers))
              for k, t in TRAITS.items() if not t.single_server and t.min_servers > 1]
    return [
        *rules,
        (servers > n, pl.format("{} servers for {} GPUs; expected at most one server per GPU", servers, n)),
        (gpw > sg, pl.format(f"{{}} GPUs per worker; expected at most {sg} (a worker sits in one server of {sg} "
                             "GPUs; --server-gpus sets it)", gpw)),
        (single & (n > sg),
         pl.format(f"{{}} with {{}} GPUs; expected at most {sg} (one server of {sg} GPUs; --server-gpus sets it)",
                   a, n)),
        (spread & (per_server > sg),
         pl.format(f"{{}} with {{}} GPUs on {{}} servers puts {{}} on a server; expected at most {sg}", a, n,
                   servers, per_server)),
        (a.is_in(kinds_where("even_split")) & (servers >= 1) & (n % servers.clip(1) != 0),
         pl.format("{} with {} GPUs on {} servers; expected the GPUs to divide evenly over the servers", a, n,
                   servers)),
    ]


def read_table_population(
    paths: Sequence[str | Path], mapping: TableMapping, opts: IngestOptions | None = None
) -> tuple[pl.DataFrame, IngestReport]:
    """Read job tables through ``mapping`` into one population (files in the order given).

    Args:
        paths: files (CSV/TSV, ``.gz``, ``.tar.gz``, Parquet); a directory stands for its
            ``.trace``, ``.csv``, ``.tsv``, ``.csv.gz`` and ``.parquet`` files, sorted by name.
        mapping: the :class:`TableMapping`.
        opts: attribution options; ``mapping.models`` entries are added to its model map.

    Returns:
        ``(population, report)``; the population has the
        :data:`~ddlscope.ingest.population.POPULATION_SCHEMA` columns, then the mapped
        feature columns and ``trace_<column>`` for each kept column.

    Raises:
        FileNotFoundError: a missing path.
        ValueError: a mapping column the file lacks, a file that cannot be read (naming it), an
            empty file when every file is empty (an empty file among others is skipped with a note).
    """
    opts = opts or IngestOptions()
    if mapping.models:
        opts = replace(opts, model_map=opts.model_map.copy().add(mapping.models, f"mapping {mapping.name}"))
    files = expand_paths(paths)
    if "num_gpus" not in mapping.fields and "num_gpus" not in mapping.constants and not (
        "num_workers" in mapping.fields or "num_workers" in mapping.constants
    ):
        raise ValueError(
            f"mapping {mapping.name!r}: no GPU count; map num_gpus (or num_workers and gpus_per_worker) "
            "to a column, e.g. --map num_gpus=COLUMN"
        )
    # an empty (0-byte) file among others, e.g. in a directory, is skipped with a note; alone it is an error
    empty = [p for p in files if p.stat().st_size == 0]
    if empty and len(empty) < len(files):
        files = [p for p in files if p not in empty]
    else:
        empty = []
    reads: list[TableRead] = []
    frames: list[pl.LazyFrame] = []
    seen: pl.DataFrame | None = None  # job id and values of its kept row, over the files read so far
    for path in files:
        read = _validate(_field_frame(_read_file(path, mapping), mapping), mapping)
        if "job_id" in mapping.fields:
            # a repeated id with the same values is the same job again (a duplicate), with other values
            # a conflict; without an id, identical lines may be different jobs (a table of one row per
            # job with no id): all kept
            read, seen = _repeated_job_ids(read, seen, mapping)
        lf = _counts(read.frame.lazy(), mapping, opts)
        given_arch = "architecture" in mapping.fields or "architecture" in mapping.constants
        if given_arch:
            rules = _misfit(pl.col("architecture"), pl.col("_n"), pl.col("num_workers"), pl.col("gpus_per_worker"),
                            pl.col("num_ps"), pl.col("num_servers"), opts.server_gpus or mapping.server_gpus)
            conds = [cond.fill_null(False) for cond, _ in rules]
            checked = lf.with_columns(
                _misfit=pl.any_horizontal(conds),
                _misfit_detail=pl.coalesce([pl.when(cond).then(detail) for cond, (_, detail) in
                                            zip(conds, rules, strict=True)]),
            ).collect()
            read = replace(read, frame=checked).reject(pl.col("_misfit"), ARCHITECTURE_MISFIT, pl.col("_misfit_detail"))
            lf = read.frame.lazy().drop("_misfit", "_misfit_detail")
        reads.append(read)
        frames.append(_population_columns(lf.drop("_raw", strict=False), path, mapping))
    lf = pl.concat(frames, how="vertical_relaxed")
    kept = [f"trace_{c}" for c in mapping.keep]
    population = finalize(lf, opts, no_label_reason=NO_MODEL_LABEL, extra_columns=kept)
    notes: list[str] = []
    if empty:
        names = ", ".join(str(p) for p in empty[:5]) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
        notes.append(f"{len(empty):,} empty file(s) (0 bytes, no header) skipped: {names}")
    duplicates = sum(r.duplicate_rows for r in reads)
    if duplicates:
        notes.append(f"{duplicates:,} exact duplicate row(s) (not used): the same line as an earlier one of the "
                     "file, or the same job_id and values as an earlier row of any file")
    if opts.model_mix:
        mixed = population.filter(pl.col("model_source") == "mix").height
        shares = ", ".join(f"{k} {v:.3g}" for k, v in opts.model_mix.items())
        notes.append(f"{mixed:,} job(s) without a model label got a model from the mix ({shares}; golden-ratio rule)")
    report = IngestReport.build(mapping.name, [str(p) for p in files], reads, population, notes)
    return population, report


def _repeated_job_ids(read: TableRead, seen: pl.DataFrame | None,
                      mapping: TableMapping) -> tuple[TableRead, pl.DataFrame]:
    """Rows whose job id was given by an earlier row (of this file or of an earlier file, ``seen``:
    ``f_job_id`` and the compared values of each id's kept row; ``None`` before the first file).

    The values compared are the parsed fields (``f_*``) and the kept columns, so ``8`` and ``8.0``
    are the same value and a file may order its columns differently. Same values: an exact
    duplicate (removed, counted in ``duplicate_rows``); other values: a malformed row
    (:data:`DUPLICATE_JOB_ID`); the first row of the id is kept either way. Only the repeated rows
    are compared (a join on the id), so a file without repeats pays two hash passes.

    Returns:
        ``(read, seen)`` with ``seen`` extended by the ids this file adds.
    """
    compared = sorted(c for c in read.frame.columns if c.startswith("f_") and c != "f_job_id") + list(mapping.keep)
    frame = read.frame.with_row_index("_i")
    has_id = pl.col("f_job_id").is_not_null()
    earlier = pl.col("f_job_id").is_in(seen["f_job_id"].implode()) if seen is not None else pl.lit(False)
    frame = frame.with_columns(_rep=has_id & (earlier | ~pl.col("f_job_id").is_first_distinct()))
    firsts = frame.filter(has_id & ~pl.col("_rep")).select("f_job_id", *compared)
    repeated = frame.filter(pl.col("_rep"))
    if repeated.height:
        ref = firsts if seen is None else pl.concat([seen, firsts])
        joined = repeated.select("_i", "f_job_id", *compared).join(ref, on="f_job_id", how="left", suffix="_ref")
        same = pl.all_horizontal([pl.col(c).eq_missing(pl.col(f"{c}_ref")) for c in compared]) if compared \
            else pl.lit(True)
        dup = joined.filter(same)["_i"]
        kept = frame.filter(~pl.col("_i").is_in(dup.implode()))
        read = replace(read, frame=kept, duplicate_rows=read.duplicate_rows + dup.len())
        read = read.reject(pl.col("_rep"), DUPLICATE_JOB_ID,
                           pl.format("job_id {} was given by an earlier row with other values; the first is kept",
                                     "f_job_id"))
    else:
        read = replace(read, frame=frame)
    seen = firsts if seen is None else pl.concat([seen, firsts])
    return replace(read, frame=read.frame.drop("_i", "_rep")), seen


def _population_columns(lf: pl.LazyFrame, path: Path, mapping: TableMapping) -> pl.LazyFrame:
    names = set(lf.collect_schema().names())

    def f(n: str, dtype: pl.DataType) -> pl.Expr:
        return pl.col(f"f_{n}").cast(dtype) if f"f_{n}" in names else pl.lit(None, dtype=dtype)

    stem = path.name.split(".")[0]
    job_id = pl.coalesce(f("job_id", pl.String), pl.format(f"{stem}:{{}}", pl.col("_line")))
    batch = f("batch_size", pl.Int64)
    if mapping.batch_size_scope == "global":
        batch = (batch.cast(pl.Float64) / pl.col("num_gpus").clip(1)).round(0).cast(pl.Int64).clip(1)
    duration = pl.coalesce(f("duration_s", pl.Float64), f("end_time_s", pl.Float64) - f("start_time_s", pl.Float64))
    cols = [
        job_id.alias("job_id"),
        pl.lit(str(path)).alias("source"),
        pl.col("_line").alias("line"),
        f("model", pl.String).alias("trace_model"),
        batch.alias("batch_size"),
        "architecture", "num_workers", "gpus_per_worker", "num_ps", "num_servers", "num_gpus", "gpu_request",
        "shared_gpu",
        pl.lit(None, dtype=pl.Int64).alias("server_gpus"),
        f("gpu", pl.String).alias("trace_gpu"),
        f("num_steps", pl.Int64).alias("num_steps"),
        duration.alias("duration_s"),
        f("status", pl.String).alias("status"),
        pl.lit(None, dtype=pl.String).alias("pre_reason"),
    ]
    if "f_gpu_time_s" in names:
        cols.append(pl.col("f_gpu_time_s").alias("gpu_time_s"))
    cols += [pl.col(f"f_{c}").alias(c) for c in FEATURE_COLUMNS if f"f_{c}" in names]
    cols += [pl.col(c).cast(pl.String).alias(f"trace_{c}") for c in mapping.keep]
    return lf.select(cols)


def expand_paths(paths: Sequence[str | Path], prefix: str | None = None) -> list[Path]:
    """Files for ``paths``; a directory contributes its table files (see
    :func:`read_table_population`), only those whose names start with ``prefix`` when given.

    Raises:
        FileNotFoundError: a path that does not exist.
        ValueError: a directory without table files.
    """
    out: list[Path] = []
    for p in (Path(x) for x in paths):
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        if p.is_dir():
            found = sorted(c for c in p.iterdir() if c.is_file() and _table_suffix(c)
                           and (prefix is None or c.name.startswith(prefix)))
            if not found:
                raise ValueError(f"{p}: no .trace, .csv, .tsv, .csv.gz or .parquet file in the directory")
            out.extend(found)
        else:
            out.append(p)
    return out


def _table_suffix(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith((".trace", ".csv", ".tsv", ".csv.gz", ".tsv.gz", ".parquet", ".pq"))
