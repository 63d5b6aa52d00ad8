"""Validation against published measurements: NVIDIA's ResNet-50 multi-GPU throughput tables and
the Pollux (OSDI 2021) step-time/sync-time tables, from ``shared/data`` (each folder's SOURCES.md).

Every row becomes one job of the Jobs table (:mod:`ddlscope.model.jobs`) on the matching catalog
system, and the whole table is predicted in one vectorised :func:`~ddlscope.model.step_time.breakdown`
pass. Workloads come from :func:`ddlscope.profile.profile_model` of the zoo model at the row's batch:
every per-step quantity of these models is affine in the batch size (activations scale, the
optimizer update does not), so each (model, precision) is profiled at batches 2 and 4 and
interpolated exactly (``W(b) = W(2) + (b - 2) (W(4) - W(2)) / 2``). Gradients go as DDP buckets:
``num_gradient_tensors = 1 + ceil(max(S - 1 MiB, 0) / 25 MiB)`` (PyTorch DDP defaults,
:mod:`ddlscope.validate.ddp`); the input
is read and decoded by asynchronous loader workers (DALI, DataLoader workers), so only its
host-to-GPU copy is charged (``stored_input_bytes = 0``); DDP overlaps all-reduce with the
backward as :mod:`ddlscope.model.overlap` schedules it (overlap ``scheduled``: buckets queued behind
the backward, each model's exact bucket timeline and the backward's share of the step at the row's
batch from its op table, the wait for the slowest rank).

Protocol (fit on a named subset, test on the rest; MAPE = mean |predicted / measured - 1|):

- **NVIDIA DeepLearningExamples ResNet-50 v1.5** (``dle_tables/*.csv``; throughput, images/s):
  DGX-1 16/32 GB -> ``dgx-1v`` (V100 SXM2 16/32 GB), DGX-2 -> ``dgx-2``, DGX A100 -> ``dgx-a100``;
  FP32 -> ``fp32``, TF32 -> ``tf32``, AMP -> ``fp16``; 1 GPU -> ``1w1g``, n GPUs ->
  ``allreduce_local`` on NVLink, overlap ``scheduled``. Fitted: ``eff_compute`` per precision class
  (FP32/TF32 vs AMP) and GPU generation on the **1-GPU rows of one system** (V100: DGX-1 16 GB;
  A100: DGX A100), ``eff_memory`` kept at the default 0.7 (two rows cannot fix three numbers).
  Tested: every other row (the other systems' 1-GPU rows, all multi-GPU rows).
- **Pollux** (``pollux/<job>/{placements,scalability}.csv``; seconds per step and of gradient
  synchronisation) on ``aws-g4dn.12xlarge`` (4 x T4, PCIe, 50 Gb/s ENA): imagenet = ResNet-50 with
  Apex AMP (O1: FP16 compute, FP32 gradients), cifar10 = the CIFAR ResNet-18 (FP32), ncf = NeuMF on
  MovieLens 1M (FP32, Adam, dense embedding gradients); a placement of ``p`` GPUs on ``m`` nodes is
  ``1w1g`` (p = 1), ``allreduce_local`` (m = 1) or ``allreduce_cluster``. Unlike the DLE tables,
  these rows go through the measurement-table path (:func:`pollux_measurement_jobs`,
  :mod:`ddlscope.validate.measurements`): every op of the row's step is priced on the T4
  (:func:`ddlscope.model.compute.price_jobs`), and its DDP bucket timeline comes from its op table.
  Fitted: per job, the compute-efficiency factors of
  :data:`ddlscope.validate.measurements.FIT_PARAMETERS` on its **one-GPU rows** (placement ``1``, every
  batch size; a factor left at a bound of its range, or an efficiency
  taken to the cap of 1, is reported in ``notes``); the network parameters
  (:data:`POLLUX_GRID`: the NIC's achieved share, ``skew_sigma``, ``collective_launch_s``) **leave one
  job out**: each job's multi-GPU rows are tested with the parameters fitted (step MAPE + sync MAPE) on
  the other two jobs' multi-GPU rows. Across nodes the all-reduce is NCCL's flat ring
  (``flat_ring = 1``). A placement whose GPUs do not split evenly over its nodes (``1124``) is
  priced as its busiest node: ``max`` GPUs on each of the ``m`` nodes. Per-GPU work
  is the same, the busiest node's intra-server ring is the longest, and every node's NIC carries the
  same inter-node ring traffic, so the step, which waits for the slowest node, is that of the even
  placement ``m x max``. ``sync_time`` (from the last local
  gradient to the end of DDP's synchronisation: the exposed communication) is compared with the
  model's ``exposed_comm_s``. yolov3 is left out (:data:`LEFT_OUT`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
from scipy.optimize import lsq_linear

from ddlscope.model.jobs import JOB_SCHEMA, system_columns
from ddlscope.model.overlap import bucket_timeline
from ddlscope.model.step_time import breakdown
from ddlscope.specs.catalog import Catalog, builtin_catalog
from ddlscope.specs.system import System
from ddlscope.tables import read_csv
from ddlscope.validate.ddp import ddp_buckets_expr

WORKLOAD_LINEAR = (
    "compute_bound_flops",
    "memory_bound_bytes",
    "memory_bound_flops",
    "input_bytes",
    "peak_memory_bytes",
)
"""Workload fields interpolated in the batch; the others do not depend on it."""

DLE_SYSTEMS: dict[str, tuple[str, str]] = {
    "DGX-1 16G (8x V100 16G)": ("dgx-1v", "V100-SXM2-16GB"),
    "DGX-1 16GB (8x V100 16GB)": ("dgx-1v", "V100-SXM2-16GB"),
    "DGX-1 32G (8x V100 32G)": ("dgx-1v", "V100-SXM2-32GB"),
    "DGX-1 32GB (8x V100 32GB)": ("dgx-1v", "V100-SXM2-32GB"),
    "DGX-2 (16x V100 32G)": ("dgx-2", "V100-SXM2-32GB"),
    "DGX A100 (8x A100 80GB)": ("dgx-a100", "A100-SXM4-80GB"),
}
"""DeepLearningExamples system names -> (catalog server, catalog GPU)."""
DLE_PRECISION = {"FP32": "fp32", "TF32": "tf32", "AMP": "fp16"}
DLE_FIT_SYSTEMS = {
    "V100": ("DGX-1 16G (8x V100 16G)", "DGX-1 16GB (8x V100 16GB)"),
    "A100": ("DGX A100 (8x A100 80GB)",),
}
"""The systems whose 1-GPU rows fit each GPU generation's compute efficiencies."""

