"""Tail attribution: which stage makes the slowest RPCs slow, on which servers, and with what around them.

The tail at level ``q`` is the ``ceil((1 - q) * n)`` slowest RPCs of a scope (the whole log, or one
op); the *rest* are the other RPCs of that scope. Per stage:

- ``dominant_share``: the share of tail RPCs in which this stage is the longest;
- ``excess_share``: ``(mean_tail(stage) - mean_rest(stage)) / (mean_tail(latency) -
  mean_rest(latency))`` -- how much of the tail's extra latency this stage carries. Because the
  stages add up to the latency, the excess shares add up to 1 (a stage faster in the tail has a
  negative share).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl

from ddlscope.rpc.concurrency import CONCURRENCY_MEASURES, in_flight_columns
from ddlscope.rpc.schema import LATENCY_COLUMN, stages_of

TAIL_LEVELS: tuple[float, ...] = (0.99, 0.999)
"""The tails reported: the slowest 1 % and 0.1 %."""


def tail_label(level: float) -> str:
    """``slowest 1%`` for 0.99, ``slowest 0.1%`` for 0.999."""
    return f"slowest {100 * (1 - level):.3g}%"


def tail_flags(frame: pl.DataFrame, levels: Sequence[float], by_op: bool = False) -> pl.DataFrame:
    """``frame`` plus Boolean columns marking the tails: ``__tail_all_<i>`` for ``levels[i]`` over
    the whole log and, with ``by_op``, ``__tail_op_<i>`` within each op: the ``ceil((1 - level) n)``
    slowest RPCs, found by selection (``numpy.argpartition``, linear time; RPCs tied at the
    threshold are taken in an arbitrary but fixed order). Columns already present are kept, so the
    analyzers of this module can share one pass (:func:`~ddlscope.rpc.dissect.dissect` does)."""
    lat = frame.get_column(LATENCY_COLUMN).to_numpy()
    n = len(lat)

    def top(values: np.ndarray, level: float) -> np.ndarray:
        k = math.ceil(round(len(values) * (1 - level), 6))
        if k <= 0:
            return np.zeros(0, np.int64)
        return np.argpartition(values, len(values) - k)[len(values) - k:]

    new = []
    groups: list[np.ndarray] = []
    if by_op:
        op_codes = frame.get_column("op").to_physical().to_numpy()
        groups = [np.flatnonzero(op_codes == c) for c in np.unique(op_codes)]
    for i, level in enumerate(levels):
        if f"__tail_all_{i}" not in frame.columns:
            flag = np.zeros(n, np.bool_)
            flag[top(lat, level)] = True
            new.append(pl.Series(f"__tail_all_{i}", flag))
        if by_op and f"__tail_op_{i}" not in frame.columns:
            flag = np.zeros(n, np.bool_)
            for rows in groups:
                flag[rows[top(lat[rows], level)]] = True
            new.append(pl.Series(f"__tail_op_{i}", flag))
    return frame.with_columns(new) if new else frame


def dominant_stage(frame: pl.DataFrame, stages: Sequence[str] | None = None) -> np.ndarray:
    """Index into ``stages`` (default :func:`~ddlscope.rpc.schema.stages_of` the frame) of each
    row's longest stage (first on ties)."""
    stages = stages_of(frame) if stages is None else stages
    if frame.height == 0:
        return np.zeros(0, np.int64)
    return np.argmax(frame.select(f"{s}_ns" for s in stages).to_numpy(), axis=1)


