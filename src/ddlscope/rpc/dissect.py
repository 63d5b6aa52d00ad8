"""The RPC dissection: parse once, then independent analyzers, each answering one question.

:func:`dissect` reads (or takes) an RPC table, decomposes every RPC into stages
(:mod:`~ddlscope.rpc.decompose`), adds the contributor columns (concurrency, connection events,
message size, iteration phase) and runs the analyzers; the result is a :class:`Dissection` of
Polars tables plus headline findings. Figures and the HTML report are made from it by
:mod:`ddlscope.report.rpc_dissect`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ddlscope.rpc.concurrency import add_concurrency, concurrency_fit, concurrency_profile, in_flight_columns
from ddlscope.rpc.connections import add_connection_events, connection_summary, connections_per_server
from ddlscope.rpc.decompose import decompose, stage_percentiles, stage_summary, substage_split
from ddlscope.rpc.readers import RpcLog, read_rpc_log
from ddlscope.rpc.schema import LATENCY_COLUMN, SUBSTAGES, stages_of
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
MIN_FIT_RPCS = 30
"""Fits (message size per op, concurrency) over fewer RPCs than this are not quoted as findings: a
line through a handful of points says nothing about the system (the tables keep them)."""
MIN_FIT_SIZES = 3
"""A message-size fit needs at least this many distinct sizes (two points always fit a line)."""

PERCENTILE_GROUPS: dict[str, str | None] = {
    "all": None, "op": "op", "server": "server_id", "connection": "connection_id",
    "iteration_phase": "iteration_phase_bin",
}
"""Groupings of the percentile table: name -> column (``connection`` uses ``connection_id``)."""


@dataclass
class Dissection:
    """Everything :func:`dissect` found; every table is a Polars DataFrame.

    Attributes:
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
        connection_totals: its totals.
        connections_per_server / connections_per_thread: :func:`~ddlscope.rpc.connections.connections_per_server`.
        size_profile / size_fits / phase_profile: :mod:`~ddlscope.rpc.size_phase`.
        tail / tail_servers / tail_contributors: :mod:`~ddlscope.rpc.tail`.
        rejected: rejected input rows (``log_file``, ``log_line``, ``reason``, ``detail``).
        files: input files; notes: what the reader or analyzers inferred.
        findings: headline findings, one sentence each.
        summary: the headline numbers (JSON-ready; see :func:`findings`).
        time_unit: the unit the log's timestamps were read as (``--time-unit``), None when not
            known (an in-memory table).
        warnings: what looks wrong with the input (an implausible median latency: check the time
            unit; RPCs set aside as implausible; one RPC carrying most of the mean), filled by
            :func:`findings`.
        implausible: the RPCs set aside by :func:`split_implausible` (``rpcs``, ``bound_us``,
            ``max_us``, ``first_at``, ``longest_stage``); empty when none was.
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
    time_unit: str | None = None
    warnings: list[str] = field(default_factory=list)
    implausible: dict[str, Any] = field(default_factory=dict)

    def rejected_counts(self) -> pl.DataFrame:
        """Rejected rows per reason (:func:`~ddlscope.rpc.validate.rejected_counts`)."""
        return rejected_counts(self.rejected)


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


def annotate(frame: pl.DataFrame, threads: int = 2, *, steps: pl.DataFrame | None = None,
             substage_bad: dict[str, int] | None = None) -> tuple[pl.DataFrame, list[str]]:
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

    Returns:
        ``(rpcs, notes)``: the table of :attr:`Dissection.rpcs` and notes on inferred columns.

    Raises:
        ValueError: a stage is negative (the rows were not checked).
    """
    notes: list[str] = []
    rpcs = decompose(frame, substage_bad=substage_bad)
    notes.extend(substage_split(rpcs, substage_bad)[1])
    rpcs = add_concurrency(rpcs, threads=threads)
    rpcs, inferred = add_connection_events(rpcs)
    if inferred:
        notes.append(f"connection_event inferred for {inferred:,} RPCs: the first RPC on each (worker, server, "
                     "connection) counted as a new connection, the others as reuse (reconnects not visible)")
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
(:func:`split_implausible`). The same upper bound as :data:`PLAUSIBLE_MEDIAN_LATENCY_US`, ours and
not from a source: a training step's RPCs do not take minutes, so one RPC of 31 years or an hour
among thousands of milliseconds is a clock or logging error (a timestamp taken on another clock,
a field never set), and its duration would otherwise take over every mean and fit."""