POLLUX_JOBS: dict[str, tuple[str, str, str, str]] = {
    "imagenet": ("resnet50", "fp16", "sgd", "sparse"),
    "cifar10": ("resnet18_cifar", "fp32", "sgd", "sparse"),
    "ncf": ("ncf", "fp32", "adam", "dense"),
}
"""Pollux job -> (zoo model, precision, optimizer, embedding gradients), from the adaptdl benchmark
scripts (osdi21-artifact): imagenet = torchvision resnet50 + Apex ``amp.initialize`` (O1), SGD
momentum 0.9; cifar10 = kuangliu ResNet18, SGD momentum 0.9; ncf = NeuMF-end on ml-1m, Adam, dense
``nn.Embedding`` gradients. The measurement-table path that prices these rows
(:func:`pollux_measurement_jobs`) profiles every model with dense embedding gradients, which is
ncf's setting; the two ResNets have no embedding, so the fourth field only documents the job."""
POLLUX_SERVER = "aws-g4dn.12xlarge"
POLLUX_FIT_JOB = "imagenet"
LEFT_OUT: dict[str, str] = {
    "yolov3": "YOLOv3 (Darknet-53 + FPN, 416 x 416 VOC) is not in the zoo: its loss builds targets from the "
    "labels' values (anchor matching, data-dependent indexing), which the meta-device profiler cannot "
    "trace, and a faithful copy of the benchmark's network and loss is third-party code we do not "
    "reproduce",
}
"""Published tables not validated, with the reason."""

ROW_COLUMNS: dict[str, str] = {
    "source": "dle or pollux",
    "table": "the CSV file (pollux: job/file)",
    "role": "fit (used to fit efficiencies) or test",
    "system": "catalog system",
    "model": "zoo model",
    "precision": "fp32, tf32 or fp16",
    "gpus": "GPUs (replicas)",
    "nodes": "servers",
    "placement": "pollux placements table: GPUs per server, one digit a server (null elsewhere)",
    "batch_per_gpu": "samples per GPU per step",
    "measured": "throughput (img/s, dle) or step time (s, pollux)",
    "predicted": "the model's value of the same",
    "error": "predicted / measured - 1",
    "measured_sync_s": "pollux sync_time (s)",
    "predicted_sync_s": "the model's exposed communication (s)",
}


@dataclass
class PublishedResult:
    """Rows (:data:`ROW_COLUMNS`), MAPE per table and role, fitted parameters, skipped rows by reason;
    ``by_servers``: the Pollux multi-GPU errors by job and number of servers
    (:func:`pollux_errors_by_servers`; None for the DLE tables alone); ``repeatability``: how far
    Pollux's repeated placements disagree with each other, and the error floor that sets
    (:func:`pollux_repeatability`; None for the DLE tables alone); ``notes``: warnings of the fits
    (a fitted factor at a bound of its range, an efficiency at the cap of 1)."""

    rows: pl.DataFrame
    summary: pl.DataFrame
    fitted: dict[str, dict[str, float]]
    skipped: dict[str, int] = field(default_factory=dict)
    by_servers: pl.DataFrame | None = None
    repeatability: pl.DataFrame | None = None
    notes: list[str] = field(default_factory=list)


_PROFILE_CACHE: dict[tuple, dict[str, float]] = {}


def _profile_points(model: str, precision: str, optimizer: str, embedding_gradients: str) -> dict[str, float]:
    """Workload fields at batch 2 (``*_2``) and 4 (``*_4``) plus the batch-independent ones."""
    key = (model, precision, optimizer, embedding_gradients)
    if key not in _PROFILE_CACHE:
        from ddlscope.profile import profile_model

        p2, p4 = (
            profile_model(
                model, batch_size=b, precision=precision, optimizer=optimizer, embedding_gradients=embedding_gradients
            )
            for b in (2, 4)
        )
        w2, w4 = p2.workload, p4.workload
        out = {f"{k}_2": float(getattr(w2, k) or 0.0) for k in WORKLOAD_LINEAR}
        out.update({f"{k}_4": float(getattr(w4, k) or 0.0) for k in WORKLOAD_LINEAR})
        out.update(
            {
                "dense_param_bytes": w2.dense_param_bytes,
                "sparse_bytes_per_step": w2.sparse_bytes_per_step,
                "embedding_table_bytes": w2.embedding_table_bytes,
            }
        )
        # the scheduled overlap's inputs from the op table at batch 4: the backward's share of the
        # step's roofline time and the exact bucket timeline (ddlscope.model.overlap)
        for b, prof in ((2, p2), (4, p4)):
            out[f"backward_roofline_s_{b}"] = float(prof.ops.filter(pl.col("phase") == "backward")["roofline_s"].sum())
            out[f"step_roofline_s_{b}"] = float(prof.ops["roofline_s"].sum())
        out.update(bucket_timeline(p4.ops, p4.params))
        _PROFILE_CACHE[key] = out
    return _PROFILE_CACHE[key]


