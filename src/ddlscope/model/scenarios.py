"""Applying what-if scenarios to a Jobs table, vectorised: Jobs x Scenarios in one pass.

:func:`apply_scenario` rewrites the columns a :class:`~ddlscope.specs.scenario.Scenario` changes
with Polars expressions (no loop over jobs); :func:`whatif` stacks the baseline and every
scenario, runs the step-time model once over the whole stack and adds each row's speedup over its
own baseline.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from ddlscope.model import arch_costs
from ddlscope.model.compute import price_jobs
from ddlscope.model.jobs import (
    ARCHITECTURE_OPTION_COLUMNS,
    JOB_SCHEMA,
    check_jobs_frame,
    gpu_columns,
    link_columns,
    system_columns,
)
from ddlscope.model.step_time import breakdown_lazy, collect
from ddlscope.specs.catalog import Catalog, builtin_catalog
from ddlscope.specs.efficiency import ComputeEfficiency
from ddlscope.specs.overlap import overlap_fraction
from ddlscope.specs.scenario import Scenario
from ddlscope.specs.system import PCIE_SLOT_KINDS, GPUSpec
from ddlscope.specs.traits import kinds_where, single_server_kinds, traits_of
from ddlscope.specs.workload import precision_bytes_factor

c = pl.col
_EFFICIENCY = ("eff_compute", "eff_memory", "eff_pcie", "eff_nvlink", "eff_network", "eff_storage")


def _link_columns(catalog: Catalog, slot: str, name: str) -> dict[str, object]:
    """Columns of one link slot (``pcie``, ``nvlink``, ``nic``) set to catalog link ``name``."""
    if slot == "nvlink" and name.strip().lower() == "none":
        return link_columns("nvlink", None)
    link = catalog.link(name)
    expected = {"pcie": PCIE_SLOT_KINDS, "nvlink": ("nvlink",), "nic": ("ethernet", "infiniband")}[slot]
    if link.kind not in expected:
        raise ValueError(f"scenario {slot}: {name!r} is a {link.kind} link, expected {' or '.join(expected)}")
    return link_columns(slot, link)


_NETWORK_COLUMNS = frozenset({"nic", "nic_bandwidth_bytes_per_s", "nic_latency_s", "nic_link_efficiency",
                              "nics_per_server"})
"""The Jobs columns of the network (a NIC swap and the NIC count)."""


def uses_network() -> pl.Expr:
    """Jobs whose communication crosses a NIC in the step-time model (:mod:`ddlscope.model.step_time`):
    ``ps_worker`` (workers push to and pull from PS shards over the network) and every job spanning
    two or more servers (``num_servers > 1``). ``1w1g``, ``1wng``, ``allreduce_local`` and a
    one-server ``pearl`` or ``allreduce_cluster`` send nothing over a NIC."""
    return c("architecture").is_in(kinds_where("parameter_servers")) | (c("num_servers") > 1)


def _changes_more_than_hardware(sc: Scenario) -> bool:
    """Whether the scenario also changes the architecture, precision, fusion or overlap."""
    return bool(sc.architecture or sc.precision or sc.memory_bound_scale != 1.0 or sc.overlap is not None)


def _hardware_changes(sc: Scenario, catalog: Catalog) -> dict[str, object]:
    """Literal column values the scenario's hardware fields set (catalog look-ups, done once)."""
    out: dict[str, object] = {}
    if sc.server:
        cols = system_columns(catalog.system(sc.server))
        out.update({k: v for k, v in cols.items() if k not in _EFFICIENCY and k != "system"})
    if sc.gpu:
        out.update(gpu_columns(catalog.gpu(sc.gpu)))
    for slot in ("pcie", "nvlink", "nic"):
        name = getattr(sc, slot)
        if name:
            out.update(_link_columns(catalog, slot, name))
    if sc.nics_per_server:
        out["nics_per_server"] = sc.nics_per_server
    return out


def check_scenarios(scenarios: Sequence[Scenario], catalog: Catalog) -> None:
    """Check that every hardware name the ``scenarios`` use is in ``catalog`` (and each link fits its
    slot), without any jobs: commands call it before reading their input.

    Raises:
        ValueError: ``scenario NAME: <the catalog's message>`` (a :class:`CatalogError` is a
            ValueError) for an unknown GPU, link or server, or a link of the wrong kind.
    """
    for sc in scenarios:
        try:
            _hardware_changes(sc, catalog)
        except ValueError as exc:
            raise ValueError(f"scenario {sc.name}: {exc}") from None


