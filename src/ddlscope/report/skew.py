"""Figures and report folders for parameter-update skew and the switch-offload what-if.

Figures (all in the shared style of :mod:`ddlscope.report.figures`):

* :func:`rank_frequency_figure` — rank-frequency on log-log axes with the Zipf MLE, beside the
  complementary CDF of per-key frequency with the CSN power-law tail and the log-normal rival;
* :func:`coverage_figure` — share of events a set of ``k`` keys handles: the top-``k`` keys
  (static, chosen in hindsight) and an LRU cache of ``k`` keys (from the reuse distances);
* :func:`churn_figure` — per window: the hot set's churn and how much of the window the previous
  window's hot set covers;
* :func:`offload_figure` — per policy against the switch memory budget: pushes aggregated /
  pulls served, server updates saved, server bytes saved (and the latency speedup with a log).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator
from scipy import special

from ddlscope.report.figures import FIT, HIGHLIGHT, OBSERVED, OKABE_ITO, SECOND, THIRD, new_figure, no_data
from ddlscope.report.html import HtmlReport
from ddlscope.skew.fit import zipf_rank_probabilities
from ddlscope.skew.frequency import SkewAnalysis
from ddlscope.skew.offload import OffloadResult

POLICY_COLORS: dict[str, str] = {
    "static": OKABE_ITO["blue"],
    "lfu": OKABE_ITO["bluish_green"],
    "space_saving": OKABE_ITO["orange"],
    "oracle": "#7f7f7f",
}
"""One colour per hot-set policy."""

POLICY_STYLES: dict[str, dict[str, object]] = {
    "static": {"marker": "o", "ls": "-", "lw": 1.6},
    "lfu": {"marker": "s", "ls": "-", "lw": 3.2, "alpha": 0.55},
    "space_saving": {"marker": "^", "ls": "--", "lw": 1.4},
    "oracle": {"marker": "d", "ls": ":", "lw": 1.6},
}
"""Line style per policy, so that policies with identical curves stay visible."""

POLICY_LABELS: dict[str, str] = {
    "static": "static top-k (warm-up)",
    "lfu": "LFU (refreshed)",
    "space_saving": "Space-Saving",
    "oracle": "oracle static (hindsight)",
}


def _log_points(n: int, max_points: int = 400) -> np.ndarray:
    """Indices ``0..n-1`` thinned to about ``max_points`` evenly spaced on a log axis."""
    if n <= max_points:
        return np.arange(n)
    return np.unique(np.round(np.geomspace(1, n, max_points)).astype(np.int64) - 1)


def format_bytes(value: float, _pos: object = None) -> str:
    """``65536`` -> ``64 KiB`` (binary prefixes)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            v = value / scale
            return f"{v:.0f} {unit}" if abs(v - round(v)) < 1e-9 else f"{v:.3g} {unit}"
    return f"{value:.0f} B"


