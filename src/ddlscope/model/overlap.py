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

**Closed form** (what :func:`schedule_arrays` evaluates per row): gradients are produced
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

import functools
import math

import numpy as np
import polars as pl

from ddlscope.specs.traits import kinds_where

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


def skew_wait_s(compute_s: pl.Expr, ranks: pl.Expr, sigma: pl.Expr) -> pl.Expr:
    """The expected wait for the slowest of ``ranks`` ranks, seconds: ``sigma sqrt(2 ln p) compute``
    (0 for ``p <= 1``; module docstring). The scheduled model evaluates the same term in
    :func:`schedule_arrays`."""
    p = pl.max_horizontal(ranks, 1.0)
    return sigma * (2 * p.log()).sqrt() * compute_s


# -- the schedule as one compiled loop -----------------------------------------------------------------
# Every row takes one branch (no communication, PS push/pull, or the bucket queue): Polars
# expressions evaluate every branch on every row and allocate per operation (about 110-150 ns per
# row for this schedule on the 2-core development machine), one compiled loop costs about 10 ns per
# row (benchmarks/bench_model.py). Numba compiles it on first use and caches the machine code.
SCHEDULE_INPUTS: tuple[str, ...] = (
    "comm_s", "compute_s", "dense_param_bytes", "sparse_bytes_per_step", "num_gradient_tensors", "ranks",
    "skew_sigma", "bucket_bytes", "first_bucket_bytes", "collective_launch_s", "ps_pipelined",
    "backward_fraction", "overlap_fraction",
)
"""The per-row inputs of :func:`schedule_arrays`, in its argument order after ``is_ps``."""

_KERNEL = None


def _schedule_kernel():
    """The compiled per-row loop of :func:`schedule_arrays` (compiled on first use, then cached)."""
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    import numba

    @numba.njit(nogil=True, cache=True)
    def kernel(is_ps, comm, compute, S, E, k, ranks, sigma, bucket, first, L, pipelined, bf, fraction, exposed,
               wait):
        # sqrt(2 ln p) per whole rank count up to 1024, computed on first use: the same function of the
        # same p, so the same bits, without a logarithm per row (about 11 of the loop's 21 ns per row)
        extreme = np.full(1025, np.nan)
        for i in range(comm.shape[0]):
            c_all = comm[i]
            if not math.isnan(fraction[i]):  # an explicit policy: hidden = min(f comm, compute), no wait
                exposed[i] = c_all - min(fraction[i] * c_all, compute[i])
                wait[i] = 0.0
                continue
            if not c_all > 0.0:  # no communication (or NaN: nothing to schedule)
                exposed[i] = 0.0 if c_all <= 0.0 else c_all
                wait[i] = 0.0 if c_all <= 0.0 else c_all
                continue
            p = max(ranks[i], 1.0)
            j = int(p) if p <= 1024.0 else 0
            if j == p:
                factor = extreme[j]
                if math.isnan(factor):
                    factor = math.sqrt(2.0 * math.log(p))
                    extreme[j] = factor
            else:
                factor = math.sqrt(2.0 * math.log(p))
            w = sigma[i] * factor * compute[i]
            s = S[i]
            C = c_all * s / max(s + E[i], 1.0)  # the dense part; the sparse rest is exposed whole
            T = bf[i] * compute[i]  # the backward
            lat = L[i]
            if s <= 0.0:
                d = 0.0
            elif is_ps[i]:  # one message per tensor: pushes over the backward, pulls over the forward
                kk = max(k[i], 1.0)
                push = max(0.5 * C + kk * lat - (1.0 - 1.0 / kk) * T, 0.5 * C / kk + lat)
                if pipelined[i] > 0.0:
                    pull = max(0.5 * C + kk * lat - (1.0 - 1.0 / kk) * 0.5 * T, 0.5 * C / kk + lat)
                else:
                    pull = 0.5 * C + kk * lat
                d = push + pull
            else:  # the bucket queue: max over k in {1, 2, B-1, B} of t_k + sum_{i>=k} c_i, minus T_b
                b, f = bucket[i], first[i]
                B = 1.0 + math.ceil(max(s - f, 0.0) / b)
                inv = 1.0 / s
                u1 = min(s, f) * inv
                u2 = min(s, f + b) * inv
                v = min(s, f + (B - 2.0) * b) * inv if B >= 2.0 else 1.0
                ww = min(s, f + (B - 3.0) * b) * inv if B >= 3.0 else 0.0
                d = max(T * (u1 - 1.0) + B * lat + C,
                        T * (u2 - 1.0) + (B - 1.0) * lat + C * (1.0 - u1),
                        T * (v - 1.0) + min(B, 2.0) * lat + C * (1.0 - ww),
                        lat + C * (1.0 - v),
                        0.0)
            exposed[i] = d + (c_all - C) + w
            wait[i] = w

    _KERNEL = kernel
    return kernel


