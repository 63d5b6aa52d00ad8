"""Where the public data folder lies (``shared/data``: traces, tables, texts; see its SOURCES.md).

One rule for every command that reads it by default (``ps-train``'s default input,
``validate --published``): ``$DDLSCOPE_SHARED_DATA``, else the nearest ``shared/data`` folder
above the working directory, else the nearest above the installed package (so a checkout beside
``shared/`` finds it from any working directory).
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "DDLSCOPE_SHARED_DATA"
SEARCHED = ("$DDLSCOPE_SHARED_DATA, else the nearest shared/data folder above the working directory or above "
            "the installed ddlscope package")
"""The search order, in words, for error messages."""


def find_shared_data() -> Path | None:
    """The shared data folder, or None when there is none (see the module docstring for the order).

    Raises:
        FileNotFoundError: ``$DDLSCOPE_SHARED_DATA`` is set but is not a folder (named in the message).
    """
    if env := os.environ.get(ENV_VAR):
        if not Path(env).is_dir():
            raise FileNotFoundError(f"{ENV_VAR}={env}: not a folder")
        return Path(env)
    for base in (Path.cwd(), Path(__file__).resolve().parent):
        for parent in (base, *base.parents):
            candidate = parent / "shared" / "data"
            if candidate.is_dir():
                return candidate
    return None
