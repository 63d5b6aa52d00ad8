"""The Python API of every command: the same analyses the CLI runs, for notebooks and scripts.

==========================  ======================================================  =======================
function                    what it does (the command)                              returns
==========================  ======================================================  =======================
:func:`characterize`        a job population under every what-if (``characterize``)  :class:`CharacterizeResult`
:func:`trace`               measured step breakdown of profiler traces (``trace``)   :class:`TraceResult`
:func:`calibrate`           this host's System profile, nccl-tests fits (``calibrate``) :class:`CalibrateResult`
:func:`validate`            the model against measurements (``validate``)            :class:`ValidateResult`
:func:`predict`             one job's step breakdown (``predict``)                   one-row ``pl.DataFrame``
:func:`whatif`              one job under scenarios (``whatif``)                     ``pl.DataFrame``
:func:`profile`             one training step of a PyTorch model (``profile``)       ``ProfileResult``
:func:`rpc_dissect`         RPC latency of parameter-server logs (``rpc dissect``)   :class:`RpcDissectResult`
==========================  ======================================================  =======================

The RPC analyses also keep their own module API (:mod:`ddlscope.rpc`: ``read_rpc_log``, ``dissect``).
Every result is a frozen dataclass of Polars frames and plain values (tuples, read-only mappings);
the underlying analysis object is kept beside the frames (``.analysis``, ``.characterization``,
``.calibration``, ``.detail``) for what the frames do not show. ``docs/api.md`` has a runnable
example of each (a test runs them).

Imports go one way: this module sits beside the CLI (``cli -> api -> analyses -> core``); the
CLI's ``characterize`` runs :func:`characterize_population` here, so the pipeline exists once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    from ddlscope.calibrate.profile_file import Calibration
    from ddlscope.ingest.report import IngestReport
    from ddlscope.measure.analysis import TraceAnalysis
    from ddlscope.population.characterize import Characterization
    from ddlscope.specs.catalog import Catalog
    from ddlscope.specs.scenario import Scenario

c = pl.col

MODEL_NOTE = (
    "Every formula of the step-time model is a reconstruction of the PAI study's analytical framework (IISWC 2019) "
    "from standard costs (alpha-beta links, ring collectives, roofline); latencies and efficiencies are stated "
    "assumptions until calibrated (ddlscope calibrate)."
)
"""The caveat every characterization carries."""

def _scenarios(items: Sequence[str | Scenario] | None, catalog: Catalog | None) -> list[Scenario]:
    """Scenario objects from built-in names, scenario files or :class:`Scenario` objects (None: every
    built-in), each checked against ``catalog``.

    Raises:
        ValueError: an unknown name or file, a scenario naming unknown hardware.
    """
    from ddlscope.model.scenarios import check_scenarios
    from ddlscope.specs.scenario import BUILTIN_SCENARIOS, Scenario, resolve_scenarios

    if items is None:
        out = list(BUILTIN_SCENARIOS.values())
    else:
        if isinstance(items, str | Scenario):
            items = [items]
        out = []
        for item in items:
            out.extend([item] if isinstance(item, Scenario) else resolve_scenarios([str(item)]))
    if catalog is not None:
        check_scenarios(out, catalog)
    return out


# -- characterize -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class CharacterizeResult:
    """What :func:`characterize` found (the frames of ``ddlscope characterize``'s report).

    Attributes:
        source: the trace paths, or ``built-in population (reconstruction)``.
        population: every job of the population, ``attributed`` and ``reason`` (why not) included.
        accounting: every job of the population by reason (``attributed`` first): ``reason, jobs,
            share_jobs, gpu_time_s, share_gpu_time``.
        per_job: one row per evaluated job: the baseline breakdown (seconds, bytes, shares) plus
            ``speedup_<scenario>`` and ``applied_<scenario>`` per scenario.
        shares: mean share of step time per component, by architecture and weight (``jobs`` or
            ``gpu_time``): ``mean_share_<component>`` in [0, 1].
        speedups: per scenario, architecture and weight: ``applied_share, sped_up_share,
            mean_speedup, median_speedup``.
        headline: the PAI study's three headline figures measured here (fractions and ratios;
            :func:`ddlscope.population.characterize.headline_figures`), read-only.
        notes: caveats and data-quality sentences, each said once.
        malformed: malformed rows per table and problem (empty for the built-in population).
        characterization: the full :class:`~ddlscope.population.characterize.Characterization`
            (``results``: every job x scenario row).
        ingest: the reader's :class:`~ddlscope.ingest.report.IngestReport` (None: built-in population).
    """

    source: str
    population: pl.DataFrame
    accounting: pl.DataFrame
    per_job: pl.DataFrame
    shares: pl.DataFrame
    speedups: pl.DataFrame
    headline: Mapping[str, float | int | None]
    notes: tuple[str, ...]
    malformed: pl.DataFrame
    characterization: Characterization
    ingest: IngestReport | None


def characterize_population(
    trace: Sequence[str | Path] | str | Path | None = None,
    *,
    scenarios: Sequence[str | Scenario] | None = None,
    system: str | None = None,
    server_for: Mapping[str, str] | None = None,
    precision: str = "fp32",
    overlap: str | float = "none",
    keep_unfit: bool = False,
    trace_format: str | None = None,
    mapping: Any = None,
    model_map: Any = None,
    model_mix: Mapping[str, float] | str | None = None,
    fractional_gpus: str = "attribute",
    multi_gpu_instance: str = "allreduce_local",
    server_gpus: int | None = None,
    status: str = "ran",
    catalog: Catalog | None = None,
    progress: Callable[[str], None] | None = None,
    on_profile: Callable[[str, int | None, str], None] | None = None,
) -> CharacterizeResult:
    """The pipeline of ``ddlscope characterize`` without the report: read (or build) the
    population, attach workloads and systems, evaluate every job under the baseline and every
    scenario, aggregate. :func:`characterize` is this plus an optional report folder.

    Args:
        trace: cluster trace files or folders (any reader of :mod:`ddlscope.ingest`); None: the
            built-in population (:mod:`ddlscope.population.builtin`, a reconstruction).
        scenarios: built-in names, scenario files or Scenario objects (None: every built-in).
        system: the server type jobs run on (catalog name; built-in population: instead of its two
            PAI servers); server_for: GPU -> server type for traces.
        precision: precision of the profiled workloads (``fp32``, ``tf32``, ``fp16``, ``bf16``).
        overlap: ``none`` (the PAI study's additive model), ``scheduled``, ``full`` or a fraction.
        keep_unfit: keep jobs whose replica exceeds the GPU memory.
        trace_format, mapping, model_map, model_mix, fractional_gpus, multi_gpu_instance,
            server_gpus, status: as :func:`ddlscope.ingest.read_population` (``status`` its ``statuses``).
        catalog: the hardware catalog (default: built-in).
        progress: told what runs now (``reading the population``, ...); on_profile: told each
            workload profiled ``(model, batch, precision)``.

    Raises:
        ValueError: options for a trace without one, an unknown precision or scenario, a
            population with no job the model can evaluate (the message says why).
        CatalogError: unknown servers or GPUs.
        FileNotFoundError: a trace path that does not exist.
    """
    from ddlscope.ingest.api import read_population
    from ddlscope.ingest.report import reason_summary
    from ddlscope.population.builtin import NOTE as BUILTIN_NOTE
    from ddlscope.population.builtin import builtin_population
    from ddlscope.population.characterize import characterize as run_characterization
    from ddlscope.population.jobs import assemble_jobs
    from ddlscope.population.workloads import WorkloadLibrary
    from ddlscope.specs.catalog import builtin_catalog
    from ddlscope.specs.examples import EXAMPLE_SERVER
    from ddlscope.specs.workload import PRECISIONS

    say = progress or (lambda _text: None)
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {', '.join(PRECISIONS)}, got {precision!r}")
    cat = catalog or builtin_catalog()
    scenario_list = _scenarios(scenarios, cat)
    servers = {cat.gpu(gpu).name: srv for gpu, srv in (server_for or {}).items()}
    for srv in [*servers.values(), *([system] if system else [])]:
        cat.server(srv)
    paths = [trace] if isinstance(trace, str | Path) else list(trace or [])
    notes = [MODEL_NOTE]
    report = None
    say("reading the population")
    if paths:
        population, report = read_population(
            paths, trace_format, mapping, model_map=model_map, model_mix=model_mix,
            fractional_gpus=fractional_gpus,  # type: ignore[arg-type]
            multi_gpu_instance=multi_gpu_instance,  # type: ignore[arg-type]
            server_gpus=server_gpus, catalog=cat, statuses=status)
        notes.extend(report.notes)
        source = ", ".join(str(t) for t in paths)
    else:
        population = builtin_population(servers=(cat.server(system).name,) if system else None)
        notes.insert(0, BUILTIN_NOTE if not system else BUILTIN_NOTE + f" Run here on {system} only.")
        source = "built-in population (reconstruction)" + (f" on {system}" if system else "")
    for col, dtype in (("reason", pl.String), ("batch_size", pl.Int64), ("num_servers", pl.Int64)):
        if col not in population.columns:
            population = population.with_columns(pl.lit(None, dtype).alias(col))
    say("attaching workloads and systems")
    jobs, population = assemble_jobs(population, WorkloadLibrary(on_profile=on_profile), cat,
                                     default_server=system or EXAMPLE_SERVER, server_for=servers,
                                     precision=precision, overlap=overlap)
    if jobs.height == 0:
        hint = report.no_jobs_message() if report is not None and report.no_jobs_message() else None
        raise NoEvaluableJobsError(reason_summary(population), hint or "e.g. give --model-mix for traces without model "
                              "labels")
    say(f"evaluating {jobs.height:,} jobs x {len(scenario_list) + 1} scenarios")
    ch = run_characterization(jobs, scenario_list, cat, notes=notes, require_gpu_memory=not keep_unfit)
    if ch.excluded.height:
        population = population.join(ch.excluded.rename({"reason": "_unfit"}), on="job_id", how="left")
        population = population.with_columns(reason=pl.coalesce("reason", "_unfit")).with_columns(
            attributed=c("reason").is_null()).drop("_unfit")
    accounting = reason_summary(population)
    sources = ch.baseline["gpu_time_source"].value_counts()
    malformed = report.malformed_summary(3) if report is not None and report.malformed.height else None
    if malformed is not None:
        ch.notes.append(f"{report.malformed.height:,} malformed row(s) of the trace are not jobs and were not "
                        "read (file:line examples in the malformed_rows table; ddlscope ingest lists them).")
    say_duration_once(ch.notes, report, sources)
    return CharacterizeResult(
        source=source, population=population, accounting=accounting, per_job=ch.per_job(), shares=ch.shares,
        speedups=ch.speedups,
        headline=MappingProxyType(dict(ch.headline)), notes=tuple(ch.notes),
        malformed=malformed if malformed is not None else pl.DataFrame(
            schema={"table": pl.String, "problem": pl.String, "rows": pl.Int64, "examples": pl.String}),
        characterization=ch, ingest=report)


def say_duration_once(notes: list[str], report: Any, sources: pl.DataFrame) -> None:
    """Say the jobs without a duration once, in ``notes`` (edited in place): the reader's count
    (``report.duration_note()``, removed) and how the evaluated ones are weighed, in one note.

    Args:
        notes: the characterization's notes.
        report: the ingest report (``jobs_without_duration``, ``attributed_jobs_without_duration``,
            ``duration_note()``), or ``None`` for the built-in population.
        sources: ``gpu_time_source, count`` (value counts of the baseline's ``gpu_time_source``).
    """
    weighed: list[str] = []
    for src, n in sources.iter_rows():
        if src == "steps x predicted step time":
            weighed.append(f"{n:,} evaluated job(s) weigh their steps x the predicted baseline step time x "
                           "GPUs in GPU-time-weighted aggregates")
        elif src == "unknown":
            weighed.append(f"{n:,} evaluated job(s) have no steps either: they count in job-weighted "
                           "aggregates and weigh 0 in GPU-time-weighted ones")
    if not weighed:
        return
    reader_note = report.duration_note() if report is not None else None
    if reader_note in notes:
        notes.remove(reader_note)
    lead = (f"{report.jobs_without_duration:,} job(s) have no duration in the trace "
            f"({report.attributed_jobs_without_duration:,} of them attributed)" if report is not None
            else "jobs without a duration")
    notes.append(f"{lead}: " + "; ".join(weighed) + ".")


class NoEvaluableJobsError(ValueError):
    """The population has no job the model can evaluate; ``accounting`` says what became of each."""

    def __init__(self, accounting: pl.DataFrame, hint: str):
        super().__init__(f"the population has no job the model can evaluate (see the accounting; {hint})")
        self.accounting = accounting


def characterize(
    trace: Sequence[str | Path] | str | Path | None = None,
    *,
    scenarios: Sequence[str | Scenario] | None = None,
    report_dir: str | Path | None = None,
    figures: bool = True,
    **options: Any,
) -> CharacterizeResult:
    """Characterize a job population (``ddlscope characterize``): where every job's step time
    goes and what each what-if scenario buys, for every job and on average.

    Args:
        trace: cluster trace files or folders; None: the built-in population.
        scenarios: built-in names, scenario files or Scenario objects (None: every built-in).
        report_dir: also write the HTML report there (a new or empty folder, or an earlier report's).
        figures: draw the report's figures.
        **options: the other keywords of :func:`characterize_population` (``system``,
            ``precision``, ``overlap``, ``model_mix``, ``trace_format``, ``catalog``, ...).

    Returns:
        :class:`CharacterizeResult`.

    Raises:
        ValueError, CatalogError, FileNotFoundError: as :func:`characterize_population`; a
            ``report_dir`` that holds other files.
    """
    if report_dir is not None:
        from ddlscope.report.outdir import check_report_dir

        check_report_dir(Path(report_dir), "report_dir", False)
    result = characterize_population(trace, scenarios=scenarios, **options)
    if report_dir is not None:
        from ddlscope.report.characterize import write_characterization_report
        from ddlscope.report.outdir import clear_previous_report

        out = Path(report_dir)
        clear_previous_report(out)
        write_characterization_report(result.characterization, out, title="ddlscope characterization",
                                      subtitle=result.source, accounting=result.accounting,
                                      malformed=result.malformed if result.malformed.height else None,
                                      extra_summary={"source": result.source}, figures=figures)
    return result


# -- trace --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TraceResult:
    """What :func:`trace` measured (times in microseconds, as the trace's clock).

    Attributes:
        breakdown: one row per (rank, device, iteration): ``window_us`` and its exclusive parts
            ``compute_bound_us, memory_bound_us, unclassified_us, comm_exposed_us, device_copy_us,
            data_io_us, idle_us`` (summing to ``window_us``), ``warmup``, ``in_means``, ...
        steady: the ``breakdown`` rows that count in the means (warm-up left out).
        collectives: per (rank, iteration, collective): calls, bytes, time, ``algbw_gb_s``, ``busbw_gb_s``.
        kernels: per (rank, class, kind): ``kernels``, ``time_us``, ``share``.
        skew: per-rank skew table; whatif: what-if from the measured baseline (None: unknown GPU);
        model_check: the model's prediction beside the measurement (None: unknown GPU).
        notes: what was assumed, inferred or left out.
        analysis: the full :class:`~ddlscope.measure.analysis.TraceAnalysis`.
    """

    breakdown: pl.DataFrame
    steady: pl.DataFrame
    collectives: pl.DataFrame
    kernels: pl.DataFrame
    skew: pl.DataFrame
    whatif: pl.DataFrame | None
    model_check: pl.DataFrame | None
    notes: tuple[str, ...]
    analysis: TraceAnalysis


def trace(
    paths: Sequence[str | Path] | str | Path,
    *,
    scenarios: Sequence[str | Scenario] | None = (),
    system: str | None = None,
    gpu: str | None = None,
    rules: Sequence[str | Path] = (),
    whole_trace: bool = False,
    keep_warmup: bool = False,
    catalog: Catalog | None = None,
    report_dir: str | Path | None = None,
) -> TraceResult:
    """Where each iteration's GPU time goes, measured from PyTorch profiler traces (``ddlscope trace``).

    Args:
        paths: Kineto/Chrome JSON traces (``.json``, ``.json.gz``, archives or folders), one per rank.
        scenarios: what-if scenarios from the measured baseline (``()``: none; None: every built-in).
        system, gpu: catalog names of the hardware (default: the traced GPU's usual server).
        rules: extra classification rule files, tried before the built-in ones.
        whole_trace: ignore iteration markers (one window per rank).
        keep_warmup: keep warm-up iterations in the means.
        catalog: the hardware catalog (default: built-in).
        report_dir: also write the HTML report there.

    Raises:
        TraceReadError: an unreadable or wrong-schema trace (naming the file).
        ValueError: a trace without GPU activities, bad scenarios.
        CatalogError: unknown ``system``/``gpu``.
    """
    from ddlscope.measure.analysis import analyze_traces
    from ddlscope.specs.catalog import builtin_catalog

    cat = catalog or builtin_catalog()
    # names checked up front, as the CLI does, even where the trace alone would not need them
    if system is not None:
        cat.server(system)
    if gpu is not None:
        cat.gpu(gpu)
    if report_dir is not None:
        from ddlscope.report.outdir import check_report_dir

        check_report_dir(Path(report_dir), "report_dir", False)
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    a = analyze_traces(items, rules_files=rules, scenarios=_scenarios(scenarios, cat) if scenarios != () else [],
                       catalog=cat, server=system, gpu=gpu, whole_trace=whole_trace, keep_warmup=keep_warmup)
    from ddlscope.report.trace_notes import trace_notes

    if report_dir is not None:
        from ddlscope.report.outdir import clear_previous_report
        from ddlscope.report.trace_report import write_trace_report
        from ddlscope.report.trace_tables import sections, summary

        clear_previous_report(Path(report_dir))
        write_trace_report(a, Path(report_dir), sections(a, compact=True), summary(a),
                           "ddlscope trace: measured step breakdown")
    return TraceResult(breakdown=a.breakdown, steady=a.steady, collectives=a.collectives, kernels=a.kernels,
                       skew=a.skew, whatif=a.whatif, model_check=a.model_check, notes=tuple(trace_notes(a)), analysis=a)


# -- rpc dissect --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RpcDissectResult:
    """What :func:`rpc_dissect` found (times in microseconds).

    Attributes:
        percentiles: p50/p90/p99/p99.9 of every stage and the latency per grouping (``grouping``,
            ``group``: all, op, server, connection, iteration phase).
        stage_summary: mean stage times and shares of the mean latency, per op.
        tail: per scope, tail level and stage: dominance and share of the tail's excess latency.
        findings, warnings, notes: the sentences the console and the report print
            (:func:`ddlscope.report.rpc_findings.narrate`).
        summary: the JSON summary (``summary.json``), read-only.
        dissection: the full frozen :class:`~ddlscope.rpc.dissect.Dissection` (every table and the
            analyzers' records: ``overview``, ``stage_shares``, ``tail_levels``, ``concurrency_effect``, ...).
    """

    percentiles: pl.DataFrame
    stage_summary: pl.DataFrame
    tail: pl.DataFrame
    findings: tuple[str, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    summary: Mapping[str, Any]
    dissection: Any


def rpc_dissect(
    logs: Sequence[str | Path] | str | Path | pl.DataFrame,
    *,
    column_map: Mapping[str, str] | None = None,
    time_unit: str = "ns",
    input_format: str = "auto",
    report_dir: str | Path | None = None,
) -> RpcDissectResult:
    """Where parameter-server RPC latency goes and what inflates the tail (``ddlscope rpc dissect``).

    Args:
        logs: RPC log file(s) (.csv/.tsv, .parquet, .jsonl, OTLP .json; several form one log), or
            an in-memory RPC table.
        column_map: log column -> schema column (``{"shard": "server_id"}``), for file input.
        time_unit: the unit of the log's timestamps (ns, us, ms, s), for file input.
        input_format: as ``--input-format`` (auto: by file suffix).
        report_dir: also write the HTML report there.

    Raises:
        ValueError: no RPC left after the checks (the rejection counts), bad options (file-input
            options given with a table, a ``logs`` that is neither paths nor a table), the reader's
            errors (missing columns, unreadable files, naming the file).
    """
    from ddlscope.report.rpc_findings import dissection_summary, narrate
    from ddlscope.rpc.dissect import dissect
    from ddlscope.rpc.validate import ColumnMapping

    if report_dir is not None:
        from ddlscope.report.outdir import check_report_dir

        check_report_dir(Path(report_dir), "report_dir", False)
    if isinstance(logs, pl.DataFrame):
        if column_map or time_unit != "ns" or input_format != "auto":
            raise ValueError("column_map, time_unit, input_format: for file input only; an in-memory table "
                             "is already in the RPC schema (ddlscope.rpc.schema), times in ns")
        d = dissect(logs)
    else:
        if logs is None or not isinstance(logs, str | Path | Sequence) or isinstance(logs, bytes):
            raise ValueError(f"logs: expected a path, a list of paths or a polars DataFrame, got "
                             f"{type(logs).__name__}")
        items = [logs] if isinstance(logs, str | Path) else list(logs)
        if not items:
            raise ValueError("logs: expected at least one RPC log file, got an empty list")
        mapping = ColumnMapping.from_pairs([f"{k}={v}" for k, v in (column_map or {}).items()], (),
                                           time_unit=time_unit)
        d = dissect(items, mapping=mapping, input_format=input_format)
    told = narrate(d)
    if report_dir is not None:
        from ddlscope.report.outdir import clear_previous_report
        from ddlscope.report.rpc_dissect import write_dissection_report

        clear_previous_report(Path(report_dir))
        write_dissection_report(d, Path(report_dir), narration=told)
    return RpcDissectResult(percentiles=d.percentiles, stage_summary=d.stage_summary, tail=d.tail,
                            findings=told.findings, warnings=told.warnings, notes=told.notes,
                            summary=MappingProxyType(dissection_summary(d, told)), dissection=d)


# -- calibrate ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CalibrateResult:
    """What :func:`calibrate` measured and fitted.

    Attributes:
        system: the calibrated :class:`~ddlscope.specs.system.System` (``predict(..., system)`` takes it).
        tables: the measured curves by name (``matmul``, ``conv``, ``stream``, ``elementwise``,
            ``collectives``, ...), read-only; empty where not measured.
        fits: the alpha-beta fits, one read-only mapping each (``collective, ranks, steps,
            latency_us`` (alpha), ``bandwidth_gb_s`` (beta, a bus bandwidth), ``rms_rel_residual``,
            ``origin``, ``slot``).
        op_overhead_us: the measured per-ATen-op framework overhead (microseconds; None: not measured).
        calibration: the full :class:`~ddlscope.calibrate.profile_file.Calibration`
            (``write_calibration(result.calibration, path)`` writes the profile file).
    """

    system: Any
    tables: Mapping[str, pl.DataFrame]
    fits: tuple[Mapping[str, Any], ...]
    op_overhead_us: float | None
    calibration: Calibration


def calibrate(
    *,
    bench: bool = True,
    quick: bool = True,
    device: str | None = None,
    collectives: bool = True,
    processes: int | None = None,
    nccl_tests: Sequence[str | Path | tuple[str | Path, str]] = (),
    collective: str | None = None,
    ranks: int | None = None,
    system: str | None = None,
    nic: str = "eth-10g",
    catalog: Catalog | None = None,
    out: str | Path | None = None,
    report_dir: str | Path | None = None,
) -> CalibrateResult:
    """Measure this host and/or fit nccl-tests output into a System profile (``ddlscope calibrate``).

    Args:
        bench: run the micro-benchmarks (False: only apply ``nccl_tests`` fits to ``system``).
        quick: fewer sizes and shorter timings (about 30 s on a CPU).
        device: ``cpu`` or ``cuda`` (None: cuda if present).
        collectives: also time all-reduce/all-gather/all-to-all across ``processes`` local processes.
        nccl_tests: nccl-tests output files, each a path (the link slot: ``nvlink`` if the server
            has NVLink, else ``pcie``) or ``(path, slot)`` with slot ``nvlink``, ``pcie`` or ``nic``.
        collective, ranks: for nccl-tests outputs that do not say.
        system: the catalog server this host is (GPU hosts; required with ``bench=False``).
        nic: the NIC of a CPU host's profile (assumed).
        catalog: the hardware catalog (default: built-in).
        out: also write the profile file (TOML) there.
        report_dir: also write the HTML report there (:mod:`ddlscope.report.calibrate`).

    Raises:
        ValueError: a bad plan, an unreadable nccl-tests file (naming the line), nothing to do; a
            ``report_dir`` holding other files.
        CatalogError: unknown ``system`` or ``nic``.
    """
    from ddlscope.calibrate.api import CalibrationPlan, run_calibration
    from ddlscope.calibrate.nccl_tests import read_nccl_tests
    from ddlscope.calibrate.profile_file import write_calibration
    from ddlscope.specs.catalog import builtin_catalog

    cat = catalog or builtin_catalog()
    _check_report_dir(report_dir)
    plan = None
    if bench:
        import torch

        dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
        kw: dict[str, Any] = {"device": dev, "ranks": processes, "collectives": collectives}
        plan = CalibrationPlan.quick(**kw) if quick else CalibrationPlan(**kw)
    default_slot = "nvlink" if system and cat.server(system).nvlink else "pcie"
    tables = []
    for item in nccl_tests:
        path, slot = (item if isinstance(item, tuple) else (item, default_slot))
        parsed = read_nccl_tests(path, collective=collective, ranks=ranks)
        table, _ = parsed.select(None)
        tables.append((table, slot, f"{path} table {table.index} ({table.collective}, line {table.header_line})"))
    cal = run_calibration(plan, catalog=cat, base_server=system, nic=nic, nccl_tables=tables)
    if out is not None:
        write_calibration(cal, out)
    if report_dir is not None:
        from ddlscope.report.calibrate import write_calibration_report
        from ddlscope.report.outdir import clear_previous_report

        clear_previous_report(Path(report_dir))
        write_calibration_report(cal, Path(report_dir))
    overhead = cal.meta.get("op_overhead_s")
    return CalibrateResult(system=cal.system, tables=MappingProxyType(dict(cal.tables)),
                           fits=tuple(MappingProxyType(dict(f)) for f in cal.fits),
                           op_overhead_us=None if overhead is None else overhead * 1e6, calibration=cal)


# -- validate -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ValidateResult:
    """The model against measurements (:func:`validate`).

    Attributes:
        kind: ``measurements`` (a measurement table), ``published`` (the Pollux and NVIDIA DLE
            tables) or ``local`` (training runs on this machine).
        rows: one row per prediction: the measurement, ``predicted``/``predicted_s`` and ``error``
            (``predicted / measured - 1``).
        summary: error statistics (``mape``, ``median_ape``, ``bias``, ...) per source and role;
            for ``local`` the median and mean |error| of the step time.
        notes: the protocol (what was fitted on which rows) and what was left out.
        detail: the analysis' own result (``MeasurementValidation``, ``PublishedResult``, or None).
    """

    kind: str
    rows: pl.DataFrame
    summary: pl.DataFrame
    notes: tuple[str, ...]
    detail: Any


def validate(
    measurements: str | Path | None = None,
    *,
    published: bool = False,
    data: str | Path | None = None,
    fit_on: str | None = None,
    cross_validate: str | None = None,
    models: Sequence[str] | None = None,
    steps: int = 5,
    warmup: int = 2,
    ddp: bool = True,
    processes: int = 2,
    system_file: str | Path | None = None,
    catalog: Catalog | None = None,
    report_dir: str | Path | None = None,
) -> ValidateResult:
    """Compare the model with measurements (``ddlscope validate``).

    One of three sources:

    - ``measurements``: a measurement table (CSV, Parquet, JSON lines; ``docs/validation.md``), or
      ``"lambda"`` / ``"dle"`` for the shared Lambda and NVIDIA DLE tables; ``fit_on`` (a SQL
      condition) and ``cross_validate`` (a column) as the CLI's options;
    - ``published=True``: the Pollux and NVIDIA DLE tables as the study-style validation;
    - neither: train ``models`` for real on this machine (``steps`` timed after ``warmup``; DDP
      over gloo on ``processes`` when ``ddp``) against the calibrated profile ``system_file``
      (None: a quick calibration first).

    ``data`` is the folder of the shared tables (default: found as the CLI finds it);
    ``report_dir`` also writes the HTML report there (:mod:`ddlscope.report.validation`).

    Raises:
        ValueError: a bad table or condition, an unknown model, bad step counts.
        FileNotFoundError: no shared data folder where one is needed.
    """
    def data_dir() -> Path:
        from ddlscope.shared_data import SEARCHED, find_shared_data

        if data is not None:
            return Path(data)
        found = find_shared_data()
        if found is None:
            raise FileNotFoundError(f"shared data not found (searched {SEARCHED}): give data= or set "
                                    "DDLSCOPE_SHARED_DATA")
        return found

    _check_report_dir(report_dir)
    result = _validate(measurements, published, data_dir, fit_on, cross_validate, models, steps, warmup, ddp,
                       processes, system_file, catalog)
    if report_dir is not None:
        from ddlscope.report.outdir import clear_previous_report
        from ddlscope.report.validation import write_validation_report

        local = result.kind == "local"
        clear_previous_report(Path(report_dir))
        write_validation_report(
            result.rows, result.summary, Path(report_dir), title="ddlscope validate",
            subtitle={"measurements": f"measurement table {measurements}", "published": "published tables (Pollux, "
                      "NVIDIA DLE)", "local": "training runs on this machine"}[result.kind],
            measured="measured_s" if local else "measured", predicted="predicted_s" if local else "predicted",
            group="component" if local else ("source" if "source" in result.rows.columns else None),
            unit="seconds per step" if local else None, notes=result.notes)
    return result


def _check_report_dir(report_dir: str | Path | None) -> None:
    """Check, before any work, that ``report_dir`` can take a report (new, empty, or an earlier one's)."""
    if report_dir is not None:
        from ddlscope.report.outdir import check_report_dir

        check_report_dir(Path(report_dir), "report_dir", False)


def _validate(measurements: str | Path | None, published: bool, data_dir: Callable[[], Path], fit_on: str | None,
              cross_validate: str | None, models: Sequence[str] | None, steps: int, warmup: int, ddp: bool,
              processes: int, system_file: str | Path | None, catalog: Catalog | None) -> ValidateResult:
    """The three sources of :func:`validate`."""
    if measurements is not None:
        from ddlscope.validate.measurements import read_measurements, validate_measurements
        from ddlscope.validate.shared_tables import dle_measurements, lambda_measurements

        named = {"lambda": lambda_measurements, "dle": dle_measurements}
        key = str(measurements).lower()
        table = named[key](data_dir(), catalog) if key in named else read_measurements(measurements, catalog)
        res = validate_measurements(table, fit_on=fit_on, cross_validate=cross_validate, catalog=catalog)
        rejected = f"{res.rejected.height} row(s) of the table rejected (see detail.rejected)"
        return ValidateResult(kind="measurements", rows=res.rows, summary=res.summary,
                              notes=(*res.protocol, rejected) if res.rejected.height else tuple(res.protocol),
                              detail=res)
    if published:
        from ddlscope.validate.published import LEFT_OUT, published_validation

        res = published_validation(data_dir(), catalog)
        notes = tuple(f"skipped rows: {k}: {n}" for k, n in res.skipped.items() if n) + tuple(
            f"left out: {k}: {v}" for k, v in LEFT_OUT.items())
        return ValidateResult(kind="published", rows=res.rows, summary=res.summary, notes=notes, detail=res)
    from ddlscope.calibrate.api import CalibrationPlan, run_calibration
    from ddlscope.calibrate.profile_file import load_calibration
    from ddlscope.validate.local import check_options, validate_local
    from ddlscope.validate.models import CASES

    cases = tuple(models or CASES)
    check_options(cases, steps=steps, warmup=warmup, clock="auto", ranks=processes, data_parallel=ddp)
    cal = load_calibration(system_file) if system_file is not None else run_calibration(CalibrationPlan.quick())
    frame = validate_local(cal, cases, ranks=processes, steps=steps, warmup=warmup, data_parallel=ddp)
    step = frame.filter(c("component") == "step")
    summary = pl.DataFrame({"median_abs_error": [step["error"].abs().median()],
                            "mean_abs_error": [step["error"].abs().mean()], "runs": [step.height]})
    return ValidateResult(kind="local", rows=frame, summary=summary,
                          notes=(f"calibrated profile: {system_file or 'a quick calibration'}",), detail=None)


# -- the one-job and model APIs, re-exported ---------------------------------------------------------
def predict(*args: Any, **kwargs: Any) -> pl.DataFrame:
    """One job's step-time breakdown: :func:`ddlscope.model.api.predict` (a one-row frame)."""
    from ddlscope.model.api import predict as _predict

    return _predict(*args, **kwargs)


def whatif(*args: Any, **kwargs: Any) -> pl.DataFrame:
    """One job under the baseline and each scenario: :func:`ddlscope.model.api.predict_whatif`."""
    from ddlscope.model.api import predict_whatif

    return predict_whatif(*args, **kwargs)


def profile(*args: Any, **kwargs: Any) -> Any:
    """One training step of a PyTorch model: :func:`ddlscope.profile.profile_model`."""
    from ddlscope.profile import profile_model

    return profile_model(*args, **kwargs)