def jobs_for_rows(rows: pl.DataFrame, system: System, *, overlap: float | None) -> pl.DataFrame:
    """A Jobs table (:data:`JOB_SCHEMA` columns, plus ``rows``' own) for ``rows`` with columns
    ``model, precision, optimizer, embedding_gradients, batch_per_gpu, gpus, nodes`` on ``system``
    (vectorised: one profile pair per distinct model, then expressions). ``overlap`` ``None`` is the
    scheduled overlap, with each model's ``backward_fraction`` and bucket timeline
    (:data:`ddlscope.model.overlap.TIMELINE_COLUMNS`) from its op table."""
    keys = rows.select("model", "precision", "optimizer", "embedding_gradients").unique()
    prof = pl.DataFrame([{**dict(zip(keys.columns, k, strict=True)), **_profile_points(*k)} for k in keys.iter_rows()])
    b = pl.col("batch_per_gpu").cast(pl.Float64)
    lin = {k: pl.col(f"{k}_2") + (b - 2) * (pl.col(f"{k}_4") - pl.col(f"{k}_2")) / 2 for k in WORKLOAD_LINEAR}
    # the backward's share of the step at the row's batch: both roofline times are affine in the batch
    bwd, step = ((pl.col(f"{k}_2") + (b - 2) * (pl.col(f"{k}_4") - pl.col(f"{k}_2")) / 2)
                 for k in ("backward_roofline_s", "step_roofline_s"))
    lin["backward_fraction"] = bwd / step
    p, m = pl.col("gpus"), pl.col("nodes")
    arch = (
        pl.when(p == 1)
        .then(pl.lit("1w1g"))
        .when(m == 1)
        .then(pl.lit("allreduce_local"))
        .otherwise(pl.lit("allreduce_cluster"))
    )
    sys_cols = system_columns(system)
    out = (
        rows.join(prof, on=keys.columns, how="left")
        .with_row_index("job_id")
        .with_columns(
            workload=pl.col("model"),
            batch_size=pl.col("batch_per_gpu").cast(pl.Int64),
            **lin,
            stored_input_bytes=pl.lit(0.0),
            num_gradient_tensors=ddp_buckets_expr(pl.col("dense_param_bytes")),
            architecture=arch,
            num_workers=p.cast(pl.Int64),
            gpus_per_worker=pl.lit(1, pl.Int64),
            num_ps=pl.lit(0, pl.Int64),
            num_servers=m.cast(pl.Int64),
            **{k: pl.lit(v) for k, v in sys_cols.items()},
            overlap_fraction=pl.lit(None if overlap is None else float(overlap), pl.Float64),
            memory_bound_scale=pl.lit(1.0),
        )
    )
    casts = {name: dtype for name, (dtype, _) in JOB_SCHEMA.items()}
    return out.with_columns(pl.col(n).cast(t) for n, t in casts.items())


def _fit_inverse_efficiencies(
    f: np.ndarray, m: np.ndarray, y: np.ndarray, w: np.ndarray, fixed_memory: float | None
) -> tuple[float, float]:
    """Least squares of ``y = f / e_c + m / e_m`` (relative weights ``w``) with efficiencies in (0, 1]."""
    if fixed_memory is not None:
        rhs = (y - m / fixed_memory) * w
        sol = lsq_linear((f * w)[:, None], rhs, bounds=(1.0, np.inf))
        return 1.0 / float(sol.x[0]), fixed_memory
    sol = lsq_linear(np.column_stack([f * w, m * w]), y * w, bounds=(1.0, np.inf))
    return 1.0 / float(sol.x[0]), 1.0 / float(sol.x[1])


def fit_compute(
    jobs: pl.DataFrame, measured_step: str, fit_mask: pl.Expr, group: list[str], fixed_memory: float | None = None
) -> pl.DataFrame:
    """``eff_compute`` (and ``eff_memory`` unless fixed) per ``group`` from the rows of ``fit_mask``
    (one-GPU jobs): least squares of the measured step minus data I/O against the compute- and
    memory-bound terms at efficiency 1, relative residuals. Returns ``group`` + the two columns."""
    base = breakdown(jobs.with_columns(eff_compute=pl.lit(1.0), eff_memory=pl.lit(1.0)))
    fit = base.filter(fit_mask)
    out = []
    for keys, part in fit.group_by(group, maintain_order=True):
        y = (part[measured_step] - part["data_io_s"]).to_numpy()
        e_c, e_m = _fit_inverse_efficiencies(
            part["compute_bound_s"].to_numpy(),
            part["memory_bound_s"].to_numpy(),
            y,
            1.0 / part[measured_step].to_numpy(),
            fixed_memory,
        )
        out.append({**dict(zip(group, keys, strict=True)), "eff_compute": e_c, "eff_memory": e_m})
    return pl.DataFrame(out)


