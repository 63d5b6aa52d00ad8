"""Real training steps on this machine, measured, against the model's prediction on the calibrated
profile.

For each :class:`~ddlscope.validate.models.ValidationCase`:

- **single process** (``1w1g``): the model trains with SGD (momentum 0.9, weight decay 1e-4, as
  ``ddlscope profile`` traces it) on ``cores_per_device`` threads; after ``warmup`` steps the
  median of ``steps`` step times is the measured step. One more step runs under
  ``torch.profiler``: the self time of matmul/convolution-class operators as a fraction of that
  step's wall time, times the measured step, is the measured compute-bound time; the same for the
  other ATen operators gives the memory-bound time (fractions remove the profiler's own overhead
  and a loaded host's interruptions alike); the rest of the step (Python, autograd engine,
  optimizer loop) is ``other``, which the model has no term for.
- **data parallel** (``allreduce_local``): ``ranks`` processes with DistributedDataParallel over
  gloo (default 25 MiB buckets, the first 1 MiB), one device's cores each. The median step
  (default all-reduce hook, as users run DDP) is the measured step. Then a communication hook that
  all-reduces each bucket synchronously and times it runs a few more steps: the sum of its bucket
  times per step is the measured communication. The slowest rank's figures are reported.

The typical step (one rule, :func:`typical_s`, applied to every measured time here): ``warmup``
untimed steps first (allocator growth, oneDNN primitive creation, DDP's bucket rebuild on its first
iterations), then the **median** of the ``steps`` timed ones; for DDP the slowest rank's median (a
synchronous step waits for the last rank), and the timed hook's first step is a warm-up too. The
median, not the mean: the steps repeat identical work, so their spread is the host's interference,
which only adds time and comes in bursts (a neighbour's process holding the core for a few
milliseconds); the median ignores a minority of interrupted steps that would pull the mean up, and
it is the statistic the calibration used for the rates the prediction is built from
(:func:`ddlscope.calibrate.microbench.time_call`), so measurement and prediction describe the same
typical step.

Clocks: ``wall`` is real time. ``cpu`` (the default for one-core devices) is CPU time: the
training thread's for one process, the process's (all threads, gloo's included) for DDP. On a host
where other processes compete for the cores, wall time measures the competition; CPU time measures
what the device did, which is what the model predicts (on a quiet host the two agree). The
communication of the timed hook is wall time on either clock (the link works while the CPU waits),
as the collective benchmark that calibrated the link measured it.

Prediction: the workload of ``profile_model`` on the same factory and batch (dense embedding
gradients, as DDP with ``sparse=False`` has), with no input copy or storage read (the batch is in
memory, as here) and, for DDP, ``num_gradient_tensors`` = DDP's bucket count
``1 + ceil(max(S - 1 MiB, 0) / 25 MiB)`` for ``S`` gradient bytes (PyTorch DDP documentation,
``bucket_cap_mb``; ``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``; :mod:`ddlscope.validate.ddp`).
The system is the calibrated profile with the op-mix efficiencies of the workload
(:mod:`ddlscope.calibrate.opmix`); overlap ``none`` (each process has one core: gloo's
communication threads compete with the backward for it).
"""

from __future__ import annotations

import contextlib
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import polars as pl
import torch

from ddlscope.calibrate.collbench import _free_port
from ddlscope.calibrate.microbench import CLOCKS
from ddlscope.calibrate.opmix import opmix_efficiency
from ddlscope.calibrate.profile_file import Calibration
from ddlscope.model.api import predict
from ddlscope.profile import profile_model
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.system import Efficiency
from ddlscope.validate.ddp import ddp_buckets
from ddlscope.validate.models import CASES, ValidationCase, call_model, real_batch

COMPUTE_EVENT = re.compile(
    r"^aten::(?:mkldnn_convolution|convolution_backward|_?convolution|conv\d?d|(?:_mkldnn_)?mm|addmm|bmm|baddbmm|"
    r"matmul|linear|_scaled_dot_product\w*attention\w*|einsum|addbmm|addmv|mv|dot|vdot|"
    r"mkldnn_\w*(?:convolution|linear|matmul)\w*)$"
)
"""Profiler events counted as compute-bound: the matmul/convolution-class kernels (the PAI split
of :data:`ddlscope.profile.costs.COMPUTE_BOUND_OPS`, by their CPU operator names)."""

