"""Shared test fixtures: where the real public data lies."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _find_shared_data() -> Path:
    if env := os.environ.get("DDLSCOPE_SHARED_DATA"):
        return Path(env)
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return Path(__file__).resolve().parents[2] / "shared" / "data"


SHARED_DATA = _find_shared_data()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``shared/data`` in the nearest parent folder (``../shared/data`` beside the checkout), or
    ``$DDLSCOPE_SHARED_DATA``; skips the test if absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA
