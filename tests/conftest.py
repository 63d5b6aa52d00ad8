"""Shared test fixtures: where the real public data lies."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddlscope.shared_data import find_shared_data


def _find_shared_data() -> Path:
    """The package's own rule (:func:`ddlscope.shared_data.find_shared_data`), else where it would be
    beside this checkout (so a missing folder is named in the skip reason)."""
    try:
        found = find_shared_data()
    except FileNotFoundError:  # $DDLSCOPE_SHARED_DATA names no folder: skip, naming it
        found = Path(os.environ["DDLSCOPE_SHARED_DATA"])
    return found if found is not None else Path(__file__).resolve().parents[2] / "shared" / "data"


SHARED_DATA = _find_shared_data()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``shared/data`` in the nearest parent folder (``../shared/data`` beside the checkout), or
    ``$DDLSCOPE_SHARED_DATA``; skips the test if absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}, in a parent folder's shared/data or at "
                    "$DDLSCOPE_SHARED_DATA (README, 'Real data')")
    return SHARED_DATA