def _is_upgrade(hw: dict[str, object]) -> pl.Expr:
    """Rows where every swapped part of ``hw`` is an upgrade: a link with at least the current
    bandwidth and at most the current latency, and better in one of them (any link is an upgrade
    where there is none: no NVLink), a GPU with at least the current peak at the row's precision
    and at least the current memory bandwidth, and more of one of them."""
    cond = pl.lit(True)
    for slot in ("pcie", "nvlink", "nic"):
        bw, lat = f"{slot}_bandwidth_bytes_per_s", f"{slot}_latency_s"
        if bw in hw:
            new_bw, new_lat = pl.lit(hw[bw]), pl.lit(hw[lat])
            better = (new_bw >= c(bw)) & (new_lat <= c(lat)) & ((new_bw > c(bw)) | (new_lat < c(lat)))
            cond = cond & ((c(bw) <= 0) | better)
    if "gpu_peak_fp32_flop_per_s" in hw:
        prec = {p: f"gpu_peak_{p}_flop_per_s" for p in ("fp32", "tf32", "fp16", "bf16")}
        new_peak = pl.lit(None, pl.Float64)
        old_peak = pl.lit(None, pl.Float64)
        for p, col in prec.items():
            new_peak = pl.when(c("precision") == p).then(pl.lit(hw[col])).otherwise(new_peak)
            old_peak = pl.when(c("precision") == p).then(c(col)).otherwise(old_peak)
        new_bw, old_bw = pl.lit(hw["gpu_memory_bandwidth_bytes_per_s"]), c("gpu_memory_bandwidth_bytes_per_s")
        cond = cond & (new_peak >= old_peak) & (new_bw >= old_bw) & ((new_peak > old_peak) | (new_bw > old_bw))
    return cond


def _keeps_own_link(slot: str, hw: dict[str, object]) -> pl.Expr:
    """Rows whose own ``slot`` link is at least as fast as the one ``hw`` swaps in: a link there
    (bandwidth > 0) with at least its bandwidth and at most its latency. A port scenario keeps
    such a link (``ps-to-allreduce-nvlink`` adds NVLink 2 where a server lacks it, and never
    replaces a DGX H100's NVLink 4 by it)."""
    bw, lat = f"{slot}_bandwidth_bytes_per_s", f"{slot}_latency_s"
    return (c(bw) > 0) & (c(bw) >= pl.lit(hw[bw])) & (c(lat) <= pl.lit(hw[lat]))


def _port(sc: Scenario, G: pl.Expr) -> tuple[dict[str, pl.Expr], pl.Expr]:
    """Architecture columns after the port to ``sc.architecture`` on servers of ``G`` GPUs, and
    where the port applies (expressions), from the target's traits
    (:data:`ddlscope.specs.traits.TRAITS`, its ``port`` text says the same in words): one worker
    with all ``p`` GPUs (``one_worker``) or one worker per GPU; one server (``single_server``,
    only where ``p <= G``) or ``m = ceil(p / G)`` servers (at least ``min_servers``, ``m``
    dividing ``p`` where ``even_split``); ``p`` within ``[min_gpus, max_gpus]``; ``num_ps`` shards
    (the scenario's, default ``m``) for a parameter-server target, else 0; the scenario's
    ``sharding`` (default ``zero3``) for a sharded target.

    Raises:
        ValueError: an architecture the traits table does not know.
    """
    t = traits_of(sc.architecture)
    if not t.port_target:
        raise ValueError(f"scenario {sc.name}: architecture {t.kind} is not a port target")
    p = c("num_workers") * c("gpus_per_worker")
    m = (p + G - 1) // G
    one = pl.lit(1, pl.Int64)
    ok = pl.lit(True)
    if t.min_gpus > 1:
        ok = ok & (p >= t.min_gpus)
    if t.max_gpus is not None:
        ok = ok & (p <= t.max_gpus) if t.max_gpus > 1 else p == t.max_gpus
    if t.single_server:
        if t.max_gpus != 1:
            ok = ok & (p <= G)
    else:
        if t.even_split:
            ok = ok & (p % m == 0)
        if t.min_servers > 1:
            ok = ok & (m >= t.min_servers)
    cols = {"num_workers": one if t.one_worker else p,
            "gpus_per_worker": p if t.one_worker and t.max_gpus != 1 else one,
            "num_servers": one if t.single_server else m,
            "num_ps": (pl.lit(sc.num_ps, pl.Int64) if sc.num_ps else m) if t.parameter_servers
            else pl.lit(0, pl.Int64)}
    cols["architecture"] = pl.lit(t.kind).cast(JOB_SCHEMA["architecture"][0])
    if t.sharded:
        cols["sharding"] = pl.lit(sc.sharding or "zero3").cast(ARCHITECTURE_OPTION_COLUMNS["sharding"][0])
    return cols, ok


