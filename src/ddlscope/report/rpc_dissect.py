"""Figures and the HTML report of an RPC latency dissection (:class:`ddlscope.rpc.dissect.Dissection`).

The sentences (findings, warnings, notes) come from :mod:`ddlscope.report.rpc_findings`, the same
ones the console and the JSON summary print."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ddlscope.report.figures import COMPONENT_COLORS, FIT, HIGHLIGHT, OBSERVED, OKABE_ITO, new_figure, no_data
from ddlscope.report.html import HtmlReport
from ddlscope.report.rpc_findings import Narration, dissection_summary, headline, narrate
from ddlscope.rpc.dissect import Dissection
from ddlscope.rpc.schema import ALL_STAGES, LATENCY_COLUMN, OPS, stages_of
from ddlscope.rpc.tail import tail_label
from ddlscope.rpc.validate import REJECT_REASONS

STAGE_COLORS: dict[str, str] = {
    "client_queue": OKABE_ITO["reddish_purple"],
    "client_send": "#E5B8D3",
    "network": COMPONENT_COLORS["network"],
    "server_receive": "#9DD0EE",
    "server_thread_wait": "#C8E4F5",
    "server_read": "#9DD0EE",
    "server_queue": OKABE_ITO["orange"],
    "server_decode": "#F3CF7F",
    "server_sync_wait": "#9A6A00",
    "server_processing": OKABE_ITO["blue"],
    "server_send": OKABE_ITO["bluish_green"],
    "client_completion": "#999999",
}
"""One colour per RPC stage, the same in every figure (Okabe-Ito, :data:`ddlscope.report.figures.OKABE_ITO`;
the network the step-time figures' network red, the only red); the parts of a split stage in
shades of its colour (the sync wait the darkest)."""

OP_COLORS: dict[str, str] = {
    "pull_sparse": OKABE_ITO["blue"], "pull_dense": OKABE_ITO["sky_blue"], "push_sparse": OKABE_ITO["orange"],
    "push_dense": "#F3CF7F",
}
"""One colour per op: pulls blue, pushes orange, dense lighter."""

STAGE_LABELS: dict[str, str] = {s: s.replace("_", " ") for s in ALL_STAGES}

MIN_BIN_RPCS = 20
"""Bins with fewer RPCs get no p99 point in the profile figures (a p99 of a handful is noise)."""


def _duration(us: float) -> str:
    """``12.3 µs`` or ``1.57 ms`` (3 significant digits)."""
    return f"{us / 1000:.3g} ms" if us >= 1000 else f"{us:.3g} µs"


def _ops(frame: pl.DataFrame) -> list[str]:
    present = set(frame.get_column("op").cast(pl.String).unique().to_list())
    return [o for o in OPS if o in present]


def stage_breakdown_figure(d: Dissection) -> Figure:
    """Mean time per stage, stacked, per op: all RPCs (left) and the op's slowest 1 % (right)."""
    fig, axes = new_figure(10.0, 3.6, ncols=2)
    ops = _ops(d.rpcs)
    stages = stages_of(d.rpcs)
    tail = d.tail.filter(pl.col("tail") == tail_label(0.99))
    panels = [
        ("all RPCs", {row["op"]: [row[f"{s}_mean_us"] for s in stages]
                      for row in d.stage_summary.iter_rows(named=True)}),
        ("slowest 1% of each op", {
            op: [tail.filter((pl.col("scope") == op) & (pl.col("stage") == s)).get_column("mean_tail_us").sum()
                 for s in stages] for op in ops}),
    ]
    for ax, (title, data) in zip(axes, panels, strict=True):
        y = np.arange(len(ops))
        left = np.zeros(len(ops))
        for i, s in enumerate(stages):
            vals = np.array([data.get(op, [0.0] * len(stages))[i] for op in ops], dtype=float)
            ax.barh(y, vals, left=left, color=STAGE_COLORS[s], label=STAGE_LABELS[s], height=0.6)
            left += vals
        ax.set_yticks(y, ops)
        ax.invert_yaxis()
        ax.set_xlabel("mean time per RPC (µs)")
        ax.set_title(f"Stages, {title}")
        ax.grid(axis="y", visible=False)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=4, frameon=False)
    return fig