def rank_frequency_figure(a: SkewAnalysis) -> Figure:
    """Left: frequency vs rank (log-log) with ``M · P(r)`` of the Zipf fit. Right: the fraction of
    keys with frequency >= f (log-log) with the power law above ``xmin`` and the log-normal."""
    fig, (ax, bx) = new_figure(10.5, 4.2, ncols=2)
    counts = a.ranks["count"].to_numpy()
    ranks = a.ranks["rank"].to_numpy()
    idx = _log_points(counts.size)
    ax.plot(ranks[idx], counts[idx], "o", ms=3, color=OBSERVED, alpha=0.7, label="observed")
    p = zipf_rank_probabilities(a.zipf.s, a.zipf.support)
    fit_idx = _log_points(p.size)
    ax.plot(fit_idx + 1, a.num_events * p[fit_idx], "-", color=FIT, lw=1.6,
            label=f"Zipf MLE: s = {a.zipf.s:.3f} ± {a.zipf.s_stderr:.2g}\n(KS distance {a.zipf.ks_distance:.3f})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("rank r (1 = most frequent key)")
    ax.set_ylabel(f"frequency f(r) ({a.events_kind}, events)")
    ax.set_title("Rank-frequency")
    ax.legend(loc="lower left")

    values, mult = np.unique(counts, return_counts=True)
    ccdf = np.cumsum(mult[::-1])[::-1] / counts.size  # P(F >= f)
    bx.plot(values, ccdf, "o", ms=3, color=OBSERVED, alpha=0.7, label="observed")
    if a.power_law is not None:
        pl_fit = a.power_law
        xs = np.unique(np.round(np.geomspace(pl_fit.xmin, max(values[-1], pl_fit.xmin + 1), 200)).astype(np.int64))
        tail = pl_fit.tail_key_fraction
        sf = special.zeta(pl_fit.alpha, xs.astype(np.float64)) / special.zeta(pl_fit.alpha, pl_fit.xmin)
        bx.plot(xs, tail * sf, "-", color=FIT, lw=1.6,
                label=f"power law: alpha = {pl_fit.alpha:.3f}, xmin = {pl_fit.xmin}\n"
                      f"(KS distance {pl_fit.ks_distance:.3f})")
        if a.lognormal is not None and a.comparison is not None:
            ln = a.lognormal
            z = (np.log(xs - 0.5) - ln.mu) / ln.sigma
            z0 = (np.log(ln.xmin - 0.5) - ln.mu) / ln.sigma
            sf_ln = np.exp(special.log_ndtr(-z) - special.log_ndtr(-z0))  # (1 - Φ(z)) / (1 - Φ(z0))
            c = a.comparison
            verdict = {"power_law": "favours power law", "lognormal": "favours log-normal"}.get(
                c.favoured, "inconclusive")
            bx.plot(xs, tail * sf_ln, "--", color=SECOND, lw=1.4,
                    label=f"log-normal (rival): R = {c.log_likelihood_ratio:.1f}, p = {c.p_value:.2g}\n({verdict})")
        bx.axvline(pl_fit.xmin, color="#999999", lw=0.8, ls=":")
    bx.set_xscale("log")
    bx.set_yscale("log")
    bx.set_xlabel("frequency f (events per key)")
    bx.set_ylabel("fraction of keys with frequency ≥ f")
    bx.set_title("Frequency distribution (CCDF)")
    bx.legend(loc="lower left")
    return fig


def coverage_figure(a: SkewAnalysis) -> Figure:
    """Share of events handled by ``k`` keys: the top-``k`` keys vs an LRU cache of ``k`` keys."""
    fig, ax = new_figure(7.0, 4.2)
    cum = a.ranks["cum_share"].to_numpy()
    idx = _log_points(cum.size)
    ax.plot(idx + 1, cum[idx], "-", color=OBSERVED, lw=1.8, label="top-k keys (static, in hindsight)")
    lru = a.reuse.filter(a.reuse["cache_keys"] <= max(cum.size, 1))
    ax.plot(lru["cache_keys"].to_numpy(), lru["lru_hit_ratio"].to_numpy(), "s--", ms=3.5, color=THIRD, lw=1.3,
            label="LRU cache of k keys (reuse distance < k)")
    points: dict[int, tuple[list[str], float]] = {}  # fractions that round to the same k share a label
    for row in a.coverage.iter_rows(named=True):
        points.setdefault(row["top_keys"], ([], row["share"]))[0].append(f"{row['top_fraction'] * 100:g} %")
    for k, (fracs, share) in points.items():
        ax.plot([k], [share], "o", color=HIGHLIGHT, ms=6, zorder=5)
        ax.annotate(f"top {', '.join(fracs)}: {share * 100:.1f} %", (k, share),
                    textcoords="offset points", xytext=(6, -12), fontsize=8.5)
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("hot-set size k (keys)")
    ax.set_ylabel(f"share of {a.events_kind} events handled")
    ax.set_title(f"Coverage ({a.num_keys:,} distinct keys, {a.num_events:,} events)")
    ax.legend(loc="upper left")
    return fig


def churn_figure(a: SkewAnalysis) -> Figure:
    """Per window: churn of the top-k hot set, its own coverage and the previous window's (with one
    window only, a panel saying so)."""
    fig, ax = new_figure(7.0, 3.8)
    ch = a.churn
    if ch.height < 2:
        ax.set_title(f"Hot-set churn (hot set = top {a.hot_keys:,} keys per window)")
        hint = "" if a.churn_window == "iteration" else "; a smaller --window gives more windows"
        no_data(ax, f"one window ({a.churn_window}): no churn to show{hint}")
        return fig
    x = ch["window"].to_numpy()
    ax.plot(x, ch["churn"].to_numpy(), "o-", ms=3, color=HIGHLIGHT, label="churn (new hot keys)")
    ax.plot(x, ch["hot_share"].to_numpy(), "-", color=OBSERVED, label="events on own hot set")
    ax.plot(x, ch["prev_hot_share"].to_numpy(), "--", color=THIRD, label="events on previous window's hot set")
    ax.set_ylim(-0.02, 1.02)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"window ({a.churn_window})")
    ax.set_ylabel("fraction")
    ax.set_title(f"Hot-set churn (hot set = top {a.hot_keys:,} keys per window)")
    fig.legend(loc="outside lower center", ncols=3, fontsize=8.5)
    return fig


