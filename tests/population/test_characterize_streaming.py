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
from ddlscope.population.streaming import characterize_streaming
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


def _jobs(population: pl.DataFrame, cat) -> pl.DataFrame:
    """The Jobs table as ``ddlscope characterize`` assembles it (the optional columns added first)."""
    for col, dtype in (("reason", pl.String), ("batch_size", pl.Int64), ("num_servers", pl.Int64)):
        if col not in population.columns:
            population = population.with_columns(pl.lit(None, dtype).alias(col))
    return assemble_jobs(population, WorkloadLibrary(), cat, default_server="pai-v100-nvlink-8")[0]


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
