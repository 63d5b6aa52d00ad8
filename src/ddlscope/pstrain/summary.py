"""A run's headline table: RPCs per operation with their sizes and client-observed latency."""

from __future__ import annotations

import polars as pl


def per_op_summary(log: pl.DataFrame) -> pl.DataFrame:
    """One row per op of an RPC log.

    Args:
        log: RPC log (columns ``op``, ``request_bytes``, ``response_bytes``, ``num_keys``,
            ``client_issue_ns``, ``client_done_ns``).

    Returns:
        Columns ``op``, ``rpcs``, ``mean_num_keys``, ``mean_request_bytes``,
        ``mean_response_bytes``, ``latency_p50_us``, ``latency_p99_us`` (client-observed latency
        ``client_done_ns - client_issue_ns``; percentiles by linear interpolation), in op order.
    """
    latency_us = (pl.col("client_done_ns") - pl.col("client_issue_ns")) / 1e3
    return (
        log.group_by("op")
        .agg(
            pl.len().alias("rpcs"),
            pl.col("num_keys").mean().alias("mean_num_keys"),
            pl.col("request_bytes").mean().alias("mean_request_bytes"),
            pl.col("response_bytes").mean().alias("mean_response_bytes"),
            latency_us.quantile(0.5, "linear").alias("latency_p50_us"),
            latency_us.quantile(0.99, "linear").alias("latency_p99_us"),
        )
        .sort("op")
    )