def split_implausible(frame: pl.DataFrame, bound_us: float = MAX_PLAUSIBLE_LATENCY_US,
                      decided: bool | None = None) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """Set aside the RPCs whose latency (``client_done_ns - client_issue_ns``) exceeds ``bound_us``,
    when they are a minority of the log.

    When most RPCs exceed the bound, nothing is set aside: the whole log is then off (timestamps
    read in the wrong unit), which the time-unit warning of :func:`findings` says.

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
    details = [f"latency {_us(x)} > {_us(bound_us)} (longest stage {st}, {_us(v / 1e3)})"
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
    zero = rpcs.select((pl.col(LATENCY_COLUMN) == 0).sum()).item()
    if 0 < zero < rpcs.height:
        notes.append(f"{_rpcs(zero)} ({_pct(zero / rpcs.height)}) have latency 0 (client_done_ns = "
                     "client_issue_ns): the timestamps are coarser than these RPCs or were not set")
    conn_table, conn_totals = connection_summary(rpcs)
    per_server, per_thread = connections_per_server(rpcs)
    flagged = tail_flags(rpcs, levels, by_op=True)  # one selection pass shared by the tail analyzers
    d = Dissection(
        rpcs=rpcs,
        percentiles=percentile_table(rpcs),
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
        rejected=rejected,
        files=list(log.files),
        notes=[*log.notes, *notes],
        time_unit=time_unit,
        implausible=implausible,
    )
    d.findings, d.summary = findings(d, levels)
    return d


# -- findings -------------------------------------------------------------------------------------

def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _us(x: float | None) -> str:
    """A duration in µs in the largest unit that keeps it at or above 1: ``476 µs``, ``2.19 ms``,
    ``1.5 s``, ``2.25 min``, ``37.5 h`` (hours up to 10 days), ``12.5 days``, ``31 years`` (a year of
    365.25 days; 3 significant digits; ``-`` when unknown)."""
    if not _finite(x):
        return "-"
    sign = "-" if x < 0 else ""
    a = abs(x)
    for unit, size_us, least in (("years", 365.25 * 86_400e6, 1), ("days", 86_400e6, 10), ("h", 3_600e6, 1),
                                 ("min", 60e6, 1), ("s", 1e6, 1), ("ms", 1e3, 1)):
        if a >= least * size_us:
            return f"{sign}{a / size_us:.3g} {unit}"
    return f"{sign}{a:.3g} µs"


PLAUSIBLE_MEDIAN_LATENCY_US: tuple[float, float] = (1.0, 60e6)
"""Median RPC latencies outside [1 µs, 1 min] suggest timestamps read in the wrong unit. Our
bounds, not from a source: a request and response between two hosts take at least a few µs
(one network hop plus two kernel crossings), and a training step's RPCs do not take minutes."""


def time_unit_warning(p50_us: float | None, time_unit: str | None) -> str | None:
    """The warning when the median latency ``p50_us`` (µs) is outside
    :data:`PLAUSIBLE_MEDIAN_LATENCY_US` (None when plausible, 0 or unknown)."""
    low, high = PLAUSIBLE_MEDIAN_LATENCY_US
    if not _finite(p50_us) or p50_us <= 0 or low <= p50_us <= high:
        return None
    read_as = f" (the timestamps were read as {time_unit})" if time_unit else ""
    return (f"the median RPC latency is {_us(p50_us)}, implausible for an RPC (expected {_us(low)} to {_us(high)}): "
            f"check --time-unit{read_as}")


MOST_OF_THE_MEAN = 0.5
"""One RPC whose latency is more than this share of the sum of all latencies "carries most of the
mean": the mean and the stage shares then describe that RPC rather than the log (a warning, from
:data:`MIN_FIT_RPCS` RPCs on: in a handful of RPCs one of them always weighs much)."""


def _largest_share(r: pl.DataFrame, column: str = LATENCY_COLUMN) -> tuple[float | None, str | None]:
    """The largest single value of ``column`` as a share of its sum, and the ``file:line`` of that
    RPC (``(None, None)`` when the sum is 0)."""
    if r.height == 0:
        return None, None
    values = r.get_column(column)
    total = values.cast(pl.Float64).sum()
    if not total:
        return None, None
    i = int(values.arg_max())
    row = r.row(i, named=True)
    return float(values[i]) / total, f"{row.get('log_file', '<memory>')}:{row.get('log_line', i + 1)}"


