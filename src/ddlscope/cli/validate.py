"""``ddlscope validate``: the model against real training steps on this machine, or against
published measurements."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.markup import escape

from ddlscope.cli.calibrate import DEFAULT_OUT, StageProgress
from ddlscope.cli.common import FormatOpt, OverwriteOpt, err_console, out_console, user_errors
from ddlscope.report.console import FORMATS, emit, expected_one_of
from ddlscope.shared_data import SEARCHED, find_shared_data


def published_data_dir(given: Path | None) -> Path:
    """``given`` (``--data``), else :func:`ddlscope.shared_data.find_shared_data`.

    Raises:
        FileNotFoundError: ``given`` or ``$DDLSCOPE_SHARED_DATA`` is not a folder, or none found.
    """
    if given is not None:
        if not given.is_dir():
            raise FileNotFoundError(f"--data {given}: not a folder")
        return given
    found = find_shared_data()
    if found is None:
        raise FileNotFoundError(f"published data not found (searched {SEARCHED}): give --data (the folder with "
                                f"dle_tables/ and pollux/) or set DDLSCOPE_SHARED_DATA")
    return found


BY_SERVERS_CAPTION = (
    "step_*/sync_*: the step time and the exposed communication against Pollux's step_time and sync_time; "
    "error = predicted / measured - 1; mape = mean |error|, median_ape = median |error|, median_error = median "
    "signed error (negative: predicted too small), fractions; servers '>= 5': 5 or more servers (the scalability "
    "tables, 6-16)")


REPEATABILITY_CAPTION = (
    "Pollux measured placements that differ only in the order of the servers (1124, 4211, ...) more than once: "
    "a model that prices a placement by its GPUs per server gives them one value. *_log_sd: pooled SD of "
    "ln(measured) within such a group; *_mape_noise: the MAPE of a model exact up to that noise (log-normal); "
    "*_mape_least: the least MAPE one value per group reaches on these rows (a lower bound); *_mape_model: "
    "ddlscope on the same rows; fractions")


def _published(data: Path, fmt: str) -> None:
    from ddlscope.validate.published import LEFT_OUT, published_validation

    with err_console.status("profiling ResNet-50, CIFAR ResNet-18, NeuMF; predicting every row"):
        res = published_validation(data)
    extra = () if res.by_servers is None else (("pollux_by_servers", res.by_servers, BY_SERVERS_CAPTION),)
    if res.repeatability is not None:
        extra = (*extra, ("pollux_repeatability", res.repeatability, REPEATABILITY_CAPTION))
    _write_report(res.rows, res.summary, f"Published measurements ({data}): throughput (dle) and step time (pollux)",
                  group="source" if "source" in res.rows.columns else None, extra_tables=extra)
    if fmt != "table":
        from ddlscope.validate.measurements import concat_tables, validate_measurements
        from ddlscope.validate.shared_tables import dle_measurements, lambda_measurements

        with err_console.status("profiling the Lambda and DLE tables' models; predicting every row"):
            mres = validate_measurements(concat_tables([lambda_measurements(data), dle_measurements(data)]))
        mrows = _measurement_rows(mres).with_columns(source=pl.lit("measurement table ") + pl.col("source"))
        if fmt == "csv":
            emit(pl.concat([res.rows, mrows], how="diagonal_relaxed"), "csv")
        else:
            emit(res.rows, fmt, extra={
                "summary": res.summary.to_dicts(), "fitted": res.fitted, "skipped": res.skipped, "notes": res.notes,
                "by_servers": res.by_servers.to_dicts() if res.by_servers is not None else [],
                "repeatability": res.repeatability.to_dicts() if res.repeatability is not None else [],
                "measurement_tables": {"rows": mrows.to_dicts(), "summary": mres.summary.to_dicts(),
                                       "ratios": mres.ratios.to_dicts(), "protocol": mres.protocol,
                                       "rejected_by_reason": _rejected_counts(mres),
                                       "rejected": mres.rejected.to_dicts()}})
        _rejected_note(mres)
        return
    emit(_zero_rounding(res.summary.select(
        "source", "table", "role", "rows", "mape", "median_ape", "max_ape", "bias",
        *[c for c in ("sync_mape", "sync_measured_mean_s", "sync_predicted_mean_s") if c in res.summary.columns])),
        "table", title=f"Published measurements ({data}): MAPE of throughput (dle) and step time (pollux)",
        caption="role fit: rows the efficiencies were fitted on; test: the rest. sync_*: Pollux sync_time vs the "
        "model's exposed communication, multi-GPU rows")
    if res.by_servers is not None and res.by_servers.height:
        emit(_zero_rounding(res.by_servers), "table",
             title="Pollux multi-GPU rows by number of servers: where the communication model errs",
             caption=BY_SERVERS_CAPTION)
    if res.repeatability is not None and res.repeatability.height:
        emit(_zero_rounding(res.repeatability), "table",
             title="Pollux repeated placements: the error no placement model removes", caption=REPEATABILITY_CAPTION)
    names = list(dict.fromkeys(n for v in res.fitted.values() for n in v))
    fitted = pl.DataFrame([{"fit": k, **{n: v.get(n) for n in names}} for k, v in res.fitted.items()])
    emit(fitted, "table", title="Fitted parameters",
         caption="dle: eff_compute and eff_memory of the totals path (eff_compute = 1 is the bound of the fit); pollux "
         "<job>: factors on the catalog's compute efficiencies of the T4's generation (every op priced; "
         "ddlscope.validate.measurements.FIT_PARAMETERS), fitted on the job's one-GPU rows; network: the NIC's "
         "achieved share, the slowest-rank sigma and the collective launch latency, fitted without each job")
    for note in res.notes:
        err_console.print(f"[yellow]{escape(note)}[/yellow]")
    for key, n in {**res.skipped, **{f"{k}: {v}": 0 for k, v in LEFT_OUT.items()}}.items():
        if n:
            out_console.print(f"skipped rows: {escape(key)}: {n}")
        else:
            out_console.print(f"left out: {escape(key)}")


def _measurement_rows(res) -> pl.DataFrame:
    """The columns of a measurement validation's rows that users read (csv/json)."""
    rows = res.rows
    if "amp" in rows.columns:  # an AMP mode only where the row runs 16-bit mixed precision
        rows = rows.with_columns(amp=pl.when(pl.col("precision").cast(pl.String).is_in(["fp16", "bf16"]))
                                 .then(pl.col("amp")).otherwise(pl.lit("none")))
    return rows.select(
        *[c for c in ("source", "line", "testbed", "model", "gpu", "gpu_given", "gpus", "servers", "batch_per_gpu",
                      "precision", "amp", "optimizer", "optimizer_kernels", "seq_len", "image_size", "attention",
                      "conv_layout",
                      "input_data", "role", "fold", "measured_kind", "measured", "predicted", "error", "step_s",
                      "measured_step_s", "compute_bound_s", "memory_bound_s", "host_s", "data_io_s", "exposed_comm_s",
                      "measured_sync_s", "compute_efficiency_source") if c in rows.columns]
    ).with_columns(pl.col("precision").cast(pl.String))


