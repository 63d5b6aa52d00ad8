"""The questions a dissection answers, one small analyzer each, each returning a frozen record.

:func:`~ddlscope.rpc.dissect.dissect` parses a log once into tables (the decomposed RPCs, the
percentiles, the fits: :class:`~ddlscope.rpc.dissect.Dissection`); the analyzers here read those
tables and answer one question each, in numbers, never in sentences (the report writes the
sentences: :mod:`ddlscope.report.rpc_findings`, once for the console, the HTML report and the JSON
summary):

======================================  ==============================================================
analyzer -> record                      question
======================================  ==============================================================
:func:`overview` -> :class:`Overview`   how many RPCs, between whom, and how slow (p50/p99/p99.9)?
:func:`stage_shares`                    which stage takes the most of the mean RPC time, overall and
-> :class:`StageShares`                 per op?
:func:`tail_level` -> :class:`TailLevel`  what makes the slowest 1 % (0.1 %) slow: which stage, which
                                        server?
:func:`concurrency_effect`              does each other read/write in flight at the server on another
-> :class:`ConcurrencyEffect`           connection add latency (a measurable slope)?
:func:`connection_setup`                what do connection set-ups and reconnects add?
-> :class:`ConnectionSetup`
:func:`network_fits`                    does the network stage follow alpha + bytes / bandwidth?
-> :class:`NetworkFits`
:func:`iteration_phase`                 when in the step are pulls and pushes issued, and how slow is
-> :class:`IterationPhase`              each quarter of the step?
:func:`input_checks`                    does the input look wrong (time unit, implausible RPCs, one
-> :class:`InputChecks`                 RPC carrying the mean)?
======================================  ==============================================================

Times are microseconds (``_us``) or seconds (``_s``); shares are fractions of 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import polars as pl

from ddlscope.rpc.schema import LATENCY_COLUMN, SUBSTAGES, stages_of
from ddlscope.rpc.tail import tail_label
from ddlscope.rpc.validate import rejected_counts

MIN_FIT_R2 = 0.5
"""Size fits explaining less of the stage's variance than this are not quoted as a bandwidth."""
MIN_FIT_RPCS = 30
"""Fits (message size per op, concurrency) over fewer RPCs than this are not quoted as findings: a
line through a handful of points says nothing about the system (the tables keep them)."""
MIN_FIT_SIZES = 3
"""A message-size fit needs at least this many distinct sizes (two points always fit a line)."""
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
MOST_OF_THE_MEAN = 0.5
"""One RPC whose latency is more than this share of the sum of all latencies "carries most of the
mean": the mean and the stage shares then describe that RPC rather than the log (a warning, from
:data:`MIN_FIT_RPCS` RPCs on: in a handful of RPCs one of them always weighs much)."""
PLAUSIBLE_MEDIAN_LATENCY_US: tuple[float, float] = (1.0, 60e6)
"""Median RPC latencies outside [1 µs, 1 min] suggest timestamps read in the wrong unit. Our
bounds, not from a source: a request and response between two hosts take at least a few µs
(one network hop plus two kernel crossings), and a training step's RPCs do not take minutes."""
FEW_RPCS_FOR_TAILS = 1000
"""Below this many RPCs the slowest 0.1 % is a single RPC or two: its shares are anecdotes."""


def finite(x: float | None) -> bool:
    """Whether ``x`` is a number that is neither None, NaN nor infinite."""
    return x is not None and math.isfinite(x)


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


def overall_percentiles(percentiles: pl.DataFrame) -> pl.DataFrame:
    """The ``all`` grouping of :attr:`Dissection.percentiles <ddlscope.rpc.dissect.Dissection.percentiles>`."""
    return percentiles.filter(pl.col("grouping") == "all")


def largest_share(r: pl.DataFrame, column: str = LATENCY_COLUMN) -> tuple[float | None, str | None]:
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


def is_synthetic(r: pl.DataFrame) -> bool:
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


