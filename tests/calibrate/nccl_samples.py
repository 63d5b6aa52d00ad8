# ruff: noqa: E501, W291
"""nccl-tests outputs for the tests, in the published format (NVIDIA/nccl-tests, 2.13: columns
``size count type redop root time algbw busbw #wrong`` for out-of-place then in-place).

ALL_REDUCE_8X_A100 is modelled on an 8-GPU NVSwitch all_reduce_perf run (-b 8 -e 8G -f 4): times
follow ``t = 14 us + 1.75 S / 230 GB/s`` with a 6 % bump where NCCL switches protocol (64 KB-4 MB)
and 1 % jitter, printed as nccl-tests prints them (algbw = S/t, busbw = 1.75 algbw).
"""

ALL_REDUCE_8X_A100 = """\
# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41873 on dgx-a100-01 device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid  41873 on dgx-a100-01 device  1 [0x0b] NVIDIA A100-SXM4-80GB
#  Rank  2 Group  0 Pid  41873 on dgx-a100-01 device  2 [0x48] NVIDIA A100-SXM4-80GB
#  Rank  3 Group  0 Pid  41873 on dgx-a100-01 device  3 [0x4c] NVIDIA A100-SXM4-80GB
#  Rank  4 Group  0 Pid  41873 on dgx-a100-01 device  4 [0x88] NVIDIA A100-SXM4-80GB
#  Rank  5 Group  0 Pid  41873 on dgx-a100-01 device  5 [0x8b] NVIDIA A100-SXM4-80GB
#  Rank  6 Group  0 Pid  41873 on dgx-a100-01 device  6 [0xc8] NVIDIA A100-SXM4-80GB
#  Rank  7 Group  0 Pid  41873 on dgx-a100-01 device  7 [0xcb] NVIDIA A100-SXM4-80GB
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
           8             2     float     sum      -1    14.00    0.00    0.00      0    14.04    0.00    0.00      0
          32             8     float     sum      -1    13.96    0.00    0.00      0    13.88    0.00    0.00      0
         128            32     float     sum      -1    13.94    0.01    0.02      0    13.86    0.01    0.02      0
         512           128     float     sum      -1    14.01    0.04    0.06      0    14.19    0.04    0.06      0
        2048           512     float     sum      -1    13.95    0.15    0.26      0    13.93    0.15    0.26      0
        8192          2048     float     sum      -1    14.13    0.58    1.01      0    14.11    0.58    1.02      0
       32768          8192     float     sum      -1    14.26    2.30    4.02      0    14.12    2.32    4.06      0
      131072         32768     float     sum      -1    15.89    8.25   14.43      0    16.01    8.19   14.33      0
      524288        131072     float     sum      -1    18.81   27.87   48.77      0    18.98   27.62   48.34      0
     2097152        524288     float     sum      -1    31.15   67.32  117.82      0    31.34   66.91  117.09      0
     8388608       2097152     float     sum      -1    76.39  109.81  192.17      0    77.64  108.04  189.07      0
    33554432       8388608     float     sum      -1   265.89  126.20  220.84      0   270.04  124.26  217.45      0
   134217728      33554432     float     sum      -1  1036.84  129.45  226.53      0  1033.29  129.89  227.31      0
   536870912     134217728     float     sum      -1  3995.73  134.36  235.13      0  4076.81  131.69  230.46      0
  2147483648     536870912     float     sum      -1  16345.6  131.38  229.91      0  16372.1  131.17  229.54      0
  8589934592    2147483648     float     sum      -1  64371.9  133.44  233.52      0  65059.9  132.03  231.05      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 92.6906 
#
"""

