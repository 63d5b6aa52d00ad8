"""The measured breakdown against the step-time model: what-if from a measured baseline, and the
model check.

**Hardware.** The GPU comes from the trace's ``deviceProperties`` (matched to the catalog by its
aliases, e.g. "NVIDIA A100-PG509-200" -> A100-SXM4-40GB), the server from ``--system`` or, by
default, the usual server of that GPU (:data:`DEFAULT_SERVER_FOR_GPU`); the architecture from the
job: one rank is ``1w1g``; all-to-all collectives make it ``pearl`` (embeddings exchanged, dense
part all-reduced); otherwise ring all-reduce, ``allreduce_local`` when the ranks fit one server,
else ``allreduce_cluster``.

**What-if** (:func:`whatif_from_trace`). Each iteration of each rank becomes a row of the Jobs
table whose workload is *calibrated* so that the model reproduces the measured component times:
``compute_bound_flops = compute-bound busy time x peak[precision] x eff_compute``,
``memory_bound_bytes = (memory-bound + device-copy busy time) x memory bandwidth x eff_memory``,
``input_bytes`` = the measured host-to-device bytes, and the communication from the measured
message sizes: ``dense_param_bytes`` = all-reduce bytes (+ half the bytes of reduce-scatter,
all-gather, broadcast, reduce and send/recv: a reduce-scatter plus an all-gather of ``S`` cost one
all-reduce of ``S``, and a broadcast about half of one), ``num_gradient_tensors`` = those calls,
``sparse_bytes_per_step`` = half the all-to-all bytes (the model's ``pearl`` moves ``2 E`` through
two all-to-alls). Where message sizes are unknown the dense bytes are solved for so that the
model's communication time equals the measured one. The scenarios are applied with
:func:`ddlscope.model.scenarios.whatif` (the same code as ``ddlscope whatif``), and every measured
component is multiplied by the model's ratio scenario / baseline for it:

    K' = compute_bound x r_compute + memory_bound x r_memory + unclassified
    C' = comm_busy x r_comm;   hidden' = min(f' C', K');   exposed' = C' - hidden'
    step' = K' + device_copy x r_memory + data_io x r_io + exposed' + idle

with the exclusive component times of the measured breakdown, ``f`` = measured overlapped /
busy communication (replaced when the scenario sets an overlap policy), and idle time and
unclassified kernels unchanged (host-side delays do not change with the hardware; unknown kernels
are not rescaled). At the baseline every ratio is 1 and ``step' = window`` exactly.

**Model check** (:func:`model_check`). The model's prediction from what the trace says about the
*workload* (not calibrated): FLOPs of the operators with recorded shapes
(:mod:`ddlscope.measure.flops`), host-to-device bytes, collective message sizes, on the trace's
hardware with the default efficiencies, beside the measured times of the same work: the compute-
bound kernels those operators launched, the data I/O busy time, the communication busy time.

The **exposed communication** check (issue 15) tests the overlap model on its own: the scheduled
overlap of :mod:`ddlscope.model.overlap` (DDP buckets of the measured message bytes queued behind
the backward, the last bucket exposed, the wait for the slowest rank) with the communication
priced from the message sizes and the compute window set to the rank's *measured* GPU compute
(compute-bound + memory-bound busy time, the backward its ``backward_fraction``), beside the
measured exposed communication (busy minus overlapped). Two predictions: with the model's own wait
for the slowest rank (``sigma sqrt(2 ln p) x compute``), and, where the trace holds several ranks,
with the measured wait instead: the slowest rank's own time (step minus exposed communication)
minus this rank's, the time this rank's collectives spend waiting for it. A collective kernel's
time includes that wait (NCCL's kernels spin until the peers arrive), which is why the
communication busy time of a trace is usually far above the transfer time the links explain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from ddlscope.measure.rules import DEFAULT_PRECISION
from ddlscope.model.jobs import JOB_SCHEMA, job_row, jobs_frame
from ddlscope.model.overlap import BACKWARD_FRACTION, BUCKET_BYTES, FIRST_BUCKET_BYTES, bucket_count
from ddlscope.model.scenarios import whatif
from ddlscope.model.step_time import breakdown
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import Catalog, CatalogError
from ddlscope.specs.scenario import Scenario
from ddlscope.specs.system import System
from ddlscope.specs.traits import collective_data_parallel_kind
from ddlscope.specs.workload import Workload

c = pl.col

DEFAULT_SERVER_FOR_GPU: dict[str, str] = {
    "V100-SXM2-16GB": "pai-v100-nvlink-8",
    "V100-SXM2-32GB": "dgx-1v",
    "V100-PCIE-16GB": "pai-v100-pcie-8",
    "V100-PCIE-32GB": "pai-v100-pcie-8",
    "A100-SXM4-40GB": "dgx-a100",
    "A100-SXM4-80GB": "dgx-a100",
    "H100-SXM5-80GB": "dgx-h100",
    "H200-SXM-141GB": "hgx-h200",
    "T4": "t4-pcie-8",
}
"""The server a traced GPU is assumed to sit in when ``--system`` is not given (the catalog's
server built around that GPU). Other GPUs are placed in ``pai-v100-pcie-8`` (a PCIe server without
NVLink) with the GPU swapped: an assumption the output states."""
FALLBACK_SERVER = "pai-v100-pcie-8"


@dataclass
class TraceHardware:
    """The hardware a trace ran on, as far as the trace and the user say.

    Attributes:
        system: the resolved System (None when the GPU is unknown).
        architecture: the inferred Architecture.
        gpu_reported: the GPU name in ``deviceProperties`` (None if absent).
        notes: how each part was chosen.
    """

    system: System | None
    architecture: Architecture
    gpu_reported: str | None
    notes: list[str]


def trace_hardware(
    devices: list[dict],
    device_id: int | None,
    world_size: int,
    has_all_to_all: bool,
    catalog: Catalog,
    *,
    server: str | None = None,
    gpu: str | None = None,
) -> TraceHardware:
    """Resolve the hardware and architecture of a traced job (see the module docstring).

    Args:
        devices: ``deviceProperties`` of one rank's trace.
        device_id: the device its kernels ran on.
        world_size: ranks of the job.
        has_all_to_all: whether the job runs all-to-all collectives.
        server, gpu: user overrides (catalog names).

    Raises:
        CatalogError: an unknown ``server`` or ``gpu`` override.
    """
    notes: list[str] = []
    reported = None
    for d in devices:
        if d.get("id") == device_id and d.get("name"):
            reported = str(d["name"])
    if reported is None and devices and devices[0].get("name"):
        reported = str(devices[0]["name"])
    gpu_name = gpu
    if gpu_name is None and reported is not None:
        try:
            gpu_name = catalog.gpu(reported).name
            notes.append(f"GPU: {reported!r} from the trace's deviceProperties = catalog {gpu_name}")
        except CatalogError:
            notes.append(f"GPU: {reported!r} is not in the catalog; add it with --catalog or pass --gpu")
    elif gpu_name is not None:
        gpu_name = catalog.gpu(gpu_name).name
        notes.append(f"GPU: {gpu_name} (--gpu)")
    else:
        notes.append("GPU: the trace has no deviceProperties; pass --gpu for the what-if and model check")
    system = None
    if gpu_name is not None:
        if server is None:
            server = DEFAULT_SERVER_FOR_GPU.get(gpu_name, FALLBACK_SERVER)
            notes.append(f"server: {server} assumed for a {gpu_name} (pass --system to change)")
        else:
            notes.append(f"server: {server} (--system)")
        system = catalog.system(server, gpu=gpu_name)
    per_server = system.gpus_per_server if system else 8
    p = max(world_size, 1)
    kind = collective_data_parallel_kind(p, per_server, has_all_to_all)
    arch = Architecture(kind=kind) if kind == "1w1g" else Architecture(kind=kind, num_workers=p, gpus_per_worker=1)
    notes.append(f"architecture: {arch.kind} with {p} GPU(s) "
                 f"({'all-to-all collectives seen' if has_all_to_all else 'no all-to-all'}; world size {world_size})")
    return TraceHardware(system=system, architecture=arch, gpu_reported=reported, notes=notes)


def dominant_precision(gpu: pl.DataFrame) -> str:
    """The precision with the most compute-bound kernel time (``fp32`` without compute-bound kernels)."""
    cb = gpu.filter(c("class") == "compute_bound")
    if cb.is_empty():
        return DEFAULT_PRECISION
    return cb.group_by("precision").agg(c("dur_ns").sum()).sort("dur_ns", descending=True)["precision"][0]


def _peak(precision: pl.Expr) -> pl.Expr:
    return (
        pl.when(precision == "fp32").then(c("gpu_peak_fp32_flop_per_s"))
        .when(precision == "tf32").then(c("gpu_peak_tf32_flop_per_s"))
        .when(precision == "fp16").then(c("gpu_peak_fp16_flop_per_s"))
        .otherwise(c("gpu_peak_bf16_flop_per_s"))
    )


def comm_demand(calls: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, device, iteration): the model's communication inputs from the collective calls.

    Returns ``dense_bytes`` (all-reduce bytes + half of the other non-all-to-all collectives'
    bytes), ``messages`` (those calls), ``sparse_bytes`` (half the all-to-all bytes), ``unknown_calls``
    (calls without a message size), ``unknown_messages`` (those of them counted in ``messages``),
    ``comm_calls``, ``sized_time_s`` and ``calls_time_s`` (summed call time of the calls with a
    message size and of all calls, seconds).
    """
    a2a = c("collective") == "all_to_all"
    ar = c("collective") == "all_reduce"
    size = c("size_bytes")
    return calls.filter(c("iteration").is_not_null()).group_by("rank", "device", "iteration").agg(
        dense_bytes=(size.filter(ar).sum() + 0.5 * size.filter(~ar & ~a2a).sum()),
        messages=(~a2a).sum(),
        sparse_bytes=0.5 * size.filter(a2a).sum(),
        unknown_calls=size.is_null().sum(),
        unknown_messages=(~a2a & size.is_null()).sum(),
        comm_calls=pl.len(),
        sized_time_s=c("time_us").filter(size.is_not_null()).sum() / 1e6,
        calls_time_s=c("time_us").sum() / 1e6,
    )