def _implausible_warning(info: dict[str, Any], r: pl.DataFrame) -> str | None:
    """The warning on RPCs set aside by :func:`split_implausible` (None when none was)."""
    if not info:
        return None
    n = info["rpcs"]
    which = "its" if n == 1 else "the slowest's"
    return (f"{_rpcs(n)} with a latency above {_us(info['bound_us'])} ({'' if n == 1 else 'up to '}"
            f"{_us(info['max_us'])}, at {info['first_at']}; {which} longest stage {info['longest_stage']}) "
            f"{'is' if n == 1 else 'are'} implausible for an RPC and left out of every share, percentile and fit "
            f"(rejected as implausible_latency; {_rpcs(r.height)} analysed)")


def _one_rpc_warning(share: float | None, at: str | None, r: pl.DataFrame) -> str | None:
    """The warning when one RPC carries more than :data:`MOST_OF_THE_MEAN` of the total latency."""
    if share is None or share <= MOST_OF_THE_MEAN or r.height < MIN_FIT_RPCS:
        return None
    return (f"one RPC (at {at}) carries {_pct(share)} of the total latency of the {_rpcs(r.height)}: the mean and "
            "the stage shares describe that RPC more than the log; read the percentiles")


STAGE_GLOSS: dict[str, str] = {
    "server_sync_wait": "the wait at the server for the sync barrier, i.e. the other workers' pushes of the previous "
    "iteration, and for table locks",
    "server_thread_wait": "waiting for a free server thread",
}
"""What the finer server stages of :data:`~ddlscope.rpc.schema.SUBSTAGES` mean, said at their first
mention in the findings."""


def _gloss_first_mention(lines: list[str]) -> list[str]:
    """The findings with each :data:`STAGE_GLOSS` stage explained in parentheses where first named."""
    out = list(lines)
    for stage, gloss in STAGE_GLOSS.items():
        for i, line in enumerate(out):
            pos = line.find(stage)
            if pos >= 0:
                end = pos + len(stage)
                out[i] = f"{line[:end]} ({gloss}){line[end:]}"
                break
    return out


def _pct(x: float | None) -> str:
    return f"{100 * x:.3g}%" if _finite(x) else "-"


def _rpcs(n: int) -> str:
    return f"{n:,} RPC" + ("" if n == 1 else "s")


def _synthetic(r: pl.DataFrame) -> bool:
    """Whether the log's ``synthetic`` column (Boolean, or text ``true``/``1`` from a CSV read as
    text) is set on any row."""
    if "synthetic" not in r.columns:
        return False
    col = r.get_column("synthetic")
    if col.dtype == pl.String:
        col = col.str.strip_chars().str.to_lowercase().is_in(["true", "1"])
    elif col.dtype != pl.Boolean:
        col = col.cast(pl.Boolean, strict=False)
    return bool(col.any())


