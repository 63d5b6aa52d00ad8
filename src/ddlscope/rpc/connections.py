"""Connection management as a contributor: set-up and reconnect events, and connections per thread.

The IMC 2020 study names network connection management as a main contributor to PS RPC latency
(reconstruction: we measure it as the latency an RPC that opened or re-opened its connection pays
beyond a reused connection's, per op, and the set-up time inside its client queue).
"""

from __future__ import annotations

import polars as pl

from ddlscope.rpc.decompose import ns_to_us, percentiles_us
from ddlscope.rpc.schema import LATENCY_COLUMN, ConnectionEventEnum, stage_column

CONNECTION_KEY: tuple[str, ...] = ("worker_id", "server_id", "connection_id")
"""A connection is identified by (worker, server, connection id)."""


def inferred_event_count(frame: pl.DataFrame) -> int:
    """How many RPCs of ``frame`` :func:`add_connection_events` infers a ``connection_event`` for:
    the nulls of the column, or every row without it."""
    if "connection_event" in frame.columns:
        return int(frame.get_column("connection_event").null_count())
    return frame.height


def add_connection_events(frame: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Make sure every RPC has a ``connection_event`` and add the set-up time columns.

    Where ``connection_event`` is absent or null it is inferred: the first RPC (by
    ``client_issue_ns``) on each connection (:data:`CONNECTION_KEY`) is ``new``, later ones
    ``reuse`` (a reconnect cannot be told apart from a reuse without the column).

    Args:
        frame: an RPC table (decomposed or not).

    Returns:
        ``(frame, inferred)``: the table with ``connection_event`` (Enum reuse/new/reconnect),
        ``connect_ns`` (``client_connect_end_ns - client_connect_start_ns``, null without those
        columns or for reused connections) and ``connect_in_queue_ns`` (the part of the set-up
        inside ``[client_issue, client_send_start]``, i.e. inside the client_queue stage; 0 when
        there was none); ``inferred`` is the number of events filled in by inference.
    """
    first = pl.col("client_issue_ns").rank("ordinal").over(list(CONNECTION_KEY)) == 1
    guess = pl.when(first).then(pl.lit("new")).otherwise(pl.lit("reuse")).cast(ConnectionEventEnum)
    inferred = inferred_event_count(frame)
    if "connection_event" in frame.columns:
        event = pl.coalesce(pl.col("connection_event"), guess) if inferred else pl.col("connection_event")
    else:
        event = guess
    frame = frame.with_columns(event.alias("connection_event"))
    if "client_connect_start_ns" in frame.columns and "client_connect_end_ns" in frame.columns:
        cs, ce = pl.col("client_connect_start_ns"), pl.col("client_connect_end_ns")
        # min/max_horizontal skip nulls: only RPCs with both set-up timestamps have a set-up
        in_queue = pl.when(cs.is_not_null() & ce.is_not_null()).then(
            (pl.min_horizontal(ce, pl.col("client_send_start_ns"))
             - pl.max_horizontal(cs, pl.col("client_issue_ns"))).clip(lower_bound=0)).otherwise(0)
        frame = frame.with_columns((ce - cs).alias("connect_ns"), in_queue.alias("connect_in_queue_ns"))
    else:
        frame = frame.with_columns(pl.lit(None, pl.Int64).alias("connect_ns"),
                                   pl.lit(0, pl.Int64).alias("connect_in_queue_ns"))
    return frame, inferred


def connection_summary(frame: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, float | int | None]]:
    """Latency by connection event and op, and what set-ups and reconnects add in total.

    Args:
        frame: a decomposed table with connection events (:func:`add_connection_events`).

    Returns:
        ``(table, totals)``. ``table``: one row per (op, connection_event): ``rpcs``,
        ``share_of_op``, ``latency_p50_us``, ``latency_p99_us``, ``client_queue_p50_us``,
        ``connect_p50_us`` and ``connect_p99_us`` (null without set-up times), and
        ``added_p50_us`` = the p50 latency minus the p50 of the same op on reused connections.
        ``totals``: ``setup_rpcs`` (new + reconnect), ``reconnect_rpcs``, ``added_s`` = sum over
        set-up RPCs of (latency - the op's reuse median), ``added_share`` = that over the sum of all
        latencies, ``connect_s`` = total set-up time inside client queues.
    """
    lat = ns_to_us(LATENCY_COLUMN)
    table = (
        frame.group_by("op", "connection_event")
        .agg(pl.len().cast(pl.Int64).alias("rpcs"), *percentiles_us(LATENCY_COLUMN),
             *percentiles_us(stage_column("client_queue"), (0.5,)), *percentiles_us("connect_ns"))
        .sort("op", "connection_event")
    )
    reuse = table.filter(pl.col("connection_event") == "reuse").select("op", pl.col("latency_p50_us").alias("__b"))
    table = (
        table.join(reuse, on="op", how="left")
        .with_columns((pl.col("rpcs") / pl.col("rpcs").sum().over("op")).alias("share_of_op"),
                      (pl.col("latency_p50_us") - pl.col("__b")).alias("added_p50_us"))
        .select("op", "connection_event", "rpcs", "share_of_op", "latency_p50_us", "latency_p99_us",
                "client_queue_p50_us", "connect_p50_us", "connect_p99_us", "added_p50_us")
    )
    setup = pl.col("connection_event") != "reuse"
    per_op = (
        frame.group_by("op")
        .agg(setup.sum().cast(pl.Int64).alias("n_setup"),
             (pl.col("connection_event") == "reconnect").sum().cast(pl.Int64).alias("n_reconnect"),
             lat.filter(setup).sum().alias("setup_lat_us"), lat.sum().alias("lat_us"),
             pl.col("connect_in_queue_ns").sum().alias("connect_ns"))
        .join(reuse, on="op", how="left")
    )
    # added = sum over set-up RPCs of (latency - the op's reuse median), per op then summed
    t = per_op.select(
        pl.col("n_setup").sum().alias("setup_rpcs"), pl.col("n_reconnect").sum().alias("reconnect_rpcs"),
        pl.when(pl.col("n_setup") > 0).then(pl.col("setup_lat_us") - pl.col("n_setup") * pl.col("__b"))
        .otherwise(0.0).sum().truediv(1e6).alias("added_s"),
        pl.col("lat_us").sum().truediv(1e6).alias("__total_s"),
        pl.col("connect_ns").sum().truediv(1e9).alias("connect_s"),
    ).row(0, named=True)
    has_base = reuse.height > 0
    totals = {
        "setup_rpcs": t["setup_rpcs"], "reconnect_rpcs": t["reconnect_rpcs"],
        "added_s": t["added_s"] if has_base else None,
        "added_share": (t["added_s"] / t["__total_s"]) if has_base and t["__total_s"] else None,
        "connect_s": t["connect_s"],
    }
    return table, totals


def connections_per_server(frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """Connections each server (and each server thread, where known) carries, with its queueing.

    Args:
        frame: a decomposed table; ``server_thread`` is used when present.

    Returns:
        ``(per_server, per_thread)``. ``per_server``: ``server_id``, ``connections``,
        ``threads`` (null without ``server_thread``), ``connections_per_thread``, ``rpcs``,
        ``server_queue_p50_us``, ``server_queue_p99_us``, ``latency_p99_us``. ``per_thread`` (None
        without ``server_thread``): the same per (``server_id``, ``server_thread``) with
        ``connections`` served by that thread.
    """
    conn = pl.struct(list(CONNECTION_KEY)).n_unique().cast(pl.Int64).alias("connections")
    stats = [pl.len().cast(pl.Int64).alias("rpcs"), *percentiles_us(stage_column("server_queue")),
             *percentiles_us(LATENCY_COLUMN, (0.99,))]
    has_thread = "server_thread" in frame.columns and frame.get_column("server_thread").null_count() < frame.height
    threads = (pl.col("server_thread").n_unique().cast(pl.Int64) if has_thread else pl.lit(None, pl.Int64)).alias(
        "threads")
    per_server = (
        frame.group_by("server_id").agg(conn, threads, *stats)
        .with_columns((pl.col("connections") / pl.col("threads")).alias("connections_per_thread"))
        .select("server_id", "connections", "threads", "connections_per_thread", "rpcs", "server_queue_p50_us",
                "server_queue_p99_us", "latency_p99_us")
        .sort("server_id")
    )
    per_thread = None
    if has_thread:
        per_thread = (frame.group_by("server_id", "server_thread").agg(conn, *stats)
                      .sort("server_id", "server_thread"))
    return per_server, per_thread
