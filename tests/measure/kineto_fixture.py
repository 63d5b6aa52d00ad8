"""A small Kineto trace written by hand, with every expected number counted by hand.

One rank of a 2-rank job on a Tesla V100-SXM2-32GB, two ProfilerSteps of 100 us each. Times in
microseconds (the trace's unit). CPU thread (pid 100, tid 1) and the GPU (pid 0):

step 1 = [0, 100)                                    step 2 = [100, 200)
  DataLoader __next__  [0, 20)                          cudaStreamSynchronize [101, 106)
  aten::mm [20.5, 22.5) launches K1 at 21               launch K6 at 110, K7 at 111, K8 at 150
  nccl:all_reduce [22.5, 23.5) launches K3 at 23
  launch K2 at 22, memcpy at 24, K5 at 90

GPU activities:
  K1 volta_sgemm_128x64_nn (gemm)       stream 7   [25, 45)     compute-bound
  K2 vectorized_elementwise_kernel      stream 7   [45, 55)     memory-bound
  K3 ncclKernel_AllReduce_RING_LL       stream 20  [50, 80)     all-reduce, 1000 floats
  M  Memcpy HtoD (Pinned -> Device)     stream 8   [60, 70)     data I/O, 1,000,000 bytes
  K5 mystery_kernel                     stream 7   [92, 96)     no rule matches: unclassified
  K6 volta_sgemm_128x64_nn              stream 7   [112, 132)   compute-bound
  K7 Memset (Device)                    stream 7   [132, 134)   device copy
  K8 vectorized_elementwise_kernel      stream 7   [152, 160)   memory-bound

Hand count of window 1 = [0, 100):
  [0,25) idle 25: next is K1, launched at 21 after the GPU went idle at 0; the data loader
         ran during [0, 21]                                   -> idle, data_loader      25
  [25,45) K1                                                  -> compute_bound          20
  [45,50) K2; [50,55) K2 and K3 (K2 wins, K3 overlapped 5)    -> memory_bound           10
  [55,60) K3; [60,70) K3 and the copy (comm wins); [70,80) K3 -> comm all_reduce        25
  [80,92) idle 12: K5 launched at 90 > 80, no data loader or sync -> kernel_launch      12
  [92,96) K5                                                  -> unclassified            4
  [96,100) idle 4: next is K6 (launched at 110); the sync [101,106] on the launching thread
           overlaps [96, 110]                                 -> synchronisation          4
  total 25 + 20 + 10 + 25 + 12 + 4 + 4 = 100; idle 41; comm busy 30, overlapped 5;
  data I/O busy 10 (exclusive 0).
Window 2 = [100, 200):
  [100,112) idle: K6 launched at 110, sync [101,106] overlaps  -> synchronisation       12
  [112,132) K6 -> compute_bound 20;  [132,134) K7 -> device_copy 2
  [134,152) idle: K8 launched at 150 > 134, sync ended at 106  -> kernel_launch         18
  [152,160) K8 -> memory_bound 8
  [160,200) idle: no later GPU activity, no launch to explain it -> unknown             40
  total 20 + 2 + 8 + 12 + 18 + 40 = 100.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PID, TID = 100, 1


def _cpu(name: str, ts: float, dur: float, cat: str = "cpu_op", **args: Any) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur,
            "args": {"External id": 1, **args}}


def _launch(corr: int, ts: float, name: str = "cudaLaunchKernel") -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": 0.5,
            "args": {"correlation": corr, "External id": corr}}


def _gpu(corr: int, name: str, ts: float, dur: float, stream: int, cat: str = "kernel", **args: Any) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": corr, **args}}


GEMM = "volta_sgemm_128x64_nn"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)"
ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
MYSTERY = "mystery_kernel(float*)"


def fixture_trace(gpu_name: str = "Tesla V100-SXM2-32GB") -> dict:
    """The trace as a Python object (see the module docstring)."""
    events = [
        {"name": "process_name", "ph": "M", "pid": PID, "tid": 0, "args": {"name": "python"}},
        {"ph": "i", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces", "tid": "x", "ts": 0, "s": "g"},
        _cpu("ProfilerStep#1", 0, 100, cat="user_annotation"),
        _cpu("ProfilerStep#2", 100, 100, cat="user_annotation"),
        _cpu("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 20, cat="user_annotation"),
        _cpu("aten::mm", 20.5, 2, **{"Input Dims": [[64, 128], [128, 256]], "Input type": ["float", "float"]}),
        _launch(1, 21),
        _launch(2, 22),
        _cpu("nccl:all_reduce", 22.5, 1, cat="user_annotation", **{"Input Dims": [[1000]], "Input type": ["float"]}),
        _launch(3, 23),
        _launch(4, 24, "cudaMemcpyAsync"),
        _launch(5, 90),
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": PID, "tid": TID, "ts": 101,
         "dur": 5, "args": {"correlation": 9, "External id": 9}},
        _launch(6, 110),
        _launch(7, 111, "cudaMemsetAsync"),
        _launch(8, 150),
        {"ph": "s", "id": 1, "pid": PID, "tid": TID, "ts": 21, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 25, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        _gpu(1, GEMM, 25, 20, 7),
        _gpu(2, ELEMENTWISE, 45, 10, 7),
        _gpu(3, ALLREDUCE, 50, 30, 20),
        _gpu(4, "Memcpy HtoD (Pinned -> Device)", 60, 10, 8, cat="gpu_memcpy", bytes=1_000_000),
        _gpu(5, MYSTERY, 92, 4, 7),
        _gpu(6, GEMM, 112, 20, 7),
        _gpu(7, "Memset (Device)", 132, 2, 7, cat="gpu_memset", bytes=4096),
        _gpu(8, ELEMENTWISE, 152, 8, 7),
    ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": gpu_name, "totalGlobalMem": 34089730048}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2},
        "traceEvents": events,
    }


def write_fixture(folder: Path, name: str = "rank0.json", **kw: Any) -> Path:
    """Write the fixture as JSON into ``folder``; returns its path."""
    path = folder / name
    path.write_text(json.dumps(fixture_trace(**kw)))
    return path
