"""Measurement tables: the model against any user's measured runs, with fit/test splits and
leave-one-group-out cross-validation.

A **measurement table** (CSV, Parquet or JSON lines) has one row per measured configuration. Its
columns (:data:`MEASUREMENT_COLUMNS`; names are case-sensitive, extra columns are kept and may be
used by ``fit_on`` or ``cross_validate``):

===================  ========  ===============================================================
column               required  meaning
===================  ========  ===============================================================
``model``            yes       zoo model (``ddlscope profile --list``); case, spaces, ``_``, ``-``
                               and ``.`` are ignored (:func:`zoo_name`); ``model_given`` keeps it
``gpu``              yes       catalog GPU, name or alias (``ddlscope catalog gpus``)
``gpus``             yes       GPUs of the job (data-parallel replicas), integer >= 1
``batch_per_gpu``    yes       samples per GPU per step, integer >= 1
``precision``        yes       ``fp32``, ``tf32``, ``fp16``/``amp``, ``bf16``
``throughput``       one of    measured throughput of the whole job, in ``throughput_unit``
``step_time_s``      these     measured seconds per step
``step_time_ms``     three     measured milliseconds per step
``throughput_unit``  with      ``samples/s`` (also ``images/s``, ``sequences/s``, ``examples/s``),
                     thr.      ``tokens/s``, or any unit with ``units_per_sample``; any case,
                               spaces ignored, ``/sec``, ``/second`` or ``per second`` read as
                               ``/s`` (:func:`normalized_unit`)
``units_per_sample`` no        how many throughput units one sample holds (tokens/s: default
                               ``seq_len``)
``servers``          no        servers the GPUs span (default 1)
``server``           no        catalog server whose links and layout are used (default
                               :data:`DEFAULT_SERVER`, its GPU replaced by ``gpu``)
``pcie``, ``nvlink``,no        catalog link names overriding the server's (``nvlink = none``:
``nic``                        GPU-to-GPU traffic over PCIe)
``optimizer``        no        ``sgd`` (default), ``adam``, ``adamw``
``seq_len``,         no        sizes passed to the profiler (zoo defaults when empty)
``image_size``
``input_data``       no        ``real`` (default: the batch is copied host to GPU each step) or
                               ``synthetic`` (generated on the GPU: no input copy)
``overlap``          no        overlap policy (``scheduled``, the default: DDP's buckets all-reduced
                               as the backward produces them, :mod:`ddlscope.model.overlap`;
                               ``none``, ``full`` or a fraction)
``conv_layout``      no        ``nchw`` (default, PyTorch's) or ``nhwc`` (channels_last): NCHW
                               tensor-core convolutions pay cuDNN's layout transposes
``optimizer_kernels`` no       ``foreach`` (default: multi-tensor kernels, PyTorch 2.0 and later on
                               CUDA, apex's fused optimizers) or ``for_loop`` (a kernel per
                               parameter, PyTorch before 2.0; :data:`ddlscope.model.compute.OPTIMIZER_KERNELS`);
                               ``bert_adam`` rows default to ``for_loop`` and refuse ``foreach``
``attention``        no        ``fused`` (default: ``scaled_dot_product_attention`` on a fused
                               kernel, as PyTorch runs it on a GPU) or ``math``: the code
                               materialises the ``L x S`` scores (``matmul``, ``softmax``,
                               dropout, ``matmul``), as NVIDIA DeepLearningExamples' BERT does
``amp``              no        16-bit rows: ``autocast`` (default: ``torch.autocast``/apex O1,
                               casts per call) or ``o2`` (apex O2: the model in 16 bit, FP32
                               master weights); ignored for fp32/tf32
``measured_sync_s``  no        measured exposed communication per step (s, 0 or more),
                               compared with the model's ``exposed_comm_s``
``source``           no        the table a row comes from (default: the file name); errors are
                               summarised per source
===================  ========  ===============================================================

Rows that cannot be used (a missing required value, a value that is not a number, an unknown model
or GPU, a ``tokens/s`` row with no sequence length, a CSV row with more or fewer fields than the
header: ``extra_fields``, ``missing_fields``; a CSV line that is not UTF-8: ``invalid_utf8``) are
**rejected with their line and reason**, and counted (:attr:`MeasurementTable.rejected`); a table
without a required column, or a header naming a column twice, is an error naming the file and the
column. A CSV table is one record a line (:func:`ddlscope.tables.read_csv`): a quoted field spanning
lines is an error naming the line. An integer column takes a whole number written as a float (``4.0``, as Parquet and
JSON writers of float columns give it).

**Prediction.** Each distinct (model, precision, optimizer, seq_len, image_size, attention, amp) is profiled at
batch sizes 2 and 4 on the meta device; the row's op table is the two op tables interpolated op by op
to its batch (:func:`ops_at`: an op's FLOPs and bytes are affine in the batch for a fixed graph), and
the workload's totals likewise. Every op is priced on the row's GPU by
:mod:`ddlscope.model.compute` (roofline with the GPU generation's size-dependent efficiencies, launch
gaps, the per-step host cost; catalog defaults with their sources). Gradients go as DDP buckets
(:mod:`ddlscope.validate.ddp`); with the scheduled overlap, each bucket is ready where the op table's
backward produces its last gradient (:func:`ddlscope.model.overlap.bucket_timeline`) within a
backward of the priced backward ops' share of the row's GPU time. The architecture is ``1w1g`` for
one GPU, ``allreduce_local`` on one server, ``allreduce_cluster`` across servers; the whole table is one
:func:`~ddlscope.model.step_time.breakdown` pass.

**Fitting** (``fit_on``, ``cross_validate``): one factor per field of :data:`FIT_PARAMETERS`
(tensor-core, TF32 and CUDA-core GEMM efficiency, memory efficiency, per-step host cost), applied to
every generation's catalog value, by least squares of the log error of the fit set's one-GPU step
times (:func:`fit_efficiencies`). Multi-GPU rows of the fit set are not used for this fit (their
communication would be absorbed into computation). Where the fit set has no one-GPU row, the
catalog defaults are kept, and the result says so.

**Errors.** Per row ``error = predicted / measured - 1`` of the measured quantity (throughput or step
time). Per source and role: MAPE (mean |error|), median |error|, bias (mean error). **Ratios** cancel
absolute calibration: for every two rows that differ only in the GPU (same model, precision, GPUs,
servers and source; the batch may differ, as published runs take each GPU's largest batch), the
ratio of the faster row's throughput to the slower's, measured and predicted; ``ratio_error =
predicted_ratio / measured_ratio - 1``, pairs ordered so that the measured ratio is >= 1. The same
for two batch sizes of one GPU (``between = batch``) and two precisions (``between = precision``).
With ``cross_validate``, each row's prediction comes from the fold that left its group out, so the
ratio errors are out-of-sample too.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ddlscope.model.jobs import JOB_SCHEMA, system_columns
from ddlscope.model.overlap import TIMELINE_COLUMNS, bucket_timeline
from ddlscope.model.step_time import breakdown
from ddlscope.specs.catalog import Catalog, CatalogError, builtin_catalog
from ddlscope.specs.efficiency import ComputeEfficiency
from ddlscope.specs.overlap import overlap_fraction
from ddlscope.tables import CsvOptions, read_csv, separator_hint, utf16_encoding
from ddlscope.tables.result import INVALID_UTF8
from ddlscope.tables.text import UTF16_PROBE_BYTES
from ddlscope.validate.ddp import ddp_buckets_expr
from ddlscope.validate.published import WORKLOAD_LINEAR

DEFAULT_SERVER = "pai-v100-pcie-8"
"""The server layout a row without ``server`` runs on (PCIe 3.0 x16, no NVLink, 25 Gb/s Ethernet),
its GPU replaced by the row's ``gpu``. One-GPU rows use only its PCIe link (the input copy)."""

REQUIRED: tuple[str, ...] = ("model", "gpu", "gpus", "batch_per_gpu", "precision")
"""Columns every measurement table must have (besides ``throughput`` or ``step_time_s``)."""