def latency_ccdf_figure(d: Dissection) -> Figure:
    """Complementary CDF of latency per op on log-log axes: the tail's shape."""
    fig, ax = new_figure(7.0, 4.0)
    drawn = 0
    for op in _ops(d.rpcs):
        lat = np.sort(d.rpcs.filter(pl.col("op") == op).get_column(LATENCY_COLUMN).to_numpy()) / 1e3
        n = len(lat)
        if n < 2 or lat[-1] <= 0:
            continue
        # points evenly spaced in log(tail probability), down to 1/n; latencies of 0 cannot sit on a log axis
        p = np.unique(np.concatenate([np.logspace(0, -np.log10(n), 300), [1.0 / n]]))[::-1]
        idx = np.clip(np.ceil((1 - p) * n).astype(int), 0, n - 1)
        keep = lat[idx] > 0
        ax.plot(lat[idx][keep], p[keep], color=OP_COLORS.get(op), label=op, lw=1.6)
        drawn += 1
    ax.set_title("Latency distribution per op (complementary CDF)")
    if not drawn:
        no_data(ax, "no op has two RPCs with a latency above 0: no distribution to draw")
        return fig
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("latency (µs, log scale)")
    ax.set_ylabel("fraction of RPCs slower (log scale)")
    for q, lab in ((1e-2, "p99"), (1e-3, "p99.9")):
        ax.axhline(q, color="#999", lw=0.8, ls=":")
        ax.annotate(lab, (0.01, q), xycoords=("axes fraction", "data"), ha="left", va="bottom", fontsize=8,
                    color="#666")
    ax.legend(frameon=False)
    return fig


def tail_stages_figure(d: Dissection) -> Figure:
    """For the slowest 1 % and 0.1 % of all RPCs: how often each stage is the longest, and its share
    of the tail's excess latency."""
    fig, axes = new_figure(10.0, 3.8, ncols=2, sharey=True)
    t = d.tail.filter(pl.col("scope") == "all")
    levels = t.get_column("tail").unique(maintain_order=True).to_list()
    tails = [tl for tl in levels if not _no_tail(d, tl)]
    if not tails:  # every level is no slower than the median (e.g. tied latencies): nothing to attribute
        which = " and ".join(levels).replace("% and slowest ", "% and ") or "the slowest RPCs"
        for ax, title in ((axes[0], "longest stage: share of the tail RPCs"),
                          (axes[1], "share of the tail's excess latency")):
            no_data(ax, f"nothing to show: no tail\n(the {which} are no slower\nthan the median latency)")
            ax.set_title(title)
        return fig
    t = t.filter(pl.col("tail").is_in(tails))
    stages = stages_of(d.rpcs)
    y = np.arange(len(stages))
    h = 0.8 / max(len(tails), 1)
    shades = ["#444444", "#bbbbbb", "#888888"]
    for ax, col, title in ((axes[0], "dominant_share", "longest stage: share of the tail RPCs"),
                           (axes[1], "excess_share", "share of the tail's excess latency")):
        for j, tl in enumerate(tails):
            vals = [t.filter((pl.col("tail") == tl) & (pl.col("stage") == s)).get_column(col).fill_null(0.0).sum()
                    for s in stages]
            ax.barh(y + (j - (len(tails) - 1) / 2) * h, vals, height=h, color=shades[j % 3], label=tl)
        ax.set_title(title)
        ax.set_xlabel("share")
        ax.axvline(0, color="#333", lw=0.8)
        ax.grid(axis="y", visible=False)
    axes[0].set_yticks(y, [STAGE_LABELS[s] for s in stages])
    axes[0].invert_yaxis()
    axes[0].legend(frameon=False, loc="lower right")
    return fig


def _no_tail(d: Dissection, tail: str) -> bool:
    """Whether the tail ``tail`` (a :func:`tail_label`) is no slower than the median."""
    t = d.tail_at(tail)
    return bool(t is not None and t.no_tail)


def tail_servers_figure(d: Dissection, top: int = 16) -> Figure:
    """Share of all RPCs against share of the slowest 1 %, per server (the servers holding most of the tail)."""
    t = d.tail_servers.filter(pl.col("tail") == tail_label(0.99)).head(top)
    fig, ax = new_figure(max(6.0, 0.45 * t.height + 3), 3.6)
    x = np.arange(t.height)
    ax.bar(x - 0.2, t.get_column("share_of_rpcs").to_numpy(), 0.4, color="#bbbbbb", label="share of all RPCs")
    ax.bar(x + 0.2, t.get_column("share_of_tail").to_numpy(), 0.4, color=HIGHLIGHT, label="share of the slowest 1%")
    ax.set_xticks(x, [str(s) for s in t.get_column("server_id").to_list()])
    ax.set_xlabel("server id (most tail RPCs first)")
    ax.set_ylabel("share")
    ax.set_title("Which servers hold the tail")
    fig.legend(loc="outside lower center", ncols=2, frameon=False)  # below the axes: never over a bar
    return fig