def _base_jobs(measured: pl.DataFrame, hw: TraceHardware, precision: str) -> pl.DataFrame:
    """A Jobs row per measured row: the hardware columns from ``hw``, workload columns placeholders."""
    # placeholder demand: every workload column is overwritten per measured row
    dummy = Workload(name="trace", batch_size=1, precision=precision, compute_bound_flops=1.0, memory_bound_bytes=0.0)
    base = jobs_frame([job_row(dummy, hw.architecture, hw.system)])
    return measured.with_row_index("job_id").with_columns(c("job_id").cast(pl.Int64)).join(
        base.drop("job_id"), how="cross")


def _set(frame: pl.DataFrame, **cols: pl.Expr) -> pl.DataFrame:
    """Overwrite Jobs columns, cast to their :data:`JOB_SCHEMA` dtypes."""
    return frame.with_columns(**{k: v.cast(JOB_SCHEMA[k][0]) for k, v in cols.items()})


def _solve_dense(jobs: pl.DataFrame, target_s: pl.Expr) -> tuple[pl.DataFrame, pl.Expr]:
    """The dense bytes making the model's ``comm_s`` equal ``target_s`` per row: a frame of per-job
    slope and intercept to join, and the expression solving for the bytes (the model's communication
    time is linear in the bytes for fixed messages; evaluated at 1 GB and 2 GB)."""
    one, two = (breakdown(_set(jobs, dense_param_bytes=pl.lit(v))).select("job_id", "comm_s") for v in (1e9, 2e9))
    slope = (two["comm_s"] - one["comm_s"]) / 1e9
    intercept = one["comm_s"] - slope * 1e9
    solved = pl.DataFrame({"job_id": one["job_id"], "_slope": slope, "_intercept": intercept})
    return solved, pl.max_horizontal((target_s - c("_intercept")) / c("_slope"), pl.lit(0.0))


