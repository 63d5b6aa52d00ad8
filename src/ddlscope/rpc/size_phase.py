"""Message size and iteration phase as contributors.

Message size: latency and stages per power-of-two size bin, and per-op linear fits of the
size-dependent stages, ``t = alpha + n / beta`` (the Hockney alpha-beta model: Hockney, "The
communication challenge for MPP", Parallel Computing 20(3), 1994), giving a fixed cost ``alpha``
and an effective bandwidth ``beta`` per stage.

Iteration phase: where in its worker's step an RPC was issued, from 0 (the step's first RPC) to 1
(the next step's first RPC), on the worker's clock (see :func:`add_iteration_phase`), so the pull
burst at a step's start sits near 0 and the push burst after the computation late in the step
(reconstruction of the IMC 2020 study's pull-burst / push-burst observation).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ddlscope.rpc.concurrency import dense_codes
from ddlscope.rpc.decompose import ns_to_us, percentiles_us
from ddlscope.rpc.schema import LATENCY_COLUMN, stage_column, stages_of

PHASE_BINS: tuple[str, ...] = ("0-25%", "25-50%", "50-75%", "75-100%")
"""Labels of ``iteration_phase_bin``: the quarter of the iteration in which the RPC was issued."""
PhaseEnum = pl.Enum(list(PHASE_BINS))

SIZE_FITS: tuple[tuple[str, str], ...] = (
    ("client_send", "request_bytes"),
    ("network", "message_bytes"),
    ("server_receive", "request_bytes"),
    ("server_processing", "num_keys"),
    ("server_send", "response_bytes"),
    ("latency", "message_bytes"),
)
"""(stage, regressor) pairs fitted per op by :func:`size_fits`."""


def add_message_bytes(frame: pl.DataFrame) -> pl.DataFrame:
    """Add ``message_bytes = request_bytes + response_bytes`` (bytes moved by the RPC)."""
    return frame.with_columns((pl.col("request_bytes") + pl.col("response_bytes")).alias("message_bytes"))


def size_profile(frame: pl.DataFrame) -> pl.DataFrame:
    """Latency and stages per op and power-of-two bin of ``message_bytes``.

    Returns:
        One row per (op, bin): ``op``, ``size_lo_bytes`` (``2^k``; 0 for empty messages),
        ``size_hi_bytes`` (``2^(k+1) - 1``), ``rpcs``, ``latency_p50_us``, ``latency_p99_us``,
        ``<stage>_mean_us`` for every stage.
    """
    k = pl.when(pl.col("message_bytes") > 0).then(
        pl.col("message_bytes").cast(pl.Float64).log(2).floor().cast(pl.Int64)).otherwise(-1).alias("__k")
    return (
        frame.group_by("op", k)
        .agg(pl.len().cast(pl.Int64).alias("rpcs"), *percentiles_us(LATENCY_COLUMN),
             *(ns_to_us(stage_column(s)).mean().alias(f"{s}_mean_us") for s in stages_of(frame)))
        .sort("op", "__k")
        .with_columns(pl.when(pl.col("__k") >= 0).then(pl.lit(2, pl.Int64).pow(pl.col("__k"))).otherwise(0)
                      .alias("size_lo_bytes"),
                      pl.when(pl.col("__k") >= 0).then(pl.lit(2, pl.Int64).pow(pl.col("__k") + 1) - 1).otherwise(0)
                      .alias("size_hi_bytes"))
        .select("op", "size_lo_bytes", "size_hi_bytes", pl.exclude("op", "size_lo_bytes", "size_hi_bytes", "__k"))
    )


def size_fits(frame: pl.DataFrame, pairs: tuple[tuple[str, str], ...] = SIZE_FITS) -> pl.DataFrame:
    """Per op, ordinary least squares ``stage_ns = alpha + slope * x`` for each (stage, regressor).

    Args:
        frame: a decomposed table with ``message_bytes`` (:func:`add_message_bytes`).
        pairs: (stage or ``latency``, regressor column) pairs.

    Returns:
        One row per (op, stage): ``op``, ``stage``, ``regressor``, ``rpcs``, ``distinct_values``
        (of the regressor), ``alpha_us`` (intercept), ``ns_per_unit`` (slope), ``effective_gb_s``
        (``1 / slope`` in GB/s = bytes/ns for byte regressors with a positive slope, else null) and
        ``r2``. Null where the regressor does not vary within the op. The fit is whatever least
        squares gives: with few RPCs or few distinct sizes the intercept can be negative
        (:func:`~ddlscope.rpc.analyzers.network_fits` quotes only fits with enough of both).
    """
    rows = []
    for op, g in frame.group_by("op", maintain_order=True):
        op_name = str(op[0])
        for stage, reg in pairs:
            ycol = LATENCY_COLUMN if stage == "latency" else stage_column(stage)
            x, y = pl.col(reg).cast(pl.Float64), pl.col(ycol).cast(pl.Float64)
            m = g.select(pl.len().alias("n"), pl.col(reg).n_unique().alias("distinct"), x.mean().alias("mx"),
                         y.mean().alias("my"),
                         ((x - x.mean()) * (y - y.mean())).sum().alias("sxy"),
                         ((x - x.mean()) ** 2).sum().alias("sxx"),
                         ((y - y.mean()) ** 2).sum().alias("syy")).row(0, named=True)
            ok = m["sxx"] is not None and m["sxx"] > 0
            slope = m["sxy"] / m["sxx"] if ok else None
            alpha = (m["my"] - slope * m["mx"]) / 1e3 if ok else None
            r2 = (m["sxy"] ** 2 / (m["sxx"] * m["syy"])) if ok and m["syy"] else None
            gbs = 1.0 / slope if ok and reg.endswith("_bytes") and slope > 0 else None
            rows.append({"op": op_name, "stage": stage, "regressor": reg, "rpcs": m["n"],
                         "distinct_values": m["distinct"], "alpha_us": alpha, "ns_per_unit": slope,
                         "effective_gb_s": gbs, "r2": r2})
    schema = {"op": pl.String, "stage": pl.String, "regressor": pl.String, "rpcs": pl.Int64,
              "distinct_values": pl.Int64, "alpha_us": pl.Float64, "ns_per_unit": pl.Float64,
              "effective_gb_s": pl.Float64, "r2": pl.Float64}
    return pl.DataFrame(rows, schema=schema).sort("op", maintain_order=True)


STEP_COLUMNS: tuple[str, ...] = ("worker_id", "iteration", "first_issue_ns", "last_done_ns")
"""Columns of an iteration-steps table (:func:`iteration_steps`)."""


def iteration_steps(frame: pl.DataFrame) -> pl.DataFrame:
    """Each worker iteration's first issue and last completion: the step bounds of
    :func:`add_iteration_phase`, as a table that partial logs merge exactly (:func:`merge_iteration_steps`).

    Args:
        frame: RPC rows with ``worker_id``, ``iteration``, ``client_issue_ns``, ``client_done_ns``.

    Returns:
        :data:`STEP_COLUMNS`: one row per (worker, iteration), ``first_issue_ns`` the minimum
        ``client_issue_ns`` and ``last_done_ns`` the maximum ``client_done_ns`` (int64 ns, client clock).
    """
    return (frame.group_by("worker_id", "iteration")
            .agg(pl.col("client_issue_ns").min().alias("first_issue_ns"),
                 pl.col("client_done_ns").max().alias("last_done_ns")))


def merge_iteration_steps(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """Merge :func:`iteration_steps` tables of disjoint parts of one log (min of the first issues,
    max of the last completions): the steps of the whole log, exactly."""
    both = pl.concat([p.select(STEP_COLUMNS) for p in parts], how="vertical_relaxed")
    return (both.group_by("worker_id", "iteration")
            .agg(pl.col("first_issue_ns").min(), pl.col("last_done_ns").max()))


def add_iteration_phase(frame: pl.DataFrame, steps: pl.DataFrame | None = None) -> pl.DataFrame:
    """Add ``iteration_phase`` (0..1, Float64) and ``iteration_phase_bin`` (:data:`PHASE_BINS`).

    ``iteration_phase = (client_issue - t0) / (t1 - t0)``, clipped to [0, 1], on the worker's
    clock: ``t0`` is the first issue among the worker's RPCs of that iteration and ``t1`` the first
    issue of its next iteration (the step boundary), or, for its last logged iteration or when the
    next one is missing from the log, the last completion of this iteration. 0 when ``t1 <= t0``.

    Args:
        frame: RPC rows (``worker_id``, ``iteration``, ``client_issue_ns``, ``client_done_ns``).
        steps: the step bounds of the whole log (:func:`iteration_steps`, merged over parts with
            :func:`merge_iteration_steps`) when ``frame`` is one part of it (the streaming path,
            :mod:`ddlscope.rpc.streaming`); default: ``frame``'s own.

    Raises:
        ValueError: ``steps`` lacks a (worker, iteration) of ``frame``.
    """
    if frame.height == 0:
        return frame.with_columns(pl.lit(None, pl.Float64).alias("iteration_phase"),
                                  pl.lit(None, PhaseEnum).alias("iteration_phase_bin"))
    worker = frame.get_column("worker_id").to_numpy()
    iteration = frame.get_column("iteration").to_numpy()
    if steps is None:
        codes, _ = dense_codes(worker, iteration)  # codes follow (worker, iteration) order
        steps = (
            pl.DataFrame({"c": codes, "issue": frame.get_column("client_issue_ns"),
                          "done": frame.get_column("client_done_ns"), "w": worker, "it": iteration})
            .group_by("c").agg(pl.col("issue").min(), pl.col("done").max(), pl.col("w").first(),
                               pl.col("it").first())
            .sort("c")
        )
    else:
        steps = steps.sort("worker_id", "iteration").select(
            pl.col("first_issue_ns").alias("issue"), pl.col("last_done_ns").alias("done"),
            pl.col("worker_id").alias("w"), pl.col("iteration").alias("it"))
        found = (frame.select("worker_id", "iteration")
                 .join(steps.with_row_index("c").select("c", worker_id="w", iteration="it"),
                       on=["worker_id", "iteration"], how="left", maintain_order="left").get_column("c"))
        if found.null_count():
            raise ValueError(f"add_iteration_phase: {found.null_count():,} RPC(s) have a (worker_id, iteration) "
                             "missing from steps")
        codes = found.to_numpy().astype(np.int64)
    t0 = steps.get_column("issue").to_numpy()
    last = steps.get_column("done").to_numpy()
    w, it = steps.get_column("w").to_numpy(), steps.get_column("it").to_numpy()
    t1 = last.copy()
    nxt = (w[1:] == w[:-1]) & (it[1:] == it[:-1] + 1) & (t0[1:] > t0[:-1])
    t1[:-1][nxt] = t0[1:][nxt]
    span = (t1 - t0).astype(np.float64)[codes]
    rel = (frame.get_column("client_issue_ns").to_numpy() - t0[codes]).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        phase = np.where(span > 0, np.clip(rel / span, 0.0, 1.0), 0.0)
    idx = pl.Series(np.clip(np.floor(phase * 4).astype(np.int64), 0, 3))
    labels = pl.select(pl.lit(pl.Series(list(PHASE_BINS), dtype=PhaseEnum)).gather(idx)).to_series()
    return frame.with_columns(pl.Series("iteration_phase", phase, dtype=pl.Float64),
                              labels.alias("iteration_phase_bin"))


def phase_profile(frame: pl.DataFrame, bins: int = 10) -> pl.DataFrame:
    """RPC issue density and latency per op and tenth of the iteration.

    Args:
        frame: a decomposed table with ``iteration_phase`` and, if present, the server in-flight
            columns (:mod:`ddlscope.rpc.concurrency`).
        bins: equal-width phase bins.

    Returns:
        One row per (op, bin): ``op``, ``phase_lo``, ``phase_hi``, ``rpcs``, ``share_of_op``
        (the op's RPCs issued in that bin), ``latency_p50_us``, ``latency_p99_us`` and, when the
        frame has them, ``server_in_flight_mean`` (reads + writes at the server).
    """
    b = (pl.col("iteration_phase") * bins).floor().clip(0, bins - 1).cast(pl.Int64).alias("__b")
    extra = []
    if "server_in_flight_reads" in frame.columns:
        extra.append((pl.col("server_in_flight_reads") + pl.col("server_in_flight_writes")).cast(pl.Float64).mean()
                     .alias("server_in_flight_mean"))
    return (
        frame.group_by("op", b)
        .agg(pl.len().cast(pl.Int64).alias("rpcs"), *percentiles_us(LATENCY_COLUMN), *extra)
        .with_columns((pl.col("rpcs") / pl.col("rpcs").sum().over("op")).alias("share_of_op"),
                      (pl.col("__b") / bins).alias("phase_lo"), ((pl.col("__b") + 1) / bins).alias("phase_hi"))
        .sort("op", "__b")
        .select("op", "phase_lo", "phase_hi", "rpcs", "share_of_op", "latency_p50_us", "latency_p99_us",
                *(["server_in_flight_mean"] if extra else []))
    )

