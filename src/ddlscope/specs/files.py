"""Reading the small inputs users give ddlscope: TOML/JSON files (catalogs, systems, workloads,
scenarios, column and model maps) and ``KEY=VALUE`` options (``--map``, ``--server-for``, inline
scenarios, model mixes): one reader each, one kind of error."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable
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


def parse_pairs(items: Iterable[str], *, what: str, expected: str = "KEY=VALUE") -> dict[str, str]:
    """``["a=1", " b = x "]`` -> ``{"a": "1", "b": "x"}`` (both sides stripped, order kept).

    Args:
        items: the ``KEY=VALUE`` strings (one option value each, or the parts of a comma list).
        what: the option or field the strings come from, named in errors (``--map``).
        expected: the form shown in errors (``GPU=SERVER``).

    Raises:
        ValueError: an item without ``=`` or with an empty side (``<what>: expected <expected>,
            got '<item>'``), or a key given twice.
    """
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise ValueError(f"{what}: expected {expected}, got {item!r}")
        if key in out:
            raise ValueError(f"{what}: {key!r} is given twice")
        out[key] = value
    return out
