"""``read_population``: any supported cluster trace -> (job population, accounting report)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from ddlscope.ingest.generic import BUILTIN_FORMATS, TableMapping, expand_paths, load_mapping, read_table_population
from ddlscope.ingest.models import ModelMap, load_model_map, parse_model_mix
from ddlscope.ingest.pai import FORMAT as PAI_FORMAT
from ddlscope.ingest.pai import TABLES as PAI_TABLES
from ddlscope.ingest.pai import _table_of as pai_table_of
from ddlscope.ingest.pai import read_pai_v2020
from ddlscope.ingest.population import (
    DEFAULT_STATUSES,
    FractionalPolicy,
    IngestOptions,
    MultiGpuPolicy,
    parse_statuses,
    status_note,
)
from ddlscope.ingest.report import IngestReport
from ddlscope.specs.catalog import Catalog, builtin_catalog

FORMATS: tuple[str, ...] = (PAI_FORMAT, *BUILTIN_FORMATS)
"""Trace formats: ``pai-v2020``, ``gavel``, ``philly-pollux``, ``openb-v2023``, ``csv`` (a generic
table, with a column mapping)."""

_PAI_STEMS = tuple(stem for stem, _ in PAI_TABLES.values())


def _first_line(path: Path) -> str:
    import gzip

    opener = gzip.open if path.name.lower().endswith(".gz") and not path.name.lower().endswith(".tar.gz") else open
    try:
        with opener(path, "rt", errors="replace") as fh:  # type: ignore[operator]
            return fh.readline().strip()
    except OSError:
        return ""


OPENB_POD_PREFIX = "openb_pod_list"
"""File-name prefix of the Alibaba 2023 (FGD, ATC'23) pod lists; the folder's node list is not a job table."""


def detect_format(paths: Sequence[str | Path]) -> str | None:
    """The trace format of ``paths`` by name and first line, or ``None`` when unknown.

    ``pai-v2020``: a directory holding ``pai_job_table.*`` or files named ``pai_<table>.*``;
    ``gavel``: ``.trace`` files (or a directory of them); ``philly-pollux``: a CSV whose header
    has ``duration``, ``num_gpus`` and ``gpu_time``; ``openb-v2023``: a CSV whose header has
    ``name``, ``num_gpu`` and ``gpu_milli``, or a directory holding ``openb_pod_list*`` files.
    """
    kinds: set[str] = set()
    for p in (Path(x) for x in paths):
        if p.is_dir():
            names = [c.name for c in p.iterdir()]
            if any(pai_table_of(c) == "job" for c in p.iterdir()):
                kinds.add(PAI_FORMAT)
            elif any(n.startswith(OPENB_POD_PREFIX) for n in names):
                kinds.add("openb-v2023")
            elif any(n.endswith(".trace") for n in names):
                kinds.add("gavel")
            else:
                return None
            continue
        if p.name.startswith(_PAI_STEMS) and pai_table_of(p) is not None:
            kinds.add(PAI_FORMAT)
        elif p.name.endswith(".trace"):
            kinds.add("gavel")
        elif ".csv" in p.name.lower():
            header = {h.strip().strip('"') for h in _first_line(p).split(",")}
            if {"duration", "num_gpus", "gpu_time"} <= header:
                kinds.add("philly-pollux")
            elif {"name", "num_gpu", "gpu_milli"} <= header:
                kinds.add("openb-v2023")
            else:
                return None
        else:
            return None
    return kinds.pop() if len(kinds) == 1 else None


def _file_format(path: Path) -> str | None:
    """The trace format of one file found in a sub-folder, by name and first line (``None``: not a
    job trace ddlscope knows: a PAI ``.header`` schema file, a node list, a README, ...)."""
    if pai_table_of(path) is not None:
        return PAI_FORMAT
    if path.name.startswith(OPENB_POD_PREFIX) and ".csv" in path.name.lower():
        return "openb-v2023"
    return detect_format([path])


def find_traces(folder: str | Path, fmt: str | None = None) -> tuple[dict[str, list[Path]], list[Path]]:
    """The trace files under ``folder`` and all its sub-folders, by format, and the other files.

    A file counts for a format by the rules of :func:`detect_format` (PAI table names, ``.trace``,
    the header of a CSV; an ``openb_pod_list*`` CSV for ``openb-v2023``); with ``fmt`` given, only
    that format's files count. Sorted by path.

    Returns:
        ``({format: files}, other files)``.
    """
    found: dict[str, list[Path]] = {}
    others: list[Path] = []
    for p in sorted(q for q in Path(folder).rglob("*") if q.is_file()):
        kind = _file_format(p)
        if kind is not None and (fmt is None or kind == fmt):
            found.setdefault(kind, []).append(p)
        else:
            others.append(p)
    return found, others


def _listing(files: Sequence[Path], root: Path, first: int = 5) -> str:
    names = [str(f.relative_to(root)) if f.is_relative_to(root) else str(f) for f in files]
    return ", ".join(names[:first]) + (f" and {len(names) - first} more" if len(names) > first else "")


def _search_folders(paths: list[str | Path], fmt: str | None) -> tuple[str | None, list[str | Path], list[str]]:
    """Resolve folders whose own files tell no format (or hold none of ``fmt``) by searching their
    sub-folders (as ``ddlscope trace`` does); the notes name the files found and used.

    Returns:
        ``(format, paths, notes)``: the paths with each searched folder replaced by its trace
        files; ``format`` ``None`` when nothing can be told.

    Raises:
        ValueError: sub-folders holding traces of several formats (listing them), or a searched
            folder holding no trace file of a known format (listing what it holds).
    """
    out: list[str | Path] = []
    notes: list[str] = []
    kinds: set[str] = set()
    for x in paths:
        p = Path(x)
        own = detect_format([p]) if p.is_dir() or fmt is None else fmt
        if not p.is_dir() or (own is not None and (fmt is None or own == fmt)):
            out.append(x)
            if own is not None:
                kinds.add(own)
            continue
        found, others = find_traces(p, fmt)
        if not found:
            what = f"no {fmt} trace file" if fmt else "no job trace file of a known format"
            held = f"its {len(others):,} file(s): {_listing(others, p)}" if others else "it holds no file"
            raise ValueError(f"{p}: cannot tell the trace format: {what} in it or its sub-folders ({held}); give the "
                             f"files with --trace-format (one of {', '.join(FORMATS)}) and a column mapping "
                             "(--map field=column / --mapping FILE) for other tables")
        if len(found) > 1:
            per = "; ".join(f"{k}: {_listing(v, p, 3)}" for k, v in found.items())
            raise ValueError(f"{p}: its sub-folders hold traces of several formats ({per}); give one folder or the "
                             f"files of one trace, or --trace-format")
        (kind, files), = found.items()
        kinds.add(kind)
        out.extend(files)
        skipped = f"; {len(others):,} other file(s) are not {kind} job traces and were not read: " \
                  f"{_listing(others, p)}" if others else ""
        notes.append(f"{p}: searched its sub-folders: read {len(files):,} {kind} file(s) ({_listing(files, p)})"
                     f"{skipped}")
    if fmt is None:
        fmt = kinds.pop() if len(kinds) == 1 else None
    return fmt, out, notes


def read_population(
    paths: str | Path | Sequence[str | Path],
    fmt: str | None = None,
    mapping: TableMapping | Mapping[str, str] | str | Path | None = None,
    *,
    model_map: ModelMap | Mapping[str, str] | str | Path | None = None,
    model_mix: Mapping[str, float] | str | None = None,
    fractional_gpus: FractionalPolicy = "attribute",
    multi_gpu_instance: MultiGpuPolicy = "allreduce_local",
    server_gpus: int | None = None,
    catalog: Catalog | None = None,
    statuses: str | Sequence[str] | None = DEFAULT_STATUSES,
) -> tuple[pl.DataFrame, IngestReport]:
    """Read a cluster job trace into the job population, every row accounted for.

    Args:
        paths: the trace: a PAI 2020 directory or table files, Gavel ``.trace`` files or their
            directory, a CSV/TSV/Parquet job table (several files are read in order). A folder
            whose own files tell no format (or, with ``fmt``, hold none of that format) is searched
            with its sub-folders (:func:`find_traces`); a note names the files read and the
            others.
        fmt: one of :data:`FORMATS`; ``None`` detects it (:func:`detect_format`), or takes
            ``csv`` when a ``mapping`` is given.
        mapping: for table formats: a :class:`TableMapping`, a mapping file (TOML/JSON), or
            ``{field: column}`` pairs that update the format's built-in mapping.
        model_map: extra label -> zoo model entries (mapping or TOML/JSON file) over the built-in
            map (``ingest/data/model_map.toml``).
        model_mix: ``{zoo_model: weight}`` or ``"resnet50=0.7,bert_base=0.3"``: models for jobs
            whose trace names none (golden-ratio rule of
            :func:`~ddlscope.ingest.models.assign_model_mix`); ``None``: such jobs are not
            attributed.
        fractional_gpus: ``attribute`` (flag ``shared_gpu``) or ``exclude`` (a reason).
        multi_gpu_instance: architecture of one worker with several GPUs:
            ``allreduce_local`` (default) or ``1wng``.
        server_gpus: GPUs per server for traces that give only a GPU count (default 8).
        catalog: hardware catalog for GPU names (default: the built-in one).
        statuses: the job statuses evaluated (``--status``): ``"all"``, ``"ran"`` (the default,
            :data:`~ddlscope.ingest.population.DEFAULT_STATUSES`: every status but Waiting/Pending),
            or classes and/or trace statuses, ``"terminated,failed"`` or ``("finished", "failed")``
            (see :func:`~ddlscope.ingest.population.parse_statuses`). Other jobs stay in the
            population with the reason ``excluded by status: <status>``; ``None``: every job.

    Returns:
        ``(population, report)``: one row per job with the columns of
        :data:`~ddlscope.ingest.population.POPULATION_SCHEMA` (see docs/ingest.md), and the
        :class:`~ddlscope.ingest.report.IngestReport`. A trace with no attributable job returns
        normally; :meth:`IngestReport.require_attributed` raises with an explanation.

    Raises:
        FileNotFoundError: a missing path.
        ValueError: an unknown format, a format that cannot be detected (a folder: naming the
            files it and its sub-folders hold), sub-folders of several formats, a mapping for the PAI
            format, a bad mapping, model map or mix, a ``statuses`` term that is neither a status
            class nor a status of the trace, or an unreadable file (naming it).
    """
    path_list = [paths] if isinstance(paths, str | Path) else list(paths)
    if not path_list:
        raise ValueError("paths: expected at least one trace file or directory")
    seen: dict[Path, str] = {}
    for p in path_list:
        if not Path(p).exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        key = Path(p).resolve()
        if key in seen:
            raise ValueError(f"{p}: given twice (as {seen[key]}); each trace file is read once")
        seen[key] = str(p)
    search_notes: list[str] = []
    if fmt is None and mapping is None and detect_format(path_list) is None and any(
            Path(p).is_dir() for p in path_list):
        fmt, path_list, search_notes = _search_folders(path_list, None)
    elif fmt in FORMATS and fmt != "csv" and any(Path(p).is_dir() and detect_format([p]) != fmt for p in path_list):
        fmt, path_list, search_notes = _search_folders(path_list, fmt)
    if fmt is None:
        fmt = detect_format(path_list) or ("csv" if mapping is not None else None)
        if fmt is None:
            raise ValueError(
                f"{', '.join(map(str, path_list))}: cannot tell the trace format; give one of "
                f"{', '.join(FORMATS)} (--trace-format) or a column mapping (--map field=column / --mapping FILE)"
            )
    if fmt not in FORMATS:
        raise ValueError(f"format: unknown trace format {fmt!r}; expected one of {', '.join(FORMATS)}")
    opts = IngestOptions(
        model_map=load_model_map(model_map),
        model_mix=parse_model_mix(model_mix),
        fractional_gpus=fractional_gpus,
        multi_gpu_instance=multi_gpu_instance,
        server_gpus=server_gpus,
        catalog=catalog or builtin_catalog(),
        statuses=None if statuses is None else parse_statuses(statuses),
    )
    population, report = _read(path_list, fmt, mapping, opts)
    report.notes[:0] = search_notes
    note = status_note(population, opts.statuses)
    if note:
        report.notes.append(note)
    return population, report


def _read(path_list: list[str | Path], fmt: str, mapping: TableMapping | Mapping[str, str] | str | Path | None,
          opts: IngestOptions) -> tuple[pl.DataFrame, IngestReport]:
    if fmt == PAI_FORMAT:
        if mapping is not None:
            raise ValueError(
                "mapping: the pai-v2020 format has a fixed schema; a column mapping applies to table formats"
            )
        return read_pai_v2020(path_list, opts)
    base = BUILTIN_FORMATS[fmt]
    if isinstance(mapping, TableMapping):
        table_mapping = mapping
    elif isinstance(mapping, Mapping):
        table_mapping = base.with_fields(mapping)
    elif mapping is not None:
        table_mapping = load_mapping(mapping, base)
    else:
        table_mapping = base
    # a v2023 folder also holds the node list; only the pod lists are jobs
    prefix = OPENB_POD_PREFIX if fmt == "openb-v2023" else None
    return read_table_population(expand_paths(path_list, prefix), table_mapping, opts)
