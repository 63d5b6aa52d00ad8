r"""Exposed communication as a data-parallel framework schedules it (PyTorch DDP, Horovod), and the
wait for the slowest rank: Polars expressions, vectorised over the Jobs table.

**The schedule.** DDP packs gradients into buckets in the order the backward pass produces them
(the reverse of the forward's parameter order): the first bucket holds ``first_bucket_bytes``
(``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`` = 1 MiB, so the first all-reduce starts early),
every other one ``bucket_bytes`` (``bucket_cap_mb`` = 25 MiB), the last the remainder (PyTorch
documentation, ``DistributedDataParallel``; Li et al., "PyTorch Distributed", VLDB 2020, sec. 3.2).
A bucket's all-reduce can start only when the backward has produced all of its gradients, and the
all-reduces run one after the other on one communication stream. The forward pass and the
optimizer step hide nothing: the optimizer waits for the last all-reduce, the next forward for the
optimizer. With ``B`` buckets of cost ``c_i`` ready at ``t_i`` during a backward of length
``T_b`` (the step's backward starting at 0), the stream finishes at

    F = max_k ( t_k + sum_{i >= k} c_i ),        exposed = F - T_b  (>= c_B: the last bucket),

(a queue served in order: bucket ``k`` starts at ``max(t_k, end of k-1)``; unrolling the recursion
gives the maximum). Horovod's tensor fusion (a 64 MiB buffer, cycle 5 ms) is the same schedule with
``bucket_bytes`` = 64 MiB.

**Closed form** (what :func:`scheduled_exposed_s` evaluates per row): gradients are produced
*uniformly in bytes* over the backward, so bucket ``k`` is ready at ``t_k = T_b * cum_k / S``
(``cum_k`` the bytes of buckets 1..k, ``S`` the gradient bytes), and a bucket costs
``c_i = L + C * b_i / S`` (``C`` the communication time of all ``S`` bytes, priced by
:mod:`ddlscope.model.step_time`, ``L`` the per-collective launch latency ``collective_launch_s``).
For ``2 <= k <= B-1`` the buckets are full, so ``t_k + sum_{i>=k} c_i`` is linear in ``k`` and the
maximum over all ``k`` is at ``k`` in ``{1, 2, B-1, B}``: four terms, no loop. With ``B`` equal
buckets and ``L = 0`` it reduces to ``exposed = max(C / B, C - (1 - 1/B) T_b)``; with one bucket
nothing is hidden (``exposed = C``).

``T_b = backward_fraction * (compute_bound_s + memory_bound_s)``: ``backward_fraction`` defaults
to 2/3 (the backward of a layer costs about twice its forward: one matrix product for the input
gradient and one for the weight gradient per forward product; Kaplan et al., "Scaling Laws for
Neural Language Models", 2020, sec. 2.1, ``C_backward = 2 C_forward``); a profiled workload's op
table gives its own (:func:`backward_fraction_of_ops`). The optimizer step is inside the
remaining third and hides nothing.

**Exact timeline** (:func:`bucket_timeline`): where a workload's op table gives each backward op's
time and the module whose gradients it finishes, the buckets' ready times ``tau_k = t_k / T_b``,
their counts and the bytes from bucket ``k`` on are computed once per distinct workload (cumulative
sums) and joined in as three list columns (``timeline_tau``, ``timeline_buckets_left``,
``timeline_bytes_left``); the maximum is then taken over the lists, per row
(:func:`timeline_exposed_s`).

**Per architecture.** ``allreduce_local``, ``allreduce_cluster`` (the hierarchical reduce-scatter,
inter-server ring and all-gather of one bucket run back to back, so the bucket costs their sum) and
``pearl``'s dense part: the schedule above over all of the dense communication. ``ps_worker`` and
``1wng`` (parameters on the PS shards or the host): the push of a tensor starts after its gradient
(half of the communication, scheduled over the backward as above) and the pull of a weight must end
before its forward use (the other half, scheduled over the forward ``T_f = T_b / 2`` the same way,
read in reverse: the pulls are issued together when the update is done and the forward consumes
them in order, so it waits ``max(C_pull / B, C_pull - (1 - 1/B) T_f)``; with ``ps_pipelined = 0``
the forward waits for every pull, ``C_pull + B L``). Sparse (embedding)
traffic is exposed whole: the look-up all-to-all or pull comes before the first layer's forward and
the embedding gradient is the backward's last; it is split off the communication time in proportion
to bytes, ``E / (S + E)`` (an approximation: the links price both together).

**Synchronisation cost.** Every collective waits for the slowest rank. With per-rank compute times
i.i.d. normal with relative standard deviation ``skew_sigma``, the expected maximum of ``p`` draws
exceeds the mean by about ``sigma sqrt(2 ln p)`` (the Gaussian extreme-value bound, e.g. Cramér,
"Mathematical Methods of Statistics", 1946, sec. 28.6), so the step pays
``wait = skew_sigma * sqrt(2 ln p) * compute`` (0 for one rank or no communication). ``skew_sigma``
and ``collective_launch_s`` are parameters with stated defaults (:data:`SCHEDULE_COLUMNS`), fitted
where measurements exist (``ddlscope validate``'s Pollux protocol, :mod:`ddlscope.validate.published`).
"""