def _tail_sentence(level: float, t: pl.DataFrame, srv: dict[str, Any] | None, servers: int,
                   p50_us: float) -> tuple[str, dict[str, Any]]:
    """The finding on one tail level (rows of :func:`~ddlscope.rpc.tail.tail_attribution` for
    scope ``all``) and its summary entry.

    When the tail is no slower than the rest (mean latency, the sum of the stage means; or there
    is no rest), e.g. every latency tied, which RPCs form the "tail" is an artefact of
    tie-breaking: nothing is attributed (``no_tail`` in the entry). When the tail is slower but its
    threshold (its fastest RPC) is not above the median ``p50_us``, the sentence says that RPCs
    tied at the median fill the tail.
    """
    dom = t.sort("dominant_share", descending=True).row(0, named=True)
    tail_mean = t.get_column("mean_tail_us").sum()
    rest_mean = t.get_column("mean_rest_us").sum() if t.get_column("mean_rest_us").null_count() == 0 else None
    if rest_mean is None or tail_mean <= rest_mean + 1e-9 * abs(rest_mean):
        entry = {"rpcs": dom["tail_rpcs"], "threshold_us": dom["threshold_us"], "no_tail": True,
                 "dominant_stage": None, "dominant_share": None, "excess_stage": None, "excess_share": None,
                 "top_server": None, "top_server_share_of_tail": None, "top_server_share_of_rpcs": None}
        label = tail_label(level)
        return (f"{label.capitalize()} ({_rpcs(dom['tail_rpcs'])}, >= {_us(dom['threshold_us'])}): no tail: the "
                f"{label} are no slower than the median ({_us(p50_us)}), so no stage or server is singled out.",
                entry)
    known = t.filter(pl.col("excess_share").is_not_nan() & pl.col("excess_share").is_not_null())
    exc = known.sort("excess_share", descending=True).row(0, named=True) if known.height else None
    entry = {
        "rpcs": dom["tail_rpcs"], "threshold_us": dom["threshold_us"], "no_tail": False,
        "dominant_stage": dom["stage"],
        "dominant_share": dom["dominant_share"], "excess_stage": exc["stage"] if exc else None,
        "excess_share": exc["excess_share"] if exc else None,
        "top_server": srv["server_id"] if srv else None,
        "top_server_share_of_tail": srv["share_of_tail"] if srv else None,
        "top_server_share_of_rpcs": srv["share_of_rpcs"] if srv else None,
    }
    text = (f"{tail_label(level).capitalize()} ({_rpcs(dom['tail_rpcs'])}, >= {_us(dom['threshold_us'])}): "
            f"{dom['stage']} is the longest stage in {_pct(dom['dominant_share'])} of them")
    if exc is not None:
        share = exc["excess_share"]
        stage_excess = exc["mean_tail_us"] - exc["mean_rest_us"]
        if share > 1:
            # the other stages together are shorter in the tail than in the rest
            text += (f"; {exc['stage']} is {_us(stage_excess)} longer in them than in the rest, more than their "
                     f"whole excess latency ({_us(stage_excess / share)}), because other stages are shorter in "
                     "the tail")
        elif exc["stage"] == dom["stage"]:
            text += f" and carries {_pct(share)} of their excess latency over the rest"
        else:
            text += f"; {exc['stage']} carries the most excess latency ({_pct(share)})"
    if not dom["threshold_us"] > p50_us:
        text += (f"; its threshold is the median: RPCs tied at {_us(p50_us)} fill the tail, picked by "
                 "tie-breaking")
    if srv and _finite(srv["over_representation"]) and srv["over_representation"] >= 1.5 and servers > 1:
        text += (f"; server {srv['server_id']} holds {_pct(srv['share_of_tail'])} of them with "
                 f"{_pct(srv['share_of_rpcs'])} of all RPCs")
    return text + ".", entry


def _slope_text(kind: str, b: float, stages: pl.DataFrame, key: str, first: bool,
                ci: tuple[float, float] | None = None) -> str:
    """``each other write ... adds 98.5 µs ...`` or, for a negative slope, ``... is associated
    with 186 µs less latency``, with the stage that moves most in the same direction; ``ci`` (the
    95 % interval, µs) follows the value."""
    where = "in flight at the same server on another connection " if first else ""
    interval = f" (95% interval {_us(ci[0])} to {_us(ci[1])})" if ci else ""
    if b >= 0:
        st = stages.sort(key, descending=True, nulls_last=True).row(0, named=True)
        adds = f"adds {_us(b)}{interval} to an RPC's latency" if first else f"{_us(b)}{interval}"
        return f"each other {kind} {where}{adds} (most in {st['stage']}, {_us(st[key])})"
    st = stages.sort(key, descending=False, nulls_last=True).row(0, named=True)
    return (f"each other {kind} {where}is associated with {_us(-b)}{interval} less latency (most in {st['stage']}; "
            "a correlation, not a saving)")


MIN_CONCURRENCY_R2 = 0.05
"""A concurrency fit whose two counts explain less than this share of the within-op latency
variance (partial R²) states no per-RPC effect: "no measurable effect". Our threshold, not from a
source: below 5 % the line is a slope through noise (a 0.3 % fit of a ps-train log quoted "546 µs
per write" while its slowest 1 % had fewer writes in flight than the rest)."""
CI_Z = 1.96
"""A slope is quoted only when its 95 % confidence interval, ``slope ± 1.96 × standard error``
(normal approximation), excludes 0. The classical standard errors assume independent,
homoscedastic errors, which queueing latencies are not: the interval is a lower bound on the
uncertainty, so this is a necessary condition, not a sufficient one."""