def concurrency_figure(d: Dissection, measure: str = "server_other_conn") -> Figure:
    """Latency against reads and against writes in flight (profile and linear fit)."""
    fig, axes = new_figure(10.0, 3.8, ncols=2, sharey=True)
    prof = d.concurrency_profile.filter(pl.col("measure") == measure)
    fit = d.concurrency_fit.filter((pl.col("measure") == measure) & (pl.col("stage") == "latency"))
    where = {"server_other_conn": "at the same server on other connections", "server": "at the same server",
             "connection": "on the same connection", "worker": "from the same worker"}[measure]
    for ax, counted in zip(axes, ("reads", "writes"), strict=True):
        p = prof.filter(pl.col("counted") == counted)
        if p.height == 0:
            continue
        x = (p.get_column("in_flight_lo").to_numpy() + p.get_column("in_flight_hi").to_numpy()) / 2
        enough = p.get_column("rpcs").to_numpy() >= MIN_BIN_RPCS
        if enough.any():
            ax.plot(x[enough], p.get_column("latency_p99_us").to_numpy()[enough], "o-", color=HIGHLIGHT, ms=3,
                    label=f"p99 (bins of >= {MIN_BIN_RPCS} RPCs)")
        ax.plot(x, p.get_column("latency_p50_us"), "o-", color=OBSERVED, ms=5, label="p50")
        ax.plot(x, p.get_column("latency_mean_us"), "x", color="#333", ms=5, label="mean")
        if x.min() == x.max():  # one bin: keep the axis on whole counts around it
            ax.set_xlim(x.min() - 1, x.max() + 1)
        slope = fit.get_column(f"us_per_{counted[:-1]}").to_list()[0] if fit.height else None
        if slope is not None:
            w = p.get_column("rpcs").to_numpy()
            xm = float(np.average(x, weights=w))
            ym = float(np.average(p.get_column("latency_mean_us").to_numpy(), weights=w))
            effect = d.concurrency_effect
            kind = next((k for k in effect.kinds if k.kind == counted[:-1]), None) if effect else None
            r2 = effect.r2 if effect else None
            measurable = kind is not None and kind.measurable
            strength = (f" (R² {100 * r2:.2g}%{'' if measurable else ', no measurable effect'})"
                        if measure == "server_other_conn" and r2 is not None else "")
            ax.plot(x, ym + slope * (x - xm), "--", color=FIT, lw=1,
                    label=f"linear fit: {'+' if slope >= 0 else '-'}{_duration(abs(slope))} per {counted[:-1]}"
                    f"{strength}")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(f"other {counted} in flight {where}")
        ax.set_title(f"Latency vs {counted} in flight")
        ax.legend(frameon=False, fontsize=8)
    axes[0].set_ylabel("latency (µs)")
    return fig


def concurrency_stages_figure(d: Dissection, measure: str = "server") -> Figure:
    """Mean time per stage, stacked, against all RPCs in flight at the same server."""
    p = d.concurrency_profile.filter((pl.col("measure") == measure) & (pl.col("counted") == "total"))
    fig, ax = new_figure(8.0, 4.0)
    labels = [f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in
              zip(p.get_column("in_flight_lo").to_list(), p.get_column("in_flight_hi").to_list(), strict=True)]
    x = np.arange(p.height)
    bottom = np.zeros(p.height)
    for s in stages_of(d.rpcs):
        vals = p.get_column(f"{s}_mean_us").to_numpy()
        ax.bar(x, vals, bottom=bottom, color=STAGE_COLORS[s], label=STAGE_LABELS[s], width=0.8)
        bottom += vals
    step = max(1, len(labels) // 12)
    ax.set_xticks(x[::step], labels[::step])
    ax.set_xlabel("other RPCs (reads + writes) in flight at the same server when the RPC arrives")
    ax.set_ylabel("mean time per RPC (µs)")
    ax.set_title("Where the time goes as server concurrency grows")
    ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="x", visible=False)
    return fig


