"""``ddlscope trace``: the measured step breakdown of PyTorch profiler traces, and what-if from it.

Only typer and the shared option helpers are imported with the module (``ddlscope --help`` stays
fast); the analysis, Polars, msgspec and matplotlib are imported when the command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ddlscope.cli.common import (
    CatalogFiles,
    FormatOpt,
    OverwriteOpt,
    check_names,
    err_console,
    parse_scenarios,
    user_catalog,
    user_errors,
)
from ddlscope.specs.scenario import BUILTIN_SCENARIOS

LAUNCH_GAP_US = 10.0
"""Default of ``--launch-gap-us``: :data:`ddlscope.measure.timeline.LAUNCH_GAP_US` (a test keeps them equal;
not imported here to keep the measure package out of ``--help``)."""
WARMUP_FACTOR = 3.0
"""Default of ``--warmup-factor``: :data:`ddlscope.measure.iterations.WARMUP_FACTOR` (same test)."""


def register(app: typer.Typer) -> None:
    """Add ``trace`` to ``app``."""

    @app.command()
    @user_errors
    def trace(
        traces: Annotated[list[Path], typer.Argument(
            help="PyTorch profiler traces (Kineto/Chrome JSON, .json.gz, .tar/.tar.gz archives, or folders); "
                 "one per rank. Execution traces among them add op shapes.")],
        rules: Annotated[list[Path] | None, typer.Option(
            "--rules", help="extra classification rules (TOML like the built-in trace_rules.toml, the same "
                            "document as .json, or CSV pattern,class,kind); tried before the built-in ones")] = None,
        scenario: Annotated[list[str] | None, typer.Option(
            "--scenario", help="what-if scenario: built-in name, scenario file, or inline 'name:key=value,...' "
                               f"(repeatable; default all built-ins: {', '.join(BUILTIN_SCENARIOS)})")] = None,
        no_whatif: Annotated[bool, typer.Option("--no-whatif", help="skip the what-if")] = False,
        system: Annotated[str | None, typer.Option(
            "--system", "-s",
            help="server type from the catalog (default: the usual server of the traced GPU)")] = None,
        gpu: Annotated[str | None, typer.Option(
            "--gpu", help="GPU (catalog name) when the trace has no deviceProperties, or to override it")] = None,
        catalog: CatalogFiles = None,
        launch_gap_us: Annotated[float, typer.Option(
            "--launch-gap-us", help="idle gaps before already-queued work shorter than this are launch latency, "
                                    "longer ones a dependency wait")] = LAUNCH_GAP_US,
        whole_trace: Annotated[bool, typer.Option(
            "--whole-trace", help="ignore iteration markers: one window per rank over all its GPU activity")] = False,
        keep_warmup: Annotated[bool, typer.Option(
            "--keep-warmup", help="keep warm-up iterations (labelled warm-up by the trace, or a first iteration "
                                  "slower than --warmup-factor x the median of the others) in the means, the rank "
                                  "skew, the model check and the what-if baseline")] = False,
        warmup_factor: Annotated[float, typer.Option(
            "--warmup-factor", help="a first iteration longer than this many times the median of the later ones "
                                    "is a warm-up iteration")] = WARMUP_FACTOR,
        out: Annotated[Path | None, typer.Option("--out", help="write an HTML report folder here (new, empty, or "
                                                 "an earlier report's)")] = None,
        overwrite: OverwriteOpt = False,
        fmt: FormatOpt = "table",
    ) -> None:
        """Where each iteration's GPU time goes, measured from PyTorch profiler traces.

        Per iteration (ProfilerStep#N, or inferred from DataLoader / Optimizer.step annotations) and
        rank: compute-bound, memory-bound and unclassified kernels, exposed communication per
        collective, device copies, host-device copies (data I/O) and idle time with its visible
        cause; collectives with message size and algorithm/bus bandwidth; rank skew; what-if from
        the measured baseline; the analytical model's prediction beside the measurement. Warm-up
        iterations stay in the per-iteration tables, marked, and out of the means and the baseline.
        """
        import math

        from ddlscope.report.console import FORMATS, expected_one_of

        # every option is checked before the traces are read
        expected_one_of(fmt, FORMATS)
        if not (math.isfinite(launch_gap_us) and launch_gap_us >= 0):
            raise ValueError(f"--launch-gap-us: expected a finite number of microseconds >= 0, got {launch_gap_us}")
        if not (math.isfinite(warmup_factor) and warmup_factor > 1):
            raise ValueError(f"--warmup-factor: expected a finite number > 1, got {warmup_factor}")
        if no_whatif and scenario:
            raise ValueError("--scenario and --no-whatif: choose one (--no-whatif skips the what-if)")
        if out is not None:
            from ddlscope.report.outdir import check_report_dir

            check_report_dir(out, "--out", overwrite)
        cat = user_catalog(catalog)
        check_names(cat, system=system, gpu=gpu)
        scenarios = [] if no_whatif else parse_scenarios(scenario, cat)

        from ddlscope.measure.analysis import analyze_traces
        from ddlscope.report.console import emit_sections
        from ddlscope.report.trace_tables import sections, summary

        a = analyze_traces(traces, rules_files=rules or [], scenarios=scenarios, catalog=cat, server=system,
                           gpu=gpu, launch_gap_us=launch_gap_us, whole_trace=whole_trace, keep_warmup=keep_warmup,
                           warmup_factor=warmup_factor)
        secs = sections(a, compact=fmt == "table")
        head = summary(a)
        if fmt == "json":  # every table whole, times in microseconds, plus the per-rank details
            full = [("breakdown_us", a.breakdown, "", None), ("collective_calls", a.calls, "", None),
                    ("kernels", a.kernels, "", None), ("ranks_detail", a.ranks, "", None)]
            emit_sections(secs + full, fmt, summary={**head, "skew_summary": a.skew_summary})
        else:
            emit_sections(secs, fmt, summary=head)
        if out is not None:
            from ddlscope.report.outdir import check_report_dir, clear_previous_report
            from ddlscope.report.trace_report import write_trace_report

            check_report_dir(out, "--out", overwrite)  # again: the folder may have changed meanwhile
            clear_previous_report(out)
            index = write_trace_report(a, out, secs, head, "ddlscope trace: measured step breakdown")
            err_console.print(f"report written to {index}")