def _mape(frame: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    return frame.group_by(by, maintain_order=True).agg(
        rows=pl.len(),
        mape=pl.col("error").abs().mean(),
        median_ape=pl.col("error").abs().median(),
        max_ape=pl.col("error").abs().max(),
        bias=pl.col("error").mean(),
    )


# -- NVIDIA DeepLearningExamples -------------------------------------------------------------------
def dle_validation(data_dir: str | Path, catalog: Catalog | None = None) -> PublishedResult:
    """Predict every row of ``data_dir/dle_tables/*.csv`` (module docstring).

    Raises:
        FileNotFoundError: a table of :data:`DLE_TABLES` is missing.
        ValueError: a table that is not readable or holds a bad value (:func:`read_dle_table`), or a
            system or precision the mapping does not know (naming the file and value).
    """
    cat = catalog or builtin_catalog()
    folder = Path(data_dir, "dle_tables")
    for name in DLE_TABLES:
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder / name}: missing (see shared/data/dle_tables/SOURCES.md)")
    files = sorted(folder.glob("*.csv"))
    frames = []
    for path in files:
        t = read_dle_table(path)
        for col, known in (("system", DLE_SYSTEMS), ("precision", DLE_PRECISION)):
            bad = sorted(set(t[col]) - set(known))
            if bad:
                raise ValueError(f"{path}: {col}: unknown {bad}; expected one of {sorted(known)}")
        frames.append(t.drop("line").with_columns(table=pl.lit(path.name)))
    rows = (
        pl.concat(frames, how="diagonal_relaxed")
        .with_columns(
            server=pl.col("system").replace_strict({k: v[0] for k, v in DLE_SYSTEMS.items()}),
            gpu=pl.col("system").replace_strict({k: v[1] for k, v in DLE_SYSTEMS.items()}),
            precision_model=pl.col("precision").replace_strict(DLE_PRECISION),
            generation=pl.when(pl.col("gpu_model").str.starts_with("A100"))
            .then(pl.lit("A100"))
            .otherwise(pl.lit("V100")),
        )
        .with_columns(
            precision_class=pl.when(pl.col("precision_model") == "fp16")
            .then(pl.lit("amp"))
            .otherwise(pl.lit("fp32/tf32")),
            role=pl.when(
                (pl.col("gpus") == 1) & pl.col("system").is_in([s for v in DLE_FIT_SYSTEMS.values() for s in v])
            )
            .then(pl.lit("fit"))
            .otherwise(pl.lit("test")),
        )
    )
    jobs = []
    for (server, gpu), part in rows.group_by("server", "gpu", maintain_order=True):
        system = cat.system(server, gpu=gpu, name=f"{server}[{gpu}]")
        spec = part.rename({"precision": "precision_printed"}).with_columns(
            model=pl.lit("resnet50"),
            precision=pl.col("precision_model"),
            optimizer=pl.lit("sgd"),
            embedding_gradients=pl.lit("sparse"),
            nodes=pl.lit(1, pl.Int64),
        )
        jobs.append(jobs_for_rows(spec, system, overlap=None))
    jobs_df = pl.concat(jobs, how="vertical_relaxed")
    jobs_df = jobs_df.with_columns(
        measured_step_s=pl.col("batch_per_gpu") * pl.col("gpus") / pl.col("throughput_img_s")
    )
    fitted = fit_compute(
        jobs_df,
        "measured_step_s",
        pl.col("role") == "fit",
        ["table", "generation", "precision_class"],
        fixed_memory=0.7,
    )
    out = breakdown(
        jobs_df.drop("eff_compute", "eff_memory").join(
            fitted, on=["table", "generation", "precision_class"], how="left"
        )
    )
    missing = out.filter(pl.col("eff_compute").is_null())
    if missing.height:
        raise ValueError(
            f"dle: no fit row for {missing.select('table', 'generation', 'precision_class').unique().rows()}"
        )
    res = out.select(
        source=pl.lit("dle"),
        table=pl.col("table"),
        role=pl.col("role"),
        system=pl.col("system"),
        model=pl.col("model"),
        precision=pl.col("precision").cast(pl.String),
        gpus=pl.col("gpus").cast(pl.Int64),
        nodes=pl.lit(1, pl.Int64),
        batch_per_gpu=pl.col("batch_per_gpu"),
        measured=pl.col("throughput_img_s").cast(pl.Float64),
        predicted=pl.col("samples_per_s"),
        measured_sync_s=pl.lit(None, pl.Float64),
        predicted_sync_s=pl.col("exposed_comm_s"),
        eff_compute=pl.col("eff_compute"),
        eff_memory=pl.col("eff_memory"),
    ).with_columns(error=pl.col("predicted") / pl.col("measured") - 1)
    fits = {
        f"{r['table']} {r['generation']} {r['precision_class']}": {
            "eff_compute": r["eff_compute"],
            "eff_memory": r["eff_memory"],
        }
        for r in fitted.iter_rows(named=True)
    }
    return PublishedResult(rows=res, summary=_mape(res, ["source", "table", "role"]), fitted=fits)


# -- Pollux -----------------------------------------------------------------------------------------
POLLUX_COLUMNS: dict[str, dict[str, pl.DataType]] = {
    "placements": {"placement": pl.String, "local_bsz": pl.Int64, "step_time": pl.Float64, "sync_time": pl.Float64},
    "scalability": {"num_nodes": pl.Int64, "num_replicas": pl.Int64, "local_bsz": pl.Int64, "step_time": pl.Float64,
                    "sync_time": pl.Float64},
}
"""The columns of the Pollux throughput tables and their types (shared/data/pollux/SOURCES.md)."""


DLE_COLUMNS: dict[str, pl.DataType] = {
    "system": pl.String(), "gpu_model": pl.String(), "gpus": pl.Int64(), "batch_per_gpu": pl.Int64(),
    "precision": pl.String(), "throughput_img_s": pl.Float64(),
}
"""The columns of a DeepLearningExamples table the validation reads, with their types
(shared/data/dle_tables/SOURCES.md); the other columns are kept as text."""
DLE_TABLES = ("resnet50v1.5_pytorch_training_perf_ngc19.10.csv", "resnet50v1.5_pytorch_training_perf_ngc21.03.csv")
"""The DLE tables the protocol fits on (:data:`DLE_FIT_SYSTEMS`): each must be present."""


def _read_text_csv(path: Path, columns: Sequence[str], what: str, sources: str) -> pl.DataFrame:
    """``path`` as a CSV table of text columns, read with :func:`ddlscope.tables.read_csv` (a UTF-8
    byte-order mark, CRLF line ends and blank lines read as a plain table; spaces and quotes around
    the names stripped): the file's columns as String (empty fields null) and ``_line`` (Int64, the
    file's line, 1 = the header).

    Raises:
        ValueError naming the file (``what`` is the table's kind, ``sources`` its SOURCES.md): it is
            not CSV (with the line where read_csv names one), a column of ``columns`` is missing, it
            has no data row, or a line is rejected (more or fewer fields than the header, not UTF-8,
            cut short at the end): a shared table is refused whole, naming the first such line and
            its reason, never read in part.
    """
    try:
        tf = read_csv(path, label=str(path))
    except ValueError as exc:  # read_csv's message names the file and, where there is one, the line
        raise ValueError(f"{exc}: not a readable CSV table ({what}; {sources})") from exc
    if tf.rejected.height:
        first = tf.rejected.row(0, named=True)
        more = f"; {tf.rejected.height - 1} more line(s) rejected" if tf.rejected.height > 1 else ""
        raise ValueError(f"{path}: line {first['line']}: {first['reason']} ({first['detail']}){more}: {what} is "
                         f"refused, not read in part ({sources})")
    raw = tf.frame
    missing = [c for c in columns if c not in raw.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} ({what} has {', '.join(columns)}; "
                         f"{sources})")
    if raw.height == 0:
        raise ValueError(f"{path}: no data rows ({what}; {sources})")
    return raw