def calibrated_jobs(measured: pl.DataFrame, hw: TraceHardware, precision: str) -> pl.DataFrame:
    """The Jobs table of the measured baseline (one row per rank x iteration; see module docstring).

    Args:
        measured: per (rank, device, iteration) in seconds: ``compute_bound_busy_s``,
            ``memory_busy_s`` (memory-bound + device copies), ``h2d_bytes``, ``comm_busy_s``,
            ``comm_overlap_fraction``, and the :func:`comm_demand` columns.
        hw: :func:`trace_hardware` with a system.
    """
    need = ["compute_bound_busy_s", "memory_busy_s", "h2d_bytes", "comm_busy_s", "comm_overlap_fraction",
            "dense_bytes", "messages", "sparse_bytes", "unknown_calls"]
    jobs = _base_jobs(measured.select(need), hw, precision)
    jobs = _set(
        jobs,
        compute_bound_flops=c("compute_bound_busy_s") * _peak(c("precision").cast(pl.String)) * c("eff_compute"),
        memory_bound_bytes=c("memory_busy_s") * c("gpu_memory_bandwidth_bytes_per_s") * c("eff_memory"),
        input_bytes=c("h2d_bytes").fill_null(0.0),
        stored_input_bytes=pl.lit(0.0),
        dense_param_bytes=c("dense_bytes").fill_null(0.0),
        num_gradient_tensors=pl.max_horizontal(c("messages").fill_null(0), pl.lit(1)),
        sparse_bytes_per_step=c("sparse_bytes").fill_null(0.0),
        embedding_table_bytes=c("sparse_bytes").fill_null(0.0),
        overlap_fraction=c("comm_overlap_fraction"),
    )
    unknown = (c("unknown_calls").fill_null(0) > 0) & (c("comm_busy_s") > 0)
    if jobs.select(unknown.any()).item():
        solved, expr = _solve_dense(jobs.with_columns(sparse_bytes_per_step=pl.lit(0.0)), c("comm_busy_s"))
        jobs = jobs.join(solved, on="job_id").with_columns(
            dense_param_bytes=pl.when(unknown).then(expr).otherwise(c("dense_param_bytes")),
            sparse_bytes_per_step=pl.when(unknown).then(0.0).otherwise(c("sparse_bytes_per_step")),
            embedding_table_bytes=pl.when(unknown).then(0.0).otherwise(c("embedding_table_bytes")),
        ).drop("_slope", "_intercept")
    return jobs


