"""``ddlscope rpc dissect``: RPC latency dissection of parameter-server logs.

Option values come from the RPC modules (already loaded by the CLI); the dissection and the report
(matplotlib) are imported inside the command, so that ``ddlscope --help`` does not pay for them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ddlscope.cli.common import OverwriteOpt, err_console, user_errors
from ddlscope.report.console import expected_one_of
from ddlscope.rpc.readers import INPUT_FORMATS
from ddlscope.rpc.validate import TIME_UNITS

DEFAULT_OUT = Path("ddlscope-report/rpc-dissect")


def register(rpc_app: typer.Typer) -> None:
    """Add ``dissect`` to the ``rpc`` group."""

    @rpc_app.command("dissect")
    @user_errors
    def dissect_cmd(
        logs: Annotated[list[Path], typer.Argument(help="RPC log file(s): .csv/.tsv, .parquet, .jsonl/.ndjson, "
                                                   "or OTLP JSON (.json); several files form one log")],
        out: Annotated[Path, typer.Option("--out", "-o", help="report folder (index.html, figures/, tables/, "
                                          "summary.json); a new or empty folder, or an earlier report's")]
        = DEFAULT_OUT,
        overwrite: OverwriteOpt = False,
        fmt: Annotated[str, typer.Option("--format", "-f", help="table or json (what is printed)")] = "table",
        column_map: Annotated[list[str] | None, typer.Option(
            "--map", help="rename a log column (or OTLP attribute) to a schema column: OLD=NEW (repeatable)")] = None,
        mapping_file: Annotated[Path | None, typer.Option(
            "--mapping", help="mapping file (TOML/JSON): columns and ops tables, time_unit (docs/rpc.md)")] = None,
        op_map: Annotated[list[str] | None, typer.Option(
            "--op-map", help="map an op value to pull_sparse|pull_dense|push_sparse|push_dense: VALUE=OP "
            "(repeatable)")] = None,
        time_unit: Annotated[str, typer.Option(
            "--time-unit", help=f"unit of the log's timestamps: {', '.join(TIME_UNITS)}")] = "ns",
        input_format: Annotated[str, typer.Option(
            "--input-format", help=f"one of {', '.join(INPUT_FORMATS)} (auto: by file suffix)")] = "auto",
        streaming: Annotated[bool, typer.Option(
            "--streaming", help="never hold the whole log: read it by server partitions in three passes "
            "(Parquet/CSV files or folders of them; exact percentiles, stage summary and concurrency fit; "
            "docs/streaming.md)")] = False,
        engine: Annotated[str, typer.Option(
            "--engine", help="with --streaming: local (this process) or ray (partitions as Ray tasks; "
            "pip install 'ddlscope[ray]')")] = "local",
        address: Annotated[str | None, typer.Option(
            "--address", help="with --engine ray: the cluster's address (ray start --head prints it; "
            "default: a local cluster)")] = None,
        partition_rows: Annotated[int, typer.Option(
            "--partition-rows", min=1, help="with --streaming: rows a partition of whole servers aims at "
            "(memory per task)")] = 2_000_000,
        progress: Annotated[bool, typer.Option(
            "--progress/--no-progress", help="with --streaming: rows read, partitions, rate and ETA on "
            "stderr")] = True,
        concurrent_partitions: Annotated[int, typer.Option(
            "--concurrent-partitions", min=1, help="with --streaming --engine local: partitions processed at a "
            "time, in threads of this process (more cores; peak memory about one partition's working set "
            "each)")] = 1,
    ) -> None:
        """Dissect parameter-server RPC latency: which stage dominates and what inflates the tail.

        Decomposes every RPC into client queue, client send, network, server receive, server queue,
        server processing, server send and client completion (single-clock differences, so clock
        skew between hosts cancels; with ps-train's server_dispatch_ns/server_handler_start_ns the
        server receive and queue split further, naming the sync wait); reports p50/p90/p99/p99.9
        per op, server, connection and iteration phase; attributes the slowest 1% and 0.1% to
        stages and servers; and measures the contributors: concurrent reads/writes in flight,
        connection set-ups and reconnects, message size and iteration phase. Rows that fail a
        check are counted by reason with file:line.
        """
        from ddlscope.report.outdir import check_report_dir, clear_previous_report
        from ddlscope.rpc.validate import ColumnMapping

        expected_one_of(fmt, ("table", "json"))
        if input_format not in INPUT_FORMATS:
            raise ValueError(f"--input-format: expected one of {', '.join(INPUT_FORMATS)}, got {input_format!r}")
        check_report_dir(out, "--out", overwrite)
        base = ColumnMapping.from_file(mapping_file) if mapping_file else None
        mapping = ColumnMapping.from_pairs(column_map or (), op_map or (), time_unit=time_unit, base=base)

        if engine not in ("local", "ray"):
            raise ValueError(f"--engine: expected local or ray, got {engine!r}")
        if concurrent_partitions > 1 and (not streaming or engine != "local"):
            raise ValueError("--concurrent-partitions goes with --streaming --engine local (Ray runs the partitions "
                             "as concurrent tasks)")
        if engine == "ray" and not streaming:
            streaming = True  # the engine runs the streaming passes
        if streaming:
            from ddlscope.rpc.streaming import dissect_streaming, write_streamed

            sd = dissect_streaming(logs, mapping=mapping, input_format=input_format, partition_rows=partition_rows,
                                   engine=engine, address=address, progress=progress,
                                   concurrent_partitions=concurrent_partitions)
            if concurrent_partitions > (sd.concurrent_partitions or 1):
                err_console.print(f"[yellow]note:[/yellow] --concurrent-partitions {concurrent_partitions}: the log is "
                                  f"{sd.partitions} partition(s) of about --partition-rows {partition_rows:,} rows, "
                                  f"so {sd.concurrent_partitions} ran at a time (a smaller --partition-rows makes "
                                  "more partitions)")
            check_report_dir(out, "--out", overwrite)
            clear_previous_report(out)
            _print_streamed(sd, write_streamed(sd, out), fmt)
            return

        from ddlscope.rpc.dissect import dissect

        d = dissect(logs, mapping=mapping, input_format=input_format)
        from ddlscope.report.rpc_dissect import write_dissection_report  # matplotlib: after the input is read
        from ddlscope.report.rpc_findings import narrate

        told = narrate(d)  # the sentences, once: the report, the console and the JSON print these
        check_report_dir(out, "--out", overwrite)  # again: the folder may have changed during the analysis
        clear_previous_report(out)
        index = write_dissection_report(d, out)
        _print(d, told, index, fmt)


def _print(d, told, index: Path, fmt: str) -> None:
    """The findings, the stage and per-op tables, rejected rows and notes (or the JSON summary);
    ``told``: the :class:`~ddlscope.report.rpc_findings.Narration` of ``d``."""
    import json

    import polars as pl
    from rich.markup import escape

    from ddlscope.report.console import emit, terminal, to_jsonable
    from ddlscope.report.rpc_findings import dissection_summary

    if fmt == "json":
        sys.stdout.write(json.dumps(to_jsonable({**dissection_summary(d, told), "report": str(index)}), indent=2)
                         + "\n")
        return
    console = terminal()
    console.print("[bold]RPC latency dissection[/bold]")
    for warning in told.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    for i, line in enumerate(told.findings, 1):
        console.print(f"{i}. {escape(line)}")
    overall = d.percentiles.filter(pl.col("grouping") == "all").drop("grouping", "group")
    emit(overall, "table", title="Stages over all RPCs (µs)")
    by_op = d.percentiles.filter((pl.col("grouping") == "op") & (pl.col("stage") == "latency")).select(
        pl.col("group").alias("op"), pl.exclude("grouping", "group", "stage"))
    emit(by_op, "table", title="Latency per op (µs)")
    counts = d.rejected_counts()
    if counts.height:
        emit(counts.drop("meaning"), "table", title="Rejected rows (not analysed)")
    for note in told.notes:
        console.print(f"[dim]note: {escape(note)}[/dim]")
    console.print(f"report: {escape(str(index))}")


def _print_streamed(d, summary_path: Path, fmt: str) -> None:
    """A streamed dissection: its headline, the stage and per-op tables, rejected rows and notes."""
    import json

    import polars as pl
    from rich.markup import escape

    from ddlscope.report.console import emit, terminal, to_jsonable

    if fmt == "json":
        sys.stdout.write(json.dumps(to_jsonable({**d.summary, "report": str(summary_path)}), indent=2) + "\n")
        return
    from ddlscope.report.rpc_findings import streamed_headline

    console = terminal()
    at_once = f", {d.concurrent_partitions} at a time" if (d.concurrent_partitions or 1) > 1 else ""
    console.print(f"[bold]RPC latency dissection (streamed: {d.partitions} partition(s){at_once}, engine {d.engine}, "
                  f"{d.wall_s:.1f} s)[/bold]")
    console.print(escape(streamed_headline(d)))
    overall = d.percentiles.filter(pl.col("grouping") == "all").drop("grouping", "group")
    emit(overall, "table", title="Stages over all RPCs (µs)")
    by_op = d.percentiles.filter((pl.col("grouping") == "op") & (pl.col("stage") == "latency")).select(
        pl.col("group").alias("op"), pl.exclude("grouping", "group", "stage"))
    emit(by_op, "table", title="Latency per op (µs)")
    counts = d.rejected_counts()
    if counts.height:
        emit(counts.drop("meaning"), "table", title="Rejected rows (not analysed)")
    for note in d.notes:
        console.print(f"[dim]note: {escape(note)}[/dim]")
    console.print("[dim]note: streamed: tail attribution, connection, message-size and phase profiles and the "
                  "worker in-flight fit need the whole log (run without --streaming for the full report)[/dim]")
    console.print(f"report: {escape(str(summary_path))}")
