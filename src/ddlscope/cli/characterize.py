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

from ddlscope.api import say_duration_once
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
    read_trace,
)
from ddlscope.engine import check_engine, require_ray
from ddlscope.report.console import FORMATS, emit, expected_one_of, terminal
from ddlscope.specs.examples import EXAMPLE_SERVER
from ddlscope.specs.files import parse_pairs
from ddlscope.specs.workload import PRECISIONS

c = pl.col
MODEL_NOTE = (
    "Every formula of the step-time model is a reconstruction of the PAI study's analytical framework (IISWC 2019) "
    "from standard costs (alpha-beta links, ring collectives, roofline); latencies and efficiencies are stated "
    "assumptions until calibrated (ddlscope calibrate)."
)


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
        streaming: Annotated[
            bool, typer.Option("--streaming", help="evaluate the jobs in chunks: every job x scenario row goes to a "
                               "Parquet dataset partitioned by scenario (tables/job_scenarios/), the aggregates are "
                               "computed from it; tables and summary.json, no figures (docs/streaming.md)")
        ] = False,
        chunk_jobs: Annotated[
            int | None, typer.Option("--chunk-jobs", help="with --streaming: jobs evaluated together "
                                     "[default: 250,000]")
        ] = None,
        engine: Annotated[str, typer.Option(
            "--engine", help="with --streaming (implies it): local (this process) or ray (each chunk of jobs a Ray "
            "task; pip install 'ddlscope[ray]')")] = "local",
        address: Annotated[str | None, typer.Option(
            "--address", help="with --engine ray: the cluster's address (ray start --head prints it; auto: the one "
            "on this machine; default: a local cluster); the report folder must be on a disk every node sees")
        ] = None,
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
        from ddlscope.ingest.report import reason_summary
        from ddlscope.population.builtin import NOTE as BUILTIN_NOTE
        from ddlscope.population.builtin import builtin_population
        from ddlscope.population.characterize import characterize as run_characterization
        from ddlscope.population.jobs import assemble_jobs
        from ddlscope.population.workloads import WorkloadLibrary
        from ddlscope.report.characterize import write_characterization_report
        from ddlscope.report.outdir import check_report_dir, clear_previous_report

        started = time.perf_counter()
        expected_one_of(fmt, FORMATS)
        if precision not in PRECISIONS:
            raise ValueError(f"--precision: expected one of {', '.join(PRECISIONS)}, got {precision!r}")
        check_report_dir(out, "--out", overwrite)
        check_engine(engine, "--engine")
        if address is not None and engine != "ray":
            raise ValueError("--address: read with --engine ray only (the address of the Ray cluster to run on)")
        if engine == "ray":
            require_ray()  # before the trace is read: the message says how to install it
            streaming = True  # the engine runs the chunks of the streaming path (as rpc dissect --engine ray)
        if chunk_jobs is not None and not streaming:
            raise ValueError("--chunk-jobs: read with --streaming only (without it every job is evaluated in one pass)")
        if chunk_jobs is not None and chunk_jobs < 1:
            raise ValueError(f"--chunk-jobs: expected at least 1, got {chunk_jobs}")
        from ddlscope.population.streaming import DEFAULT_CHUNK_JOBS

        chunk_jobs = DEFAULT_CHUNK_JOBS if chunk_jobs is None else chunk_jobs
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
        servers = {cat.gpu(gpu).name: srv for gpu, srv in _parse_server_for(server_for).items()}
        for srv in [*servers.values(), *([system] if system else [])]:
            cat.server(srv)
        notes = [MODEL_NOTE]
        console = err_console
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                      transient=True, disable=fmt != "table") as progress:
            step = progress.add_task("reading the population", total=None)
            report = None
            if trace:
                population, report = read_trace(trace, trace_format, map_pairs, mapping, model_map, model_mix,
                                                fractional_gpus, multi_gpu_instance, server_gpus, cat, status)
                notes.extend(report.notes)
                source = ", ".join(str(t) for t in trace)
            else:
                population = builtin_population(servers=(cat.server(system).name,) if system else None)
                notes.insert(0, BUILTIN_NOTE if not system else BUILTIN_NOTE + f" Run here on {system} only.")
                source = "built-in population (reconstruction)" + (f" on {system}" if system else "")
            for col, dtype in (("reason", pl.String), ("batch_size", pl.Int64), ("num_servers", pl.Int64)):
                if col not in population.columns:
                    population = population.with_columns(pl.lit(None, dtype).alias(col))

            def on_profile(model: str, batch: int | None, prec: str) -> None:
                progress.update(step, description=f"profiling {model} (batch {batch or 'default'}, {prec})")

            progress.update(step, description="attaching workloads and systems")
            library = WorkloadLibrary(on_profile=on_profile)
            assemble = {"default_server": system or EXAMPLE_SERVER, "server_for": servers, "precision": precision,
                        "overlap": overlap}

            def no_jobs(population: pl.DataFrame) -> ValueError:
                emit(reason_summary(population), "table", title="no attributable job: every job of the population "
                     "is accounted for below", stream=None)
                return ValueError("the population has no job the model can evaluate (see the accounting above; "
                                  + (report.no_jobs_message() if report and report.no_jobs_message() else
                                     "e.g. give --model-mix for traces without model labels") + ")")

            if streaming:
                from ddlscope.population.streaming import JobChunks, characterize_streaming

                clear_previous_report(out)
                # the Jobs table is assembled slice by slice as the chunks are evaluated, never held whole
                source_jobs = JobChunks(population, library, cat, chunk_jobs=chunk_jobs, **assemble)
                n_chunks = max(1, -(-population.height // chunk_jobs))
                on_chunk = _chunk_progress(progress, step, n_chunks, len(scenarios) + 1, engine)
                on_chunk(0, population.height)
                try:
                    ch = characterize_streaming(source_jobs, scenarios, out / "tables" / "job_scenarios", cat,
                                                notes=notes, require_gpu_memory=not keep_unfit,
                                                chunk_jobs=chunk_jobs, on_chunk=on_chunk, engine=engine,
                                                address=address)
                except ValueError:
                    if source_jobs.population is not None and source_jobs.assembled == 0:
                        raise no_jobs(source_jobs.population) from None
                    raise
                population = source_jobs.population
            else:
                jobs, population = assemble_jobs(population, library, cat, **assemble)
                if jobs.height == 0:
                    raise no_jobs(population)
                progress.update(step, description=f"evaluating {jobs.height:,} jobs x {len(scenarios) + 1} scenarios")
                ch = run_characterization(jobs, scenarios, cat, notes=notes, require_gpu_memory=not keep_unfit)
            if ch.excluded.height:
                population = population.join(ch.excluded.rename({"reason": "_unfit"}), on="job_id", how="left")
                population = population.with_columns(reason=pl.coalesce("reason", "_unfit")).with_columns(
                    attributed=c("reason").is_null()).drop("_unfit")
            accounting = reason_summary(population)
            sources = (ch.scan("baseline").select("gpu_time_source").collect() if streaming else ch.baseline)[
                "gpu_time_source"].value_counts()
            malformed = report.malformed_summary(3) if report is not None and report.malformed.height else None
            if malformed is not None:
                ch.notes.append(f"{report.malformed.height:,} malformed row(s) of the trace are not jobs and were not "
                                "read (file:line examples in the malformed_rows table; ddlscope ingest lists them).")
            say_duration_once(ch.notes, report, sources)
            progress.update(step, description="writing the report")
            summary = {"source": source, "population_jobs": population.height,
                       "malformed_rows": 0 if report is None else report.malformed.height,
                       # the reader's count (its note is among the notes); how those jobs are weighed: gpu_time_sources
                       "jobs_without_duration": 0 if report is None else report.jobs_without_duration,
                       "gpu_time_sources": dict(sources.iter_rows()),
                       "evaluated_jobs": ch.jobs if streaming else ch.baseline.height,
                       "scenarios": [s.name for s in scenarios],
                       "system": system, "precision": precision, "overlap": overlap,
                       "model_wall_time_s": round(time.perf_counter() - started, 2)}
            index = None
            if streaming:
                summary["streaming"] = {"chunks": ch.chunks, "chunk_jobs": chunk_jobs, "engine": ch.engine,
                                        "results": str(ch.results_dir)}
                _write_streamed(ch, accounting, summary, out)
                summary["wall_time_s"] = round(time.perf_counter() - started, 2)
                _print(ch, accounting, malformed, summary, out / "summary.json", out, fmt)
                return
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


def _chunk_progress(progress: Progress, step, chunks: int, scenarios: int, engine: str):
    """The ``on_chunk`` callback of :func:`~ddlscope.population.streaming.characterize_streaming`
    for the progress line on stderr: chunks done of ``chunks``, jobs done, the rate (jobs/s since the
    first call) and the ETA (seconds, at that rate); each call is one chunk done, the first (with 0
    jobs done) starts the clock."""
    t0 = time.perf_counter()
    calls = -1

    def on_chunk(done: int, total: int) -> None:
        nonlocal calls
        calls += 1
        rate = done / max(time.perf_counter() - t0, 1e-9)
        eta = f"ETA {(total - done) / rate:.0f} s" if rate > 0 else "ETA -"
        progress.update(step, description=f"evaluating chunk {min(calls, chunks):,}/{chunks:,} on {engine}: "
                        f"{done:,}/{total:,} jobs x {scenarios} scenarios ({rate:,.0f} jobs/s, {eta})")

    return on_chunk


def _write_streamed(ch, accounting: pl.DataFrame, summary: dict, out: Path) -> None:
    """The tables (CSV and Parquet) and summary.json of a streamed characterization (the job x
    scenario rows are already in ``tables/job_scenarios/``)."""
    import json

    from ddlscope.report.console import to_jsonable

    tables = out / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    for name, frame in (("component_shares", ch.shares), ("scenario_speedups", ch.speedups),
                        ("bottleneck_mix", ch.bottlenecks), ("accounting", accounting), ("excluded_jobs", ch.excluded)):
        frame.write_csv(tables / f"{name}.csv")
        frame.write_parquet(tables / f"{name}.parquet")
    payload = {**summary, "headline": ch.headline, "notes": ch.notes}
    (out / "summary.json").write_text(json.dumps(to_jsonable(payload), indent=2) + "\n")


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


def _jobs(n: int) -> str:
    return f"{n:,} job" + ("" if n == 1 else "s")


def headline_lines(h: dict) -> tuple[str, str, str]:
    """The three headline sentences of ``characterize`` from ``summary['headline']`` (the keys of
    :func:`ddlscope.population.characterize.characterize`'s headline); a figure over no job says so
    instead of ``n/a of 0``."""

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f} %"

    def times(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f}x"

    ps_jobs, net_jobs = h["ps_worker_jobs"], h["network_jobs"]
    ps = (f"{pct(h['ps_worker_sped_up_by_allreduce_port'])} of {_jobs(ps_jobs)}" if ps_jobs
          else "no PS/Worker job in the population")
    net = (f"{times(h['mean_speedup_ethernet_25_to_100'])} over the {_jobs(net_jobs)} using the network"
           if net_jobs else "no job uses the network")
    return (
        f"  average communication share of step time: {pct(h['mean_comm_share'])} job-weighted, "
        f"{pct(h['mean_comm_share_gpu_time'])} GPU-time-weighted   (study: 62 %)",
        f"  PS/Worker jobs sped up by porting to all-reduce over NVLink: {ps}   (study: 60 %)",
        f"  mean speedup of 25 -> 100 Gb/s Ethernet: {net}, "
        f"{times(h['mean_speedup_ethernet_25_to_100_all_jobs'])} over all   (study: 1.7x)",
    )