def whatif_from_trace(
    measured: pl.DataFrame,
    hw: TraceHardware,
    precision: str,
    scenarios: Sequence[Scenario],
    catalog: Catalog,
) -> pl.DataFrame:
    """Predicted step time of every measured (rank, iteration) under each scenario.

    Args:
        measured: as for :func:`calibrated_jobs`, plus the exclusive times in seconds
            ``window_s, idle_s, compute_bound_s, memory_bound_s, unclassified_s, device_copy_s,
            data_io_s`` and ``comm_busy_s``.

    Returns:
        One row per measured row x (baseline + scenarios): ``rank, device, iteration, scenario,
        scenario_applied``, the ratios ``r_compute, r_memory, r_io, r_comm``, ``overlap_fraction``,
        and the predicted ``compute_s`` (K'), ``comm_s`` (C'), ``exposed_comm_s``,
        ``device_copy_s``, ``data_io_s``, ``idle_s``, ``step_s``, plus ``measured_step_s``.

    Raises:
        ValueError / CatalogError: as :func:`ddlscope.model.scenarios.whatif`.
    """
    jobs = calibrated_jobs(measured, hw, precision)
    out = whatif(jobs, scenarios, catalog)
    ratio = {}
    for name, col in (("r_compute", "compute_bound_s"), ("r_memory", "memory_bound_s"), ("r_io", "h2d_s"),
                      ("r_comm", "comm_s")):
        base = c(col).first().over("job_id")
        ratio[name] = pl.when(base > 0).then(c(col) / base).otherwise(1.0)
    m = measured.with_row_index("job_id").with_columns(c("job_id").cast(pl.Int64)).select(
        "job_id", "rank", "device", "iteration",
        m_window="window_s", m_idle="idle_s", m_cb="compute_bound_s", m_mb="memory_bound_s",
        m_un="unclassified_s", m_dc="device_copy_s", m_io="data_io_s", m_comm="comm_busy_s")
    pred = (
        out.select("job_id", c("scenario").cast(pl.String), "scenario_applied", "overlap_fraction", **ratio)
        .join(m, on="job_id")
        .with_columns(
            compute_s=c("m_cb") * c("r_compute") + c("m_mb") * c("r_memory") + c("m_un"),
            comm_s=c("m_comm") * c("r_comm"),
            device_copy_s=c("m_dc") * c("r_memory"),
            data_io_s=c("m_io") * c("r_io"),
            idle_s=c("m_idle"),
        )
        .with_columns(
            exposed_comm_s=c("comm_s") - pl.min_horizontal(c("overlap_fraction") * c("comm_s"), c("compute_s")))
        .with_columns(step_s=c("compute_s") + c("device_copy_s") + c("data_io_s") + c("exposed_comm_s") + c("idle_s"))
        .rename({"m_window": "measured_step_s"})
    )
    return pred.select(
        "rank", "device", "iteration", "scenario", "scenario_applied", "r_compute", "r_memory", "r_io", "r_comm",
        "overlap_fraction", "compute_s", "comm_s", "exposed_comm_s", "device_copy_s", "data_io_s", "idle_s", "step_s",
        "measured_step_s",
    ).sort("scenario", "rank", "device", "iteration", maintain_order=True)