def _refuse_first_bad(path: Path, raw: pl.DataFrame, checks: Sequence[tuple[str, pl.Series, str]]) -> None:
    """Raise ValueError ``path: line N: column: expected ..., got '...'`` for the first row of the
    first check ``(column, bad, expected)`` whose ``bad`` (a Boolean Series; null counts as bad) holds;
    N is the row's ``_line`` in ``raw`` (the file's line, 1 = the header)."""
    for col, bad, expected in checks:
        bad = bad.fill_null(True)
        if bad.any():
            i = int(bad.arg_true()[0])
            raise ValueError(f"{path}: line {raw['_line'][i]}: {col}: expected {expected}, got {raw[col][i]!r}")


def read_dle_table(path: Path) -> pl.DataFrame:
    """One DeepLearningExamples ResNet-50 table: every column as text except :data:`DLE_COLUMNS`,
    typed, and ``line`` (the file's line, 1 = the header).

    Raises:
        ValueError: the file is not CSV, has no data row, lacks a column, has a line with more or
            fewer fields than the header or not UTF-8 (:func:`_read_text_csv`: naming the line and
            the reason), or holds a value that is not of its column's type (``gpus``,
            ``batch_per_gpu``: integers >= 1; ``throughput_img_s``: images/s > 0, finite; the names
            not empty); the message names the file, and the line and column of the first bad value.
    """
    raw = _read_text_csv(path, list(DLE_COLUMNS), "a DLE table", "shared/data/dle_tables/SOURCES.md")
    typed = raw.with_columns(pl.col(c).str.strip_chars().cast(t, strict=False) for c, t in DLE_COLUMNS.items())
    checks = []
    for col, dtype in DLE_COLUMNS.items():
        v = typed[col]
        if dtype == pl.Float64:
            checks.append((col, ~(v.is_finite() & (v > 0)), "images/s > 0"))
        elif dtype == pl.Int64:
            checks.append((col, ~(v >= 1), "an integer >= 1"))
        else:
            checks.append((col, v.str.len_chars() == 0, "a name"))
    _refuse_first_bad(path, raw, checks)
    return typed.select(pl.col("_line").alias("line"), pl.exclude("_line"))


def read_pollux_table(path: Path, kind: str) -> pl.DataFrame:
    """One Pollux throughput table (``kind``: ``placements`` or ``scalability``) with the columns of
    :data:`POLLUX_COLUMNS`, typed.

    Raises:
        ValueError: the file is empty, not CSV, has no data row, lacks a column, has a line with
            more or fewer fields than the header or not UTF-8 (:func:`_read_text_csv`: naming the
            line and the reason), or holds a value that is not of its column's type or
            (``placement``) not a string of digits, or (scalability) more nodes than replicas; the
            message names the file, and the column and line (1 = the header) of the first bad value.
    """
    want = POLLUX_COLUMNS[kind]
    raw = _read_text_csv(path, list(want), f"a {kind} table of Pollux's", "shared/data/pollux/SOURCES.md")
    typed = raw.select(pl.col(col).str.strip_chars().cast(dtype, strict=False) for col, dtype in want.items())
    checks = []
    for col, dtype in want.items():
        v = typed[col]
        if col == "placement":
            checks.append((col, ~v.str.contains(r"^[1-9]+$"), "GPUs per node, one digit 1-9 a node (e.g. 1124)"))
        elif col == "sync_time":
            checks.append((col, ~(v.is_finite() & (v >= 0)), "seconds >= 0"))
        elif dtype == pl.Float64:
            checks.append((col, ~(v.is_finite() & (v > 0)), "seconds > 0"))
        else:
            checks.append((col, ~(v >= 1), "an integer >= 1"))
    if "num_nodes" in typed.columns:  # a node without a replica is not a placement
        checks.append(("num_nodes", typed["num_nodes"] > typed["num_replicas"], "at most num_replicas"))
    _refuse_first_bad(path, raw, checks)
    return typed


def _pollux_rows(data_dir: Path, skipped: dict[str, int]) -> pl.DataFrame:
    frames = []
    for job in (*POLLUX_JOBS, *LEFT_OUT):
        for kind in ("placements", "scalability"):
            path = data_dir / "pollux" / job / f"{kind}.csv"
            if not path.is_file():
                raise FileNotFoundError(f"{path}: missing (see shared/data/pollux/SOURCES.md)")
            t = read_pollux_table(path, kind)
            if kind == "placements":  # one digit per node: the GPUs on it (read_pollux_table checked them)
                per_node = pl.col("placement").str.split("").cast(pl.List(pl.Int64))
                t = t.with_columns(nodes=pl.col("placement").str.len_chars().cast(pl.Int64),
                                   num_replicas=per_node.list.sum(), max_per_node=per_node.list.max())
            else:
                t = t.with_columns(
                    placement=pl.lit(None, pl.String),
                    nodes=pl.col("num_nodes").cast(pl.Int64),
                    max_per_node=(pl.col("num_replicas") / pl.col("num_nodes")).ceil().cast(pl.Int64),
                )
            t = t.select(
                "placement",
                "nodes",
                replicas=pl.col("num_replicas").cast(pl.Int64),
                max_per_node="max_per_node",
                batch_per_gpu=pl.col("local_bsz").cast(pl.Int64),
                step_time=pl.col("step_time").cast(pl.Float64),
                sync_time=pl.col("sync_time").cast(pl.Float64),
            ).with_columns(job=pl.lit(job), table=pl.lit(f"{job}/{kind}.csv"))
            if job in LEFT_OUT:
                key = f"{job}: left out (not in the zoo, see LEFT_OUT)"
                skipped[key] = skipped.get(key, 0) + t.height
                continue
            # an uneven placement is priced as its busiest node: max_per_node GPUs on each of the nodes
            t = t.with_columns(gpus=pl.col("max_per_node") * pl.col("nodes"))
            over = pl.col("max_per_node") > 4
            n_over = t.filter(over).height
            if n_over:
                key = "more GPUs on a node than a g4dn.12xlarge has (4)"
                skipped[key] = skipped.get(key, 0) + n_over
            frames.append(t.filter(~over))
    return pl.concat(frames)


