"""Characterize in chunks equals characterize in one piece: every aggregate table and headline
figure, on the built-in population (reconstruction grid, 336 jobs) and on the shared Gavel
Philly-VC trace (8,337 attributable jobs; /work/shared/data/gavel_traces/SOURCES.md)."""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from ddlscope.ingest import read_population
from ddlscope.population.builtin import builtin_population
from ddlscope.population.characterize import characterize
from ddlscope.population.jobs import assemble_jobs
from ddlscope.population.streaming import JobChunks, characterize_streaming
from ddlscope.population.workloads import WorkloadLibrary
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.specs.scenario import BUILTIN_SCENARIOS


def _same(mem, streamed) -> None:
    for name in ("shares", "bottlenecks", "speedups"):
        assert_frame_equal(getattr(mem, name), getattr(streamed, name), check_dtypes=False, rel_tol=1e-12), name
    assert mem.headline.keys() == streamed.headline.keys()
    for k, v in mem.headline.items():
        assert streamed.headline[k] == (v if v is None or isinstance(v, int) else pytest.approx(v, rel=1e-12)), k
    assert_frame_equal(mem.excluded, streamed.excluded)


def _with_optional(population: pl.DataFrame) -> pl.DataFrame:
    for col, dtype in (("reason", pl.String), ("batch_size", pl.Int64), ("num_servers", pl.Int64)):
        if col not in population.columns:
            population = population.with_columns(pl.lit(None, dtype).alias(col))
    return population


def _jobs(population: pl.DataFrame, cat) -> pl.DataFrame:
    """The Jobs table as ``ddlscope characterize`` assembles it (the optional columns added first)."""
    return assemble_jobs(_with_optional(population), WorkloadLibrary(), cat, default_server="pai-v100-nvlink-8")[0]


def test_builtin_population_in_chunks(tmp_path):
    cat = builtin_catalog()
    jobs = _jobs(builtin_population(), cat)
    scenarios = list(BUILTIN_SCENARIOS.values())
    mem = characterize(jobs, scenarios, cat)
    streamed = characterize_streaming(jobs, scenarios, tmp_path / "results", cat, chunk_jobs=50)
    assert streamed.chunks == 7 and streamed.jobs == 304  # 336 jobs in 7 chunks; 32 do not fit their GPU
    assert streamed.excluded.height == 32
    _same(mem, streamed)
    # the results dataset: one folder per scenario, each in job order, equal to the in-memory rows
    for name in streamed.scenarios:
        got = streamed.scan(name).collect()
        assert_frame_equal(got, mem.results.filter(pl.col("scenario") == name), check_dtypes=False)


def test_gavel_trace_in_chunks(shared_data, tmp_path):
    cat = builtin_catalog()
    population, _ = read_population([shared_data / "gavel_traces" / "msr" / "seed=0"], catalog=cat)
    jobs = _jobs(population, cat)
    scenarios = [BUILTIN_SCENARIOS["ethernet-100g"], BUILTIN_SCENARIOS["ps-to-allreduce-nvlink"]]
    mem = characterize(jobs, scenarios, cat)
    streamed = characterize_streaming(jobs, scenarios, tmp_path / "results", cat, chunk_jobs=1_000)
    assert streamed.jobs == mem.headline["jobs"] == 8_337
    assert streamed.chunks == 9
    _same(mem, streamed)


def test_jobs_assembled_slice_by_slice_equal_the_whole(shared_data, tmp_path):
    # the Gavel trace (with jobs the model cannot evaluate) and the built-in grid (with jobs that do
    # not fit their servers or GPU): slices of 700 population rows give the whole call's Jobs rows,
    # positional ids, reasons and every aggregate, and the wide Jobs table is never held whole
    cat = builtin_catalog()
    gavel, _ = read_population([shared_data / "gavel_traces" / "msr" / "seed=0"], catalog=cat)
    for population in (_with_optional(gavel), _with_optional(builtin_population())):
        whole_jobs, whole_pop = assemble_jobs(population, WorkloadLibrary(), cat, default_server="pai-v100-nvlink-8")
        chunks = JobChunks(population, WorkloadLibrary(), cat, chunk_jobs=700, default_server="pai-v100-nvlink-8")
        parts = list(chunks)
        assert [done for done, _ in parts][-1] == population.height == chunks.total
        assert_frame_equal(pl.concat([j for _, j in parts]), whole_jobs)
        assert_frame_equal(chunks.population, whole_pop)
        assert chunks.assembled == whole_jobs.height
        scenarios = [BUILTIN_SCENARIOS["ethernet-100g"], BUILTIN_SCENARIOS["ps-to-allreduce-nvlink"]]
        mem = characterize(whole_jobs, scenarios, cat)
        again = JobChunks(population, WorkloadLibrary(), cat, chunk_jobs=700, default_server="pai-v100-nvlink-8")
        streamed = characterize_streaming(again, scenarios, tmp_path / "results", cat)
        _same(mem, streamed)
        assert streamed.jobs == mem.headline["jobs"]
        assert_frame_equal(again.population, whole_pop)
    with pytest.raises(ValueError, match="chunk_jobs: expected at least 1"):
        JobChunks(gavel, WorkloadLibrary(), cat, chunk_jobs=0, default_server="pai-v100-nvlink-8")
    nothing = _with_optional(builtin_population()).with_columns(attributed=pl.lit(False),
                                                               reason=pl.lit("not a training job"))
    with pytest.raises(ValueError, match="no job of the population can be evaluated"):
        characterize_streaming(JobChunks(nothing, WorkloadLibrary(), cat, chunk_jobs=100,
                                         default_server="pai-v100-nvlink-8"), scenarios, tmp_path / "none", cat)


def test_cli_streaming_equals_the_in_memory_report(tmp_path):
    import json

    from typer.testing import CliRunner

    from ddlscope.cli.main import app

    runner = CliRunner()
    res = runner.invoke(app, ["characterize", "--out", str(tmp_path / "mem"), "--no-figures", "--format", "json"])
    assert res.exit_code == 0, res.output
    mem = json.loads(res.output)
    out = tmp_path / "streamed"
    res = runner.invoke(app, ["characterize", "--streaming", "--chunk-jobs", "100", "--out", str(out),
                              "--format", "json"])
    assert res.exit_code == 0, res.output
    streamed = json.loads(res.output)
    assert streamed["evaluated_jobs"] == mem["evaluated_jobs"] == 304
    assert streamed["streaming"]["chunks"] == 4  # 336 jobs in chunks of 100
    assert streamed["rows"] == mem["rows"]  # the accounting: every job, the same reasons
    for k, v in mem["headline"].items():
        assert streamed["headline"][k] == (v if v is None or isinstance(v, int) else pytest.approx(v, rel=1e-12)), k
    assert_frame_equal(pl.read_parquet(out / "tables" / "scenario_speedups.parquet"),
                       pl.read_parquet(tmp_path / "mem" / "tables" / "scenario_speedups.parquet"),
                       check_dtypes=False, rel_tol=1e-12)
    assert sorted(p.name for p in (out / "tables" / "job_scenarios").iterdir())[:2] == [
        "scenario=add-nvlink", "scenario=baseline"]
    assert json.loads((out / "summary.json").read_text())["headline"]["jobs"] == 304
