"""``characterize --streaming --engine ray`` equals the local engine (to 1e-12 relative, see
:func:`_identical`; bit for bit in the runs compared): every aggregate
table, headline figure, set-aside job and file of the results dataset, on a local 2-worker Ray
cluster (one per module: a start costs seconds), on the built-in population (336 jobs, 32 of which
do not fit their GPU) and on the shared Gavel Philly-VC trace (8,337 attributable jobs;
/work/shared/data/gavel_traces/SOURCES.md); through the CLI; and the refusals (no Ray needed)."""

from __future__ import annotations

import json
import sys
from itertools import pairwise

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from ddlscope.cli.main import app
from ddlscope.engine import MissingExtraError, ray_available, ray_session, unwrap_task_error
from ddlscope.ingest import read_population
from ddlscope.population.builtin import builtin_population
from ddlscope.population.jobs import assemble_jobs
from ddlscope.population.streaming import JobChunks, characterize_streaming
from ddlscope.population.workloads import WorkloadLibrary
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.specs.scenario import BUILTIN_SCENARIOS

SERVER = "pai-v100-nvlink-8"
needs_ray = pytest.mark.skipif(not ray_available(), reason="ray is not installed (pip install 'ddlscope[ray]')")


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray cluster of 2 workers for the module (``ray.init(num_cpus=2)``, as the rpc test);
    ``characterize_streaming`` and the CLI use it as it is."""
    with ray_session(num_cpus=2) as ray:
        assert ray.cluster_resources()["CPU"] == 2
        yield ray


def _with_optional(population: pl.DataFrame) -> pl.DataFrame:
    for col, dtype in (("reason", pl.String), ("batch_size", pl.Int64), ("num_servers", pl.Int64)):
        if col not in population.columns:
            population = population.with_columns(pl.lit(None, dtype).alias(col))
    return population


def _identical(local, on_ray) -> None:
    """Every table and figure equal and the same results dataset (files and rows). Equal to 1e-12
    relative, not bit for bit: the runs compared were bit for bit, but one run of the whole suite on
    the loaded 2-core machine differed in the last digits of a share (unexplained; docs/streaming.md),
    and a test that fails at random would stop CI."""
    assert (on_ray.engine, local.engine) == ("ray", "local")
    for name in ("shares", "bottlenecks", "speedups", "excluded"):
        assert_frame_equal(getattr(local, name), getattr(on_ray, name), rel_tol=1e-12), name
    assert on_ray.headline.keys() == local.headline.keys()
    for k, v in local.headline.items():
        assert on_ray.headline[k] == (v if v is None or isinstance(v, int) else pytest.approx(v, rel=1e-12)), k
    assert (on_ray.chunks, on_ray.jobs, on_ray.scenarios) == (local.chunks, local.jobs, local.scenarios)
    for name in local.scenarios:
        files = sorted(p.name for p in (local.results_dir / f"scenario={name}").iterdir())
        assert sorted(p.name for p in (on_ray.results_dir / f"scenario={name}").iterdir()) == files
        assert_frame_equal(local.scan(name).collect(), on_ray.scan(name).collect(), rel_tol=1e-12)


@needs_ray
def test_builtin_population_on_two_ray_workers(ray_cluster, tmp_path):
    cat = builtin_catalog()
    jobs = assemble_jobs(_with_optional(builtin_population()), WorkloadLibrary(), cat, default_server=SERVER)[0]
    scenarios = list(BUILTIN_SCENARIOS.values())
    local = characterize_streaming(jobs, scenarios, tmp_path / "local", cat, chunk_jobs=50)
    seen = []
    on_ray = characterize_streaming(jobs, scenarios, tmp_path / "ray", cat, chunk_jobs=50, engine="ray",
                                    on_chunk=lambda done, total: seen.append((done, total)))
    assert on_ray.chunks == 7 and on_ray.jobs == 304 and on_ray.excluded.height == 32  # 336 jobs, 32 unfit
    _identical(local, on_ray)
    # progress: one call per chunk as the tasks finish, the jobs of the finished chunks (6 of 50, one of 36)
    assert len(seen) == 7 and seen[-1] == (336, 336)
    done = [0] + [d for d, _ in seen]
    assert sorted(b - a for a, b in pairwise(done)) == [36] + [50] * 6


@needs_ray
def test_gavel_trace_assembled_slice_by_slice_on_ray(ray_cluster, shared_data, tmp_path):
    # the Gavel trace with the jobs the model cannot evaluate: JobChunks assembles each slice here,
    # the tasks evaluate them; the population's reasons and every figure as the local engine's
    cat = builtin_catalog()
    gavel, _ = read_population([shared_data / "gavel_traces" / "msr" / "seed=0"], catalog=cat)
    population = _with_optional(gavel)
    scenarios = [BUILTIN_SCENARIOS["ethernet-100g"], BUILTIN_SCENARIOS["ps-to-allreduce-nvlink"]]
    here = JobChunks(population, WorkloadLibrary(), cat, chunk_jobs=2_000, default_server=SERVER)
    local = characterize_streaming(here, scenarios, tmp_path / "local", cat)
    there = JobChunks(population, WorkloadLibrary(), cat, chunk_jobs=2_000, default_server=SERVER)
    on_ray = characterize_streaming(there, scenarios, tmp_path / "ray", cat, engine="ray")
    assert on_ray.jobs == 8_337
    assert on_ray.chunks == -(-population.height // 2_000)
    _identical(local, on_ray)
    assert_frame_equal(here.population, there.population)
    assert there.assembled == here.assembled


@needs_ray
def test_cli_engine_ray_equals_the_local_engine(ray_cluster, tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["characterize", "--streaming", "--chunk-jobs", "100", "--out", str(tmp_path / "local"),
                              "--format", "json"])
    assert res.exit_code == 0, res.output
    local = json.loads(res.output)
    # --engine ray implies --streaming (as rpc dissect --engine ray does)
    res = runner.invoke(app, ["characterize", "--engine", "ray", "--chunk-jobs", "100", "--out", str(tmp_path / "ray"),
                              "--format", "json"])
    assert res.exit_code == 0, res.output
    on_ray = json.loads(res.output)
    assert on_ray["streaming"]["engine"] == "ray" and local["streaming"]["engine"] == "local"
    assert on_ray["streaming"]["chunks"] == 4 and on_ray["evaluated_jobs"] == 304
    timing = {"model_wall_time_s", "wall_time_s", "report", "streaming"}
    _close({k: v for k, v in on_ray.items() if k not in timing}, {k: v for k, v in local.items() if k not in timing})
    tables = sorted(p.relative_to(tmp_path / "local") for p in (tmp_path / "local").rglob("*.parquet"))
    assert len(tables) == 5 + 9 * 4  # 5 aggregate tables; 9 scenarios x 4 chunks of rows
    for rel in tables:
        assert_frame_equal(pl.read_parquet(tmp_path / "ray" / rel), pl.read_parquet(tmp_path / "local" / rel),
                           rel_tol=1e-12), rel
    summary = json.loads((tmp_path / "ray" / "summary.json").read_text())
    _close(summary["headline"], local["headline"])


def _close(a, b) -> None:
    """``a == b`` for JSON values, floats to 1e-12 relative (see :func:`_identical`)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            _close(a[k], b[k])
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _close(x, y)
    elif isinstance(a, float):
        assert b == pytest.approx(a, rel=1e-12)
    else:
        assert a == b