from __future__ import annotations

import math

import polars as pl

c = pl.col

BUCKET_BYTES = 25 * 2**20
"""DDP's default bucket size, bytes (``bucket_cap_mb = 25``)."""
FIRST_BUCKET_BYTES = 2**20
"""DDP's first bucket, bytes (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``)."""
BACKWARD_FRACTION = 2.0 / 3.0
"""Default share of a training step's compute time in the backward pass (module docstring)."""
SKEW_SIGMA = 0.01
"""Default relative standard deviation of per-rank compute time per step: an assumption (1 %, the
order of the GPU-to-GPU clock and thermal variation of one SKU under load), fitted where
measurements exist."""
COLLECTIVE_LAUNCH_S = 20e-6
"""Default per-collective launch latency, seconds: an assumption of the order of NCCL's smallest
all-reduce time on one node (a few kernel launches and the proxy hand-off, 10-30 us in nccl-tests'
8-byte rows)."""

SCHEDULE_COLUMNS: dict[str, tuple[pl.DataType, float, str]] = {
    "backward_fraction": (pl.Float64, BACKWARD_FRACTION, "share of compute time in the backward pass"),
    "bucket_bytes": (pl.Float64, float(BUCKET_BYTES), "gradient bucket size, bytes (DDP 25 MiB)"),
    "first_bucket_bytes": (pl.Float64, float(FIRST_BUCKET_BYTES), "first bucket, bytes (DDP 1 MiB)"),
    "skew_sigma": (pl.Float64, SKEW_SIGMA, "relative std of per-rank compute time (straggler wait)"),
    "collective_launch_s": (pl.Float64, COLLECTIVE_LAUNCH_S, "latency per collective (bucket), s"),
    "flat_ring": (pl.Float64, 0.0, "1: NCCL's flat ring through all GPUs across servers; 0: hierarchical"),
    "ps_pipelined": (pl.Float64, 1.0, "1: a PS pull ends before its layer's forward; 0: all pulls before it"),
}
"""Optional Jobs columns of the scheduled overlap: name -> (dtype, default, meaning). A Jobs table
without them gets the defaults (:func:`with_schedule_defaults`)."""


def with_schedule_defaults(lf: pl.LazyFrame) -> pl.LazyFrame:
    """``lf`` with each :data:`SCHEDULE_COLUMNS` column it lacks added at its default."""
    names = lf.collect_schema().names()
    missing = {k: pl.lit(v, dtype=t) for k, (t, v, _) in SCHEDULE_COLUMNS.items() if k not in names}
    return lf.with_columns(**missing) if missing else lf


def bucket_count(grad_bytes: pl.Expr, bucket: pl.Expr, first: pl.Expr) -> pl.Expr:
    """Buckets of ``grad_bytes`` (Float64 expression): ``1 + ceil(max(S - first, 0) / bucket)`` for
    ``S > 0``, 0 for none (DDP; a lower bound where one parameter is larger than a bucket)."""
    return pl.when(grad_bytes > 0).then(1 + ((grad_bytes - first).clip(lower_bound=0) / bucket).ceil()).otherwise(0.0)


