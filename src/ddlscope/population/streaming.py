"""Characterize a population whose Jobs x Scenarios results do not fit in memory.

:func:`characterize_streaming` evaluates the jobs in chunks of ``chunk_jobs`` rows with the same
per-job code as :func:`~ddlscope.population.characterize.characterize`
(:func:`~ddlscope.population.characterize.prepare_jobs`, :func:`~ddlscope.model.scenarios.whatif_blocks`),
writes each chunk's rows into a Parquet dataset partitioned by scenario
(``<results_dir>/scenario=<name>/part-<chunk>.parquet``, in job order), and computes the
aggregates afterwards from that dataset, one scenario at a time and reading only the columns each
aggregate needs, with the in-memory path's own functions
(:mod:`~ddlscope.population.aggregates`). The aggregates are therefore the in-memory ones --
weighted quantiles included, exactly, since each is taken over the scenario's whole column -- up to
the float summation order of the weighted means (relative 1e-12 in the tests).

Memory: one chunk's results (about ``chunk_jobs x (scenarios + 1)`` rows of
:data:`~ddlscope.population.characterize.RESULT_COLUMNS`) while evaluating, then the few columns
of one scenario (about 40 bytes per job) while aggregating. The input is a Jobs table, or, so that
the wide Jobs table (about 70 columns a job) is never held whole, a :class:`JobChunks`: the job
population (a dozen columns a job) whose Jobs table is assembled slice by slice
(:func:`~ddlscope.population.jobs.assemble_jobs` with the slice's ``first_job_id``) as the chunks
are evaluated; the population's reasons are gathered from the slices (the same ids, reasons and
Jobs rows as one whole-population call: the workload and system look-ups are per distinct key and
the placement checks per job).

Engines (``engine=``, :data:`ddlscope.engine.ENGINES`): ``local`` evaluates the chunks one after
another in this process; ``ray`` runs each chunk's :func:`evaluate_chunk` -- the local engine's
per-chunk code, as it is -- as a Ray task, which writes the chunk's rows to the same dataset
(``part-<chunk>.parquet``, the chunk numbered as the local engine numbers it). The slices are cut
here, and a :class:`JobChunks`' Jobs slices assembled here (the workload library, which may profile
a model, stays in this process), while the tasks evaluate the earlier chunks; the aggregates are
then computed here from the dataset by the same code. Both engines therefore write the same files
and give the same tables and figures, bit for bit.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ddlscope.engine import check_engine, ray_cpus, ray_session, require_ray, unwrap_task_error
from ddlscope.model.scenarios import whatif_blocks
from ddlscope.model.step_time import COMPONENTS
from ddlscope.population.aggregates import bottleneck_mix, component_shares, scenario_speedups
from ddlscope.population.characterize import (
    NIC_SCENARIO,
    _headline,
    check_population,
    prepare_jobs,
    result_columns,
)
from ddlscope.population.jobs import assemble_jobs
from ddlscope.population.workloads import WorkloadLibrary
from ddlscope.specs.catalog import Catalog
from ddlscope.specs.scenario import Scenario

c = pl.col
DEFAULT_CHUNK_JOBS = 250_000
"""Jobs evaluated together (each chunk's rows under every scenario are held at once)."""


class JobChunks:
    """A job population whose Jobs table is assembled in slices of ``chunk_jobs`` population rows,
    as :func:`characterize_streaming` consumes them (module docstring).

    Args:
        population: the job population (:func:`~ddlscope.population.jobs.assemble_jobs`'s input).
        library, catalog: as ``assemble_jobs``.
        chunk_jobs: population rows per slice (>= 1).
        options: ``assemble_jobs``' keyword options (``default_server`` required; ``server_for``,
            ``precision``, ``overlap``, ``link_transports``).

    Attributes:
        total: population rows; assembled: Jobs rows yielded so far.
        population: after a full iteration, the population with ``trace_job_id``, the positional
            ``job_id`` and the reasons found while assembling (``assemble_jobs``' second output for
            the whole); ``None`` before.

    Raises:
        ValueError: ``chunk_jobs`` below 1. Iterating raises what ``assemble_jobs`` raises.
    """

    def __init__(self, population: pl.DataFrame, library: WorkloadLibrary, catalog: Catalog, *,
                 chunk_jobs: int = DEFAULT_CHUNK_JOBS, **options: Any) -> None:
        if chunk_jobs < 1:
            raise ValueError(f"chunk_jobs: expected at least 1, got {chunk_jobs}")
        self._population, self._library, self._catalog = population, library, catalog
        self._options: Mapping[str, Any] = options
        self.chunk_jobs = chunk_jobs
        self.total = population.height
        self.assembled = 0
        self.population: pl.DataFrame | None = None

    def __iter__(self) -> Iterator[tuple[int, pl.DataFrame]]:
        """Yield ``(population rows done, Jobs table of the slice)``; sets :attr:`population` at the end."""
        parts = []
        self.assembled = 0
        step = min(self.chunk_jobs, max(self.total, 1))  # a chunk larger than the population is all of it
        for start in range(0, max(self.total, 1), step):
            jobs, part = assemble_jobs(self._population.slice(start, step), self._library,
                                       self._catalog, first_job_id=start, **self._options)
            parts.append(part)
            self.assembled += jobs.height
            yield min(start + step, self.total), jobs
        self.population = pl.concat(parts, how="vertical_relaxed")


@dataclass
class StreamedCharacterization:
    """:class:`~ddlscope.population.characterize.Characterization`'s aggregates, without the
    results in memory.

    Attributes:
        shares, bottlenecks, speedups, headline, notes, excluded: as the Characterization's.
        results_dir: the Parquet dataset of every job x scenario row (hive-partitioned by
            ``scenario``; ``pl.scan_parquet(results_dir / "scenario=baseline")`` reads one scenario).
        scenarios: the scenario names, baseline first.
        chunks: chunks evaluated (with at least one job kept); jobs: jobs evaluated; wall_s: wall
            time, seconds; engine: where the chunks ran (``local`` or ``ray``).
    """

    shares: pl.DataFrame
    bottlenecks: pl.DataFrame
    speedups: pl.DataFrame
    headline: dict[str, float | int | None]
    results_dir: Path
    scenarios: list[str]
    chunks: int
    jobs: int
    notes: list[str] = field(default_factory=list)
    excluded: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema={"job_id": pl.Int64,
                                                                                "reason": pl.String}))
    wall_s: float = 0.0
    engine: str = "local"

    def scan(self, scenario: str) -> pl.LazyFrame:
        """One scenario's rows, lazily, in job order."""
        return pl.scan_parquet(self.results_dir / f"scenario={scenario}" / "*.parquet", hive_partitioning=False)


