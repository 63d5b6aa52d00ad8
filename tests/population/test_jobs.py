"""Population -> Jobs: workloads and systems attached, every job accounted for."""

from __future__ import annotations

import json
from importlib import resources

import polars as pl
import pytest

from ddlscope.ingest.population import POPULATION_SCHEMA
from ddlscope.population.builtin import PLACEMENTS, SERVERS, builtin_population
from ddlscope.population.jobs import CANNOT_PROFILE, DOES_NOT_FIT, assemble_jobs
from ddlscope.population.workloads import WorkloadLibrary
from ddlscope.profile import profile_model
from ddlscope.specs.catalog import builtin_catalog

SCHEMA = {k: t for k, (t, _) in POPULATION_SCHEMA.items()}


def population(rows):
    base = {"source": "test", "attributed": True, "reason": None, "num_ps": 0, "num_servers": None,
            "batch_size": None, "gpu": None, "server_gpus": None, "gpu_time_s": 100.0}
    full = [{**base, **r, "num_gpus": r["num_workers"] * r.get("gpus_per_worker", 1),
             "gpus_per_worker": r.get("gpus_per_worker", 1)} for r in rows]
    return pl.DataFrame(full, schema={k: SCHEMA[k] for k in full[0]})


def test_assemble_attaches_workload_system_and_accounts_for_every_job():
    pop = population([
        {"job_id": "a", "model": "resnet50", "architecture": "allreduce_local", "num_workers": 4},
        {"job_id": "b", "model": "resnet50", "architecture": "allreduce_local", "num_workers": 16},  # 16 > 8
        {"job_id": "c", "model": "no_such_model", "architecture": "1w1g", "num_workers": 1},
        {"job_id": "d", "model": "dlrm", "architecture": "ps_worker", "num_workers": 8, "num_ps": 2, "gpu": "T4",
         "server_gpus": 2},
        {"job_id": "e", "model": None, "architecture": "1w1g", "num_workers": 1, "attributed": False,
         "reason": "no model label"},
    ])
    lib = WorkloadLibrary()
    jobs, pop2 = assemble_jobs(pop, lib, builtin_catalog(), default_server="pai-v100-nvlink-8")
    reasons = dict(zip(pop2["trace_job_id"], pop2["reason"], strict=True))
    assert reasons["a"] is None and reasons["d"] is None
    assert reasons["b"].startswith(DOES_NOT_FIT) and "at most 8 GPUs per server" in reasons["b"]
    assert reasons["c"].startswith(CANNOT_PROFILE)
    assert reasons["e"] == "no model label"
    assert jobs["trace_job_id"].to_list() == ["a", "d"]
    a, d = jobs.row(0, named=True), jobs.row(1, named=True)
    shipped = lib.get("resnet50", None, "fp32")
    assert a["compute_bound_flops"] == shipped.compute_bound_flops and a["batch_size"] == 64
    assert a["gpu"] == "V100-SXM2-16GB" and a["num_servers"] == 1
    # the PAI trace's T4 machines have 2 GPUs: 8 workers spread over 4 servers of 2
    assert d["gpu"] == "T4" and d["server_gpus"] == 2 and d["num_servers"] == 4
    assert d["sparse_bytes_per_step"] > 0


def test_builtin_population_is_the_stated_grid():
    pop = builtin_population()
    models = 10
    per_server = models * (len(PLACEMENTS) - 4) + 2 * 4  # pearl (4 sizes) only for mind and dlrm
    assert pop.height == len(SERVERS) * per_server == 336
    assert pop.filter(pl.col("architecture") == "pearl")["model"].unique().sort().to_list() == ["dlrm", "mind"]
    assert pop["attributed"].all()


def test_shipped_zoo_workloads_match_a_fresh_profile():
    data = json.loads(resources.files("ddlscope.population").joinpath("data/zoo_workloads.json").read_text())
    shipped = {(e["model"], e["precision"]): e["workload"] for e in data["workloads"]}
    for model in ("resnet18", "dlrm"):
        fresh = profile_model(model, precision="fp32").workload.model_dump()
        for key in ("compute_bound_flops", "memory_bound_bytes", "dense_param_bytes", "sparse_bytes_per_step",
                    "embedding_table_bytes", "input_bytes", "num_gradient_tensors"):
            assert shipped[(model, "fp32")][key] == pytest.approx(fresh[key], rel=1e-9), (model, key)


def test_builtin_example_is_the_resnet50_profile():
    from ddlscope.specs.examples import example_workload

    ex, shipped = example_workload(), WorkloadLibrary().get("resnet50", None, "fp32")
    for key in ("batch_size", "compute_bound_flops", "memory_bound_bytes", "memory_bound_flops", "input_bytes",
                "stored_input_bytes", "dense_param_bytes", "num_gradient_tensors", "peak_memory_bytes"):
        assert getattr(ex, key) == getattr(shipped, key), key