def offload_figure(res: OffloadResult) -> Figure:
    """Per policy vs switch memory budget (log2 axis): pushes aggregated (solid) and pulls served
    (dotted), server updates saved, server bytes saved, and the latency speedup when known."""
    t = res.table
    has_latency = "latency_speedup" in t.columns
    ncols = 4 if has_latency else 3
    fig, axes = new_figure(4.0 * ncols, 4.0, ncols=ncols, sharex=True)
    same = (t["pulls"] == t["pushes"]).all() and bool(
        ((t["pull_served_fraction"] - t["push_aggregated_fraction"]).abs() < 1e-12).all())
    has_pulls = t["pulls"].max() > 0 and not same
    for policy in t["policy"].unique(maintain_order=True).to_list():
        sub = t.filter(t["policy"] == policy)
        x = sub["budget_bytes"].to_numpy()
        style = {"color": POLICY_COLORS.get(policy, "#333333"), "ms": 4.0,
                 **POLICY_STYLES.get(policy, {"marker": "o", "ls": "-"})}
        label = POLICY_LABELS.get(policy, policy)
        axes[0].plot(x, sub["push_aggregated_fraction"].to_numpy(), label=label, **style)
        if has_pulls:
            axes[0].plot(x, sub["pull_served_fraction"].to_numpy(), ":", color=style["color"], lw=1.0)
        axes[1].plot(x, sub["server_updates_saved_fraction"].to_numpy(), **style)
        axes[2].plot(x, sub["server_bytes_saved_fraction"].to_numpy(), **style)
        if has_latency:
            axes[3].plot(x, sub["latency_speedup"].to_numpy(), **style)
    axes[0].set_ylabel("fraction of evaluated events")
    axes[0].set_title("pushes aggregated in switch" + (" (dotted: pulls served)" if has_pulls else
                                                        " (= pulls served)" if same else ""), fontsize=10)
    axes[1].set_ylabel("fraction of server updates saved")
    axes[1].set_title("server work saved", fontsize=10)
    axes[2].set_ylabel("fraction of server row bytes saved")
    axes[2].set_title("server traffic saved", fontsize=10)
    for ax in axes[:3]:
        ax.set_ylim(min(0.0, float(np.nanmin(t["server_bytes_saved_fraction"].to_numpy()))) - 0.02, 1.02)
    if has_latency:
        axes[3].set_ylabel("mean RPC latency before / after")
        axes[3].set_title("latency speedup (estimate)", fontsize=10)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(format_bytes))
        ax.tick_params(axis="x", labelrotation=45, labelsize=8)
        ax.set_xlabel(f"switch memory budget (entry {res.layout.entry_bytes} B)")
    axes[0].legend(loc="lower right", fontsize=8)
    return fig