POLLUX_GRID: dict[str, list[float]] = {
    "nic_link_efficiency": np.geomspace(0.05, 0.5, 24).tolist(),
    "skew_sigma": np.linspace(0.0, 0.04, 9).tolist(),
    "collective_launch_s": [0.0, 5e-4, 1e-3, 2e-3, 4e-3],
}
"""The network parameters fitted on Pollux rows (a grid, one vectorised pass): the NIC's achieved
share of its 50 Gb/s (the transport), the relative standard deviation of per-rank compute time
(the wait for the slowest rank) and the per-collective launch latency (ddlscope.model.overlap)."""


def _fit_network(jobs: pl.DataFrame) -> dict[str, float]:
    """The :data:`POLLUX_GRID` point minimising step MAPE + sync MAPE over ``jobs`` (multi-GPU rows
    with ``step_time`` and ``sync_time``)."""
    grid = pl.DataFrame(list(itertools.product(*POLLUX_GRID.values())), schema=list(POLLUX_GRID), orient="row")
    trial = breakdown(jobs.drop(list(POLLUX_GRID), strict=False).join(grid, how="cross"))
    score = (
        trial.group_by(list(POLLUX_GRID))
        .agg(step_mape=(pl.col("step_s") / pl.col("step_time") - 1).abs().mean(),
             sync_mape=(pl.col("exposed_comm_s") / pl.col("sync_time") - 1).abs().mean())
        .with_columns(score=pl.col("step_mape") + pl.col("sync_mape"))
        .sort("score", *POLLUX_GRID)
    )
    return score.row(0, named=True)


def pollux_measurement_jobs(rows: pl.DataFrame, system: System, catalog: Catalog) -> pl.DataFrame:
    """The Pollux rows (:func:`_pollux_rows`) as the Jobs table of a measurement table
    (:func:`ddlscope.validate.measurements.measurement_jobs`): each job's zoo model, precision and
    optimizer (:data:`POLLUX_JOBS`), the server's GPU, ``gpus`` GPUs on ``nodes`` servers, the
    measured step and sync time; every row with its op table's DDP bucket timeline and NCCL's flat
    ring across servers (``flat_ring = 1``). ``step_time`` and ``sync_time`` stay as columns.

    Raises:
        ValueError: a row the measurement checks reject (it names the row and the reason).
    """
    from ddlscope.validate.measurements import check_measurements, measurement_jobs

    spec = {k: pl.col("job").replace_strict({j: v[i] for j, v in POLLUX_JOBS.items()})
            for i, k in enumerate(("model", "precision", "optimizer"))}
    raw = rows.with_columns(
        **spec, gpu=pl.lit(system.gpu.name), server=pl.lit(system.name), servers=pl.col("nodes"),
        step_time_s=pl.col("step_time"), measured_sync_s=pl.col("sync_time"), source=pl.col("table"),
        # a kernel per parameter: the benchmark images are nvcr.io/nvidia/pytorch:20.10-py3, PyTorch 1.7
        # (petuum/adaptdl benchmark/models/imagenet/Dockerfile), before the multi-tensor default of 2.0
        optimizer_kernels=pl.lit("for_loop"),
    ).with_row_index("line", offset=1)
    kept = ("line", "step_time", "sync_time")
    raw = raw.with_columns(pl.col(c).cast(pl.String) for c in raw.columns if c not in kept)
    table = check_measurements(raw.with_columns(pl.col("line").cast(pl.Int64)), "pollux rows", catalog)
    if table.rejected.height:
        first = table.rejected.row(0, named=True)
        where = rows["table"][int(first["line"]) - 1]
        raise ValueError(f"pollux/{where}: {table.rejected.height} row(s) of the Pollux tables not priceable, "
                         f"e.g. {first['detail'].split(': ', 1)[-1]} ({first['reason']})")
    return measurement_jobs(table.rows, catalog).with_columns(flat_ring=pl.lit(1.0))