def apply_scenario(
    jobs: pl.DataFrame | pl.LazyFrame, scenario: Scenario, catalog: Catalog | None = None
) -> pl.LazyFrame:
    """The Jobs table as it would be under ``scenario``.

    Adds ``scenario`` (name) and ``scenario_applied`` (bool: the scenario changed this job; false
    where ``only_architectures`` excludes it, a port does not fit, ``upgrade_only`` finds no
    upgrade, or a scenario that changes only the network (NIC, NICs per server) meets a job that
    uses no NIC, see :func:`uses_network`: a one-server job keeps its speedup of 1 and counts as
    not applied whatever its number of GPUs). Unchanged rows keep their
    values. Hardware swaps keep each row's efficiencies. A scenario that ports the architecture
    swaps a link (``nvlink``, ``nic``, ``pcie``) only where the job's own link is slower (or absent);
    a link at least as fast (bandwidth at least, latency at most the new one's) is kept, and the
    port still applies.

    Raises:
        CatalogError: a scenario names an unknown GPU, link or server.
        ValueError: a link of the wrong kind in a slot; a missing Jobs column.
    """
    check_jobs_frame(jobs)
    catalog = catalog or builtin_catalog()
    lf = jobs.lazy()
    selected = c("architecture").is_in(list(sc_arch)) if (sc_arch := scenario.only_architectures) else pl.lit(True)

    hw = _hardware_changes(scenario, catalog)
    new: dict[str, pl.Expr] = {k: pl.lit(v, dtype=JOB_SCHEMA[k][0]) for k, v in hw.items()}
    # a port's link swaps only add or speed up a link: where the job's own is at least as fast it stays
    kept: dict[str, pl.Expr] = {}
    if scenario.architecture and not scenario.server:
        for slot in ("pcie", "nvlink", "nic"):
            if getattr(scenario, slot) and f"{slot}_bandwidth_bytes_per_s" in hw:
                keep = _keeps_own_link(slot, hw)
                kept[slot] = keep
                # the kept link keeps its own transport share too (ddlscope.model.jobs.link_columns)
                for col in (slot, f"{slot}_bandwidth_bytes_per_s", f"{slot}_latency_s", f"{slot}_link_efficiency"):
                    if col in new:
                        new[col] = pl.when(keep).then(c(col)).otherwise(new[col])
    if hw:
        parts = [pl.when(~kept[k]).then(pl.lit(f"{k}={getattr(scenario, k)}")) if k in kept
                 else pl.lit(f"{k}={getattr(scenario, k)}")
                 for k in ("server", "gpu", "nic", "nvlink", "pcie", "nics_per_server") if getattr(scenario, k)]
        label = pl.concat_str(parts, separator=",", ignore_nulls=True)
        new["system"] = pl.when(label != "").then(c("system") + pl.lit("[") + label + pl.lit("]")).otherwise(
            c("system"))
    # port conditions use the swapped server's GPU count
    lf = lf.with_columns(_G_new=new.get("server_gpus", c("server_gpus")))
    applies = selected
    if scenario.upgrade_only:
        applies = applies & _is_upgrade(hw)
    if hw and set(hw) <= _NETWORK_COLUMNS and not _changes_more_than_hardware(scenario):
        # only the network changes: it applies to the jobs whose traffic crosses a NIC
        applies = applies & uses_network()
    if scenario.architecture:
        port_cols, ok = _port(scenario, c("_G_new"))
        applies = applies & ok
        new.update(port_cols)
    elif "server_gpus" in new:
        # a server swap re-spreads multi-server jobs and must still hold single-server ones
        p = c("num_workers") * c("gpus_per_worker")
        m = (p + c("_G_new") - 1) // c("_G_new")
        single = c("architecture").is_in(single_server_kinds())
        new["num_servers"] = pl.when(single).then(c("num_servers")).otherwise(pl.max_horizontal(m, c("num_servers")))
        applies = applies & (~single | (p <= c("_G_new")))
    if scenario.precision:
        # a scenario that only changes the precision applies where it changes it: a 16-bit target
        # leaves the jobs already in mixed precision
        only_precision = not (hw or scenario.architecture or scenario.memory_bound_scale != 1.0
                              or scenario.overlap is not None)
        if only_precision:
            sixteen = ["fp16", "bf16"]
            unchanged = (c("precision").is_in(sixteen) if scenario.precision in sixteen
                         else c("precision") == scenario.precision)
            applies = applies & ~unchanged
        new["precision"] = pl.lit(scenario.precision).cast(JOB_SCHEMA["precision"][0])
        factor = (pl.when(c("precision").is_in(["fp16", "bf16"]))
                  .then(precision_bytes_factor("fp16", scenario.precision))
                  .otherwise(precision_bytes_factor("fp32", scenario.precision)))
        new["memory_bound_bytes"] = c("memory_bound_bytes") * factor
    if scenario.memory_bound_scale != 1.0:
        new["memory_bound_scale"] = c("memory_bound_scale") * scenario.memory_bound_scale
    if scenario.overlap is not None:
        new["overlap_fraction"] = pl.lit(overlap_fraction(scenario.overlap))

    lf = lf.with_columns(_applies=applies)
    absent = [k for k in new if k in ARCHITECTURE_OPTION_COLUMNS and k not in lf.collect_schema().names()]
    if absent:  # a port to a sharded architecture: the option column, null on the rows it leaves
        lf = lf.with_columns(**{k: pl.lit(None, ARCHITECTURE_OPTION_COLUMNS[k][0]) for k in absent})
    lf = lf.with_columns(
        **{k: pl.when(c("_applies")).then(v).otherwise(c(k)) for k, v in new.items()},
        scenario=pl.lit(scenario.name),
        scenario_applied=c("_applies"),
    )
    return lf.drop("_G_new", "_applies")


