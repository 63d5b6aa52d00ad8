"""Collectives across local processes with ``torch.distributed``: all-reduce, all-gather and
all-to-all over a range of sizes, timed as nccl-tests times them, and the alpha-beta fit per
collective.

``p`` processes are started (``spawn``), one per device: gloo on CPU (each process limited to its
device's cores), NCCL on GPUs (one GPU each). Every size is warmed up, then all ranks pass a
barrier and run ``iters`` back-to-back collectives; the time of a block is the slowest rank's mean
(``max`` over ranks, as a step waits for the last rank), and the median of ``repeats`` blocks is
kept (the micro-benchmarks' convention, :mod:`ddlscope.calibrate.microbench`). Sizes follow nccl-tests: the
all-reduce size is the buffer, the all-gather size the *total* output (each rank contributes
``S/p``), the all-to-all size the buffer each rank sends in all (``S/p`` to each peer).
``algbw = S / t`` and ``busbw = algbw * f(p)`` (nccl-tests doc/PERFORMANCE.md).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence

import polars as pl

from ddlscope.calibrate.fit import AlphaBetaFit, fit_alpha_beta
from ddlscope.model.collectives import bus_factor, canonical_collective

COLLECTIVE_SIZES: tuple[int, ...] = tuple(4 * 8**k for k in range(1, 9))
"""Default collective sizes (bytes): 32 B to 64 MiB by factors of 8."""
BENCH_COLLECTIVES: tuple[str, ...] = ("all_reduce", "all_gather", "all_to_all")

COLLECTIVE_COLUMNS: dict[str, str] = {
    "collective": "all_reduce, all_gather or all_to_all",
    "backend": "gloo or nccl",
    "ranks": "processes p",
    "size_bytes": "collective size S (nccl-tests' definition)",
    "time_s": "slowest rank's mean time per collective",
    "algbw_gb_s": "S / t, GB/s",
    "busbw_gb_s": "algbw * f(p), GB/s",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, backend: str, threads: int, sizes: Sequence[int],
            collectives: Sequence[str], iters: int, repeats: int, queue) -> None:  # pragma: no cover - runs in children
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    try:
        for coll in collectives:
            for size in sizes:
                n = max(size // 4 // world * world, world)
                x = torch.ones(n, device=device)
                if coll == "all_reduce":
                    def op(x=x):
                        dist.all_reduce(x)
                elif coll == "all_gather":
                    out = torch.empty(n, device=device)
                    part = torch.ones(n // world, device=device)

                    def op(out=out, part=part):
                        gather(out, part)
                else:
                    y = torch.empty(n, device=device)

                    def op(x=x, y=y):
                        dist.all_to_all_single(y, x)
                op()
                op()
                if backend == "nccl":
                    torch.cuda.synchronize()
                blocks = []
                for _ in range(repeats):
                    dist.barrier()
                    t0 = time.perf_counter()
                    for _ in range(iters):
                        op()
                    if backend == "nccl":
                        torch.cuda.synchronize()
                    mean = torch.tensor([(time.perf_counter() - t0) / iters])
                    dist.all_reduce(mean, op=dist.ReduceOp.MAX)
                    blocks.append(float(mean))
                if rank == 0:
                    queue.put((coll, n * 4, sorted(blocks)[len(blocks) // 2]))
    finally:
        dist.destroy_process_group()
        if rank == 0:
            queue.put(None)


def bench_collectives(
    *,
    ranks: int = 2,
    backend: str = "gloo",
    threads_per_rank: int = 1,
    sizes: Sequence[int] = COLLECTIVE_SIZES,
    collectives: Sequence[str] = BENCH_COLLECTIVES,
    iters: int = 10,
    repeats: int = 3,
    progress: Callable[[], None] | None = None,
    timeout_s: float = 600.0,
) -> pl.DataFrame:
    """Time ``collectives`` over ``sizes`` on ``ranks`` local processes: columns
    :data:`COLLECTIVE_COLUMNS`.

    Raises:
        ValueError: fewer than 2 ranks, an unknown collective or backend.
        RuntimeError: a process failed or the run exceeded ``timeout_s``.
    """
    import torch.multiprocessing as mp

    if ranks < 2:
        raise ValueError(f"ranks: collectives need >= 2 processes, got {ranks}")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend: expected gloo or nccl, got {backend!r}")
    try:
        collectives = [canonical_collective(c) for c in collectives]
    except ValueError as e:
        raise ValueError(f"collectives: {e}; expected some of {BENCH_COLLECTIVES}") from None
    bad = set(collectives) - set(BENCH_COLLECTIVES)
    if bad:
        raise ValueError(f"collectives: unknown {sorted(bad)}; expected some of {BENCH_COLLECTIVES}")
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, ranks, port, backend, threads_per_rank, list(sizes),
                                               list(collectives), iters, repeats, queue), daemon=True)
             for r in range(ranks)]
    for p in procs:
        p.start()
    rows = []
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if time.monotonic() > deadline:
                raise RuntimeError(f"collectives: no result within {timeout_s:.0f} s")
            if not queue.empty():
                item = queue.get()
                if item is None:
                    break
                coll, size, t = item
                rows.append({"collective": coll, "backend": backend, "ranks": ranks, "size_bytes": float(size),
                             "time_s": t, "algbw_gb_s": size / t / 1e9,
                             "busbw_gb_s": size / t / 1e9 * bus_factor(coll, ranks)})
                if progress:
                    progress()
                continue
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"collectives: process {procs.index(dead[0])} exited with code {dead[0].exitcode}")
            time.sleep(0.01)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    return pl.DataFrame(rows)


def fit_collectives(frame: pl.DataFrame, min_size_bytes: float = 0.0) -> dict[str, AlphaBetaFit]:
    """The alpha-beta fit of each collective of a :func:`bench_collectives` frame (sizes >=
    ``min_size_bytes``)."""
    out = {}
    for (coll,), part in frame.filter(pl.col("size_bytes") >= min_size_bytes).group_by("collective",
                                                                                        maintain_order=True):
        out[coll] = fit_alpha_beta(part["size_bytes"].to_numpy(), part["time_s"].to_numpy(),
                                   collective=coll, ranks=int(part["ranks"][0]))
    return out