def whatif_summary(pred: pl.DataFrame, scenarios: Sequence[Scenario]) -> pl.DataFrame:
    """One row per scenario: ``scenario, applied`` (to any row), ``description``,
    ``measured_step_ms`` and ``predicted_step_ms`` (means over ranks x iterations),
    ``speedup`` (sum of measured / sum of predicted), and the predicted means ``compute_ms``,
    ``exposed_comm_ms``, ``data_io_ms``, ``idle_ms``."""
    desc = {"baseline": "the measured breakdown", **{s.name: s.description for s in scenarios}}
    order = list(desc)
    return (
        pred.group_by("scenario", maintain_order=True).agg(
            applied=c("scenario_applied").any(),
            measured_step_ms=c("measured_step_s").mean() * 1e3,
            predicted_step_ms=c("step_s").mean() * 1e3,
            speedup=c("measured_step_s").sum() / c("step_s").sum(),
            compute_ms=c("compute_s").mean() * 1e3,
            exposed_comm_ms=c("exposed_comm_s").mean() * 1e3,
            data_io_ms=c("data_io_s").mean() * 1e3,
            idle_ms=c("idle_s").mean() * 1e3,
        )
        .with_columns(description=c("scenario").replace_strict(desc, default=""),
                      _o=c("scenario").replace_strict({n: i for i, n in enumerate(order)}, default=len(order)))
        .sort("_o").drop("_o")
        .select("scenario", "applied", "description", "measured_step_ms", "predicted_step_ms", "speedup",
                "compute_ms", "exposed_comm_ms", "data_io_ms", "idle_ms")
    )