def concurrency_sentence(lat: dict[str, Any], stages: pl.DataFrame, tail_in_flight: dict[str, tuple[float, float]],
                         tail: str) -> tuple[str | None, dict[str, Any]]:
    """The concurrency finding from the latency row of the ``server_other_conn`` fit.

    A per-RPC effect is stated only when the fit explains at least :data:`MIN_CONCURRENCY_R2` of
    the within-op variance and the slope's 95 % interval (:data:`CI_Z`) excludes 0; otherwise the
    sentence says "no measurable effect". The strength (R², n) is always in the sentence. A positive
    effect of writes (or reads) while the tail ``tail`` has *fewer* of them in flight than the rest
    (``tail_in_flight[kind] = (tail mean, rest mean)``) is said to not explain the tail.

    Args:
        lat: the fit's ``latency`` row (:func:`~ddlscope.rpc.concurrency.concurrency_fit`).
        stages: the same measure's rows of the stages (for the stage that moves most).
        tail_in_flight: mean counts in flight in the tail and in the rest, per ``write``/``read``.
        tail: the tail's label (``slowest 1%``).

    Returns:
        ``(sentence or None when no slope is known, summary entry)``: the entry has ``r2``, ``rpcs``,
        ``min_r2``, and per kind (``write``, ``read``) ``us_per``, ``ci95_us`` and ``measurable``.
    """
    r2, n = lat["partial_r2"], lat["rpcs"]
    effect: dict[str, Any] = {"r2": r2, "rpcs": n, "min_r2": MIN_CONCURRENCY_R2}
    known = [(kind, f"us_per_{kind}") for kind in ("write", "read") if _finite(lat[f"us_per_{kind}"])]
    if not known:
        return None, effect
    strength = f"R² {_pct(r2)} of the latency variance within an op, n = {_rpcs(n)}"
    where = "in flight at the same server on other connections"
    for kind, key in known:
        b, se = lat[key], lat[f"{key}_se"]
        ci = (b - CI_Z * se, b + CI_Z * se) if _finite(se) else None
        measurable = bool(_finite(r2) and r2 >= MIN_CONCURRENCY_R2 and ci is not None and (ci[0] > 0 or ci[1] < 0))
        effect[kind] = {"us_per": b, "ci95_us": list(ci) if ci else None, "measurable": measurable}
    if not any(effect[k]["measurable"] for k, _ in known):
        why = (f"R² below {_pct(MIN_CONCURRENCY_R2)}" if not (_finite(r2) and r2 >= MIN_CONCURRENCY_R2)
               else "every slope's 95% interval includes 0")
        return (f"Concurrency: no measurable effect of the reads and writes {where} on an RPC's latency: the two "
                f"counts explain {_pct(r2)} of the latency variance within an op ({why}; linear fit, op as fixed "
                f"effect, n = {_rpcs(n)})."), effect
    parts: list[str] = []
    for kind, key in known:
        e = effect[kind]
        if not e["measurable"]:
            parts.append(f"no measurable effect of each other {kind} ({_us(e['us_per'])} per {kind}, 95% interval "
                         f"{_us(e['ci95_us'][0])} to {_us(e['ci95_us'][1])})" if e["ci95_us"] else
                         f"no measurable effect of each other {kind}")
            continue
        text = _slope_text(kind, e["us_per"], stages, key, not parts, tuple(e["ci95_us"]))
        if e["us_per"] > 0 and kind in tail_in_flight and tail_in_flight[kind][0] < tail_in_flight[kind][1]:
            t_mean, r_mean = tail_in_flight[kind]
            text += (f", but the {tail} have fewer {kind}s in flight ({t_mean:.3g}) than the rest ({r_mean:.3g}), "
                     f"so {kind}s in flight do not explain the tail")
        parts.append(text)
    return f"Concurrency ({strength}; linear fit, op as fixed effect): " + "; ".join(parts) + ".", effect


