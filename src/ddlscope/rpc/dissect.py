"""The RPC dissection: parse once, then independent analyzers, each answering one question.

:func:`dissect` reads (or takes) an RPC table, decomposes every RPC into stages
(:mod:`~ddlscope.rpc.decompose`), adds the contributor columns (concurrency, connection events,
message size, iteration phase) and runs the analyzers; the result is a :class:`Dissection` of
Polars tables plus headline findings. Figures and the HTML report are made from it by
:mod:`ddlscope.report.rpc_dissect`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ddlscope.rpc.concurrency import add_concurrency, concurrency_fit, concurrency_profile, in_flight_columns
from ddlscope.rpc.connections import add_connection_events, connection_summary, connections_per_server
from ddlscope.rpc.decompose import decompose, stage_percentiles, stage_summary
from ddlscope.rpc.readers import RpcLog, read_rpc_log
from ddlscope.rpc.schema import LATENCY_COLUMN, STAGES
from ddlscope.rpc.size_phase import add_iteration_phase, add_message_bytes, phase_profile, size_fits, size_profile
from ddlscope.rpc.tail import (
    TAIL_LEVELS,
    tail_attribution,
    tail_contributors,
    tail_flags,
    tail_label,
    tail_servers,
)
from ddlscope.rpc.validate import ColumnMapping, check_rows, empty_rejected, rejected_counts

MIN_FIT_R2 = 0.5
"""Size fits explaining less of the stage's variance than this are not quoted as a bandwidth."""

PERCENTILE_GROUPS: dict[str, str | None] = {
    "all": None, "op": "op", "server": "server_id", "connection": "connection_id",
    "iteration_phase": "iteration_phase_bin",
}
"""Groupings of the percentile table: name -> column (``connection`` uses ``connection_id``)."""


@dataclass
class Dissection:
    """Everything :func:`dissect` found; every table is a Polars DataFrame.

    Attributes:
        rpcs: one row per RPC: the input columns, ``<stage>_ns``, ``latency_ns``, the in-flight
            counts (:mod:`~ddlscope.rpc.concurrency`), ``connection_event``, ``connect_ns``,
            ``connect_in_queue_ns``, ``message_bytes``, ``iteration_phase`` and
            ``iteration_phase_bin``.
        percentiles: :func:`~ddlscope.rpc.decompose.stage_percentiles` per grouping of
            :data:`PERCENTILE_GROUPS`, long, with ``grouping`` and ``group`` (String) columns.
        stage_summary: mean stage times and shares per op (:func:`~ddlscope.rpc.decompose.stage_summary`).
        concurrency_fit: :func:`~ddlscope.rpc.concurrency.concurrency_fit`.
        concurrency_profile: :func:`~ddlscope.rpc.concurrency.concurrency_profile` for the
            (measure, counted) pairs of :data:`PROFILES`, with ``measure`` and ``counted`` columns.
        connections: :func:`~ddlscope.rpc.connections.connection_summary`'s table.
        connection_totals: its totals.
        connections_per_server / connections_per_thread: :func:`~ddlscope.rpc.connections.connections_per_server`.
        size_profile / size_fits / phase_profile: :mod:`~ddlscope.rpc.size_phase`.
        tail / tail_servers / tail_contributors: :mod:`~ddlscope.rpc.tail`.
        rejected: rejected input rows (``log_file``, ``log_line``, ``reason``, ``detail``).
        files: input files; notes: what the reader or analyzers inferred.
        findings: headline findings, one sentence each.
        summary: the headline numbers (JSON-ready; see :func:`findings`).
    """

    rpcs: pl.DataFrame
    percentiles: pl.DataFrame
    stage_summary: pl.DataFrame
    concurrency_fit: pl.DataFrame
    concurrency_profile: pl.DataFrame
    connections: pl.DataFrame
    connection_totals: dict[str, Any]
    connections_per_server: pl.DataFrame
    connections_per_thread: pl.DataFrame | None
    size_profile: pl.DataFrame
    size_fits: pl.DataFrame
    phase_profile: pl.DataFrame
    tail: pl.DataFrame
    tail_servers: pl.DataFrame
    tail_contributors: pl.DataFrame
    rejected: pl.DataFrame = field(default_factory=empty_rejected)
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def rejected_counts(self) -> pl.DataFrame:
        """Rejected rows per reason (:func:`~ddlscope.rpc.validate.rejected_counts`)."""
        return rejected_counts(self.rejected)


