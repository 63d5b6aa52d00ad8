"""Concurrency as a contributor: how many RPCs are in flight around each RPC, and what each adds.

For every RPC, the number of *other* RPCs in flight when it starts, counted per group and split
into reads (pulls) and writes (pushes); each count on one clock:

==============================  ============================  ========================================
columns (``_reads``/``_writes``)  group                         interval of the others, instant, clock
==============================  ============================  ========================================
``server_in_flight``             same ``server_id``            ``[server_recv_start, server_send_end)``
                                                               at this RPC's ``server_recv_start``;
                                                               server clock
``server_other_conn_in_flight``  same server, other            as above, minus those on this RPC's
                                 connections                   connection (worker, server, connection)
``connection_in_flight``         same (worker, server,         ``[client_issue, client_done)`` at this
                                 connection)                   RPC's ``client_issue``; client clock
``worker_in_flight``             same ``worker_id``            as above; client clock
==============================  ============================  ========================================

Intervals are half-open: an RPC that ends exactly when another starts is not in flight then; one
that starts at the same instant is. The counts come from a sweep over events sorted by (group,
time) -- for each start, ``#starts <= t`` minus ``#ends <= t`` in its group, by binary search in
the sorted start and end arrays -- so the cost is ``O(N log N)``, never pairwise.

The effect of concurrency is fitted by ordinary least squares per stage, with the RPC's own op as a
fixed effect: ``stage = a_op + b_read * reads + b_write * writes`` (reconstruction of the IMC
2020 study's finding that concurrent reads/writes on other connections inflate latency; the
linear form is ours, the binned profile shows where it bends).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import polars as pl

from ddlscope.rpc.decompose import ns_to_us, percentiles_us, sort_int64
from ddlscope.rpc.schema import LATENCY_COLUMN, READ_OPS, stage_column, stages_of

CONCURRENCY_MEASURES: tuple[str, ...] = ("server", "server_other_conn", "connection", "worker")
"""The in-flight measures; each gives ``<measure>_in_flight_reads`` and ``..._writes``."""

_PACK_LIMIT = 1 << 62


def in_flight_columns(measure: str) -> tuple[str, str]:
    """``(<measure>_in_flight_reads, <measure>_in_flight_writes)``.

    Raises:
        ValueError: ``measure`` is not one of :data:`CONCURRENCY_MEASURES`.
    """
    if measure not in CONCURRENCY_MEASURES:
        raise ValueError(f"measure: expected one of {', '.join(CONCURRENCY_MEASURES)}, got {measure!r}")
    return f"{measure}_in_flight_reads", f"{measure}_in_flight_writes"


def dense_codes(*keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Integer codes ``0..G-1`` of the distinct tuples of ``keys`` (int arrays of equal length).

    Returns:
        ``(codes int64, G)``. The code order follows the keys' numeric order (lexicographic).
    """
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, np.int64), 0
    keys = tuple(np.asarray(k, dtype=np.int64) for k in keys)
    if len(keys) == 1:
        return _dense_one(keys[0])
    lows = [int(k.min()) for k in keys]
    ranges = [int(k.max()) - lo + 1 for k, lo in zip(keys, lows, strict=True)]
    if int(np.prod(np.asarray(ranges, dtype=np.float64))) < (1 << 27):
        # small value ranges: pack the raw offsets, then one lookup-table pass
        combined = keys[0] - lows[0]
        for k, lo, r in zip(keys[1:], lows[1:], ranges[1:], strict=True):
            combined = combined * r + (k - lo)
        return _dense_one(combined)
    combined = np.zeros(n, np.int64)
    size = 1
    for k in keys:
        codes, g = _dense_one(k)
        if size * g >= _PACK_LIMIT:  # too many combinations to pack: densify what we have first
            combined, size = _dense_one(combined)
        combined = combined * g + codes
        size *= g
    return _dense_one(combined)


def stable_argsort(x: np.ndarray) -> np.ndarray:
    """``np.argsort(x, kind="stable")`` for int64 ``x``, faster where it fits.

    When ``(x - min)`` and the row index fit together in 63 bits, the index is packed into the low
    bits of the value and the packed keys are sorted as plain integers
    (:func:`~ddlscope.rpc.decompose.sort_int64`, several times faster than an argsort); ties keep
    their row order, as in a stable sort.
    """
    x = np.asarray(x, np.int64)
    n = len(x)
    if n < 2:
        return np.arange(n)
    lo = int(x.min())
    ib = (n - 1).bit_length()
    if (int(x.max()) - lo).bit_length() + ib > 62:
        return np.argsort(x, kind="stable")
    key = (x - lo) << ib
    key |= np.arange(n, dtype=np.int64)
    return sort_int64(key) & ((1 << ib) - 1)