# -- overview ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Overview:
    """How many RPCs, between whom, and how slow.

    Attributes:
        rpcs, workers, servers, connections: RPCs analysed and distinct workers, servers and
            (worker, server, connection) triples.
        latency_us: ``mean``, ``p50``, ``p90``, ``p99``, ``p99_9`` of the latency (µs).
        max_us: the slowest RPC's latency (µs); 0 when every latency is 0.
        synthetic: the log's ``synthetic`` column is set (:func:`is_synthetic`).
        rejected_rows: input rows not analysed; rejected_by_reason: their count per reason.
        zero_latency_rpcs: RPCs with latency 0 (``client_done_ns = client_issue_ns``).
    """

    rpcs: int
    workers: int
    servers: int
    connections: int
    latency_us: Mapping[str, float]
    max_us: float
    synthetic: bool
    rejected_rows: int
    rejected_by_reason: Mapping[str, int]
    zero_latency_rpcs: int

    @property
    def all_zero(self) -> bool:
        """Every RPC has latency 0: no shares, tails or fits to report."""
        return not self.max_us


def overview(rpcs: pl.DataFrame, percentiles: pl.DataFrame, rejected: pl.DataFrame) -> Overview:
    """:class:`Overview` from the decomposed RPCs, their percentiles and the rejected rows."""
    lat = overall_percentiles(percentiles).filter(pl.col("stage") == "latency").row(0, named=True)
    return Overview(
        rpcs=rpcs.height, workers=rpcs.get_column("worker_id").n_unique(),
        servers=rpcs.get_column("server_id").n_unique(),
        connections=rpcs.select(pl.struct("worker_id", "server_id", "connection_id").n_unique()).item(),
        latency_us=_frozen({k: lat[f"{k}_us"] for k in ("mean", "p50", "p90", "p99", "p99_9")}),
        max_us=lat["max_us"], synthetic=is_synthetic(rpcs), rejected_rows=rejected.height,
        rejected_by_reason=_frozen({row["reason"]: row["rows"]
                                    for row in rejected_counts(rejected).iter_rows(named=True)}),
        zero_latency_rpcs=rpcs.select((pl.col(LATENCY_COLUMN) == 0).sum()).item(),
    )


# -- stage shares -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OpStage:
    """One op's longest stage on average: ``stage`` None when every stage of the op is 0."""

    op: str
    stage: str | None
    share: float | None


@dataclass(frozen=True)
class StageShares:
    """Which stage takes the most of the mean RPC time.

    Attributes:
        stages: the stages analysed (:func:`~ddlscope.rpc.schema.stages_of`).
        stage_parts: the stages split into parts (:data:`~ddlscope.rpc.schema.SUBSTAGES`) -> parts.
        mean_stage_share: mean stage time over the mean latency per stage, longest first (None
            when the mean latency is 0).
        ranked: the stages by mean time, longest first.
        dominant_stage: ``ranked[0]``; None when every latency is 0.
        per_op: each op's longest stage (:class:`OpStage`), in the stage summary's order.
        largest_rpc_share, largest_rpc_at: the one RPC with the most of the dominant stage, as a
            share of that stage's total, and its ``file:line`` (None when the total is 0).
    """

    stages: tuple[str, ...]
    stage_parts: Mapping[str, tuple[str, ...]]
    mean_stage_share: Mapping[str, float | None]
    ranked: tuple[str, ...]
    dominant_stage: str | None
    per_op: tuple[OpStage, ...]
    largest_rpc_share: float | None
    largest_rpc_at: str | None


