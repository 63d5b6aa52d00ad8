"""Bad specs fail with an error that names the field and what was expected."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ddlscope.model.api import predict
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.catalog import CatalogError, builtin_catalog, load_catalog, load_system
from ddlscope.specs.workload import Workload, load_workload


def test_negative_bytes_named():
    with pytest.raises(ValidationError, match=r"memory_bound_bytes[\s\S]*greater than or equal to 0"):
        Workload(batch_size=1, compute_bound_flops=1.0, memory_bound_bytes=-5.0)


def test_zero_batch_and_gradients_without_tensors():
    with pytest.raises(ValidationError, match="batch_size"):
        Workload(batch_size=0, compute_bound_flops=1.0, memory_bound_bytes=1.0)
    with pytest.raises(ValidationError, match="num_gradient_tensors: expected >= 1"):
        Workload(batch_size=1, compute_bound_flops=1.0, memory_bound_bytes=1.0, dense_param_bytes=4.0)
    with pytest.raises(ValidationError, match="embedding_table_bytes: expected >= sparse_bytes_per_step"):
        Workload(batch_size=1, compute_bound_flops=1.0, memory_bound_bytes=1.0, sparse_bytes_per_step=10.0)


def test_unknown_gpu_lists_the_known_ones():
    cat = builtin_catalog()
    with pytest.raises(CatalogError, match=r"gpu: unknown GPU 'V200' \(did you mean .*\); known: .*V100-SXM2-16GB"):
        cat.system("pai-v100-nvlink-8", gpu="V200")
    with pytest.raises(CatalogError, match=r"gpu: unknown GPU 'Voodoo 5'; known: A10, "):
        cat.gpu("Voodoo 5")
    # names containing the one given come first: 'Tesla V100' names no board, the V100s contain it
    with pytest.raises(CatalogError, match=r"'Tesla V100' \(did you mean V100-PCIE-16GB, V100-PCIE-32GB, "
                                           r"V100-SXM2-16GB, V100-SXM2-32GB, V100S-PCIE-32GB\?\)"):
        cat.gpu("Tesla V100")
    # separators removed: one entry matches
    assert cat.gpu("gtx1080ti").name == "GTX-1080-Ti" and cat.gpu("RTX2070").name == "RTX-2070"
    with pytest.raises(CatalogError, match="gpu: expected a GPU name, got ''"):
        cat.gpu("")
    with pytest.raises(CatalogError, match="server: unknown server"):
        cat.system("no-such-server")


def test_zero_workers_and_ps_without_shards():
    with pytest.raises(ValidationError, match="num_workers"):
        Architecture(kind="ps_worker", num_workers=0, num_ps=1)
    with pytest.raises(ValidationError, match="num_ps: ps_worker expects >= 1 parameter-server shard"):
        Architecture(kind="ps_worker", num_workers=4)
    with pytest.raises(ValidationError, match="num_ps: expected 0 for allreduce_local"):
        Architecture(kind="allreduce_local", num_workers=4, num_ps=2)
    with pytest.raises(ValidationError, match="1w1g is one worker with one GPU"):
        Architecture(kind="1w1g", num_workers=2)
    with pytest.raises(ValidationError, match="divide evenly"):
        Architecture(kind="allreduce_cluster", num_workers=10, num_servers=4)


def test_job_larger_than_its_placement():
    system = builtin_catalog().system("pai-v100-nvlink-8")  # 8 GPUs per server
    w = Workload(batch_size=1, compute_bound_flops=1.0, memory_bound_bytes=1.0)
    with pytest.raises(ValueError, match=r"allreduce_local with 16 GPUs puts 16 GPUs on a server that has 8"):
        predict(w, Architecture(kind="allreduce_local", num_workers=16), system)
    with pytest.raises(ValueError, match=r"expected at most 8 GPUs per server \(num_servers >= 4\)"):
        predict(w, Architecture(kind="allreduce_cluster", num_workers=32, num_servers=2), system)


def test_every_catalog_entry_names_its_source():
    cat = builtin_catalog()
    required = {"P100-PCIE-16GB", "V100-PCIE-16GB", "V100-SXM2-16GB", "T4", "A100-SXM4-40GB", "A100-SXM4-80GB",
                "H100-SXM5-80GB", "H200-SXM-141GB"}
    assert required <= set(cat.gpus)
    links = {"pcie3-x16", "pcie4-x16", "pcie5-x16", "nvlink2", "nvlink3", "nvlink4", "eth-10g", "eth-25g",
             "eth-40g", "eth-100g", "eth-200g", "eth-400g", "ib-edr", "ib-hdr", "ib-ndr"}
    assert links <= set(cat.links)
    for spec in [*cat.gpus.values(), *cat.links.values(), *cat.servers.values()]:
        assert len(spec.source) > 20, spec.name
    # datasheet arithmetic: PCIe 3.0 x16 = 16 lanes * 8 GT/s * 128/130 / 8 bits = 15.754 GB/s
    assert cat.link("pcie3-x16").bandwidth_gb_s == pytest.approx(16 * 8 * 128 / 130 / 8, abs=1e-3)
    assert cat.link("eth-25g").bandwidth_gb_s == 25 / 8
    assert cat.gpu("V100M32").name == "V100-SXM2-32GB"  # PAI trace's GPU type name resolves


def test_user_catalog_and_system_files(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(
        '[gpu."MyGPU"]\npeak_tflops = { fp32 = 20.0, tf32 = 80.0, fp16 = 160.0, bf16 = 160.0 }\n'
        'memory_bandwidth_gb_s = 1000\nmemory_gb = 48\nsource = "vendor sheet"\n'
        '[system]\nserver = "dgx-a100"\ngpu = "MyGPU"\nnic = "eth-100g"\n[system.efficiency]\nnetwork = 0.5\n'
    )
    system, _ = load_system(f)
    assert system.gpu.name == "MyGPU" and system.nic.name == "eth-100g" and system.efficiency.network == 0.5
    assert "MyGPU" in load_catalog(f).gpus
    bad = tmp_path / "bad.toml"
    bad.write_text('[gpu."X"]\npeak_tflops = { fp32 = -1.0, tf32 = 1.0, fp16 = 1.0, bf16 = 1.0 }\n'
                   'memory_bandwidth_gb_s = 1\nmemory_gb = 1\n')
    with pytest.raises(CatalogError, match=r'bad.toml: \[gpu."X"\]: peak_tflops.fp32'):
        load_catalog(bad)
    wrong_slot = tmp_path / "slot.toml"
    wrong_slot.write_text('[system]\nserver = "dgx-a100"\nnic = "pcie4-x16"\n')
    with pytest.raises(CatalogError, match="nic: expected an 'ethernet' or 'infiniband' link"):
        load_system(wrong_slot)
    garbage = tmp_path / "garbage.toml"
    garbage.write_text("this is = = not toml")
    with pytest.raises(CatalogError, match=r"garbage\.toml: not valid TOML"):
        load_catalog(garbage)


def test_workload_file(tmp_path):
    f = tmp_path / "w.json"
    f.write_text('{"workload": {"name": "m", "batch_size": 4, "compute_bound_flops": 1e9, '
                 '"memory_bound_bytes": 1e6}}')
    assert load_workload(f).batch_size == 4
    f.write_text('{"batch_size": 4, "compute_bound_flops": 1e9}')
    with pytest.raises(ValueError, match=r"w.json: memory_bound_bytes: Field required"):
        load_workload(f)


def test_non_finite_bool_and_empty_workloads_are_rejected():
    with pytest.raises(ValidationError, match="compute_bound_flops"):
        Workload(batch_size=1, compute_bound_flops=float("inf"), memory_bound_bytes=1.0)
    with pytest.raises(ValidationError, match="batch_size"):
        Workload(batch_size=True, compute_bound_flops=1.0, memory_bound_bytes=1.0)
    with pytest.raises(ValidationError, match="every demand is 0"):
        Workload(batch_size=1, compute_bound_flops=0.0, memory_bound_bytes=0.0)


def test_system_file_zero_is_an_error_not_the_default(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[system]\nserver = "pai-v100-nvlink-8"\ngpus_per_server = 0\n')
    with pytest.raises(CatalogError, match="gpus_per_server: Input should be greater than or equal to 1"):
        load_system(f)


def test_catalog_server_nvlink_none_override_keeps_aliases_and_errors_name_the_file(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('[gpu."V100-SXM2-16GB"]\npeak_tflops = { fp32 = 16.0, tf32 = 16.0, fp16 = 130.0, bf16 = 16.0 }\n'
                 'memory_bandwidth_gb_s = 900\nmemory_gb = 16\n'
                 '[server."box"]\ngpu = "V100"\ngpus_per_server = 4\npcie = "pcie3-x16"\ngpus_per_pcie_root = 4\n'
                 'nvlink = "none"\nnic = "eth-25g"\nstorage_read_gb_s = 1\n')
    cat = load_catalog(f)
    assert cat.gpu("V100").peak_tflops.fp32 == 16.0  # the PAI trace's alias still resolves
    assert cat.overrides == [f"gpu.V100-SXM2-16GB (from {f})"]
    assert cat.system("box").nvlink is None
    bad = tmp_path / "bad.toml"
    bad.write_text('[server."box"]\ngpu = "NoSuchGPU"\ngpus_per_server = 4\npcie = "pcie3-x16"\n'
                   'gpus_per_pcie_root = 4\nnic = "eth-25g"\nstorage_read_gb_s = 1\n')
    with pytest.raises(CatalogError, match=r'bad\.toml: \[server\."box"\]: gpu: unknown GPU \'NoSuchGPU\''):
        load_catalog(bad)


def test_host_link_for_processes_of_one_host(tmp_path):
    """A `host` link (shared memory / loopback between processes of one host) goes in the pcie
    slot, nowhere else; a system file may carry a [calibration] table the catalog ignores."""
    f = tmp_path / "cpu.toml"
    f.write_text(
        '[gpu."cpu-core"]\npeak_tflops = { fp32 = 0.08, tf32 = 0.08, fp16 = 0.08, bf16 = 0.08 }\n'
        'memory_bandwidth_gb_s = 50\nmemory_gb = 24\n'
        '[link."loopback"]\nkind = "host"\nbandwidth_gb_s = 2.0\nlatency_us = 40.0\n'
        '[server."box"]\ngpu = "cpu-core"\ngpus_per_server = 2\npcie = "loopback"\ngpus_per_pcie_root = 2\n'
        'nic = "eth-10g"\nstorage_read_gb_s = 1.0\n'
        '[system]\nserver = "box"\n[system.efficiency]\npcie = 1.0\n'
        '[calibration]\nmatmul_size = [64, 128]\n'
    )
    system, _ = load_system(f)
    assert system.pcie.kind == "host" and system.nvlink is None
    w = Workload(batch_size=1, compute_bound_flops=0, memory_bound_bytes=0, dense_param_bytes=4e6,
                 num_gradient_tensors=2)
    row = predict(w, Architecture(kind="allreduce_local", num_workers=2), system).row(0, named=True)
    # ring all-reduce over the host link: 2 tensors x 2 (p-1) = 4 messages of 40 us, plus
    # 2 (p-1)/p S = 4e6 bytes at 2e9 bytes/s: 160e-6 + 2e-3 s
    assert row["pcie_s"] == pytest.approx(4 * 40e-6 + 4e6 / 2e9)
    bad = tmp_path / "nic.toml"
    bad.write_text(f.read_text().replace('[system]\nserver = "box"', '[system]\nserver = "box"\nnic = "loopback"'))
    with pytest.raises(CatalogError, match="nic: expected an 'ethernet' or 'infiniband' link"):
        load_system(bad)


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("gpu", 5, "a string (a catalog name)"),
    ("nic", 5, "a string (a catalog name)"),
    ("gpu", ["A100"], "a string (a catalog name)"),
    ("nvlink", None, 'a string (a catalog name, or "none" for no NVLink)'),
    ("gpus_per_server", "x", "an integer"),
    ("gpus_per_server", True, "an integer"),
    ("storage_read_gb_s", "fast", "a number (GB/s)"),
    ("efficiency", 0.5, "a table of factors"),
])
def test_system_file_wrong_type_names_file_field_and_expected_type(tmp_path, field, value, expected):
    import json
    import re
    f = tmp_path / "s9.json"
    f.write_text(json.dumps({"system": {"server": "dgx-a100", field: value}}))
    with pytest.raises(CatalogError, match=re.escape(f"s9.json: [system] {field}: expected {expected}")):
        load_system(f)


def test_system_file_server_of_wrong_type(tmp_path):
    f = tmp_path / "s9.json"
    f.write_text('{"system": {"server": 5}}')
    with pytest.raises(CatalogError, match=r"\[system\] server: expected a string \(a catalog name\), got 5"):
        load_system(f)


def test_system_file_bare_fields_ask_for_a_system_table(tmp_path):
    f = tmp_path / "bare.toml"
    f.write_text('server = "dgx-a100"\ngpus_per_server = 4\n')
    with pytest.raises(CatalogError, match=r"bare\.toml: found gpus_per_server, server at the top level; "
                                           r"put them under a \[system\] table"):
        load_system(f)
