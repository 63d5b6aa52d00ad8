"""The scheduled overlap (ddlscope.model.overlap): buckets queued behind the backward, the last one
exposed, the wait for the slowest rank; by hand and against a direct simulation of the queue."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddlscope.model.api import predict
from ddlscope.model.overlap import (
    SCHEDULE_INPUTS,
    bucket_timeline,
    schedule_arrays,
    skew_wait_s,
    timeline_exposed_s,
)
from ddlscope.specs.architecture import Architecture
from ddlscope.specs.workload import Workload

MIB = 2**20
c = pl.col


def closed_form(comm, window, S, bucket, first, launch) -> float:
    """The bucket queue's exposed time of the compiled schedule: all of ``comm`` dense (E = 0), the
    backward = ``window`` (compute = window, backward_fraction = 1), one rank (no wait)."""
    row = {"comm_s": comm, "compute_s": window, "dense_param_bytes": S, "sparse_bytes_per_step": 0.0,
           "num_gradient_tensors": 1.0, "ranks": 1.0, "skew_sigma": 0.0, "bucket_bytes": bucket,
           "first_bucket_bytes": first, "collective_launch_s": launch, "ps_pipelined": 1.0, "backward_fraction": 1.0,
           "overlap_fraction": math.nan}
    exposed, wait = schedule_arrays(np.array([False]), *(np.array([float(row[k])]) for k in SCHEDULE_INPUTS))
    assert wait[0] == 0.0
    return float(exposed[0])


def simulate(comm, window, S, bucket, first, launch) -> float:
    """The queue itself: DDP's bucket sizes, bucket k ready when the backward (uniform in bytes) has
    produced its last byte, served in order on one stream; exposed = end of the stream - backward."""
    sizes, left, cap = [], S, first
    while left > 0:
        b = min(cap, left)
        sizes.append(b)
        left -= b
        cap = bucket
    end, done = 0.0, 0.0
    for b in sizes:
        done += b
        ready = window * done / S
        end = max(end, ready) + launch + comm * b / S
    return end - window


def test_equal_buckets_hide_all_but_the_last():
    # S = 100 MiB in 4 buckets of 25 MiB (first bucket 25 MiB too), C = 0.4 s, T_b = 0.6 s:
    # ready at 0.15, 0.30, 0.45, 0.60, each 0.1 s: 0.15-0.25, 0.30-0.40, 0.45-0.55, 0.60-0.70;
    # exposed 0.1 = C / B = max(C / B, C - (1 - 1/B) T_b) = max(0.1, 0.4 - 0.45)
    assert closed_form(0.4, 0.6, 100 * MIB, 25 * MIB, 25 * MIB, 0.0) == pytest.approx(0.1)
    # C = 1 s: each 0.25 s, the queue backs up: 0.15-0.40-0.65-0.90-1.15; exposed 0.55 = 1 - 0.75 * 0.6
    assert closed_form(1.0, 0.6, 100 * MIB, 25 * MIB, 25 * MIB, 0.0) == pytest.approx(0.55)


def test_ddp_first_bucket_and_launch_latency():
    # S = 51 MiB: buckets 1, 25, 25 MiB (DDP), 0.01 s per MiB on the wire and produced, L = 1 ms:
    # ready 0.01, 0.26, 0.51; costs 0.011, 0.251, 0.251: 0.01-0.021, 0.26-0.511, 0.511-0.762
    # exposed = 0.762 - 0.51 = 0.252
    assert closed_form(0.51, 0.51, 51 * MIB, 25 * MIB, MIB, 1e-3) == pytest.approx(0.252)


def test_one_bucket_hides_nothing():
    # 0.5 MiB < the 1 MiB first bucket: one all-reduce after the whole backward
    assert closed_form(0.3, 2.0, 0.5 * MIB, 25 * MIB, MIB, 1e-4) == pytest.approx(0.3 + 1e-4)


@settings(max_examples=60, deadline=None)
@given(
    comm=st.floats(1e-4, 2.0), window=st.floats(0.0, 2.0), S=st.floats(1e3, 2e9),
    bucket=st.floats(1e5, 1e8), first=st.floats(1e4, 1e8), launch=st.floats(0.0, 1e-3),
)
def test_closed_form_equals_the_queue(comm, window, S, bucket, first, launch):
    if S / bucket > 3000:  # keep the simulated queue short
        S = bucket * 3000
    assert closed_form(comm, window, S, bucket, first, launch) == pytest.approx(
        simulate(comm, window, S, bucket, first, launch), rel=1e-9, abs=1e-12)


def test_skew_wait_expected_maximum():
    # sigma 0.01, compute 1 s, 8 ranks: 0.01 * sqrt(2 ln 8) = 0.01 * 2.03933 = 0.0203933 s; 1 rank: 0
    frame = pl.DataFrame({"t": [1.0, 1.0], "p": [8.0, 1.0], "s": [0.01, 0.01]})
    out = frame.select(skew_wait_s(c("t"), c("p"), c("s")))[:, 0].to_list()
    assert out == pytest.approx([0.01 * math.sqrt(2 * math.log(8)), 0.0])


def toy_workload() -> Workload:
    return Workload(batch_size=32, compute_bound_flops=1e12, memory_bound_bytes=50e9, input_bytes=10e6,
                    stored_input_bytes=2e6, dense_param_bytes=100e6, num_gradient_tensors=10)


def test_allreduce_local_scheduled_by_hand(toy_system):
    # toy system (tests/model/conftest.py), 4 GPUs on NVLink 100 GB/s, alpha 5 us: nvlink_s = 150e6 B /
    # 100e9 + 10 tensors x 6 steps x 5 us = 1.5 ms + 0.3 ms = 1.8 ms; compute 0.1 + 0.05 = 0.15 s, T_b = 0.1 s.
    # S = 100e6 B: 5 DDP buckets (1 MiB, 3 x 25 MiB, last 20,308,224 B); the last bucket after the
    # backward: L + C b_B / S = 20 us + 1.8 ms x 0.20308224 = 0.385548 ms.
    # wait for the slowest of 4: 0.01 sqrt(2 ln 4) x 0.15 s = 2.497664 ms
    r = predict(toy_workload(), Architecture(kind="allreduce_local", num_workers=4), toy_system).row(0, named=True)
    assert r["nvlink_s"] == pytest.approx(1.8e-3)
    wait = 0.01 * math.sqrt(2 * math.log(4)) * 0.15
    assert r["sync_wait_s"] == pytest.approx(wait)
    assert r["exposed_comm_s"] == pytest.approx(20e-6 + 1.8e-3 * 20308224 / 100e6 + wait)
    assert r["step_s"] == pytest.approx(r["data_io_s"] + 0.15 + r["exposed_comm_s"])
    # the per-link split: all the communication is on NVLink; the wait is reported apart
    assert r["nvlink_exposed_s"] == pytest.approx(20e-6 + 1.8e-3 * 20308224 / 100e6)
    assert r["nvlink_hidden_s"] == pytest.approx(1.8e-3 - r["nvlink_exposed_s"])
    assert r["hidden_comm_s"] == pytest.approx(r["nvlink_hidden_s"])
    assert r["pcie_exposed_s"] == 0.0 and r["network_exposed_s"] == 0.0


def test_launch_latency_beyond_the_links_time_is_reported_apart(toy_system):
    # a backward of 0.01 ms (compute 1e8 FLOP at 10 TFLOP/s, no memory-bound work) hides nothing of the
    # 1.8 ms all-reduce: the queue's first term wins, T (u1 - 1) + B L + C = -1e-5 x 0.9895 + 5 x 20 us
    # + 1.8 ms, which is more than the links' 1.8 ms: the excess, 100 us - 9.9 us = 90.1 us, is launch
    # latency, not NVLink time (before, nvlink_exposed_s exceeded nvlink_s and hidden_comm_s was < 0)
    w = toy_workload().model_copy(update={"compute_bound_flops": 1.5e8, "memory_bound_bytes": 0.0})
    r = predict(w, Architecture(kind="allreduce_local", num_workers=4), toy_system).row(0, named=True)
    T = 1e-5  # the backward: 2/3 of the 15 us compute
    u1 = 1048576 / 100e6  # the first bucket's share of the gradient
    launch = T * (u1 - 1) + 5 * 20e-6
    assert r["nvlink_s"] == pytest.approx(1.8e-3)
    assert r["launch_exposed_s"] == pytest.approx(launch, rel=1e-9)
    assert r["nvlink_exposed_s"] == pytest.approx(1.8e-3, rel=1e-12) and r["nvlink_hidden_s"] == pytest.approx(0.0)
    assert r["hidden_comm_s"] == pytest.approx(0.0, abs=1e-15)
    assert r["exposed_comm_s"] == pytest.approx(r["nvlink_exposed_s"] + r["sync_wait_s"] + r["launch_exposed_s"])
    # with the backward long enough to hide the launches, none is reported apart
    long = predict(toy_workload(), Architecture(kind="allreduce_local", num_workers=4), toy_system).row(0, named=True)
    assert long["launch_exposed_s"] == 0.0


def test_explicit_policies_keep_their_meaning(toy_system):
    arch = Architecture(kind="allreduce_local", num_workers=4)
    none = predict(toy_workload(), arch, toy_system, overlap="none").row(0, named=True)
    full = predict(toy_workload(), arch, toy_system, overlap="full").row(0, named=True)
    assert none["exposed_comm_s"] == pytest.approx(1.8e-3) and none["sync_wait_s"] == 0.0
    assert full["exposed_comm_s"] == pytest.approx(0.0)


def test_ps_push_after_gradient_pull_before_forward(toy_system):
    # ps_worker, 4 workers + 2 PS on one server (toy, 1 GB/s NIC): comm C = 0.8407 s, 10 tensors of
    # 10 MB, half pushed over the backward (T_b = 0.1 s), half pulled over the forward (T_f = 0.05 s).
    # The pushes queue up: the first tensor is ready at T_b / 10, then all ten run back to back:
    # exposed push = T_b/10 + 10 (L + C/20) - T_b = C/2 + 10 L - 0.9 T_b; the pulls the same over T_f.
    arch = Architecture(kind="ps_worker", num_workers=4, num_ps=2)
    r = predict(toy_workload(), arch, toy_system).row(0, named=True)
    C, L = r["comm_s"], 20e-6
    assert pytest.approx(0.8407) == C
    wait = 0.01 * math.sqrt(2 * math.log(4)) * 0.15
    assert r["exposed_comm_s"] == pytest.approx((C / 2 + 10 * L - 0.9 * 0.1) + (C / 2 + 10 * L - 0.9 * 0.05) + wait)


def test_bucket_timeline_from_op_table():
    # backward ops in dispatch order: head (time 1), block (time 2), stem (time 1) -> the module's
    # gradients are ready at tau = 0.25, 0.75, 1.0. Parameters (forward order): stem.w 3 MiB,
    # block.w 30 MiB, head.w 0.5 MiB. Ready order: head.w, block.w, stem.w.
    # Buckets as DDP's compute_bucket_assignment_by_size fills them (add the gradient, then close
    # the bucket once it holds >= its limit: first 1 MiB, then 25 MiB):
    # head.w 0.5 (< 1, open) + block.w 30 -> 30.5 >= 1: closed, ready 0.75 | [stem.w 3] the rest, ready 1.0
    ops = pl.DataFrame({"op_index": [0, 1, 2, 3], "phase": ["forward", "backward", "backward", "backward"],
                        "module": ["stem", "head", "block", "stem"], "roofline_s": [9.0, 1.0, 2.0, 1.0]})
    params = pl.DataFrame({"name": ["stem.w", "block.w", "head.w"], "bytes": [3.0 * MIB, 30.0 * MIB, 0.5 * MIB],
                           "kind": ["dense", "dense", "dense"]})
    tl = bucket_timeline(ops, params)
    S = 33.5
    assert tl["timeline_tau"] == pytest.approx([0.75, 1.0])
    assert tl["timeline_buckets_left"] == [2.0, 1.0]
    assert tl["timeline_bytes_left"] == pytest.approx([1.0, 3.0 / S])
    # exposed with C = 0.67 s (0.02 s per MiB), T_b = 1 s, L = 0: 0.75-1.36, 1.36-1.42 -> 0.42
    frame = pl.DataFrame({**{k: [v] for k, v in tl.items()}, "C": [0.67], "T": [1.0], "S": [S * MIB], "L": [0.0]})
    out = frame.select(timeline_exposed_s(c("C"), c("T"), c("S"), c("L")))[0, 0]
    assert out == pytest.approx(0.42)


def test_bucket_timeline_closes_a_bucket_on_the_gradient_that_fills_it():
    # ready order a 0.6, b 0.6 (first bucket: 1.2 >= 1 MiB closes with both), c 20, d 10
    # (20 < 25 open, 30 >= 25 closes with both): two buckets, nothing left over
    ops = pl.DataFrame({"op_index": [0, 1, 2, 3], "phase": ["backward"] * 4,
                        "module": ["a", "b", "c", "d"], "roofline_s": [1.0, 1.0, 1.0, 1.0]})
    params = pl.DataFrame({"name": ["d.w", "c.w", "b.w", "a.w"],
                           "bytes": [10.0 * MIB, 20.0 * MIB, 0.6 * MIB, 0.6 * MIB],
                           "kind": ["dense"] * 4})
    tl = bucket_timeline(ops, params)
    assert tl["timeline_tau"] == pytest.approx([0.5, 1.0])
    assert tl["timeline_bytes_left"] == pytest.approx([1.0, 30.0 / 31.2])


def test_resnet18_cifar_buckets_as_ddp_builds_them():
    # kuangliu ResNet18 (CIFAR-10), FP32 gradients, 11,173,962 parameters = 44,695,848 B. In ready
    # order the first bucket closes on layer4.1.conv2.weight (512 x 512 x 3 x 3): fc (5,120 + 10),
    # layer4.1.bn2 (2 x 512) and that convolution = 2,365,450 parameters = 9,461,800 B. The second:
    # layer4.1.bn1 (1,024), layer4.1.conv1 (2,359,296), the shortcut's BN (1,024) and 1x1 conv
    # (131,072), layer4.0.bn2 (1,024), conv2 (2,359,296), bn1 (1,024), conv1 (1,179,648) =
    # 6,033,408 parameters = 24,133,632 B < 25 MiB (26,214,400 B), + layer3.1.bn2 (512 params) +
    # layer3.1.conv2 (589,824) = 26,494,976 B >= 25 MiB: closed. The rest, 8,739,072 B (the stem,
    # layer1-2 and most of layer3), is the last bucket, all of it exposed after the backward.
    from ddlscope.profile import profile_model

    prof = profile_model("resnet18_cifar", batch_size=4, precision="fp32")
    tl = bucket_timeline(prof.ops, prof.params)
    S = 44_695_848.0
    assert float(prof.params.filter(c("kind") == "dense")["bytes"].sum()) == S
    assert len(tl["timeline_tau"]) == 3
    assert tl["timeline_bytes_left"][1] == pytest.approx(1.0 - 9_461_800 / S)
    assert tl["timeline_bytes_left"][2] == pytest.approx(8_739_072 / S)
    assert tl["timeline_tau"][2] == pytest.approx(1.0)


def test_ps_without_pipelining_waits_for_every_pull(toy_system):
    # ps_pipelined = 0: the forward starts after all ten pulls: C/2 + 10 L exposed instead of
    # C/2 + 10 L - 0.9 T_f (T_f = 0.05 s): 0.045 s more
    from ddlscope.model.jobs import job_row, jobs_frame
    from ddlscope.model.step_time import breakdown

    arch = Architecture(kind="ps_worker", num_workers=4, num_ps=2)
    jobs = jobs_frame([job_row(toy_workload(), arch, toy_system)])
    piped, blocking = (breakdown(jobs.with_columns(ps_pipelined=pl.lit(v))).row(0, named=True) for v in (1.0, 0.0))
    assert blocking["exposed_comm_s"] - piped["exposed_comm_s"] == pytest.approx(0.9 * 0.05)


def test_scheduled_and_explicit_rows_in_one_frame(toy_system):
    # the compiled schedule prices each row by its own policy: a frame mixing scheduled rows and
    # explicit fractions gives each row what it gets alone
    from ddlscope.model.jobs import job_row, jobs_frame
    from ddlscope.model.step_time import breakdown

    archs = [Architecture(kind="allreduce_local", num_workers=4),
             Architecture(kind="ps_worker", num_workers=4, num_ps=2), Architecture(kind="1w1g")]
    rows = [job_row(toy_workload(), a, toy_system, overlap=o) for a in archs for o in ("scheduled", "none", 0.5)]
    together = breakdown(jobs_frame(rows))
    for i, row in enumerate(rows):
        alone = breakdown(jobs_frame([row])).row(0, named=True)
        assert together.row(i, named=True)["exposed_comm_s"] == pytest.approx(alone["exposed_comm_s"], rel=1e-12)
        assert together.row(i, named=True)["sync_wait_s"] == pytest.approx(alone["sync_wait_s"], rel=1e-12)
    # allreduce_local, overlap "none": everything exposed (1.8 ms), no wait; 0.5: half hidden (0.9 ms)
    assert together.row(1, named=True)["exposed_comm_s"] == pytest.approx(1.8e-3)
    assert together.row(2, named=True)["exposed_comm_s"] == pytest.approx(0.9e-3)
    assert together.row(1, named=True)["sync_wait_s"] == 0.0
    assert together.row(0, named=True)["sync_wait_s"] > 0.0