# An older release's all_gather_perf (no root column, `error` instead of `#wrong`), pasted from an
# mpirun log with rank prefixes and NCCL INFO lines, without the rank list: 4 ranks, busbw =
# 0.75 algbw. Times follow t = 30 us + 0.75 S / 10 GB/s exactly (to the printed digits).
ALL_GATHER_OLD_MPIRUN = """\
$ mpirun -np 4 ./build/all_gather_perf -b 1K -e 64M -f 4
[1,0]<stdout>:# nThread 1 nGpus 1 minBytes 1024 maxBytes 67108864 step: 4(factor) warmup iters: 5 iters: 20 validation: 1
[1,0]<stdout>:#
node7:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>
node7:1234:1234 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.7<0>
[1,0]<stdout>:#                                             out-of-place                       in-place
[1,0]<stdout>:#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error
[1,0]<stdout>:#        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
[1,0]<stdout>:        1024            64   float    30.08    0.03    0.03  0e+00    30.08    0.03    0.03  0e+00
[1,0]<stdout>:        4096           256   float    30.31    0.14    0.10  0e+00    30.31    0.14    0.10  0e+00
[1,0]<stdout>:       16384          1024   float    31.23    0.52    0.39  0e+00    31.23    0.52    0.39  0e+00
[1,0]<stdout>:       65536          4096   float    34.92    1.88    1.41  0e+00    34.92    1.88    1.41  0e+00
[1,0]<stdout>:      262144         16384   float    49.66    5.28    3.96  0e+00    49.66    5.28    3.96  0e+00
[1,0]<stdout>:     1048576         65536   float   108.64    9.65    7.24  0e+00   108.64    9.65    7.24  0e+00
[1,0]<stdout>:     4194304        262144   float   344.57   12.17    9.13  0e+00   344.57   12.17    9.13  0e+00
[1,0]<stdout>:    16777216       1048576   float  1288.29   13.02    9.77  0e+00  1288.29   13.02    9.77  0e+00
[1,0]<stdout>:    67108864       4194304   float  5063.16   13.25    9.94  0e+00  5063.16   13.25    9.94  0e+00
[1,0]<stdout>:# Out of bounds values : 0 OK
[1,0]<stdout>:# Avg bus bandwidth    : 4.66333
"""


# --- generated in the exact nccl-tests format --------------------------------------------------
# The tables below are printed by nccl-tests' own format strings (src/common.cu: size "%12li",
# count "%12li", type "%8s", redop "%6s", root "%6i", then per placement time "%7.2f" (< 100 us),
# "%7.1f" (< 10 ms) or "%7.0f", algbw and busbw "%6.2f", #wrong "%5s"), from timings that follow
# NCCL's protocol choice: for each size NCCL runs the fastest of LL, LL128 and Simple, each with its
# own latency a_p and bus bandwidth b_p reached as S / (S + h_p) of the way (the pipeline fills), so
#     t(S) = min_p (a_p + f(p) S / (b_p S / (S + h_p)))           (+-1 % seeded jitter)
# which is flat for small messages (LL), bends through LL128 and reaches b_Simple for large ones:
# the shape of real sweeps (nccl-tests doc/PERFORMANCE.md; NCCL's tuning model, src/graph/tuning.cc).

import numpy as np  # noqa: E402

HEADER_NEW = (
    "#                                                              out-of-place                       in-place          \n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       \n"
)


def _time_str(us: float) -> str:
    return f"{us:7.0f}" if us >= 10000 else (f"{us:7.1f}" if us >= 100 else f"{us:7.2f}")


def protocol_times_us(sizes: np.ndarray, factor: float, protocols: tuple[tuple[float, float, float], ...],
                      seed: int, jitter: float = 0.01) -> np.ndarray:
    """Times (us) of the model above: ``protocols`` = ((a_us, b_gb_s, h_bytes), ...)."""
    s = np.asarray(sizes, dtype=float)
    t = np.min([a + factor * s / (b * 1e3 * s / (s + h)) for a, b, h in protocols], axis=0)
    return t * (1 + jitter * np.random.default_rng(seed).uniform(-1, 1, len(s)))