def _size_findings(d: Dissection, overall: pl.DataFrame) -> tuple[list[str], list[str]]:
    """(findings, notes) on the alpha-beta fits of the network stage (see :data:`MIN_FIT_RPCS`)."""
    net = d.size_fits.filter(pl.col("stage") == "network")
    valid = net.filter((pl.col("rpcs") >= MIN_FIT_RPCS) & (pl.col("distinct_values") >= MIN_FIT_SIZES)
                       & pl.col("r2").is_not_null())
    notes = []
    if net.height > valid.height:
        few = ", ".join(net.filter(~pl.col("op").is_in(valid.get_column("op").to_list())).get_column("op").to_list())
        notes.append(f"message-size fits not quoted for {few}: fewer than {MIN_FIT_RPCS} RPCs or "
                     f"{MIN_FIT_SIZES} distinct message sizes (see tables/size_fits.csv)")
    if valid.height == 0:
        return [], notes
    good = valid.filter((pl.col("r2") >= MIN_FIT_R2) & (pl.col("effective_gb_s") > 0) & (pl.col("alpha_us") >= 0))
    negative = valid.filter((pl.col("r2") >= MIN_FIT_R2) & (pl.col("alpha_us") < 0))
    out = []
    if good.height:
        out.append("Message size, network stage fit (alpha-beta): " + "; ".join(
            f"{row['op']} {_us(row['alpha_us'])} + bytes / {row['effective_gb_s']:.3g} GB/s (R² {row['r2']:.2f})"
            for row in good.iter_rows(named=True)) + ".")
    elif negative.height == 0:
        net_p50 = overall.filter(pl.col("stage") == "network").get_column("p50_us").item()
        out.append(f"Message size explains little of the network stage (R² {valid.get_column('r2').max():.2f} at "
                   f"most per op; median network stage {_us(net_p50)}): its cost is per-message latency, not "
                   "bandwidth.")
    if negative.height:
        notes.append("network stage against message bytes: the straight-line fit of "
                     + ", ".join(negative.get_column("op").to_list()) + " has a negative intercept, so the alpha-beta "
                     "model does not hold over these sizes (see tables/size_profile.csv)")
    return out, notes


