"""The traits table: one source of every architecture's rules; unknown architectures are errors everywhere."""

import typing

import polars as pl
import pytest
from pydantic import ValidationError

from ddlscope.model.jobs import job_row, jobs_frame
from ddlscope.model.step_time import breakdown
from ddlscope.population.builtin import PLACEMENTS
from ddlscope.specs.architecture import ARCHITECTURES, SINGLE_SERVER_ARCHITECTURES, Architecture, ArchitectureKind
from ddlscope.specs.catalog import builtin_catalog
from ddlscope.specs.scenario import Scenario
from ddlscope.specs.traits import TRAITS, canonical_sharding, collective_data_parallel_kind, traits_of
from ddlscope.specs.workload import Workload


def test_the_type_and_the_table_list_the_same_architectures():
    assert typing.get_args(ArchitectureKind) == ARCHITECTURES == tuple(TRAITS)
    assert {"1w1g", "1wng", "allreduce_local"} == SINGLE_SERVER_ARCHITECTURES


def test_builtin_population_grid_comes_from_the_table():
    # the PAI reconstruction's 1 + 3 + 3 + 6 + 3 + 4 placements, fsdp not among them
    assert len(PLACEMENTS) == 20
    assert ("ps_worker", 64, 1, 16) in PLACEMENTS and ("pearl", 8, 1, 0) in PLACEMENTS
    assert not any(p[0] == "fsdp" for p in PLACEMENTS)


def test_unknown_architecture_is_an_error_everywhere():
    with pytest.raises(ValueError, match="architecture: unknown 'megatron'; expected one of 1w1g"):
        traits_of("megatron")
    with pytest.raises(ValidationError, match="kind"):
        Architecture(kind="megatron", num_workers=8)
    with pytest.raises(ValidationError, match="architecture"):
        Scenario(name="x", architecture="megatron")
    system = builtin_catalog().system("dgx-a100")
    w = Workload(batch_size=8, compute_bound_flops=1e12, memory_bound_bytes=1e9, dense_param_bytes=1e8,
                 num_gradient_tensors=4)
    jobs = jobs_frame([job_row(w, Architecture(kind="allreduce_cluster", num_workers=16), system)])
    bad = jobs.with_columns(architecture=pl.lit("megatron"))
    with pytest.raises(ValueError, match="architecture 'megatron' unknown; expected one of"):
        breakdown(bad)
    with pytest.raises(Exception, match="megatron"):  # a lazy table fails when collected
        breakdown(bad.lazy())
    # a String column of known names is priced as the Enum column is
    same = breakdown(jobs.with_columns(architecture=pl.lit("allreduce_cluster")))
    assert same["comm_s"][0] == breakdown(jobs)["comm_s"][0] > 0


def test_fsdp_validator_rules():
    a = Architecture(kind="fsdp", num_workers=16, sharding="FULL_SHARD")
    assert a.sharding == "zero3" and a.servers_on(8) == 2
    assert Architecture(kind="fsdp", num_workers=8, sharding="shard_grad_op").sharding == "zero2"
    assert Architecture(kind="fsdp", num_workers=8, sharding="HYBRID_SHARD").sharding == "hybrid"
    with pytest.raises(ValidationError, match="sharding: unknown 'zero4'"):
        Architecture(kind="fsdp", num_workers=8, sharding="zero4")
    with pytest.raises(ValidationError, match="sharding: only fsdp shards its state"):
        Architecture(kind="allreduce_local", num_workers=8, sharding="zero3")
    with pytest.raises(ValidationError, match="fsdp expects >= 2 GPUs in all, got 1"):
        Architecture(kind="fsdp")
    with pytest.raises(ValidationError, match="divide evenly"):
        Architecture(kind="fsdp", num_workers=12, num_servers=5)
    with pytest.raises(ValidationError, match="sharding: a sharding needs a port to fsdp"):
        Scenario(name="s", sharding="zero2")
    assert Scenario(name="s", architecture="fsdp", sharding="SHARD_GRAD_OP").sharding == "zero2"
    assert canonical_sharding("Zero-3") == "zero3"


def test_baseline_kind_from_the_table():
    assert collective_data_parallel_kind(1, 8, False) == "1w1g"
    assert collective_data_parallel_kind(8, 8, False) == "allreduce_local"
    assert collective_data_parallel_kind(16, 8, False) == "allreduce_cluster"
    assert collective_data_parallel_kind(16, 8, True) == "pearl"