def annotate(frame: pl.DataFrame, threads: int = 2) -> tuple[pl.DataFrame, list[str]]:
    """Decompose every RPC and add all contributor columns (the one table the analyzers share).

    Args:
        frame: good rows of an RPC table (e.g. :attr:`RpcLog.frame <ddlscope.rpc.readers.RpcLog.frame>`).
        threads: threads for the concurrency sweep.

    Returns:
        ``(rpcs, notes)``: the table of :attr:`Dissection.rpcs` and notes on inferred columns.

    Raises:
        ValueError: a stage is negative (the rows were not checked).
    """
    notes: list[str] = []
    rpcs = decompose(frame)
    rpcs = add_concurrency(rpcs, threads=threads)
    rpcs, inferred = add_connection_events(rpcs)
    if inferred:
        notes.append(f"connection_event inferred for {inferred:,} RPCs: the first RPC on each (worker, server, "
                     "connection) counted as a new connection, the others as reuse (reconnects not visible)")
    rpcs = add_message_bytes(rpcs)
    rpcs = add_iteration_phase(rpcs)
    return rpcs, notes


def _percentiles(rpcs: pl.DataFrame) -> pl.DataFrame:
    parts = []
    for name, col in PERCENTILE_GROUPS.items():
        p = stage_percentiles(rpcs, by=col)
        group = pl.lit("all") if col is None else pl.col(col).cast(pl.String)
        parts.append(p.select(pl.lit(name).alias("grouping"), group.alias("group"),
                              pl.exclude([col] if col else [])))
    return pl.concat(parts)


PROFILES: tuple[tuple[str, str], ...] = (
    ("server_other_conn", "reads"), ("server_other_conn", "writes"), ("server_other_conn", "total"),
    ("server", "total"), ("connection", "total"), ("worker", "total"),
)
"""(measure, counted) pairs of :attr:`Dissection.concurrency_profile`: reads and writes apart for the
IMC question (other connections at the server), reads + writes for every measure."""


def _profiles(rpcs: pl.DataFrame) -> pl.DataFrame:
    parts = []
    for m, counted in PROFILES:
        rc, wc = in_flight_columns(m)
        f = rpcs.select(LATENCY_COLUMN, *(f"{s}_ns" for s in STAGES), rc, wc,
                        (pl.col(rc) + pl.col(wc)).alias("__total"))
        for col in ({"reads": rc, "writes": wc, "total": "__total"}[counted],):
            p = concurrency_profile(f, col)
            parts.append(p.select(pl.lit(m).alias("measure"), pl.lit(counted).alias("counted"), pl.all()))
    return pl.concat(parts, how="diagonal_relaxed")


