"""``ddlscope calibrate``: micro-benchmarks of this host and nccl-tests fits -> a System profile file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import polars as pl
import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ddlscope.cli.common import (
    CatalogFiles,
    OverwriteOpt,
    check_names,
    check_output_file,
    err_console,
    user_errors,
)
from ddlscope.report.console import emit, expected_one_of
from ddlscope.specs.catalog import load_catalog

DEFAULT_OUT = Path("ddlscope-system.toml")


class StageProgress:
    """A rich progress bar on stderr with one bar per stage (``update(stage, done, total)``)."""

    def __init__(self, quiet: bool = False):
        self.bar = None if quiet else Progress(
            TextColumn("[bold]{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=err_console, transient=False)
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> StageProgress:
        if self.bar:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar:
            self.bar.stop()

    def update(self, stage: str, done: int, total: int) -> None:
        """Show ``done`` of ``total`` for ``stage`` (a new bar the first time)."""
        if not self.bar:
            return
        if stage not in self.tasks:
            self.tasks[stage] = self.bar.add_task(stage, total=total)
        self.bar.update(self.tasks[stage], completed=done, total=total)


def split_nccl_item(item: str, default_slot: str) -> tuple[str, str, str | None]:
    """``FILE[:SLOT[:WHICH]]`` -> ``(file, slot, which)``: SLOT ``nvlink``, ``pcie`` or ``nic`` (empty:
    ``default_slot``); WHICH a collective name or a table number (None: the all-reduce table, or the
    only table). A path with colons of its own is kept whole when no SLOT follows it."""
    parts = item.split(":")
    if len(parts) >= 3 and parts[-2] in ("nvlink", "pcie", "nic", ""):
        return ":".join(parts[:-2]), parts[-2] or default_slot, parts[-1] or None
    if len(parts) >= 2 and parts[-1] in ("nvlink", "pcie", "nic"):
        return ":".join(parts[:-1]), parts[-1], None
    return item, default_slot, None


def _nccl_inputs(items: list[str], collective: str | None, ranks: int | None, default_slot: str) -> list[tuple]:
    from ddlscope.calibrate.nccl_tests import read_nccl_tests

    out = []
    for item in items:
        path, slot, which = split_nccl_item(item, default_slot)
        if not Path(path).exists() and ":" in item:
            head, _, tail = item.rpartition(":")
            if Path(head).exists() or Path(head.rpartition(":")[0]).exists():
                raise ValueError(f"--nccl-tests {item}: unknown link slot or table {tail!r}; expected "
                                 "FILE[:SLOT[:COLLECTIVE|TABLE]] with SLOT nvlink, pcie or nic")
        parsed = read_nccl_tests(path, collective=collective, ranks=ranks)
        table, note = parsed.select(which)
        warn = "[yellow]warning:[/yellow]"
        err_console.print(f"{escape(note)} -> {slot}")
        for r in parsed.rejected_tables:
            err_console.print(f"{warn} {escape(path)}:{r.header_line}: table {r.index} not used: {escape(r.reason)}")
        for n in parsed.notes:
            err_console.print(f"{warn} {escape(n)}")
        for n in table.notes:
            err_console.print(f"{warn} {escape(path)}: table {table.index}: {escape(n)}")
        if not table.complete:
            err_console.print(f"{warn} {escape(path)}: table {table.index} (line {table.header_line}) "
                              "has no 'Avg bus bandwidth' footer: the output may be cut short")
        out.append((table, slot, f"{path} table {table.index} ({table.collective}, line {table.header_line})"))
    return out


def summary_tables(cal: Any) -> dict[str, pl.DataFrame]:
    """The tables ``calibrate`` prints (:func:`ddlscope.report.calibrate.summary_tables`, imported
    when the command runs: the report module draws with matplotlib)."""
    from ddlscope.report.calibrate import summary_tables as tables

    return tables(cal)


def register(app: typer.Typer) -> None:
    """Add ``calibrate`` to ``app``."""

    @app.command()
    @user_errors
    def calibrate(
        out: Annotated[Path, typer.Option("--out", "-o", help="system profile file to write (TOML)")] = DEFAULT_OUT,
        quick: Annotated[bool, typer.Option("--quick", help="fewer sizes, shorter timings (about 30 s)")] = False,
        device: Annotated[str, typer.Option("--device", help="cpu or cuda (default: cuda if present)")] = "auto",
        cores_per_device: Annotated[int, typer.Option(
            "--cores-per-device", help="CPU cores one device (one training process) gets")] = 1,
        processes: Annotated[int | None, typer.Option(
            "--processes", "-p", help="processes of the collective benchmark (default: devices of this host)")] = None,
        no_collectives: Annotated[bool, typer.Option("--no-collectives", help="skip the collectives")] = False,
        precision: Annotated[list[str] | None, typer.Option(
            "--precision", help="matmul precisions (repeatable; default fp32, plus bf16 where native)")] = None,
        clock: Annotated[str, typer.Option(
            "--clock", help="auto, wall or cpu (thread CPU time; one-core CPU devices)")] = "auto",
        nic: Annotated[str, typer.Option(
            "--nic", help="NIC of a CPU host's profile (catalog link; assumed)")] = "eth-10g",
        nccl_tests: Annotated[list[str] | None, typer.Option(
            "--nccl-tests", help="nccl-tests output file, FILE[:SLOT[:WHICH]] with SLOT nvlink, pcie or nic and "
            "WHICH the collective (default all_reduce) or table number to use from a file of several tables "
            "(repeatable); that table's fit becomes the link")] = None,
        collective: Annotated[str | None, typer.Option(
            "--collective", help="collective of the nccl-tests files when they do not say")] = None,
        ranks: Annotated[int | None, typer.Option(
            "--ranks", help="ranks of the nccl-tests runs when the output has no Rank lines")] = None,
        no_bench: Annotated[bool, typer.Option("--no-bench", help="measure nothing: only apply --nccl-tests fits "
                                               "to --system")] = False,
        system: Annotated[str | None, typer.Option(
            "--system", "-s", help="catalog server this host is (GPU hosts, --no-bench)")] = None,
        catalog: CatalogFiles = None,
        fmt: Annotated[str, typer.Option("--format", "-f", help="table or json")] = "table",
        report: Annotated[Path | None, typer.Option(
            "--report", help="also write an HTML report folder here (a new or empty folder, or an earlier "
            "report's)")] = None,
        overwrite: OverwriteOpt = False,
    ) -> None:
        """Measure this host and write its System profile: matmul and convolution efficiency curves
        against the device's peak, STREAM copy/triad, element-wise throughput, per-op overhead, and
        all-reduce / all-gather / all-to-all across local processes (gloo on CPU, NCCL on GPUs) with
        alpha and beta fitted; nccl-tests output files are fitted too. `predict --system-file` reads
        the result.
        """
        import torch

        from ddlscope.calibrate.api import CalibrationPlan, run_calibration
        from ddlscope.calibrate.profile_file import write_calibration

        expected_one_of(fmt, ("table", "json"))
        if report is not None:
            from ddlscope.report.outdir import check_report_dir

            check_report_dir(report, "--report", overwrite)
        cat = load_catalog(*(catalog or []))
        check_names(cat, nic=nic, system=system)  # before any measurement
        check_output_file(out, "--out")
        dev = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        plan = None
        if not no_bench:
            kw: dict[str, Any] = {"device": dev, "cores_per_device": cores_per_device, "ranks": processes,
                                  "collectives": not no_collectives, "clock": clock,
                                  "precisions": tuple(precision or ())}
            plan = CalibrationPlan.quick(**kw) if quick else CalibrationPlan(**kw)
            plan.check()  # before reading files or measuring anything
        tables = _nccl_inputs(nccl_tests or [], collective, ranks,
                              "nvlink" if system and cat.server(system).nvlink else "pcie")
        with StageProgress(quiet=fmt != "table") as view:
            cal = run_calibration(plan, catalog=cat, base_server=system, nic=nic, nccl_tables=tables,
                                  progress=view.update)
        for f in cal.fits:
            for w in f.get("warnings") or ():
                err_console.print(f"[yellow]warning:[/yellow] {escape(str(f.get('origin', '')))}: {escape(w)}")
        load = cal.meta.get("load_average_1m")
        write_calibration(cal, out, header=(
            f"ddlscope calibrate on {cal.meta.get('host')} at {cal.meta.get('created')}"
            + (f", load average {load:.2f}" if load is not None else "")
            + f"\nuse with: ddlscope predict --system-file {out}"))
        if report is not None:
            from ddlscope.report.calibrate import write_calibration_report
            from ddlscope.report.outdir import clear_previous_report

            clear_previous_report(report)
            err_console.print(f"report: {escape(str(write_calibration_report(cal, report)))}")
        s = cal.system
        facts = {
            "written": str(out),
            "system": s.name,
            "device": f"{s.gpu.name}: peak {s.gpu.peak_tflops.fp32 * 1e3:.1f} GFLOP/s FP32, memory "
                      f"{s.gpu.memory_bandwidth_gb_s:.1f} GB/s",
            "peak source": cal.meta.get("peak_source", s.gpu.source),
            "devices per server": s.gpus_per_server,
            "link between devices": f"{(s.nvlink or s.pcie).name} ({(s.nvlink or s.pcie).kind}): "
                                    f"{(s.nvlink or s.pcie).bandwidth_gb_s:.3g} GB/s, "
                                    f"{(s.nvlink or s.pcie).latency_us:.3g} us",
            "efficiency": ", ".join(f"{k} {v:.3g}" for k, v in s.efficiency.model_dump().items()),
            "per-op overhead": None if cal.meta.get("op_overhead_s") is None
            else f"{cal.meta['op_overhead_s'] * 1e6:.2f} us per ATen op",
            "clock": cal.meta.get("clock"),
            "load average (1 min)": None if load is None else round(load, 2),
        }
        for note in cal.meta.get("notes", []) or []:
            facts[f"note {len([k for k in facts if k.startswith('note')]) + 1}"] = note
        if fmt == "json":
            import json
            import sys

            from ddlscope.report.console import frame_records, to_jsonable

            payload = {**facts, "efficiency": s.efficiency.model_dump(),
                       "tables": {k: frame_records(v) for k, v in cal.tables.items()}, "fits": cal.fits}
            sys.stdout.write(json.dumps(to_jsonable(payload), indent=2) + "\n")
            return
        for title, frame in summary_tables(cal).items():
            emit(frame, "table", title=title)
        emit(pl.DataFrame({"field": list(facts), "value": ["not measured" if v is None else str(v)
                                                           for v in facts.values()]}), "table",
             title="System profile")