VALIDATION_COLUMNS: dict[str, str] = {
    "model": "validation case",
    "architecture": "1w1g (one process) or allreduce_local (DDP over gloo)",
    "processes": "training processes",
    "component": "step, compute_bound, memory_bound, comm, other",
    "clock": "the clock of measured_s: cpu (CPU time, one-core devices) or wall; comm rows are always wall",
    "measured_s": "measured seconds per step (null where not measured)",
    "predicted_s": "the model's seconds per step (null: the model has no such term)",
    "error": "predicted / measured - 1",
}


HOOK_WARMUP_STEPS = 1
"""Steps of the timed communication hook discarded before its times count (:func:`typical_s`)."""


def typical_s(samples: Sequence[float]) -> float:
    """The typical value of repeated timings of the same work, in their unit (seconds): their median
    (module docstring: the rule and its reason). Warm-up repetitions are excluded by the caller
    (:func:`timed_steps`).

    Raises:
        ValueError: no samples.
    """
    if len(samples) == 0:
        raise ValueError("typical_s: no timed steps (expected steps >= 1)")
    return float(statistics.median(samples))


def timed_steps(run_step: Callable[[], object], now: Callable[[], float], *, steps: int, warmup: int,
                after_warmup: Callable[[], object] | None = None,
                on_step: Callable[[], object] | None = None) -> list[float]:
    """Run ``run_step`` ``warmup`` times untimed, call ``after_warmup`` (DDP: a barrier, so ranks
    start together), then ``steps`` times timed on the clock ``now``; the ``steps`` durations
    (seconds, ``now``'s clock). :func:`typical_s` of the result is the measured step. ``on_step``
    is called after every step, warm-up ones included (a progress bar), outside the timed span.

    Raises:
        ValueError: ``steps < 1`` or ``warmup < 0``.
    """
    check_steps(steps, warmup)
    for _ in range(warmup):
        run_step()
        if on_step is not None:
            on_step()
    if after_warmup is not None:
        after_warmup()
    times = []
    for _ in range(steps):
        t0 = now()
        run_step()
        times.append(now() - t0)
        if on_step is not None:
            on_step()
    return times


PROFILER_LOG = re.compile(r"^(?:USDT|STAGE|ERROR|WARNING|INFO):\d{4}-\d\d-\d\d [\d:.]+ \d+:\d+ \w+\.cpp:\d+\]")
"""A line the PyTorch profiler's native library (Kineto) writes to file descriptor 2 itself
(``USDT:2026-12-02 10:00:51 6142:6142 SyncActivityProfilerHandler.cpp:52] profiler_start``);
``KINETO_LOG_LEVEL`` does not silence the ``USDT`` ones (torch 2.13)."""


