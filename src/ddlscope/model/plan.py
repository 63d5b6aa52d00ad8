"""The search for the best training plan of a decoder LLM on ``N`` GPUs: every valid (architecture,
sharding, tp, pp, virtual stages, micro-batch, recomputation) as one row of a Jobs table, all
evaluated by the step-time model in one vectorised pass, ranked by throughput.

The plan space (:class:`PlanSpace`), for a global batch of ``B`` sequences:

- ``fsdp`` with each sharding (:data:`~ddlscope.specs.traits.SHARDINGS`), micro-batch ``b`` with
  ``b N`` dividing ``B`` (the rest is gradient accumulation; the model's step is one micro-batch:
  FSDP gathers and reduce-scatters every micro-batch);
- ``3d`` with ``tp`` a divisor of the server's GPUs and of the heads, ``cp`` (context parallel)
  dividing the sequence, ``pp`` a divisor of the layers with ``tp cp pp`` dividing ``N``, ``v``
  virtual stages dividing ``L / pp`` (``v > 1`` needs ``pp >= 2`` and ``M`` a multiple of ``pp``),
  ``M = B / (b dp)`` micro-batches (a whole number); for a mixture of experts each ``ep`` (expert
  parallel) dividing both ``dp`` and the experts, 1 included (a dense model: ``ep = 1`` only);
- each with activation recomputation ``none``, ``selective`` or ``full``.

Every plan's workload is :func:`ddlscope.profile.llm.decoder_workload` at its (micro-batch,
recomputation): a handful of distinct workloads, each priced op by op once
(:func:`ddlscope.model.compute.price_jobs`), joined to the placements. Plans whose memory does not fit
the GPU are kept and marked (``fits_gpu_memory`` false, ``loses_by`` giving the memory they need),
ranked after those that fit; when none fits, none is called best.

Why a worse plan loses (``loses_by``): its time per sequence minus the best plan's, split into the
components (compute, pipeline bubble, memory-bound, exposed communication per link, host and the
wait for the slowest rank); the component with the largest increase names the reason, with its share
of the best plan's time per sequence.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import polars as pl

from ddlscope.model.compute import price_jobs
from ddlscope.model.jobs import ARCHITECTURE_OPTION_COLUMNS, JOB_SCHEMA, system_columns, workload_columns
from ddlscope.model.step_time import breakdown
from ddlscope.profile.llm import DecoderConfig, Recompute, decoder_workload, flops_per_token_mfu
from ddlscope.specs.catalog import Catalog, builtin_catalog
from ddlscope.specs.system import System
from ddlscope.specs.traits import SHARDINGS

c = pl.col


@dataclass(frozen=True)
class PlanSpace:
    """The choices a plan search enumerates (module docstring). Defaults: micro-batches 1-16
    (powers of two), all three recomputations, ``v`` in 1, 2, 4, ``cp`` in 1, 2, 4, every
    sharding, both architectures; ``tps``, ``pps``, ``eps`` ``None``: every valid value (``eps``
    given: only its values that are valid, 1 always allowed)."""

    micro_batches: tuple[int, ...] = (1, 2, 4, 8, 16)
    recomputes: tuple[Recompute, ...] = ("none", "selective", "full")
    virtual_stages: tuple[int, ...] = (1, 2, 4)
    context_parallel: tuple[int, ...] = (1, 2, 4)
    shardings: tuple[str, ...] = SHARDINGS
    architectures: tuple[str, ...] = ("fsdp", "3d")
    tps: tuple[int, ...] | None = field(default=None)
    pps: tuple[int, ...] | None = field(default=None)
    eps: tuple[int, ...] | None = field(default=None)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def placements(cfg: DecoderConfig, gpus: int, server_gpus: int, global_batch: int,
               space: PlanSpace = PlanSpace()) -> pl.DataFrame:
    """The valid placements (columns ``architecture``, ``sharding``, ``tp``, ``cp``, ``pp``, ``ep``,
    ``virtual_stages``, ``micro_batch``, ``microbatches``), without the recomputation (module
    docstring's rules).

    Raises:
        ValueError: ``gpus`` or ``global_batch`` < 1, one GPU (no plan spreads a model over one), or
            GPUs that do not fill whole servers (more than one server and ``gpus`` not a multiple of
            ``server_gpus``).
    """
    if gpus < 1 or global_batch < 1:
        raise ValueError(f"gpus, global_batch: expected >= 1, got {gpus}, {global_batch}")
    if gpus < 2:
        raise ValueError("gpus: the plans (fsdp, 3d) spread a model over 2 GPUs or more, got 1; one GPU runs the "
                         "model whole (ddlscope predict --model NAME -a 1w1g)")
    if gpus > server_gpus and gpus % server_gpus:
        raise ValueError(f"gpus: expected whole servers of {server_gpus} GPUs, got {gpus}")
    rows = []
    for b in space.micro_batches:
        if "fsdp" in space.architectures and gpus >= 2 and global_batch % (b * gpus) == 0:
            rows += [{"architecture": "fsdp", "sharding": s, "tp": 1, "cp": 1, "pp": 1, "ep": 1, "virtual_stages": 1,
                      "micro_batch": b, "microbatches": global_batch // (b * gpus)} for s in space.shardings
                     if s != "hybrid" or gpus > server_gpus]
        if "3d" not in space.architectures:
            continue
        tps = space.tps or [t for t in _divisors(min(server_gpus, gpus)) if cfg.heads % t == 0]
        pps = space.pps or _divisors(cfg.layers)
        for tp in tps:
            for cp in space.context_parallel:
                if cfg.seq_len % cp:
                    continue
                for pp in pps:
                    mp = tp * cp * pp
                    if gpus % mp or mp < 2:
                        continue
                    dp = gpus // mp
                    if global_batch % (b * dp):
                        continue
                    M = global_batch // (b * dp)
                    eps = [e for e in _divisors(dp) if cfg.num_experts % e == 0
                           and (space.eps is None or e in space.eps or e == 1)] if cfg.moe else [1]
                    for v in space.virtual_stages:
                        if (cfg.layers // pp) % v or (v > 1 and (pp < 2 or M % pp)):
                            continue
                        rows += [{"architecture": "3d", "sharding": None, "tp": tp, "cp": cp, "pp": pp, "ep": e,
                                  "virtual_stages": v, "micro_batch": b, "microbatches": M} for e in eps]
    schema = {"architecture": pl.String, "sharding": pl.String, "tp": pl.Int64, "cp": pl.Int64, "pp": pl.Int64,
              "ep": pl.Int64, "virtual_stages": pl.Int64, "micro_batch": pl.Int64, "microbatches": pl.Int64}
    return pl.DataFrame(rows, schema=schema)


def plan_jobs(cfg: DecoderConfig, gpus: int, system: System, global_batch: int, *, precision: str = "bf16",
              space: PlanSpace = PlanSpace(), grad_bytes_per_param: float = 4.0,
              catalog: Catalog | None = None) -> pl.DataFrame:
    """The Jobs table of every valid plan (one row each, ``job_id`` = plan number), with the
    ``priced_*`` columns of the op-level compute and ``recompute``, ``micro_batch``,
    ``mfu_flops_per_token``.

    Raises:
        ValueError: as :func:`placements`; no valid plan.
    """
    place = placements(cfg, gpus, system.gpus_per_server, global_batch, space)
    if place.height == 0:
        raise ValueError(f"no valid plan for {gpus} GPUs and a global batch of {global_batch} sequences "
                         "(no micro-batch divides it evenly over the replicas)")
    wl_rows, ops = [], {}
    for b in sorted(set(place["micro_batch"].to_list())):
        for rc in space.recomputes:
            w, table = decoder_workload(cfg, b, precision=precision, recompute=rc,
                                        grad_bytes_per_param=grad_bytes_per_param)
            ops[w.name] = table
            wl_rows.append({**workload_columns(w), "num_params": w.num_params, "num_layers": w.num_layers,
                            "layer_activation_bytes": w.layer_activation_bytes, "layer_kv_bytes": w.layer_kv_bytes,
                            "experts_per_token": w.experts_per_token, "expert_params": w.expert_params,
                            "micro_batch": b, "recompute": rc})
    wl_schema = {k: JOB_SCHEMA[k][0] for k in workload_columns(w)}
    wl_schema.update(num_params=pl.Float64, num_layers=pl.Int64, layer_activation_bytes=pl.Float64,
                     layer_kv_bytes=pl.Float64, experts_per_token=pl.Int64, expert_params=pl.Float64,
                     micro_batch=pl.Int64, recompute=pl.String)
    workloads = pl.DataFrame(wl_rows, schema=wl_schema)
    servers = max(1, gpus // system.gpus_per_server)
    sys_cols = system_columns(system)
    jobs = (place.join(workloads, on="micro_batch", how="inner")
            .with_row_index("job_id").with_columns(
                c("job_id").cast(pl.Int64),
                c("architecture").cast(JOB_SCHEMA["architecture"][0]),
                c("sharding").cast(ARCHITECTURE_OPTION_COLUMNS["sharding"][0]),
                num_workers=pl.lit(gpus, pl.Int64), gpus_per_worker=pl.lit(1, pl.Int64), num_ps=pl.lit(0, pl.Int64),
                num_servers=pl.lit(servers, pl.Int64),
                **{k: pl.lit(v, dtype=JOB_SCHEMA[k][0]) for k, v in sys_cols.items()},
                overlap_fraction=pl.lit(None, pl.Float64), memory_bound_scale=pl.lit(1.0),
                mfu_flops_per_token=pl.lit(flops_per_token_mfu(cfg))))
    return price_jobs(jobs, ops, catalog=catalog or builtin_catalog())


REASONS: tuple[tuple[str, str], ...] = (
    ("compute", "__compute_per_seq"), ("pipeline bubble", "__bubble_per_seq"),
    ("memory-bound ops", "__memory_per_seq"), ("PCIe", "__pcie_per_seq"), ("NVLink", "__nvlink_per_seq"),
    ("network", "__network_per_seq"), ("host", "__host_per_seq"), ("slowest-rank wait", "__wait_per_seq"),
)
"""The components a worse plan's extra time per sequence is split into, and their columns."""


def rank_plans(evaluated: pl.DataFrame, seq_len: int) -> pl.DataFrame:
    """The plans best first (those that fit the GPU's memory, then by tokens/s), with
    ``step_s`` and ``exposed_comm_s`` per optimizer step (an fsdp row's micro-batch step times its
    ``microbatches``, the gradient-accumulation steps), ``tokens_per_s``, ``tokens_per_s_per_gpu``,
    ``mfu`` (llm-foundry's definition, BF16 peak),
    ``bubble_s`` and ``loses_by`` (module docstring): ``(best)`` on the first plan only when it
    fits (of plans equally fast, the one needing the least GPU memory), ``ties the best (< 0.05 %)``
    on a plan within 0.05 % of it, ``does not fit the GPU memory (N GiB > M GiB)``
    (``gpu_memory_needed_bytes`` against ``gpu_memory_bytes``, GiB = 2**30 bytes) on every plan
    that does not."""
    f = pl.Float64
    pp = c("pp").fill_null(1).cast(f)
    v, M = c("virtual_stages").fill_null(1).cast(f), c("microbatches").fill_null(1).cast(f)
    is3d = c("architecture") == "3d"
    bubble_share = pl.when(is3d).then(((pp - 1) / v) / (M + (pp - 1) / v)).otherwise(0.0)
    seqs = c("samples_per_s") * c("step_s")  # sequences per step
    out = evaluated.with_columns(
        tokens_per_s=c("samples_per_s") * seq_len,
        bubble_s=(c("compute_bound_s") + c("memory_bound_s")) * bubble_share,
        __seqs=seqs,
    ).with_columns(
        tokens_per_s_per_gpu=c("tokens_per_s") / c("num_gpus"),
        mfu=c("tokens_per_s") * c("mfu_flops_per_token") / (c("num_gpus") * c("gpu_peak_bf16_flop_per_s")),
        __compute_per_seq=c("compute_bound_s") * (1 - bubble_share) / c("__seqs"),
        __bubble_per_seq=c("compute_bound_s") * bubble_share / c("__seqs"),
        __memory_per_seq=c("memory_bound_s") / c("__seqs"),
        __pcie_per_seq=c("pcie_exposed_s") / c("__seqs"),
        __nvlink_per_seq=c("nvlink_exposed_s") / c("__seqs"),
        __network_per_seq=c("network_exposed_s") / c("__seqs"),
        __host_per_seq=(c("host_s") + c("data_io_s")) / c("__seqs"),
        __wait_per_seq=c("sync_wait_s") / c("__seqs"),
    ).sort([c("fits_gpu_memory").fill_null(True).not_(), c("tokens_per_s"), c("gpu_memory_needed_bytes")],
           descending=[False, True, False], nulls_last=True, maintain_order=True)  # ties: the least memory first
    best = out.row(0, named=True)
    best_per_seq = best["step_s"] / best["__seqs"]
    diffs = [(name, c(col) - best[col]) for name, col in REASONS]
    worst = pl.max_horizontal([d for _, d in diffs])
    label = pl.lit("")
    share = 100 * worst / best_per_seq
    for name, d in reversed(diffs):
        label = pl.when(d == worst).then(pl.format(f"{name} +{{}} %", (100 * d / best_per_seq).round(1))).otherwise(
            label)
    out = out.with_columns(loses_by=pl.when(c("fits_gpu_memory").fill_null(True).not_())
                           .then(pl.format("does not fit the GPU memory ({} GiB > {} GiB)",
                                           (c("gpu_memory_needed_bytes") / 2**30).round(1),
                                           (c("gpu_memory_bytes") / 2**30).round(1)))
                           .when(pl.int_range(pl.len()) == 0).then(pl.lit("(best)"))
                           .when(share < 0.05).then(pl.lit("ties the best (< 0.05 %)"))
                           .otherwise(label))
    # the model prices an fsdp row as one micro-batch (module docstring); its optimizer step is M of
    # them, as a 3d row's step is already its M micro-batches: step_s and exposed_comm_s are per
    # optimizer step on every row
    per_step = pl.when(is3d).then(1.0).otherwise(M)
    out = out.with_columns(step_s=c("step_s") * per_step, exposed_comm_s=c("exposed_comm_s") * per_step)
    return out.drop([x for x in out.columns if x.startswith("__")])


def search(cfg: DecoderConfig, gpus: int, system: System, global_batch: int, *, precision: str = "bf16",
           space: PlanSpace = PlanSpace(), grad_bytes_per_param: float = 4.0,
           catalog: Catalog | None = None) -> tuple[pl.DataFrame, dict[str, float]]:
    """Every valid plan, evaluated in one pass and ranked (:func:`rank_plans`), and timings:
    ``plans``, ``build_s`` (workloads, op pricing, the table), ``evaluate_s`` (the step-time model
    over all plans), ``plans_per_s`` (plans / evaluate_s).

    Raises:
        ValueError: as :func:`plan_jobs`.
    """
    t0 = time.perf_counter()
    jobs = plan_jobs(cfg, gpus, system, global_batch, precision=precision, space=space,
                     grad_bytes_per_param=grad_bytes_per_param, catalog=catalog)
    t1 = time.perf_counter()
    evaluated = breakdown(jobs)
    t2 = time.perf_counter()
    ranked = rank_plans(evaluated, cfg.seq_len)
    return ranked, {"plans": float(jobs.height), "build_s": t1 - t0, "evaluate_s": t2 - t1,
                    "plans_per_s": jobs.height / max(t2 - t1, 1e-9)}
