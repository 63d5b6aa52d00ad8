"""Report folders: checked before an analysis runs, and cleared of a previous report's files.

A ddlscope report folder holds only ``index.html``, ``summary.json``, ``figures/`` and ``tables/``
(:class:`~ddlscope.report.html.HtmlReport`). The rules, for every ``--out``/``--report`` folder:

* a path that is a file (or lies under one) is an error, before anything is computed;
* a new or empty folder is written;
* a folder that holds a ddlscope report (those entries only) is reused: the previous report's
  figures (``.png``/``.svg``) and tables (``.csv``/``.parquet``) are removed first, so that no
  stale file (e.g. a ``rejected_rows.csv`` of an earlier run) survives;
* any other non-empty folder is refused unless ``overwrite`` is given; then the report's files are
  written into it and nothing else in it is touched.
"""

from __future__ import annotations

import os
from pathlib import Path

REPORT_ENTRIES: frozenset[str] = frozenset({"index.html", "summary.json", "figures", "tables"})
"""What a report folder holds (see :mod:`ddlscope.report.html`)."""

_OWN_SUFFIXES = {"figures": (".png", ".svg"), "tables": (".csv", ".parquet")}


def is_report_folder(path: Path) -> bool:
    """Whether ``path`` is a folder holding a ddlscope report and nothing else (``summary.json``
    present — a report written without figures has no ``index.html`` — and no entry outside
    :data:`REPORT_ENTRIES`)."""
    if not path.is_dir():
        return False
    names = {p.name for p in path.iterdir()}
    return "summary.json" in names and names <= REPORT_ENTRIES


def check_report_dir(out: str | Path, option: str = "--out", overwrite: bool = False) -> Path:
    """Check a report folder before the analysis (module docstring for the rules).

    Args:
        out: the folder.
        option: how the error names it (``--out``, ``--report``).
        overwrite: allow a non-empty folder that holds no ddlscope report.

    Returns:
        ``out`` as a Path.

    Raises:
        ValueError: ``out`` (or a folder above it) is a file, ``out`` cannot be created (it is
            created and removed again to find out) or written, or it is a non-empty folder that
            holds no ddlscope report and ``overwrite`` is not set.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{option} {out}: is a file; expected a folder for the report")
    if out.is_dir():
        if any(out.iterdir()) and not is_report_folder(out) and not overwrite:
            raise ValueError(f"{option} {out}: the folder is not empty and holds no ddlscope report; name a new or "
                             "empty folder, or pass --overwrite to write the report's files into it (others are "
                             "kept)")
        base = out
        if not os.access(out, os.W_OK | os.X_OK):
            raise ValueError(f"{option} {out}: cannot write in the folder (permission denied)")
        return out
    missing = [out]
    while not missing[-1].parent.exists() and missing[-1].parent != missing[-1]:
        missing.append(missing[-1].parent)
    base = missing[-1].parent
    if not base.is_dir():
        raise ValueError(f"{option} {out}: {base} is a file; expected a folder for the report")
    created: list[Path] = []
    try:  # probe: create the missing folders and remove them again (the report creates them at the end)
        for folder in reversed(missing):
            folder.mkdir()
            created.append(folder)
    except OSError as exc:
        raise ValueError(f"{option} {out}: cannot create the folder: {exc.strerror or exc}") from exc
    finally:
        for folder in reversed(created):
            folder.rmdir()
    return out


def clear_previous_report(out: str | Path) -> int:
    """Remove the figures and tables of a previous ddlscope report in ``out`` (only when
    :func:`is_report_folder`); returns how many files were removed."""
    out = Path(out)
    if not is_report_folder(out):
        return 0
    removed = 0
    for sub, suffixes in _OWN_SUFFIXES.items():
        folder = out / sub
        if folder.is_dir():
            for f in folder.iterdir():
                if f.is_file() and f.suffix in suffixes:
                    f.unlink()
                    removed += 1
    return removed