def connection_figure(d: Dissection) -> Figure:
    """Median and p99 latency per op on reused, new and reconnected connections."""
    c = d.connections
    ops = [o for o in OPS if o in set(c.get_column("op").cast(pl.String).to_list())]
    events = [e for e in ("reuse", "new", "reconnect") if e in set(c.get_column("connection_event")
                                                                 .cast(pl.String).to_list())]
    fig, axes = new_figure(11.0, 3.8, ncols=2, sharey=True)
    colors = {"reuse": "#bbbbbb", "new": OKABE_ITO["orange"], "reconnect": HIGHLIGHT}
    w = 0.8 / max(len(events), 1)
    for ax, col, title in ((axes[0], "latency_p50_us", "median latency"), (axes[1], "latency_p99_us", "p99 latency")):
        for j, e in enumerate(events):
            vals = []
            for op in ops:
                v = c.filter((pl.col("op") == op) & (pl.col("connection_event") == e)).get_column(col).to_list()
                vals.append(v[0] if v and v[0] is not None else np.nan)
            ax.bar(np.arange(len(ops)) + (j - (len(events) - 1) / 2) * w, vals, w, color=colors[e], label=e)
        ax.set_xticks(np.arange(len(ops)), ops)
        ax.set_title(f"{title} by connection event")
        ax.grid(axis="x", visible=False)
    axes[0].set_ylabel("latency (µs)")
    handles, labels = axes[0].get_legend_handles_labels()
    # below the axes: inside, the legend covered the "new" bar of a single op
    fig.legend(handles, labels, loc="outside lower center", ncols=max(len(events), 1), frameon=False,
               title="connection")
    return fig


