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