def stage_shares(rpcs: pl.DataFrame, percentiles: pl.DataFrame, stage_summary: pl.DataFrame,
                 all_zero: bool) -> StageShares:
    """:class:`StageShares` from the ``all`` percentiles and the per-op stage summary."""
    overall = overall_percentiles(percentiles)
    mean_lat = overall.filter(pl.col("stage") == "latency").get_column("mean_us").item()
    means = overall.filter(pl.col("stage") != "latency").select("stage", "mean_us").sort("mean_us", descending=True)
    stages = stages_of(rpcs)
    per_op = []
    for row in stage_summary.iter_rows(named=True):
        if not row["latency_mean_us"]:
            per_op.append(OpStage(str(row["op"]), None, None))
            continue
        best = max(stages, key=lambda st: row[f"{st}_share"] or 0)
        per_op.append(OpStage(str(row["op"]), best, row[f"{best}_share"]))
    top = means.row(0)[0]
    one, at = largest_share(rpcs, f"{top}_ns")
    return StageShares(
        stages=tuple(stages),
        stage_parts=_frozen({st: tuple(p for p, _, _ in parts) for st, parts in SUBSTAGES.items()
                             if all(p in stages for p, _, _ in parts)}),
        mean_stage_share=_frozen({st: (m / mean_lat if mean_lat else None) for st, m in means.iter_rows()}),
        ranked=tuple(means.get_column("stage").to_list()), dominant_stage=None if all_zero else top,
        per_op=tuple(per_op), largest_rpc_share=one, largest_rpc_at=at,
    )


# -- tails ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TailLevel:
    """What makes one tail (the slowest 1 %, 0.1 %) of the whole log slow.

    When the tail is no slower than the rest (mean latency, the sum of the stage means; or there
    is no rest), e.g. every latency tied, which RPCs form the "tail" is an artefact of tie-breaking:
    ``no_tail`` is set and nothing is attributed (the stage and server fields are None).

    Attributes:
        label: :func:`~ddlscope.rpc.tail.tail_label` (``slowest 1%``).
        rpcs: RPCs in the tail; threshold_us: the fastest of them (µs).
        no_tail: the tail is no slower than the rest.
        dominant_stage, dominant_share: the stage most often the longest in the tail, and how often.
        excess_stage, excess_share: the stage carrying the most of the tail's excess latency over
            the rest, and that share (above 1 when other stages are shorter in the tail);
            excess_stage_us: that stage's mean in the tail minus in the rest (µs).
        top_server, top_server_share_of_tail, top_server_share_of_rpcs,
            top_server_over_representation: the server holding the most of the tail.
        median_tied: the threshold is not above the median: RPCs tied at the median fill the tail.
    """

    label: str
    rpcs: int
    threshold_us: float
    no_tail: bool
    dominant_stage: str | None = None
    dominant_share: float | None = None
    excess_stage: str | None = None
    excess_share: float | None = None
    excess_stage_us: float | None = None
    top_server: Any = None
    top_server_share_of_tail: float | None = None
    top_server_share_of_rpcs: float | None = None
    top_server_over_representation: float | None = None
    median_tied: bool = False

    def entry(self) -> dict[str, Any]:
        """The summary entry (``summary["tail"][label]``)."""
        return {"rpcs": self.rpcs, "threshold_us": self.threshold_us, "no_tail": self.no_tail,
                "dominant_stage": self.dominant_stage, "dominant_share": self.dominant_share,
                "excess_stage": self.excess_stage, "excess_share": self.excess_share,
                "top_server": self.top_server, "top_server_share_of_tail": self.top_server_share_of_tail,
                "top_server_share_of_rpcs": self.top_server_share_of_rpcs}


def tail_level(level: float, tail: pl.DataFrame, tail_servers: pl.DataFrame, p50_us: float) -> TailLevel | None:
    """:class:`TailLevel` of ``level`` from :func:`~ddlscope.rpc.tail.tail_attribution` and
    :func:`~ddlscope.rpc.tail.tail_servers` (None when the table has no such tail)."""
    label = tail_label(level)
    t = tail.filter((pl.col("scope") == "all") & (pl.col("tail") == label))
    if t.height == 0:
        return None
    servers = tail_servers.filter(pl.col("tail") == label)
    srv = servers.row(0, named=True) if servers.height else None
    dom = t.sort("dominant_share", descending=True).row(0, named=True)
    tail_mean = t.get_column("mean_tail_us").sum()
    rest_mean = t.get_column("mean_rest_us").sum() if t.get_column("mean_rest_us").null_count() == 0 else None
    if rest_mean is None or tail_mean <= rest_mean + 1e-9 * abs(rest_mean):
        return TailLevel(label=label, rpcs=dom["tail_rpcs"], threshold_us=dom["threshold_us"], no_tail=True)
    known = t.filter(pl.col("excess_share").is_not_nan() & pl.col("excess_share").is_not_null())
    exc = known.sort("excess_share", descending=True).row(0, named=True) if known.height else None
    return TailLevel(
        label=label, rpcs=dom["tail_rpcs"], threshold_us=dom["threshold_us"], no_tail=False,
        dominant_stage=dom["stage"], dominant_share=dom["dominant_share"],
        excess_stage=exc["stage"] if exc else None, excess_share=exc["excess_share"] if exc else None,
        excess_stage_us=exc["mean_tail_us"] - exc["mean_rest_us"] if exc else None,
        top_server=srv["server_id"] if srv else None,
        top_server_share_of_tail=srv["share_of_tail"] if srv else None,
        top_server_share_of_rpcs=srv["share_of_rpcs"] if srv else None,
        top_server_over_representation=srv["over_representation"] if srv else None,
        median_tied=not dom["threshold_us"] > p50_us,
    )


