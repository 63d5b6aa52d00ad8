"""KEY=VALUE options: one parser (specs.files.parse_pairs) behind --map, --op-map, --server-for,
inline --scenario and model mixes."""

import pytest

from ddlscope.cli.common import parse_scenarios
from ddlscope.ingest.generic import parse_map_pairs
from ddlscope.ingest.models import parse_model_mix
from ddlscope.rpc.validate import ColumnMapping
from ddlscope.specs.files import parse_pairs


def test_pairs_are_stripped_and_keep_their_order():
    assert parse_pairs([" b = x ", "a=1=2"], what="--map") == {"b": "x", "a": "1=2"}
    assert list(parse_pairs(["z=1", "a=2"], what="--map")) == ["z", "a"]


@pytest.mark.parametrize("item", ["noequals", "=x", "x=", " = "])
def test_a_pair_without_both_sides_names_the_option_and_the_form(item):
    with pytest.raises(ValueError, match=r"--server-for: expected GPU=SERVER, got"):
        parse_pairs([item], what="--server-for", expected="GPU=SERVER")


def test_a_key_given_twice_is_an_error():
    with pytest.raises(ValueError, match="'a' is given twice"):
        parse_pairs(["a=1", "a=2"], what="--map")


def test_every_option_uses_it():
    assert parse_map_pairs(["num_gpus = gpus"]) == {"num_gpus": "gpus"}
    with pytest.raises(ValueError, match="--map: 'num_gpus' is given twice"):
        parse_map_pairs(["num_gpus=a", "num_gpus=b"])
    with pytest.raises(ValueError, match="--op-map: expected OLD=NEW"):
        ColumnMapping.from_pairs(ops=["pull"])
    assert parse_model_mix("resnet50=3, bert_large=1") == {"resnet50": 0.75, "bert_large": 0.25}  # weights normalised
    with pytest.raises(ValueError, match="model mix: expected model=weight"):
        parse_model_mix("resnet50")
    (s,) = parse_scenarios(["fast:precision=fp16"])
    assert (s.name, s.precision) == ("fast", "fp16")
    expected = "--scenario 'fast:precision=fp16,gpu': expected key=value pairs after 'name:', got 'gpu'"
    with pytest.raises(ValueError, match=expected):
        parse_scenarios(["fast:precision=fp16,gpu"])
