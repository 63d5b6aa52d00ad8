"""The sentences of an RPC dissection: findings, warnings and notes, written once from its records.

:func:`~ddlscope.rpc.dissect.dissect` answers its questions in numbers (frozen records of
:mod:`ddlscope.rpc.analyzers`); this module words them. :func:`narrate` gives the three lists, and
:func:`dissection_summary` the JSON summary (the numbers plus the sentences). The console
(``ddlscope rpc dissect``), the HTML report (:mod:`ddlscope.report.rpc_dissect`) and the JSON
output (``--format json`` and ``summary.json``) all take them from here.

Degenerate logs read plainly: with every latency 0 the findings say so instead of quoting shares;
fits over fewer than :data:`~ddlscope.rpc.analyzers.MIN_FIT_RPCS` RPCs are not quoted; a negative
slope reads "is associated with ... less"; an excess share above 100 % is explained.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ddlscope.rpc.analyzers import (
    FEW_RPCS_FOR_TAILS,
    MIN_FIT_RPCS,
    MIN_FIT_SIZES,
    MOST_OF_THE_MEAN,
    PLAUSIBLE_MEDIAN_LATENCY_US,
    ConcurrencyEffect,
    ConnectionSetup,
    InputChecks,
    IterationPhase,
    KindEffect,
    NetworkFits,
    Overview,
    StageShares,
    TailLevel,
    finite,
)
from ddlscope.rpc.dissect import Dissection
from ddlscope.rpc.streaming import StreamedDissection
from ddlscope.rpc.units import human_us

_us = human_us


def _pct(x: float | None) -> str:
    return f"{100 * x:.3g}%" if finite(x) else "-"


def _rpcs(n: int) -> str:
    return f"{n:,} RPC" + ("" if n == 1 else "s")


@dataclass(frozen=True)
class Narration:
    """The sentences of one dissection.

    Attributes:
        findings: headline findings, one sentence each, in order: the overview, the dominant
            stage, each tail level, concurrency, connection management, message size, iteration
            phase, the rejected rows.
        warnings: what looks wrong with the input (an implausible median latency: check the time
            unit; RPCs set aside as implausible; one RPC carrying most of the mean).
        notes: the dissection's notes (reader, inferred columns) and what was not quoted and why.
    """

    findings: tuple[str, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...]


def narrate(d: Dissection) -> Narration:
    """The findings, warnings and notes of ``d`` (see :class:`Narration`)."""
    ov = d.overview
    out = [overview_sentence(ov)]
    notes: list[str] = []
    if ov.zero_latency_rpcs and not ov.all_zero:
        notes.append(f"{_rpcs(ov.zero_latency_rpcs)} ({_pct(ov.zero_latency_rpcs / ov.rpcs)}) have latency 0 "
                     "(client_done_ns = client_issue_ns): the timestamps are coarser than these RPCs or were not set")
    if not ov.all_zero:
        out.append(stage_sentence(d.stage_shares, ov.rpcs))
        out.extend(tail_sentence(t, ov.servers, ov.latency_us["p50"]) for t in d.tail_levels)
        if ov.rpcs < FEW_RPCS_FOR_TAILS:
            notes.append(f"{_rpcs(ov.rpcs)}: the slowest 0.1% is {_rpcs(math.ceil(round(ov.rpcs * 0.001, 6)))}; "
                         "tail shares of so few RPCs are anecdotes")
        if d.concurrency_effect is None:
            notes.append(f"concurrency fit not quoted: {_rpcs(ov.rpcs)}, fewer than {MIN_FIT_RPCS}")
        else:
            text = concurrency_sentence(d.concurrency_effect)
            if text:
                out.append(text)
        if len(d.tail_in_flight) == 2:
            (wt, wr), (rt, rr) = d.tail_in_flight["write"], d.tail_in_flight["read"]
            out.append(f"The {d.tail_levels[0].label} start with {wt:.3g} writes and {rt:.3g} reads in flight at "
                       f"their server on other connections, against {wr:.3g} and {rr:.3g} for the rest.")
        text = connection_sentence(d.connection_setup)
        if text:
            out.append(text)
        size_out, size_notes = size_sentences(d.network)
        out.extend(size_out)
        notes.extend(size_notes)
        text = phase_sentence(d.phase)
        if text:
            out.append(text)
    out = gloss_first_mention(out)
    if ov.rejected_rows:
        out.append(f"{ov.rejected_rows:,} input row(s) rejected and not analysed: "
                   + ", ".join(f"{k} {v:,}" for k, v in ov.rejected_by_reason.items()) + ".")
    all_notes = list(d.notes)
    all_notes.extend(n for n in notes if n not in all_notes)
    return Narration(findings=tuple(out), warnings=tuple(warnings(d.checks)), notes=tuple(all_notes))


def dissection_summary(d: Dissection, narration: Narration | None = None) -> dict[str, Any]:
    """The JSON summary (``--format json``, ``summary.json``): :attr:`Dissection.summary
    <ddlscope.rpc.dissect.Dissection.summary>` plus ``warnings``, ``notes`` and ``findings``."""
    n = narration or narrate(d)
    return {**d.summary, "warnings": list(n.warnings), "notes": list(n.notes), "findings": list(n.findings)}


IMC_STUDY = ("the IMC 2020 study: concurrent reads and writes on other connections and connection management "
             "are the main contributors")
"""What the study the dissection reconstructs found, quoted beside our dominant stage."""


def headline(d: Dissection) -> list[tuple[str, str | None]]:
    """The report's headline: ``(sentence, the study's figure or None)`` pairs -- the latency
    percentiles and the stage that takes longest on average, with the IMC 2020 finding beside it
    (durations as in the findings: :func:`~ddlscope.rpc.units.human_us`)."""
    ov, sh = d.overview, d.stage_shares
    lat = ov.latency_us
    first = (("SYNTHETIC log (generated, not measured). " if ov.synthetic else "")
             + f"Latency of {ov.rpcs:,} RPCs between {ov.workers} worker(s) and {ov.servers} server(s): ")
    if ov.all_zero:
        return [(first + "every RPC has latency 0 (the timestamps do not resolve them): no stage dominates.", None)]
    top = sh.dominant_stage
    return [(first + f"p50 {_us(lat['p50'])}, p99 {_us(lat['p99'])}, p99.9 {_us(lat['p99_9'])}.", None),
            (f"The stage that takes longest on average: {top.replace('_', ' ')} "
             f"({_pct(sh.mean_stage_share[top])} of the mean RPC time).", IMC_STUDY)]


def streamed_headline(d: StreamedDissection) -> str:
    """The one finding of a streamed dissection (:func:`~ddlscope.rpc.streaming.dissect_streaming`):
    counts, the exact latency percentiles (µs, 4 significant digits) and the dominant stage."""
    s = d.summary
    lat = s["latency_us"]
    return (f"{d.rpcs:,} RPCs from {d.workers} worker(s) to {d.servers} server(s) over {d.connections} "
            f"connection(s): latency p50 {lat['p50']:.4g} µs, p99 {lat['p99']:.4g} µs, p99.9 "
            f"{lat['p99_9']:.4g} µs (exact); dominant stage {s['dominant_stage']}.")


# -- one sentence per record -------------------------------------------------------------------------

def overview_sentence(ov: Overview) -> str:
    """Finding 1: how many RPCs between whom, and the latency percentiles (or that every latency is 0)."""
    lat = ov.latency_us
    head = (("SYNTHETIC log (generated, not measured): " if ov.synthetic else "")
            + f"{_rpcs(ov.rpcs)} from {ov.workers} worker(s) to {ov.servers} server(s) over "
            f"{ov.connections} connection(s): ")
    if ov.all_zero:
        return head + ("every RPC has latency 0 (client_done_ns = client_issue_ns), so the timestamps do not "
                       "resolve the RPCs and there are no stage shares, tails or fits to report; check the log's "
                       "timestamps and --time-unit.")
    if lat["p50"]:
        return head + (f"latency p50 {_us(lat['p50'])}, p99 {_us(lat['p99'])} "
                       f"({lat['p99'] / lat['p50']:.3g}x p50), p99.9 {_us(lat['p99_9'])}.")
    return head + (f"latency p50 0 µs (at least half the RPCs have latency 0), p99 {_us(lat['p99'])}, "
                   f"p99.9 {_us(lat['p99_9'])}.")


def stage_sentence(sh: StageShares, rpcs: int) -> str:
    """Finding 2: the dominant and second stage, and the largest stage per op."""
    top, second = sh.ranked[0], sh.ranked[1]
    per_op = [f"{o.op} all stages 0" if o.stage is None else f"{o.op} {o.stage} {_pct(o.share)}" for o in sh.per_op]
    one = sh.largest_rpc_share
    alone = (f" (one RPC, at {sh.largest_rpc_at}, carries {_pct(one)} of it)"
             if one is not None and one > MOST_OF_THE_MEAN and rpcs >= MIN_FIT_RPCS else "")
    return (f"Dominant stage: {top} takes {_pct(sh.mean_stage_share[top])} of the mean RPC time{alone}; "
            f"second {second} ({_pct(sh.mean_stage_share[second])}). Largest stage per op: "
            + "; ".join(per_op) + ".")


def tail_sentence(t: TailLevel, servers: int, p50_us: float) -> str:
    """The finding on one tail level: its dominant stage and excess, the median tie, the server
    over-represented in it (from 1.5x its share of all RPCs, when there are several servers)."""
    head = f"{t.label.capitalize()} ({_rpcs(t.rpcs)}, >= {_us(t.threshold_us)}): "
    if t.no_tail:
        return (head + f"no tail: the {t.label} are no slower than the median ({_us(p50_us)}), so no stage or "
                "server is singled out.")
    text = head + f"{t.dominant_stage} is the longest stage in {_pct(t.dominant_share)} of them"
    if t.excess_stage is not None:
        share = t.excess_share
        if share > 1:
            # the other stages together are shorter in the tail than in the rest
            text += (f"; {t.excess_stage} is {_us(t.excess_stage_us)} longer in them than in the rest, more than "
                     f"their whole excess latency ({_us(t.excess_stage_us / share)}), because other stages are "
                     "shorter in the tail")
        elif t.excess_stage == t.dominant_stage:
            text += f" and carries {_pct(share)} of their excess latency over the rest"
        else:
            text += f"; {t.excess_stage} carries the most excess latency ({_pct(share)})"
    if t.median_tied:
        text += (f"; its threshold is the median: RPCs tied at {_us(p50_us)} fill the tail, picked by "
                 "tie-breaking")
    if t.top_server is not None and finite(t.top_server_over_representation) \
            and t.top_server_over_representation >= 1.5 and servers > 1:
        text += (f"; server {t.top_server} holds {_pct(t.top_server_share_of_tail)} of them with "
                 f"{_pct(t.top_server_share_of_rpcs)} of all RPCs")
    return text + "."


def slope_text(k: KindEffect, first: bool) -> str:
    """``each other write ... adds 98.5 µs ...`` or, for a negative slope, ``... is associated
    with 186 µs less latency``, with the stage that moves most in the same direction; the 95 %
    interval follows the value."""
    where = "in flight at the same server on another connection " if first else ""
    ci = k.ci95_us
    interval = f" (95% interval {_us(ci[0])} to {_us(ci[1])})" if ci else ""
    if k.us_per >= 0:
        adds = f"adds {_us(k.us_per)}{interval} to an RPC's latency" if first else f"{_us(k.us_per)}{interval}"
        return f"each other {k.kind} {where}{adds} (most in {k.stage}, {_us(k.stage_us)})"
    return (f"each other {k.kind} {where}is associated with {_us(-k.us_per)}{interval} less latency (most in "
            f"{k.stage}; a correlation, not a saving)")


def concurrency_sentence(e: ConcurrencyEffect) -> str | None:
    """The concurrency finding (None when no slope is known): the fit's strength (R², n) always;
    a per-RPC effect only where measurable, else "no measurable effect"; a positive effect while
    the tail has *fewer* of those RPCs in flight than the rest is said to not explain the tail."""
    if not e.kinds:
        return None
    strength = f"R² {_pct(e.r2)} of the latency variance within an op, n = {_rpcs(e.rpcs)}"
    where = "in flight at the same server on other connections"
    if not e.any_measurable:
        why = (f"R² below {_pct(e.min_r2)}" if not (finite(e.r2) and e.r2 >= e.min_r2)
               else "every slope's 95% interval includes 0")
        return (f"Concurrency: no measurable effect of the reads and writes {where} on an RPC's latency: the two "
                f"counts explain {_pct(e.r2)} of the latency variance within an op ({why}; linear fit, op as fixed "
                f"effect, n = {_rpcs(e.rpcs)}).")
    parts: list[str] = []
    for k in e.kinds:
        if not k.measurable:
            parts.append(f"no measurable effect of each other {k.kind} ({_us(k.us_per)} per {k.kind}, 95% interval "
                         f"{_us(k.ci95_us[0])} to {_us(k.ci95_us[1])})" if k.ci95_us else
                         f"no measurable effect of each other {k.kind}")
            continue
        text = slope_text(k, not parts)
        fl = e.tail_in_flight.get(k.kind)
        if k.us_per > 0 and fl is not None and fl[0] < fl[1]:
            text += (f", but the {e.tail} have fewer {k.kind}s in flight ({fl[0]:.3g}) than the rest ({fl[1]:.3g}), "
                     f"so {k.kind}s in flight do not explain the tail")
        parts.append(text)
    return f"Concurrency ({strength}; linear fit, op as fixed effect): " + "; ".join(parts) + "."


def connection_sentence(c: ConnectionSetup) -> str | None:
    """The connection-management finding (None when no RPC opened a connection)."""
    if not c.setup_rpcs:
        return None
    text = (f"Connection management: {_rpcs(c.setup_rpcs)} ({_pct(c.setup_rpcs / c.rpcs)}) opened a "
            f"connection ({c.reconnect_rpcs:,} after a reconnect)")
    if finite(c.added_s) and finite(c.added_share):
        they, add, take = ("it", "adds", "takes") if c.setup_rpcs == 1 else ("they", "add", "take")
        text += (f"; {they} {add} {_us(c.added_s * 1e6)} over reused connections, "
                 f"{_pct(c.added_share)} of all RPC time" if c.added_s >= 0 else
                 f"; {they} {take} {_us(-c.added_s * 1e6)} less than the reuse median would")
    if c.example_op is not None and finite(c.example_added_p50_us):
        where = "on a new connection" if c.example_event == "new" else "after a reconnect"
        added = c.example_added_p50_us
        text += (f"; median +{_us(added)} for {c.example_op} {where}" if added >= 0 else
                 f"; median {_us(-added)} less for {c.example_op} {where}")
    return text + "."


def size_sentences(n: NetworkFits) -> tuple[list[str], list[str]]:
    """(findings, notes) on the alpha-beta fits of the network stage."""
    notes = []
    if n.too_few:
        notes.append(f"message-size fits not quoted for {', '.join(n.too_few)}: fewer than {MIN_FIT_RPCS} RPCs or "
                     f"{MIN_FIT_SIZES} distinct message sizes (see tables/size_fits.csv)")
    if n.max_r2 is None:
        return [], notes
    out = []
    if n.quoted:
        out.append("Message size, network stage fit (alpha-beta): " + "; ".join(
            f"{f.op} {_us(f.alpha_us)} + bytes / {f.effective_gb_s:.3g} GB/s (R² {f.r2:.2f})" for f in n.quoted) + ".")
    elif not n.negative_alpha:
        out.append(f"Message size explains little of the network stage (R² {n.max_r2:.2f} at most per op; median "
                   f"network stage {_us(n.network_p50_us)}): its cost is per-message latency, not bandwidth.")
    if n.negative_alpha:
        notes.append("network stage against message bytes: the straight-line fit of " + ", ".join(n.negative_alpha)
                     + " has a negative intercept, so the alpha-beta model does not hold over these sizes (see "
                     "tables/size_profile.csv)")
    return out, notes


def phase_sentence(p: IterationPhase) -> str | None:
    """The iteration-phase finding (None when the log has no pull or push)."""
    if not p.kinds:
        return None
    texts = [f"{k.kind} are issued at a mean phase of {k.mean_phase:.2f} ({_pct(k.busiest_quarter_share)} in the "
             f"{k.busiest_quarter} quarter)" for k in p.kinds]
    p99 = "; ".join(f"{q.quarter} {_us(q.p99_us)} ({_rpcs(q.rpcs)})" for q in p.quarters)
    return ("Iteration phase (0 = step start, 1 = next step): " + "; ".join(texts)
            + f". p99 latency per quarter of the step: {p99}.")


def time_unit_warning(p50_us: float | None, time_unit: str | None) -> str:
    """The warning on a median latency outside the plausible range: check ``--time-unit``."""
    low, high = PLAUSIBLE_MEDIAN_LATENCY_US
    read_as = f" (the timestamps were read as {time_unit})" if time_unit else ""
    return (f"the median RPC latency is {_us(p50_us)}, implausible for an RPC (expected {_us(low)} to {_us(high)}): "
            f"check --time-unit{read_as}")


def warnings(c: InputChecks) -> list[str]:
    """The warnings of :class:`~ddlscope.rpc.analyzers.InputChecks`, in order: time unit, RPCs set
    aside, one RPC carrying most of the total latency."""
    out = []
    if c.median_implausible:
        out.append(time_unit_warning(c.p50_us, c.time_unit))
    info = c.implausible
    if info:
        n = info["rpcs"]
        which = "its" if n == 1 else "the slowest's"
        out.append(f"{_rpcs(n)} with a latency above {_us(info['bound_us'])} ({'' if n == 1 else 'up to '}"
                   f"{_us(info['max_us'])}, at {info['first_at']}; {which} longest stage {info['longest_stage']}) "
                   f"{'is' if n == 1 else 'are'} implausible for an RPC and left out of every share, percentile and "
                   f"fit (rejected as implausible_latency; {_rpcs(c.rpcs)} analysed)")
    if c.one_rpc_carries_most:
        out.append(f"one RPC (at {c.largest_rpc_at}) carries {_pct(c.largest_rpc_share)} of the total latency of the "
                   f"{_rpcs(c.rpcs)}: the mean and the stage shares describe that RPC more than the log; read the "
                   "percentiles")
    return out


STAGE_GLOSS: dict[str, str] = {
    "server_sync_wait": "the wait at the server for the sync barrier, i.e. the other workers' pushes of the previous "
    "iteration, and for table locks",
    "server_thread_wait": "waiting for a free server thread",
}
"""What the finer server stages of :data:`~ddlscope.rpc.schema.SUBSTAGES` mean, said at their first
mention in the findings."""


def gloss_first_mention(lines: list[str]) -> list[str]:
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