def tail_in_flight(tail_contributors: pl.DataFrame, tail: TailLevel | None) -> Mapping[str, tuple[float, float]]:
    """Mean writes and reads in flight at the server on other connections, in the tail and in the
    rest: ``{"write": (tail, rest), "read": (tail, rest)}`` (a kind left out when unknown; empty
    when the tail is none or no slower than the rest)."""
    out: dict[str, tuple[float, float]] = {}
    if tail is None or tail.no_tail:
        return _frozen(out)
    for kind in ("write", "read"):
        row = tail_contributors.filter(pl.col("metric") == f"server_other_conn in flight: {kind}s")
        if row.height and all(finite(v) for v in (row[tail.label][0], row["rest"][0])):
            out[kind] = (row[tail.label][0], row["rest"][0])
    return _frozen(out)


# -- concurrency -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KindEffect:
    """The latency slope of one kind of RPC in flight (``write`` or ``read``).

    Attributes:
        kind: ``write`` or ``read``.
        us_per: µs of latency per other RPC of that kind in flight; se: its standard error.
        ci95_us: ``us_per ± CI_Z × se`` (None when the error is unknown).
        measurable: R² at least :data:`MIN_CONCURRENCY_R2` and the interval excludes 0.
        stage, stage_us: the stage that moves most in the slope's direction and its slope (µs).
    """

    kind: str
    us_per: float
    se: float | None
    ci95_us: tuple[float, float] | None
    measurable: bool
    stage: str
    stage_us: float | None


@dataclass(frozen=True)
class ConcurrencyEffect:
    """Whether reads and writes in flight at the same server on other connections add latency
    (the ``server_other_conn`` fit of :func:`~ddlscope.rpc.concurrency.concurrency_fit`).

    Attributes:
        r2: the partial R² of the two counts within an op; rpcs: RPCs fitted; min_r2:
            :data:`MIN_CONCURRENCY_R2`.
        kinds: the kinds with a known slope, writes first (:class:`KindEffect`).
        tail: the tail's label the slopes are checked against; tail_in_flight: :func:`tail_in_flight`.
    """

    r2: float | None
    rpcs: int
    min_r2: float
    kinds: tuple[KindEffect, ...]
    tail: str
    tail_in_flight: Mapping[str, tuple[float, float]]

    @property
    def any_measurable(self) -> bool:
        """Some slope is measurable."""
        return any(k.measurable for k in self.kinds)

    def entry(self) -> dict[str, Any]:
        """The summary entry (``summary["concurrency_effect"]``): ``r2``, ``rpcs``, ``min_r2`` and
        per kind ``us_per``, ``ci95_us`` and ``measurable``."""
        out: dict[str, Any] = {"r2": self.r2, "rpcs": self.rpcs, "min_r2": self.min_r2}
        for k in self.kinds:
            out[k.kind] = {"us_per": k.us_per, "ci95_us": list(k.ci95_us) if k.ci95_us else None,
                           "measurable": k.measurable}
        return out