def size_figure(d: Dissection) -> Figure:
    """Median and p99 latency per message-size bin (bytes moved), per op, log-log."""
    fig, ax = new_figure(7.5, 4.0)
    sp = d.size_profile
    ax.set_title("Latency against message size (bins of powers of two)")
    drawn = sp.filter((pl.col("rpcs") >= MIN_BIN_RPCS) & (pl.col("latency_p50_us") > 0)).height
    if not drawn:
        no_data(ax, f"no message-size bin holds {MIN_BIN_RPCS} RPCs or more with a latency above 0")
        return fig
    for op in _ops(d.rpcs):
        p = sp.filter((pl.col("op") == op) & (pl.col("rpcs") >= MIN_BIN_RPCS) & (pl.col("latency_p50_us") > 0))
        if p.height == 0:
            continue
        x = np.sqrt(np.maximum(p.get_column("size_lo_bytes").to_numpy(), 1)
                    * np.maximum(p.get_column("size_hi_bytes").to_numpy(), 1))
        ax.plot(x, p.get_column("latency_p50_us"), "o-", color=OP_COLORS.get(op), ms=3, label=f"{op} p50")
        ax.plot(x, p.get_column("latency_p99_us"), "o--", color=OP_COLORS.get(op), ms=3, label=f"{op} p99", alpha=0.7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("message bytes, request + response (log scale)")
    ax.set_ylabel("latency (µs, log scale)")
    ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def phase_figure(d: Dissection) -> Figure:
    """When in an iteration each op is issued (share per tenth) and its p99 latency there."""
    fig, axes = new_figure(8.0, 5.2, nrows=2, sharex=True)
    ph = d.phase_profile
    ops = _ops(d.rpcs)
    n = max(len(ops), 1)
    width = 0.1 / n * 0.9
    for j, op in enumerate(ops):
        p = ph.filter(pl.col("op") == op)
        mid = (p.get_column("phase_lo").to_numpy() + p.get_column("phase_hi").to_numpy()) / 2
        axes[0].bar(mid + (j - (n - 1) / 2) * width, p.get_column("share_of_op"), width, color=OP_COLORS.get(op),
                    label=op)
        enough = p.filter(pl.col("rpcs") >= MIN_BIN_RPCS)
        emid = (enough.get_column("phase_lo").to_numpy() + enough.get_column("phase_hi").to_numpy()) / 2
        axes[1].plot(emid, enough.get_column("latency_p99_us"), "o-", color=OP_COLORS.get(op), ms=3, label=op)
    axes[0].set_ylabel("share of the op's RPCs")
    axes[0].set_title("When RPCs are issued within their worker's iteration")
    axes[0].legend(frameon=False, ncols=4, fontsize=8)
    if not ph.filter(pl.col("rpcs") >= MIN_BIN_RPCS).height:
        axes[1].text(0.5, 0.5, f"no tenth of an iteration holds {MIN_BIN_RPCS} or more RPCs of one op: no p99",
                     transform=axes[1].transAxes, ha="center", va="center", color="#555")
        axes[1].set_yticks([])
    axes[1].set_ylabel(f"p99 latency (µs)\n(bins of >= {MIN_BIN_RPCS} RPCs)")
    axes[1].set_xlabel("iteration phase at issue (0 = the iteration's first RPC, 1 = the next iteration's first RPC)")
    axes[1].set_xlim(0, 1)
    return fig


def threads_figure(d: Dissection) -> Figure | None:
    """p99 server queue against connections served, per server thread (None without thread ids)."""
    t = d.connections_per_thread
    if t is None or t.height == 0 or t.get_column("connections").n_unique() < 2:
        return None
    fig, ax = new_figure(6.5, 4.0)
    sc = ax.scatter(t.get_column("connections"), t.get_column("server_queue_p99_us"), c=t.get_column("server_id"),
                    cmap="tab10", s=22)
    ax.set_xlabel("connections served by the thread")
    ax.set_ylabel("p99 server queue (µs)")
    ax.set_title("Server queueing against connections per thread")
    if t.get_column("server_id").n_unique() <= 10:
        ax.legend(*sc.legend_elements(), title="server", frameon=False, fontsize=8)
    return fig


def dissection_report(d: Dissection, title: str = "RPC latency dissection",
                      narration: Narration | None = None) -> HtmlReport:
    """The HTML report of a dissection: findings, figures and every table.

    Args:
        narration: the sentences (default :func:`~ddlscope.report.rpc_findings.narrate` of ``d``).

    Returns:
        An :class:`~ddlscope.report.html.HtmlReport`; call ``.write(out_dir)``.
    """
    told = narration or narrate(d)
    s = dissection_summary(d, told)
    rep = HtmlReport(title, subtitle=f"{', '.join(d.files)}: {s['rpcs']:,} RPCs analysed, "
                     f"{s['rejected_rows']:,} rows rejected")
    lat = s["latency_us"]
    rep.add_heading("Headline")
    lines = headline(d)
    rep.add_headline([t for t, _ in lines], [study for _, study in lines])
    rep.add_heading("Findings")
    rep.add_text("\n\n".join(told.findings))
    rep.add_key_values({
        "RPCs": s["rpcs"], "workers": s["workers"], "servers": s["servers"], "connections": s["connections"],
        "latency p50 (µs)": lat["p50"], "latency p99 (µs)": lat["p99"], "latency p99.9 (µs)": lat["p99_9"],
        "dominant stage (mean)": s["dominant_stage"], "rows rejected": s["rejected_rows"],
    }, "Headline numbers", collapsed=True)
    if s.get("synthetic"):
        rep.add_note("This log is SYNTHETIC (its 'synthetic' column is set): generated by "
                     "ddlscope.rpc.synthetic for tests and demos, not measured.")
    for warning in told.warnings:
        rep.add_note(f"Warning: {warning}.")
    if told.notes:
        rep.add_note("Inferred by the reader or the analyzers: " + " | ".join(told.notes))
    draw = s["dominant_stage"] is not None  # None: every latency is 0, nothing to plot

    def figure(name: str, make, caption: str) -> None:
        if draw:
            rep.add_figure(name, make(d), caption)

    if not draw:
        rep.add_note("Every RPC has latency 0 (client_done_ns = client_issue_ns): no figures are drawn; the tables "
                     "below list what was read.")
    rep.add_note("Stages are single-clock differences (client or server), the network stage the client's "
                 "round trip minus the server's residence, so clock offsets between hosts cancel. The stage "
                 "list and the contributors reconstruct the IMC 2020 study's analysis; its exact definitions "
                 "are not available to us. Fits are ordinary least squares; see docs/rpc.md.")

    rep.add_heading("Where an RPC's time goes")
    figure("stage_breakdown", stage_breakdown_figure, "Mean time per stage, per op: all RPCs and the "
                   "slowest 1% of each op.")
    figure("latency_ccdf", latency_ccdf_figure, "Latency complementary CDF per op (log-log).")
    rep.add_table("stage_percentiles", d.percentiles,
                  "Percentiles of every stage and of the whole latency (µs) per grouping: all, op, server, connection "
                  "and iteration phase", max_rows=45)
    rep.add_table("stage_summary", d.stage_summary, "Mean stage time and share of the mean latency, per op")

    rep.add_heading("Tail attribution")
    figure("tail_stages", tail_stages_figure, "Slowest 1% and 0.1% of all RPCs: how often each stage is "
                   "the longest, and its share of the tail's excess latency over the rest.")
    rep.add_table("tail_attribution", d.tail, "Per scope (all, each op), tail and stage", max_rows=32)
    if _no_tail(d, tail_label(0.99)):
        rep.add_text("No tail: the slowest 1% are no slower than the median latency, so no server is singled "
                     "out (no figure of the servers holding the tail).")
    else:
        figure("tail_servers", tail_servers_figure, "Share of all RPCs and of the slowest 1% per server.")
    rep.add_table("tail_servers", d.tail_servers, "Servers in the tail", max_rows=20)
    rep.add_table("tail_contributors", d.tail_contributors, "Mean contributors in the tail against the rest")

    rep.add_heading("Concurrency")
    figure("concurrency", concurrency_figure, "Latency against other reads (left) and writes (right) in "
                   "flight at the same server on other connections when the RPC arrives, with the linear fit "
                   "(through the weighted mean).")
    figure("concurrency_stages", concurrency_stages_figure, "Mean stage times per bin of RPCs in flight "
                   "at the same server.")
    rep.add_table("concurrency_fit", d.concurrency_fit, "stage = a_op + b_read * reads + b_write * writes per "
                  "in-flight measure (µs per RPC in flight)", max_rows=36)
    rep.add_table("concurrency_profile", d.concurrency_profile, "Latency and stages per bin of in-flight RPCs",
                  max_rows=24)

    rep.add_heading("Connection management")
    figure("connection_events", connection_figure, "Latency per op on reused, new and reconnected "
                   "connections.")
    ct = d.connection_totals
    rep.add_key_values({"RPCs that opened a connection": ct["setup_rpcs"], "of which reconnects": ct["reconnect_rpcs"],
                        "latency added over reuse (s)": ct["added_s"], "share of all RPC time": ct["added_share"],
                        "connection set-up inside client queues (s)": ct["connect_s"]}, "What set-ups add")
    rep.add_table("connections", d.connections, "Latency by op and connection event")
    rep.add_table("connections_per_server", d.connections_per_server, "Connections per server (and per thread)")
    if d.connections_per_thread is not None:
        tf = threads_figure(d) if draw else None
        if tf is not None:
            rep.add_figure("threads", tf, "p99 server queue against connections per server thread.")
        elif draw:
            n = d.connections_per_thread.get_column("connections").unique().to_list()
            rep.add_text(f"Every server thread serves {n[0]} connection(s): no figure of queueing against "
                         "connections per thread (the table lists each thread).")
        rep.add_table("connections_per_thread", d.connections_per_thread, "Connections per server thread")

    rep.add_heading("Message size")
    figure("message_size", size_figure, "Latency per message-size bin, per op.")
    rep.add_table("size_fits", d.size_fits, "Per op: stage = alpha + slope * regressor (alpha-beta model)",
                  max_rows=24)
    rep.add_table("size_profile", d.size_profile, "Latency and stages per op and size bin", max_rows=30)

    rep.add_heading("Iteration phase")
    figure("iteration_phase", phase_figure, "Share of each op's RPCs and p99 latency per tenth of the "
                   "worker's iteration.")
    rep.add_table("phase_profile", d.phase_profile, "Per op and tenth of the iteration", max_rows=40)

    rep.add_heading("Rejected rows")
    counts = d.rejected_counts()
    if counts.height:
        rep.add_table("rejected_counts", counts, "Rows not analysed, per reason (first occurrence as file:line)")
        rep.add_table("rejected_rows", d.rejected, "Every rejected row", max_rows=20)
    else:
        rep.add_text("No row was rejected. Checks: " + "; ".join(REJECT_REASONS) + ".")
    rep.set_summary(s)
    return rep


def write_dissection_report(d: Dissection, out_dir: str | Path, narration: Narration | None = None) -> Path:
    """Write the report folder (``index.html``, ``figures/``, ``tables/``, ``summary.json``); returns index.html."""
    return dissection_report(d, narration=narration).write(out_dir)