MEASUREMENT_COLUMNS: dict[str, str] = {
    "model": "zoo model",
    "gpu": "catalog GPU name or alias",
    "gpus": "GPUs of the job, integer >= 1",
    "batch_per_gpu": "samples per GPU per step, integer >= 1",
    "precision": "fp32, tf32, fp16 (amp) or bf16",
    "throughput": "measured throughput of the whole job, in throughput_unit",
    "throughput_unit": "samples/s, images/s, sequences/s, tokens/s or any unit with units_per_sample",
    "units_per_sample": "throughput units per sample (tokens/s: default seq_len)",
    "step_time_s": "measured seconds per step",
    "step_time_ms": "measured milliseconds per step (instead of step_time_s)",
    "servers": "servers the GPUs span (default 1)",
    "server": f"catalog server (default {DEFAULT_SERVER}, GPU replaced)",
    "pcie": "catalog PCIe link overriding the server's",
    "nvlink": "catalog NVLink overriding the server's; none = no NVLink",
    "nic": "catalog NIC overriding the server's",
    "optimizer": "sgd (default), adam or adamw",
    "seq_len": "sequence length passed to the profiler",
    "image_size": "image size passed to the profiler",
    "input_data": "real (default) or synthetic (no host-to-GPU input copy)",
    "overlap": "overlap policy: scheduled (default, DDP's buckets), none, full or a fraction",
    "conv_layout": "activation layout of convolutions: nchw (default, PyTorch's) or nhwc (channels_last)",
    "optimizer_kernels": "foreach (default: multi-tensor, PyTorch >= 2.0 on CUDA) or for_loop (a kernel per "
                         "parameter, PyTorch < 2.0; the default for bert_adam, which refuses foreach)",
    "attention": "fused (default: SDPA on a fused kernel) or math (the L x S scores materialised)",
    "amp": "16-bit rows: autocast (default, per-call casts) or o2 (apex O2: model in 16 bit, FP32 masters)",
    "measured_sync_s": "measured exposed communication per step, s",
    "source": "the table a row comes from (default: the file name)",
}
"""Every column a measurement table may have, with its meaning (module docstring)."""

_SAMPLE_UNITS = {"samples/s", "images/s", "sequences/s", "sample/s", "image/s", "sequence/s", "img/s", "seq/s",
                 "imgs/s", "examples/s", "example/s", "ex/s"}
_TOKEN_UNITS = {"tokens/s", "token/s", "tok/s"}
_PER_SECOND = r"(?:/|per)(?:s|sec|secs|second|seconds)$"
"""A unit's "per second" in the spellings benchmark tables use (``/s``, ``/sec``, ``per second``...),
matched after lower-casing and removing spaces and read as ``/s``."""


def _squash(name: str) -> str:
    return re.sub(r"[\s_.\-]+", "", name.strip().lower())


def zoo_name(model: str) -> str | None:
    """The zoo model a table's ``model`` names: the zoo name itself, or the one whose name equals it
    once both are lower-cased without spaces, ``_``, ``-`` or ``.`` (``ResNet-50`` -> ``resnet50``,
    ``Inception-v3`` -> ``inception_v3``, ``bert_large_squad`` as is); None when no zoo name matches
    (a name such as ``bert-large`` is the pre-training model ``bert_large``, not the SQuAD one)."""
    from ddlscope.profile.zoo import ZOO

    if model in ZOO:
        return model
    return {_squash(z): z for z in ZOO}.get(_squash(model))


def normalized_unit(unit: pl.Expr) -> pl.Expr:
    """A ``throughput_unit`` column as the table reader compares it: lower case, no spaces, "per
    second" spelled ``/s`` (``Images/sec``, ``samples per second`` -> ``images/s``, ``samples/s``)."""
    return unit.str.to_lowercase().str.replace_all(" ", "").str.replace(_PER_SECOND, "/s")


_PRECISIONS = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "amp": "fp16", "bf16": "bf16"}
_OPTIMIZERS = ("sgd", "adam", "adamw", "bert_adam")
_ATTENTIONS = ("fused", "math")  # the profiler's ATTENTIONS (ddlscope.profile.api): reading a table imports no torch
_AMP_MODES = ("autocast", "o2")  # the profiler's AMP_MODES, likewise
_INT_COLUMNS = ("gpus", "batch_per_gpu", "servers", "seq_len", "image_size")
_FLOAT_COLUMNS = ("throughput", "step_time_s", "step_time_ms", "units_per_sample", "measured_sync_s")
_ZERO_ALLOWED = ("measured_sync_s",)
_SAME_RUN = ("optimizer", "seq_len", "image_size", "attention", "conv_layout", "optimizer_kernels", "input_data")
RATIO_KINDS: dict[str, tuple[str, ...]] = {
    "gpu": ("model", "precision", "amp", "gpus", "servers", "source", *_SAME_RUN),
    "batch": ("model", "precision", "amp", "gpu", "gpus", "servers", "source", *_SAME_RUN),
    "precision": ("model", "gpu", "gpus", "servers", "source", *_SAME_RUN),
}
"""For each ratio kind, the columns two rows must share to form a pair (module docstring): the model,
scale and run settings (optimizer, sizes, attention, layout, input), and the AMP mode except between
precisions (an FP32 row has none)."""


class MeasurementError(ValueError):
    """A measurement table that cannot be read at all (missing file or column), naming the file."""


@dataclass(frozen=True)
class MeasurementTable:
    """A read measurement table.

    Attributes:
        rows: the usable rows: :data:`MEASUREMENT_COLUMNS` (typed, defaults filled), ``line`` (1-based
            line of the file; row number + 1 for Parquet), ``measured_step_s`` (seconds per step:
            ``step_time_s``, or ``batch_per_gpu * gpus / samples_per_s``), ``measured_kind``
            (``throughput`` or ``step_time``), ``measured`` (the measured value in its own unit) and
            every extra column of the file.
        rejected: ``line``, ``source``, ``reason``, ``detail``: every row left out, with why.
        path: the file read.
    """

    rows: pl.DataFrame
    rejected: pl.DataFrame
    path: str

    @property
    def rows_in(self) -> int:
        """Data rows of the file: ``rows.height + rejected.height``."""
        return self.rows.height + self.rejected.height