def concurrency_effect(lat: Mapping[str, Any], stages: pl.DataFrame,
                       in_flight: Mapping[str, tuple[float, float]] | None = None,
                       tail: str = "slowest 1%") -> ConcurrencyEffect:
    """:class:`ConcurrencyEffect` from the latency row of the ``server_other_conn`` fit.

    A per-RPC effect is measurable only when the fit explains at least :data:`MIN_CONCURRENCY_R2`
    of the within-op variance and the slope's 95 % interval (:data:`CI_Z`) excludes 0.

    Args:
        lat: the fit's ``latency`` row (``partial_r2``, ``rpcs``, ``us_per_<kind>``,
            ``us_per_<kind>_se``; :func:`~ddlscope.rpc.concurrency.concurrency_fit`).
        stages: the same measure's rows of the stages (``stage``, ``us_per_<kind>``), for the stage
            that moves most.
        in_flight: mean counts in flight in the tail and in the rest, per ``write``/``read``.
        tail: the tail's label.
    """
    r2, n = lat["partial_r2"], lat["rpcs"]
    kinds = []
    for kind in ("write", "read"):
        key = f"us_per_{kind}"
        b = lat[key]
        if not finite(b):
            continue
        se = lat[f"{key}_se"]
        ci = (b - CI_Z * se, b + CI_Z * se) if finite(se) else None
        measurable = bool(finite(r2) and r2 >= MIN_CONCURRENCY_R2 and ci is not None and (ci[0] > 0 or ci[1] < 0))
        st = stages.sort(key, descending=b >= 0, nulls_last=True).row(0, named=True) if stages.height else None
        kinds.append(KindEffect(kind, b, se, ci, measurable, st["stage"] if st else "-", st[key] if st else None))
    return ConcurrencyEffect(r2=r2, rpcs=n, min_r2=MIN_CONCURRENCY_R2, kinds=tuple(kinds), tail=tail,
                             tail_in_flight=_frozen(in_flight or {}))


def concurrency_slopes(concurrency_fit: pl.DataFrame) -> dict[str, dict[str, float]]:
    """Latency slopes per in-flight measure: ``{measure: {us_per_read, us_per_write, partial_r2}}``."""
    fit = concurrency_fit.filter(pl.col("stage") == "latency")
    return {row["measure"]: {"us_per_read": row["us_per_read"], "us_per_write": row["us_per_write"],
                             "partial_r2": row["partial_r2"]} for row in fit.iter_rows(named=True)}


# -- connections --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ConnectionSetup:
    """What connection set-ups (new connections and reconnects) add.

    Attributes:
        rpcs: RPCs analysed; setup_rpcs, reconnect_rpcs: those that opened a connection, and of
            them after a reconnect.
        added_s: latency they add over the reuse median of their op (s; negative: they take less);
            added_share: that over all RPC time.
        example_op, example_event, example_added_p50_us: the (op, event) with the most set-up RPCs,
            and its median latency over reuse (µs); None when there is none.
    """

    rpcs: int
    setup_rpcs: int
    reconnect_rpcs: int
    added_s: float | None
    added_share: float | None
    example_op: str | None
    example_event: str | None
    example_added_p50_us: float | None


def connection_setup(connections: pl.DataFrame, totals: Mapping[str, Any], rpcs: int) -> ConnectionSetup:
    """:class:`ConnectionSetup` from :func:`~ddlscope.rpc.connections.connection_summary`'s table and totals."""
    setup_rows = connections.filter(pl.col("connection_event") != "reuse").sort("rpcs", descending=True)
    ex = setup_rows.row(0, named=True) if setup_rows.height else None
    return ConnectionSetup(
        rpcs=rpcs, setup_rpcs=totals["setup_rpcs"], reconnect_rpcs=totals["reconnect_rpcs"],
        added_s=totals["added_s"], added_share=totals["added_share"],
        example_op=str(ex["op"]) if ex else None, example_event=str(ex["connection_event"]) if ex else None,
        example_added_p50_us=ex["added_p50_us"] if ex else None,
    )


