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

**Uneven all-to-all.** The bus bandwidth of an all-to-all is the bytes that cross the rank's link
over ``t``, its own chunk excluded: ``max(S_in - own_in, S_out - own_out) / t``, with the chunks
from the ``In split size`` / ``Out split size`` NCCL metadata of the kernel or its
``record_param_comms`` operator; for even splits that is nccl-tests' ``(p-1)/p x S / t``. Without
complete splits (missing, or truncated by Kineto after 30 values) even splits are assumed and the
call's ``bw_approx`` is true (:func:`_all_to_all_link_bytes`).

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
        ``size_source``, ``link_bytes`` (all-to-all: the bytes that cross the rank's link, its own
        chunk excluded; :func:`_all_to_all_link_bytes`) and ``bw_approx`` (the all-to-all's splits
        are missing or truncated: even splits assumed).
    """
    is_comm = c("class") == "communication"
    comm = gpu.with_row_index("_row").filter(is_comm)
    ann = cpu.filter(c("name").str.starts_with("nccl:")).select(
        "rank", "pid", "tid", "ts_ns", "end_ns", a_id="cpu_id", a_name="name", a_dims="input_dims",
        a_types="input_types")
    op = cpu.filter(c("collective_name").is_not_null()).select(
        "rank", "pid", "tid", "ts_ns", "end_ns", o_id="cpu_id", o_coll="collective_name", o_in="in_msg_nelems",
        o_out="out_msg_nelems", o_group="group_size", o_dtype="dtype", o_in_split="in_split",
        o_out_split="out_split", o_pg="pg_ranks")
    by = ["rank", "launch_pid", "launch_tid"]
    comm = enclosing(comm, ann, at="launch_ns", by=by, span_by=["rank", "pid", "tid"],
                     keep=["a_id", "a_name", "a_dims", "a_types"])
    comm = enclosing(comm, op, at="launch_ns", by=by, span_by=["rank", "pid", "tid"],
                     keep=["o_id", "o_coll", "o_in", "o_out", "o_group", "o_dtype", "o_in_split", "o_out_split",
                           "o_pg"])
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
        _out_bytes=out_bytes.cast(pl.Float64),
        _in_split=pl.coalesce(c("in_split"), c("o_in_split")),
        _out_split=pl.coalesce(c("out_split"), c("o_out_split")),
        _pg=pl.coalesce(c("pg_ranks"), c("o_pg")),
    )
    comm = _all_to_all_link_bytes(comm, world_size)
    keep = ["_row", "kind", "group_size", "size_bytes", "msg_dtype", "size_source", "call_id", "link_bytes",
            "bw_approx"]
    out = gpu.with_row_index("_row").drop("kind", "group_size").join(comm.select(keep), on="_row", how="left")
    return out.with_columns(kind=pl.coalesce(c("kind"), gpu["kind"])).drop("_row").select(
        *gpu.columns, "call_id", "size_bytes", "msg_dtype", "size_source", "link_bytes", "bw_approx")


def _int_list(text: pl.Expr) -> pl.Expr:
    """``[3, 5, ...]`` text -> a list of Int64 (an element that is not an integer, e.g. Kineto's
    ``...`` of a truncated list, becomes null); ``[]`` -> an empty list."""
    inner = text.str.strip_chars().str.strip_prefix("[").str.strip_suffix("]").str.strip_chars()
    return pl.when(inner == "").then(pl.lit([], pl.List(pl.Int64))).otherwise(
        inner.str.split(",").list.eval(pl.element().str.strip_chars().cast(pl.Int64, strict=False)))


def _all_to_all_link_bytes(comm: pl.DataFrame, world_size: int) -> pl.DataFrame:
    """``link_bytes`` and ``bw_approx`` of every communication row (see :func:`resolve_collectives`).

    For an all-to-all, the rank's own chunk stays in its memory; the link carries the other chunks:
    ``S_in - own_in`` sent and ``S_out - own_out`` received; ``link_bytes`` is the busier direction
    (a full-duplex link). The chunks come from the ``In split size`` / ``Out split size`` lists
    (PyTorch's NCCL metadata; for ``all_to_all_single`` counted in rows of dim 0, for the list form
    in elements: either way scaled so the list sums to the message), and the rank's own chunk is the
    one at its position in ``Process Group Ranks`` (its rank in a group of the whole world). An empty
    list means even splits (``own = S/p``). Where a list is missing, truncated (Kineto keeps 30
    values and writes ``...``), of another length than the group, or the rank's position is unknown,
    the splits are assumed even and ``bw_approx`` is true. Even splits give ``(p-1)/p x S``, the
    nccl-tests all-to-all bus bytes. Other collectives: ``link_bytes`` null, ``bw_approx`` false.
    """
    a2a = comm.filter((c("kind") == "all_to_all") & c("size_bytes").is_not_null())
    if a2a.is_empty():
        return comm.with_columns(link_bytes=pl.lit(None, pl.Float64), bw_approx=pl.lit(False))
    lists = a2a.select(
        "_row", "rank", p=c("group_size").cast(pl.Float64), s_in=c("size_bytes"),
        s_out=pl.coalesce(c("_out_bytes"), c("size_bytes")),
        l_in=_int_list(c("_in_split")), l_out=_int_list(c("_out_split")), pg=_int_list(c("_pg")),
        in_text=c("_in_split"), out_text=c("_out_split"),
    )
    pos = (
        lists.select("_row", "rank", "pg").explode("pg")
        .with_columns(_i=pl.int_range(pl.len()).over("_row"))
        .filter(c("pg") == c("rank")).group_by("_row").agg(_own=c("_i").first())
    )
    lists = lists.join(pos, on="_row", how="left").with_columns(
        _own=pl.coalesce(c("_own"), pl.when(c("p") == world_size).then(c("rank"))))

    def own_chunk(total: str, lst: str, text: str) -> tuple[pl.Expr, pl.Expr]:
        n = c(lst).list.len()
        full = (c(text).is_not_null() & ~c(text).str.contains(r"\.\.\.") & (n == c("p"))
                & (c(lst).list.eval(pl.element().is_null()).list.any().not_()) & (c(lst).list.sum() > 0)
                & c("_own").is_not_null())
        even = c(text).is_not_null() & (n == 0)
        chunk = (pl.when(full).then(c(total) * c(lst).list.get(c("_own"), null_on_oob=True) / c(lst).list.sum())
                 .otherwise(c(total) / c("p")))
        return chunk, full | even

    own_in, exact_in = own_chunk("s_in", "l_in", "in_text")
    own_out, exact_out = own_chunk("s_out", "l_out", "out_text")
    link = lists.select(
        "_row", link_bytes=pl.max_horizontal(c("s_in") - own_in, c("s_out") - own_out).cast(pl.Float64),
        bw_approx=~(exact_in & exact_out))
    return comm.join(link, on="_row", how="left").with_columns(c("bw_approx").fill_null(False))


def collective_calls(gpu: pl.DataFrame) -> pl.DataFrame:
    """One row per collective call (the kernels launched inside one ``nccl:*`` annotation; a
    kernel without one is its own call).

    Args:
        gpu: output of :func:`resolve_collectives` with an ``iteration`` column (the window the
            call's first kernel starts in).

    Returns:
        ``rank, device, iteration, call_id, collective, start_ns, end_ns, time_us, kernels,
        size_bytes, group_size, msg_dtype, size_source, link_bytes, bw_approx, algbw_gb_s,
        busbw_gb_s``: ``algbw_gb_s`` = ``size_bytes / t`` and ``busbw_gb_s`` = ``algbw_gb_s x
        bus_factor(collective, group_size)`` (nccl-tests; module docstring), for an all-to-all
        ``link_bytes / t`` (its split sizes; even splits give nccl-tests' value), GB/s = 1e9 bytes/s;
        null when the size is unknown or the call takes no time, ``busbw_gb_s`` also for an
        ``other`` collective.
    """
    if "link_bytes" not in gpu.columns:  # rows not from resolve_collectives: nccl-tests' bus bytes
        gpu = gpu.with_columns(link_bytes=pl.lit(None, pl.Float64), bw_approx=pl.lit(False))
    calls = (
        gpu.filter(c("class") == "communication")
        .group_by("rank", "device", "call_id")
        .agg(
            iteration=c("iteration").sort_by("start_ns").first(),
            collective=c("kind").first(),
            start_ns=c("start_ns").min(), end_ns=c("end_ns").max(), kernels=pl.len(),
            size_bytes=c("size_bytes").first(), group_size=c("group_size").first(),
            msg_dtype=c("msg_dtype").first(), size_source=c("size_source").first(),
            link_bytes=c("link_bytes").first(), bw_approx=c("bw_approx").any(),
        )
        .with_columns(time_s=(c("end_ns") - c("start_ns")) / 1e9)
    )
    t = pl.when(c("time_s") > 0).then(c("time_s"))
    return (
        calls.with_columns(
            time_us=c("time_s") * 1e6,
            algbw_gb_s=algbw(c("size_bytes"), t) / 1e9,
            busbw_gb_s=pl.when(c("link_bytes").is_not_null()).then(c("link_bytes") / t / 1e9)
            .otherwise(busbw(c("collective"), c("size_bytes"), t, c("group_size").cast(pl.Float64)) / 1e9),
        )
        .drop("time_s")
        .sort("rank", "device", "start_ns")
    )


def collectives_per_iteration(calls: pl.DataFrame, breakdown_ns: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, device, iteration, collective): ``calls``, ``size_bytes`` (total), ``mean_size_bytes``,
    ``time_us`` (sum of call times), ``busy_us`` (union on the timeline), ``exposed_us`` (not
    overlapped by computation), ``algbw_gb_s`` and ``busbw_gb_s`` (GB/s = 1e9 bytes/s, over the
    calls with a known size: their total bytes, and their total bus bytes ``sum(busbw_i t_i)``, over
    their total time; nccl-tests' algorithm and bus bandwidth, module docstring), ``size_source``,
    ``bw_approx`` (any all-to-all call of the group assumed even splits)."""
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
        bw_approx=c("bw_approx").any(),
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

