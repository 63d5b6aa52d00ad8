"""The step-time model for one job in plain Python floats: the fast path of a one-job call.

:func:`ddlscope.model.step_time.breakdown_lazy` is the model, vectorised over a Jobs table; a
one-row table pays Polars' query planning (several milliseconds) for microseconds of arithmetic.
:func:`breakdown_one` evaluates the *same formulas in the same order* on one :func:`job_row` dict:
each line below mirrors a pass of :mod:`ddlscope.model.step_time` and, for the scheduled overlap,
of :func:`ddlscope.model.overlap.schedule_passes` (the helpers of :mod:`ddlscope.model.collectives`
are generic over numbers, and are called here as they are there). Sources of every formula: those
two modules' docstrings; nothing here is new model.

What it covers: the totals path (no ``priced_*`` op-level columns), numeric and scheduled overlap
with the closed-form bucket schedule (no per-workload ``timeline_*`` lists). A row outside that
(op-priced rows, timelines) is the vectorised model's: :func:`covers` says which.
``tests/model/test_scalar.py`` checks equality with ``breakdown_lazy`` to 1e-9 relative on every
architecture, several workloads, systems and overlaps; ``benchmarks/bench_api.py`` times it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ddlscope.model.collectives import (
    alltoall_bytes_to_peers,
    ring_allgather_bytes_per_rank,
    ring_allgather_steps,
    ring_allreduce_bytes_per_rank,
    ring_allreduce_steps,
)
from ddlscope.model.jobs import OPTIONAL_JOB_COLUMNS
from ddlscope.model.overlap import SCHEDULE_COLUMNS
from ddlscope.model.step_time import COMPONENTS, LINKS, OUTPUT_COLUMNS

_PEAK = {"fp32": "gpu_peak_fp32_flop_per_s", "tf32": "gpu_peak_tf32_flop_per_s",
         "fp16": "gpu_peak_fp16_flop_per_s"}


def covers(row: Mapping[str, Any]) -> bool:
    """Whether :func:`breakdown_one` evaluates ``row`` (no op-level prices, no bucket timeline)."""
    return "priced_compute_bound_s" not in row and row.get("timeline_tau") is None


def _alpha_beta(messages: float, alpha: float, nbytes: float, bandwidth: float) -> float:
    """The Hockney time ``messages * alpha + bytes / bandwidth``
    (:func:`ddlscope.model.collectives.alpha_beta_s`), its division as Polars divides (:func:`_div`)."""
    return messages * alpha + _div(nbytes, bandwidth)


def _div(a: float, b: float) -> float:
    """IEEE division as Polars does it (x/0 -> +-inf, 0/0 -> nan), not Python's ZeroDivisionError."""
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def breakdown_one(row: Mapping[str, Any]) -> dict[str, Any]:
    """The model's outputs for one job: ``row`` (a :func:`ddlscope.model.jobs.job_row` dict, the
    Jobs columns) with :data:`ddlscope.model.step_time.OUTPUT_COLUMNS` added, the same numbers
    :func:`~ddlscope.model.step_time.breakdown_lazy` gives its one-row table (seconds, bytes, shares
    in [0, 1]; ``bottleneck`` and ``bottleneck_link`` as strings).

    Raises:
        ValueError: a row :func:`covers` does not cover (op-priced or with a bucket timeline).
        KeyError: a required Jobs column is missing.
    """
    if not covers(row):
        raise ValueError("breakdown_one: op-priced rows and bucket timelines go through the vectorised model "
                         "(ddlscope.model.step_time.breakdown)")
    r0 = {k: None for k in OPTIONAL_JOB_COLUMNS} | {k: v for k, (_, v, _) in SCHEDULE_COLUMNS.items()} | dict(row)
    arch = str(r0["architecture"])
    S, E = float(r0["dense_param_bytes"]), float(r0["sparse_bytes_per_step"])

    # -- pass 1: placement, effective bandwidths --------------------------------------------------
    num_gpus = int(r0["num_workers"]) * int(r0["gpus_per_worker"])
    servers = int(r0["num_servers"])
    per_server = (num_gpus + servers - 1) // servers
    p, g, m = float(num_gpus), float(per_server), float(servers)
    rr = float(min(per_server, int(r0["gpus_per_pcie_root"])))
    k = float(r0["num_gradient_tensors"])

    def eff(link: str, system_eff: str) -> float:
        v = r0[link]
        return float(r0[system_eff]) if v is None else float(v)

    B_pcie = float(r0["pcie_bandwidth_bytes_per_s"]) * float(r0["eff_pcie"])
    B_pcie_coll = float(r0["pcie_bandwidth_bytes_per_s"]) * eff("pcie_link_efficiency", "eff_pcie")
    B_nv = float(r0["nvlink_bandwidth_bytes_per_s"]) * eff("nvlink_link_efficiency", "eff_nvlink")
    B_nic = float(r0["nic_bandwidth_bytes_per_s"]) * eff("nic_link_efficiency", "eff_network")
    precision = str(r0["precision"])
    peak = float(r0[_PEAK.get(precision, "gpu_peak_bf16_flop_per_s")])
    workers_per_server = float((int(r0["num_workers"]) + servers - 1) // servers)
    ps_shards = float(max(int(r0["num_ps"]), 1))
    flat = float(r0["flat_ring"]) if servers > 1 else 0.0
    sp = 1.0 if E > 0 else 0.0
    has_nv = float(r0["nvlink_bandwidth_bytes_per_s"]) > 0
    is_host_ps = 1.0 if arch in ("1wng", "ps_worker") else 0.0
    is_ring = 1.0 if arch in ("allreduce_local", "allreduce_cluster", "pearl") else 0.0
    is_gather = 1.0 if arch in ("allreduce_local", "allreduce_cluster") else 0.0
    is_pearl = 1.0 if arch == "pearl" else 0.0
    is_ps = arch == "ps_worker"

    # -- pass 2: data I/O, computation, bytes and messages per link class -------------------------
    intra_bytes = (is_ring * (1 - flat) * ring_allreduce_bytes_per_rank(S, g)
                   + is_gather * ring_allgather_bytes_per_rank(g * m * E, g)
                   + is_pearl * 2 * alltoall_bytes_to_peers(E, p, g - 1))
    intra_msgs = (is_ring * (1 - flat) * k * ring_allreduce_steps(g)
                  + is_gather * sp * ring_allgather_steps(g)
                  + is_pearl * sp * 2 * (g - 1))
    nics = float(r0["nics_per_server"])
    worker_bytes = S + float(r0["gpus_per_worker"]) * E
    ps_net_bytes = 2 * max(workers_per_server * worker_bytes / nics,
                           float(r0["num_workers"]) * worker_bytes / ps_shards)
    ring_net_bytes = (is_ring * ((1 - flat) * ring_allreduce_bytes_per_rank(S, m)
                                 + flat * ring_allreduce_bytes_per_rank(S, p))
                      + is_gather * g * ring_allgather_bytes_per_rank(m * E, m)
                      + is_pearl * 2 * g * alltoall_bytes_to_peers(E, p, p - g)) / nics
    compute_bound_s = _div(float(r0["compute_bound_flops"]), peak * float(r0["eff_compute"]))
    memory_bound_s = max(
        _div(float(r0["memory_bound_bytes"]) * float(r0["memory_bound_scale"]),
             float(r0["gpu_memory_bandwidth_bytes_per_s"]) * float(r0["eff_memory"])),
        _div(float(r0["memory_bound_flops"]), float(r0["gpu_peak_fp32_flop_per_s"]) * float(r0["eff_compute"])),
    )
    host_s = 0.0
    storage_s = _div(g * float(r0["stored_input_bytes"]),
                     float(r0["storage_read_bytes_per_s"]) * float(r0["eff_storage"]))
    table = float(r0["embedding_table_bytes"])
    peak_mem = r0["peak_memory_bytes"]
    needed = None if peak_mem is None else float(peak_mem) - table * ((1.0 if is_ps else 0.0) + is_pearl * (1 - 1 / p))
    input_bytes = float(r0["input_bytes"])
    h2d_s = float(r0["pcie_latency_s"]) + rr * input_bytes / B_pcie if input_bytes > 0 else 0.0
    host_bytes = is_host_ps * 2 * rr * (S + E)
    host_msgs = is_host_ps * 2 * k
    network_bytes = ps_net_bytes if is_ps else ring_net_bytes
    network_msgs = (2 * math.ceil(k / ps_shards) if is_ps else
                    is_ring * k * ((1 - flat) * ring_allreduce_steps(m) + flat * ring_allreduce_steps(p))
                    + is_gather * sp * ring_allgather_steps(m) + is_pearl * sp * 2 * (p - g))

    # -- pass 3: the intra-server traffic on NVLink where the server has it, else on PCIe -----------
    data_io_s = storage_s + h2d_s
    pcie_bytes = host_bytes + (0.0 if has_nv else intra_bytes)
    pcie_msgs = host_msgs + (0.0 if has_nv else intra_msgs)
    nvlink_bytes = intra_bytes if has_nv else 0.0
    nvlink_s = _alpha_beta(intra_msgs, float(r0["nvlink_latency_s"]), intra_bytes, B_nv) if has_nv else 0.0
    network_s = _alpha_beta(network_msgs, float(r0["nic_latency_s"]), network_bytes, B_nic)
    intra_on_pcie = 0.0 if has_nv else intra_bytes
    pcie_s = (_alpha_beta(pcie_msgs, float(r0["pcie_latency_s"]), pcie_bytes - intra_on_pcie, B_pcie)
              + _div(intra_on_pcie, B_pcie_coll))
    comm_s = pcie_s + nvlink_s + network_s

    # -- overlap and step ------------------------------------------------------------------------
    compute_s = compute_bound_s + memory_bound_s
    fraction = r0["overlap_fraction"]
    if fraction is not None:
        sync_wait_s = 0.0
        exposed_comm_s = comm_s - min(float(fraction) * comm_s, compute_s)
    else:
        exposed_comm_s, sync_wait_s = _scheduled(r0, arch, comm_s, compute_s, S, E, p)
    step_s = data_io_s + compute_s + exposed_comm_s + host_s
    launch_exposed_s = max(exposed_comm_s - sync_wait_s - comm_s, 0.0)
    hidden_comm_s = comm_s + sync_wait_s + launch_exposed_s - exposed_comm_s

    # -- shares and bottlenecks ---------------------------------------------------------------------
    exposed_per_comm = exposed_comm_s / comm_s if comm_s > 0 else 0.0
    link_exposed_per_comm = (exposed_comm_s - sync_wait_s - launch_exposed_s) / comm_s if comm_s > 0 else 0.0
    link_s = {"pcie": pcie_s, "nvlink": nvlink_s, "network": network_s}
    exposed = {x: link_s[x] * exposed_per_comm for x in LINKS}
    out: dict[str, Any] = dict(row)
    out.update(
        num_gpus=num_gpus, gpus_per_server_used=per_server, fits_placement=per_server <= int(r0["server_gpus"]),
        fits_gpu_memory=None if needed is None else needed <= float(r0["gpu_memory_bytes"]),
        gpu_memory_needed_bytes=needed,
        storage_s=storage_s, h2d_s=h2d_s, data_io_s=data_io_s, compute_bound_s=compute_bound_s,
        memory_bound_s=memory_bound_s, host_s=host_s, pcie_s=pcie_s, nvlink_s=nvlink_s, network_s=network_s,
        comm_s=comm_s, exposed_comm_s=exposed_comm_s, hidden_comm_s=hidden_comm_s, sync_wait_s=sync_wait_s,
        launch_exposed_s=launch_exposed_s,
        **{f"{x}_exposed_s": link_s[x] * link_exposed_per_comm for x in LINKS},
        **{f"{x}_hidden_s": link_s[x] * max(0.0, 1 - link_exposed_per_comm) for x in LINKS},
        step_s=step_s, samples_per_s=_div(float(r0["batch_size"]) * num_gpus, step_s),
        pcie_bytes=pcie_bytes, nvlink_bytes=nvlink_bytes, network_bytes=network_bytes,
        share_data_io=_div(data_io_s, step_s), share_compute_bound=_div(compute_bound_s, step_s),
        share_memory_bound=_div(memory_bound_s, step_s),
        **{f"share_{x}": _div(exposed[x], step_s) for x in LINKS},
        share_comm=_div(exposed_comm_s, step_s), share_host=0.0,
    )
    candidates = [compute_bound_s if x == "compute_bound" else memory_bound_s if x == "memory_bound"
                  else data_io_s if x == "data_io" else exposed[x] for x in COMPONENTS]
    out["bottleneck"] = _argmax(COMPONENTS, candidates, None)
    out["bottleneck_link"] = _argmax(LINKS, [link_s[x] for x in LINKS], "none")
    return {k: out[k] for k in (*row.keys(), *(o for o in OUTPUT_COLUMNS if o not in row))}


def _argmax(names: tuple[str, ...], values: list[float], none_label: str | None) -> str:
    """The first name of the largest value (ties: the first), ``none_label`` when the largest is
    <= 0: :func:`ddlscope.model.step_time._argmax` on floats (a later value wins only when it
    exceeds the running maximum of those before it)."""
    best, label = values[0], names[0]
    for name, v in zip(names[1:], values[1:], strict=True):
        if v > best:
            label = name
        best = max(best, v)
    if none_label is not None and best <= 0:
        return none_label
    return label


def _scheduled(r0: Mapping[str, Any], arch: str, comm_s: float, compute_s: float, S: float, E: float,
               p: float) -> tuple[float, float]:
    """``(exposed_comm_s, sync_wait_s)`` of the scheduled overlap: the passes of
    :func:`ddlscope.model.overlap.schedule_passes` on floats (the closed-form bucket schedule)."""
    bucket, first = float(r0["bucket_bytes"]), float(r0["first_bucket_bytes"])
    L = float(r0["collective_launch_s"])
    has_comm = comm_s > 0
    C = comm_s * S / max(S + E, 1.0)
    T = float(r0["backward_fraction"]) * compute_s
    B = 1 + math.ceil(max(S - first, 0.0) / bucket) if S > 0 else 0.0
    inv = 1.0 / max(S, 1.0)
    wait = float(r0["skew_sigma"]) * math.sqrt(2 * math.log(max(p, 1.0))) * compute_s if has_comm else 0.0
    u1 = min(S, first) * inv
    u2 = min(S, first + bucket) * inv
    v = min(S, first + (B - 2) * bucket) * inv if B >= 2 else 1.0
    w = min(S, first + (B - 3) * bucket) * inv if B >= 3 else 0.0
    n = min(B, 2.0)
    ring = max(max(T * (u1 - 1) + B * L + C, T * (u2 - 1) + (B - 1) * L + C * (1 - u1),
                   T * (v - 1) + n * L + C * (1 - w), L + C * (1 - v)), 0.0)
    kk = max(float(r0["num_gradient_tensors"]), 1.0)

    def equal_buckets(cs: float, window: float) -> float:
        return max(cs + kk * L - (1 - 1 / kk) * window, cs / kk + L)

    pull = equal_buckets(0.5 * C, 0.5 * T) if float(r0["ps_pipelined"]) > 0 else 0.5 * C + kk * L
    push_pull = equal_buckets(0.5 * C, T) + pull
    dense_exposed = 0.0 if S <= 0 else push_pull if arch in ("ps_worker", "1wng") else ring
    exposed = dense_exposed + (comm_s - C) + wait if has_comm else 0.0
    return exposed, wait