# -- message size -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NetworkFit:
    """One op's fit ``network = alpha + bytes / bandwidth`` (:func:`~ddlscope.rpc.size_phase.size_fits`)."""

    op: str
    alpha_us: float | None
    effective_gb_s: float | None
    r2: float | None
    rpcs: int
    distinct_values: int

    def entry(self) -> dict[str, Any]:
        """The summary entry (``summary["network_fit"][op]``)."""
        return {"alpha_us": self.alpha_us, "effective_gb_s": self.effective_gb_s, "r2": self.r2,
                "rpcs": self.rpcs, "distinct_values": self.distinct_values}


@dataclass(frozen=True)
class NetworkFits:
    """Does the network stage follow the alpha-beta model ``alpha + bytes / bandwidth``?

    Attributes:
        fits: every op's fit (:class:`NetworkFit`).
        too_few: ops whose fit has fewer than :data:`MIN_FIT_RPCS` RPCs or :data:`MIN_FIT_SIZES`
            distinct sizes (not quoted).
        quoted: ops whose fit holds (R² at least :data:`MIN_FIT_R2`, positive bandwidth, alpha >= 0).
        negative_alpha: ops whose good fit has a negative intercept (the model does not hold).
        max_r2: the largest R² of the fits with enough points (None when there is none).
        network_p50_us: the median network stage (µs).
    """

    fits: tuple[NetworkFit, ...]
    too_few: tuple[str, ...]
    quoted: tuple[NetworkFit, ...]
    negative_alpha: tuple[str, ...]
    max_r2: float | None
    network_p50_us: float | None


def network_fits(size_fits: pl.DataFrame, percentiles: pl.DataFrame) -> NetworkFits:
    """:class:`NetworkFits` from :func:`~ddlscope.rpc.size_phase.size_fits` (stage ``network``)."""
    net = size_fits.filter(pl.col("stage") == "network")
    valid = net.filter((pl.col("rpcs") >= MIN_FIT_RPCS) & (pl.col("distinct_values") >= MIN_FIT_SIZES)
                       & pl.col("r2").is_not_null())
    valid_ops = valid.get_column("op").to_list()
    good = valid.filter((pl.col("r2") >= MIN_FIT_R2) & (pl.col("effective_gb_s") > 0) & (pl.col("alpha_us") >= 0))
    negative = valid.filter((pl.col("r2") >= MIN_FIT_R2) & (pl.col("alpha_us") < 0))
    p50 = overall_percentiles(percentiles).filter(pl.col("stage") == "network").get_column("p50_us")

    def fits(frame: pl.DataFrame) -> tuple[NetworkFit, ...]:
        return tuple(NetworkFit(str(r["op"]), r["alpha_us"], r["effective_gb_s"], r["r2"], r["rpcs"],
                                r["distinct_values"]) for r in frame.iter_rows(named=True))

    return NetworkFits(
        fits=fits(net), too_few=tuple(str(o) for o in net.get_column("op").to_list() if o not in valid_ops),
        quoted=fits(good), negative_alpha=tuple(str(o) for o in negative.get_column("op").to_list()),
        max_r2=valid.get_column("r2").max() if valid.height else None,
        network_p50_us=p50.item() if p50.len() else None,
    )


# -- iteration phase ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PhaseOfKind:
    """When pulls (or pushes) are issued in the worker's step (0 = step start, 1 = next step).

    Attributes:
        kind: ``pulls`` or ``pushes``; rpcs: how many.
        mean_phase: their mean phase; busiest_quarter: the quarter holding the most of them
            (``0-25%``), busiest_quarter_share: its share.
    """

    kind: str
    rpcs: int
    mean_phase: float
    busiest_quarter: str
    busiest_quarter_share: float

    def entry(self) -> dict[str, Any]:
        """The summary entry (``summary["phase"][kind]``)."""
        return {"mean_phase": self.mean_phase, "busiest_quarter": self.busiest_quarter,
                "busiest_quarter_share": self.busiest_quarter_share}


@dataclass(frozen=True)
class QuarterLatency:
    """p99 latency of the RPCs issued in one quarter of the step."""

    quarter: str
    p99_us: float
    rpcs: int