def _exposed_check(jobs: pl.DataFrame) -> pl.DataFrame:
    """The exposed-communication rows of :func:`model_check` (module docstring): per rank, structs
    ``component, measured_us, predicted_us, basis`` named ``d`` (the model's wait) and, with
    several ranks, ``e`` (the measured wait)."""
    sched = _set(
        jobs,
        compute_bound_flops=c("compute_busy_s") * _peak(c("precision")) * c("eff_compute"),
        memory_bound_bytes=pl.lit(0.0), memory_bound_flops=pl.lit(0.0),
        overlap_fraction=pl.lit(None, pl.Float64),
    )
    out = breakdown(sched).with_columns(
        _buckets=bucket_count(c("dense_param_bytes").cast(pl.Float64), pl.lit(float(BUCKET_BYTES)),
                              pl.lit(float(FIRST_BUCKET_BYTES))),
        _measured_wait=c("own_s").max() - c("own_s"),
    )
    some_unknown = c("unknown_calls") > 0
    sized = (c("messages") - c("unknown_messages") > 0) | (c("sparse_bytes") > 0)
    measured = pl.when(some_unknown).then(c("comm_exposed_s") * c("sized_share")).otherwise(c("comm_exposed_s"))
    basis = pl.format("scheduled overlap: {} MB dense in {} bucket(s) behind the measured backward ({} x {} ms "
                      "of GPU compute), {} MB all-to-all exposed whole",
                      (c("dense_param_bytes") / 1e6).round(3), c("_buckets").cast(pl.Int64),
                      pl.lit(round(BACKWARD_FRACTION, 3)), (c("compute_busy_s") * 1e3).round_sig_figs(4),
                      (2 * c("sparse_bytes_per_step") / 1e6).round(3))
    cols = [
        "rank",
        pl.struct(component=pl.lit("exposed_communication"), measured_us=measured * 1e6,
                  predicted_us=pl.when(sized).then(c("exposed_comm_s") * 1e6),
                  basis=pl.concat_str(basis, pl.format(
                      "; the model's wait for the slowest of {} ranks {} ms", c("num_gpus"),
                      (c("sync_wait_s") * 1e3).round_sig_figs(3)))).alias("d"),
    ]
    if jobs.height > 1:  # the measured wait for the slowest rank replaces the model's
        cols.append(pl.struct(
            component=pl.lit("exposed_communication_measured_wait"), measured_us=measured * 1e6,
            predicted_us=pl.when(sized).then((c("exposed_comm_s") - c("sync_wait_s") + c("_measured_wait")) * 1e6),
            basis=pl.concat_str(basis, pl.format(
                "; the measured wait for the slowest rank (its own time - this rank's) {} ms",
                (c("_measured_wait") * 1e3).round_sig_figs(3)))).alias("e"))
    return out.select(cols)