def _rejected_counts(res) -> dict[str, int]:
    return dict(res.rejected.group_by("reason").len().sort(["len", "reason"], descending=[True, False]).iter_rows())


def _zero_rounding(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with float errors below 1e-12 in magnitude shown as 0 (an exact fit's MAPE is
    rounding noise such as 5.6e-17, not an error)."""
    cols = [n for n, t in frame.schema.items() if t.is_float() and n not in ("sync_measured_mean_s",
                                                                            "sync_predicted_mean_s")]
    return frame.with_columns(pl.when(pl.col(n).abs() < 1e-12).then(0.0).otherwise(pl.col(n)).alias(n) for n in cols)


def _rejected_note(res) -> None:
    """On stderr (so a csv/json stream stays clean): how many rows were not used, by reason."""
    if res.rejected.height:
        counts = ", ".join(f"{r} {n}" for r, n in _rejected_counts(res).items())
        err_console.print(f"[yellow]note:[/yellow] {res.rejected.height} row(s) not used ({escape(counts)}); "
                          "--format json lists each with its file:line")


REPORT: dict[str, Path | None] = {"dir": None}
"""The ``--report`` folder of the running command (None: no HTML report)."""


def _write_report(rows: pl.DataFrame, summary: pl.DataFrame, title: str, **kw) -> None:
    """Write the HTML validation report into ``--report`` when one was asked for."""
    if REPORT["dir"] is None:
        return
    from ddlscope.report.outdir import clear_previous_report
    from ddlscope.report.validation import write_validation_report

    clear_previous_report(REPORT["dir"])
    index = write_validation_report(rows, summary, REPORT["dir"], title="ddlscope validate", subtitle=title, **kw)
    REPORT["dir"] = None  # one report per run: --published's second table set does not replace the first
    err_console.print(f"report: {escape(str(index))}")


def _measurement_report(res, title: str, fmt: str) -> None:
    """Print a :class:`~ddlscope.validate.measurements.MeasurementValidation`: rows (csv), everything
    (json), or the error summary, ratio errors, protocol and rejected rows by reason (table)."""
    rows = _measurement_rows(res)
    _write_report(res.rows, res.summary, title, notes=list(res.protocol))
    rejected = res.rejected.group_by("reason", maintain_order=True).agg(
        rows=pl.len(), example=pl.col("detail").first()).sort(["rows", "reason"], descending=[True, False])
    if fmt in ("csv", "json"):
        if fmt == "csv":
            emit(rows, "csv")
        else:
            emit(rows, "json", extra={
                "summary": res.summary.to_dicts(), "ratios": res.ratios.to_dicts(), "protocol": res.protocol,
                "fits": {k: vars(v) for k, v in res.fits.items()}, "rejected": res.rejected.to_dicts()})
        for line in res.protocol:
            if "warning" in line:
                err_console.print(f"[yellow]{escape(line)}[/yellow]")
        _rejected_note(res)
        return
    has_fit = "role" in res.summary.columns and (res.summary["role"] == "fit").any()
    emit(_zero_rounding(res.summary), "table", title=title,
         caption="error = predicted / measured - 1 of the measured quantity; mape = mean |error|; bias = mean error"
         + ("; sync_*: measured_sync_s vs the exposed communication, sync_mape over rows measured above 0, "
            "sync_mae_s the mean absolute error in s" if res.summary["sync_rows"].sum() else "")
         + ("; role fit: rows the efficiencies were fitted on, test: the rest" if has_fit else ""))
    if res.ratios.height:
        kinds = [str(k) for k in res.ratios["kind"].unique(maintain_order=True)] if "kind" in res.ratios.columns else []
        what = {"gpu": "the GPU", "batch": "the batch", "precision": "the precision"}
        differ = " or ".join(what.get(k, k) for k in kinds) or "one setting"
        emit(res.ratios, "table", title="Ratio errors of the test rows (absolute calibration cancels)",
             caption=f"pairs of rows differing only in {differ}; ratio_error = "
             "predicted ratio / measured ratio - 1, faster row over slower")
    for line in res.protocol:
        out_console.print(f"protocol: {escape(line)}")
    if rejected.height:
        emit(rejected, "table", title=f"Rows not used ({res.rejected.height})",
             caption="one example per reason; --format json lists every row with its file:line")


def _measurements(path: Path, fit_on: str | None, cross_validate: str | None, fmt: str) -> None:
    from ddlscope.validate.measurements import read_measurements, validate_measurements

    table = read_measurements(path)
    with err_console.status("profiling the tables' models; predicting every row") as status:
        res = validate_measurements(table, fit_on=fit_on, cross_validate=cross_validate,
                                    progress=lambda text: status.update(escape(text)))
    _measurement_report(res, f"Measurements ({path}): error per source", fmt)


def _published_measurements(data: Path, fit_on: str | None, cross_validate: str | None, fmt: str) -> None:
    from ddlscope.validate.measurements import concat_tables, validate_measurements
    from ddlscope.validate.shared_tables import dle_measurements, lambda_measurements

    table = concat_tables([lambda_measurements(data), dle_measurements(data)])
    with err_console.status("profiling the tables' models; predicting every row") as status:
        res = validate_measurements(table, fit_on=fit_on, cross_validate=cross_validate,
                                    progress=lambda text: status.update(escape(text)))
    what = f"leave one {cross_validate} out" if cross_validate else (f"fit on {fit_on}" if fit_on else "defaults")
    _measurement_report(res, f"Published measurement tables ({data}: Lambda, DLE), {what}", fmt)


def register(app: typer.Typer) -> None:
    """Add ``validate`` to ``app``."""

    @app.command()
    @user_errors
    def validate(
        system_file: Annotated[Path | None, typer.Option(
            "--system-file", help=f"calibrated profile (`ddlscope calibrate`; default {DEFAULT_OUT} if present, "
            "else a quick calibration first)")] = None,
        model: Annotated[list[str] | None, typer.Option(
            "--model", "-m", help="validation model (repeatable; default all)")] = None,
        processes: Annotated[int, typer.Option("--processes", "-p", help="DDP processes")] = 2,
        steps: Annotated[int, typer.Option("--steps", help="timed steps per run")] = 5,
        warmup: Annotated[int, typer.Option("--warmup", help="untimed steps first")] = 2,
        no_ddp: Annotated[bool, typer.Option("--no-ddp", help="single-process runs only")] = False,
        clock: Annotated[str, typer.Option(
            "--clock", help="auto, wall or cpu (CPU time: robust on a shared host; auto = cpu for one-core devices)"
        )] = "auto",
        published: Annotated[bool, typer.Option(
            "--published", help="validate against the published tables (Pollux, NVIDIA DLE, Lambda) instead; "
            "with --fit-on or --cross-validate, the Lambda + DLE tables as measurement tables")] = False,
        data: Annotated[Path | None, typer.Option("--data", help="folder of the published tables")] = None,
        measurements: Annotated[Path | None, typer.Option(
            "--measurements",
            help="a measurement table (CSV, Parquet, JSON lines; docs/validation.md) to predict")] = None,
        fit_on: Annotated[str | None, typer.Option(
            "--fit-on", help="SQL condition selecting the rows that fit the efficiencies, e.g. \"gpus = 1 AND "
            "gpu = 'V100-SXM2-16GB'\"; the other rows are the test set")] = None,
        cross_validate: Annotated[str | None, typer.Option(
            "--cross-validate", help="leave one group out: gpu, model, testbed or a column of the table")] = None,
        fmt: FormatOpt = "table",
        report: Annotated[Path | None, typer.Option(
            "--report", help="also write an HTML report folder here (a new or empty folder, or an earlier "
            "report's)")] = None,
        overwrite: OverwriteOpt = False,
    ) -> None:
        """Train zoo models for real on this machine (one process, and DDP over gloo) and compare the
        measured step, compute-bound, memory-bound and communication times with the model's prediction
        on the calibrated profile; or, with --published, predict the published tables (Pollux, NVIDIA
        DeepLearningExamples ResNet-50, Lambda's 1-8 GPU benchmarks).
        """
        expected_one_of(fmt, FORMATS)  # before any training or calibration
        if report is not None:
            from ddlscope.report.outdir import check_report_dir

            check_report_dir(report, "--report", overwrite)
        REPORT["dir"] = report
        if measurements is not None and published:
            raise ValueError("--measurements and --published: give one (--published reads the shared tables)")
        if measurements is not None:
            _measurements(measurements, fit_on, cross_validate, fmt)
            return
        if (fit_on or cross_validate) and not published:
            raise ValueError("--fit-on and --cross-validate go with --measurements FILE or --published")
        if published:
            folder = published_data_dir(data)
            if fit_on or cross_validate:
                _published_measurements(folder, fit_on, cross_validate, fmt)
            else:
                _published(folder, fmt)
                if fmt == "table":  # the Lambda + DLE tables at the catalog defaults (nothing fitted)
                    _published_measurements(folder, None, None, fmt)
            return
        from ddlscope.calibrate.profile_file import load_calibration
        from ddlscope.validate.local import check_options, validate_local
        from ddlscope.validate.models import CASES

        cases = tuple(model or CASES)
        check_options(cases, steps=steps, warmup=warmup, clock=clock, ranks=processes,
                      data_parallel=not no_ddp)  # before a calibration or a training run

        load_before = os.getloadavg()[0]
        path = system_file or (DEFAULT_OUT if DEFAULT_OUT.is_file() else None)
        with StageProgress(quiet=fmt != "table") as view:
            if path is None:
                from ddlscope.calibrate.api import CalibrationPlan, run_calibration

                cal = run_calibration(CalibrationPlan.quick(), progress=view.update)
                source = "a quick calibration (no --system-file)"
            else:
                cal = load_calibration(path)
                source = str(path)
            frame = validate_local(cal, cases, ranks=processes, steps=steps, warmup=warmup,
                                   data_parallel=not no_ddp, clock=clock, progress=view.update)
        step = frame.filter(pl.col("component") == "step")
        _write_report(frame, step.group_by("architecture", maintain_order=True).agg(
            runs=pl.len(), median_abs_error=pl.col("error").abs().median(),
            mean_abs_error=pl.col("error").abs().mean()),
            f"Validation on this machine: measured vs predicted ({cal.system.name}, profile {source})",
            measured="measured_s", predicted="predicted_s", group="component", unit="seconds per step")
        median = float(step["error"].abs().median())
        extra = {
            "calibrated profile": source,
            "median |error| of step time": median,
            "mean |error| of step time": float(step["error"].abs().mean()),
            "load average (1 min) before / after": f"{load_before:.2f} / {os.getloadavg()[0]:.2f}",
        }
        if fmt == "table":
            emit(frame.select("model", "architecture", "processes", "component", "clock", "measured_s",
                              "predicted_s", "error"), "table",
                 title=f"Validation on this machine: measured vs predicted ({cal.system.name})",
                 caption="error = predicted / measured - 1; other = the step outside ATen operators (no model "
                 "term); clock cpu = CPU time (see docs/validation.md)", extra=extra)
        else:
            emit(frame, fmt, extra=extra if fmt == "json" else None)