def dissect(
    source: RpcLog | pl.DataFrame | str | Path | Sequence[str | Path],
    *,
    mapping: ColumnMapping | None = None,
    input_format: str = "auto",
    levels: Sequence[float] = TAIL_LEVELS,
    threads: int = 2,
) -> Dissection:
    """Dissect RPC latency: stages, percentiles, contributors and tail attribution.

    Args:
        source: a parsed :class:`~ddlscope.rpc.readers.RpcLog`, an in-memory RPC table (checked
            with :func:`~ddlscope.rpc.validate.check_rows`; bad rows land in ``rejected``), or log
            file path(s) read with :func:`~ddlscope.rpc.readers.read_rpc_log`.
        mapping: column/op names and time unit for file input.
        input_format: for file input (see :data:`~ddlscope.rpc.readers.INPUT_FORMATS`).
        levels: tail levels (0.99 = slowest 1 %).
        threads: threads for the concurrency sweep.

    Returns:
        A :class:`Dissection`.

    Raises:
        ValueError: no RPC is left after the checks (the message gives the rejection counts), or
            the reader's errors (missing columns, unreadable files).
    """
    if isinstance(source, RpcLog):
        log = source
    elif isinstance(source, pl.DataFrame):
        good, bad = check_rows(source)
        log = RpcLog(frame=good, rejected=bad, files=["<memory>"])
    else:
        log = read_rpc_log(source, mapping=mapping, input_format=input_format)
    if log.frame.height == 0:
        counts = ", ".join(f"{r['reason']}: {r['rows']}" for r in log.rejected_counts().iter_rows(named=True))
        raise ValueError(f"no valid RPC rows in {', '.join(log.files)}" + (f" (rejected: {counts})" if counts else ""))
    rpcs, notes = annotate(log.frame, threads=threads)
    conn_table, conn_totals = connection_summary(rpcs)
    per_server, per_thread = connections_per_server(rpcs)
    flagged = tail_flags(rpcs, levels, by_op=True)  # one selection pass shared by the tail analyzers
    d = Dissection(
        rpcs=rpcs,
        percentiles=_percentiles(rpcs),
        stage_summary=stage_summary(rpcs, by="op"),
        concurrency_fit=concurrency_fit(rpcs),
        concurrency_profile=_profiles(rpcs),
        connections=conn_table,
        connection_totals=conn_totals,
        connections_per_server=per_server,
        connections_per_thread=per_thread,
        size_profile=size_profile(rpcs),
        size_fits=size_fits(rpcs),
        phase_profile=phase_profile(rpcs),
        tail=tail_attribution(flagged, levels),
        tail_servers=tail_servers(flagged, levels),
        tail_contributors=tail_contributors(flagged, levels),
        rejected=log.rejected,
        files=list(log.files),
        notes=[*log.notes, *notes],
    )
    d.findings, d.summary = findings(d, levels)
    return d


# -- findings -------------------------------------------------------------------------------------

def _us(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 1000:
        return f"{x / 1000:.3g} ms"
    return f"{x:.3g} µs"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.3g}%"