def nccl_table(coll: str, ranks: int, sizes: list[int], times_us: np.ndarray, *, type_: str = "float",
               itemsize: int = 4, redop: str = "sum", root: int = -1, wrong: str = "0",
               in_place_times_us: np.ndarray | None = None) -> str:
    """The rows of one table, printed as nccl-tests prints them (algbw = S / t, busbw = f(p) algbw)."""
    from ddlscope.model.collectives import bus_factor

    f = bus_factor(coll, ranks)
    per_rank = coll in ("all_gather", "reduce_scatter", "all_to_all")
    lines = []
    ip = times_us * 1.003 if in_place_times_us is None else in_place_times_us
    for s, t, t2 in zip(sizes, times_us, ip, strict=True):
        count = s // itemsize // (ranks if per_rank else 1)
        row = f"{s:12d}  {count:12d}  {type_:>8s}  {redop:>6s}  {root:6d}"
        for tt in (t, t2):
            alg = s / tt / 1e3
            row += f"  {_time_str(tt)}  {alg:6.2f}  {alg * f:6.2f}  {wrong:>5s}"
        lines.append(row)
    return "\n".join(lines) + "\n"


def rank_lines(ranks: int, host: str, gpu: str, gpus_per_host: int = 8, pid: int = 41873) -> str:
    bus = ("0x07", "0x0b", "0x48", "0x4c", "0x88", "0x8b", "0xc8", "0xcb")
    return "".join(f"#  Rank {r:2d} Group  0 Pid {pid + r // gpus_per_host:6d} on {host}-{r // gpus_per_host:02d} "
                   f"device {r % gpus_per_host:2d} [{bus[r % 8]}] {gpu}\n" for r in range(ranks))


def nccl_run(binary: str, coll: str, ranks: int, sizes: list[int], times_us: np.ndarray, *, host: str = "node",
             gpu: str = "NVIDIA A100-SXM4-80GB", redop: str = "sum", gpus_per_host: int = 8) -> str:
    """A whole run as a recent nccl-tests prints it: version, 'Collective test starting', parameters,
    devices, the table and its footer (``Avg bus bandwidth`` = the mean out-of-place busbw)."""
    from ddlscope.model.collectives import bus_factor

    busbw = np.array(sizes) / times_us / 1e3 * bus_factor(coll, ranks)
    ngpus = min(ranks, gpus_per_host)
    return (
        "# nccl-tests version 2.13.9 nccl-headers=21903 nccl-library=21903\n"
        f"# Collective test starting: {binary}\n"
        f"# nThread 1 nGpus 1 minBytes {sizes[0]} maxBytes {sizes[-1]} step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n"
        + rank_lines(ranks, host, gpu, ngpus) + "#\n" + HEADER_NEW
        + nccl_table(coll, ranks, sizes, times_us, redop=redop)
        + f"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {busbw.mean():.4f} \n#\n\n"
    )


SWEEP = [8 * 2**k for k in range(31)]  # -b 8 -e 8G -f 2
SWEEP_1K = [1024 * 2**k for k in range(23)]  # -b 1K -e 4G -f 2

# 8 x A100-SXM4-80GB, NVSwitch: LL 20 us / 25 GB/s, LL128 28 us / 150 GB/s, Simple 40 us / 188 GB/s
A100_NVLINK_PROTOCOLS = ((20.0, 25.0, 0.0), (28.0, 150.0, 256e3), (40.0, 188.0, 4e6))
ALL_REDUCE_8X_A100_NVLINK = nccl_run(
    "all_reduce_perf", "all_reduce", 8, SWEEP,
    protocol_times_us(np.array(SWEEP), 1.75, A100_NVLINK_PROTOCOLS, seed=1), host="dgx-a100")

# 2 nodes x 8 A100 over EFA (4 x 100 Gb/s per node, p4d): LL 28 us / 3 GB/s, LL128 40 us / 20 GB/s,
# Simple 90 us / 46 GB/s with a long pipeline fill
A100_EFA_PROTOCOLS = ((28.0, 3.0, 0.0), (40.0, 20.0, 512e3), (90.0, 46.0, 32e6))
ALL_REDUCE_16X_A100_EFA = nccl_run(
    "all_reduce_perf", "all_reduce", 16, SWEEP_1K,
    protocol_times_us(np.array(SWEEP_1K), 1.875, A100_EFA_PROTOCOLS, seed=2), host="p4d")