def evaluate_chunk(
    part: pl.DataFrame,
    index: int,
    scenarios: Sequence[Scenario],
    results_dir: str | Path,
    catalog: Catalog | None = None,
    require_gpu_memory: bool = True,
    check: bool = False,
) -> tuple[int, pl.DataFrame]:
    """Evaluate one chunk of jobs and write its rows: the per-chunk code of both engines of
    :func:`characterize_streaming` (a Ray task runs this function as it is).

    Args:
        part: the chunk's Jobs rows (a slice of the Jobs table, in job order).
        index: the chunk's position among the chunks evaluated (0-based): its rows go to
            ``<results_dir>/scenario=<name>/part-<index, 6 digits>.parquet``, one file per scenario
            (baseline first), in job order.
        scenarios, catalog, require_gpu_memory: as :func:`characterize_streaming`.
        results_dir: the results dataset's folder (it exists; the ``scenario=`` folders are made
            here when missing). With a Ray cluster of several machines: a folder every node sees
            at this path.
        check: run :func:`~ddlscope.population.characterize.check_population` on the chunk first
            (the slices of a :class:`JobChunks`; a whole Jobs table is checked once beforehand).

    Returns:
        ``(kept, excluded)``: the number of jobs evaluated (their rows written; 0: nothing
        written), and the jobs set aside (``job_id``, ``reason``: the replica exceeds the GPU's
        memory), in job order.

    Raises:
        ValueError: as ``check_population`` (with ``check``) and ``whatif_blocks``.
    """
    if check:
        check_population(part)
    chunk, excluded = prepare_jobs(part, require_gpu_memory)
    if chunk.height:
        out = Path(results_dir)
        names = ["baseline", *(s.name for s in scenarios)]
        for name, block in zip(names, whatif_blocks(chunk, scenarios, catalog, columns=result_columns(chunk)),
                               strict=True):
            folder = out / f"scenario={name}"
            folder.mkdir(exist_ok=True)  # concurrent tasks may make it at once
            block.write_parquet(folder / f"part-{index:06d}.parquet")
            del block  # not held while the next scenario's block is computed
    return chunk.height, excluded