def _dense_one(k: np.ndarray) -> tuple[np.ndarray, int]:
    lo, hi = int(k.min()), int(k.max())
    if lo == 0 and hi < (1 << 27) and np.bincount(k, minlength=hi + 1).all():
        return k, hi + 1  # already 0..G-1 with every value present (the usual worker/server ids)
    if hi - lo < (1 << 27):  # a lookup table of the value range
        present = np.zeros(hi - lo + 1, np.bool_)
        present[k - lo] = True
        table = np.cumsum(present, dtype=np.int64) - 1
        return table[k - lo], int(table[-1]) + 1
    ranks = pl.Series(k).rank("dense").to_numpy().astype(np.int64) - 1
    return ranks, int(ranks.max()) + 1


def in_flight_at_start(
    codes: np.ndarray, n_groups: int, start: np.ndarray, end: np.ndarray, is_read: np.ndarray,
    start_order: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """For each interval ``i``: other intervals ``j`` of its group with ``start_j <= start_i < end_j``.

    Args:
        codes: group code per interval, ``0 <= code < n_groups`` (int64; see :func:`dense_codes`).
        n_groups: number of groups.
        start, end: interval bounds (int64, one clock per group; ``start <= end``).
        is_read: whether each interval is a read (bool); the counts are split by the *other*
            interval's kind.
        start_order: ``np.argsort(start, kind="stable")`` if the caller already has it (shared by
            the measures on one clock).

    Returns:
        ``(reads, writes)``: int32 counts of other reads and writes in flight at each start.

    Method: the (group, time) pairs are packed into one int64 key ``group * span + (t - t0)``
    (times replaced by their dense rank when that would overflow); starts are ordered by key
    (the time order, then a stable radix sort on the group, or one sort when there are more than
    65 536 groups), ends sorted, and ``#starts <= key - #ends <= key`` is read off by binary
    search. Groups before this one cancel (each contributes as many starts as ends), so no
    per-group loop is needed.
    """
    n = len(start)
    if n == 0:
        return np.zeros(0, np.int32), np.zeros(0, np.int32)
    start = np.asarray(start, np.int64)
    end = np.asarray(end, np.int64)
    is_read = np.asarray(is_read, np.bool_)
    codes = np.asarray(codes, np.int64)
    t0 = min(int(start.min()), int(end.min()))
    span = max(int(start.max()), int(end.max())) - t0 + 1
    if n_groups * span < _PACK_LIMIT:
        ts, te = start - t0, end - t0
    else:  # dense ranks of the times keep the order within every group and fit any group count
        uniq, inv = np.unique(np.concatenate([start, end]), return_inverse=True)
        ts, te, span = inv[:n].astype(np.int64), inv[n:].astype(np.int64), len(uniq)
        start_order = None
    if n_groups <= (1 << 16):
        by_time = stable_argsort(ts) if start_order is None else start_order
        small = codes.astype(np.uint8 if n_groups <= 256 else np.uint16)
        order = by_time[np.argsort(small[by_time], kind="stable")]  # radix sort: (group, start)
        offset = codes[order] * span  # each group's block offset (fits: n_groups * span < 2^62)
        ks, ke = ts[order] + offset, te[order] + offset
    else:
        key = codes * span + ts
        order = stable_argsort(key)
        ks = key[order]
        ke = codes[order] * span + te[order]
    rd = is_read[order]
    count = np.int32 if n < (1 << 31) else np.int64
    # starts <= ks[p]: the last position of p's run of equal keys, plus one
    change = np.empty(n, np.bool_)
    change[-1] = True
    np.not_equal(ks[1:], ks[:-1], out=change[:-1])
    cum_r = np.cumsum(rd, dtype=count)
    if change.all():  # no two starts at the same instant in a group (the usual case with ns clocks)
        starts_le = np.arange(1, n + 1, dtype=np.int64)
        starts_r = cum_r
    else:
        last = np.where(change, np.arange(n), n)
        last = np.minimum.accumulate(last[::-1])[::-1]
        starts_le = last + 1
        starts_r = cum_r[last]
    # ends <= ks[p], by binary search in the sorted ends (in start order they are nearly sorted)
    eorder = stable_argsort(ke)
    ends = ke[eorder]
    cum_er = np.zeros(n + 1, count)
    np.cumsum(rd[eorder], out=cum_er[1:])
    ends_le = np.searchsorted(ends, ks, side="right")
    self_in = ke > ks  # this interval counts itself unless it is empty
    total = (starts_le - ends_le).astype(count)
    total -= self_in
    reads_sorted = starts_r - cum_er[ends_le]
    reads_sorted -= self_in & rd
    total -= reads_sorted  # now the writes
    reads = np.empty(n, np.int32)
    writes = np.empty(n, np.int32)
    reads[order] = reads_sorted
    writes[order] = total
    return reads, writes


def add_concurrency(frame: pl.DataFrame, threads: int = 2,
                    measures: tuple[str, ...] = CONCURRENCY_MEASURES) -> pl.DataFrame:
    """Add the in-flight counts of :data:`CONCURRENCY_MEASURES` (int32 columns, see the module docstring).

    Args:
        frame: an RPC table with ids, ``op`` and the timestamp columns.
        threads: measures computed in parallel (NumPy releases the GIL in sorts and searches).
        measures: the measures to add (default all; the streaming path leaves ``worker`` out),
            each with the same counts as when all are added.

    Returns:
        ``frame`` plus ``<measure>_in_flight_reads`` / ``_writes`` for every measure of ``measures``.

    Raises:
        ValueError: an unknown measure.
    """
    for m in measures:
        in_flight_columns(m)  # raises on an unknown measure
    measures = tuple(m for m in CONCURRENCY_MEASURES if m in measures)
    if frame.height == 0:
        return frame.with_columns(pl.lit(0, pl.Int32).alias(c) for m in measures for c in in_flight_columns(m))
    col = {c: frame.get_column(c).to_numpy() for c in (
        "worker_id", "server_id", "connection_id", "client_issue_ns", "client_done_ns",
        "server_recv_start_ns", "server_send_end_ns")}
    is_read = frame.select(pl.col("op").cast(pl.String).is_in(list(READ_OPS))).to_series().to_numpy()
    server = dense_codes(col["server_id"])
    worker = dense_codes(col["worker_id"])
    conn = dense_codes(col["worker_id"], col["server_id"], col["connection_id"])
    s_times = (col["server_recv_start_ns"], col["server_send_end_ns"])
    c_times = (col["client_issue_ns"], col["client_done_ns"])
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        # one time order per clock, shared by the two measures on that clock
        s_order, c_order = pool.map(stable_argsort, (s_times[0], c_times[0]))
        jobs = {
            "server": (server, s_times, s_order),
            "server_conn": (conn, s_times, s_order),
            "connection": (conn, c_times, c_order),
            "worker": (worker, c_times, c_order),
        }
        needs = {"server": ("server",), "server_other_conn": ("server", "server_conn"),
                 "connection": ("connection",), "worker": ("worker",)}
        wanted = {k for m in measures for k in needs[m]}
        futures = {k: pool.submit(in_flight_at_start, g[0], g[1], t[0], t[1], is_read, o)
                   for k, (g, t, o) in jobs.items() if k in wanted}
        res = {k: f.result() for k, f in futures.items()}
    out = {
        "server": lambda: res["server"],
        "server_other_conn": lambda: (res["server"][0] - res["server_conn"][0],
                                      res["server"][1] - res["server_conn"][1]),
        "connection": lambda: res["connection"],
        "worker": lambda: res["worker"],
    }
    return frame.with_columns(
        pl.Series(name, arr, dtype=pl.Int32)
        for m in measures for name, arr in zip(in_flight_columns(m), out[m](), strict=True)
    )


def concurrency_moments(frame: pl.DataFrame, measures: tuple[str, ...] = CONCURRENCY_MEASURES) -> pl.DataFrame:
    """The raw moments :func:`concurrency_fit` solves from, per measure and op: sums that disjoint
    parts of a log add up exactly (up to float rounding), so the streaming path
    (:mod:`ddlscope.rpc.streaming`) fits a log it never holds whole.

    Args:
        frame: a decomposed table with the in-flight columns (:func:`add_concurrency`).
        measures: which in-flight measures.

    Returns:
        One row per (measure, op): ``measure``, ``op``, ``n``, ``s_r``, ``s_w`` (sums of the read
        and write counts), ``s_y<i>`` (sums of target ``i``: the stages of
        :func:`~ddlscope.rpc.schema.stages_of` then the latency, ns), ``rr``, ``rw``, ``ww``,
        ``ry<i>``, ``wy<i>``, ``y<i>y<i>`` (sums of products), all Float64 but ``n``.
    """
    ycols = [stage_column(s) for s in stages_of(frame)] + [LATENCY_COLUMN]
    ys = {f"y{i}": pl.col(c).cast(pl.Float64) for i, c in enumerate(ycols)}
    # one group-by for every measure; the sums of the targets alone are the same for all measures,
    # so they are taken once (each sum is the same expression as when taken per measure: same bits)
    shared = [pl.len().cast(pl.Int64).alias("n"), *(e.sum().alias(f"s_{k}") for k, e in ys.items()),
              *((e * e).sum().alias(f"{k}{k}") for k, e in ys.items())]
    own: dict[str, list[str]] = {}
    aggs = []
    for j, m in enumerate(measures):
        rc, wc = in_flight_columns(m)
        x = {"r": pl.col(rc).cast(pl.Float64), "w": pl.col(wc).cast(pl.Float64)}
        mine = {f"s_{k}": e.sum() for k, e in x.items()}
        mine |= {"rr": (x["r"] * x["r"]).sum(), "rw": (x["r"] * x["w"]).sum(), "ww": (x["w"] * x["w"]).sum()}
        for k, e in ys.items():
            mine |= {f"r{k}": (x["r"] * e).sum(), f"w{k}": (x["w"] * e).sum()}
        own[m] = list(mine)
        aggs += [e.alias(f"{j}|{name}") for name, e in mine.items()]
    g = frame.group_by("op").agg(shared + aggs).sort("op")
    order = ["n", "s_r", "s_w", *(f"s_{k}" for k in ys), "rr", "rw", "ww",
             *(c for k in ys for c in (f"r{k}", f"w{k}", f"{k}{k}"))]
    parts = []
    for j, m in enumerate(measures):
        cols = {name: pl.col(f"{j}|{name}") for name in own[m]} | {
            name: pl.col(name) for name in ("n", *(f"s_{k}" for k in ys), *(f"{k}{k}" for k in ys))}
        parts.append(g.select(pl.lit(m).alias("measure"), pl.col("op").cast(pl.String),
                              *(cols[c].alias(c) for c in order)))
    return pl.concat(parts)


def merge_concurrency_moments(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """Add up :func:`concurrency_moments` of disjoint parts of one log (per measure and op)."""
    both = pl.concat(parts, how="vertical")
    return both.group_by("measure", "op", maintain_order=True).agg(pl.all().sum()).sort("measure", "op")


def concurrency_fit(frame: pl.DataFrame, measures: tuple[str, ...] = CONCURRENCY_MEASURES) -> pl.DataFrame:
    """Fit ``stage = a_op + b_read * reads + b_write * writes`` for every stage and measure.

    Ordinary least squares with the RPC's op as a fixed effect, solved from within-op centred
    moments (the Frisch-Waugh-Lovell theorem: the same slopes as with op dummy columns).

    Args:
        frame: a decomposed table with the in-flight columns (:func:`add_concurrency`).
        measures: which in-flight measures to fit.

    Returns:
        One row per (measure, stage): ``measure``, ``stage`` (a stage or ``latency``), ``rpcs``,
        ``us_per_read`` and ``us_per_write`` (the slopes: microseconds added per other read/write in
        flight), their standard errors ``us_per_read_se``/``us_per_write_se`` (classical OLS,
        homoscedastic; with millions of rows they are small, the model error is not), and
        ``partial_r2``: the share of the within-op variance of the stage the two counts explain.
        Slopes are null where the counts do not vary.
    """
    return fit_from_moments(concurrency_moments(frame, measures), stages_of(frame), measures)


def fit_from_moments(moments: pl.DataFrame, stages: tuple[str, ...],
                     measures: tuple[str, ...] = CONCURRENCY_MEASURES) -> pl.DataFrame:
    """:func:`concurrency_fit`'s table from :func:`concurrency_moments` (of a whole log, or merged
    over its parts with :func:`merge_concurrency_moments`); ``stages`` as the moments were taken."""
    targets = [*stages, "latency"]
    rows = []
    for m in measures:
        g = moments.filter(pl.col("measure") == m)
        n = g["n"].to_numpy().astype(np.float64)

        def centred(a: str, b: str, raw: str, g=g, n=n) -> float:
            return float(np.sum(g[raw].to_numpy() - g[f"s_{a}"].to_numpy() * g[f"s_{b}"].to_numpy() / n))

        sxx = np.array([[centred("r", "r", "rr"), centred("r", "w", "rw")],
                        [centred("r", "w", "rw"), centred("w", "w", "ww")]])
        total = int(n.sum())
        dof = total - len(n) - 2
        for i, name in enumerate(targets):
            k = f"y{i}"
            sxy = np.array([centred("r", k, f"r{k}"), centred("w", k, f"w{k}")])
            syy = centred(k, k, f"{k}{k}")
            b, se, r2 = _solve(sxx, sxy, syy, dof)
            rows.append({"measure": m, "stage": name, "rpcs": total,
                         "us_per_read": b[0], "us_per_write": b[1],
                         "us_per_read_se": se[0], "us_per_write_se": se[1], "partial_r2": r2})
    schema = {"measure": pl.String, "stage": pl.String, "rpcs": pl.Int64, "us_per_read": pl.Float64,
              "us_per_write": pl.Float64, "us_per_read_se": pl.Float64, "us_per_write_se": pl.Float64,
              "partial_r2": pl.Float64}
    return pl.DataFrame(rows, schema=schema)


def _solve(sxx: np.ndarray, sxy: np.ndarray, syy: float, dof: int) -> tuple[list, list, float | None]:
    """Slopes (us per unit), standard errors (us) and partial R^2 from centred moments (ns).

    Regressors that do not vary are left out (their slope is None)."""
    keep = [j for j in range(2) if sxx[j, j] > 0]
    b: list[float | None] = [None, None]
    se: list[float | None] = [None, None]
    if not keep or syy <= 0 or dof <= 0:
        return b, se, None
    a = sxx[np.ix_(keep, keep)]
    if abs(np.linalg.det(a)) <= 1e-12 * np.prod(np.diag(a)):
        keep = keep[:1]
        a = sxx[np.ix_(keep, keep)]
    inv = np.linalg.inv(a)
    beta = inv @ sxy[keep]
    rss = max(syy - float(beta @ sxy[keep]), 0.0)
    sigma2 = rss / dof
    for j, idx in enumerate(keep):
        b[idx] = float(beta[j]) / 1e3
        se[idx] = float(np.sqrt(max(sigma2 * inv[j, j], 0.0))) / 1e3
    return b, se, 1.0 - rss / syy


def concurrency_profile(frame: pl.DataFrame, column: str, max_bins: int = 24) -> pl.DataFrame:
    """Latency and mean stage times per bin of an in-flight count (the curve behind the fit).

    Args:
        frame: a decomposed table with the in-flight columns.
        column: an in-flight column, or an expression name present in ``frame`` (e.g. the sum of
            reads and writes added by the caller).
        max_bins: at most this many equal-width integer bins; counts above the 99.9th percentile
            go into the last bin.

    Returns:
        One row per non-empty bin: ``in_flight_lo``, ``in_flight_hi`` (inclusive bounds),
        ``rpcs``, ``latency_mean_us``, ``latency_p50_us``, ``latency_p99_us`` and
        ``<stage>_mean_us`` for every stage.
    """
    if frame.height == 0:
        return pl.DataFrame()
    cap = int(frame.select(pl.col(column).quantile(0.999, interpolation="higher")).item() or 0)
    width = max(1, -(-(cap + 1) // max_bins))
    last = cap // width
    b = pl.min_horizontal(pl.col(column) // width, pl.lit(last)).alias("__bin")
    out = (
        frame.group_by(b)
        .agg(pl.len().cast(pl.Int64).alias("rpcs"), ns_to_us(LATENCY_COLUMN).mean().alias("latency_mean_us"),
             *percentiles_us(LATENCY_COLUMN),
             pl.col(column).max().alias("__max"),
             *(pl.col(stage_column(s)).cast(pl.Float64).mean().truediv(1e3).alias(f"{s}_mean_us")
               for s in stages_of(frame)))
        .sort("__bin")
        .with_columns((pl.col("__bin") * width).cast(pl.Int64).alias("in_flight_lo"),
                      pl.when(pl.col("__bin") == last).then(pl.col("__max"))
                      .otherwise(pl.col("__bin") * width + width - 1).cast(pl.Int64).alias("in_flight_hi"))
    )
    return out.select("in_flight_lo", "in_flight_hi", pl.exclude("in_flight_lo", "in_flight_hi", "__bin", "__max"))