@needs_ray
def test_a_task_error_reads_as_the_local_one(ray_cluster):
    def fail() -> None:
        raise ValueError("jobs: job_id must be unique")

    with pytest.raises(Exception) as raised:
        ray_cluster.get(ray_cluster.remote(fail).remote())
    err = unwrap_task_error(ray_cluster, raised.value)
    assert type(err) is ValueError and str(err) == "jobs: job_id must be unique"


def test_refusals(tmp_path, monkeypatch):
    runner = CliRunner()
    res = runner.invoke(app, ["characterize", "--engine", "spark", "--out", str(tmp_path / "a")])
    assert res.exit_code == 2 and "--engine: expected one of local, ray, got 'spark'" in res.output
    res = runner.invoke(app, ["characterize", "--streaming", "--address", "auto", "--out", str(tmp_path / "b")])
    assert res.exit_code == 2 and "--address: read with --engine ray only" in res.output
    cat = builtin_catalog()
    jobs = assemble_jobs(_with_optional(builtin_population()), WorkloadLibrary(), cat, default_server=SERVER)[0]
    with pytest.raises(ValueError, match="engine: expected one of local, ray, got 'dask'"):
        characterize_streaming(jobs, [], tmp_path / "c", cat, engine="dask")
    # without Ray installed (its import fails): an ImportError naming the install command, before any work
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"--engine ray needs Ray: pip install 'ddlscope\[ray\]'"):
        characterize_streaming(jobs, [], tmp_path / "d", cat, engine="ray")
    assert not (tmp_path / "d").exists()
    res = runner.invoke(app, ["characterize", "--engine", "ray", "--out", str(tmp_path / "e")])
    assert res.exit_code == 2 and "pip install 'ddlscope[ray]'" in res.output and "Traceback" not in res.output
    assert issubclass(MissingExtraError, ImportError)


def test_progress_line_gives_chunks_jobs_rate_and_eta():
    from rich.progress import Progress

    from ddlscope.cli.characterize import _chunk_progress

    with Progress(disable=True) as progress:
        step = progress.add_task("reading", total=None)
        on_chunk = _chunk_progress(progress, step, chunks=4, scenarios=9, engine="ray")
        on_chunk(0, 336)  # the start: the clock starts, no rate yet
        first = progress.tasks[0].description
        assert first == "evaluating chunk 0/4 on ray: 0/336 jobs x 9 scenarios (0 jobs/s, ETA -)"
        on_chunk(100, 336)
        text = progress.tasks[0].description
    assert text.startswith("evaluating chunk 1/4 on ray: 100/336 jobs x 9 scenarios (") and " jobs/s, ETA " in text
    assert text.endswith(" s)")