def whatif_blocks(
    jobs: pl.DataFrame | pl.LazyFrame,
    scenarios: Sequence[Scenario],
    catalog: Catalog | None = None,
    columns: Sequence[str] | None = None,
    pricing: OpPricing | None = None,
    engine: str | None = None,
) -> Iterator[pl.DataFrame]:
    """The rows of :func:`whatif`, one block per scenario (baseline first), each computed when
    asked for: a population of millions of jobs never holds more than one scenario's breakdown
    beside the results kept.

    Args:
        jobs, scenarios, catalog, pricing, engine: as :func:`whatif`.
        columns: keep only these columns of each block (the model computes only what they need).

    Raises:
        ValueError: duplicate scenario names, a missing column, a duplicate ``job_id``.
    """
    names = [s.name for s in scenarios]
    if len(set(names)) != len(names):
        raise ValueError(f"scenarios: names must be unique, got {names}")
    order = pl.Enum(["baseline", *names])
    jobs = jobs.lazy().with_columns(baseline_architecture=c("architecture"))
    names_in = jobs.collect_schema().names()
    if any(s.architecture and traits_of(s.architecture).sharded for s in scenarios):
        # a port to a sharded architecture adds its option columns: every block has them (null elsewhere)
        jobs = jobs.with_columns(**{k: pl.lit(None, t) for k, (t, _) in ARCHITECTURE_OPTION_COLUMNS.items()
                                    if k not in names_in})
    jobs = jobs.collect()
    if jobs["job_id"].n_unique() != jobs.height:
        raise ValueError("jobs: job_id must be unique")
    keep = list(columns) if columns is not None else None
    # rows of a costed architecture (fsdp, 3d): in the jobs, or ported to by a scenario
    costed_kinds = arch_costs.costed_kinds()
    in_jobs = bool(jobs["architecture"].is_in(costed_kinds).any())
    base_jobs = jobs.with_columns(scenario=pl.lit("baseline").cast(order), scenario_applied=pl.lit(False))
    base = collect(breakdown_lazy(pricing.price(base_jobs) if pricing else base_jobs, costed=in_jobs), engine)
    base_step = base["step_s"]
    base = base.with_columns(speedup=pl.lit(1.0))
    out = base.select(keep) if keep else base
    del base, base_jobs  # not held while the scenarios are computed (only base_step is needed)
    yield out
    del out
    # apply_scenario keeps the jobs' row order, so each scenario's rows align with the baseline's
    # by position: the speedup is a plain division, no grouping by job_id
    for s in scenarios:
        block = apply_scenario(jobs, s, catalog).with_columns(c("scenario").cast(order))
        if pricing:  # the scenario's GPU and precision, priced op by op as the baseline was
            block = pricing.price(block.collect()).lazy()
        block = breakdown_lazy(block, costed=in_jobs or s.architecture in costed_kinds)
        block = block.with_columns(speedup=pl.lit(base_step) / c("step_s"))
        yield collect(block.select(keep) if keep else block, engine)


