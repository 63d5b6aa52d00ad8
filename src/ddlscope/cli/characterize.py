"""``ddlscope characterize``: a whole job population under every scenario, with a report.

The main job of ddlscope: read a cluster trace (or take the built-in population), account for
every job, evaluate every job under the baseline and every what-if scenario with the vectorised
step-time model, aggregate by job count and by GPU-time, and write an HTML report with its figures
and tables.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ddlscope.api import MODEL_NOTE as API_MODEL_NOTE
from ddlscope.cli.common import (
    CatalogFiles,
    FormatOpt,
    OverlapOpt,
    OverwriteOpt,
    err_console,
    parse_scenarios,
    user_catalog,
    user_errors,
)
from ddlscope.cli.ingest import (
    FractionalOpt,
    MapOpt,
    MappingOpt,
    ModelMapOpt,
    ModelMixOpt,
    MultiGpuOpt,
    ServerGpusOpt,
    StatusOpt,
    TraceFormatOpt,
    parse_map_pairs,
)
from ddlscope.report.console import FORMATS, emit, expected_one_of, terminal
from ddlscope.specs.examples import EXAMPLE_SERVER
from ddlscope.specs.files import parse_pairs
from ddlscope.specs.workload import PRECISIONS

c = pl.col
MODEL_NOTE = API_MODEL_NOTE


def _parse_server_for(pairs: list[str] | None) -> dict[str, str]:
    return parse_pairs(pairs or [], what="--server-for", expected="GPU=SERVER, e.g. T4=t4-pcie-8")


def register(app: typer.Typer) -> None:
    """Add ``characterize`` to ``app``."""

    @app.command()
    @user_errors
    def characterize(
        trace: Annotated[
            list[Path] | None,
            typer.Argument(help="cluster trace files or directories; none: the built-in population"),
        ] = None,
        out: Annotated[Path, typer.Option("--out", "-o", help="report folder (new, empty, or an earlier report's)")
                       ] = Path("ddlscope-report"),
        overwrite: OverwriteOpt = False,
        scenario: Annotated[
            list[str] | None,
            typer.Option("--scenario", help="built-in name, scenario file, or inline 'name:key=value,...' "
                         "(repeatable; default: every built-in scenario)"),
        ] = None,
        system: Annotated[
            str | None,
            typer.Option("--system", "-s", help=f"server type jobs run on (catalog; default {EXAMPLE_SERVER}; for the "
                         "built-in population: instead of its two PAI servers)"),
        ] = None,
        server_for: Annotated[
            list[str] | None,
            typer.Option("--server-for", help="GPU=SERVER: jobs on that GPU run on that server type (repeatable)"),
        ] = None,
        precision: Annotated[str, typer.Option("--precision", help="precision of the profiled workloads")] = "fp32",
        overlap: OverlapOpt = "none",
        keep_unfit: Annotated[
            bool, typer.Option("--keep-unfit", help="keep jobs whose replica exceeds the GPU memory")
        ] = False,
        figures: Annotated[bool, typer.Option("--figures/--no-figures", help="draw the report's figures")] = True,
        all_rows: Annotated[
            bool, typer.Option("--all-rows", help="also write every job x scenario row (tables/job_scenarios.parquet)")
        ] = False,
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
        fmt: FormatOpt = "table",
    ) -> None:
        """Characterize a whole job population: where every job's step time goes, and what each what-if scenario
        buys, for every job and on average; writes an HTML report (figures as PNG/SVG, tables as CSV/Parquet,
        summary.json) into --out.

        Without a trace: the built-in population (every zoo model under each architecture and GPU count the PAI
        study considers, on 8 x V100 NVLink and PCIe-only servers with 25 Gb/s Ethernet; a reconstruction).
        """
        # the analysis and the report (matplotlib) are imported when the command runs, not at start-up
        from ddlscope.api import NoEvaluableJobsError, characterize_population
        from ddlscope.report.characterize import write_characterization_report
        from ddlscope.report.outdir import check_report_dir, clear_previous_report

        started = time.perf_counter()
        expected_one_of(fmt, FORMATS)
        if precision not in PRECISIONS:
            raise ValueError(f"--precision: expected one of {', '.join(PRECISIONS)}, got {precision!r}")
        check_report_dir(out, "--out", overwrite)
        if not trace:
            given = [flag for flag, value, default in (
                ("--trace-format", trace_format, None), ("--map", map_pairs, None), ("--mapping", mapping, None),
                ("--model-map", model_map, None), ("--model-mix", model_mix, None),
                ("--fractional-gpus", fractional_gpus, "attribute"),
                ("--multi-gpu-instance", multi_gpu_instance, "allreduce_local"), ("--server-gpus", server_gpus, None),
                ("--server-for", server_for, None), ("--status", status, "ran")) if value not in (default, [])]
            if given:
                raise ValueError(f"{', '.join(given)}: options for reading a trace; give a TRACE (the built-in "
                                 "population has its models, placements and servers)")
        cat = user_catalog(catalog)
        scenarios = parse_scenarios(scenario, cat)
        if mapping is not None and map_pairs:
            raise ValueError("--map and --mapping: give one (put the pairs in the mapping file's [mapping.fields])")
        table_mapping = mapping if mapping is not None else (parse_map_pairs(map_pairs) if map_pairs else None)
        console = err_console
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                      transient=True, disable=fmt != "table") as progress:
            step = progress.add_task("reading the population", total=None)

            def on_profile(model: str, batch: int | None, prec: str) -> None:
                progress.update(step, description=f"profiling {model} (batch {batch or 'default'}, {prec})")

            try:
                res = characterize_population(
                    trace, scenarios=scenarios, system=system, server_for=_parse_server_for(server_for),
                    precision=precision, overlap=overlap, keep_unfit=keep_unfit, trace_format=trace_format,
                    mapping=table_mapping, model_map=model_map, model_mix=model_mix, fractional_gpus=fractional_gpus,
                    multi_gpu_instance=multi_gpu_instance, server_gpus=server_gpus, status=status, catalog=cat,
                    progress=lambda text: progress.update(step, description=text), on_profile=on_profile)
            except NoEvaluableJobsError as exc:
                emit(exc.accounting, "table", title="no attributable job: every job of the population is accounted "
                     "for below", stream=None)
                raise ValueError(str(exc).replace("see the accounting;", "see the accounting above;")) from None
            ch, report, accounting, source = res.characterization, res.ingest, res.accounting, res.source
            population = res.population
            malformed = res.malformed if res.malformed.height else None
            sources = ch.baseline["gpu_time_source"].value_counts()
            progress.update(step, description="writing the report")
            summary = {"source": source, "population_jobs": population.height,
                       "malformed_rows": 0 if report is None else report.malformed.height,
                       # the reader's count (its note is among the notes); how those jobs are weighed: gpu_time_sources
                       "jobs_without_duration": 0 if report is None else report.jobs_without_duration,
                       "gpu_time_sources": dict(sources.iter_rows()),
                       "evaluated_jobs": ch.baseline.height, "scenarios": [s.name for s in scenarios],
                       "system": system, "precision": precision, "overlap": overlap,
                       "model_wall_time_s": round(time.perf_counter() - started, 2)}
            index = None
            check_report_dir(out, "--out", overwrite)  # again: the folder may have changed meanwhile
            clear_previous_report(out)
            if all_rows:
                (out / "tables").mkdir(parents=True, exist_ok=True)
                ch.results.write_parquet(out / "tables" / "job_scenarios.parquet", compression="lz4")
            written = write_characterization_report(
                ch, out, title="ddlscope characterization", subtitle=source, accounting=accounting,
                malformed=malformed, extra_summary=summary, figures=figures)
            index = written if figures else None
        summary["wall_time_s"] = round(time.perf_counter() - started, 2)
        _print(ch, accounting, malformed, summary, index, out, fmt)


def _print(ch, accounting: pl.DataFrame, malformed: pl.DataFrame | None, summary: dict, index: Path | None,
           out: Path, fmt: str) -> None:
    """Headline figures and where the report went."""
    from ddlscope.report.characterize import ARCH_ORDER
    h = ch.headline
    if fmt == "json":
        emit(accounting, "json", extra={"headline": h, **summary, "report": str(index or out), "notes": ch.notes})
        return
    if fmt == "csv":
        emit(ch.speedups, "csv")
        return
    emit(accounting, "table", title=f"{summary['source']}: every job accounted for")
    if malformed is not None:
        emit(malformed, "table", title=f"{summary['malformed_rows']:,} malformed row(s), not jobs (first examples: "
             "file:line)")
    order = {a: i for i, a in enumerate(ARCH_ORDER)}
    shares = ch.shares.filter(c("weight") == "jobs").sort(c("architecture").replace_strict(order)).select(
        "architecture", "jobs", *(c(f"mean_share_{k}") for k in ("data_io", "compute_bound", "memory_bound", "pcie",
                                                                  "nvlink", "network")), "mean_share_comm")
    emit(shares, "table", title="mean share of step time per component (job-weighted, baseline)")
    sp = ch.speedups.filter((c("weight") == "jobs") & (c("architecture") == "all")).select(
        "scenario", "jobs", "applied_share", "sped_up_share", "mean_speedup", "median_speedup")
    emit(sp, "table", title="what each scenario buys (all jobs; speedup = baseline / scenario step time)")

    console = terminal()
    console.print("[bold]Headline figures (the PAI study's, measured on this population)[/bold]")
    lines = headline_lines(h)
    for line in lines:
        console.print(escape(line))
    for note in ch.notes:
        console.print(f"note: {escape(note)}")
    where = index if index is not None else out
    console.print(f"report: {escape(str(where))}  ({summary['wall_time_s']} s)")
    if ch.excluded.height:
        err_console.print(f"[yellow]note:[/yellow] {ch.excluded.height:,} jobs left out: their replica exceeds the "
                          "GPU memory (see the accounting; --keep-unfit keeps them)")


def headline_lines(h: dict) -> tuple[str, str, str]:
    """The three headline lines of ``characterize`` on the console: the sentences of
    :func:`ddlscope.report.characterize.headline_sentences` with the study's figure beside each."""
    from ddlscope.report.characterize import headline_sentences

    a, b, c_ = (f"  {text}   (study: {study})" for text, study in headline_sentences(h))
    return a, b, c_
