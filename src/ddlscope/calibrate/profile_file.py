"""The calibrated System profile: catalog entries + ``[system]`` + ``[calibration]`` in one TOML file.

Layout (every number measured on the host unless its ``source`` says assumed)::

    [gpu."<device name>"]          # the device: peak per precision, memory bandwidth, memory
    [link."<link name>"]           # the measured link(s): alpha (latency_us), beta (bandwidth_gb_s)
    [server."<server name>"]       # devices per host, the link slots, NIC (assumed on a CPU host)
    [system]                       # server = "<server name>", efficiency = {...}
    [calibration]                  # host, date, load average, torch version, peak source
    [calibration.matmul]           # columns of the matmul curve (ddlscope.calibrate.microbench)
    [calibration.conv]             # convolution forward / backward curves
    [calibration.stream]           # STREAM copy / triad
    [calibration.elementwise]      # element-wise curve
    [calibration.families]         # normalisation, softmax, dropout curves
    [calibration.collectives]      # collective timings (ddlscope.calibrate.collbench)
    [[calibration.fit]]            # one alpha-beta fit per collective (or nccl-tests table)

``ddlscope predict --system-file`` (and every command that takes a system file) reads the first
four through :func:`ddlscope.specs.catalog.load_system`, which ignores ``[calibration]``;
:func:`load_calibration` reads everything back, for :mod:`ddlscope.calibrate.opmix`, parsing and
validating the file once (TOML, or the same layout as JSON).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import tomli_w

from ddlscope.specs.catalog import CatalogError, read_system_file, system_from_mapping
from ddlscope.specs.system import System

TABLES = ("matmul", "conv", "stream", "elementwise", "families", "collectives")


@dataclass
class Calibration:
    """A calibration: the System it resolves to and the measurements behind it.

    Attributes:
        system: the :class:`~ddlscope.specs.system.System` of the profile.
        entries: the catalog entries (``{"gpu": {...}, "link": {...}, "server": {...}}``) and
            ``system`` table as written.
        meta: ``[calibration]`` scalars (host, created, load_average_1m, torch, peak_source, ...).
        tables: curves by name (:data:`TABLES`), Polars DataFrames.
        fits: alpha-beta fits, one dict per collective/table (fields of
            :class:`ddlscope.calibrate.fit.AlphaBetaFit` plus ``origin`` and ``slot``).
    """

    system: System
    entries: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    fits: list[dict[str, Any]] = field(default_factory=list)

    @property
    def peak_flop_per_s(self) -> dict[str, float]:
        """The device's peak FLOP/s per precision."""
        t = self.system.gpu.peak_tflops
        return {"fp32": t.fp32 * 1e12, "tf32": t.tf32 * 1e12, "fp16": t.fp16 * 1e12, "bf16": t.bf16 * 1e12}

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        """The device's memory bandwidth (bytes/s)."""
        return self.system.gpu.memory_bandwidth_gb_s * 1e9

    def table(self, name: str) -> pl.DataFrame:
        """The curve ``name``; an empty frame if the calibration did not measure it."""
        return self.tables.get(name, pl.DataFrame())


def _frame_to_toml(frame: pl.DataFrame) -> dict[str, list]:
    return {c: frame[c].to_list() for c in frame.columns}


def write_calibration(cal: Calibration, path: str | Path, header: str = "") -> Path:
    """Write ``cal`` as a system file (module docstring); ``header`` becomes leading comments.

    Returns the path. Raises ``OSError`` if it cannot be written.
    """
    path = Path(path)
    doc: dict[str, Any] = {k: v for k, v in cal.entries.items() if k in ("gpu", "link", "server", "system")}
    calib: dict[str, Any] = {k: v for k, v in cal.meta.items() if v is not None}
    for name in TABLES:
        if name in cal.tables and not cal.tables[name].is_empty():
            calib[name] = _frame_to_toml(cal.tables[name])
    if cal.fits:
        calib["fit"] = [{k: v for k, v in f.items() if v is not None} for f in cal.fits]
    doc["calibration"] = calib
    text = "".join(f"# {line}\n" for line in header.splitlines()) + tomli_w.dumps(doc)
    path.write_text(text)
    return path


def load_calibration(path: str | Path) -> Calibration:
    """Read a system file written by ``ddlscope calibrate`` (or any TOML/JSON system file: the
    ``[calibration]`` part is then empty). The file is read and parsed once; its catalog entries
    and ``[system]`` are validated as :func:`ddlscope.specs.catalog.load_system` does.

    Raises:
        CatalogError: unreadable or invalid file (naming it), a ``[calibration]`` that is not a
            table, or a ``[calibration]`` table whose columns have different lengths.
    """
    path = Path(path)
    data = read_system_file(path)
    system, _ = system_from_mapping(data, origin=str(path))
    calib = data.get("calibration", {}) or {}
    if not isinstance(calib, dict):
        raise CatalogError(f"{path}: [calibration]: expected a table, got {type(calib).__name__}")
    tables: dict[str, pl.DataFrame] = {}
    for name in TABLES:
        cols = calib.get(name)
        if cols is None:
            continue
        if not isinstance(cols, dict) or not all(isinstance(v, list) for v in cols.values()):
            raise CatalogError(f"{path}: [calibration.{name}]: expected a table of columns (lists)")
        lengths = {len(v) for v in cols.values()}
        if len(lengths) > 1:
            raise CatalogError(f"{path}: [calibration.{name}]: columns of different lengths {sorted(lengths)}")
        tables[name] = pl.DataFrame(cols)
    meta = {k: v for k, v in calib.items() if k not in (*TABLES, "fit")}
    entries = {k: data[k] for k in ("gpu", "link", "server", "system") if k in data}
    return Calibration(system=system, entries=entries, meta=meta, tables=tables, fits=list(calib.get("fit", [])))
