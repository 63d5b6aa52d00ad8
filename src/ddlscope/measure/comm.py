"""Collectives: which collective each communication kernel runs, its message size and bandwidth.

**Collective.** In order of preference: the kernel's ``Collective name`` argument (PyTorch >= 2.2
with NCCL metadata), the innermost ``nccl:*`` annotation around the kernel's launch call (e.g.
``nccl:all_to_all`` around the ``SendRecv`` kernels that implement an all-to-all), the
``Collective name`` argument of an enclosing ``record_param_comms`` operator, and last the kernel
name (the ``[[kernel]]`` rules). Names map to collectives by the ``[[collective]]`` rules.

**Message size** ``S`` (bytes), in the nccl-tests convention (NVIDIA nccl-tests,
doc/PERFORMANCE.md): the buffer size for all-reduce, broadcast, reduce and send/recv; the *total*
(gathered) output for all-gather; the total input for reduce-scatter and all-to-all. Sources in
order: the kernel's ``In msg nelems`` / ``Out msg nelems`` / ``dtype`` / ``Group size``
arguments, the same arguments of an enclosing ``record_param_comms`` operator, the ``Input Dims``
and ``Input type`` the profiler records on the ``nccl:*`` annotation (with ``record_shapes``; for
``_all_gather_base`` that is the local shard, so ``S = shard x group size``). Without any of these
the size is unknown (null) and so is the bandwidth.

**Bandwidth** per call (all kernels of one annotated call; ``t`` = first kernel start to last
kernel end; ``p`` = the group size), both in GB/s (1e9 bytes/s), both by
:mod:`ddlscope.model.collectives` (:func:`~ddlscope.model.collectives.algbw`,
:func:`~ddlscope.model.collectives.busbw`), NVIDIA nccl-tests' definitions (doc/PERFORMANCE.md;
``getBw`` of src/alltoall.cu and src/sendrecv.cu):

- ``algbw_gb_s`` = ``S / t``, the *algorithm* bandwidth: the collective's size over its time;
- ``busbw_gb_s`` = ``algbw x bus_factor(collective, p)``, the *bus* bandwidth: the bytes each
  rank's link carries per second, comparable with the link's peak whatever the collective and
  ``p``; ``bus_factor`` = ``2 (p-1)/p`` all-reduce, ``(p-1)/p`` all-gather, reduce-scatter and
  all-to-all, 1 broadcast, reduce and send/recv; null for a call whose collective is ``other``
  (no nccl-tests definition).

A kernel's time includes waiting for the slowest peer, so these are *achieved* bandwidths, a lower
bound on what the links can do.
"""

from __future__ import annotations

import polars as pl

from ddlscope.measure.rules import COLLECTIVES, TraceRules, collective_expr
from ddlscope.measure.tables import enclosing
from ddlscope.model.collectives import algbw, busbw

c = pl.col

DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "int": 4, "int32": 4, "uint32": 4, "unsigned int": 4,
    "double": 8, "float64": 8, "long": 8, "int64": 8, "long int": 8, "uint64": 8,
    "half": 2, "float16": 2, "c10::half": 2, "bfloat16": 2, "c10::bfloat16": 2, "bf16": 2, "short": 2, "int16": 2,
    "byte": 1, "char": 1, "signed char": 1, "unsigned char": 1, "int8": 1, "uint8": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
}
"""Bytes per element of the dtype names PyTorch writes in traces (``Float``, ``c10::Half``,
``signed char``, ...; matched case-insensitively). Source: the C++ types' sizes."""


def _elem_bytes(dtype: pl.Expr) -> pl.Expr:
    return dtype.str.to_lowercase().str.strip_chars().replace_strict(DTYPE_BYTES, default=None, return_dtype=pl.Int64)


def _first_tensor_numel(dims_json: pl.Expr) -> pl.Expr:
    """Elements of the first tensor argument in a raw ``Input Dims`` JSON (null if none)."""
    first = dims_json.str.json_decode(pl.List(pl.List(pl.Int64))).list.first()
    return pl.when(first.list.len() > 0).then(first.list.eval(pl.element().product()).list.first())


def _first_type(types_json: pl.Expr) -> pl.Expr:
    return types_json.str.json_decode(pl.List(pl.String)).list.first()