def model_check(per_rank: pl.DataFrame, hw: TraceHardware, precision: str) -> pl.DataFrame:
    """The model's prediction of each measurable component beside the measurement, per rank.

    Args:
        per_rank: per rank, means per iteration: ``flops`` (counted operators; null without
            shapes), ``covered_compute_s`` (time of the compute-bound kernels those operators
            launched), ``compute_coverage`` (that time over all compute-bound kernel time),
            ``flops_source``, ``h2d_bytes``, ``data_io_busy_s``, ``dense_bytes``, ``messages``,
            ``sparse_bytes``, ``unknown_calls``, ``unknown_messages``, ``comm_calls`` (calls in the
            checked iterations, summed), ``sized_share`` (call time of the calls with a message size
            over all call time), ``comm_busy_s``.

    Optional ``per_rank`` columns (the exposed-communication check, module docstring):
    ``compute_busy_s`` (compute-bound + memory-bound busy time), ``comm_exposed_s`` and ``own_s``
    (step - exposed communication).

    Returns:
        ``rank, component, measured_us, predicted_us, error, basis`` for the components
        ``compute_bound`` (counted FLOPs only), ``data_io`` and ``communication``, and with the
        optional columns ``exposed_communication`` (and ``exposed_communication_measured_wait``
        with more than one rank);
        ``error = predicted / measured - 1``; null predictions where the trace lacks the input
        (the basis says what is missing). Communication compares like with like: where some calls
        have no message size, the prediction covers the calls with one and the measurement is
        their share of the communication busy time (``comm_busy_s x sized_share``); the basis
        says how many calls were left out.
    """
    need = ["rank", "flops", "covered_compute_s", "compute_coverage", "flops_source", "h2d_bytes", "data_io_busy_s",
            "dense_bytes", "messages", "sparse_bytes", "unknown_calls", "unknown_messages", "comm_calls",
            "sized_share", "comm_busy_s"]
    exposed_need = ["compute_busy_s", "comm_exposed_s", "own_s"]
    has_exposed = all(k in per_rank.columns for k in exposed_need)
    jobs = _base_jobs(per_rank.select(need + (exposed_need if has_exposed else [])), hw, precision)
    jobs = _set(
        jobs,
        compute_bound_flops=c("flops").fill_null(0.0),
        memory_bound_bytes=pl.lit(0.0),
        input_bytes=c("h2d_bytes").fill_null(0.0),
        stored_input_bytes=pl.lit(0.0),
        dense_param_bytes=c("dense_bytes").fill_null(0.0),
        num_gradient_tensors=pl.max_horizontal((c("messages") - c("unknown_messages")).fill_null(0).round(0),
                                               pl.lit(1)),
        sparse_bytes_per_step=c("sparse_bytes").fill_null(0.0),
        embedding_table_bytes=c("sparse_bytes").fill_null(0.0),
        overlap_fraction=pl.lit(0.0),
    )
    out = breakdown(jobs)
    some_unknown = c("unknown_calls") > 0
    sized = (c("messages") - c("unknown_messages") > 0) | (c("sparse_bytes") > 0)
    rows = out.select(
        "rank",
        pl.struct(component=pl.lit("compute_bound"),
                  measured_us=pl.when(c("flops") > 0).then(c("covered_compute_s") * 1e6),
                  predicted_us=pl.when(c("flops") > 0).then(c("compute_bound_s") * 1e6),
                  basis=pl.when(c("flops") > 0).then(
                      pl.format("{} GFLOP per iteration from {} ({}% of compute-bound kernel time; {} peak x "
                                "efficiency {})", (c("flops") / 1e9).round(2), c("flops_source"),
                                (c("compute_coverage") * 100).round(1), pl.lit(precision), c("eff_compute")))
                  .otherwise(pl.lit("no op shapes in the trace (profile with record_shapes=True)"))).alias("a"),
        pl.struct(component=pl.lit("data_io"), measured_us=c("data_io_busy_s") * 1e6,
                  predicted_us=pl.when(c("h2d_bytes") > 0).then(c("h2d_s") * 1e6),
                  basis=pl.format("{} MB host<->device per iteration over {} (efficiency {})",
                                  (c("h2d_bytes") / 1e6).round(3), c("pcie"), c("eff_pcie"))).alias("b"),
        pl.struct(component=pl.lit("communication"),
                  measured_us=pl.when(some_unknown).then(c("comm_busy_s") * c("sized_share"))
                  .otherwise(c("comm_busy_s")) * 1e6,
                  predicted_us=pl.when(sized).then(c("comm_s") * 1e6),
                  basis=pl.when(~sized).then(pl.format("no message sizes in the trace ({} of {} calls)",
                                                       c("unknown_calls"), c("comm_calls")))
                  .otherwise(pl.concat_str(
                      pl.when(some_unknown).then(pl.format(
                          "{} of {} calls ({} without a message size not predicted; measured: the sized calls' "
                          "share of the busy time); ", c("comm_calls") - c("unknown_calls"), c("comm_calls"),
                          c("unknown_calls"))).otherwise(pl.lit("")),
                      pl.format("{} MB dense in {} messages + {} MB all-to-all per iteration, {}: "
                                "NVLink {} / NIC {}", ((c("dense_bytes")) / 1e6).round(3),
                                (c("messages") - c("unknown_messages")).round(1),
                                (2 * c("sparse_bytes") / 1e6).round(3),
                                c("architecture").cast(pl.String), c("nvlink"), c("nic"))))).alias("c"),
    )
    if has_exposed:
        rows = rows.join(_exposed_check(jobs), on="rank", how="left", maintain_order="left")
    long = rows.unpivot(index="rank", value_name="s").unnest("s").drop("variable")
    return long.with_columns(
        error=pl.when((c("measured_us") > 0) & c("predicted_us").is_not_null())
        .then(c("predicted_us") / c("measured_us") - 1.0)
    ).select("rank", "component", "measured_us", "predicted_us", "error", "basis").sort("rank", maintain_order=True)