def skew_report(a: SkewAnalysis, out_dir: str | Path) -> Path:
    """Write the skew report folder (figures, tables, summary); returns ``index.html``."""
    rep = HtmlReport("Parameter-update skew", subtitle=f"{a.source} ({a.kind}; {a.events_kind} events)")
    rep.add_heading("Headline")
    top = a.coverage.filter(pl.col("top_fraction") == 0.01)
    rep.add_headline(
        [f"{a.num_events:,} updates on {a.num_keys:,} keys; Zipf exponent s = {a.zipf.s:.3f} "
         f"(± {a.zipf.s_stderr:.3f}).",
         *([f"The 1 % most frequent keys ({top['top_keys'].item():,}) take {100 * top['share'].item():.1f} % "
            "of the updates."] if top.height else [])],
        ["the IMC 2020 study: per-parameter update frequency is highly skewed", *([None] if top.height else [])])
    rep.add_text(
        f"{a.num_events:,} events on {a.num_keys:,} distinct keys. Rank-frequency exponent s "
        f"(f(r) ∝ r^-s, discrete MLE over ranks 1..{a.zipf.support:,}) = {a.zipf.s:.4f} ± {a.zipf.s_stderr:.4f}."
        + (f" Frequency-distribution exponent alpha (P(f) ∝ f^-alpha for f ≥ {a.power_law.xmin}, "
           f"Clauset-Shalizi-Newman) = {a.power_law.alpha:.4f} ± {a.power_law.alpha_stderr:.4f}, which by "
           f"alpha = 1 + 1/s corresponds to s = {a.power_law.s_equivalent:.3f}." if a.power_law else ""))
    for note in a.notes:
        rep.add_note(note)
    if a.skipped:
        rep.add_note("skipped: " + ", ".join(f"{k}: {v:,}" for k, v in a.skipped.items()))
    rep.add_heading("Rank-frequency and fit")
    rep.add_figure("rank_frequency", rank_frequency_figure(a),
                   "Left: per-key frequency by rank with the Zipf MLE. Right: CCDF of per-key frequency with the "
                   "power-law tail (CSN) and the log-normal rival; R > 0 favours the power law (Vuong's test).")
    rep.add_heading("Coverage and locality")
    rep.add_figure("coverage", coverage_figure(a),
                   "Share of events handled by k keys: the k most frequent keys, and an LRU cache of k keys "
                   "(from the LRU stack distances).")
    rep.add_table("coverage", a.coverage, "Share of events on the top fraction of keys")
    rep.add_table("lru_hit_ratio", a.reuse, "LRU hit ratio by cache size (keys)")
    rep.add_heading("Hot-set churn")
    rep.add_figure("churn", churn_figure(a), f"Per window ({a.churn_window}): the top-{a.hot_keys} hot set's churn.")
    rep.add_table("churn", a.churn, "Hot set per window")
    rep.add_heading("Most frequent keys")
    rep.add_table("rank_frequency", a.ranks, "All keys by rank", max_rows=30)
    rep.add_key_values(a.summary(), "Summary")
    rep.set_summary(a.summary())
    return rep.write(out_dir)


def offload_report(res: OffloadResult, source: str, out_dir: str | Path) -> Path:
    """Write the offload report folder; returns ``index.html``."""
    rep = HtmlReport("In-network offload what-if", subtitle=source)
    best = res.table.sort("server_bytes_saved_fraction", descending=True, nulls_last=True).head(1)
    if best.height:
        b = best.row(0, named=True)
        rep.add_heading("Headline")
        rep.add_headline([f"Best: the {b['policy']} policy with a {format_bytes(b['budget_bytes'])} switch budget "
                          f"({b['capacity_keys']:,} rows) saves {100 * (b['server_bytes_saved_fraction'] or 0):.1f} % "
                          "of the servers' row bytes."])
    for note in res.notes:
        rep.add_note(note)
    rep.add_figure("offload", offload_figure(res),
                   "Per hot-set policy against the switch memory budget: pushes aggregated in the switch, "
                   "server updates saved and server row bytes saved (after forwards, write-backs and installs).")
    rep.add_table("offload", res.table, "Every policy and budget", max_rows=80)
    summary = res.summary()
    rep.set_summary(summary)
    return rep.write(out_dir)
