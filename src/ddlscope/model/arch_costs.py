"""The cost functions of the architectures whose traffic is not one of the step-time model's flags.

:data:`ddlscope.specs.traits.TRAITS` names, for such an architecture, a cost function here
(``cost = "fsdp"``); :mod:`ddlscope.model.step_time` adds the terms of every row of such a kind to
its per-link bytes and messages, replaces its memory need and, for the scheduled overlap, its
exposed communication. Rows of the flag-priced kinds get 0 from these terms (their figures are
unchanged). A traits row that names a cost missing here is an error at import
(:func:`_check_registry`).
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from ddlscope.model.pipeline import pipeline_terms
from ddlscope.model.sharded import fsdp_terms, prefetch_exposed_s
from ddlscope.specs.traits import TRAITS

c = pl.col

COSTS: dict[str, Callable[[dict[str, pl.Expr]], dict[str, pl.Expr]]] = {"fsdp": fsdp_terms, "3d": pipeline_terms}
"""cost name (``ArchitectureTraits.cost``) -> function of the context (:func:`context`) returning the
expressions ``intra_bytes``, ``intra_msgs``, ``network_bytes`` (per NIC), ``network_msgs`` and
``needed`` (GPU memory bytes) for the rows of that architecture, and optionally ``compute_scale``
(factor on the workload's compute time: model parallelism, the pipeline bubble; default 1) and
``replicas`` (workload batches per step, for ``samples_per_s``; default the GPUs)."""

TERMS: tuple[str, ...] = ("intra_bytes", "intra_msgs", "network_bytes", "network_msgs")
"""The link terms a cost function returns, added to the step-time model's own."""

def _all_exposed(comm_s: pl.Expr, compute_s: pl.Expr, units: pl.Expr) -> pl.Expr:
    """Nothing hidden (3d: TP on the critical path, blocking sends, the DP all-reduce at the end)."""
    return comm_s


OVERLAP: dict[str, Callable[[pl.Expr, pl.Expr, pl.Expr], pl.Expr]] = {"fsdp": prefetch_exposed_s, "3d": _all_exposed}
"""cost name -> its scheduled exposed communication ``f(comm_s, compute_s, units)`` (FSDP's prefetch;
3d all exposed)."""

OVERLAP_NOTES: dict[str, str] = {
    "fsdp": "FSDP prefetch over {units} units: each unit's collectives run while the unit before it computes; "
            "1/{units} of the communication (the first unit's) and what outlasts the compute stay exposed, plus "
            "the wait for the slowest rank",
    "3d": "3d hides nothing: TP all-reduces on the critical path, blocking pipeline sends, the DP all-reduce after "
          "the last micro-batch (Megatron without --overlap-grad-reduce); exposed: all communication plus the wait "
          "for the slowest rank",
}
"""cost name -> what its scheduled overlap (:data:`OVERLAP`) does, in words (``{units}``: the FSDP
units, ``num_gradient_tensors``), for ``ddlscope predict``'s ``overlap`` line."""


def overlap_note(kind: str, units: float | None = None) -> str | None:
    """What the scheduled overlap does for architecture ``kind`` (:data:`OVERLAP_NOTES`, ``units``
    the FSDP units), ``None`` for the kinds without an own overlap (the DDP/PS bucket schedule of
    :mod:`ddlscope.model.overlap` applies) or an architecture the traits table does not know."""
    t = TRAITS.get(kind)
    note = OVERLAP_NOTES.get(t.cost) if t is not None and t.cost is not None else None
    return None if note is None else note.format(units="?" if units is None else f"{units:.0f}")


def _check_registry() -> None:
    missing = [t.kind for t in TRAITS.values() if t.cost is not None and t.cost not in COSTS]
    missing += [f"{t.kind} (overlap note)" for t in TRAITS.values()
                if t.cost in OVERLAP and t.cost not in OVERLAP_NOTES]
    if missing:
        raise RuntimeError(f"ddlscope.specs.traits: architecture(s) {missing} name a cost function that "
                           "ddlscope.model.arch_costs.COSTS lacks")


_check_registry()


def costed_kinds() -> list[str]:
    """The architectures priced by a cost function here (``fsdp``)."""
    return [k for k, t in TRAITS.items() if t.cost is not None]


COUNT_COLUMNS: dict[str, int] = {"tp": 1, "cp": 1, "pp": 1, "virtual_stages": 1, "microbatches": 1,
                                 "num_layers": 1, "ep": 1, "experts_per_token": 0}
"""The integer architecture columns the cost functions read as floats, and the value a null takes
(:func:`ddlscope.model.pipeline.pipeline_terms`' ``fill_null(...).cast(Float64)``)."""


def count_column(name: str) -> str:
    """The temporary Float64 column of :func:`count_columns` for ``name``."""
    return f"__ctx_{name}"


def count_columns() -> dict[str, pl.Expr]:
    """:data:`COUNT_COLUMNS` as Float64 columns, nulls filled, and ``sharding`` with its null as
    ``zero3`` (FSDP's default, :func:`ddlscope.model.sharded.fsdp_terms`' own fill), each named by
    :func:`count_column`: computed once in a pass before the terms, where each cost expression
    otherwise filled and cast them again (Polars' common-sub-expression elimination keeps repeated
    pieces inside the larger pieces it shares)."""
    return {**{count_column(k): c(k).fill_null(v).cast(pl.Float64) for k, v in COUNT_COLUMNS.items()},
            count_column("sharding"): c("sharding").fill_null("zero3")}


def context(counts: bool = False, **exprs: pl.Expr) -> dict[str, pl.Expr]:
    """The context a cost function reads: the step-time model's expressions plus the optional
    architecture columns (:data:`ddlscope.model.jobs.ARCHITECTURE_OPTION_COLUMNS`: ``sharding``,
    ``num_params``, and ``precision``). ``counts``: the :data:`COUNT_COLUMNS` and ``sharding`` as
    the columns of :func:`count_columns` (filled; a cost function's own fill and cast then change
    nothing)."""
    cols = ("sharding", "num_params", "tp", "pp", "cp", "virtual_stages", "microbatches", "num_layers",
            "layer_activation_bytes", "layer_kv_bytes", "ep", "experts_per_token", "expert_params")
    filled = (*COUNT_COLUMNS, "sharding")
    return {**{k: c(count_column(k) if counts and k in filled else k) for k in cols},
            "precision": c("precision"), **exprs}


def term_column(kind: str, term: str) -> str:
    """The temporary column of :func:`term_columns` holding ``kind``'s ``term``."""
    return f"__cost_{kind}_{term}"


def term_columns(ctx: dict[str, pl.Expr]) -> dict[str, pl.Expr]:
    """Every costed kind's terms (its cost function's expressions over ``ctx``) as temporary
    columns, name (:func:`term_column`) -> expression: evaluated in a pass of their own, where
    Polars' common-sub-expression elimination shares what the terms have in common (the casts of
    ``tp``, ``cp``, ``pp``, their products); inside :func:`extra_terms`' ``when`` branches it does
    not, and each term re-evaluated them (128 Float64 casts in one plan search's query)."""
    return {term_column(kind, t): e for kind in costed_kinds()
            for t, e in COSTS[TRAITS[kind].cost](ctx).items()}  # type: ignore[index]


def extra_terms(arch: pl.Expr, ctx: dict[str, pl.Expr], columns: bool = False) -> dict[str, pl.Expr]:
    """Per link term, the costed architectures' contribution (0 on other rows); ``needed``: the
    memory a GPU needs, the costed kinds' rule where they apply, ``ctx["needed"]`` elsewhere;
    ``compute_scale`` (1 elsewhere) and ``replicas`` (``ctx["p"]`` elsewhere).

    ``columns``: read each kind's terms from the columns of :func:`term_columns` (computed by an
    earlier pass over the same ``ctx``) instead of building the expressions here; the values are the
    same."""
    out = {t: pl.lit(0.0) for t in TERMS}
    needed, scale, replicas = ctx["needed"], pl.lit(1.0), ctx["p"]
    for kind in costed_kinds():
        terms = COSTS[TRAITS[kind].cost](ctx)  # type: ignore[index]
        if columns:
            terms = {t: c(term_column(kind, t)) for t in terms}
        is_kind = arch == kind
        for t in TERMS:
            out[t] = pl.when(is_kind).then(terms[t]).otherwise(out[t])
        needed = pl.when(is_kind).then(terms["needed"]).otherwise(needed)
        if "compute_scale" in terms:
            scale = pl.when(is_kind).then(terms["compute_scale"]).otherwise(scale)
        if "replicas" in terms:
            replicas = pl.when(is_kind).then(terms["replicas"]).otherwise(replicas)
    out.update(needed=needed, compute_scale=scale, replicas=replicas)
    return out


def scheduled_exposed(arch: pl.Expr, default: pl.Expr, comm_s: pl.Expr, compute_s: pl.Expr,
                      units: pl.Expr, wait_s: pl.Expr) -> pl.Expr:
    """The scheduled exposed communication: ``default`` (the DDP/PS schedule of
    :mod:`ddlscope.model.overlap`) except on the costed kinds with their own overlap (FSDP's
    prefetch, plus the wait for the slowest rank ``wait_s``)."""
    out = default
    for kind in costed_kinds():
        f = OVERLAP.get(TRAITS[kind].cost)  # type: ignore[arg-type]
        if f is not None:
            out = pl.when(arch == kind).then(f(comm_s, compute_s, units) + wait_s).otherwise(out)
    return out