def pollux_validation(data_dir: str | Path, catalog: Catalog | None = None) -> PublishedResult:
    """Predict every evenly placed row of ``data_dir/pollux/<job>/*.csv`` (module docstring), every
    op priced on the T4 (:mod:`ddlscope.model.compute`): each job's compute-efficiency factors
    (:data:`ddlscope.validate.measurements.FIT_PARAMETERS`) fitted on its one-GPU rows
    (``fitted["<job>"]``); the network parameters (:data:`POLLUX_GRID`) leave-one-job-out: each
    job's multi-GPU rows are predicted with the parameters fitted on the other jobs' multi-GPU rows
    (``fitted["network without <job>"]``); ``fitted["network"]`` is the fit on all three, for
    reference. ``notes``: the fitted factors left at a bound of their range and the
    efficiencies taken to the cap of 1 (:meth:`FittedEfficiencies.at_bounds`).

    Raises:
        FileNotFoundError: a table is missing; ValueError: a table is not readable or holds a bad
            value (:func:`read_pollux_table`), or a job has no one-GPU row to fit on.
    """
    from ddlscope.validate.measurements import fit_efficiencies, price_measurement_jobs

    cat = catalog or builtin_catalog()
    skipped: dict[str, int] = {}
    rows = _pollux_rows(Path(data_dir), skipped)
    no_fit = [j for j in POLLUX_JOBS if rows.filter((pl.col("job") == j) & (pl.col("gpus") == 1)).height == 0]
    if no_fit:
        raise ValueError(f"{', '.join(no_fit)}: no one-GPU row (placement 1) in "
                         f"{', '.join(str(Path(data_dir) / 'pollux' / j / 'placements.csv') for j in no_fit)}: the "
                         "compute efficiencies of a job are fitted on its one-GPU rows")
    system = cat.system(POLLUX_SERVER)
    jobs = pollux_measurement_jobs(rows, system, cat).with_columns(
        role=pl.when(pl.col("gpus") == 1).then(pl.lit("fit")).otherwise(pl.lit("test")))
    fitted: dict[str, dict[str, float]] = {}
    notes: list[str] = []
    priced = []
    for job in POLLUX_JOBS:
        part = jobs.filter(pl.col("job") == job)
        one = part.filter(pl.col("gpus") == 1)
        fit = fit_efficiencies(one, f"{job}: its {one.height} one-GPU rows (placements.csv, placement 1)", cat)
        fitted[job] = fit.multipliers
        notes.extend(f"{job}: {w}" for w in fit.at_bounds())
        priced.append(price_measurement_jobs(part, fit.efficiencies(cat), cat))
    jobs = pl.concat(priced, how="vertical_relaxed")
    multi = jobs.filter(pl.col("gpus") > 1)
    parts = [jobs.filter(pl.col("gpus") == 1)]
    for job in POLLUX_JOBS:
        best = _fit_network(multi.filter(pl.col("job") != job))
        fitted[f"network without {job}"] = best
        parts.append(multi.filter(pl.col("job") == job).with_columns(
            **{k: pl.lit(best[k], pl.Float64) for k in POLLUX_GRID}))
    fitted["network"] = _fit_network(multi)
    out = breakdown(pl.concat(parts, how="diagonal_relaxed"))
    res = out.select(
        source=pl.lit("pollux"),
        table=pl.col("table"),
        role=pl.col("role"),
        system=pl.lit(system.name),
        model=pl.col("model"),
        precision=pl.col("precision").cast(pl.String),
        gpus=pl.col("gpus"),
        nodes=pl.col("nodes").cast(pl.Int64),
        placement=pl.col("placement"),
        batch_per_gpu=pl.col("batch_per_gpu"),
        measured=pl.col("step_time"),
        predicted=pl.col("step_s"),
        measured_sync_s=pl.col("sync_time"),
        predicted_sync_s=pl.col("exposed_comm_s"),
        compute_efficiency_source=pl.col("compute_efficiency_source"),
    ).with_columns(error=pl.col("predicted") / pl.col("measured") - 1)
    summary = _mape(res, ["source", "table", "role"]).join(
        res.filter(pl.col("gpus") > 1)
        .group_by("table", "role")
        .agg(
            sync_mape=(pl.col("predicted_sync_s") / pl.col("measured_sync_s") - 1).abs().mean(),
            sync_measured_mean_s=pl.col("measured_sync_s").mean(),
            sync_predicted_mean_s=pl.col("predicted_sync_s").mean(),
        ),
        on=["table", "role"],
        how="left",
    )
    return PublishedResult(rows=res, summary=summary, fitted=fitted, skipped=skipped, notes=notes,
                           by_servers=pollux_errors_by_servers(res), repeatability=pollux_repeatability(res))


def _servers_class() -> pl.Expr:
    n = pl.col("nodes")
    return (pl.when(n == 1).then(pl.lit("1")).when(n == 2).then(pl.lit("2")).when(n <= 4).then(pl.lit("3-4"))
            .otherwise(pl.lit(">= 5")))


def pollux_errors_by_servers(rows: pl.DataFrame) -> pl.DataFrame:
    """Where the communication model errs: the multi-GPU rows of :func:`pollux_validation` grouped by
    job and number of servers (``1``; ``2``; ``3-4``: the placements tables; ``>= 5``: the
    scalability tables, 6-16 servers).

    Args:
        rows: :attr:`PublishedResult.rows` of the Pollux validation (:data:`ROW_COLUMNS`).

    Returns:
        One row per (``job``, ``servers``), sorted: ``rows``; ``step_mape``, ``step_median_error``
        (mean |error| and median signed error of the step time; error = predicted / measured - 1,
        fractions); ``sync_mape``, ``sync_median_ape``, ``sync_median_error`` (the same of the
        exposed communication against Pollux's ``sync_time``); ``sync_measured_mean_s``,
        ``sync_predicted_mean_s``.
    """
    multi = rows.filter(pl.col("source") == "pollux", pl.col("gpus") > 1).with_columns(
        job=pl.col("table").str.split("/").list.first(), servers=_servers_class(),
        sync_error=pl.col("predicted_sync_s") / pl.col("measured_sync_s") - 1)
    order = {"1": 0, "2": 1, "3-4": 2, ">= 5": 3}
    return (multi.group_by("job", "servers").agg(
        rows=pl.len(),
        step_mape=pl.col("error").abs().mean(), step_median_error=pl.col("error").median(),
        sync_mape=pl.col("sync_error").abs().mean(), sync_median_ape=pl.col("sync_error").abs().median(),
        sync_median_error=pl.col("sync_error").median(),
        sync_measured_mean_s=pl.col("measured_sync_s").mean(), sync_predicted_mean_s=pl.col("predicted_sync_s").mean(),
    ).sort("job", pl.col("servers").replace_strict(order, return_dtype=pl.Int64)))


