"""``ddlscope ingest``: read a cluster trace, print where every job went, write the population."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.markup import escape

from ddlscope.cli.common import CatalogFiles, FormatOpt, err_console, user_catalog, user_errors
from ddlscope.ingest import FORMATS, parse_map_pairs, read_population
from ddlscope.ingest.report import IngestReport
from ddlscope.report.console import emit, terminal
from ddlscope.specs.catalog import Catalog

TraceFormatOpt = Annotated[
    str | None, typer.Option("--trace-format", "-t", help=f"one of {', '.join(FORMATS)} (default: detect)")
]
MapOpt = Annotated[list[str] | None, typer.Option("--map", help="field=column of a generic table (repeatable)")]
MappingOpt = Annotated[Path | None, typer.Option("--mapping", help="column-mapping file (TOML/JSON)")]
ModelMapOpt = Annotated[
    Path | None, typer.Option("--model-map", help="extra label -> zoo model entries (TOML, a models table)")
]
ModelMixOpt = Annotated[
    str | None,
    typer.Option("--model-mix", help="models for jobs the trace names none, e.g. resnet50=0.7,bert_base=0.3"),
]
FractionalOpt = Annotated[
    str, typer.Option("--fractional-gpus", help="attribute (flag shared_gpu) or exclude fractional requests")
]
MultiGpuOpt = Annotated[
    str, typer.Option("--multi-gpu-instance", help="one worker, several GPUs: allreduce_local or 1wng")
]
ServerGpusOpt = Annotated[
    int | None, typer.Option("--server-gpus", help="GPUs per server for traces giving only a GPU count")
]
StatusOpt = Annotated[
    str, typer.Option("--status", help="job statuses to evaluate: ran (default: all but waiting/pending jobs, "
                      "which never ran), all, or a list of classes (finished, failed, running, waiting, other, "
                      "unknown) and/or trace statuses, e.g. terminated,failed")
]


def read_trace(
    trace: list[Path], trace_format: str | None, map_pairs: list[str] | None, mapping: Path | None,
    model_map: Path | None, model_mix: str | None, fractional_gpus: str, multi_gpu_instance: str,
    server_gpus: int | None, catalog: Catalog, status: str = "ran",
) -> tuple[pl.DataFrame, IngestReport]:
    """:func:`ddlscope.ingest.read_population` with the CLI's options (shared by ``ingest`` and
    ``characterize``)."""
    if mapping is not None and map_pairs:
        raise ValueError("--map and --mapping: give one (put the pairs in the mapping file's [mapping.fields])")
    table_mapping = mapping if mapping is not None else (parse_map_pairs(map_pairs) if map_pairs else None)
    return read_population(
        trace, trace_format, table_mapping, model_map=model_map, model_mix=model_mix,
        fractional_gpus=fractional_gpus,  # type: ignore[arg-type]
        multi_gpu_instance=multi_gpu_instance,  # type: ignore[arg-type]
        server_gpus=server_gpus, catalog=catalog, statuses=status,
    )


def write_population(population: pl.DataFrame, out: Path) -> None:
    """Write the population to ``out``: Parquet (``.parquet``/``.pq``) or CSV (``.csv``).

    Raises:
        ValueError: another suffix.
    """
    suffix = out.suffix.lower()
    out.parent.mkdir(parents=True, exist_ok=True)
    if suffix in (".parquet", ".pq"):
        population.write_parquet(out)
    elif suffix == ".csv":
        population.with_columns(pl.selectors.enum().cast(pl.String)).write_csv(out)
    else:
        raise ValueError(f"--out: expected a .parquet or .csv file, got {out}")


def register(app: typer.Typer) -> None:
    """Add ``ingest`` to ``app``."""

    @app.command()
    @user_errors
    def ingest(
        trace: Annotated[list[Path], typer.Argument(help="trace files or directories (PAI 2020 tables, .trace, CSV)")],
        trace_format: TraceFormatOpt = None,
        map_pairs: MapOpt = None,
        mapping: MappingOpt = None,
        model_map: ModelMapOpt = None,
        model_mix: ModelMixOpt = None,
        fractional_gpus: FractionalOpt = "attribute",
        multi_gpu_instance: MultiGpuOpt = "allreduce_local",
        server_gpus: ServerGpusOpt = None,
        status: StatusOpt = "ran",
        catalog: CatalogFiles = None,
        out: Annotated[Path | None, typer.Option("--out", "-o", help="write the population (.parquet or .csv)")] = None,
        examples: Annotated[int, typer.Option("--examples", min=1, help="malformed-row examples per problem")] = 3,
        fmt: FormatOpt = "table",
    ) -> None:
        """Read a cluster job trace and account for every job: attributed to a zoo model and an
        architecture, or not and why; malformed rows with file and line.

        Formats: pai-v2020 (directory of the PAI 2020 tables), gavel (.trace files), philly-pollux, openb-v2023, csv
        (any CSV/TSV/Parquet job table with --map field=column or --mapping FILE). See docs/ingest.md.

        Output: --format table prints jobs per reason, input files and malformed rows; json all of
        them plus notes in one object; csv only the jobs-per-reason table (one CSV stream holds one
        table; use json for the others, --out for the jobs). Exit code 2 when no job could be read
        (every row malformed, or none), with a line saying why.

        --status chooses the jobs evaluated by status (PAI status, pod phase, a mapped status column):
        by default the jobs that ran (all but Waiting/Pending ones, which never held their GPUs); the
        others are counted under "excluded by status".
        """
        population, report = read_trace(trace, trace_format, map_pairs, mapping, model_map, model_mix,
                                        fractional_gpus, multi_gpu_instance, server_gpus,
                                        user_catalog(catalog), status)
        if out is not None:
            write_population(population, out)
        warning = report.no_jobs_message()
        if fmt == "table":
            emit(report.summary(), "table", title=report.headline())
            files = report.tables
            if files.height > 1:
                files = files.with_columns(pl.col("file").str.split("/").list.last())
            emit(files, "table", title="input files")
            if report.malformed_rows:
                emit(report.malformed_summary(examples), "table", title="malformed rows (first examples: file:line)")
            console = terminal()
            for note in report.notes:
                console.print(f"note: {escape(note)}")
            if out is not None:
                console.print(f"population: {population.height:,} rows -> {escape(str(out))}")
        elif fmt == "json":
            extra = report.to_dict(examples)
            extra.pop("by_reason")
            if out is not None:
                extra["population_file"] = str(out)
            emit(report.summary(), "json", extra=extra)
        else:
            emit(report.summary(), fmt)
        if report.jobs == 0:
            # nothing was read: the tables above say where the rows went; a user error (exit 2), not a result
            raise ValueError(warning or "no job could be read")
        if warning:
            err_console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
