"""The frequency model of a key stream: per-key counts, rank-frequency, coverage, churn, locality.

:func:`analyze_skew` runs everything on one :class:`~ddlscope.skew.streams.KeyStream` and returns a
:class:`SkewAnalysis`; the pieces are usable alone.

Definitions (the IMC 2020 study's "update frequency of individual parameters", reconstruction):

* the **frequency** of a key is the sum of ``count`` over its events of the chosen kind
  (``updates``: pushes and raw occurrences; ``accesses``: pulls and raw occurrences; ``all``);
* keys are **ranked** by frequency, ties broken by first appearance (rank 1 = most frequent);
* the **top q** of keys are the ``max(1, ceil(q · N))`` highest-ranked of the ``N`` distinct keys
  seen, and their **coverage** is their share of all events;
* the **hot set** of a window is its ``k`` most frequent keys within the window (ties broken by
  the global rank); its **churn** is the fraction of the hot set that was not in the previous
  window's hot set. Windows are iterations when the stream has them, else blocks of ``window``
  consecutive events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from ddlscope.skew.fit import (
    LikelihoodRatioTest,
    LogNormalFit,
    PowerLawFit,
    ZipfRankFit,
    compare_power_law_lognormal,
    fit_discrete_power_law,
    fit_zipf_ranks,
)
from ddlscope.skew.locality import reuse_distance_profile, reuse_distances, reuse_times
from ddlscope.skew.streams import KeyStream, select_events

COVERAGE_FRACTIONS: tuple[float, ...] = (0.001, 0.01, 0.1)
"""The top fractions of keys whose coverage is reported (0.1 %, 1 %, 10 %)."""

DEFAULT_WINDOW_EVENTS = 8192
"""Window (events) for the churn of streams without iterations: about one mini-batch of
ids of a small sparse model (e.g. 64 sequences of 128 tokens)."""
DEFAULT_HOT_FRACTION = 0.01
"""Hot-set size for the churn, as a fraction of the distinct keys (the top 1 %)."""


def key_counts(events: pl.DataFrame, num_keys: int) -> np.ndarray:
    """Frequency per key id: ``Σ count`` of the events of each key; shape ``(num_keys,)``, int64.

    ``events`` needs columns ``key`` (ids ``0..num_keys-1``) and ``count``.
    """
    return np.bincount(events["key"].to_numpy(), weights=events["count"].to_numpy(),
                       minlength=num_keys).astype(np.int64)


def rank_order(counts: np.ndarray) -> np.ndarray:
    """Key ids from most to least frequent, ties by smaller id (= earlier first appearance)."""
    return np.lexsort((np.arange(counts.size), -counts))


def rank_frequency(counts: np.ndarray, keys: pl.DataFrame | None = None) -> pl.DataFrame:
    """The rank-frequency table of the keys with a count > 0.

    Returns:
        Frame ``rank`` (1 = most frequent), ``key``, ``label`` (when ``keys`` is given),
        ``count``, ``share`` (of all events), ``cum_share`` (of the top ``rank`` keys).
    """
    order = rank_order(counts)
    order = order[counts[order] > 0]
    c = counts[order]
    total = c.sum()
    out = pl.DataFrame({
        "rank": np.arange(1, c.size + 1, dtype=np.int64),
        "key": order.astype(np.int64),
        "count": c,
        "share": c / total,
        "cum_share": np.cumsum(c) / total,
    })
    if keys is not None:
        out = out.join(keys.select("key", "label"), on="key", how="left", maintain_order="left").select(
            "rank", "key", "label", "count", "share", "cum_share")
    return out


def coverage(counts: np.ndarray, fractions: tuple[float, ...] = COVERAGE_FRACTIONS) -> pl.DataFrame:
    """Share of events covered by the top fraction ``q`` of the keys seen.

    Returns:
        Frame ``top_fraction`` (q), ``top_keys`` (``max(1, ceil(q N))``), ``share``.

    Raises:
        ValueError: a fraction outside ``(0, 1]`` or no positive count.
    """
    c = np.sort(counts[counts > 0])[::-1]
    if c.size == 0:
        raise ValueError("coverage: no key has a positive count")
    if any(not 0 < q <= 1 for q in fractions):
        raise ValueError(f"coverage fractions must be in (0, 1], got {fractions}")
    cum = np.cumsum(c)
    ks = np.array([max(1, math.ceil(q * c.size - 1e-9)) for q in fractions], dtype=np.int64)
    return pl.DataFrame({"top_fraction": list(fractions), "top_keys": ks, "share": cum[ks - 1] / cum[-1]})


def window_column(events: pl.DataFrame, window: int) -> tuple[pl.DataFrame, str]:
    """``events`` with a ``window`` column: the iteration when every event has one, else
    ``row // window``; and a description of the windows.

    Raises:
        ValueError: ``window < 1``.
    """
    if events.height and events["iteration"].null_count() == 0:
        return events.with_columns(pl.col("iteration").alias("window")), "iteration"
    if window < 1:
        raise ValueError(f"window: expected >= 1 events, got {window}")
    return (events.with_row_index("_row").with_columns((pl.col("_row") // window).cast(pl.Int64).alias("window"))
            .drop("_row"), f"{window} events")


def hot_set_churn(events: pl.DataFrame, counts: np.ndarray, hot_keys: int, window: int = DEFAULT_WINDOW_EVENTS
                  ) -> tuple[pl.DataFrame, str]:
    """Per-window hot set and its churn (module docstring).

    Args:
        events: columns ``key``, ``count``, ``iteration``.
        counts: global frequency per key id (for tie-breaking), shape ``(N,)``.
        hot_keys: ``k``, the hot-set size.
        window: events per window when the stream has no iterations.

    Returns:
        (frame, window description). Frame per window in order: ``window``, ``events`` (weighted),
        ``distinct_keys``, ``hot_keys`` (``min(k, distinct)``), ``entered`` (hot keys not hot in
        the previous window; null for the first), ``churn`` (``entered / hot_keys``),
        ``hot_share`` (share of the window's events on its own hot set), ``prev_hot_share``
        (share of the window's events on the previous window's hot set: what a hot set chosen
        one window earlier would have caught).

    Raises:
        ValueError: ``hot_keys < 1``.
    """
    if hot_keys < 1:
        raise ValueError(f"hot_keys: expected >= 1, got {hot_keys}")
    ev, desc = window_column(events, window)
    grank = np.empty(counts.size, dtype=np.int64)
    grank[rank_order(counts)] = np.arange(counts.size)
    granks = pl.DataFrame({"key": np.arange(counts.size, dtype=np.int64), "_grank": grank})
    per = ev.group_by("window", "key").agg(pl.col("count").sum()).join(granks, on="key", how="left")
    per = per.sort(["window", "count", "_grank"], descending=[False, True, False]).with_columns(
        pl.int_range(pl.len()).over("window").alias("_pos"))
    hot = per.filter(pl.col("_pos") < hot_keys).select("window", "key")
    wins = per.select("window").unique().sort("window").with_columns(
        pl.col("window").shift(1).alias("prev_window"))
    prev_hot = hot.join(wins, left_on="window", right_on="prev_window", how="inner").select(
        pl.col("window_right").alias("window"), "key")
    totals = per.group_by("window").agg(pl.col("count").sum().alias("events"), pl.len().alias("distinct_keys"),
                                        pl.col("count").filter(pl.col("_pos") < hot_keys).sum().alias("_hot_events"))
    stay = hot.join(prev_hot, on=["window", "key"], how="semi").group_by("window").agg(pl.len().alias("_stay"))
    prev_cov = per.join(prev_hot, on=["window", "key"], how="semi").group_by("window").agg(
        pl.col("count").sum().alias("_prev_events"))
    out = (
        wins.join(totals, on="window", how="left")
        .join(stay, on="window", how="left").join(prev_cov, on="window", how="left")
        .with_columns(pl.min_horizontal(pl.lit(hot_keys), pl.col("distinct_keys")).cast(pl.Int64).alias("hot_keys"))
        .with_columns(
            pl.when(pl.col("prev_window").is_null()).then(None)
            .otherwise(pl.col("hot_keys") - pl.col("_stay").fill_null(0)).cast(pl.Int64).alias("entered"),
            (pl.col("_hot_events") / pl.col("events")).alias("hot_share"),
            pl.when(pl.col("prev_window").is_null()).then(None)
            .otherwise(pl.col("_prev_events").fill_null(0) / pl.col("events")).alias("prev_hot_share"),
        )
        .with_columns((pl.col("entered") / pl.col("hot_keys")).alias("churn"))
        .select("window", "events", "distinct_keys", "hot_keys", "entered", "churn", "hot_share", "prev_hot_share")
    )
    return out, desc


@dataclass
class SkewAnalysis:
    """Everything :func:`analyze_skew` computes on one stream.

    Attributes:
        source, kind: of the stream.
        events_kind: ``updates``, ``accesses`` or ``all``.
        num_events: Σ count of the analysed events; ``num_keys``: distinct keys among them.
        ranks: :func:`rank_frequency` table (with labels).
        zipf: the rank-frequency fit; ``power_law``: the CSN frequency-distribution fit;
        lognormal, comparison: the rival fit and Vuong's test (None when the tail is too small).
        coverage: :func:`coverage` table.
        reuse: :func:`~ddlscope.skew.locality.reuse_distance_profile` (LRU hit ratio vs keys).
        reuse_summary: median / p90 reuse distance and time, cold-miss share.
        churn: :func:`hot_set_churn` table; churn_window: its window description.
        hot_keys: the hot-set size used for churn.
        skipped, notes: from the reader.
    """

    source: str
    kind: str
    events_kind: str
    num_events: int
    num_keys: int
    ranks: pl.DataFrame
    zipf: ZipfRankFit
    power_law: PowerLawFit | None
    lognormal: LogNormalFit | None
    comparison: LikelihoodRatioTest | None
    coverage: pl.DataFrame
    reuse: pl.DataFrame
    reuse_summary: dict[str, float]
    churn: pl.DataFrame
    churn_window: str
    hot_keys: int
    skipped: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def summary(self) -> dict[str, Any]:
        """The headline figures as a flat JSON-ready dict."""
        out: dict[str, Any] = {
            "source": self.source, "kind": self.kind, "events_kind": self.events_kind,
            "events": self.num_events, "distinct_keys": self.num_keys,
            "zipf_s": self.zipf.s, "zipf_s_stderr": self.zipf.s_stderr, "zipf_support": self.zipf.support,
            "zipf_ks_distance": self.zipf.ks_distance,
        }
        if self.power_law is not None:
            out |= {"power_law_alpha": self.power_law.alpha, "power_law_alpha_stderr": self.power_law.alpha_stderr,
                    "power_law_xmin": self.power_law.xmin, "power_law_n_tail": self.power_law.n_tail,
                    "power_law_ks_distance": self.power_law.ks_distance,
                    "s_from_alpha": self.power_law.s_equivalent}
        if self.lognormal is not None and self.comparison is not None:
            out |= {"lognormal_mu": self.lognormal.mu, "lognormal_sigma": self.lognormal.sigma,
                    "loglik_ratio_power_law_vs_lognormal": self.comparison.log_likelihood_ratio,
                    "vuong_statistic": self.comparison.normalized_ratio,
                    "vuong_p_value": self.comparison.p_value, "favoured": self.comparison.favoured}
        for row in self.coverage.iter_rows(named=True):
            out[f"top_{_pct(row['top_fraction'])}_share"] = row["share"]
        out |= self.reuse_summary
        ch = self.churn["churn"].drop_nulls()
        out |= {"hot_keys": self.hot_keys, "churn_window": self.churn_window, "windows": self.churn.height,
                "churn_mean": float(ch.mean()) if ch.len() else None,
                "churn_p90": float(ch.quantile(0.9, "nearest")) if ch.len() else None,
                "prev_hot_share_mean": (float(self.churn["prev_hot_share"].drop_nulls().mean())
                                        if ch.len() else None)}
        if self.skipped:
            out["skipped"] = self.skipped
        return out


def _pct(q: float) -> str:
    """0.001 -> '0.1pct', 0.01 -> '1pct'."""
    return f"{q * 100:g}pct"


def count_fits(counts: np.ndarray, support: int | None = None) -> tuple:
    """The fits of a key-count vector, shared by the in-memory and the streamed skew analysis.

    Args:
        counts: int, shape ``(keys,)``: events per key id.
        support: the Zipf fit's support (:func:`fit_zipf_ranks`).

    Returns:
        ``(seen, zipf, power_law, lognormal, comparison)``: keys with at least one event, the Zipf
        rank fit, and the discrete power-law tail fit with its log-normal comparison (Clauset et al.,
        SIAM Review 2009), the last three ``None`` where the tail has too few keys or distinct counts.
    """
    seen = int((counts > 0).sum())
    zipf = fit_zipf_ranks(counts, support=support)
    power_law = lognormal = comparison = None
    try:
        power_law = fit_discrete_power_law(counts)
        lognormal, comparison = compare_power_law_lognormal(counts, power_law)
    except ValueError:
        pass  # too few keys or distinct counts for the tail fit; reported as absent
    return seen, zipf, power_law, lognormal, comparison


def analyze_skew(
    stream: KeyStream,
    events: str = "updates",
    window: int = DEFAULT_WINDOW_EVENTS,
    hot_fraction: float = DEFAULT_HOT_FRACTION,
    support: int | None = None,
    fractions: tuple[float, ...] = COVERAGE_FRACTIONS,
) -> SkewAnalysis:
    """The frequency model of ``stream`` (module docstring).

    Args:
        stream: the key stream.
        events: which events count (:func:`~ddlscope.skew.streams.select_events`).
        window: events per churn window for streams without iterations.
        hot_fraction: hot-set size for churn as a fraction of the distinct keys (``ceil``, >= 1).
        support: ranks of the Zipf fit (default: the distinct keys seen).
        fractions: the top fractions for coverage.

    Raises:
        ValueError: bad arguments or an empty selection.
    """
    if not 0 < hot_fraction <= 1:
        raise ValueError(f"hot_fraction: expected (0, 1], got {hot_fraction}")
    ev = select_events(stream, events)
    counts = key_counts(ev, stream.num_keys)
    seen, zipf, power_law, lognormal, comparison = count_fits(counts, support)
    keys = ev["key"].to_numpy()
    dist = reuse_distances(keys)
    rtime = reuse_times(keys)
    warm = dist >= 0
    reuse_summary: dict[str, float] = {
        "cold_miss_share": float(1 - warm.mean()),
        "reuse_distance_median": float(np.median(dist[warm])) if warm.any() else float("nan"),
        "reuse_distance_p90": float(np.quantile(dist[warm], 0.9)) if warm.any() else float("nan"),
        "reuse_time_median": float(np.median(rtime[warm])) if warm.any() else float("nan"),
    }
    hot_keys = max(1, math.ceil(hot_fraction * seen - 1e-9))
    churn, desc = hot_set_churn(ev, counts, hot_keys, window)
    return SkewAnalysis(
        source=stream.source, kind=stream.kind, events_kind=events, num_events=int(counts.sum()), num_keys=seen,
        ranks=rank_frequency(counts, stream.keys), zipf=zipf, power_law=power_law, lognormal=lognormal,
        comparison=comparison, coverage=coverage(counts, fractions), reuse=reuse_distance_profile(dist),
        reuse_summary=reuse_summary, churn=churn, churn_window=desc, hot_keys=hot_keys,
        skipped=stream.skipped, notes=stream.notes,
    )
