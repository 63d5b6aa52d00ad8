"""Shared test fixtures: where the real public data lies."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(os.environ.get("DDLSCOPE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout (or ``$DDLSCOPE_SHARED_DATA``); skips if absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA
