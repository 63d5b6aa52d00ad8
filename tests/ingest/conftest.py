"""Fixtures of the ingest tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from pai_fixture import write_pai


@pytest.fixture
def pai_dir(tmp_path: Path) -> Path:
    """A directory holding the fixture PAI trace of pai_fixture.py."""
    return write_pai(tmp_path / "pai")