# 4 nodes x 8 H100 over InfiniBand NDR (8 x 400 Gb/s per node): Simple 60 us / 190 GB/s
H100_IB_PROTOCOLS = ((22.0, 8.0, 0.0), (32.0, 90.0, 1e6), (60.0, 190.0, 16e6))
ALL_REDUCE_32X_H100_IB = nccl_run(
    "all_reduce_perf", "all_reduce", 32, SWEEP,
    protocol_times_us(np.array(SWEEP), 2 * 31 / 32, H100_IB_PROTOCOLS, seed=3), host="h100",
    gpu="NVIDIA H100 80GB HBM3")

# the output of five *_perf binaries on one 8 x H100 server pasted into one file: all-reduce at
# about 350 GB/s bus bandwidth, send/receive (last) at about 15 GB/s
H100_AR = ((15.0, 30.0, 0.0), (22.0, 250.0, 256e3), (35.0, 355.0, 4e6))
H100_AG = ((12.0, 20.0, 0.0), (18.0, 200.0, 256e3), (30.0, 330.0, 4e6))
H100_A2A = ((25.0, 10.0, 0.0), (35.0, 150.0, 1e6), (60.0, 300.0, 8e6))
H100_SR = ((8.0, 4.0, 0.0), (10.0, 12.0, 64e3), (15.0, 15.5, 1e6))
FIVE_PERF_8X_H100 = "".join(
    nccl_run(binary, coll, 8, SWEEP, protocol_times_us(np.array(SWEEP), factor, prot, seed=10 + i), host="h100",
             gpu="NVIDIA H100 80GB HBM3", redop=redop)
    for i, (binary, coll, factor, prot, redop) in enumerate((
        ("all_reduce_perf", "all_reduce", 1.75, H100_AR, "sum"),
        ("all_gather_perf", "all_gather", 0.875, H100_AG, "none"),
        ("reduce_scatter_perf", "reduce_scatter", 0.875, H100_AG, "sum"),
        ("alltoall_perf", "all_to_all", 0.875, H100_A2A, "none"),
        ("sendrecv_perf", "send_recv", 1.0, H100_SR, "sum"),
    ))
)


# --- files real users paste, that the reader once refused or misread -----------------------------

