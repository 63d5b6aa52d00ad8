"""Workloads of a population's models: zoo profiles, cached, as a table to join on.

A cluster trace names models (zoo names) and sometimes batch sizes; the step-time model needs each
job's Workload. :class:`WorkloadLibrary` profiles each distinct (model, batch size, precision)
once with :func:`ddlscope.profile.profile_model` and keeps the result. The zoo models at their
default sizes in FP32 and FP16 are shipped pre-profiled as package data
(``population/data/zoo_workloads.json``, written by ``python -m ddlscope.population.workloads``),
so the built-in population needs no tracing; a test checks the shipped numbers against a fresh
profile.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl

from ddlscope.model.jobs import JOB_SCHEMA, workload_columns
from ddlscope.specs.workload import Workload

WORKLOAD_COLUMNS: tuple[str, ...] = (
    "batch_size", "precision", "compute_bound_flops", "memory_bound_bytes", "memory_bound_flops", "input_bytes",
    "stored_input_bytes", "dense_param_bytes", "num_gradient_tensors", "sparse_bytes_per_step",
    "embedding_table_bytes", "peak_memory_bytes",
)
"""The Jobs-table columns a workload fills (see :data:`ddlscope.model.jobs.JOB_SCHEMA`)."""

CACHE_FILE = "data/zoo_workloads.json"
CACHED_PRECISIONS = ("fp32", "fp16")

Key = tuple[str, int | None, str]


@cache
def _shipped() -> dict[Key, Workload]:
    text = resources.files("ddlscope.population").joinpath(CACHE_FILE).read_text()
    data = json.loads(text)
    out: dict[Key, Workload] = {}
    for entry in data["workloads"]:
        w = Workload.model_validate(entry["workload"])
        out[(entry["model"], entry["batch_size"], entry["precision"])] = w
        if entry.get("default_batch"):
            out[(entry["model"], None, entry["precision"])] = w
    return out


def shipped_models(precision: str = "fp32") -> list[str]:
    """The zoo models whose default-size workload ships pre-profiled in ``precision``, sorted."""
    return sorted({m for (m, b, p) in _shipped() if b is None and p == precision})


class WorkloadLibrary:
    """Workloads by (zoo model, batch size or None for the zoo default, precision).

    Args:
        use_shipped: start from the pre-profiled zoo workloads shipped with ddlscope.
        on_profile: called with ``(model, batch_size, precision)`` before each fresh profile (for
            a progress display).

    Raises (from :meth:`get`):
        ddlscope.profile.ProfileError: a model that cannot be profiled (unknown name, bad factory).
    """

    def __init__(self, use_shipped: bool = True, on_profile: Callable[[str, int | None, str], None] | None = None):
        self._known: dict[Key, Workload] = dict(_shipped()) if use_shipped else {}
        self._on_profile = on_profile

    def get(self, model: str, batch_size: int | None, precision: str = "fp32") -> Workload:
        """The Workload of ``model`` at ``batch_size`` samples per GPU (None: zoo default)."""
        key = (model, batch_size, precision)
        if key not in self._known:
            if self._on_profile:
                self._on_profile(model, batch_size, precision)
            from ddlscope.profile import profile_model  # heavy import (torch, transformers): only when needed

            self._known[key] = profile_model(model, batch_size=batch_size, precision=precision).workload
        return self._known[key]

    def table(self, keys: Iterable[Key]) -> pl.DataFrame:
        """One row per key: ``model``, ``batch_key`` (the requested batch, null = default),
        ``precision_key`` and the :data:`WORKLOAD_COLUMNS` (``batch_size`` is the actual one)."""
        rows = []
        for model, batch, precision in keys:
            w = self.get(model, batch, precision)
            cols = workload_columns(w)
            rows.append({"model": model, "batch_key": batch, "precision_key": precision,
                         **{k: cols[k] for k in WORKLOAD_COLUMNS}})
        schema = {"model": pl.String, "batch_key": pl.Int64, "precision_key": pl.String,
                  **{k: JOB_SCHEMA[k][0] for k in WORKLOAD_COLUMNS}}
        return pl.DataFrame(rows, schema=schema)


def refresh_shipped(path: Path) -> None:
    """Profile every zoo model at its default sizes in :data:`CACHED_PRECISIONS` and write ``path``."""
    import torch

    from ddlscope import __version__
    from ddlscope.profile import ZOO, profile_model

    entries: list[dict[str, Any]] = []
    for name, entry in ZOO.items():
        for precision in CACHED_PRECISIONS:
            print(f"profiling {name} {precision} ...", file=sys.stderr)
            w = profile_model(name, precision=precision).workload
            entries.append({"model": name, "batch_size": entry.batch_size, "precision": precision,
                            "default_batch": True, "workload": w.model_dump()})
    payload = {
        "generated_by": "python -m ddlscope.population.workloads",
        "ddlscope_version": __version__,
        "torch_version": torch.__version__,
        "note": "ddlscope profile NAME --precision P at the zoo's default sizes, SGD, fused attention",
        "workloads": entries,
    }
    path.write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    target = Path(__file__).with_name("data") / "zoo_workloads.json"
    target.parent.mkdir(exist_ok=True)
    refresh_shipped(target)
    print(f"wrote {target}", file=sys.stderr)