def _pieces(jobs: pl.DataFrame | JobChunks, chunk_jobs: int) -> Iterator[tuple[int, pl.DataFrame | None]]:
    """``(rows of the slice, its Jobs rows or None when it has none)`` for every slice of ``jobs``
    (population rows for a :class:`JobChunks`, whose slices are assembled as they are asked for)."""
    if isinstance(jobs, pl.DataFrame):
        step = min(chunk_jobs, max(jobs.height, 1))  # a chunk larger than the population is all of it
        for start in range(0, jobs.height, step):
            part = jobs.slice(start, step)
            yield part.height, part
        return
    before = 0
    for done, part in jobs:
        yield done - before, (part if part.height else None)
        before = done


def _evaluate_here(pieces: Iterator[tuple[int, pl.DataFrame | None]], args: dict[str, Any],
                   progress: Callable[[int], None]) -> list[tuple[int, pl.DataFrame]]:
    """The local engine: every chunk in this process, one after another."""
    results = []
    for rows, part in pieces:
        if part is not None:
            results.append(evaluate_chunk(part, len(results), **args))
        progress(rows)
    return results


def _evaluate_on_ray(ray: Any, pieces: Iterator[tuple[int, pl.DataFrame | None]], args: dict[str, Any],
                     progress: Callable[[int], None]) -> list[tuple[int, pl.DataFrame]]:
    """The Ray engine: every chunk an :func:`evaluate_chunk` task; the slices are cut (or, for a
    :class:`JobChunks`, assembled) here while the tasks run, at most one more in flight than the
    cluster has CPUs (the object store holds those chunks); the results in chunk order."""
    remote = ray.remote(evaluate_chunk)
    shared = {k: ray.put(v) for k, v in args.items() if k in ("scenarios", "catalog")}  # sent once
    args = {**args, **shared}
    limit = ray_cpus(ray) + 1
    pending: dict[Any, tuple[int, int]] = {}  # task -> (chunk index, rows)
    results: dict[int, tuple[int, pl.DataFrame]] = {}
    submitted = 0

    def collect_one() -> None:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            index, rows = pending.pop(ref)
            results[index] = ray.get(ref)
            progress(rows)

    try:
        for rows, part in pieces:
            if part is None:
                progress(rows)
                continue
            while len(pending) >= limit:
                collect_one()
            pending[remote.remote(part, submitted, **args)] = (submitted, rows)
            submitted += 1
        while pending:
            collect_one()
    except BaseException as e:  # a task's error, or this process's (assembling a slice, an interrupt)
        for ref in pending:  # on an existing cluster, the chunks still running would go on writing
            ray.cancel(ref)
        if isinstance(e, ray.exceptions.RayTaskError):
            raise unwrap_task_error(ray, e) from None
        raise
    return [results[i] for i in range(submitted)]