def lognormal_mape(sigma_log: pl.Expr) -> pl.Expr:
    """The expected MAPE of a prediction equal to the median of a log-normally distributed
    measurement: ``E|exp(-e) - 1| = exp(sigma^2 / 2) (2 Phi(sigma) - 1)`` for ``e ~ N(0, sigma^2)``
    (``sigma_log``: the standard deviation of the measurement's natural log; the two halves
    ``e < 0`` and ``e > 0`` of the log-normal's partial expectation ``E[exp(-e); e < 0] =
    exp(sigma^2 / 2) Phi(sigma)``). Returns a fraction."""
    phi = (1 + (sigma_log / np.sqrt(2.0)).map_batches(
        lambda s: pl.Series(_erf(s.to_numpy()), dtype=pl.Float64), return_dtype=pl.Float64)) / 2
    return (sigma_log**2 / 2).exp() * (2 * phi - 1)


def _erf(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return erf(x)


def _least_mape(x: np.ndarray) -> float:
    """The least ``sum |p / x_i - 1|`` over constants ``p`` (the weighted median of ``x`` with weights
    ``1 / x_i``: the sum is piecewise linear in ``p`` with slope ``sum_{x_i < p} 1/x_i - sum_{x_i > p}
    1/x_i``), as a sum over the ``x_i``."""
    x = np.sort(x)
    w = np.cumsum(1.0 / x)
    p = x[int(np.searchsorted(w, w[-1] / 2))]
    return float(np.abs(p / x - 1).sum())


def pollux_repeatability(rows: pl.DataFrame) -> pl.DataFrame:
    """How well any model can do on Pollux's placements tables: they measure the same configuration
    more than once, as placements that differ only in the order of the servers (``1124``, ``4211``,
    ``2141``: a server with four GPUs, one with two, two with one; one digit a server, so the digit
    order names the servers, nothing else). A model that prices a placement from its GPUs per server
    (ddlscope's: the flat ring, the busiest server) gives them one prediction, so their spread is
    error no such model removes.

    Args:
        rows: :attr:`PublishedResult.rows` of :func:`pollux_validation` (:data:`ROW_COLUMNS`; the
            ``placement`` column set on the placements tables' rows).

    Returns:
        One row per job (``job``), over the rows of the placements tables whose (sorted placement
        digits, batch per GPU) occurs at least twice (``groups``, ``rows``; rows with a sync time of
        0 are left out of the sync columns, ``sync_rows`` counts those kept):

        - ``step_log_sd``, ``sync_log_sd``: the pooled standard deviation of ln(step_time) and
          ln(sync_time) within a group (``sqrt(sum of squares about each group's mean / sum (n - 1))``,
          the unbiased pooled estimate);
        - ``step_mape_noise``, ``sync_mape_noise``: the MAPE a model exact up to that noise would
          have (:func:`lognormal_mape` of the log SD: the noise taken as log-normal);
        - ``step_mape_least``, ``sync_mape_least``: the least MAPE that any one value per group
          reaches on these rows (each group's best constant chosen on its own rows: a lower bound
          that needs no distribution, optimistic by the one value fitted per group);
        - ``step_mape_model``, ``sync_mape_model``: ddlscope's MAPE on the same rows (step: ``error``;
          sync: ``predicted_sync_s`` against ``measured_sync_s``).

        All MAPEs are mean ``|predicted / measured - 1|``, fractions.
    """
    t = rows.filter(pl.col("source") == "pollux", pl.col("placement").is_not_null()).with_columns(
        job=pl.col("table").str.split("/").list.first(),
        multiset=pl.col("placement").str.split("").list.sort().list.join(""),
    )
    key = ["job", "multiset", "batch_per_gpu"]
    t = t.filter(pl.len().over(key) > 1)
    out = []
    for (job,), part in t.group_by("job", maintain_order=True):
        rec: dict[str, object] = {"job": job, "groups": part.select(key).unique().height, "rows": part.height}
        for q, meas, pred in (("step", "measured", "predicted"), ("sync", "measured_sync_s", "predicted_sync_s")):
            kept = part.filter(pl.col(meas) > 0).filter(pl.len().over(key) > 1)
            if q == "sync":
                rec["sync_rows"] = kept.height
            if kept.height == 0:
                rec.update({f"{q}_log_sd": None, f"{q}_mape_noise": None, f"{q}_mape_least": None,
                            f"{q}_mape_model": None})
                continue
            g = kept.group_by(key).agg(n=pl.len(), ss=((pl.col(meas).log() - pl.col(meas).log().mean()) ** 2).sum(),
                                       values=pl.col(meas))
            sd = float(np.sqrt(g["ss"].sum() / (g["n"] - 1).sum()))
            rec[f"{q}_log_sd"] = sd
            rec[f"{q}_mape_noise"] = pl.select(lognormal_mape(pl.lit(sd))).item()
            rec[f"{q}_mape_least"] = sum(_least_mape(np.asarray(v)) for v in g["values"]) / kept.height
            rec[f"{q}_mape_model"] = float((kept[pred] / kept[meas] - 1).abs().mean())
        out.append(rec)
    cols = ["job", "groups", "rows", "sync_rows"] + [f"{q}_{k}" for q in ("step", "sync")
                                                     for k in ("log_sd", "mape_noise", "mape_least", "mape_model")]
    schema = {c: (pl.String if c == "job" else pl.Int64 if c in ("groups", "rows", "sync_rows") else pl.Float64)
              for c in cols}
    return pl.DataFrame(out, schema=schema).select(cols).sort("job")


def published_validation(data_dir: str | Path, catalog: Catalog | None = None) -> PublishedResult:
    """Both validations, rows and summaries concatenated."""
    a, b = dle_validation(data_dir, catalog), pollux_validation(data_dir, catalog)
    return PublishedResult(
        rows=pl.concat([a.rows, b.rows], how="diagonal_relaxed"),
        summary=pl.concat([a.summary, b.summary], how="diagonal_relaxed"),
        fitted={**{f"dle {k}": v for k, v in a.fitted.items()}, **{f"pollux {k}": v for k, v in b.fitted.items()}},
        skipped={**a.skipped, **b.skipped},
        by_servers=b.by_servers,
        repeatability=b.repeatability,
        notes=[*a.notes, *b.notes],
    )
