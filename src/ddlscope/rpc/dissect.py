"""The RPC dissection: parse once, then independent analyzers, each answering one question.

:func:`dissect` reads (or takes) an RPC table, decomposes every RPC into stages
(:mod:`~ddlscope.rpc.decompose`), adds the contributor columns (concurrency, connection events,
message size, iteration phase), builds the tables (percentiles, fits, profiles, tail attribution)
and runs the analyzers of :mod:`~ddlscope.rpc.analyzers` on them; the result is a frozen
:class:`Dissection` of Polars tables and the analyzers' frozen records, in numbers. The sentences
(findings, warnings, notes on what was not quoted) are written from it by
:mod:`ddlscope.report.rpc_findings`, once for the console, the HTML report and the JSON summary;
figures and the HTML report by :mod:`ddlscope.report.rpc_dissect`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import polars as pl

from ddlscope.rpc.analyzers import (
    MIN_FIT_R2,
    MIN_FIT_RPCS,
    MIN_FIT_SIZES,
    ConcurrencyEffect,
    ConnectionSetup,
    InputChecks,
    IterationPhase,
    NetworkFits,
    Overview,
    StageShares,
    TailLevel,
    concurrency_effect,
    concurrency_slopes,
    connection_setup,
    input_checks,
    iteration_phase,
    network_fits,
    overview,
    stage_shares,
    tail_in_flight,
    tail_levels,
)
from ddlscope.rpc.concurrency import add_concurrency, concurrency_fit, concurrency_profile, in_flight_columns
from ddlscope.rpc.connections import (
    add_connection_events,
    connection_summary,
    connections_per_server,
    inferred_event_count,
)
from ddlscope.rpc.decompose import decompose, stage_percentiles, stage_summary, substage_split
from ddlscope.rpc.readers import RpcLog, read_rpc_log
from ddlscope.rpc.schema import LATENCY_COLUMN, stages_of
from ddlscope.rpc.size_phase import add_iteration_phase, add_message_bytes, phase_profile, size_fits, size_profile
from ddlscope.rpc.tail import (
    TAIL_LEVELS,
    tail_attribution,
    tail_contributors,
    tail_flags,
    tail_label,
    tail_servers,
)
from ddlscope.rpc.units import human_us
from ddlscope.rpc.validate import ColumnMapping, check_rows, empty_rejected, rejected_counts

__all__ = ["MIN_FIT_R2", "MIN_FIT_RPCS", "MIN_FIT_SIZES", "PERCENTILE_GROUPS", "PROFILES", "Dissection",
           "annotate", "dissect", "no_rows_message", "percentile_table", "split_implausible"]

PERCENTILE_GROUPS: dict[str, str | None] = {
    "all": None, "op": "op", "server": "server_id", "connection": "connection_id",
    "iteration_phase": "iteration_phase_bin",
}
"""Groupings of the percentile table: name -> column (``connection`` uses ``connection_id``)."""


@dataclass(frozen=True)
class Dissection:
    """Everything :func:`dissect` found: Polars tables, and the analyzers' frozen records
    (:mod:`~ddlscope.rpc.analyzers`). Nothing in it changes after :func:`dissect` returns.

    Tables:
        rpcs: one row per RPC (those :func:`split_implausible` set aside are in ``rejected``): the
            input columns, ``<stage>_ns`` (with the parts of split stages), ``latency_ns``, the in-flight
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
        connection_totals: its totals (read-only).
        connections_per_server / connections_per_thread: :func:`~ddlscope.rpc.connections.connections_per_server`.
        size_profile / size_fits / phase_profile: :mod:`~ddlscope.rpc.size_phase`.
        tail / tail_servers / tail_contributors: :mod:`~ddlscope.rpc.tail`.
        rejected: rejected input rows (``log_file``, ``log_line``, ``reason``, ``detail``).

    Answers (:mod:`~ddlscope.rpc.analyzers`):
        overview: :class:`~ddlscope.rpc.analyzers.Overview` (counts, latency percentiles).
        stage_shares: :class:`~ddlscope.rpc.analyzers.StageShares` (the dominant stage).
        tail_levels: one :class:`~ddlscope.rpc.analyzers.TailLevel` per tail level; empty when
            every latency is 0.
        tail_in_flight: reads and writes in flight in the first tail and in the rest
            (:func:`~ddlscope.rpc.analyzers.tail_in_flight`).
        concurrency_effect: :class:`~ddlscope.rpc.analyzers.ConcurrencyEffect`; None when every
            latency is 0 or there are fewer than :data:`MIN_FIT_RPCS` RPCs.
        connection_setup: :class:`~ddlscope.rpc.analyzers.ConnectionSetup`.
        network: :class:`~ddlscope.rpc.analyzers.NetworkFits` (message size, network stage).
        phase: :class:`~ddlscope.rpc.analyzers.IterationPhase`.
        checks: :class:`~ddlscope.rpc.analyzers.InputChecks` (time unit, implausible RPCs).

    Input:
        files: input files; notes: what the reader and :func:`annotate` inferred (the report adds
            its notes on what was not quoted: :func:`ddlscope.report.rpc_findings.narrate`).
        levels: the tail levels analysed.
        time_unit: the unit the log's timestamps were read as (``--time-unit``), None when not
            known (an in-memory table).
        implausible: the RPCs set aside by :func:`split_implausible` (``rpcs``, ``bound_us``,
            ``max_us``, ``first_at``, ``longest_stage``); empty when none was.
    """

    rpcs: pl.DataFrame
    percentiles: pl.DataFrame
    stage_summary: pl.DataFrame
    concurrency_fit: pl.DataFrame
    concurrency_profile: pl.DataFrame
    connections: pl.DataFrame
    connection_totals: Mapping[str, Any]
    connections_per_server: pl.DataFrame
    connections_per_thread: pl.DataFrame | None
    size_profile: pl.DataFrame
    size_fits: pl.DataFrame
    phase_profile: pl.DataFrame
    tail: pl.DataFrame
    tail_servers: pl.DataFrame
    tail_contributors: pl.DataFrame
    overview: Overview
    stage_shares: StageShares
    tail_levels: tuple[TailLevel, ...]
    tail_in_flight: Mapping[str, tuple[float, float]]
    concurrency_effect: ConcurrencyEffect | None
    connection_setup: ConnectionSetup
    network: NetworkFits
    phase: IterationPhase
    checks: InputChecks
    rejected: pl.DataFrame = field(default_factory=empty_rejected)
    files: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    levels: tuple[float, ...] = TAIL_LEVELS
    time_unit: str | None = None
    implausible: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def rejected_counts(self) -> pl.DataFrame:
        """Rejected rows per reason (:func:`~ddlscope.rpc.validate.rejected_counts`)."""
        return rejected_counts(self.rejected)

    def tail_at(self, label: str) -> TailLevel | None:
        """The :class:`~ddlscope.rpc.analyzers.TailLevel` labelled ``label`` (``slowest 1%``), or None."""
        return next((t for t in self.tail_levels if t.label == label), None)

    @property
    def summary(self) -> dict[str, Any]:
        """The headline numbers, JSON-ready, built anew on each call from the records (a new dict:
        changing it changes nothing here). Keys: ``files``, ``rpcs``, ``rejected_rows``,
        ``rejected_by_reason``, ``workers``, ``servers``, ``connections``, ``latency_us``
        (mean/p50/p90/p99/p99_9), ``synthetic`` (the log's ``synthetic`` column is set),
        ``mean_stage_share``, ``stages`` (:func:`~ddlscope.rpc.schema.stages_of`), ``stage_parts``
        (the stages split into parts), ``dominant_stage`` (None when every latency is 0), ``tail``
        (per level: :meth:`TailLevel.entry <ddlscope.rpc.analyzers.TailLevel.entry>`),
        ``concurrency`` (latency slopes per measure), ``phase`` (per pulls/pushes: mean phase,
        busiest quarter and its share), ``network_fit`` (per op alpha and effective bandwidth),
        ``connections_management`` (totals), ``concurrency_effect`` (when fitted:
        :meth:`ConcurrencyEffect.entry <ddlscope.rpc.analyzers.ConcurrencyEffect.entry>`),
        ``implausible_latency`` (the RPCs set aside by :func:`split_implausible`),
        ``largest_rpc_share_of_latency``. The report adds ``warnings``, ``notes`` and ``findings``
        (:func:`ddlscope.report.rpc_findings.dissection_summary`)."""
        ov, sh = self.overview, self.stage_shares
        body = not ov.all_zero
        s: dict[str, Any] = {
            "files": list(self.files), "rpcs": ov.rpcs, "rejected_rows": ov.rejected_rows,
            "rejected_by_reason": dict(ov.rejected_by_reason), "workers": ov.workers, "servers": ov.servers,
            "connections": ov.connections, "latency_us": dict(ov.latency_us), "synthetic": ov.synthetic,
            "mean_stage_share": dict(sh.mean_stage_share), "stages": list(sh.stages),
            "stage_parts": {k: list(v) for k, v in sh.stage_parts.items()}, "dominant_stage": sh.dominant_stage,
            "tail": {t.label: t.entry() for t in self.tail_levels} if body else {},
            "concurrency": concurrency_slopes(self.concurrency_fit) if body else {},
            "phase": {p.kind: p.entry() for p in self.phase.kinds} if body else {},
            "network_fit": {f.op: f.entry() for f in self.network.fits} if body else {},
            "connections_management": dict(self.connection_totals),
        }
        if self.concurrency_effect is not None:
            s["concurrency_effect"] = self.concurrency_effect.entry()
        s["implausible_latency"] = {"rpcs": 0, "bound_us": MAX_PLAUSIBLE_LATENCY_US, **self.implausible}
        s["largest_rpc_share_of_latency"] = self.checks.largest_rpc_share
        return s


_NO_ROWS_WHAT: dict[str, str] = {
    "unmatched_client_span": "client span(s) have no server span",
    "unmatched_server_span": "server span(s) have no client span",
    "unparseable_line": "line(s) are not JSON",
    "extra_fields": "line(s) have more fields than the header",
}


def no_rows_message(log: RpcLog) -> str:
    """Why a log has no RPC to analyse: the rejections by reason (count, what, first
    ``file:line``), or that the files are empty."""
    where = ", ".join(log.files)
    counts = log.rejected_counts()
    if counts.height == 0:
        empty = [n for n in log.notes if n.endswith("empty file, no rows")]
        if len(empty) == len(log.files):
            return f"{where}: the file is empty" if len(log.files) == 1 else f"every log file is empty ({where})"
        return f"no RPC rows in {where}" + (f" ({'; '.join(log.notes)})" if log.notes else "")
    parts = [f"{row['rows']:,} {_NO_ROWS_WHAT[row['reason']]} ({row['reason']}, the first at {row['first_at']})"
             if row["reason"] in _NO_ROWS_WHAT else
             f"{row['rows']:,} rejected as {row['reason']}: {row['meaning']} (the first at {row['first_at']}: "
             f"{row['example']})" for row in counts.iter_rows(named=True)]
    return f"no valid RPC rows in {where}: " + "; ".join(parts)


def inferred_events_note(inferred: int) -> str:
    """The note of :func:`annotate` when ``connection_event`` was inferred for ``inferred`` RPCs
    (:func:`~ddlscope.rpc.connections.add_connection_events`)."""
    return (f"connection_event inferred for {inferred:,} RPCs: the first RPC on each (worker, server, "
            "connection) counted as a new connection, the others as reuse (reconnects not visible)")


def annotate(frame: pl.DataFrame, threads: int = 2, *, steps: pl.DataFrame | None = None,
             substage_bad: dict[str, int] | None = None, measures: tuple[str, ...] | None = None,
             contributors: bool = True) -> tuple[pl.DataFrame, list[str]]:
    """Decompose every RPC and add all contributor columns (the one table the analyzers share).

    The streaming path (:mod:`ddlscope.rpc.streaming`) calls it on each part of a log that holds
    whole servers (so the server and connection in-flight counts are exact), with the whole log's
    ``steps`` and ``substage_bad``.

    Args:
        frame: good rows of an RPC table (e.g. :attr:`RpcLog.frame <ddlscope.rpc.readers.RpcLog.frame>`).
        threads: threads for the concurrency sweep.
        steps: the whole log's iteration steps when ``frame`` is a part
            (:func:`~ddlscope.rpc.size_phase.iteration_steps`); default ``frame``'s own.
        substage_bad: the whole log's :func:`~ddlscope.rpc.decompose.substage_bad_rows` when
            ``frame`` is a part; default ``frame``'s own.
        measures: the in-flight measures to add (default all,
            :data:`~ddlscope.rpc.concurrency.CONCURRENCY_MEASURES`; each with the same counts).
        contributors: add the connection events and set-up times and ``message_bytes`` (the
            streamed path, whose tables read neither, passes False; the inference note is written
            either way, from the same count).

    Returns:
        ``(rpcs, notes)``: the table of :attr:`Dissection.rpcs` and notes on inferred columns.

    Raises:
        ValueError: a stage is negative (the rows were not checked).
    """
    notes: list[str] = []
    rpcs = decompose(frame, substage_bad=substage_bad)
    notes.extend(substage_split(rpcs, substage_bad)[1])
    rpcs = add_concurrency(rpcs, threads=threads) if measures is None else add_concurrency(
        rpcs, threads=threads, measures=measures)
    if contributors:
        rpcs, inferred = add_connection_events(rpcs)
    else:
        inferred = inferred_event_count(rpcs)
    if inferred:
        notes.append(inferred_events_note(inferred))
    if contributors:
        rpcs = add_message_bytes(rpcs)
    rpcs = add_iteration_phase(rpcs, steps)
    return rpcs, notes


def percentile_table(rpcs: pl.DataFrame, groupings: dict[str, str | None] = PERCENTILE_GROUPS) -> pl.DataFrame:
    """:attr:`Dissection.percentiles` for ``groupings`` (name -> column, default
    :data:`PERCENTILE_GROUPS`): :func:`~ddlscope.rpc.decompose.stage_percentiles` per grouping,
    long, with ``grouping`` and ``group`` (String). The streaming path computes the groupings whose
    groups lie in one partition with it, partition by partition."""
    parts = []
    for name, col in groupings.items():
        p = stage_percentiles(rpcs, by=col)
        group = pl.lit("all") if col is None else pl.col(col).cast(pl.String)
        parts.append(p.select(pl.lit(name).alias("grouping"), group.alias("group"),
                              pl.exclude([col] if col else [])))
    return pl.concat(parts)


_percentiles = percentile_table  # the name benchmarks/bench_rpc_dissect.py imports


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
        f = rpcs.select(LATENCY_COLUMN, *(f"{s}_ns" for s in stages_of(rpcs)), rc, wc,
                        (pl.col(rc) + pl.col(wc)).alias("__total"))
        for col in ({"reads": rc, "writes": wc, "total": "__total"}[counted],):
            p = concurrency_profile(f, col)
            parts.append(p.select(pl.lit(m).alias("measure"), pl.lit(counted).alias("counted"), pl.all()))
    return pl.concat(parts, how="diagonal_relaxed")


MAX_PLAUSIBLE_LATENCY_US: float = 60e6
"""An RPC slower than this (1 min) is set aside as implausible when most RPCs of the log are not
(:func:`split_implausible`). The same upper bound as
:data:`~ddlscope.rpc.analyzers.PLAUSIBLE_MEDIAN_LATENCY_US`, ours and not from a source: a training
step's RPCs do not take minutes, so one RPC of 31 years or an hour among thousands of milliseconds
is a clock or logging error (a timestamp taken on another clock, a field never set), and its duration
would otherwise take over every mean and fit."""


def split_implausible(frame: pl.DataFrame, bound_us: float = MAX_PLAUSIBLE_LATENCY_US,
                      decided: bool | None = None) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """Set aside the RPCs whose latency (``client_done_ns - client_issue_ns``) exceeds ``bound_us``,
    when they are a minority of the log.

    When most RPCs exceed the bound, nothing is set aside: the whole log is then off (timestamps
    read in the wrong unit), which the time-unit warning of the report says
    (:func:`ddlscope.report.rpc_findings.narrate`).

    Args:
        frame: checked rows of an RPC table (:attr:`RpcLog.frame <ddlscope.rpc.readers.RpcLog.frame>`).
        bound_us: the largest plausible latency, µs.
        decided: for one part of a log, whether the whole log sets its implausible RPCs aside
            (the streaming path counts them first, :mod:`ddlscope.rpc.streaming`); default: decide
            from ``frame``.

    Returns:
        ``(kept, set_aside, info)``: the other rows; the set-aside rows as rejected rows
        (:data:`~ddlscope.rpc.validate.REJECTED_SCHEMA`, reason ``implausible_latency``, the detail
        giving the latency and the longest stage); and ``info`` (``rpcs``, ``bound_us``,
        ``max_us``, ``first_at`` = ``file:line`` of the slowest, ``longest_stage`` of the slowest),
        empty when none was set aside.
    """
    if frame.height == 0:
        return frame, empty_rejected(), {}
    latency = pl.col("client_done_ns") - pl.col("client_issue_ns")
    over = latency > int(bound_us * 1e3)
    n_over = frame.select(over.sum()).item()
    if not n_over or (2 * n_over > frame.height if decided is None else not decided):
        return frame, empty_rejected(), {}
    bad = decompose(frame.filter(over), check=False)
    if "log_line" not in bad.columns:
        bad = bad.with_row_index("log_line", offset=1).with_columns(pl.col("log_line").cast(pl.Int64))
    if "log_file" not in bad.columns:
        bad = bad.with_columns(pl.lit("<memory>").alias("log_file"))
    stages = stages_of(bad)
    stage_ns = bad.select(f"{st}_ns" for st in stages).to_numpy()
    longest = [stages[i] for i in stage_ns.argmax(axis=1)]
    lat_us = (bad.get_column(LATENCY_COLUMN).to_numpy() / 1e3).tolist()
    details = [f"latency {human_us(x)} > {human_us(bound_us)} (longest stage {st}, {human_us(v / 1e3)})"
               for x, st, v in zip(lat_us, longest, stage_ns.max(axis=1).tolist(), strict=True)]
    set_aside = pl.DataFrame({
        "log_file": bad.get_column("log_file").cast(pl.String), "log_line": bad.get_column("log_line").cast(pl.Int64),
        "reason": ["implausible_latency"] * bad.height, "detail": details,
    })
    worst = max(range(bad.height), key=lat_us.__getitem__)
    info = {"rpcs": bad.height, "bound_us": bound_us, "max_us": lat_us[worst],
            "first_at": f"{set_aside['log_file'][worst]}:{set_aside['log_line'][worst]}",
            "longest_stage": longest[worst]}
    return frame.filter(~over), set_aside, info


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
    time_unit: str | None = None  # known for file input only
    if isinstance(source, RpcLog):
        log = source
    elif isinstance(source, pl.DataFrame):
        good, bad = check_rows(source)
        log = RpcLog(frame=good, rejected=bad, files=["<memory>"])
    else:
        log = read_rpc_log(source, mapping=mapping, input_format=input_format)
        time_unit = mapping.time_unit if mapping is not None else "ns"
    if log.frame.height == 0:
        raise ValueError(no_rows_message(log))
    frame, set_aside, implausible = split_implausible(log.frame)
    rejected = pl.concat([log.rejected, set_aside], how="vertical_relaxed") if set_aside.height else log.rejected
    rpcs, notes = annotate(frame, threads=threads)
    return _analyse(rpcs, rejected, levels=tuple(levels), files=tuple(log.files), notes=(*log.notes, *notes),
                    time_unit=time_unit, implausible=implausible)


def _analyse(rpcs: pl.DataFrame, rejected: pl.DataFrame, *, levels: tuple[float, ...], files: tuple[str, ...],
             notes: tuple[str, ...], time_unit: str | None, implausible: dict[str, Any]) -> Dissection:
    """The tables of the annotated ``rpcs``, then the analyzers on them: one :class:`Dissection`."""
    percentiles = percentile_table(rpcs)
    summary = stage_summary(rpcs, by="op")
    conc_fit = concurrency_fit(rpcs)
    conn_table, conn_totals = connection_summary(rpcs)
    per_server, per_thread = connections_per_server(rpcs)
    sizes = size_fits(rpcs)
    flagged = tail_flags(rpcs, levels, by_op=True)  # one selection pass shared by the tail analyzers
    tail = tail_attribution(flagged, levels)
    servers = tail_servers(flagged, levels)
    contributors = tail_contributors(flagged, levels)

    ov = overview(rpcs, percentiles, rejected)
    p50 = ov.latency_us["p50"]
    tails = () if ov.all_zero else tail_levels(levels, tail, servers, p50)
    in_flight = tail_in_flight(contributors, tails[0] if tails and tails[0].label == tail_label(levels[0]) else None)
    effect = None
    if not ov.all_zero and rpcs.height >= MIN_FIT_RPCS:
        oc = conc_fit.filter(pl.col("measure") == "server_other_conn")
        effect = concurrency_effect(oc.filter(pl.col("stage") == "latency").row(0, named=True),
                                    oc.filter(pl.col("stage") != "latency"), in_flight, tail_label(levels[0]))
    return Dissection(
        rpcs=rpcs, percentiles=percentiles, stage_summary=summary, concurrency_fit=conc_fit,
        concurrency_profile=_profiles(rpcs), connections=conn_table, connection_totals=MappingProxyType(conn_totals),
        connections_per_server=per_server, connections_per_thread=per_thread, size_profile=size_profile(rpcs),
        size_fits=sizes, phase_profile=phase_profile(rpcs), tail=tail, tail_servers=servers,
        tail_contributors=contributors,
        overview=ov, stage_shares=stage_shares(rpcs, percentiles, summary, ov.all_zero), tail_levels=tails,
        tail_in_flight=in_flight, concurrency_effect=effect,
        connection_setup=connection_setup(conn_table, conn_totals, rpcs.height),
        network=network_fits(sizes, percentiles), phase=iteration_phase(rpcs, percentiles),
        checks=input_checks(rpcs, p50, time_unit, implausible),
        rejected=rejected, files=files, notes=notes, levels=levels, time_unit=time_unit,
        implausible=MappingProxyType(dict(implausible)),
    )


