"""One rule for finding shared/data: the environment variable, else above the working folder, else
above the installed package (so any working directory of a checkout beside shared/ finds it)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ddlscope.cli.main import app
from ddlscope.shared_data import find_shared_data


def test_found_above_the_package_from_any_working_folder(shared_data, tmp_path, monkeypatch):
    monkeypatch.delenv("DDLSCOPE_SHARED_DATA", raising=False)
    monkeypatch.chdir(tmp_path)  # no shared/ above a pytest tmp folder
    found = find_shared_data()
    assert found is not None and (found / "SOURCES.md").is_file()
    assert found.resolve() == shared_data.resolve()


def test_the_variable_wins_and_a_bad_one_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("DDLSCOPE_SHARED_DATA", str(tmp_path))
    assert find_shared_data() == tmp_path
    monkeypatch.setenv("DDLSCOPE_SHARED_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=r"DDLSCOPE_SHARED_DATA=.*nowhere: not a folder"):
        find_shared_data()


def test_validate_published_finds_the_data_outside_the_checkout(shared_data, tmp_path, monkeypatch):
    """`ddlscope validate --published` from a working folder outside the checkout used to say the data
    was not found (it searched above the working folder only)."""
    from ddlscope.cli.validate import published_data_dir

    monkeypatch.delenv("DDLSCOPE_SHARED_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    assert (published_data_dir(None) / "dle_tables").is_dir()
    res = CliRunner().invoke(app, ["validate", "--published", "--data", str(tmp_path / "none")])
    assert res.exit_code == 2 and "--data" in res.output and "not a folder" in res.output