def _shares_before(S: pl.Expr, B: pl.Expr, bucket: pl.Expr, first: pl.Expr) -> dict[str, pl.Expr]:
    """The byte shares ``cum_k / S`` the closed form reads (``cum_k`` = bytes of buckets 1..k):
    ``u1 = cum_1``, ``u2 = cum_2``, ``v = cum_{max(B-1, 1)}``, ``w = cum_{max(B-1, 1) - 1}``, and
    ``n = min(B, 2)`` the buckets from ``max(B-1, 1)`` on. With one bucket the ``B-1`` candidate
    is the first (``v = 1, w = 0, n = 1``)."""
    inv = 1.0 / S
    return {
        "u1": pl.min_horizontal(S, first) * inv,
        "u2": pl.min_horizontal(S, first + bucket) * inv,
        "v": pl.when(B >= 2).then(pl.min_horizontal(S, first + (B - 2) * bucket) * inv).otherwise(1.0),
        "w": pl.when(B >= 3).then(pl.min_horizontal(S, first + (B - 3) * bucket) * inv).otherwise(0.0),
        "n": pl.min_horizontal(B, 2.0),
    }


def _ring_exposed(comm_s: pl.Expr, window_s: pl.Expr, B: pl.Expr, u1: pl.Expr, u2: pl.Expr, v: pl.Expr,
                  w: pl.Expr, n: pl.Expr, launch_s: pl.Expr) -> pl.Expr:
    """``max over k in {1, 2, B-1, B}`` of ``t_k + sum_{i>=k} c_i``, minus ``T_b`` (module
    docstring), with ``t_k = T_b cum_k / S`` and ``sum_{i>=k} c_i = (B-k+1) L + C (1 - cum_{k-1} / S)``:

    - ``k = 1``: ``T_b (u1 - 1) + B L + C``
    - ``k = 2``: ``T_b (u2 - 1) + (B-1) L + C (1 - u1)``
    - ``k = B-1``: ``T_b (v - 1) + n L + C (1 - w)``
    - ``k = B``: ``L + C (1 - v)`` (the last bucket, after the backward)
    """
    return pl.max_horizontal(
        window_s * (u1 - 1) + B * launch_s + comm_s,
        window_s * (u2 - 1) + (B - 1) * launch_s + comm_s * (1 - u1),
        window_s * (v - 1) + n * launch_s + comm_s * (1 - w),
        launch_s + comm_s * (1 - v),
    ).clip(lower_bound=0.0)


def scheduled_exposed_s(comm_s: pl.Expr, window_s: pl.Expr, grad_bytes: pl.Expr, bucket: pl.Expr,
                        first: pl.Expr, launch_s: pl.Expr) -> pl.Expr:
    """Exposed seconds of ``comm_s`` (all the bucketed communication) behind a window of
    ``window_s`` seconds (the backward) with gradients produced uniformly in bytes: the closed form
    of the module docstring, ``max over k in {1, 2, B-1, B} of (t_k + sum_{i>=k} c_i) - T_b``.
    ``comm_s`` itself is returned where there are no gradient bytes (nothing to schedule).
    (:func:`schedule_passes` evaluates the same algebra in passes, for speed.)"""
    B = bucket_count(grad_bytes, bucket, first)
    exposed = _ring_exposed(comm_s, window_s, B, **_shares_before(grad_bytes, B, bucket, first), launch_s=launch_s)
    return pl.when(B > 0).then(exposed).otherwise(comm_s)


def equal_buckets_exposed_s(comm_s: pl.Expr, window_s: pl.Expr, buckets: pl.Expr, launch_s: pl.Expr) -> pl.Expr:
    """The closed form for ``B`` equal buckets: ``max(C + B L - (1 - 1/B) T, C/B + L)`` (``k = 1`` and
    ``k = B``; the middle terms are linear in ``k``), for per-tensor messages (PS push and pull)."""
    return pl.max_horizontal(comm_s + buckets * launch_s - (1 - 1 / buckets) * window_s,
                             comm_s / buckets + launch_s)


def skew_wait_s(compute_s: pl.Expr, ranks: pl.Expr, sigma: pl.Expr) -> pl.Expr:
    """The expected wait for the slowest of ``ranks`` ranks, seconds: ``sigma sqrt(2 ln p) compute``
    (0 for ``p <= 1``; module docstring)."""
    p = pl.max_horizontal(ranks, 1.0)
    return sigma * (2 * p.log()).sqrt() * compute_s