def _read_raw(path: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The file's rows as strings with their ``line``, and the CSV rows left out before any check
    (``line``, ``source``, ``reason``, ``detail``: :func:`_read_csv_rows`)."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            raw = pl.read_parquet(path)
        elif suffix in (".jsonl", ".ndjson", ".json"):
            text = path.read_text(encoding="utf-8").lstrip()
            if text.startswith("["):  # one JSON array of row objects
                raw = pl.read_json(path, infer_schema_length=None)
            else:
                raw = pl.read_ndjson(path, infer_schema_length=None)
        else:
            return _read_csv_rows(path)
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as exc:
        raise MeasurementError(f"{path}: cannot read as a measurement table ({type(exc).__name__}: "
                               f"{str(exc).splitlines()[0] if str(exc) else ''})") from exc
    raw = raw.with_columns(pl.col(c).cast(pl.String) for c in raw.columns)
    return raw.with_row_index("line", offset=1).with_columns(pl.col("line").cast(pl.Int64)), _no_rows()


def _no_rows() -> pl.DataFrame:
    return pl.DataFrame(schema={"line": pl.Int64, "source": pl.String, "reason": pl.String, "detail": pl.String})


def _read_csv_rows(path: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A CSV measurement table read with :func:`ddlscope.tables.read_csv` (RFC 4180 quoting, one
    record a line), ``#`` lines as comments: every line is the header, blank, a comment, a rejected
    row or a row. A row with more or fewer fields than the header (``extra_fields``,
    ``missing_fields``), with bytes that are not UTF-8 (``invalid_utf8``) or cut short at the end of
    the file (``truncated_last_line``) is one rejected row naming its line (``line``, ``source``: the
    file's name, ``reason``, ``detail``: ``FILE:LINE: ...``). Blank lines and lines whose first
    characters other than spaces and tabs are ``#`` are skipped, before the header too; ``line`` is the
    1-based physical line. The returned rows hold the header's named columns as strings (an empty
    field ``""``) and ``line``.

    Raises:
        MeasurementError: the file is UTF-16 or UTF-32 (:func:`ddlscope.tables.utf16_encoding`), has
            no header, is not CSV (a quote not closed on its line, so also a quoted field spanning
            lines, or a closing quote followed by something other than a comma: naming the line),
            has a header that is not
            UTF-8 or is one field holding ``;``, a tab or ``|``, names a column twice (which value
            would count?) or has an unnamed column holding values.
    """
    try:
        with path.open("rb") as fh:
            start = fh.read(UTF16_PROBE_BYTES)
    except OSError as exc:
        raise MeasurementError(f"{path}: cannot read as a measurement table ({type(exc).__name__}: {exc})") from exc
    wide = utf16_encoding(start)
    if wide is not None:  # UTF-16 or UTF-32: every line would be unreadable
        raise MeasurementError(f"{path}:1: not UTF-8: the file is {wide}: save the table as UTF-8")
    try:
        tf = read_csv(path, CsvOptions(comment_prefix="#"), label=str(path))
    except OSError as exc:
        raise MeasurementError(f"{path}: cannot read as a measurement table ({type(exc).__name__}: {exc})") from exc
    except ValueError as exc:
        raise MeasurementError(str(exc)) from exc
    header = tf.header or []
    if separator_hint(header, ","):
        raise MeasurementError(f"{path}: the header is one field ({header[0][:60]!r}): a measurement table is "
                               "comma-separated")
    seen: dict[str, int] = {}
    for i, name in enumerate(header, start=1):
        if name and name in seen:
            raise MeasurementError(f"{path}: the header names column {name!r} twice (fields {seen[name]} and {i}): "
                                   "keep one")
        seen.setdefault(name, i)
    columns = [c for c in tf.frame.columns if c != "_line"]  # the header's names, made unique, in order
    for i, (name, col) in enumerate(zip(header, columns, strict=True)):
        if name:
            continue
        holding = tf.frame.filter(pl.col(col).str.strip_chars().str.len_bytes() > 0)
        if holding.height:
            raise MeasurementError(f"{path}: field {i + 1} of the header has no name but line "
                                   f"{holding['_line'][0]} gives it a value: name the column")
    named = [(name, col) for name, col in zip(header, columns, strict=True) if name]
    raw = tf.frame.select(*(pl.col(col).fill_null("").alias(name) for name, col in named),
                          pl.col("_line").alias("line"))
    where = pl.format("{}:{}: ", pl.lit(str(path)), pl.col("line"))
    unread = tf.rejected.select(
        "line",
        source=pl.lit(path.name),
        reason=pl.col("reason"),
        detail=pl.when(pl.col("reason") == INVALID_UTF8)
        .then(pl.concat_str(where, "detail", pl.lit(": save the table as UTF-8")))
        .otherwise(pl.concat_str(where, "detail")),
    )
    return raw, unread


def read_measurements(path: str | Path, catalog: Catalog | None = None) -> MeasurementTable:
    """Read and check a measurement table (module docstring for its columns).

    Args:
        path: a ``.csv``, ``.parquet``, ``.jsonl``/``.ndjson`` file.
        catalog: resolves GPU, server and link names (default: built-in).

    Returns:
        A :class:`MeasurementTable`: usable rows and rejected rows with line and reason.

    Raises:
        MeasurementError: the file is missing or unreadable, has no data row, lacks a required column,
            has neither ``throughput`` nor ``step_time_s``, or (CSV) names a column twice or gives a
            value under an unnamed column, or is not CSV (naming the line). A CSV row with more or
            fewer fields than the header (``extra_fields``, ``missing_fields``), with bytes that are not
            UTF-8 (``invalid_utf8``) or cut short at the end of the file (``truncated_last_line``) is a
            rejected row, not an error.
    """
    path = Path(path)
    if not path.is_file():
        raise MeasurementError(f"{path}: no such measurement table")
    raw, unread = _read_raw(path)
    if raw.height == 0 and unread.height:
        raise MeasurementError(f"{path}: no data row with the header's {len(raw.columns) - 1} fields "
                               f"({unread.height} row(s) differ; first: {unread['detail'][0]})")
    table = check_measurements(raw, path, catalog)
    if unread.height:
        table = MeasurementTable(rows=table.rows, rejected=pl.concat([table.rejected, unread]).sort("line"),
                                 path=table.path)
    return table


def check_measurements(raw: pl.DataFrame, path: str | Path, catalog: Catalog | None = None) -> MeasurementTable:
    """Check a measurement table already in memory: every column a string (as read from text), plus
    ``line`` (Int64, where each row came from). :func:`read_measurements` after reading; the
    converters of published tables (:mod:`ddlscope.validate.lambda_table`) call it directly.

    Raises:
        MeasurementError: as :func:`read_measurements`.
    """
    path = Path(path)
    cat = catalog or builtin_catalog()
    if raw.height == 0:
        raise MeasurementError(f"{path}: no data row")
    cols = set(raw.columns)
    missing = [c for c in REQUIRED if c not in cols]
    if missing:
        raise MeasurementError(f"{path}: missing column(s) {', '.join(missing)}; a measurement table needs "
                               f"{', '.join(REQUIRED)} and throughput (with throughput_unit) or step_time_s")
    if not cols & {"throughput", "step_time_s", "step_time_ms"}:
        raise MeasurementError(f"{path}: neither throughput nor step_time_s (or step_time_ms): one of them holds "
                               "the measurement")
    for c in MEASUREMENT_COLUMNS:
        if c not in cols:
            raw = raw.with_columns(pl.lit(None, pl.String).alias(c))
    raw = raw.with_columns(pl.col(c).str.strip_chars() for c in MEASUREMENT_COLUMNS).with_columns(
        pl.when(pl.col(c) == "").then(None).otherwise(pl.col(c)).alias(c) for c in MEASUREMENT_COLUMNS
    )
    reasons: list[pl.Expr] = []

    def reject(cond: pl.Expr, reason: str, detail: pl.Expr) -> None:
        reasons.append(pl.when(cond).then(pl.struct(reason=pl.lit(reason), detail=detail)))

    for c in REQUIRED:
        reject(pl.col(c).is_null(), "missing_value", pl.lit(f"{c} is empty"))
    # an integer column takes "4" and also "4.0" (a Parquet or JSON writer's float of a whole number)
    as_float = {c: pl.col(c).cast(pl.Float64, strict=False) for c in _INT_COLUMNS}
    typed = raw.with_columns(
        *(pl.coalesce(pl.col(c).cast(pl.Int64, strict=False),
                      pl.when(as_float[c].is_finite() & (as_float[c] == as_float[c].floor())
                              & (as_float[c].abs() < 2.0 ** 53)).then(as_float[c].cast(pl.Int64)))
          .alias(f"{c}__i") for c in _INT_COLUMNS),
        *(pl.col(c).cast(pl.Float64, strict=False).alias(f"{c}__f") for c in _FLOAT_COLUMNS),
    )
    for c in _INT_COLUMNS:
        huge = as_float[c].is_finite() & (as_float[c] == as_float[c].floor()) & (as_float[c].abs() >= 2.0 ** 53)
        reject(pl.col(c).is_not_null() & pl.col(f"{c}__i").is_null() & huge, "out_of_range",
               pl.format(f"{c} = {{}}: a whole number too large to count with", pl.col(c)))
        reject(pl.col(c).is_not_null() & pl.col(f"{c}__i").is_null(), "not_an_integer",
               pl.format(f"{c} = {{}}", pl.col(c)))
        reject(pl.col(f"{c}__i") < 1, "out_of_range", pl.format(f"{c} = {{}}: expected >= 1", pl.col(c)))
    for c in _FLOAT_COLUMNS:
        f = pl.col(f"{c}__f")
        reject(pl.col(c).is_not_null() & f.is_null(), "not_a_number", pl.format(f"{c} = {{}}", pl.col(c)))
        if c in _ZERO_ALLOWED:  # a measured exposed communication of 0 is a measurement (all hidden)
            reject(f.is_not_null() & (~f.is_finite() | (f < 0)), "out_of_range",
                   pl.format(f"{c} = {{}}: expected a finite number >= 0", pl.col(c)))
        else:
            reject(f.is_not_null() & (~f.is_finite() | (f <= 0)), "out_of_range",
                   pl.format(f"{c} = {{}}: expected a finite number > 0", pl.col(c)))
    thr, step, step_ms = pl.col("throughput"), pl.col("step_time_s"), pl.col("step_time_ms")
    given = thr.is_not_null().cast(pl.Int8) + step.is_not_null().cast(pl.Int8) + step_ms.is_not_null().cast(pl.Int8)
    reject(given == 0, "no_measurement", pl.lit("throughput and step_time_s (or step_time_ms) are all empty"))
    reject(given > 1, "two_measurements",
           pl.lit("more than one of throughput, step_time_s and step_time_ms is given: keep one"))
    prec = pl.col("precision").str.to_lowercase()
    reject(pl.col("precision").is_not_null() & ~prec.is_in(list(_PRECISIONS)), "unknown_precision",
           pl.format("precision = {}: expected one of fp32, tf32, fp16, amp, bf16", pl.col("precision")))
    opt = pl.col("optimizer").str.to_lowercase()
    reject(pl.col("optimizer").is_not_null() & ~opt.is_in(list(_OPTIMIZERS)), "unknown_optimizer",
           pl.format(f"optimizer = {{}}: expected one of {', '.join(_OPTIMIZERS)}", pl.col("optimizer")))
    layout = pl.col("conv_layout").str.to_lowercase()
    reject(pl.col("conv_layout").is_not_null() & ~layout.is_in(["nchw", "nhwc"]), "unknown_conv_layout",
           pl.format("conv_layout = {}: expected nchw or nhwc", pl.col("conv_layout")))
    kernels = pl.col("optimizer_kernels").str.to_lowercase().str.replace_all("-", "_", literal=True)
    reject(pl.col("optimizer_kernels").is_not_null() & ~kernels.is_in(["foreach", "for_loop"]),
           "unknown_optimizer_kernels",
           pl.format("optimizer_kernels = {}: expected foreach (multi-tensor, fused optimizers included) or for_loop",
                     pl.col("optimizer_kernels")))
    reject((opt == "bert_adam") & (kernels == "foreach"), "bert_adam_foreach",
           pl.lit("optimizer = bert_adam with optimizer_kernels = foreach: BertAdam launches a kernel per term "
                  "per parameter; leave optimizer_kernels empty or give for_loop"))
    att = pl.col("attention").str.to_lowercase()
    reject(pl.col("attention").is_not_null() & ~att.is_in(list(_ATTENTIONS)), "unknown_attention",
           pl.format("attention = {}: expected fused or math", pl.col("attention")))
    amp = pl.col("amp").str.to_lowercase()
    reject(pl.col("amp").is_not_null() & ~amp.is_in(list(_AMP_MODES)), "unknown_amp",
           pl.format("amp = {}: expected autocast or o2", pl.col("amp")))
    inp = pl.col("input_data").str.to_lowercase()
    reject(pl.col("input_data").is_not_null() & ~inp.is_in(["real", "synthetic"]), "unknown_input_data",
           pl.format("input_data = {}: expected real or synthetic", pl.col("input_data")))
    unit = normalized_unit(pl.col("throughput_unit"))
    reject(thr.is_not_null() & pl.col("throughput_unit").is_null(), "no_unit",
           pl.lit("throughput needs throughput_unit (samples/s, tokens/s, ...)"))
    reject(thr.is_not_null() & unit.is_in(list(_TOKEN_UNITS)) & pl.col("units_per_sample").is_null()
           & pl.col("seq_len").is_null(), "no_units_per_sample",
           pl.lit("tokens/s needs seq_len or units_per_sample (tokens per sample)"))
    reject(thr.is_not_null() & pl.col("throughput_unit").is_not_null() & ~unit.is_in(list(_SAMPLE_UNITS))
           & ~unit.is_in(list(_TOKEN_UNITS)) & pl.col("units_per_sample").is_null(), "no_units_per_sample",
           pl.format("throughput_unit = {}: give units_per_sample (how many of them one sample holds)",
                     pl.col("throughput_unit")))
    # names the catalog and the zoo must know: checked per distinct value, outside the expressions
    model_names = {m: zoo_name(m) for m in typed["model"].drop_nulls().unique()}
    bad_model = sorted(m for m, z in model_names.items() if z is None)
    reject(pl.col("model").is_in(bad_model), "unknown_model",
           pl.format("model = {}: not a zoo model (ddlscope profile --list)", pl.col("model")))
    gpu_names = {}
    for g in typed["gpu"].drop_nulls().unique():
        with contextlib.suppress(CatalogError):
            gpu_names[g] = cat.gpu(g).name
    bad_gpu = sorted(set(typed["gpu"].drop_nulls().unique()) - set(gpu_names))
    reject(pl.col("gpu").is_in(bad_gpu), "unknown_gpu",
           pl.format("gpu = {}: not in the catalog (ddlscope catalog gpus)", pl.col("gpu")))
    for slot, lookup in (("server", cat.server), ("pcie", cat.link), ("nvlink", cat.link), ("nic", cat.link)):
        bad = []
        for v in typed[slot].drop_nulls().unique():
            if slot == "nvlink" and v.lower() == "none":
                continue
            try:
                lookup(v)
            except CatalogError:
                bad.append(v)
        reject(pl.col(slot).is_in(bad), f"unknown_{slot}",
               pl.format(f"{slot} = {{}}: not in the catalog", pl.col(slot)))

    # the placement must fit: at least one GPU per server, at most the server's GPUs on each
    server_gpus = {}
    for v in [*typed["server"].drop_nulls().unique(), DEFAULT_SERVER]:
        with contextlib.suppress(CatalogError):
            server_gpus[v] = cat.server(v).gpus_per_server
    gpus_i, servers_i = pl.col("gpus__i"), pl.col("servers__i").fill_null(1)
    per_server = (gpus_i + servers_i - 1) // servers_i
    capacity = pl.col("server").fill_null(DEFAULT_SERVER).replace_strict(server_gpus, default=None,
                                                                          return_dtype=pl.Int64)
    reject(servers_i > gpus_i, "placement", pl.format("gpus = {} on servers = {}: fewer GPUs than servers",
                                                      pl.col("gpus"), servers_i))
    reject((servers_i <= gpus_i) & (per_server > capacity), "placement",
           pl.format("gpus = {} on servers = {}: {} GPUs per server, the server ({}) has {}", pl.col("gpus"),
                     servers_i, per_server, pl.col("server").fill_null(DEFAULT_SERVER), capacity))
    checked = typed.with_columns(
        _why=pl.coalesce(reasons) if reasons else pl.lit(None, pl.Struct({"reason": pl.String, "detail": pl.String}))
    )
    rejected = checked.filter(pl.col("_why").is_not_null()).select(
        "line", source=pl.col("source").fill_null(path.name),
        reason=pl.col("_why").struct.field("reason"),
        detail=pl.format("{}:{}: {}", pl.lit(str(path)), pl.col("line"), pl.col("_why").struct.field("detail")),
    )
    ok = checked.filter(pl.col("_why").is_null())
    reserved = {"line", "gpu_given", "model_given", "measured_kind", "measured", "measured_samples_per_s",
                "measured_step_s"}
    # extra columns are kept; one whose name the table's own output uses is left out (it would clash)
    extra = [c for c in raw.columns if c not in MEASUREMENT_COLUMNS and c not in reserved]
    ups = (
        pl.when(pl.col("units_per_sample__f").is_not_null())
        .then(pl.col("units_per_sample__f"))
        .when(unit.is_in(list(_TOKEN_UNITS)))
        .then(pl.col("seq_len__i").cast(pl.Float64))
        .otherwise(pl.lit(1.0))
    )
    rows = ok.select(
        "line",
        *extra,
        model=pl.col("model").replace_strict(model_names, default=None),
        model_given=pl.col("model"),
        gpu=pl.col("gpu").replace_strict(gpu_names, default=None),
        gpu_given=pl.col("gpu"),
        gpus=pl.col("gpus__i"),
        batch_per_gpu=pl.col("batch_per_gpu__i"),
        precision=prec.replace_strict(_PRECISIONS, default=None),
        servers=pl.col("servers__i").fill_null(1),
        server=pl.col("server").fill_null(DEFAULT_SERVER),
        pcie=pl.col("pcie"),
        nvlink=pl.col("nvlink"),
        nic=pl.col("nic"),
        optimizer=opt.fill_null("sgd"),
        seq_len=pl.col("seq_len__i"),
        image_size=pl.col("image_size__i"),
        input_data=inp.fill_null("real"),
        conv_layout=layout.fill_null("nchw"),
        # BertAdam is a loop over the parameters whatever the PyTorch version
        optimizer_kernels=kernels.fill_null(pl.when(opt == "bert_adam").then(pl.lit("for_loop"))
                                            .otherwise(pl.lit("foreach"))),
        attention=att.fill_null("fused"),
        # only 16-bit rows run an AMP mode: the others share one profile
        amp=pl.when(prec.replace_strict(_PRECISIONS, default=None).is_in(["fp16", "bf16"]))
        .then(amp.fill_null("autocast")).otherwise(pl.lit("autocast")),
        overlap=pl.col("overlap").fill_null("scheduled"),
        measured_sync_s=pl.col("measured_sync_s__f"),
        source=pl.col("source").fill_null(path.name),
        measured_kind=pl.when(thr.is_not_null()).then(pl.lit("throughput")).otherwise(pl.lit("step_time")),
        measured=pl.coalesce(pl.col("throughput__f"), pl.col("step_time_s__f"), pl.col("step_time_ms__f") / 1000.0),
        throughput_unit=pl.col("throughput_unit"),
        measured_samples_per_s=pl.col("throughput__f") / ups,
    ).with_columns(
        measured_step_s=pl.when(pl.col("measured_kind") == "throughput")
        .then(pl.col("batch_per_gpu") * pl.col("gpus") / pl.col("measured_samples_per_s"))
        .otherwise(pl.col("measured"))
    )
    bad_overlap = []
    for v in rows["overlap"].unique():
        try:
            overlap_fraction(float(v) if _is_float(v) else v)
        except (ValueError, TypeError):
            bad_overlap.append(v)
    if bad_overlap:
        more = rows.filter(pl.col("overlap").is_in(bad_overlap)).select(
            "line", "source", reason=pl.lit("bad_overlap"),
            detail=pl.format("{}:{}: overlap = {}: expected scheduled, none, full or a fraction in [0, 1]",
                             pl.lit(str(path)),
                             pl.col("line"), pl.col("overlap")))
        rejected = pl.concat([rejected, more])
        rows = rows.filter(~pl.col("overlap").is_in(bad_overlap))
    return MeasurementTable(rows=rows, rejected=rejected.sort("line"), path=str(path))


def concat_tables(tables: Sequence[MeasurementTable]) -> MeasurementTable:
    """One table of several (rows and rejected rows stacked; columns a table lacks are null)."""
    return MeasurementTable(
        rows=pl.concat([t.rows for t in tables], how="diagonal_relaxed"),
        rejected=pl.concat([t.rejected for t in tables], how="diagonal_relaxed"),
        path=", ".join(t.path for t in tables),
    )


def _is_float(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


# -- prediction ----------------------------------------------------------------------------------------
_PROFILE_KEYS = ("model", "precision", "optimizer", "seq_len", "image_size", "attention", "amp")
_PROFILE_CACHE: dict[tuple, dict[str, Any]] = {}
_OPS_CACHE: dict[tuple, pl.DataFrame] = {}


def _profile(model: str, precision: str, optimizer: str, seq_len: int | None, image_size: int | None,
             attention: str, amp: str, batch: int):
    from ddlscope.profile import profile_model

    return profile_model(model, batch_size=batch, precision=precision, optimizer=optimizer, seq_len=seq_len,
                         image_size=image_size, attention=attention, amp=amp, embedding_gradients="dense")


def _profile_points(model: str, precision: str, optimizer: str, seq_len: int | None, image_size: int | None,
                    attention: str = "fused", amp: str = "autocast") -> dict[str, Any]:
    """Workload fields at batch 2 (``*_2``) and 4 (``*_4``), the batch-independent ones and the DDP
    bucket timeline (:data:`ddlscope.model.overlap.TIMELINE_COLUMNS`, from the batch-4 op table) under
    ``scalars``, and the two op tables (``ops_2``, ``ops_4``; ``aligned``: the same ops in the same
    order at both batches)."""
    key = (model, precision, optimizer, seq_len, image_size, attention, amp)
    if key not in _PROFILE_CACHE:
        r2, r4 = (_profile(*key, b) for b in (2, 4))
        w2, w4 = r2.workload, r4.workload
        out: dict[str, Any] = {f"{k}_2": float(getattr(w2, k) or 0.0) for k in WORKLOAD_LINEAR}
        out.update({f"{k}_4": float(getattr(w4, k) or 0.0) for k in WORKLOAD_LINEAR})
        out.update({"dense_param_bytes": w2.dense_param_bytes, "sparse_bytes_per_step": w2.sparse_bytes_per_step,
                    "embedding_table_bytes": w2.embedding_table_bytes})
        # the scheduled overlap's bucket timeline: when each DDP bucket is ready within the backward
        # (shares of the backward, the same at every batch of a fixed graph; ddlscope.model.overlap)
        out.update(bucket_timeline(r4.ops, r4.params))
        aligned = r2.ops.height == r4.ops.height and bool((r2.ops["op"] == r4.ops["op"]).all())
        _PROFILE_CACHE[key] = {"scalars": out, "ops_2": r2.ops, "ops_4": r4.ops, "aligned": aligned}
    return _PROFILE_CACHE[key]


def ops_at(model: str, precision: str, optimizer: str, seq_len: int | None, image_size: int | None,
           attention: str, amp: str, batch: int) -> pl.DataFrame:
    """The op table of one training step at ``batch``: the batch-2 and batch-4 op tables interpolated
    op by op (``flops`` and ``total_bytes`` are affine in the batch for every op of a fixed graph:
    activations scale, weights and the optimizer do not), or a profile at ``batch`` itself where the
    two graphs differ (a model whose op list depends on the batch).

    The arguments are a measurement row's :data:`_PROFILE_KEYS` (``attention``: ``fused``/``math``;
    ``amp``: ``autocast``/``o2``, as :func:`ddlscope.profile.profile_model` takes them) and its batch.
    Returns the op table (:data:`ddlscope.profile.api.OP_COLUMNS`; ``flops`` and ``total_bytes`` as
    Float64).

    Raises:
        ddlscope.profile.ProfileError, ValueError: the profiler refuses the model at these settings.
    """
    pts = _profile_points(model, precision, optimizer, seq_len, image_size, attention, amp)
    if not pts["aligned"]:
        key = (model, precision, optimizer, seq_len, image_size, attention, amp, batch)
        if key not in _OPS_CACHE:
            _OPS_CACHE[key] = _profile(model, precision, optimizer, seq_len, image_size, attention, amp, batch).ops
        return _OPS_CACHE[key]
    o2, o4 = pts["ops_2"], pts["ops_4"]
    f = (batch - 2) / 2
    return o2.with_columns(
        flops=(o2["flops"].cast(pl.Float64) + f * (o4["flops"].cast(pl.Float64) - o2["flops"].cast(pl.Float64))),
        total_bytes=(o2["total_bytes"].cast(pl.Float64)
                     + f * (o4["total_bytes"].cast(pl.Float64) - o2["total_bytes"].cast(pl.Float64))),
        # a GEMM counts as aligned only where it is at both batches (a leading dimension that holds the
        # batch could be aligned at 2 and 4 and not at the row's own batch; none of the zoo's does)
        **({"gemm_aligned": o2["gemm_aligned"] & o4["gemm_aligned"]} if "gemm_aligned" in o2.columns else {}),
    )


def measurement_jobs(rows: pl.DataFrame, catalog: Catalog | None = None,
                     progress: Callable[[str], None] | None = None) -> pl.DataFrame:
    """The Jobs table (:data:`~ddlscope.model.jobs.JOB_SCHEMA` columns plus ``rows``' own) of
    :attr:`MeasurementTable.rows` (module docstring, "Prediction"): one profile pair per distinct
    (model, precision, optimizer, seq_len, image_size, attention, amp), then expressions. ``workload`` names the
    (model, sizes, batch) so that :func:`price_measurement_jobs` finds each row's op table.

    Raises:
        ddlscope.profile.ProfileError: a model that cannot be profiled at the row's sizes.
    """
    cat = catalog or builtin_catalog()
    keys = rows.select(_PROFILE_KEYS).unique(maintain_order=True)
    prof_rows = []
    for k in keys.iter_rows():
        if progress is not None and k not in _PROFILE_CACHE:  # said once, where the profile is traced
            progress(f"profiling {k[0]} ({k[1]}, {k[2]})")
        prof_rows.append({**dict(zip(_PROFILE_KEYS, k, strict=True)), **_profile_points(*k)["scalars"]})
    prof = pl.DataFrame(prof_rows, schema_overrides={"seq_len": pl.Int64, "image_size": pl.Int64,
                                                     **{k: pl.List(pl.Float64) for k in TIMELINE_COLUMNS}})
    sys_keys = rows.select("server", "gpu", "pcie", "nvlink", "nic").unique(maintain_order=True)
    sys_rows = []
    for server, gpu, pcie, nvlink, nic in sys_keys.iter_rows():
        system = cat.system(server, gpu=gpu, pcie=pcie, nvlink=nvlink, nic=nic)
        cols = system_columns(system)
        cols.pop("gpu")
        sys_rows.append({"server": server, "gpu": gpu, "pcie_given": pcie, "nvlink_given": nvlink,
                         "nic_given": nic, **cols})
    sysf = pl.DataFrame(sys_rows, schema_overrides={"pcie_given": pl.String, "nvlink_given": pl.String,
                                                    "nic_given": pl.String})
    b = pl.col("batch_per_gpu").cast(pl.Float64)
    lin = {k: pl.col(f"{k}_2") + (b - 2) * (pl.col(f"{k}_4") - pl.col(f"{k}_2")) / 2 for k in WORKLOAD_LINEAR}
    p, m = pl.col("gpus"), pl.col("servers")
    arch = (pl.when(p == 1).then(pl.lit("1w1g")).when(m == 1).then(pl.lit("allreduce_local"))
            .otherwise(pl.lit("allreduce_cluster")))
    overlap = {v: overlap_fraction(float(v) if _is_float(v) else v) for v in rows["overlap"].unique()}
    out = (
        rows.rename({"pcie": "pcie_given", "nvlink": "nvlink_given", "nic": "nic_given"})
        .join(prof, on=list(_PROFILE_KEYS), how="left", nulls_equal=True)
        .join(sysf, on=["server", "gpu", "pcie_given", "nvlink_given", "nic_given"], how="left", nulls_equal=True)
        .with_row_index("job_id")
        .with_columns(
            workload=pl.concat_str(
                [pl.col(k).cast(pl.String).fill_null("-") for k in (*_PROFILE_KEYS, "batch_per_gpu")], separator="|"),
            batch_size=pl.col("batch_per_gpu"),
            **lin,
        )
        .with_columns(
            input_bytes=pl.when(pl.col("input_data") == "synthetic").then(0.0).otherwise(pl.col("input_bytes")),
            stored_input_bytes=pl.lit(0.0),
            num_gradient_tensors=ddp_buckets_expr(pl.col("dense_param_bytes")),
            architecture=arch,
            num_workers=p,
            gpus_per_worker=pl.lit(1, pl.Int64),
            num_ps=pl.lit(0, pl.Int64),
            num_servers=m,
            overlap_fraction=pl.col("overlap").replace_strict(overlap, return_dtype=pl.Float64),
            memory_bound_scale=pl.lit(1.0),
        )
    )
    casts = {name: dtype for name, (dtype, _) in JOB_SCHEMA.items()}
    return out.with_columns(pl.col(n).cast(t) for n, t in casts.items())


def price_measurement_jobs(jobs: pl.DataFrame, efficiencies: Mapping[str, ComputeEfficiency] | None = None,
                           catalog: Catalog | None = None) -> pl.DataFrame:
    """``jobs`` (from :func:`measurement_jobs`) with every op priced on its GPU
    (:func:`ddlscope.model.compute.price_jobs`: the ``priced_*`` columns), each row's op table from
    :func:`ops_at`, each (``conv_layout``, ``optimizer_kernels``) group priced with its layout and
    optimizer kernels (a table without ``optimizer_kernels``: ``foreach``)."""
    from ddlscope.model.compute import price_jobs

    if "optimizer_kernels" not in jobs.columns:
        jobs = jobs.with_columns(optimizer_kernels=pl.lit("foreach"))
    parts = []
    for (layout, kernels), part in jobs.group_by("conv_layout", "optimizer_kernels", maintain_order=True):
        tables = {w: ops_at(*k, int(b)) for w, *k, b in
                  part.select("workload", *_PROFILE_KEYS, "batch_per_gpu").unique("workload").iter_rows()}
        parts.append(price_jobs(part, tables, efficiencies, catalog, conv_layout=str(layout),
                                optimizer_kernels=str(kernels)))
    return pl.concat(parts, how="vertical_relaxed").sort("job_id")


FIT_PARAMETERS: tuple[str, ...] = ("tensor_gemm_eff", "tf32_gemm_eff", "cuda_gemm_eff", "memory_eff",
                                   "step_overhead_us")
"""The compute-efficiency fields a fit scales (:mod:`ddlscope.specs.efficiency`): one factor each,
applied to every generation's catalog value (efficiencies capped at 1)."""
FIT_LOG_BOUND = 2.0
"""Each fitted factor's log lies in [-FIT_LOG_BOUND, FIT_LOG_BOUND] (a factor of 0.14 to 7.4)."""
FIT_PRIOR_WEIGHT = 1e-3
"""Weight of the prior that keeps each log factor at 0 (the catalog value): it only decides the
factors no fit row can move (a fit set without TF32 rows leaves ``tf32_gemm_eff`` as it is)."""


@dataclass(frozen=True)
class FittedEfficiencies:
    """Factors on the catalog's compute efficiencies, and where they came from.

    Attributes:
        multipliers: :data:`FIT_PARAMETERS` name -> factor on every generation's catalog value
            (empty: the catalog defaults).
        fitted_on: how many one-GPU rows fitted them (0: catalog defaults).
        origin: a sentence: "catalog defaults ..." or "fitted on N one-GPU rows of ...".
        capped: ``"<generation> <field>"`` for each efficiency of a generation among the fit rows' GPUs
            that the factor took to the cap of 1 (the peak): the rows ask for more than the hardware's
            peak, so that efficiency stands in for something the model lacks.
    """

    multipliers: dict[str, float]
    fitted_on: int
    origin: str
    capped: tuple[str, ...] = ()

    def at_bounds(self) -> list[str]:
        """One warning per factor the fit left at a bound of its range (e^-2 or e^2), and per efficiency
        of :attr:`capped` (taken to the cap of 1): the data pulled it
        further than the fit allows, so it stands in for something the model lacks."""
        lo, hi = math.exp(-FIT_LOG_BOUND), math.exp(FIT_LOG_BOUND)
        return [f"warning: {k} x {v:.3g} is at the bound of its factor ([{lo:.3g}, {hi:.3g}])"
                for k, v in self.multipliers.items() if v <= lo * 1.0001 or v >= hi * 0.9999] + [
                f"warning: {c} is capped at 1 (the peak it is priced against): the rows ask for more"
                for c in self.capped]

    def efficiencies(self, catalog: Catalog | None = None) -> dict[str, ComputeEfficiency] | None:
        """Generation -> :class:`ComputeEfficiency` with the factors applied (None: catalog defaults)."""
        if not self.multipliers:
            return None
        return _scaled_efficiencies(catalog or builtin_catalog(), self.multipliers, self.origin)


def _scaled_efficiencies(cat: Catalog, factors: Mapping[str, float], note: str) -> dict[str, ComputeEfficiency]:
    out = {}
    for gen, eff in cat.compute_efficiency.items():
        values = {}
        for name, f in factors.items():
            base = eff.tf32_eff if name == "tf32_gemm_eff" else getattr(eff, name)
            v = base * f
            values[name] = min(v, 1.0) if name.endswith("_eff") else v
        out[gen] = eff.with_values(values, note)
    return out


def fit_efficiencies(jobs: pl.DataFrame, describe: str = "the fit set", catalog: Catalog | None = None
                     ) -> FittedEfficiencies:
    """Fit one factor per :data:`FIT_PARAMETERS` field on the one-GPU rows of ``jobs`` (a
    :func:`measurement_jobs` table with ``measured_step_s``): least squares of ``ln(predicted step /
    measured step)`` (relative error, every row weighted alike) over the log factors, each in
    [-2, 2] (a factor of 0.14 to 7.4), with the small prior :data:`FIT_PRIOR_WEIGHT` toward 1
    (SciPy ``least_squares``, trust-region reflective). No one-GPU row keeps the catalog defaults.
    The per-generation structure of the catalog (its sources) is kept: the fit corrects what every
    generation shares."""
    from scipy.optimize import least_squares

    cat = catalog or builtin_catalog()
    one = jobs.filter(pl.col("gpus") == 1)
    if one.height == 0:
        return FittedEfficiencies({}, 0, f"catalog defaults ({describe} has no one-GPU row)")
    data_io = breakdown(price_measurement_jobs(one, None, cat))["data_io_s"].to_numpy()  # no efficiency in it
    measured = one["measured_step_s"].to_numpy()
    note = f"fitted on {one.height} one-GPU row(s) of {describe}"

    def residual(x):
        effs = _scaled_efficiencies(cat, dict(zip(FIT_PARAMETERS, np.exp(x), strict=True)), note)
        priced = price_measurement_jobs(one, effs, cat)
        step = (data_io + priced["priced_compute_bound_s"].to_numpy() + priced["priced_memory_bound_s"].to_numpy()
                + priced["priced_host_s"].to_numpy())
        return np.concatenate([np.log(step / measured), FIT_PRIOR_WEIGHT * x])

    sol = least_squares(residual, np.zeros(len(FIT_PARAMETERS)), bounds=(-FIT_LOG_BOUND, FIT_LOG_BOUND),
                        diff_step=1e-4)
    factors = dict(zip(FIT_PARAMETERS, np.exp(sol.x).tolist(), strict=True))
    # the efficiencies _scaled_efficiencies capped at 1, for the generations the fit rows run on
    scaled = _scaled_efficiencies(cat, factors, note)
    capped = tuple(f"{gen} {name}" for gen in sorted({cat.gpu(g).generation for g in one["gpu"].unique()})
                   for name, f in factors.items()
                   if name.endswith("_eff") and f > 1.0001 and getattr(scaled.get(gen, scaled["default"]), name) >= 1.0)
    return FittedEfficiencies(factors, one.height, note, capped)


def predict_jobs(jobs: pl.DataFrame, fit: FittedEfficiencies, catalog: Catalog | None = None) -> pl.DataFrame:
    """``jobs`` priced op by op with ``fit``'s efficiencies, with the model's breakdown, ``predicted``
    (the measured quantity's predicted value: throughput in the row's own unit, or seconds per step)
    and ``error``."""
    out = breakdown(price_measurement_jobs(jobs, fit.efficiencies(catalog), catalog))
    return out.with_columns(
        predicted=pl.when(pl.col("measured_kind") == "throughput")
        .then(pl.col("batch_per_gpu") * pl.col("gpus") / pl.col("step_s")
              * (pl.col("measured") / pl.col("measured_samples_per_s")))
        .otherwise(pl.col("step_s")),
        predicted_sync_s=pl.col("exposed_comm_s"),
    ).with_columns(error=pl.col("predicted") / pl.col("measured") - 1)


# -- errors --------------------------------------------------------------------------------------------
def error_summary(rows: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    """Per group of ``by``: ``rows``, ``mape``, ``median_ape``, ``max_ape``, ``bias`` (fractions) of the
    ``error`` column; ``sync_rows`` (rows with ``measured_sync_s``), ``sync_mape`` (fraction, over those
    measured above 0: a relative error of a measured 0 is undefined) and ``sync_mae_s`` (mean
    absolute error, s, over every row with a measured sync, 0 included)."""
    sync_err = pl.col("predicted_sync_s") / pl.col("measured_sync_s") - 1
    has_sync = pl.col("measured_sync_s").is_not_null()
    relative = has_sync & (pl.col("measured_sync_s") > 0)
    return rows.group_by(list(by), maintain_order=True).agg(
        rows=pl.len(),
        mape=pl.col("error").abs().mean(),
        median_ape=pl.col("error").abs().median(),
        max_ape=pl.col("error").abs().max(),
        bias=pl.col("error").mean(),
        sync_rows=has_sync.sum(),
        sync_mape=sync_err.filter(relative).abs().mean(),
        sync_mae_s=(pl.col("predicted_sync_s") - pl.col("measured_sync_s")).filter(has_sync).abs().mean(),
    )


def ratio_pairs(rows: pl.DataFrame, between: str) -> pl.DataFrame:
    """Every pair of rows that differ only in ``between`` (``gpu``, ``batch`` or ``precision``; the
    shared columns are :data:`RATIO_KINDS`), with the measured and predicted throughput ratio of the
    faster row over the slower (measured ratio >= 1) and ``ratio_error = predicted_ratio /
    measured_ratio - 1``. Throughput is ``batch_per_gpu * gpus / step`` (samples/s), so step-time
    rows pair too.

    Columns: the shared key, ``a``, ``b`` (the differing values, ``a`` the faster), ``measured_ratio``,
    ``predicted_ratio``, ``ratio_error``, ``kind``.

    Raises:
        ValueError: an unknown ``between``.
    """
    if between not in RATIO_KINDS:
        raise ValueError(f"between: expected one of {', '.join(RATIO_KINDS)}, got {between!r}")
    key = [k for k in RATIO_KINDS[between] if k in rows.columns]  # a hand-made frame may lack the run settings
    col = "batch_per_gpu" if between == "batch" else between
    t = rows.select(
        *key, pl.col(col).cast(pl.String).alias("value"), "line",
        meas=pl.col("batch_per_gpu") * pl.col("gpus") / pl.col("measured_step_s"),
        pred=pl.col("batch_per_gpu") * pl.col("gpus") / pl.col("step_s"),
    )
    pairs = t.join(t, on=key, suffix="_b", nulls_equal=True).filter(
        (pl.col("value") != pl.col("value_b")) & (pl.col("meas") > pl.col("meas_b"))
        | ((pl.col("meas") == pl.col("meas_b")) & (pl.col("value") < pl.col("value_b")))
    )
    return pairs.select(
        *key,
        a=pl.col("value"),
        b=pl.col("value_b"),
        measured_ratio=pl.col("meas") / pl.col("meas_b"),
        predicted_ratio=pl.col("pred") / pl.col("pred_b"),
    ).with_columns(ratio_error=pl.col("predicted_ratio") / pl.col("measured_ratio") - 1, kind=pl.lit(between))


def ratio_summary(rows: pl.DataFrame) -> pl.DataFrame:
    """Per ratio kind (``gpu``, ``batch``, ``precision``): ``pairs``, ``median_abs_error``, ``mape``,
    ``bias`` of :func:`ratio_pairs` (kinds with no pair are left out)."""
    parts = [ratio_pairs(rows, k) for k in RATIO_KINDS]
    parts = [p.select("kind", "ratio_error") for p in parts if p.height]
    if not parts:
        return pl.DataFrame(schema={"kind": pl.String, "pairs": pl.UInt32, "median_abs_error": pl.Float64,
                                    "mape": pl.Float64, "bias": pl.Float64})
    return pl.concat(parts).group_by("kind", maintain_order=True).agg(
        pairs=pl.len(),
        median_abs_error=pl.col("ratio_error").abs().median(),
        mape=pl.col("ratio_error").abs().mean(),
        bias=pl.col("ratio_error").mean(),
    )


# -- the whole run -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MeasurementValidation:
    """The result of :func:`validate_measurements`.

    Attributes:
        rows: one row per usable measurement: its columns, ``role`` (``fit`` or ``test``), ``fold``
            (the group left out under cross-validation, else ``all``), the breakdown columns of the
            model (op by op: ``compute_efficiency_source`` says which efficiencies priced it),
            ``predicted``, ``error``.
        summary: :func:`error_summary` by ``source`` and ``role`` (and ``fold`` under cross-validation,
            with an ``all`` fold over every test row).
        ratios: :func:`ratio_summary` of the test rows.
        fits: per fold, the :class:`FittedEfficiencies` used.
        rejected: the table's rejected rows (``line``, ``reason``, ``detail``).
        protocol: one sentence per fold: what was fitted on which rows and tested on which.
    """

    rows: pl.DataFrame
    summary: pl.DataFrame
    ratios: pl.DataFrame
    fits: dict[str, FittedEfficiencies]
    rejected: pl.DataFrame
    protocol: list[str] = field(default_factory=list)


CROSS_VALIDATE_ALIASES = {"testbed": "source"}
"""``--cross-validate`` names that fall back to another column: ``testbed`` is the ``source`` column where
the table has no ``testbed`` column. Any column name (``gpu``, ``model``, ...) is taken as it is."""


def _fit_mask(rows: pl.DataFrame, fit_on: str | None) -> pl.Series:
    if fit_on is None:
        return pl.Series([True] * rows.height)
    try:
        expr = pl.sql_expr(fit_on)
        # with_columns broadcasts a constant condition (1 = 1, TRUE) to every row
        mask = rows.with_columns(__fit_on=expr.cast(pl.Boolean).fill_null(False))["__fit_on"]
    except pl.exceptions.PolarsError as exc:
        cols = ", ".join(c for c in rows.columns if not c.endswith(("_2", "_4")))
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"--fit-on {fit_on!r}: not a SQL condition over the table's columns ({first}); "
                         f"columns: {cols}") from exc
    if not mask.any():
        names = ", ".join(sorted(rows["gpu"].unique())[:4])
        raise ValueError(f"--fit-on {fit_on!r} selects no row of the {rows.height}; gpu holds the catalog's names "
                         f"({names}, ...): gpu_given holds the table's own spelling")
    return mask


def _reject_unprofilable(table: MeasurementTable, progress: Callable[[str], None] | None = None
                         ) -> MeasurementTable:
    """``table`` with the rows whose (model, sizes, ...) the profiler refuses (a size the model does
    not take, a sequence longer than its positions) moved to the rejected rows, reason
    ``profile_failed``, detail ``file:line: the profiler's message``; the profiles that succeed are
    cached for :func:`measurement_jobs`."""
    from ddlscope.profile import ProfileError

    rows = table.rows
    if rows.height == 0:
        return table
    failed: dict[tuple, str] = {}
    for k in rows.select(_PROFILE_KEYS).unique(maintain_order=True).iter_rows():
        if progress is not None and k not in _PROFILE_CACHE:
            progress(f"profiling {k[0]} ({k[1]}, {k[2]})")
        try:
            _profile_points(*k)
        except (ProfileError, ValueError) as exc:
            failed[k] = str(exc).split("\n")[0]
    if not failed:
        return table
    keys = pl.DataFrame([dict(zip(_PROFILE_KEYS, k, strict=True)) | {"_why": why} for k, why in failed.items()],
                        schema_overrides={"seq_len": pl.Int64, "image_size": pl.Int64})
    marked = rows.join(keys, on=list(_PROFILE_KEYS), how="left", nulls_equal=True)
    bad = marked.filter(pl.col("_why").is_not_null())
    more = bad.select("line", "source", reason=pl.lit("profile_failed"),
                      detail=pl.format("{}:{}: {}", pl.lit(table.path), pl.col("line"), pl.col("_why")))
    return MeasurementTable(rows=marked.filter(pl.col("_why").is_null()).drop("_why"),
                            rejected=pl.concat([table.rejected, more], how="diagonal_relaxed").sort("line"),
                            path=table.path)


def validate_measurements(
    table: MeasurementTable,
    *,
    fit_on: str | None = None,
    cross_validate: str | None = None,
    catalog: Catalog | None = None,
    progress: Callable[[str], None] | None = None,
) -> MeasurementValidation:
    """Predict every row of ``table``; fit on named rows, test on the rest; optionally leave one group
    out at a time (module docstring).

    Args:
        table: from :func:`read_measurements`.
        fit_on: a SQL condition (Polars ``sql_expr``) selecting the rows that fit the efficiencies, e.g.
            ``"gpu = 'V100-SXM2-16GB' AND gpus = 1"``. None: no fit, catalog defaults (every row is a
            test row) unless ``cross_validate`` is given, which then fits on every other group.
        cross_validate: ``gpu``, ``model``, ``testbed`` (the ``testbed`` column, else ``source``) or a column: each
            group in turn is the test set, the fit set being the ``fit_on`` rows (every row if None)
            of the other groups.
        catalog: hardware catalog (default: built-in).
        progress: called with a short text before each profile and fold.

    Raises:
        ValueError: a ``fit_on`` that is not a condition over the columns, an unknown cross-validation
            column, or a table with no usable row.
    """
    table = _reject_unprofilable(table, progress)
    rows = table.rows
    if rows.height == 0:
        first = table.rejected.head(3).select(pl.format("{} ({})", "detail", "reason")).to_series().to_list()
        raise ValueError(f"{table.path}: no usable row ({table.rejected.height} rejected: {'; '.join(first)}"
                         f"{'; ...' if table.rejected.height > 3 else ''})")
    jobs = measurement_jobs(rows, catalog, progress)
    in_fit = _fit_mask(jobs, fit_on)
    fits: dict[str, FittedEfficiencies] = {}
    protocol: list[str] = []
    if cross_validate is None:
        if fit_on is None:
            fit = FittedEfficiencies({}, 0, "catalog defaults (no --fit-on)")
            role = pl.Series(["test"] * jobs.height)
        else:
            fit = fit_efficiencies(jobs.filter(in_fit), f"--fit-on {fit_on}", catalog)
            role = pl.Series(["fit" if m else "test" for m in in_fit])
        fits["all"] = fit
        n_test = int((role == "test").sum())
        protocol.append(f"{fit.origin}; tested on {n_test} row(s)")
        if n_test == 0:
            protocol.append("warning: --fit-on selects every row: no test row, the errors shown are in-sample")
        protocol.extend(fit.at_bounds())
        out = predict_jobs(jobs, fit, catalog).with_columns(role=role, fold=pl.lit("all"))
        by = ["source", "role"]
    else:
        col = cross_validate if cross_validate in jobs.columns else CROSS_VALIDATE_ALIASES.get(cross_validate, "")
        if col not in jobs.columns:
            raise ValueError(f"--cross-validate {cross_validate}: no such column; expected gpu, model, testbed or a "
                             f"column of the table ({', '.join(c for c in rows.columns)})")
        groups = jobs[col].cast(pl.String).fill_null("(empty)")
        parts = []
        for g in groups.unique(maintain_order=True):
            if progress is not None:
                progress(f"fold {col} = {g}")
            test = groups == g
            fit_set = jobs.filter(in_fit & ~test)
            fit = fit_efficiencies(fit_set, f"{col} != {g}" + (f" and {fit_on}" if fit_on else ""), catalog)
            fits[g] = fit
            protocol.append(f"{col} = {g}: {fit.origin}; tested on {int(test.sum())} row(s)")
            protocol.extend(f"{col} = {g}: {w}" for w in fit.at_bounds())
            parts.append(predict_jobs(jobs.filter(test), fit, catalog).with_columns(role=pl.lit("test"),
                                                                                     fold=pl.lit(g)))
        out = pl.concat(parts, how="vertical_relaxed").sort("job_id")
        by = ["source", "fold"]
    test_rows = out.filter(pl.col("role") == "test")
    summary = error_summary(out, by)
    if cross_validate is not None:
        summary = pl.concat([summary, error_summary(test_rows.with_columns(fold=pl.lit("all")), by)],
                            how="vertical_relaxed")
    ratios = ratio_summary(test_rows)
    return MeasurementValidation(rows=out, summary=summary, ratios=ratios, fits=fits, rejected=table.rejected,
                                 protocol=protocol)


def relative(x: float) -> str:
    """A fraction as a percentage with one decimal (``0.123 -> '12.3 %'``); ``nan`` as ``-``."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f} %"