def findings(d: Dissection, levels: Sequence[float] = TAIL_LEVELS) -> tuple[list[str], dict[str, Any]]:
    """Headline findings (sentences) and the summary numbers of a dissection.

    Degenerate logs read plainly: with every latency 0 the findings say so instead of quoting
    shares; fits over fewer than :data:`MIN_FIT_RPCS` RPCs are not quoted; a negative slope reads
    "is associated with ... less"; an excess share above 100 % is explained. Notes on what was not
    quoted are appended to ``d.notes``.

    Returns:
        ``(findings, summary)``; ``summary`` keys: ``files``, ``rpcs``, ``synthetic`` (the log's
        ``synthetic`` column is set), ``rejected_rows``, ``rejected_by_reason``,
        ``workers``, ``servers``, ``connections``, ``latency_us`` (p50/p90/p99/p99_9/mean),
        ``mean_stage_share``, ``dominant_stage`` (None when every latency is 0), ``tail`` (per
        level: threshold, ``no_tail`` (the tail is no slower than the median: nothing attributed),
        top stage, its dominant and excess share, top server), ``concurrency``
        (latency slopes per measure), ``connections_management`` (totals), ``phase`` (per
        pulls/pushes: mean phase, busiest quarter and its share),
        ``network_fit`` (per op alpha and effective bandwidth), ``stages`` (the stages analysed,
        :func:`~ddlscope.rpc.schema.stages_of`), ``stage_parts`` (the stages split into parts),
        ``concurrency_effect`` (:func:`concurrency_sentence`), ``implausible_latency`` (the RPCs
        set aside by :func:`split_implausible`), ``largest_rpc_share_of_latency``, ``warnings``
        (time unit, RPCs set aside, one RPC carrying most of the mean), ``notes``.
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
    s["synthetic"] = _synthetic(r)
    head = (("SYNTHETIC log (generated, not measured): " if s["synthetic"] else "")
            + f"{_rpcs(r.height)} from {s['workers']} worker(s) to {s['servers']} server(s) over "
            f"{s['connections']} connection(s): ")
    all_zero = not lat["max_us"]
    if all_zero:
        out.append(head + "every RPC has latency 0 (client_done_ns = client_issue_ns), so the timestamps do not "
                   "resolve the RPCs and there are no stage shares, tails or fits to report; check the log's "
                   "timestamps and --time-unit.")
    elif lat["p50_us"]:
        out.append(head + f"latency p50 {_us(lat['p50_us'])}, p99 {_us(lat['p99_us'])} "
                   f"({lat['p99_us'] / lat['p50_us']:.3g}x p50), p99.9 {_us(lat['p99_9_us'])}.")
    else:
        out.append(head + f"latency p50 0 µs (at least half the RPCs have latency 0), p99 {_us(lat['p99_us'])}, "
                   f"p99.9 {_us(lat['p99_9_us'])}.")
    means = overall.filter(pl.col("stage") != "latency").select("stage", "mean_us").sort("mean_us", descending=True)
    shares = {st: (m / lat["mean_us"] if lat["mean_us"] else None) for st, m in means.iter_rows()}
    s["mean_stage_share"] = shares
    stages = stages_of(r)
    s["stages"] = list(stages)
    s["stage_parts"] = {st: [p for p, _, _ in parts] for st, parts in SUBSTAGES.items()
                        if all(p in stages for p, _, _ in parts)}
    s["dominant_stage"] = None if all_zero else means.row(0)[0]
    s["tail"], s["concurrency"], s["phase"], s["network_fit"] = {}, {}, {}, {}
    s["connections_management"] = d.connection_totals
    notes: list[str] = []
    if not all_zero:
        out.extend(_body_findings(d, levels, s, overall, means, shares, notes))
    out = _gloss_first_mention(out)
    if d.rejected.height:
        out.append(f"{d.rejected.height:,} input row(s) rejected and not analysed: "
                   + ", ".join(f"{k} {v:,}" for k, v in s["rejected_by_reason"].items()) + ".")
    d.notes.extend(n for n in notes if n not in d.notes)
    s["implausible_latency"] = {"rpcs": 0, "bound_us": MAX_PLAUSIBLE_LATENCY_US, **d.implausible}
    s["largest_rpc_share_of_latency"], largest_at = _largest_share(r)
    d.warnings = [w for w in (time_unit_warning(lat["p50_us"], d.time_unit), _implausible_warning(d.implausible, r),
                              _one_rpc_warning(s["largest_rpc_share_of_latency"], largest_at, r)) if w]
    s["warnings"] = d.warnings
    s["notes"] = d.notes
    s["findings"] = out
    return out, s


def _body_findings(d: Dissection, levels: Sequence[float], s: dict[str, Any], overall: pl.DataFrame,
                   means: pl.DataFrame, shares: dict[str, float | None], notes: list[str]) -> list[str]:
    """Findings 2.. of :func:`findings` for a log with some non-zero latency (fills ``s``)."""
    r = d.rpcs
    out: list[str] = []
    top = means.row(0)[0]
    per_op = []
    for row in d.stage_summary.iter_rows(named=True):
        if not row["latency_mean_us"]:
            per_op.append(f"{row['op']} all stages 0")
            continue
        best = max(stages_of(r), key=lambda st: row[f"{st}_share"] or 0)
        per_op.append(f"{row['op']} {best} {_pct(row[f'{best}_share'])}")
    one, at = _largest_share(r, f"{top}_ns")
    alone = (f" (one RPC, at {at}, carries {_pct(one)} of it)" if one is not None and one > MOST_OF_THE_MEAN
             and r.height >= MIN_FIT_RPCS else "")
    out.append(f"Dominant stage: {top} takes {_pct(shares[top])} of the mean RPC time{alone}; "
               f"second {means.row(1)[0]} ({_pct(shares[means.row(1)[0]])}). Largest stage per op: "
               + "; ".join(per_op) + ".")
    # tail
    tail_all = d.tail.filter(pl.col("scope") == "all")
    for level in levels:
        t = tail_all.filter(pl.col("tail") == tail_label(level))
        if t.height == 0:
            continue
        servers = d.tail_servers.filter(pl.col("tail") == tail_label(level))
        srv = servers.row(0, named=True) if servers.height else None
        text, entry = _tail_sentence(level, t, srv, s["servers"], s["latency_us"]["p50"])
        s["tail"][tail_label(level)] = entry
        out.append(text)
    if r.height < 1000:
        notes.append(f"{_rpcs(r.height)}: the slowest 0.1% is "
                     f"{_rpcs(math.ceil(round(r.height * 0.001, 6)))}; tail shares of so few RPCs are anecdotes")
    # concurrency
    fit = d.concurrency_fit.filter(pl.col("stage") == "latency")
    s["concurrency"] = {row["measure"]: {"us_per_read": row["us_per_read"], "us_per_write": row["us_per_write"],
                                         "partial_r2": row["partial_r2"]} for row in fit.iter_rows(named=True)}
    oc = d.concurrency_fit.filter(pl.col("measure") == "server_other_conn")
    lat_oc = oc.filter(pl.col("stage") == "latency").row(0, named=True)
    tc = d.tail_contributors
    first = tail_label(levels[0])
    tail_in_flight: dict[str, tuple[float, float]] = {}  # kind -> (tail mean, rest mean)
    if not s["tail"].get(first, {}).get("no_tail"):
        for kind in ("write", "read"):
            row = tc.filter(pl.col("metric") == f"server_other_conn in flight: {kind}s")
            if row.height and all(_finite(v) for v in (row[first][0], row["rest"][0])):
                tail_in_flight[kind] = (row[first][0], row["rest"][0])
    if r.height < MIN_FIT_RPCS:
        notes.append(f"concurrency fit not quoted: {_rpcs(r.height)}, fewer than {MIN_FIT_RPCS}")
    else:
        text, effect = concurrency_sentence(lat_oc, oc.filter(pl.col("stage") != "latency"), tail_in_flight, first)
        s["concurrency_effect"] = effect
        if text:
            out.append(text)
    if len(tail_in_flight) == 2:
        (wt, wr), (rt, rr) = tail_in_flight["write"], tail_in_flight["read"]
        out.append(f"The {first} start with {wt:.3g} writes and {rt:.3g} reads in flight at their "
                   f"server on other connections, against {wr:.3g} and {rr:.3g} for the rest.")
    # connections
    ct = d.connection_totals
    if ct["setup_rpcs"]:
        setup_rows = d.connections.filter(pl.col("connection_event") != "reuse").sort("rpcs", descending=True)
        example = setup_rows.row(0, named=True) if setup_rows.height else None
        text = (f"Connection management: {_rpcs(ct['setup_rpcs'])} ({_pct(ct['setup_rpcs'] / r.height)}) opened a "
                f"connection ({ct['reconnect_rpcs']:,} after a reconnect)")
        if _finite(ct["added_s"]) and _finite(ct["added_share"]):
            they, add, take = ("it", "adds", "takes") if ct["setup_rpcs"] == 1 else ("they", "add", "take")
            text += (f"; {they} {add} {_us(ct['added_s'] * 1e6)} over reused connections, "
                     f"{_pct(ct['added_share'])} of all RPC time" if ct["added_s"] >= 0 else
                     f"; {they} {take} {_us(-ct['added_s'] * 1e6)} less than the reuse median would")
        if example is not None and _finite(example["added_p50_us"]):
            where = "on a new connection" if example["connection_event"] == "new" else "after a reconnect"
            added = example["added_p50_us"]
            text += (f"; median +{_us(added)} for {example['op']} {where}" if added >= 0 else
                     f"; median {_us(-added)} less for {example['op']} {where}")
        out.append(text + ".")
    # size
    net = d.size_fits.filter(pl.col("stage") == "network")
    s["network_fit"] = {row["op"]: {"alpha_us": row["alpha_us"], "effective_gb_s": row["effective_gb_s"],
                                    "r2": row["r2"], "rpcs": row["rpcs"],
                                    "distinct_values": row["distinct_values"]} for row in net.iter_rows(named=True)}
    size_out, size_notes = _size_findings(d, overall)
    out.extend(size_out)
    notes.extend(size_notes)
    # phase
    texts = []
    for kind, ops in (("pulls", ("pull_sparse", "pull_dense")), ("pushes", ("push_sparse", "push_dense"))):
        sub = r.filter(pl.col("op").cast(pl.String).is_in(list(ops)))
        if sub.height == 0:
            continue
        mean_phase = sub.get_column("iteration_phase").mean()
        q = sub.group_by("iteration_phase_bin").len().sort("len", descending=True).row(0)
        s["phase"][kind] = {"mean_phase": mean_phase, "busiest_quarter": str(q[0]),
                            "busiest_quarter_share": q[1] / sub.height}
        texts.append(f"{kind} are issued at a mean phase of {mean_phase:.2f} ({_pct(q[1] / sub.height)} in the "
                     f"{q[0]} quarter)")
    if texts:
        pq = d.percentiles.filter((pl.col("grouping") == "iteration_phase") & (pl.col("stage") == "latency"))
        p99 = "; ".join(f"{row['group']} {_us(row['p99_us'])} ({_rpcs(row['rpcs'])})"
                        for row in pq.iter_rows(named=True))
        out.append("Iteration phase (0 = step start, 1 = next step): " + "; ".join(texts)
                   + f". p99 latency per quarter of the step: {p99}.")
    return out