def schedule_passes(lf: pl.LazyFrame, *, compute_s: pl.Expr, ranks: pl.Expr, timeline: bool = False) -> pl.LazyFrame:
    """``lf`` (a breakdown in progress: ``architecture``, ``comm_s``, ``dense_param_bytes``,
    ``sparse_bytes_per_step``, ``num_gradient_tensors`` and the :data:`SCHEDULE_COLUMNS`) with
    ``__sched_exposed_s`` (the scheduled exposed communication, the wait included) and
    ``__sched_wait_s`` (the wait for the slowest rank), module docstring. Three passes, each reading
    the previous one's columns (no sub-expression evaluated twice). With ``timeline``, rows whose
    ``timeline_tau`` is not null use the exact per-workload timeline for the all-reduce
    architectures (:func:`timeline_exposed_s`).
    """
    S, E = c("dense_param_bytes"), c("sparse_bytes_per_step")
    bucket, first = c("bucket_bytes"), c("first_bucket_bytes")
    has_comm = c("comm_s") > 0
    # (guards as when/then: a bool cast to 0/1 costs twice a when in Polars 2.1; clip over min/max)
    lf = lf.with_columns(
        __sc_dense=c("comm_s") * S / (S + E).clip(lower_bound=1.0),
        __sc_tb=c("backward_fraction") * compute_s,
        __sc_B=pl.when(S > 0).then(1 + ((S - first).clip(lower_bound=0) / bucket).ceil()).otherwise(0.0),
        __sc_inv=1.0 / S.clip(lower_bound=1.0),
        __sc_wait=pl.when(has_comm).then(skew_wait_s(compute_s, ranks, c("skew_sigma"))).otherwise(0.0),
    )
    B, L, C, T, inv = c("__sc_B"), c("collective_launch_s"), c("__sc_dense"), c("__sc_tb"), c("__sc_inv")
    lf = lf.with_columns(
        __sc_u1=pl.min_horizontal(S, first) * inv,
        __sc_u2=pl.min_horizontal(S, first + bucket) * inv,
        # B-1 candidate: cum_{max(B-1, 1)} (1 for one bucket) and the bytes before it
        __sc_v=pl.when(B >= 2).then(pl.min_horizontal(S, first + (B - 2) * bucket) * inv).otherwise(1.0),
        __sc_w=pl.when(B >= 3).then(pl.min_horizontal(S, first + (B - 3) * bucket) * inv).otherwise(0.0),
        __sc_n=B.clip(upper_bound=2.0),
    )
    ring = _ring_exposed(C, T, B, *(c(f"__sc_{k}") for k in ("u1", "u2", "v", "w", "n")), launch_s=L)
    if timeline:
        ring = pl.when(c("timeline_tau").is_not_null()).then(timeline_exposed_s(C, T, S, L)).otherwise(ring)
    # PS and host parameters: one message per gradient tensor, pushed after its gradient (over the
    # backward), pulled before its forward use (over the forward, T_b / 2)
    k = c("num_gradient_tensors").cast(pl.Float64).clip(lower_bound=1.0)
    pull = pl.when(c("ps_pipelined") > 0).then(equal_buckets_exposed_s(0.5 * C, 0.5 * T, k, L)).otherwise(
        0.5 * C + k * L)
    push_pull = equal_buckets_exposed_s(0.5 * C, T, k, L) + pull
    # without gradients (S = 0) nothing is scheduled: C = 0 and only the sparse part is exposed
    dense_exposed = (pl.when(S <= 0).then(0.0).when(c("architecture").is_in(["ps_worker", "1wng"]))
                     .then(push_pull).otherwise(ring))
    exposed = pl.when(has_comm).then(dense_exposed + (c("comm_s") - C) + c("__sc_wait")).otherwise(0.0)
    return lf.with_columns(__sched_exposed_s=exposed, __sched_wait_s=c("__sc_wait"))


# -- the exact per-workload timeline ------------------------------------------------------------------
TIMELINE_COLUMNS: tuple[str, ...] = ("timeline_tau", "timeline_buckets_left", "timeline_bytes_left")
"""List columns of a workload's bucket timeline: per bucket k (in ready order) the ready time as a
share of the backward ``tau_k``, the buckets from k on ``B - k + 1``, and the share of the gradient
bytes from k on ``R_k / S``."""


