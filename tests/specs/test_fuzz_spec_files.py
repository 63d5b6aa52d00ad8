"""Fuzz tests of the spec files (ddlscope.testing.fuzz_specs): the scenario, system and catalog
examples of docs/model.md mutated with a hypothesis-drawn seed; each case is a one-line user error
naming the file, or specs that load and run through the model."""

from __future__ import annotations

import random
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from ddlscope.testing import fuzz_specs
from ddlscope.testing.fuzz_specs import (
    CATALOG_EXAMPLE,
    SYSTEM_EXAMPLE,
    fuzz_catalog_file,
    fuzz_scenario_file,
    fuzz_system_file,
    replace_value,
)
from ddlscope.testing.mutate import TEXT_MUTATIONS, mutate

DOCS = Path(__file__).resolve().parents[2] / "docs" / "model.md"
SETTINGS = settings(max_examples=40, deadline=None)
def _mutate_with_values(data: bytes, seed: int) -> tuple[bytes, list[str]]:
    rng = random.Random(seed)
    if rng.random() < 0.5:
        return replace_value(data, rng), ["replace_value"]
    return mutate(data, seed, tuple(TEXT_MUTATIONS))


def test_examples_are_the_docs_and_load(tmp_path):
    """The seed files are docs/model.md's examples, and unmutated they load and run."""
    docs = DOCS.read_text()
    assert CATALOG_EXAMPLE in docs and SYSTEM_EXAMPLE in docs
    for name, example in (("scenarios.toml", fuzz_specs.SCENARIO_EXAMPLE), ("system.toml", SYSTEM_EXAMPLE),
                          ("catalog.toml", CATALOG_EXAMPLE)):
        (tmp_path / name).write_text(example)
    from ddlscope.cli.common import parse_scenarios
    from ddlscope.specs.catalog import load_catalog, load_system

    assert [s.name for s in parse_scenarios([str(tmp_path / "scenarios.toml")], load_catalog())] == [
        "nic-100g-and-a100", "port-to-ring", "fp16-fused"]
    system, _ = load_system(tmp_path / "system.toml")
    assert (system.gpu.name, system.gpus_per_server, system.nvlink) == ("A100-SXM4-40GB", 4, None)
    assert load_catalog(tmp_path / "catalog.toml").system("my-a4500-box").gpu.name == "RTX-A4500"


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_scenario_file_fuzz(tmp_path_factory, seed):
    fuzz_scenario_file(seed, tmp_path_factory.mktemp("s"))


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_system_file_fuzz(tmp_path_factory, seed):
    fuzz_system_file(seed, tmp_path_factory.mktemp("y"))


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_catalog_file_fuzz(tmp_path_factory, seed):
    fuzz_catalog_file(seed, tmp_path_factory.mktemp("c"))


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), kind=st.sampled_from(["scenario", "system", "catalog"]))
def test_spec_files_with_values_of_other_types(tmp_path_factory, seed, kind):
    fn = {"scenario": fuzz_scenario_file, "system": fuzz_system_file, "catalog": fuzz_catalog_file}[kind]
    original = fuzz_specs.mutate
    fuzz_specs.mutate = _mutate_with_values
    try:
        fn(seed, tmp_path_factory.mktemp(kind))
    finally:
        fuzz_specs.mutate = original


def test_a_count_beyond_int64_is_a_user_error(tmp_path):
    """Found by the fuzzing above: gpus_per_server = 2^63 loaded, then the model's Int64 column overflowed (a
    Polars ComputeError). Counts now stop at 2^53 (specs.system.MAX_COUNT), one line naming the file."""
    import pytest

    from ddlscope.specs.catalog import load_system
    from ddlscope.specs.scenario import load_scenarios

    path = tmp_path / "s.toml"
    path.write_text('[system]\nserver = "dgx-a100"\ngpus_per_server = 9223372036854775808\n')
    with pytest.raises(ValueError, match=r"s.toml: .*gpus_per_server: Input should be less than or equal to "
                       r"9007199254740992 \(got 9223372036854775808\)") as exc:
        load_system(path)
    assert "\n" not in str(exc.value)
    path.write_text('[[scenario]]\nname = "x"\nnics_per_server = 9223372036854775808\n')
    with pytest.raises(ValueError, match=r"s.toml: scenario #1: nics_per_server: Input should be less than"):
        load_scenarios(path)
