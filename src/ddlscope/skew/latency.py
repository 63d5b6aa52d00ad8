"""Latency gain of switch offload, estimated from the per-stage breakdown of the RPCs.

:func:`stage_times_ns` computes the stages of :data:`ddlscope.rpc.schema.STAGES` from the raw
timestamps of an RPC log, each a difference on one clock exactly as the schema's docstring
defines them (a small stand-in until the RPC dissection, built on another branch, is on main;
:func:`estimate_latency_gain` takes either's output: any frame with one column per stage).

The estimate (reconstruction: the IMC 2020 study motivates offload by the server-side cost of
hot parameters; it gives no formula): an RPC a fraction ``h`` of whose keys the switch handles
(pushes aggregated in the switch, pulls answered from it) keeps its client-side stages and the
network stage, and its server-side stages shrink in proportion to the keys left for the server::

    latency_after = client_queue + client_send + network + client_completion
                    + (1 - h) * (server_receive + server_queue + server_processing + server_send)

Receive/send time scales with the bytes and processing with the keys the server still handles;
scaling the queueing stage by ``(1 - h)`` as well is first-order (with less offered load an M/M/1
queue shrinks faster than that, so the estimate is conservative there). The network stage is
kept whole (the switch is on the path either way; a switch that answers a pull saves at most the
last hop, which we do not credit).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ddlscope.rpc.schema import STAGES

SERVER_STAGES: tuple[str, ...] = ("server_receive", "server_queue", "server_processing", "server_send")
"""The stages the switch takes work from (server side)."""

_UNIT_TO_S = {"_ns": 1e-9, "_us": 1e-6, "_ms": 1e-3, "_s": 1.0}


def stage_times_ns(log: pl.DataFrame) -> pl.DataFrame:
    """Per-RPC stage times (ns) from the schema's timestamps (single-clock differences).

    Args:
        log: an RPC table with ``rpc_id``, ``op`` and the ``client_*_ns``/``server_*_ns``
            timestamps of :data:`ddlscope.rpc.schema.RPC_SCHEMA`.

    Returns:
        Frame ``rpc_id``, ``op``, one ``<stage>_ns`` column per stage of
        :data:`~ddlscope.rpc.schema.STAGES` (Int64), and ``latency_ns`` = client_done - client_issue
        (their sum).

    Raises:
        ValueError: a needed column is missing.
    """
    need = ["rpc_id", "op", "client_issue_ns", "client_send_start_ns", "client_send_end_ns", "client_recv_end_ns",
            "client_done_ns", "server_recv_start_ns", "server_recv_end_ns", "server_proc_start_ns",
            "server_proc_end_ns", "server_send_end_ns"]
    missing = [c for c in need if c not in log.columns]
    if missing:
        raise ValueError(f"RPC log: stage times need columns {missing}")
    c = pl.col
    residence = c("server_send_end_ns") - c("server_recv_start_ns")
    return log.select(
        c("rpc_id"), c("op").cast(pl.String),
        (c("client_send_start_ns") - c("client_issue_ns")).alias("client_queue_ns"),
        (c("client_send_end_ns") - c("client_send_start_ns")).alias("client_send_ns"),
        ((c("client_recv_end_ns") - c("client_send_end_ns")) - residence).alias("network_ns"),
        (c("server_recv_end_ns") - c("server_recv_start_ns")).alias("server_receive_ns"),
        (c("server_proc_start_ns") - c("server_recv_end_ns")).alias("server_queue_ns"),
        (c("server_proc_end_ns") - c("server_proc_start_ns")).alias("server_processing_ns"),
        (c("server_send_end_ns") - c("server_proc_end_ns")).alias("server_send_ns"),
        (c("client_done_ns") - c("client_recv_end_ns")).alias("client_completion_ns"),
        (c("client_done_ns") - c("client_issue_ns")).alias("latency_ns"),
    )


def stage_seconds(stages: pl.DataFrame) -> dict[str, np.ndarray]:
    """Each stage of :data:`~ddlscope.rpc.schema.STAGES` in seconds, shape ``(n_rpcs,)``.

    A stage's column may be named ``<stage>_ns``, ``_us``, ``_ms``, ``_s`` (converted by its unit).

    Raises:
        ValueError: a stage has no column (the message lists what is expected).
    """
    out: dict[str, np.ndarray] = {}
    for stage in STAGES:
        for suffix, scale in _UNIT_TO_S.items():
            if stage + suffix in stages.columns:
                out[stage] = stages[stage + suffix].cast(pl.Float64).to_numpy() * scale
                break
        else:
            raise ValueError(f"stage times: no column for stage {stage!r} (expected {stage}_ns, _us, _ms or _s)")
    return out


def estimate_latency_gain(stages: pl.DataFrame, handled_fraction: np.ndarray | float) -> dict[str, float]:
    """Mean and p99 RPC latency before and after offload (module docstring for the formula).

    Args:
        stages: one row per RPC, one column per stage (see :func:`stage_seconds`).
        handled_fraction: ``h`` per RPC (shape ``(n_rpcs,)``) or one value for all, in ``[0, 1]``.

    Returns:
        ``latency_mean_us_before``/``_after``, ``latency_p99_us_before``/``_after``,
        ``latency_speedup`` (mean before / mean after), ``server_time_share_before`` (share of the
        mean latency spent in server stages).

    Raises:
        ValueError: a stage column is missing, or ``handled_fraction`` has the wrong shape or lies
            outside ``[0, 1]``.
    """
    st = stage_seconds(stages)
    n = stages.height
    h = np.broadcast_to(np.asarray(handled_fraction, dtype=np.float64), (n,)) if np.ndim(handled_fraction) == 0 \
        else np.asarray(handled_fraction, dtype=np.float64)
    if h.shape != (n,):
        raise ValueError(f"handled_fraction: expected {n} values (one per RPC), got shape {h.shape}")
    if n == 0:
        raise ValueError("stage times: no RPCs")
    if np.any((h < 0) | (h > 1)):
        raise ValueError("handled_fraction: expected values in [0, 1]")
    before = sum(st[s] for s in STAGES)
    server = sum(st[s] for s in SERVER_STAGES)
    after = before - h * server
    mean_b, mean_a = float(before.mean()), float(after.mean())
    return {
        "latency_mean_us_before": mean_b * 1e6,
        "latency_mean_us_after": mean_a * 1e6,
        "latency_p99_us_before": float(np.quantile(before, 0.99)) * 1e6,
        "latency_p99_us_after": float(np.quantile(after, 0.99)) * 1e6,
        "latency_speedup": mean_b / mean_a if mean_a > 0 else float("inf"),
        "server_time_share_before": float(server.mean()) / mean_b if mean_b > 0 else float("nan"),
    }