@dataclass(frozen=True)
class IterationPhase:
    """When in the step RPCs are issued (:class:`PhaseOfKind` per pulls/pushes present) and how slow
    each quarter of the step is (:class:`QuarterLatency`)."""

    kinds: tuple[PhaseOfKind, ...]
    quarters: tuple[QuarterLatency, ...]


PHASE_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pulls", ("pull_sparse", "pull_dense")), ("pushes", ("push_sparse", "push_dense")))
"""The kinds :func:`iteration_phase` reports and their ops."""


def iteration_phase(rpcs: pl.DataFrame, percentiles: pl.DataFrame) -> IterationPhase:
    """:class:`IterationPhase` from the RPCs' ``iteration_phase`` columns and the percentiles per
    ``iteration_phase`` group."""
    kinds = []
    for kind, ops in PHASE_KINDS:
        sub = rpcs.filter(pl.col("op").cast(pl.String).is_in(list(ops)))
        if sub.height == 0:
            continue
        q = sub.group_by("iteration_phase_bin").len().sort("len", descending=True).row(0)
        kinds.append(PhaseOfKind(kind, sub.height, sub.get_column("iteration_phase").mean(), str(q[0]),
                                 q[1] / sub.height))
    pq = percentiles.filter((pl.col("grouping") == "iteration_phase") & (pl.col("stage") == "latency"))
    return IterationPhase(kinds=tuple(kinds), quarters=tuple(
        QuarterLatency(str(r["group"]), r["p99_us"], r["rpcs"]) for r in pq.iter_rows(named=True)))


# -- input checks ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class InputChecks:
    """What looks wrong with the input.

    Attributes:
        time_unit: the unit the timestamps were read as (None: an in-memory table).
        median_implausible: the median latency lies outside :data:`PLAUSIBLE_MEDIAN_LATENCY_US`
            (check the time unit); p50_us: that median.
        implausible: the RPCs set aside by :func:`~ddlscope.rpc.dissect.split_implausible`
            (``rpcs``, ``bound_us``, ``max_us``, ``first_at``, ``longest_stage``; empty when none).
        largest_rpc_share, largest_rpc_at: the slowest RPC's share of the total latency and its
            ``file:line``; one_rpc_carries_most: that share exceeds :data:`MOST_OF_THE_MEAN` in a
            log of at least :data:`MIN_FIT_RPCS` RPCs.
        rpcs: RPCs analysed.
    """

    time_unit: str | None
    p50_us: float | None
    median_implausible: bool
    implausible: Mapping[str, Any]
    largest_rpc_share: float | None
    largest_rpc_at: str | None
    one_rpc_carries_most: bool
    rpcs: int


def median_implausible(p50_us: float | None) -> bool:
    """Whether a median latency (µs) lies outside :data:`PLAUSIBLE_MEDIAN_LATENCY_US` (False when 0
    or unknown)."""
    low, high = PLAUSIBLE_MEDIAN_LATENCY_US
    return finite(p50_us) and p50_us > 0 and not low <= p50_us <= high


def input_checks(rpcs: pl.DataFrame, p50_us: float | None, time_unit: str | None,
                 implausible: Mapping[str, Any]) -> InputChecks:
    """:class:`InputChecks` of the decomposed RPCs."""
    share, at = largest_share(rpcs)
    return InputChecks(
        time_unit=time_unit, p50_us=p50_us, median_implausible=median_implausible(p50_us),
        implausible=_frozen(implausible), largest_rpc_share=share, largest_rpc_at=at,
        one_rpc_carries_most=share is not None and share > MOST_OF_THE_MEAN and rpcs.height >= MIN_FIT_RPCS,
        rpcs=rpcs.height,
    )


def tail_levels(levels: Sequence[float], tail: pl.DataFrame, tail_servers: pl.DataFrame,
                p50_us: float) -> tuple[TailLevel, ...]:
    """:func:`tail_level` for each of ``levels`` that the table has."""
    return tuple(t for t in (tail_level(lv, tail, tail_servers, p50_us) for lv in levels) if t is not None)