def bucket_timeline(ops: pl.DataFrame, params: pl.DataFrame, *, bucket_bytes: float = BUCKET_BYTES,
                    first_bucket_bytes: float = FIRST_BUCKET_BYTES) -> dict[str, list[float]]:
    """A workload's bucket timeline (:data:`TIMELINE_COLUMNS`) from its profile tables.

    Args:
        ops: the op table (:data:`ddlscope.profile.api.OP_COLUMNS`): ``op_index``, ``phase``,
            ``module``, ``roofline_s`` (each backward op's time on the reference GPU; only the shares
            of the backward's total matter).
        params: the parameter table (``name``, ``bytes``, ``kind``): a dense parameter's gradient is
            ready when the last backward op of its module (the name without its last component)
            ends; a parameter whose module runs no backward op is ready at the end.

    Returns:
        ``{"timeline_tau": [...], "timeline_buckets_left": [...], "timeline_bytes_left": [...]}``,
        one entry per bucket; empty lists without dense gradients. Buckets are filled in ready order
        (DDP's reverse parameter order, rebuilt from the first iteration's arrival order), the first
        up to ``first_bucket_bytes``, the others up to ``bucket_bytes`` (a parameter larger than the
        room left closes its bucket and opens the next, as DDP's ``compute_bucket_assignment_by_size``).
    """
    bwd = ops.filter(c("phase") == "backward").sort("op_index")
    total = float(bwd["roofline_s"].sum() or 0.0)
    bwd = bwd.with_columns(tau=c("roofline_s").cum_sum() / (total if total > 0 else 1.0))
    ready = bwd.group_by("module").agg(tau=c("tau").max())
    dense = params.filter(c("kind") == "dense").with_columns(
        module=pl.when(c("name").str.contains(r"\.")).then(c("name").str.replace(r"\.[^.]*$", ""))
        .otherwise(pl.lit("")))
    dense = dense.join(ready, on="module", how="left").with_columns(c("tau").fill_null(1.0))
    dense = dense.with_row_index("_order").sort(["tau", "_order"], descending=[False, True])
    S = float(dense["bytes"].sum() or 0.0)
    if S <= 0:
        return {k: [] for k in TIMELINE_COLUMNS}
    taus, sizes = [], []
    cap, fill, last_tau = first_bucket_bytes, 0.0, 0.0
    for tau, nbytes in zip(dense["tau"].to_list(), dense["bytes"].to_list(), strict=True):
        if fill > 0 and fill + nbytes > cap:
            taus.append(last_tau)
            sizes.append(fill)
            cap, fill = bucket_bytes, 0.0
        fill += nbytes
        last_tau = tau
    taus.append(last_tau)
    sizes.append(fill)
    n = len(sizes)
    left, acc = [], 0.0
    for s in reversed(sizes):
        acc += s
        left.append(acc / S)
    return {"timeline_tau": taus, "timeline_buckets_left": [float(n - i) for i in range(n)],
            "timeline_bytes_left": left[::-1]}


def timeline_exposed_s(comm_s: pl.Expr, window_s: pl.Expr, grad_bytes: pl.Expr, launch_s: pl.Expr) -> pl.Expr:
    """Exposed seconds with a workload's exact timeline (list columns :data:`TIMELINE_COLUMNS`):
    ``max_k (T_b tau_k + (B-k+1) L + C R_k / S) - T_b`` over the row's lists (module docstring)."""
    finish = (c("timeline_tau") * window_s + c("timeline_buckets_left") * launch_s
              + c("timeline_bytes_left") * comm_s).list.max()
    return pl.when(grad_bytes > 0).then((finish - window_s).clip(lower_bound=0.0)).otherwise(comm_s)


def backward_fraction_of_ops(ops: pl.DataFrame) -> float:
    """The backward's share of a profiled step's compute time: backward ``roofline_s`` over all
    (forward, backward, optimizer) of the op table; :data:`BACKWARD_FRACTION` for an empty table."""
    total = float(ops["roofline_s"].sum() or 0.0)
    if total <= 0:
        return BACKWARD_FRACTION
    return float(ops.filter(c("phase") == "backward")["roofline_s"].sum()) / total


def expected_max_normal(p: int) -> float:
    """``sqrt(2 ln p)``: the factor of :func:`skew_wait_s` (0 for one rank), for tests and docs."""
    return math.sqrt(2 * math.log(p)) if p > 1 else 0.0