def resolve_collectives(gpu: pl.DataFrame, cpu: pl.DataFrame, rules: TraceRules, world_size: int) -> pl.DataFrame:
    """Communication activities with their collective, call and message size.

    Args:
        gpu: the ``gpu`` table (:class:`~ddlscope.measure.tables.TraceTables`).
        cpu: the ``cpu`` table.
        world_size: ranks of the job (the group size when the trace records none).

    Returns:
        ``gpu`` with ``kind`` replaced by the resolved collective for communication rows, and
        columns ``call_id`` (the enclosing annotation's ``cpu_id``, else ``-(row+1)``),
        ``size_bytes`` (nccl-tests ``S``, null if unknown), ``group_size``, ``msg_dtype``,
        ``size_source``.
    """
    is_comm = c("class") == "communication"
    comm = gpu.with_row_index("_row").filter(is_comm)
    ann = cpu.filter(c("name").str.starts_with("nccl:")).select(
        "rank", "pid", "tid", "ts_ns", "end_ns", a_id="cpu_id", a_name="name", a_dims="input_dims",
        a_types="input_types")
    op = cpu.filter(c("collective_name").is_not_null()).select(
        "rank", "pid", "tid", "ts_ns", "end_ns", o_id="cpu_id", o_coll="collective_name", o_in="in_msg_nelems",
        o_out="out_msg_nelems", o_group="group_size", o_dtype="dtype")
    by = ["rank", "launch_pid", "launch_tid"]
    comm = enclosing(comm, ann, at="launch_ns", by=by, span_by=["rank", "pid", "tid"],
                     keep=["a_id", "a_name", "a_dims", "a_types"])
    comm = enclosing(comm, op, at="launch_ns", by=by, span_by=["rank", "pid", "tid"],
                     keep=["o_id", "o_coll", "o_in", "o_out", "o_group", "o_dtype"])
    kind = pl.coalesce(
        collective_expr(c("collective_name"), rules),
        collective_expr(c("a_name"), rules),
        collective_expr(c("o_coll"), rules),
        c("kind"),
    )
    ann_numel = _first_tensor_numel(c("a_dims"))
    ann_dtype = _first_type(c("a_types"))
    group = pl.coalesce(c("group_size"), c("o_group"), pl.lit(world_size, pl.Int64))
    src_kernel = c("in_msg_nelems").is_not_null() & _elem_bytes(c("dtype")).is_not_null()
    src_op = c("o_in").is_not_null() & _elem_bytes(c("o_dtype")).is_not_null()
    src_ann = ann_numel.is_not_null() & _elem_bytes(ann_dtype).is_not_null()
    in_bytes = (
        pl.when(src_kernel).then(c("in_msg_nelems") * _elem_bytes(c("dtype")))
        .when(src_op).then(c("o_in") * _elem_bytes(c("o_dtype")))
        .when(src_ann).then(ann_numel * _elem_bytes(ann_dtype))
    )
    out_bytes = (
        pl.when(src_kernel).then(c("out_msg_nelems") * _elem_bytes(c("dtype")))
        .when(src_op).then(c("o_out") * _elem_bytes(c("o_dtype")))
    )
    comm = comm.with_columns(kind=kind, group_size=group).with_columns(
        size_bytes=pl.when(c("kind") == "all_gather")
        .then(pl.coalesce(out_bytes, in_bytes * c("group_size")))
        .otherwise(in_bytes).cast(pl.Float64),
        msg_dtype=pl.coalesce(c("dtype"), c("o_dtype"), ann_dtype),
        size_source=pl.when(src_kernel).then(pl.lit("kernel args"))
        .when(src_op).then(pl.lit("record_param_comms args"))
        .when(src_ann).then(pl.lit("nccl annotation shapes"))
        .otherwise(pl.lit("unknown")),
        call_id=pl.coalesce(c("a_id"), -(c("_row").cast(pl.Int64) + 1)),
    )
    keep = ["_row", "kind", "group_size", "size_bytes", "msg_dtype", "size_source", "call_id"]
    out = gpu.with_row_index("_row").drop("kind", "group_size").join(comm.select(keep), on="_row", how="left")
    return out.with_columns(kind=pl.coalesce(c("kind"), gpu["kind"])).drop("_row").select(
        *gpu.columns, "call_id", "size_bytes", "msg_dtype", "size_source")


