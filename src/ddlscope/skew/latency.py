"""Latency gain of switch offload, estimated from the per-stage breakdown of the RPCs.

:func:`estimate_latency_gain` takes per-RPC stage times: any frame with one column per stage of
:data:`ddlscope.rpc.schema.STAGES`, e.g. the output of :func:`ddlscope.rpc.decompose` (the RPC
dissection's single-clock stages).

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