def tail_attribution(frame: pl.DataFrame, levels: Sequence[float] = TAIL_LEVELS, by_op: bool = True,
                     ) -> pl.DataFrame:
    """Per scope, tail level and stage: dominance and share of the tail's excess latency.

    Args:
        frame: a decomposed table.
        levels: tail levels (0.99 = the slowest 1 %).
        by_op: add one scope per op besides ``all``.

    Returns:
        One row per (scope, tail, stage): ``scope`` (``all`` or an op), ``tail`` (:func:`tail_label`),
        ``tail_rpcs``, ``threshold_us`` (the fastest latency in the tail), ``stage``,
        ``dominant_share``, ``mean_tail_us``, ``mean_rest_us``, ``excess_share``.
    """
    rows: list[dict] = []
    scopes = ["all"] + (["op"] if by_op else [])
    stages = stages_of(frame)
    stage_columns = [f"{s}_ns" for s in stages]
    flagged_all = tail_flags(frame, levels, by_op=by_op)
    for li, level in enumerate(levels):
        for kind in scopes:
            flagged = flagged_all.select(LATENCY_COLUMN, *stage_columns, "op",
                                         pl.col(f"__tail_{kind}_{li}").alias("__t"))
            groups = [("all", flagged)] if kind == "all" else [
                (str(k[0]), g) for k, g in flagged.group_by("op", maintain_order=True)]
            for name, g in sorted(groups, key=lambda x: x[0]):
                tail = g.filter(pl.col("__t"))
                rest = g.filter(~pl.col("__t"))
                if tail.height == 0:
                    continue
                dom = np.bincount(dominant_stage(tail, stages), minlength=len(stages)) / tail.height
                mt = tail.select(pl.col(c).cast(pl.Float64).mean() for c in (*stage_columns, LATENCY_COLUMN)).row(0)
                mr = (rest.select(pl.col(c).cast(pl.Float64).mean() for c in (*stage_columns, LATENCY_COLUMN)).row(0)
                      if rest.height else (math.nan,) * (len(stages) + 1))
                excess = mt[-1] - mr[-1]
                threshold = tail.select(pl.col(LATENCY_COLUMN).min()).item() / 1e3
                for i, s in enumerate(stages):
                    rows.append({
                        "scope": name, "tail": tail_label(level), "tail_rpcs": tail.height,
                        "threshold_us": threshold, "stage": s, "dominant_share": float(dom[i]),
                        "mean_tail_us": mt[i] / 1e3, "mean_rest_us": None if math.isnan(mr[i]) else mr[i] / 1e3,
                        "excess_share": (mt[i] - mr[i]) / excess if excess and not math.isnan(excess) else None,
                    })
    schema = {"scope": pl.String, "tail": pl.String, "tail_rpcs": pl.Int64, "threshold_us": pl.Float64,
              "stage": pl.String, "dominant_share": pl.Float64, "mean_tail_us": pl.Float64,
              "mean_rest_us": pl.Float64, "excess_share": pl.Float64}
    return pl.DataFrame(rows, schema=schema)


def tail_servers(frame: pl.DataFrame, levels: Sequence[float] = TAIL_LEVELS) -> pl.DataFrame:
    """Which servers hold the tail: each server's share of the slowest RPCs against its share of all.

    Returns:
        One row per (tail, server): ``tail``, ``server_id``, ``rpcs``, ``share_of_rpcs``,
        ``tail_rpcs``, ``share_of_tail``, ``over_representation`` (share of tail / share of RPCs;
        1 = as expected), ``dominant_stage`` (the stage longest in most of that server's tail
        RPCs; null when it has none) and ``dominant_share``.
    """
    parts = []
    stages = stages_of(frame)
    flagged_all = tail_flags(frame, levels)
    for i, level in enumerate(levels):
        flagged = flagged_all.select("server_id", *(f"{s}_ns" for s in stages), pl.col(f"__tail_all_{i}").alias("__t"))
        tail = flagged.filter(pl.col("__t"))
        dom = tail.select("server_id").with_columns(
            pl.Series("dominant_stage", np.asarray(stages, dtype=object)[dominant_stage(tail, stages)].tolist()
                      if tail.height else [], dtype=pl.String))
        top = (dom.group_by("server_id", "dominant_stage").agg(pl.len().alias("__n"))
               .sort(["server_id", "__n", "dominant_stage"], descending=[False, True, False])
               .group_by("server_id", maintain_order=True)
               .agg(pl.col("dominant_stage").first(), (pl.col("__n").first() / pl.col("__n").sum())
                    .alias("dominant_share")))
        per = (flagged.group_by("server_id")
               .agg(pl.len().cast(pl.Int64).alias("rpcs"), pl.col("__t").sum().cast(pl.Int64).alias("tail_rpcs"))
               .with_columns((pl.col("rpcs") / pl.col("rpcs").sum()).alias("share_of_rpcs"),
                             (pl.col("tail_rpcs") / pl.col("tail_rpcs").sum()).alias("share_of_tail"))
               .with_columns((pl.col("share_of_tail") / pl.col("share_of_rpcs")).alias("over_representation"))
               .join(top, on="server_id", how="left")
               .with_columns(pl.lit(tail_label(level)).alias("tail"))
               .sort(["tail_rpcs", "server_id"], descending=[True, False]))
        parts.append(per.select("tail", "server_id", "rpcs", "share_of_rpcs", "tail_rpcs", "share_of_tail",
                                "over_representation", "dominant_stage", "dominant_share"))
    return pl.concat(parts)