@contextlib.contextmanager
def profiler_logs_kept_out() -> Iterator[None]:
    """Run the block with file descriptor 2 captured; afterwards every captured line that is not
    one of the profiler's own log lines (:data:`PROFILER_LOG`) is written to ``sys.stderr``, so a
    real native warning still reaches the user and ``profiler_start`` does not."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().decode(errors="replace").splitlines()
                    if not PROFILER_LOG.match(line)]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")


def check_steps(steps: int, warmup: int) -> None:
    """Check the step counts of a run.

    Raises:
        ValueError: ``steps < 1`` (nothing to time) or ``warmup < 0``, naming the option.
    """
    if steps < 1:
        raise ValueError(f"steps: expected >= 1 timed steps, got {steps}")
    if warmup < 0:
        raise ValueError(f"warmup: expected >= 0 untimed steps, got {warmup}")


def component_clock(component: str, clock: str) -> str:
    """The clock a measured ``component`` is timed on in a run on ``clock``: ``wall`` for ``comm``
    (the timed hook measures wall time on any clock: the link works while the CPU waits), else
    ``clock``."""
    return "wall" if component == "comm" else clock


def _optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, weight_decay=1e-4)


def _train_step(model: torch.nn.Module, batch: Any, opt: torch.optim.Optimizer) -> None:
    loss = call_model(model, batch)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def measure_single(case: ValidationCase, *, threads: int = 1, steps: int = 5, warmup: int = 2,
                   clock: str = "wall", on_step: Callable[[], object] | None = None) -> dict[str, float]:
    """Measure ``case`` in this process (module docstring): ``step_s`` (:func:`typical_s` of
    ``steps`` timed steps after ``warmup``), ``compute_bound_s``, ``memory_bound_s``, ``other_s``
    (seconds per step on ``clock``: ``wall`` or ``cpu``, this thread's CPU time, valid with one
    thread). ``on_step`` is called after each of the ``warmup + steps + 1`` steps (the last one
    profiled); the profiler's own log lines are kept out of stderr (:func:`profiler_logs_kept_out`).

    Raises:
        ValueError: ``steps < 1`` or ``warmup < 0``.
    """
    now = CLOCKS[clock]
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, batch = case.factory(batch_size=case.batch_size)
    batch = real_batch(batch)
    model.train()
    opt = _optimizer(model)
    step = typical_s(timed_steps(lambda: _train_step(model, batch, opt), now, steps=steps, warmup=warmup,
                                 on_step=on_step))
    from torch.profiler import ProfilerActivity, profile

    with profiler_logs_kept_out(), profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        _train_step(model, batch, opt)
        profiled = time.perf_counter() - t0  # wall, as the profiler's op durations
    if on_step is not None:
        on_step()
    compute = memory = 0.0
    for ev in prof.key_averages():
        if not ev.key.startswith("aten::"):
            continue
        self_s = ev.self_cpu_time_total * 1e-6
        if COMPUTE_EVENT.match(ev.key):
            compute += self_s
        else:
            memory += self_s
    scale = step / profiled if profiled > 0 else 1.0
    compute, memory = compute * scale, memory * scale
    return {"step_s": step, "compute_bound_s": compute, "memory_bound_s": memory,
            "other_s": max(step - compute - memory, 0.0)}


def _ddp_worker(rank: int, world: int, port: int, case_name: str, threads: int, steps: int, warmup: int,
                clock: str, queue) -> None:  # pragma: no cover - runs in child processes
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(threads)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    now = time.process_time if clock == "cpu" else time.perf_counter
    try:
        case = CASES[case_name]
        torch.manual_seed(0)
        model, batch = case.factory(batch_size=case.batch_size)
        batch = real_batch(batch, seed=rank)
        ddp = DistributedDataParallel(model)
        opt = _optimizer(ddp)
        def tick() -> None:
            if rank == 0:
                queue.put({"progress": 1})

        times = timed_steps(lambda: _train_step(ddp, batch, opt), now, steps=steps, warmup=warmup,
                            after_warmup=dist.barrier, on_step=tick)
        record: list[tuple[int, float]] = []

        def timed_allreduce(state, bucket):  # unannotated: DDP rejects string annotations
            buf = bucket.buffer()
            t0 = time.perf_counter()  # communication is wall time on any clock: the link works while the CPU waits
            dist.all_reduce(buf)
            record.append((buf.numel() * buf.element_size(), time.perf_counter() - t0))
            buf.div_(world)
            fut: torch.futures.Future = torch.futures.Future()
            fut.set_result(buf)
            return fut

        ddp.register_comm_hook(None, timed_allreduce)
        comm, buckets, bucket_bytes = [], 0, 0
        for i in range(HOOK_WARMUP_STEPS + max(2, steps // 2)):
            record.clear()
            _train_step(ddp, batch, opt)
            tick()
            if i < HOOK_WARMUP_STEPS:
                continue
            comm.append(sum(t for _, t in record))
            buckets, bucket_bytes = len(record), sum(b for b, _ in record)
        # each rank's typical step; the slowest rank's is the step (MAX below)
        step = torch.tensor([typical_s(times), typical_s(comm)])
        dist.all_reduce(step, op=dist.ReduceOp.MAX)
        if rank == 0:
            queue.put({"step_s": float(step[0]), "comm_s": float(step[1]), "buckets": buckets,
                       "bucket_bytes": bucket_bytes})
    except Exception as exc:
        if rank == 0:
            queue.put({"error": f"{type(exc).__name__}: {exc}"})
        raise
    finally:
        dist.destroy_process_group()


def ddp_steps(steps: int, warmup: int) -> int:
    """Training steps one DDP run of :func:`measure_ddp` takes per process: ``warmup + steps``
    with the default hook, then :data:`HOOK_WARMUP_STEPS` ``+ max(2, steps // 2)`` with the timed
    one."""
    return warmup + steps + HOOK_WARMUP_STEPS + max(2, steps // 2)


def measure_ddp(case: ValidationCase, *, ranks: int = 2, threads: int = 1, steps: int = 5, warmup: int = 2,
                clock: str = "wall", timeout_s: float = 600.0,
                on_step: Callable[[], object] | None = None) -> dict[str, float]:
    """Measure ``case`` with DDP on ``ranks`` local processes (module docstring): ``step_s``,
    ``comm_s``, ``buckets``, ``bucket_bytes`` (seconds per step on ``clock``: ``wall``, or ``cpu``:
    each process's CPU time, all its threads; each the slowest rank's :func:`typical_s`).
    ``on_step`` is called after each of rank 0's :func:`ddp_steps` steps.

    Raises:
        ValueError: ``steps < 1`` or ``warmup < 0``.
        RuntimeError: a process failed or timed out.
    """
    import torch.multiprocessing as mp

    check_steps(steps, warmup)
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = _free_port()
    procs = [ctx.Process(target=_ddp_worker, args=(r, ranks, port, case.name, threads, steps, warmup, clock, queue),
                         daemon=True) for r in range(ranks)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            while queue.empty():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"validate {case.name}: DDP run exceeded {timeout_s:.0f} s")
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead and queue.empty():
                    raise RuntimeError(f"validate {case.name}: DDP process exited with code {dead[0].exitcode}")
                time.sleep(0.02)
            out = queue.get()
            if "progress" not in out:
                break
            if on_step is not None:
                on_step()
    finally:
        for p in procs:
            p.join(timeout=20)
            if p.is_alive():
                p.terminate()
    if "error" in out:
        raise RuntimeError(f"validate {case.name}: {out['error']}")
    return out


def predict_case(case: ValidationCase, cal: Calibration, *, ranks: int = 1) -> dict[str, float]:
    """The model's prediction for ``case`` on ``ranks`` processes of the calibrated system
    (module docstring): ``step_s``, ``compute_bound_s``, ``memory_bound_s``, ``comm_s``,
    ``eff_compute``, ``eff_memory``, ``buckets``."""
    prof = profile_model(case.factory, batch_size=case.batch_size, embedding_gradients="dense")
    w = prof.workload
    buckets = ddp_buckets(w.dense_param_bytes)
    w = w.model_copy(update={"name": case.name, "input_bytes": 0.0, "stored_input_bytes": 0.0,
                             "num_gradient_tensors": buckets})
    mix = opmix_efficiency(prof.ops, cal.table("matmul"), cal.table("elementwise"),
                           peak_flop_per_s=cal.peak_flop_per_s[w.precision],
                           memory_bandwidth_bytes_per_s=cal.memory_bandwidth_bytes_per_s, precision=w.precision,
                           conv=cal.table("conv"), families=cal.table("families"),
                           op_overhead_s=float(cal.meta.get("op_overhead_s") or 0.0))
    eff = cal.system.efficiency.model_copy(update={"compute": mix.eff_compute, "memory": mix.eff_memory})
    system = cal.system.model_copy(update={"efficiency": Efficiency.model_validate(eff.model_dump())})
    arch = Architecture(kind="1w1g") if ranks == 1 else Architecture(kind="allreduce_local", num_workers=ranks)
    row = predict(w, arch, system, overlap="none").row(0, named=True)
    return {"step_s": row["step_s"], "compute_bound_s": row["compute_bound_s"],
            "memory_bound_s": row["memory_bound_s"], "comm_s": row["comm_s"], "eff_compute": mix.eff_compute,
            "eff_memory": mix.eff_memory, "buckets": buckets}


def check_options(cases: Sequence[str], *, steps: int, warmup: int, clock: str, ranks: int,
                  data_parallel: bool) -> None:
    """Check what :func:`validate_local` can check without a calibration (the CLI calls it before
    calibrating or training, so a mistake costs no run).

    Raises:
        ValueError: an unknown case, ``steps < 1``, ``warmup < 0``, a clock other than ``auto``,
            ``wall`` or ``cpu``, or fewer than 2 DDP processes; naming the option.
    """
    check_steps(steps, warmup)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise ValueError(f"models: unknown {unknown}; expected some of {', '.join(CASES)}")
    if clock != "auto" and clock not in CLOCKS:
        raise ValueError(f"clock: expected auto, wall or cpu, got {clock!r}")
    if data_parallel and ranks < 2:
        raise ValueError(f"processes: expected >= 2 DDP processes, got {ranks} (or --no-ddp)")


def validate_local(
    cal: Calibration,
    cases: Sequence[str] = tuple(CASES),
    *,
    ranks: int = 2,
    steps: int = 5,
    warmup: int = 2,
    data_parallel: bool = True,
    clock: str = "auto",
    progress: Callable[[str, int, int], None] | None = None,
) -> pl.DataFrame:
    """Measure and predict every case: one row per (model, architecture, component), columns
    :data:`VALIDATION_COLUMNS` plus ``eff_compute``, ``eff_memory``. ``progress(stage, done,
    total)`` is told ``training runs`` (one per model and architecture) and, per run, its steps
    (``MODEL: 1 process, steps``, ``MODEL: DDP x P, steps``).

    Raises:
        ValueError: an unknown case, more ranks than the calibrated host has devices, ``steps < 1``
            or ``warmup < 0``.
        RuntimeError: a DDP run failed.
    """
    check_options(cases, steps=steps, warmup=warmup, clock=clock, ranks=ranks, data_parallel=data_parallel)
    devices = cal.system.gpus_per_server
    if data_parallel and not 2 <= ranks <= devices:
        raise ValueError(f"processes: expected 2..{devices} (the calibrated host's devices), got {ranks}")
    threads = int(cal.meta.get("cores_per_device", 1))
    if clock == "auto":
        clock = "cpu" if threads == 1 and cal.meta.get("device_kind", "cpu") == "cpu" else "wall"
    if clock == "cpu" and threads != 1:
        raise ValueError("clock: the cpu clock needs one thread per process (a profile of one-core devices)")
    rows: list[dict[str, Any]] = []
    total = len(cases) * (2 if data_parallel else 1)
    done = 0
    def stepper(stage: str, total_steps: int) -> Callable[[], None] | None:
        if progress is None:
            return None
        count = [0]
        progress(stage, 0, total_steps)

        def on_step() -> None:
            count[0] += 1
            progress(stage, count[0], total_steps)

        return on_step

    for name in cases:
        case = CASES[name]
        pred = predict_case(case, cal)
        meas = measure_single(case, threads=threads, steps=steps, warmup=warmup, clock=clock,
                              on_step=stepper(f"{name}: 1 process, steps", warmup + steps + 1))
        extra = {"eff_compute": pred["eff_compute"], "eff_memory": pred["eff_memory"]}
        for comp in ("step", "compute_bound", "memory_bound", "other"):
            p = pred.get(f"{comp}_s")
            rows.append({"model": name, "architecture": "1w1g", "processes": 1, "component": comp, "clock": clock,
                         "measured_s": meas[f"{comp}_s"], "predicted_s": p, **extra})
        done += 1
        if progress:
            progress("training runs", done, total)
        if data_parallel:
            pred = predict_case(case, cal, ranks=ranks)
            meas = measure_ddp(case, ranks=ranks, threads=threads, steps=steps, warmup=warmup, clock=clock,
                               on_step=stepper(f"{name}: DDP x {ranks}, steps", ddp_steps(steps, warmup)))
            for comp in ("step", "comm"):
                rows.append({"model": name, "architecture": "allreduce_local", "processes": ranks, "component": comp,
                             "clock": component_clock(comp, clock),
                             "measured_s": meas[f"{comp}_s"], "predicted_s": pred[f"{comp}_s"], **extra})
            done += 1
            if progress:
                progress("training runs", done, total)
    frame = pl.DataFrame(rows, schema={
        "model": pl.String, "architecture": pl.String, "processes": pl.Int64, "component": pl.String,
        "clock": pl.String, "measured_s": pl.Float64, "predicted_s": pl.Float64, "eff_compute": pl.Float64,
        "eff_memory": pl.Float64})
    return frame.with_columns(error=pl.col("predicted_s") / pl.col("measured_s") - 1)