def characterize_streaming(
    jobs: pl.DataFrame | JobChunks,
    scenarios: Sequence[Scenario],
    results_dir: str | Path,
    catalog: Catalog | None = None,
    notes: Sequence[str] = (),
    require_gpu_memory: bool = True,
    chunk_jobs: int = DEFAULT_CHUNK_JOBS,
    on_chunk: Callable[[int, int], None] | None = None,
    engine: str = "local",
    address: str | None = None,
    num_cpus: int | None = None,
) -> StreamedCharacterization:
    """Characterize ``jobs`` chunk by chunk (see the module docstring).

    Args:
        jobs: a Jobs table (as :func:`~ddlscope.population.characterize.characterize`'s), or a
            :class:`JobChunks`, whose slices are assembled and evaluated one at a time (its
            ``population`` is set when this returns).
        scenarios, catalog, notes, require_gpu_memory: as ``characterize``.
        results_dir: the folder of the results dataset (created; an earlier dataset's
            ``scenario=*`` folders in it are replaced).
        chunk_jobs: jobs per chunk (>= 1; a :class:`JobChunks` has its own).
        on_chunk: called as ``on_chunk(jobs_done, jobs_total)`` after each chunk (progress; for a
            :class:`JobChunks`, population rows; with ``ray``, as the tasks finish, the jobs of
            the chunks finished so far).
        engine: ``local`` (the chunks one after another in this process) or ``ray`` (each chunk an
            :func:`evaluate_chunk` Ray task; the slices are cut, or assembled, in this process):
            :data:`~ddlscope.engine.ENGINES`. Both write the same files and give the same results,
            bit for bit (the aggregates are computed here, from the dataset, either way).
        address: ``ray`` only: an existing cluster's address (``auto``: the one started on this
            machine by ``ray start --head``); None: a local cluster of ``num_cpus`` workers
            (:func:`~ddlscope.engine.ray_session`). The tasks write to ``results_dir``: on a
            cluster of several machines, a folder every node sees at the same path.
        num_cpus: CPUs of a local Ray cluster (None: every core).

    Returns:
        A :class:`StreamedCharacterization` (``wall_s`` in seconds, evaluation and aggregation).

    Raises:
        ValueError: as ``characterize`` (an empty population, missing columns, duplicate job ids or
            scenario names, no job fitting its GPU; for a :class:`JobChunks` whose population has
            no evaluable job: "no job of the population can be evaluated"); ``chunk_jobs`` below 1;
            an unknown ``engine``. With ``ray``, the error a task raised, as the local engine
            raises it. MissingExtraError (an ImportError): ``ray`` without Ray installed.
    """
    check_engine(engine)
    if engine == "ray":
        require_ray()  # before any work
    if chunk_jobs < 1:
        raise ValueError(f"chunk_jobs: expected at least 1, got {chunk_jobs}")
    t0 = time.perf_counter()
    if isinstance(jobs, pl.DataFrame):
        check_population(jobs)
        total = jobs.height
    else:
        total = jobs.total
    names = ["baseline", *(s.name for s in scenarios)]
    if len(set(names)) != len(names):
        raise ValueError(f"scenarios: names must be unique, got {names[1:]}")
    out = Path(results_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("scenario=*"):
        shutil.rmtree(old)
    done = 0

    def progress(rows: int) -> None:
        nonlocal done
        done += rows
        if on_chunk is not None:
            on_chunk(done, total)

    args = {"scenarios": list(scenarios), "results_dir": str(out.resolve()), "catalog": catalog,
            "require_gpu_memory": require_gpu_memory, "check": not isinstance(jobs, pl.DataFrame)}
    if engine == "ray":
        with ray_session(address, num_cpus) as ray:
            results = _evaluate_on_ray(ray, _pieces(jobs, chunk_jobs), args, progress)
    else:
        results = _evaluate_here(_pieces(jobs, chunk_jobs), args, progress)
    if isinstance(jobs, JobChunks) and jobs.assembled == 0:
        raise ValueError("jobs: no job of the population can be evaluated (every job is accounted for in "
                         "JobChunks.population's reasons)")
    excluded = pl.concat([e for _, e in results])
    kept = sum(k for k, _ in results)
    if kept == 0:
        raise ValueError("jobs: no job fits its GPU's memory; nothing to characterize")

    def scan(name: str) -> pl.LazyFrame:
        return pl.scan_parquet(out / f"scenario={name}" / "*.parquet", hive_partitioning=False)

    base = scan("baseline").select(
        "job_id", "scenario", "architecture", "bottleneck", "gpu_time_s", "num_gpus", "network_s", "share_comm",
        *(f"share_{k}" for k in COMPONENTS)).collect()
    shares, bottlenecks = component_shares(base), bottleneck_mix(base)
    base = base.select("job_id", "architecture", "num_gpus", "network_s", "share_comm", "gpu_time_s")  # the headline's
    speed_cols = ("scenario", "baseline_architecture", "gpu_time_s", "speedup", "scenario_applied")
    if len(names) == 1:
        speedups = scenario_speedups(scan("baseline").select(speed_cols).collect())
    else:
        speedups = pl.concat([scenario_speedups(scan(n).select(speed_cols).collect()) for n in names[1:]])
    nic = scan(NIC_SCENARIO).select("job_id", "speedup").collect() if NIC_SCENARIO in names else base.head(0)
    return StreamedCharacterization(
        shares=shares, bottlenecks=bottlenecks, speedups=speedups,
        headline=_headline(base, nic, speedups), results_dir=out, scenarios=names,
        chunks=sum(1 for k, _ in results if k), jobs=kept, notes=list(notes), excluded=excluded,
        wall_s=time.perf_counter() - t0, engine=engine)
