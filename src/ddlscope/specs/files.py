"""Reading the small TOML/JSON files users give ddlscope (catalogs, systems, workloads,
scenarios, column and model maps): one reader, one kind of error."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any


def read_toml_or_json(path: str | Path, section: str | None = None) -> Any:
    """The parsed content of ``path``: JSON if it ends in ``.json``, else TOML.

    With ``section``, a top-level table of that name is returned instead of the whole document
    when the document has one (so both ``[workload] ...`` and bare fields are accepted).

    Raises:
        ValueError: the file cannot be read or is not UTF-8 (``<path>: cannot read: ...``) or does not parse
            (``<path>: not valid TOML|JSON: <parser message with line>``).
    """
    path = Path(path)
    kind = "JSON" if path.suffix.lower() == ".json" else "TOML"
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: cannot read: not UTF-8 text (byte {exc.start})") from exc
    try:
        data = json.loads(text) if kind == "JSON" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not valid {kind}: {exc}") from exc
    if section is not None and isinstance(data, dict) and isinstance(data.get(section), dict):
        return data[section]
    return data