def schedule_arrays(is_ps: np.ndarray, *inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The scheduled exposed communication and the wait for the slowest rank, per row (seconds).

    Args:
        is_ps: bool, shape ``(n,)``: the row's parameters live on PS shards or the host
            (``ps_worker``, ``1wng``): per-tensor push and pull; else the DDP bucket queue.
        inputs: the :data:`SCHEDULE_INPUTS`, each float64 of shape ``(n,)`` (a broadcast
            constant is fine): the communication ``comm_s`` (all links, s), the compute
            ``compute_s`` (compute-bound + memory-bound, s), the dense gradient bytes ``S``, the
            sparse bytes ``E``, the gradient tensors ``k``, the ranks ``p``, the
            :data:`SCHEDULE_COLUMNS` parameters and ``overlap_fraction`` (NaN: scheduled; a number
            ``f``: the explicit policy ``exposed = comm - min(f comm, compute)``, no wait).

    Returns:
        ``(exposed_s, wait_s)``, float64 ``(n,)``: exposed = the dense part's scheduled exposed
        time + the sparse part + the wait (0 without communication). The formulas are the module
        docstring's closed forms: the bucket queue's maximum over ``k in {1, 2, B-1, B}`` and the
        PS push/pull's equal-buckets form ``max(C + B L - (1 - 1/B) T, C/B + L)``.
    """
    if len(inputs) != len(SCHEDULE_INPUTS):
        raise ValueError(f"schedule_arrays takes {len(SCHEDULE_INPUTS)} inputs after is_ps "
                         f"({', '.join(SCHEDULE_INPUTS)}), got {len(inputs)}")
    n = is_ps.shape[0]
    arrays = [np.broadcast_to(np.asarray(a, dtype=np.float64), (n,)) for a in inputs]
    exposed, wait = np.empty(n), np.empty(n)
    _schedule_kernel()(np.ascontiguousarray(is_ps, dtype=np.bool_), *arrays, exposed, wait)
    return exposed, wait


_SCHEDULE_DTYPE = pl.Struct({"exposed": pl.Float64, "wait": pl.Float64})


def _schedule_batch(batch: pl.Series, constants: dict[str, float] | None = None) -> pl.Series:
    """:func:`schedule_arrays` on one batch (a struct Series of ``is_ps`` and the
    :data:`SCHEDULE_INPUTS` not in ``constants``; those are passed as scalars, broadcast)."""
    frame = batch.struct.unnest()
    constants = constants or {}
    is_ps = frame["is_ps"].to_numpy()
    exposed, wait = schedule_arrays(is_ps, *(constants[name] if name in constants else frame[name].to_numpy()
                                             for name in SCHEDULE_INPUTS))  # null -> NaN
    return pl.DataFrame({"exposed": exposed, "wait": wait}).to_struct(batch.name)


def schedule_passes(lf: pl.LazyFrame, *, compute_s: pl.Expr, ranks: pl.Expr, timeline: bool = False,
                    constants: dict[str, float] | None = None, tensors: pl.Expr | None = None) -> pl.LazyFrame:
    """``lf`` (a breakdown in progress: ``architecture``, ``comm_s``, ``dense_param_bytes``,
    ``sparse_bytes_per_step``, ``num_gradient_tensors``, ``overlap_fraction`` and the
    :data:`SCHEDULE_COLUMNS`) with ``__sched_exposed_s`` (the exposed communication, the wait
    included: scheduled where ``overlap_fraction`` is null, else the explicit policy) and
    ``__sched_wait_s`` (the wait for the slowest rank, 0 under an explicit policy), module
    docstring: :func:`schedule_arrays` per batch of rows (elementwise, so the streaming engine runs
    batches in parallel). With ``timeline``, scheduled rows whose ``timeline_tau`` is not null use
    the exact per-workload timeline for the all-reduce architectures (:func:`timeline_exposed_s`).

    ``constants``: :data:`SCHEDULE_COLUMNS` known to hold one value on every row (the defaults
    :func:`with_schedule_defaults` added), name -> value: passed to the compiled loop as scalars
    rather than materialised per batch. The values must be those of the columns (the result is
    the same). ``tensors``: ``num_gradient_tensors`` as Float64 where the caller has it already
    (default: cast here).
    """
    f = pl.Float64
    constants = {k: float(v) for k, v in (constants or {}).items()}
    unknown = set(constants) - set(SCHEDULE_COLUMNS)
    if unknown:
        raise ValueError(f"constants: only SCHEDULE_COLUMNS may be given, got {sorted(unknown)}")
    names = dict(zip(SCHEDULE_INPUTS, (
        c("comm_s"), compute_s, c("dense_param_bytes"), c("sparse_bytes_per_step"),
        c("num_gradient_tensors") if tensors is None else tensors, ranks,
        *(c(k) for k in ("skew_sigma", "bucket_bytes", "first_bucket_bytes", "collective_launch_s", "ps_pipelined",
                         "backward_fraction", "overlap_fraction"))), strict=True))
    host_params = kinds_where("host_parameters")  # per-tensor push/pull (ddlscope.specs.traits)
    inputs = pl.struct(is_ps=c("architecture").is_in(host_params),
                       **{k: e.cast(f) for k, e in names.items() if k not in constants})
    batch_fn = functools.partial(_schedule_batch, constants=constants) if constants else _schedule_batch
    lf = lf.with_columns(__sched=inputs.map_batches(batch_fn, return_dtype=_SCHEDULE_DTYPE,
                                                    is_elementwise=True))
    exposed = c("__sched").struct.field("exposed")
    wait = c("__sched").struct.field("wait")
    if timeline:
        S, E = c("dense_param_bytes"), c("sparse_bytes_per_step")
        dense = c("comm_s") * S / (S + E).clip(lower_bound=1.0)
        exact = timeline_exposed_s(dense, c("backward_fraction") * compute_s, S, c("collective_launch_s"))
        use = (c("timeline_tau").is_not_null() & c("overlap_fraction").is_null() & (c("comm_s") > 0) & (S > 0)
               & ~c("architecture").is_in(host_params))
        exposed = pl.when(use).then(exact + (c("comm_s") - dense) + wait).otherwise(exposed)
    return lf.with_columns(__sched_exposed_s=exposed, __sched_wait_s=wait)


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
        (DDP's reverse parameter order, rebuilt from the first iteration's arrival order). As DDP's
        ``compute_bucket_assignment_by_size`` (``torch/csrc/distributed/c10d/reducer.cpp``) does,
        each gradient is added to the open bucket first and the bucket closes once it holds at
        least its limit (``first_bucket_bytes`` for the first, ``bucket_bytes`` for the others), so
        the gradient that crosses the limit is in the bucket it closes; what is left after the
        last such gradient is the last bucket.
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
        # DDP adds the gradient to the open bucket first, then closes the bucket once it holds at
        # least the limit: the gradient that crosses the limit is in the bucket it closes
        fill += nbytes
        last_tau = tau
        if fill >= cap:
            taus.append(last_tau)
            sizes.append(fill)
            cap, fill = bucket_bytes, 0.0
    if fill > 0:
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
