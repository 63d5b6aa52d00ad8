"""User catalog files: the documented example, the flat-shape error, overrides by any spelling."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddlscope.cli.main import app
from ddlscope.specs.catalog import CatalogError, builtin_catalog, load_catalog

DOCS = Path(__file__).resolve().parents[2] / "docs" / "model.md"


def _docs_example() -> str:
    blocks = re.findall(r"```toml\n(.*?)```", DOCS.read_text(), flags=re.S)
    return next(b for b in blocks if b.startswith("# my-catalog.toml"))


def test_the_catalog_example_in_the_docs_loads_and_resolves(tmp_path):
    f = tmp_path / "my-catalog.toml"
    f.write_text(_docs_example())
    cat = load_catalog(f)
    assert cat.overrides == []
    system = cat.system("my-a4500-box")
    assert system.gpu.name == "RTX-A4500" and system.gpu.peak_tflops.bf16 == 94.6
    assert system.gpu.generation == "ampere" and system.gpu.has_tensor_cores("tf32")
    assert cat.gpu("nvidia rtx a4500") is system.gpu  # alias, case-insensitive
    assert system.nvlink is None and system.pcie.name == "pcie4-x16"
    assert system.nic.name == "eth-50g" and system.nic.bandwidth_gb_s == 6.25  # 50 Gb/s / 8 = 6.25 GB/s
    assert system.gpus_per_server == 4 and system.gpus_per_pcie_root == 2


def test_flat_gpu_fields_as_catalog_gpus_prints_them_say_what_peak_tflops_takes(tmp_path):
    res = CliRunner().invoke(app, ["catalog", "gpus", "--format", "json"])
    row = next(r for r in json.loads(res.output) if r["name"] == "V100-SXM2-16GB")
    f = tmp_path / "flat.json"
    f.write_text(json.dumps({"gpu": {"MyGPU": {k: v for k, v in row.items() if k != "name"}}}))
    with pytest.raises(CatalogError, match=r'flat\.json: \[gpu\."MyGPU"\]: bf16_tflops, fp16_tflops, fp32_tflops, '
                                           r"tf32_tflops: not catalog fields; peak_tflops takes a table"):
        load_catalog(f)
    row = {k: v for k, v in row.items() if not k.endswith("_tflops") and k != "name"}
    f.write_text(json.dumps({"gpu": {"MyGPU": {**row, "peak_tflops": {"fp32": 1, "tf32": 1, "fp16": 1, "bf16": 1}}}}))
    with pytest.raises(CatalogError, match=r"aliases: expected a list of names"):
        load_catalog(f)


@pytest.mark.parametrize("spelling", ["v100_sxm2_16gb", "V100-SXM2-16GB", "Tesla V100-SXM2-16GB"])
def test_an_entry_replacing_a_builtin_gpu_in_any_spelling_is_noted_and_replaces_it(tmp_path, spelling):
    builtin = builtin_catalog().gpu("V100-SXM2-16GB")
    assert "Tesla V100-SXM2-16GB" in builtin.aliases
    f = tmp_path / "mine.toml"
    f.write_text(f'[gpu."{spelling}"]\npeak_tflops = {{fp32 = 1.0, tf32 = 1.0, fp16 = 1.0, bf16 = 1.0}}\n'
                 "memory_bandwidth_gb_s = 100.0\nmemory_gb = 16.0\n")
    cat = load_catalog(f)
    assert len(cat.overrides) == 1 and cat.overrides[0].startswith("gpu.V100-SXM2-16GB")
    assert len(cat.gpus) == len(builtin_catalog().gpus)  # replaced, not added beside it
    for name in ("V100-SXM2-16GB", *builtin.aliases):  # every built-in name now reaches the user's entry
        assert cat.gpu(name).peak_tflops.fp32 == 1.0
    assert cat.system("pai-v100-nvlink-8").gpu.memory_bandwidth_gb_s == 100.0  # servers naming it get the new entry
    res = CliRunner().invoke(app, ["catalog", "gpus", "--catalog", str(f)])
    assert res.exit_code == 0 and "replaced catalog entries: gpu.V100-SXM2-16GB" in res.output.replace("\n", "")


def test_a_link_replacing_a_builtin_in_another_spelling_is_noted(tmp_path):
    f = tmp_path / "links.toml"
    f.write_text('[link."ETH_25G"]\nkind = "ethernet"\nbandwidth_gb_s = 3.0\nlatency_us = 5.0\n')
    cat = load_catalog(f)
    assert cat.overrides == [f"link.eth-25g as ETH_25G (from {f})"]
    assert cat.link("eth-25g").bandwidth_gb_s == 3.0


def test_a_server_entry_with_a_link_in_the_wrong_slot_names_the_file_and_entry(tmp_path):
    f = tmp_path / "cat1.toml"
    f.write_text(_docs_example().replace('nvlink = "none"', 'nvlink = "pcie4-x16"'))
    with pytest.raises(CatalogError, match=re.escape(
            f"{f}: [server.\"my-a4500-box\"]: nvlink: expected a link of kind 'nvlink' or none, "
            "got 'pcie4-x16' (pcie)")):
        load_catalog(f)


def test_the_system_file_example_in_the_docs_resolves(tmp_path):
    from ddlscope.specs.catalog import load_system

    block = next(b for b in re.findall(r"```toml\n(.*?)```", DOCS.read_text(), flags=re.S)
                 if b.startswith("[system]"))
    f = tmp_path / "sys.toml"
    f.write_text(block)
    system, _ = load_system(f)
    assert system.gpu.name == "A100-SXM4-40GB" and system.nvlink is None and system.gpus_per_server == 4
    assert system.storage_read_gb_s == 2.0 and system.efficiency.compute == 0.5


def test_catalog_gpus_shows_the_tensor_clock_predict_uses(tmp_path):
    # the docs' example: 200 W for 56 SMs at 1.65 GHz: (200 / (2.38 x 56 x 1.65)) ** (1/3) = 0.969 of boost
    f = tmp_path / "my-catalog.toml"
    f.write_text(_docs_example())
    # without tensor_core_precisions the GPU counts as having tensor cores where a peak exceeds FP32's,
    # as predict prices it: the catalog shows the same clock, not '-'
    g = tmp_path / "no-list.toml"
    text = _docs_example()
    assert 'tensor_core_precisions = ["tf32", "fp16", "bf16"]  # optional\n' in text
    g.write_text(text.replace('tensor_core_precisions = ["tf32", "fp16", "bf16"]  # optional\n', ""))
    for path in (f, g):
        res = CliRunner().invoke(app, ["catalog", "gpus", "--catalog", str(path), "--format", "json"])
        assert res.exit_code == 0, res.output
        row = next(r for r in json.loads(res.stdout) if r["name"] == "RTX-A4500")
        assert row["tensor_clock_held"] == pytest.approx((200 / (2.38 * 56 * 1.65)) ** (1 / 3), abs=1e-3)
        assert (row["max_clock_mhz"], row["tensor_rate_of_die"]) == (None, 1.0)
    # a GPU without tensor cores has no tensor clock
    res = CliRunner().invoke(app, ["catalog", "gpus", "--format", "json"])
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert rows["P100-PCIE-16GB"]["tensor_clock_held"] is None
    assert (rows["RTX-3090"]["max_clock_mhz"], rows["RTX-3090"]["tensor_rate_of_die"]) == (2100, 0.5)