def tail_contributors(frame: pl.DataFrame, levels: Sequence[float] = TAIL_LEVELS) -> pl.DataFrame:
    """What surrounds the tail RPCs compared with the rest: concurrency, connection events, size, phase, op.

    Args:
        frame: a decomposed table with whichever of the contributor columns are present
            (in-flight counts, ``connection_event``, ``message_bytes``, ``iteration_phase``).

    Returns:
        One row per metric: ``metric``, ``rest`` (mean over the non-tail RPCs of the first level),
        one column per level named after :func:`tail_label` with the tail's mean, and
        ``ratio_<first level>`` = tail / rest for the first level.
    """
    metrics: dict[str, pl.Expr] = {}
    for m in CONCURRENCY_MEASURES:
        rc, wc = in_flight_columns(m)
        if rc in frame.columns:
            metrics[f"{m} in flight: reads"] = pl.col(rc).cast(pl.Float64)
            metrics[f"{m} in flight: writes"] = pl.col(wc).cast(pl.Float64)
    if "connection_event" in frame.columns:
        metrics["share on a new connection"] = (pl.col("connection_event") == "new").cast(pl.Float64)
        metrics["share after a reconnect"] = (pl.col("connection_event") == "reconnect").cast(pl.Float64)
    if "message_bytes" in frame.columns:
        metrics["message bytes"] = pl.col("message_bytes").cast(pl.Float64)
    if "num_keys" in frame.columns:
        metrics["keys"] = pl.col("num_keys").cast(pl.Float64)
    if "iteration_phase" in frame.columns:
        metrics["iteration phase (0 start, 1 end)"] = pl.col("iteration_phase")
    for op in frame.get_column("op").unique().sort().to_list():
        metrics[f"share {op}"] = (pl.col("op") == op).cast(pl.Float64)
    cols: dict[str, list[float | None]] = {"metric": list(metrics)}
    flagged = tail_flags(frame, levels)
    for i, level in enumerate(levels):
        mask = pl.col(f"__tail_all_{i}")
        t = flagged.select(*(e.filter(mask).mean().alias(k) for k, e in metrics.items())).row(0)
        if i == 0:
            r = flagged.select(*(e.filter(~mask).mean().alias(k) for k, e in metrics.items())).row(0)
            cols["rest"] = list(r)
        cols[tail_label(level)] = list(t)
    out = pl.DataFrame(cols, schema={"metric": pl.String, **{k: pl.Float64 for k in cols if k != "metric"}})
    first = tail_label(levels[0])
    return out.with_columns(pl.when(pl.col("rest") != 0).then(pl.col(first) / pl.col("rest"))
                            .alias(f"ratio_{first.replace(' ', '_')}"))