# An old nccl-tests (before 2.0: no root column, an `error` column) all_gather_perf on 4 ranks with
# sizes *per rank*: its algbw is 4 x size / time (AllGatherGetBw: count * typesize * nranks / t), and
# after it an all_reduce_perf run of the same release. The all-gather times are t = 30 us + 0.75 S /
# 10 GB/s with S = 4 x size the total size (3 steps of 10 us), to the printed digits.
OLD_PER_RANK_ALL_GATHER_THEN_ALL_REDUCE = """\
# nThread 1 nGpus 4 minBytes 1024 maxBytes 16777216 step: 4(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid   5120 on   gpu-node device  0 [0x1a] Tesla V100-SXM2-16GB
#   Rank  1 Pid   5120 on   gpu-node device  1 [0x1c] Tesla V100-SXM2-16GB
#   Rank  2 Pid   5120 on   gpu-node device  2 [0x1d] Tesla V100-SXM2-16GB
#   Rank  3 Pid   5120 on   gpu-node device  3 [0x1e] Tesla V100-SXM2-16GB
#
#                                                     out-of-place                    in-place
#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256   float    30.31    0.14    0.10  0e+00    30.31    0.14    0.10  0e+00
        4096          1024   float    31.23    0.52    0.39  0e+00    31.23    0.52    0.39  0e+00
       16384          4096   float    34.92    1.88    1.41  0e+00    34.92    1.88    1.41  0e+00
       65536         16384   float    49.66    5.28    3.96  0e+00    49.66    5.28    3.96  0e+00
      262144         65536   float   108.64    9.65    7.24  0e+00   108.64    9.65    7.24  0e+00
     1048576        262144   float   344.57   12.17    9.13  0e+00   344.57   12.17    9.13  0e+00
     4194304       1048576   float  1288.29   13.02    9.77  0e+00  1288.29   13.02    9.77  0e+00
    16777216       4194304   float  5063.16   13.25    9.94  0e+00  5063.16   13.25    9.94  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 4.11750
#
# nThread 1 nGpus 4 minBytes 1024 maxBytes 67108864 step: 4(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid   5121 on   gpu-node device  0 [0x1a] Tesla V100-SXM2-16GB
#   Rank  1 Pid   5121 on   gpu-node device  1 [0x1c] Tesla V100-SXM2-16GB
#   Rank  2 Pid   5121 on   gpu-node device  2 [0x1d] Tesla V100-SXM2-16GB
#   Rank  3 Pid   5121 on   gpu-node device  3 [0x1e] Tesla V100-SXM2-16GB
#
#                                                     out-of-place                    in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256   float     sum    24.19    0.04    0.06  0e+00    24.02    0.04    0.06  0e+00
        4096          1024   float     sum    24.57    0.17    0.25  0e+00    24.31    0.17    0.25  0e+00
       16384          4096   float     sum    26.12    0.63    0.94  0e+00    26.05    0.63    0.94  0e+00
       65536         16384   float     sum    32.08    2.04    3.06  0e+00    31.90    2.05    3.08  0e+00
      262144         65536   float     sum    53.45    4.90    7.36  0e+00    53.41    4.91    7.36  0e+00
     1048576        262144   float     sum   108.42    9.67   14.51  0e+00   108.20    9.69   14.54  0e+00
     4194304       1048576   float     sum   255.71   16.40   24.60  0e+00   255.60   16.41   24.61  0e+00
    16777216       4194304   float     sum   826.98   20.29   30.43  0e+00   826.50   20.30   30.45  0e+00
    67108864      16777216   float     sum  3125.11   21.47   32.21  0e+00  3124.80   21.48   32.21  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 9.28000
#
"""

# srun -l prefixes (" 0: ", "0: "), an elided rank list ("#   ..."), the user's own "  ..." line,
# and a `NCCL version` line: a 2 x 8 H100 all_gather_perf (redop "none", #wrong N/A with -c 0).
SRUN_ALL_GATHER_16X = """\
  ...
 0: # nccl-tests version 2.13.9 nccl-headers=21903 nccl-library=21903
 0: # Collective test starting: all_gather_perf
 0: # nThread 1 nGpus 1 minBytes 8388608 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 200 agg iters: 1 validation: 0 graph: 0
 0: #
 0: # Using devices
 0: #  Rank  0 Group  0 Pid 710091 on a3m123-1 device  0 [0000:04:00] NVIDIA H100 80GB HBM3
 0: #   ...
 0: #  Rank 15 Group  0 Pid 710098 on a3m123-14 device  7 [0000:c4:00] NVIDIA H100 80GB HBM3
 0: NCCL version 2.18.5+cuda12.2
0: #                                                              out-of-place                       in-place          
 0: #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
 0: #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
 0:      8388608        131072     float    none      -1    309.5   27.11   25.41    N/A    306.9   27.33   25.63    N/A
 0:     16777216        262144     float    none      -1    412.6   40.66   38.12    N/A    413.9   40.53   38.00    N/A
 0:     33554432        524288     float    none      -1    457.4   73.37   68.78    N/A    458.8   73.13   68.56    N/A
 0:     67108864       1048576     float    none      -1    667.7  100.50   94.22    N/A    670.0  100.16   93.90    N/A
 0:    134217728       2097152     float    none      -1   1061.1  126.49  118.59    N/A   1058.4  126.82  118.89    N/A
 0:    268435456       4194304     float    none      -1   1670.9  160.66  150.62    N/A   1672.3  160.52  150.49    N/A
 0:    536870912       8388608     float    none      -1   2858.2  187.84  176.10    N/A   2865.0  187.39  175.68    N/A
 0:   1073741824      16777216     float    none      -1   5516.7  194.63  182.47    N/A   5513.4  194.75  182.58    N/A
 0:   2147483648      33554432     float    none      -1    10822  198.43  186.03    N/A    10816  198.55  186.14    N/A
 0:   4294967296      67108864     float    none      -1    21431  200.41  187.88    N/A    21414  200.56  188.03    N/A
 0:   8589934592     134217728     float    none      -1    42637  201.47  188.88    N/A    42610  201.59  188.99    N/A
 0: # Out of bounds values : 0 OK
 0: # Avg bus bandwidth    : 128.817 
 0: #
 0: 
"""