def collective_calls(gpu: pl.DataFrame) -> pl.DataFrame:
    """One row per collective call (the kernels launched inside one ``nccl:*`` annotation; a
    kernel without one is its own call).

    Args:
        gpu: output of :func:`resolve_collectives` with an ``iteration`` column (the window the
            call's first kernel starts in).

    Returns:
        ``rank, device, iteration, call_id, collective, start_ns, end_ns, time_us, kernels,
        size_bytes, group_size, msg_dtype, size_source, algbw_gb_s, busbw_gb_s``:
        ``algbw_gb_s`` = ``size_bytes / t`` and ``busbw_gb_s`` = ``algbw_gb_s x
        bus_factor(collective, group_size)`` (nccl-tests; module docstring), GB/s = 1e9 bytes/s;
        null when the size is unknown or the call takes no time, ``busbw_gb_s`` also for an
        ``other`` collective.
    """
    calls = (
        gpu.filter(c("class") == "communication")
        .group_by("rank", "device", "call_id")
        .agg(
            iteration=c("iteration").sort_by("start_ns").first(),
            collective=c("kind").first(),
            start_ns=c("start_ns").min(), end_ns=c("end_ns").max(), kernels=pl.len(),
            size_bytes=c("size_bytes").first(), group_size=c("group_size").first(),
            msg_dtype=c("msg_dtype").first(), size_source=c("size_source").first(),
        )
        .with_columns(time_s=(c("end_ns") - c("start_ns")) / 1e9)
    )
    t = pl.when(c("time_s") > 0).then(c("time_s"))
    return (
        calls.with_columns(
            time_us=c("time_s") * 1e6,
            algbw_gb_s=algbw(c("size_bytes"), t) / 1e9,
            busbw_gb_s=busbw(c("collective"), c("size_bytes"), t, c("group_size").cast(pl.Float64)) / 1e9,
        )
        .drop("time_s")
        .sort("rank", "device", "start_ns")
    )


def collectives_per_iteration(calls: pl.DataFrame, breakdown_ns: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, device, iteration, collective): ``calls``, ``size_bytes`` (total), ``mean_size_bytes``,
    ``time_us`` (sum of call times), ``busy_us`` (union on the timeline), ``exposed_us`` (not
    overlapped by computation), ``algbw_gb_s`` and ``busbw_gb_s`` (GB/s = 1e9 bytes/s, over the
    calls with a known size: their total bytes, and their total bus bytes ``sum(busbw_i t_i)``, over
    their total time; nccl-tests' algorithm and bus bandwidth, module docstring), ``size_source``."""
    known = c("size_bytes").is_not_null() & (c("time_us") > 0)
    agg = calls.filter(c("iteration").is_not_null()).group_by("rank", "device", "iteration", "collective").agg(
        calls=pl.len(),
        size_bytes=c("size_bytes").sum(),
        mean_size_bytes=c("size_bytes").mean(),
        time_us=c("time_us").sum(),
        algbw_gb_s=(c("size_bytes").filter(known).sum() / (c("time_us").filter(known).sum() / 1e6)) / 1e9,
        busbw_gb_s=((c("busbw_gb_s") * c("time_us")).filter(known).sum() / c("time_us").filter(known).sum()),
        size_source=c("size_source").mode().first(),
        unknown_size_calls=c("size_bytes").is_null().sum(),
    )
    cols = [
        pl.struct(collective=pl.lit(k.removeprefix("comm_")), exposed_ns=c(f"{k}_ns"), busy_ns=c(f"busy_{k}_ns"))
        for k in (f"comm_{x}" for x in COLLECTIVES)
    ]
    tl = (
        breakdown_ns.select("rank", "device", "iteration", _s=pl.concat_list(cols))
        .explode("_s").unnest("_s")
    )
    return (
        agg.join(tl, on=["rank", "device", "iteration", "collective"], how="left")
        .with_columns(exposed_us=c("exposed_ns") / 1000.0, busy_us=c("busy_ns") / 1000.0,
                      algbw_gb_s=pl.when(c("algbw_gb_s").is_finite()).then(c("algbw_gb_s")),
                      busbw_gb_s=pl.when(c("busbw_gb_s").is_finite()).then(c("busbw_gb_s")))
        .drop("exposed_ns", "busy_ns")
        .sort("rank", "device", "iteration", "collective")
    )

