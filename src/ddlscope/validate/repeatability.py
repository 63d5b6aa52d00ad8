"""How well any model can do on a measurement table: the spread of the rows that measure one configuration.

A measurement table often measures one configuration more than once: the Lambda tables run the
same GPU, model, precision and batch on several testbeds (six H100 SXM5 systems: Lambda's own, Dell,
Dell Texas, Supermicro, 1CC, RAIDZ1; two H100 PCIe), NVIDIA's DLE tables repeat a V100 row across
DGX-1 and DGX-2. A model that prices a row from its configuration gives all of them one prediction,
so their spread is error that no such model removes: the floor under its MAPE, and (the two GPUs
of a pair measured apart) under the error of a cross-GPU ratio.

:func:`configuration_repeatability` groups the rows of any table by the columns that define the
priced configuration (:data:`CONFIGURATION_COLUMNS`, those the table has) and reports, pooled over
the groups, the log standard deviation, the MAPE a model exact up to that noise would have, the least
MAPE any one value per group reaches, and, with ``label``, how far each testbed (or container, or
date) sits from the groups' centres. ``benchmarks/fidelity_lambda_repeatability.py`` prints it for the
shared Lambda and DLE one-GPU rows. :func:`ddlscope.validate.published.pollux_repeatability` is the
same question for Pollux's placements (the same placement written in another server order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from ddlscope.validate.published import _least_mape, lognormal_mape

CONFIGURATION_COLUMNS: tuple[str, ...] = (
    "model", "gpu", "gpus", "servers", "server", "batch_per_gpu", "precision", "optimizer", "optimizer_kernels",
    "seq_len", "image_size", "input_data", "conv_layout", "attention", "amp", "overlap", "pcie", "nvlink", "nic",
)
"""Columns of a checked measurement table (:mod:`ddlscope.validate.measurements`, docs/validation.md)
that the prediction reads: rows equal in all of them (those the table has) get one prediction."""


@dataclass(frozen=True)
class Repeatability:
    """The spread of a table's repeated configurations (:func:`configuration_repeatability`).

    Attributes:
        groups: one row per configuration measured at least twice: the key columns, ``rows``,
            ``log_sd`` (the group's standard deviation of ``ln(measured)``, ``n - 1`` degrees of
            freedom), ``max_over_min`` (largest over smallest measurement), ``labels`` (the
            ``label`` column's values in the group, sorted; absent without ``label``).
        summary: pooled over the groups: ``groups``, ``rows``, ``log_sd`` (``sqrt(sum of squares
            about each group's mean log / sum (n - 1))``, the unbiased pooled estimate),
            ``mape_noise`` (:func:`~ddlscope.validate.published.lognormal_mape` of ``log_sd``: what
            a model exact up to log-normal noise scores on single measurements), ``ratio_log_sd``
            (``sqrt(2) log_sd``: the noise of the ratio of two such measurements, taken independent)
            and ``ratio_mape_noise`` (its MAPE floor), ``mape_least`` (the least MAPE one value per
            group reaches on its own rows: a distribution-free lower bound, optimistic by one value
            fitted per group), and ``mape_model`` (the table's own ``predicted`` against ``measured``
            on the same rows' finite predictions; None without ``predicted`` or without any),
            ``mape_model_rows`` (the rows it is taken over) and ``mape_model_skipped`` (repeated
            rows whose prediction is null or not finite: counted, not silently dropped; both None
            without ``predicted``). MAPEs and SDs are fractions.
        offsets: with ``label``: one row per label value: ``rows`` (its rows in repeated groups),
            ``median_log_offset`` (median of ``ln(measured) - mean ln(measured)`` of its group) and
            ``median_offset`` (``exp`` of that, minus 1: a testbed measuring 7 % below the groups'
            geometric means reads -0.07); else None.
    """

    groups: pl.DataFrame
    summary: dict[str, float | int | None]
    offsets: pl.DataFrame | None


def configuration_repeatability(rows: pl.DataFrame, key: Sequence[str] | None = None, *,
                                measured: str = "measured", predicted: str | None = None,
                                label: str | None = None) -> Repeatability:
    """The spread of ``rows`` that measure one configuration (module docstring).

    Args:
        rows: a measurement table's rows (a checked table's ``rows``, or the rows of
            :func:`~ddlscope.validate.measurements.validate_measurements`), one measurement each.
        key: the columns that define a configuration; default the :data:`CONFIGURATION_COLUMNS`
            ``rows`` has. Nulls compare equal (a column left empty on two rows is one value).
        measured: the measured column (throughput or step time: the log spread is the same), > 0.
        predicted: the column of the model's prediction in the same unit, for ``mape_model``.
        label: a column naming what differs between the repeats (``testbed``): the groups list it
            and :attr:`Repeatability.offsets` gives each value's median offset.

    Returns:
        :class:`Repeatability`; with no repeated configuration its ``groups`` is empty and the
        pooled figures are None.

    Raises:
        ValueError: a named column is missing (all are named), the measured column is not
            numeric, the predicted one neither numeric nor of dtype Null (a Null column: every
            row skipped), or a measurement is null, not finite or not > 0 (naming how many rows).
            ``key`` may be one column name.
    """
    if isinstance(key, str):
        key = [key]
    key = [k for k in CONFIGURATION_COLUMNS if k in rows.columns] if key is None else list(dict.fromkeys(key))
    wanted = [*key, measured, *([predicted] if predicted else []), *([label] if label else [])]
    missing = [c for c in wanted if c not in rows.columns]
    if missing:
        raise ValueError(f"configuration_repeatability: missing column(s) {', '.join(missing)}; "
                         f"the rows have {', '.join(rows.columns)}")
    if not key:
        raise ValueError("configuration_repeatability: no key column: give key= or rows with "
                         f"some of {', '.join(CONFIGURATION_COLUMNS)}")
    if not rows.schema[measured].is_numeric():
        raise ValueError(f"configuration_repeatability: {measured} must be numeric, got {rows.schema[measured]}")
    if predicted and not (rows.schema[predicted].is_numeric() or rows.schema[predicted] == pl.Null):
        raise ValueError(f"configuration_repeatability: {predicted} must be numeric, got {rows.schema[predicted]}")
    m = pl.col(measured).cast(pl.Float64)
    bad = rows.filter(m.is_null() | ~m.is_finite() | ~(m > 0)).height
    if bad:
        raise ValueError(f"configuration_repeatability: {bad} row(s) with {measured} null, not finite or not > 0")
    t = rows.with_columns(__lm=pl.col(measured).cast(pl.Float64).log()).filter(pl.len().over(key) > 1)
    t = t.with_columns(__dev=pl.col("__lm") - pl.col("__lm").mean().over(key))
    aggs = [pl.len().alias("rows"), pl.col("__lm").std(ddof=1).alias("log_sd"),
            (pl.col(measured).max() / pl.col(measured).min()).alias("max_over_min")]
    if label:
        aggs.append(pl.col(label).cast(pl.String).unique().sort().alias("labels"))
    groups = t.group_by(key, maintain_order=True).agg(aggs).sort(key, nulls_last=True)
    summary: dict[str, float | int | None] = {"groups": groups.height, "rows": t.height}
    if t.height == 0:
        summary |= dict.fromkeys(("log_sd", "mape_noise", "ratio_log_sd", "ratio_mape_noise", "mape_least",
                                  "mape_model"))
        summary |= dict.fromkeys(("mape_model_rows", "mape_model_skipped"), 0 if predicted else None)
        return Repeatability(groups=groups, summary=summary, offsets=None)
    sd = float(np.sqrt((t["__dev"] ** 2).sum() / (t.height - groups.height)))
    values = t.group_by(key).agg(pl.col(measured).cast(pl.Float64))[measured]
    scored = None
    if predicted:
        p = pl.col(predicted).cast(pl.Float64)
        scored = t.filter(p.is_not_null() & p.is_finite()).select(p / pl.col(measured) - 1)[predicted]
    summary |= {
        "log_sd": sd,
        "mape_noise": pl.select(lognormal_mape(pl.lit(sd))).item(),
        "ratio_log_sd": float(sd * np.sqrt(2.0)),
        "ratio_mape_noise": pl.select(lognormal_mape(pl.lit(sd * np.sqrt(2.0)))).item(),
        "mape_least": sum(_least_mape(np.asarray(v)) for v in values) / t.height,
        "mape_model": float(scored.abs().mean()) if scored is not None and scored.len() else None,
        "mape_model_rows": scored.len() if scored is not None else None,
        "mape_model_skipped": t.height - scored.len() if scored is not None else None,
    }
    offsets = None
    if label:
        offsets = (t.group_by(pl.col(label).cast(pl.String)).agg(pl.len().alias("rows"),
                                                                  pl.col("__dev").median().alias("median_log_offset"))
                   .with_columns(median_offset=pl.col("median_log_offset").exp() - 1).sort("median_log_offset"))
    return Repeatability(groups=groups, summary=summary, offsets=offsets)