def findings(d: Dissection, levels: Sequence[float] = TAIL_LEVELS) -> tuple[list[str], dict[str, Any]]:
    """Headline findings (sentences) and the summary numbers of a dissection.

    Returns:
        ``(findings, summary)``; ``summary`` keys: ``files``, ``rpcs``, ``synthetic`` (the log's
        ``synthetic`` column is set), ``rejected_rows``, ``rejected_by_reason``,
        ``workers``, ``servers``, ``connections``, ``latency_us`` (p50/p90/p99/p99_9/mean),
        ``mean_stage_share``, ``dominant_stage``, ``tail`` (per level: threshold, top stage, its
        dominant and excess share, top server), ``concurrency`` (latency slopes per measure),
        ``connections_management`` (totals), ``phase`` (per pulls/pushes: mean phase, busiest
        quarter and its share),
        ``network_fit`` (per op alpha and effective bandwidth), ``notes``.
    """
    r = d.rpcs
    out: list[str] = []
    s: dict[str, Any] = {"files": d.files, "rpcs": r.height, "rejected_rows": d.rejected.height}
    s["rejected_by_reason"] = {row["reason"]: row["rows"] for row in d.rejected_counts().iter_rows(named=True)}
    s["workers"] = r.get_column("worker_id").n_unique()
    s["servers"] = r.get_column("server_id").n_unique()
    s["connections"] = r.select(pl.struct("worker_id", "server_id", "connection_id").n_unique()).item()
    overall = d.percentiles.filter(pl.col("grouping") == "all")
    lat = overall.filter(pl.col("stage") == "latency").row(0, named=True)
    s["latency_us"] = {k: lat[f"{k}_us"] for k in ("mean", "p50", "p90", "p99", "p99_9")}
    s["synthetic"] = bool("synthetic" in r.columns and r.get_column("synthetic").any())
    out.append(
        ("SYNTHETIC log (generated, not measured): " if s["synthetic"] else "")
        + f"{r.height:,} RPCs from {s['workers']} worker(s) to {s['servers']} server(s) over {s['connections']} "
        f"connection(s): latency p50 {_us(lat['p50_us'])}, p99 {_us(lat['p99_us'])} "
        f"({lat['p99_us'] / lat['p50_us']:.3g}x p50), p99.9 {_us(lat['p99_9_us'])}."
        if lat["p50_us"] else f"{r.height:,} RPCs: latency p50 0.")
    means = overall.filter(pl.col("stage") != "latency").select("stage", "mean_us").sort("mean_us", descending=True)
    shares = {st: (m / lat["mean_us"] if lat["mean_us"] else None) for st, m in means.iter_rows()}
    s["mean_stage_share"] = shares
    top = means.row(0)
    s["dominant_stage"] = top[0]
    per_op = []
    for row in d.stage_summary.iter_rows(named=True):
        best = max(STAGES, key=lambda st: row[f"{st}_share"] or 0)
        per_op.append(f"{row['op']} {best} {_pct(row[f'{best}_share'])}")
    out.append(f"Dominant stage: {top[0]} takes {_pct(shares[top[0]])} of the mean RPC time; "
               f"second {means.row(1)[0]} ({_pct(shares[means.row(1)[0]])}). Largest stage per op: "
               + "; ".join(per_op) + ".")
    # tail
    s["tail"] = {}
    tail_all = d.tail.filter(pl.col("scope") == "all")
    parts = []
    for level in levels:
        t = tail_all.filter(pl.col("tail") == tail_label(level))
        if t.height == 0:
            continue
        dom = t.sort("dominant_share", descending=True).row(0, named=True)
        exc = t.sort("excess_share", descending=True, nulls_last=True).row(0, named=True)
        srv = d.tail_servers.filter(pl.col("tail") == tail_label(level)).row(0, named=True)
        s["tail"][tail_label(level)] = {
            "rpcs": dom["tail_rpcs"], "threshold_us": dom["threshold_us"], "dominant_stage": dom["stage"],
            "dominant_share": dom["dominant_share"], "excess_stage": exc["stage"], "excess_share": exc["excess_share"],
            "top_server": srv["server_id"], "top_server_share_of_tail": srv["share_of_tail"],
            "top_server_share_of_rpcs": srv["share_of_rpcs"],
        }
        text = (f"{tail_label(level).capitalize()} ({dom['tail_rpcs']:,} RPCs, >= {_us(dom['threshold_us'])}): "
                f"{dom['stage']} is the longest stage in {_pct(dom['dominant_share'])} of them")
        text += (f" and carries {_pct(exc['excess_share'])} of their excess latency over the rest"
                 if exc["stage"] == dom["stage"] else
                 f"; {exc['stage']} carries the most excess latency ({_pct(exc['excess_share'])})")
        if srv["over_representation"] and srv["over_representation"] >= 1.5 and s["servers"] > 1:
            text += (f"; server {srv['server_id']} holds {_pct(srv['share_of_tail'])} of them with "
                     f"{_pct(srv['share_of_rpcs'])} of all RPCs")
        parts.append(text + ".")
    out.extend(parts)
    # concurrency
    fit = d.concurrency_fit.filter(pl.col("stage") == "latency")
    s["concurrency"] = {row["measure"]: {"us_per_read": row["us_per_read"], "us_per_write": row["us_per_write"],
                                         "partial_r2": row["partial_r2"]} for row in fit.iter_rows(named=True)}
    oc = d.concurrency_fit.filter(pl.col("measure") == "server_other_conn")
    lat_oc = oc.filter(pl.col("stage") == "latency").row(0, named=True)
    if lat_oc["us_per_write"] is not None or lat_oc["us_per_read"] is not None:
        stages_oc = oc.filter(pl.col("stage") != "latency")
        by_w = stages_oc.sort("us_per_write", descending=True, nulls_last=True).row(0, named=True)
        by_r = stages_oc.sort("us_per_read", descending=True, nulls_last=True).row(0, named=True)
        out.append(
            "Concurrency: each other write in flight at the same server on another connection adds "
            f"{_us(lat_oc['us_per_write'])} to an RPC's latency (most in {by_w['stage']}, "
            f"{_us(by_w['us_per_write'])}), each other read {_us(lat_oc['us_per_read'])} (most in {by_r['stage']}); "
            f"the two counts explain {_pct(lat_oc['partial_r2'])} of the latency variance within an op "
            "(linear fit, op as fixed effect)."
        )
    tc = d.tail_contributors
    first = tail_label(levels[0])
    w_row = tc.filter(pl.col("metric") == "server_other_conn in flight: writes")
    r_row = tc.filter(pl.col("metric") == "server_other_conn in flight: reads")
    if w_row.height and r_row.height:
        w, rr = w_row.row(0, named=True), r_row.row(0, named=True)
        out.append(f"The {first} start with {w[first]:.3g} writes and {rr[first]:.3g} reads in flight at their server "
                   f"on other connections, against {w['rest']:.3g} and {rr['rest']:.3g} for the rest.")
    # connections
    ct = d.connection_totals
    s["connections_management"] = ct
    if ct["setup_rpcs"]:
        setup_rows = d.connections.filter(pl.col("connection_event") != "reuse").sort("rpcs", descending=True)
        example = setup_rows.row(0, named=True) if setup_rows.height else None
        text = (f"Connection management: {ct['setup_rpcs']:,} RPCs ({_pct(ct['setup_rpcs'] / r.height)}) opened a "
                f"connection ({ct['reconnect_rpcs']:,} after a reconnect)")
        if ct["added_s"] is not None:
            text += (f"; they add {ct['added_s']:.3g} s over reused connections, "
                     f"{_pct(ct['added_share'])} of all RPC time")
        if example is not None and example["added_p50_us"] is not None:
            where = "on a new connection" if example["connection_event"] == "new" else "after a reconnect"
            text += f"; median +{_us(example['added_p50_us'])} for {example['op']} {where}"
        out.append(text + ".")
    # size
    net = d.size_fits.filter(pl.col("stage") == "network")
    s["network_fit"] = {row["op"]: {"alpha_us": row["alpha_us"], "effective_gb_s": row["effective_gb_s"],
                                    "r2": row["r2"]} for row in net.iter_rows(named=True)}
    fits = [f"{row['op']} {_us(row['alpha_us'])} + bytes / {row['effective_gb_s']:.3g} GB/s (R² {row['r2']:.2f})"
            for row in net.iter_rows(named=True)
            if row["effective_gb_s"] and row["r2"] is not None and row["r2"] >= MIN_FIT_R2]
    r2s = [row["r2"] for row in net.iter_rows(named=True) if row["r2"] is not None]
    if fits:
        out.append("Message size, network stage fit (alpha-beta): " + "; ".join(fits) + ".")
    elif r2s:
        net_p50 = overall.filter(pl.col("stage") == "network").get_column("p50_us").item()
        out.append(f"Message size explains little of the network stage (R² {max(r2s):.2f} at most per op; median "
                   f"network stage {_us(net_p50)}): its cost is per-message latency, not bandwidth.")
    # phase
    phase: dict[str, Any] = {}
    texts = []
    for kind, ops in (("pulls", ("pull_sparse", "pull_dense")), ("pushes", ("push_sparse", "push_dense"))):
        sub = r.filter(pl.col("op").cast(pl.String).is_in(list(ops)))
        if sub.height == 0:
            continue
        mean_phase = sub.get_column("iteration_phase").mean()
        q = sub.group_by("iteration_phase_bin").len().sort("len", descending=True).row(0)
        phase[kind] = {"mean_phase": mean_phase, "busiest_quarter": str(q[0]),
                       "busiest_quarter_share": q[1] / sub.height}
        texts.append(f"{kind} are issued at a mean phase of {mean_phase:.2f} ({_pct(q[1] / sub.height)} in the "
                     f"{q[0]} quarter)")
    s["phase"] = phase
    if texts:
        pq = d.percentiles.filter((pl.col("grouping") == "iteration_phase") & (pl.col("stage") == "latency"))
        p99 = "; ".join(f"{row['group']} {_us(row['p99_us'])} ({row['rpcs']:,} RPCs)"
                        for row in pq.iter_rows(named=True))
        out.append("Iteration phase (0 = step start, 1 = next step): " + "; ".join(texts)
                   + f". p99 latency per quarter of the step: {p99}.")
    if d.rejected.height:
        out.append(f"{d.rejected.height:,} input row(s) rejected and not analysed: "
                   + ", ".join(f"{k} {v:,}" for k, v in s["rejected_by_reason"].items()) + ".")
    s["notes"] = d.notes
    s["findings"] = out
    return out, s