# mpirun of alltoall_perf that dies after three sizes, then a complete sendrecv_perf run.
FAILED_ALLTOALL_THEN_SENDRECV = """\
# nccl-tests version 2.13.9 nccl-headers=21903 nccl-library=21903
# Collective test starting: alltoall_perf
# nThread 1 nGpus 1 minBytes 1024 maxBytes 1073741824 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  22131 on node-0 device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid  22132 on node-0 device  1 [0x0b] NVIDIA A100-SXM4-80GB
#  Rank  2 Group  0 Pid  22133 on node-1 device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  3 Group  0 Pid  22134 on node-1 device  1 [0x0b] NVIDIA A100-SXM4-80GB
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
        1024            64     float    none      -1    40.12    0.03    0.02      0    39.87    0.03    0.02    N/A
        4096           256     float    none      -1    41.05    0.10    0.07      0    40.92    0.10    0.08    N/A
       16384          1024     float    none      -1    44.61    0.37    0.28      0    44.30    0.37    0.28    N/A
node-1: Test NCCL failure alltoall.cu:96 'remote process exited or there was a network error / '
 .. node-1 pid 22133: Test failure common.cu:377
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
# nccl-tests version 2.13.9 nccl-headers=21903 nccl-library=21903
# Collective test starting: sendrecv_perf
# nThread 1 nGpus 1 minBytes 1024 maxBytes 1073741824 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  22201 on node-0 device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid  22202 on node-0 device  1 [0x0b] NVIDIA A100-SXM4-80GB
#  Rank  2 Group  0 Pid  22203 on node-1 device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  3 Group  0 Pid  22204 on node-1 device  1 [0x0b] NVIDIA A100-SXM4-80GB
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
        1024           256     float     sum      -1    22.31    0.05    0.05      0    22.10    0.05    0.05    N/A
        4096          1024     float     sum      -1    22.84    0.18    0.18      0    22.75    0.18    0.18    N/A
       16384          4096     float     sum      -1    24.93    0.66    0.66      0    24.80    0.66    0.66    N/A
       65536         16384     float     sum      -1    31.20    2.10    2.10      0    31.02    2.11    2.11    N/A
      262144         65536     float     sum      -1    42.77    6.13    6.13      0    42.50    6.17    6.17    N/A
     1048576        262144     float     sum      -1    89.91   11.66   11.66      0    89.55   11.71   11.71    N/A
     4194304       1048576     float     sum      -1   248.25   16.90   16.90      0   247.81   16.93   16.93    N/A
    16777216       4194304     float     sum      -1   893.10   18.79   18.79      0   892.40   18.80   18.80    N/A
    67108864      16777216     float     sum      -1   3490.2   19.23   19.23      0   3488.9   19.24   19.24    N/A
   268435456      67108864     float     sum      -1    13885   19.33   19.33      0    13880   19.34   19.34    N/A
  1073741824     268435456     float     sum      -1    55478   19.35   19.35      0    55470   19.36   19.36    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 9.56818
#
"""

# reduce_scatter_perf -g 1: one rank, busbw 0 on every row, no header line, no rank list
SINGLE_RANK_REDUCE_SCATTER = """\
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    12.10   86.66    0.00      0     1.20  873.81    0.00      0
     4194304       1048576     float     sum      -1    34.82  120.46    0.00      0     1.21  3466.4    0.00      0
    16777216       4194304     float     sum      -1   121.35  138.26    0.00      0     1.19  14098.5   0.00      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0
"""
