"""Options are checked before a command does any work, and choice errors are worded alike."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import ddlscope.calibrate.api
import ddlscope.cli.pstrain
import ddlscope.profile
import ddlscope.validate.local
from ddlscope.cli.main import app
from ddlscope.report.console import expected_one_of

runner = CliRunner()


def _no_work(*args, **kwargs):
    raise AssertionError("the command started its work before checking its options")


@pytest.fixture(autouse=True)
def _forbid_work(monkeypatch):
    monkeypatch.setattr(ddlscope.profile, "profile_model", _no_work)
    monkeypatch.setattr(ddlscope.calibrate.api, "run_calibration", _no_work)
    monkeypatch.setattr(ddlscope.validate.local, "validate_local", _no_work)
    monkeypatch.setattr(ddlscope.cli.pstrain, "_ps_train", _no_work)


def test_expected_one_of_lists_choices_in_words():
    assert expected_one_of("json", ("table", "json", "csv")) == "json"
    with pytest.raises(ValueError, match=r"^--format: expected table, json or csv, got 'xml'$"):
        expected_one_of("xml", ("table", "json", "csv"))
    with pytest.raises(ValueError, match=r"^--by: expected op or module, got 'x'$"):
        expected_one_of("x", ("op", "module"), "--by")


@pytest.mark.parametrize(("args", "message"), [
    (["profile", "resnet50", "--format", "xml"], "--format: expected table, json or csv, got 'xml'"),
    (["profile", "resnet50", "--by", "nonsense"], "--by: expected op, module or phase, got 'nonsense'"),
    (["profile", "resnet50", "--top", "-1"], "--top: expected a number of rows >= 0 (0: all), got -1"),
    (["predict", "--format", "xml"], "--format: expected table, json or csv, got 'xml'"),
    (["whatif", "--format", "xml"], "--format: expected table, json or csv, got 'xml'"),
    (["catalog", "gpus", "--format", "xml"], "--format: expected table, json or csv, got 'xml'"),
    (["ps-train", "--format", "xml"], "--format: expected table, json or csv, got 'xml'"),
    (["validate", "--format", "yaml"], "--format: expected table, json or csv, got 'yaml'"),
    (["calibrate", "--quick", "--no-collectives", "--device", "cpu", "--format", "csv"],
     "--format: expected table or json, got 'csv'"),
    (["calibrate", "--quick", "--no-collectives", "--device", "cpu", "--nic", "nosuch"],
     "--nic: unknown link 'nosuch'; known: "),
    (["predict", "--model", "resnet50", "-a", "3d", "-w", "8", "--parallel", "ep=8,ep=4"],
     "--parallel: ep is given 2 times (ep=8, ep=4); give each key once"),
    (["whatif", "--model", "resnet50", "-a", "3d", "-w", "8", "--parallel", "tp=0"],
     "--parallel: tp expects a whole number >= 1, got '0'"),
])
def test_options_are_checked_before_work(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert message in res.output.replace("\n", "")
    assert "Traceback" not in res.output and "('table'" not in res.output


def test_calibrate_help_offers_the_formats_it_accepts():
    res = runner.invoke(app, ["calibrate", "--help"], env={"COLUMNS": "200", "TERM": "dumb"})
    assert res.exit_code == 0
    line = next(x for x in res.output.splitlines() if "--format" in x)
    assert "table or json" in line and "csv" not in line


def test_scenario_errors_list_valid_keys_and_name_the_file(tmp_path):
    res = runner.invoke(app, ["whatif", "--scenario", "x:foo=1"])
    assert res.exit_code == 2
    text = res.output.replace("\n", "")
    assert "--scenario 'x:foo=1': scenario.foo: Extra inputs are not permitted (got '1'); valid keys: " in text
    assert "gpu, nic, nvlink, pcie" in text and "upgrade_only" in text
    bad_key = tmp_path / "k.toml"
    bad_key.write_text('[[scenario]]\nname = "a"\nfoo = 1\n')
    res = runner.invoke(app, ["whatif", "--scenario", str(bad_key)])
    assert f"{bad_key}: scenario #1: foo: Extra inputs are not permitted" in res.output.replace("\n", "")
    assert "valid keys: name, description" in res.output.replace("\n", "")
    unknown = tmp_path / "sc.toml"
    unknown.write_text('[[scenario]]\nname = "a"\ngpu = "NOPE"\n')
    res = runner.invoke(app, ["whatif", "--scenario", str(unknown)])
    assert res.exit_code == 2 and f"{unknown}: scenario a: gpu: unknown GPU 'NOPE'" in res.output.replace("\n", "")
    twice = tmp_path / "twice.toml"
    twice.write_text('[[scenario]]\nname = "a"\ngpu = "A100"\n[[scenario]]\nname = "a"\ngpu = "H200"\n')
    res = runner.invoke(app, ["whatif", "--scenario", str(twice), "--scenario", "gpu-h100"])
    assert res.exit_code == 2
    assert f"scenario 'a' is given 2 times ({twice}, {twice}): scenario names must be unique" in \
        res.output.replace("\n", "")


def test_output_paths_under_a_file_or_at_a_folder_name_the_option_before_work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("mine")
    (tmp_path / "adir").mkdir()
    for args, message in (
        (["profile", "resnet18", "--params-out", "afile/p.csv"],
         "--params-out afile/p.csv: afile is a file, not a folder"),
        (["profile", "resnet18", "--ops-out", "adir"], "--ops-out adir: expected a .parquet or .csv file name"),
        (["profile", "resnet18", "--ops-out", "adir.csv/x.csv"], None),  # a new folder: fine
        (["calibrate", "--no-bench", "-s", "dgx-a100", "-o", "afile/x.toml"],
         "--out afile/x.toml: afile is a file, not a folder"),
        (["calibrate", "--no-bench", "-s", "dgx-a100", "-o", "adir"], "--out adir: is a folder; expected a file name"),
    ):
        res = runner.invoke(app, args)
        if message is None:  # passes the checks and reaches the (forbidden) work
            assert isinstance(res.exception, AssertionError)
            continue
        assert res.exit_code == 2, res.output
        assert message in res.output.replace("\n", "") and "Errno" not in res.output


def test_ps_train_network_emulation_summary_is_readable_text():
    from ddlscope.cli.pstrain import netem_text

    assert netem_text({"requested": {}, "applied": None}) == "off"
    assert netem_text({"applied": None, "skipped": "no CAP_NET_ADMIN"}) == "not applied: no CAP_NET_ADMIN"
    applied = {"qdisc": "netem", "bandwidth_mbit": 100.0, "delay_ms": 10.0, "loss_pct": None, "namespaces": 5}
    assert netem_text({"applied": applied}) == "netem on 5 network namespaces: 100 Mbit/s, 10 ms one-way delay"
    applied = {"qdisc": "none", "bandwidth_mbit": None, "delay_ms": None, "loss_pct": None, "namespaces": 3}
    assert netem_text({"applied": applied}) == "3 network namespaces, no shaping"


def test_version_prints_the_package_version():
    from ddlscope import __version__

    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output == f"ddlscope {__version__}\n"


def test_help_reads_as_flags_and_click_types_with_whole_sentences():
    res = runner.invoke(app, ["characterize", "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0
    text = res.output
    assert "--figures / --no-figures" in text  # a boolean flag with its negation, no '<bool>'
    assert "<bool>" not in text and "<list[" not in text and "<str>" not in text
    assert "-o, --out PATH" in text and "--server-gpus INTEGER" in text and "--scenario TEXT" in text
    # the docstring's line breaks are not kept: the paragraph is re-wrapped to the terminal, so the
    # sentence "every zoo model under each architecture and GPU count the PAI study considers" runs on
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines)
    joined = " ".join(line.strip() for line in lines)
    assert "every zoo model under each architecture and GPU count the PAI study considers" in joined
    start = next(k for k, line in enumerate(lines) if line.strip().startswith("Without a trace"))
    paragraph = lines[start:lines.index("", start)]
    # filled to the width: no line but the last ends short (the rich format kept the docstring's breaks)
    assert len(paragraph) >= 2 and all(len(line) >= 65 for line in paragraph[:-1]), paragraph


def test_console_headers_break_at_underscores_never_mid_word():
    import io

    import polars as pl

    from ddlscope.report.console import emit, header_lines

    assert header_lines("mean_share_compute_bound", 13) == "mean_share_\ncompute_bound"
    assert header_lines("mean_share_compute_bound", 12) == "mean_share_\ncompute_\nbound"
    assert header_lines("jobs", 8) == "jobs"
    frame = pl.DataFrame({f"mean_share_{k}": [0.25] for k in ("data_io", "compute_bound", "memory_bound", "pcie",
                                                               "nvlink", "network", "comm")})
    buf = io.StringIO()
    emit(frame, "table", stream=buf)  # piped: 200 columns, the headers fit on one line
    assert "mean_share_compute_bound" in buf.getvalue()
    from rich.console import Console

    from ddlscope.report.console import rich_table

    narrow = Console(width=80, file=io.StringIO())
    narrow.print(rich_table(frame, width=80))
    text = narrow.file.getvalue()
    header = [line for line in text.splitlines() if line.startswith("┃")]
    words = {w.strip() for line in header for w in line.strip("┃").split("┃")}
    # every header line is a whole underscore-separated part: "compute_" then "bound", never "compu"/"te"
    assert {"mean_", "share_", "compute_", "bound", "comm"} <= words, words
    assert all(len(line) <= 80 for line in text.splitlines())


@pytest.mark.parametrize(("spec", "message"), [
    ("ep=8,ep=4", "--parallel: ep is given 2 times (ep=8, ep=4); give each key once"),
    ("tp=2,pp=2,tp=4,sharding=zero3,tp=2,sharding=zero1",
     "--parallel: tp is given 3 times (tp=2, tp=4, tp=2); sharding is given 2 times (sharding=zero3, "
     "sharding=zero1); give each key once"),
    ("tp=0", "--parallel: tp expects a whole number >= 1, got '0'"),
    ("pp=-2", "--parallel: pp expects a whole number >= 1, got '-2'"),
    ("microbatches=1.5", "--parallel: microbatches expects a whole number >= 1, got '1.5'"),
    ("cp=two", "--parallel: cp expects a whole number >= 1, got 'two'"),
    ("stages=2", "--parallel: expected key=value with a key of sharding, tp, pp, cp, ep, virtual_stages, "
                 "microbatches, got 'stages=2' (unknown key 'stages')"),
    ("tp", "--parallel: expected key=value with a key of sharding, tp, pp, cp, ep, virtual_stages, "
           "microbatches, got 'tp'"),
])
def test_parallel_spec_errors_name_the_option_and_the_key(spec, message):
    res = runner.invoke(app, ["predict", "-a", "3d", "-w", "32", "-s", "dgx-a100", "--parallel", spec])
    assert res.exit_code == 2, res.output
    assert res.output.replace("\n", "") == f"error: {message}"


def test_parallel_spec_takes_each_key_once_and_skips_empty_pairs():
    from ddlscope.cli.common import parse_parallel

    assert parse_parallel(" tp=2,,pp = 4 ,sharding=zero3") == {"tp": 2, "pp": 4, "sharding": "zero3"}
    assert parse_parallel(None) == {}


def test_catalog_efficiencies_shows_what_prices_each_generation():
    import json as _json

    from typer.testing import CliRunner as _Runner

    from ddlscope.cli.main import app as _app

    res = _Runner().invoke(_app, ["catalog", "efficiencies", "-f", "json"])
    assert res.exit_code == 0, res.output
    rows = {r["generation"]: r for r in _json.loads(res.output)}
    # Pascal GPUs have no tensor cores: their GEMMs take cuda_gemm_eff (0.8), the tensor ones are not shown
    assert rows["pascal"]["tensor_gemm_eff"] is None and rows["pascal"]["attention_eff"] is None
    assert rows["pascal"]["cuda_gemm_eff"] == 0.8
    # TF32 without its own value is priced at tensor_gemm_eff (Ampere 0.75), and the table says so
    assert rows["ampere"]["tf32_gemm_eff"] == rows["ampere"]["tensor_gemm_eff"] == 0.75
    assert rows["ampere"]["attention_eff"] == 0.615 and rows["ampere"]["attention_v1_eff"] == 0.325
