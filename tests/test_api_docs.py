"""The Python API as documented: every ``python`` block of docs/api.md runs, in order, in one
namespace, in an empty folder (they assert their own figures: 304 jobs of the built-in population,
1,181 Gavel jobs all accounted for, the nccl-tests fit at the 230 GB/s its rows were made with); and
the notebook of examples/ executes (nbclient) on the shared data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def test_every_api_doc_example_runs(shared_data, tmp_path, monkeypatch):
    blocks = _blocks(ROOT / "docs" / "api.md")
    assert len(blocks) >= 7  # setup, characterize x2, trace, calibrate, validate, predict/whatif, rpc
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DDLSCOPE_SHARED_DATA", str(shared_data))
    namespace: dict = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"docs/api.md python block {i + 1}", "exec"), namespace)
    # what the examples left behind: a report folder and the results they named
    assert (tmp_path / "gavel-report" / "index.html").is_file()
    assert namespace["res"].accounting["jobs"].sum() == 1181
    assert namespace["cal"].fits[0]["slot"] == "nvlink"


def test_results_are_frozen_and_package_commands_callable(shared_data):
    import dataclasses

    import ddlscope
    import ddlscope.calibrate.api

    res = ddlscope.characterize(scenarios=["ethernet-100g"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.notes = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        res.headline["jobs"] = 0  # type: ignore[index]
    # the commands' packages stay packages (their modules reachable) and are callable as the function
    assert callable(ddlscope.calibrate) and callable(ddlscope.validate) and callable(ddlscope.profile)
    assert ddlscope.calibrate.api.run_calibration is not None
    assert ddlscope.profile("resnet50", batch_size=8).workload.batch_size == 8


def test_example_notebook_executes(shared_data, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))  # the kernel imports this checkout
    monkeypatch.setenv("DDLSCOPE_SHARED_DATA", str(shared_data))
    nb = nbformat.read(ROOT / "examples" / "api_tour.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "1,181 jobs read, 650 evaluated" in text


def test_api_rejects_bad_names_and_inputs_in_one_line(shared_data):
    """Where the CLI says one line, the API raises one error: an unknown server for a trace that
    would not need it, no logs, file-input options with a table."""
    import polars as pl

    import ddlscope
    from ddlscope.specs.catalog import CatalogError

    trace = shared_data / "hta_traces" / "trace_filter" / "sampled_rank-0.json.gz"
    with pytest.raises(CatalogError, match="unknown server 'nosuch'"):
        ddlscope.trace(trace, system="nosuch")
    with pytest.raises(ValueError, match="logs: expected a path, a list of paths or a polars DataFrame, got NoneType"):
        ddlscope.rpc_dissect(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="logs: expected at least one RPC log file"):
        ddlscope.rpc_dissect([])
    with pytest.raises(ValueError, match="for file input only"):
        ddlscope.rpc_dissect(pl.DataFrame({"rpc_id": [1]}), time_unit="us")