@dataclass(frozen=True)
class OpPricing:
    """Op-level compute pricing for :func:`whatif` (:func:`ddlscope.model.compute.price_jobs`):
    the baseline and every scenario's rows are priced op by op on their own GPU and precision, so
    a GPU swap is a re-pricing of every op on the new GPU (its generation's efficiencies, tensor
    cores or not), not the ratio of datasheet peaks, and the baseline equals ``predict`` with
    the same op tables.

    Attributes:
        op_tables: workload name, or ``(workload, precision)``, -> op table (as ``price_jobs``).
        efficiencies: overrides of the catalog's compute efficiencies (as ``price_jobs``).
        catalog: GPUs and default efficiencies (default: built-in).
        gpus: GPUs by name that the catalog may not hold (e.g. a system file's own entry).
    """

    op_tables: Mapping[str | tuple[str, str], pl.DataFrame]
    efficiencies: Mapping[str, ComputeEfficiency] | ComputeEfficiency | None = None
    catalog: Catalog | None = None
    gpus: Mapping[str, GPUSpec] | None = None

    def price(self, jobs: pl.DataFrame) -> pl.DataFrame:
        """``jobs`` with the ``priced_*`` columns of :func:`~ddlscope.model.compute.price_jobs`."""
        return price_jobs(jobs, self.op_tables, self.efficiencies, self.catalog, self.gpus)


def whatif(
    jobs: pl.DataFrame | pl.LazyFrame,
    scenarios: Sequence[Scenario],
    catalog: Catalog | None = None,
    pricing: OpPricing | None = None,
    engine: str | None = None,
) -> pl.DataFrame:
    """Every job under the baseline and every scenario, with its speedup.

    Args:
        jobs: a Jobs table (:data:`~ddlscope.model.jobs.JOB_SCHEMA`), ``job_id`` unique per row.
        scenarios: the what-ifs; names must be unique.
        pricing: op tables of the jobs' workloads (:class:`OpPricing`): every block, the
            baseline's and each scenario's, is priced op by op on its own GPU and precision
            (rows of workloads without a table keep the totals path). Without it, priced columns
            already in ``jobs`` serve the rows whose GPU and precision they were priced for.
        engine: the Polars engine of each block's model query
            (:func:`ddlscope.model.step_time.collect`; default streaming); the output does not
            depend on it.

    Returns:
        One row per job x (baseline + scenarios), baseline rows first, then each scenario's in the
        jobs' order: the Jobs columns (as changed), ``baseline_architecture`` (the job's
        architecture before any port), ``scenario`` (an Enum in the order baseline, then
        ``scenarios``), ``scenario_applied``, the step-time model's output columns, and
        ``speedup`` = baseline ``step_s`` / this row's ``step_s`` (1.0 for the baseline and
        unapplied rows).

    Raises:
        ValueError: duplicate scenario names, a missing column, a duplicate ``job_id``.
    """
    return pl.concat(list(whatif_blocks(jobs, scenarios, catalog, pricing=pricing, engine=engine)),
                     how="vertical_relaxed")
