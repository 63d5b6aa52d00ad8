"""The System spec: the hardware a job runs on (the *system* input of the model).

A :class:`System` is one GPU type, the server that holds it (GPUs per server, PCIe generation and
how the GPUs share the host's root complex, NVLink or none), the network (NIC type, NICs per
server), storage read bandwidth, and an efficiency factor per resource. Numbers come from the
built-in catalog (:mod:`ddlscope.specs.catalog`, every entry with its datasheet source), from a
user's catalog file, or from a profile written by ``ddlscope calibrate``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from ddlscope.specs.base import SPEC_CONFIG

LinkKind = Literal["pcie", "nvlink", "ethernet", "infiniband", "host"]
"""Kinds of link. ``host``: processes of one host that communicate through its memory (shared
memory, or TCP over the loopback interface, as gloo does); ``ddlscope calibrate`` measures one on a
machine without GPUs, where the *device* is a share of the CPU and the host's memory is both the
"host link" and the link between devices. It is accepted in the ``pcie`` slot only."""
PCIE_SLOT_KINDS: tuple[str, ...] = ("pcie", "host")
MAX_COUNT = 2**53
"""Largest count (GPUs per server or per PCIe root, NICs per server) a spec takes: the largest
integer a Float64 holds exactly and well inside the model's Int64 columns (2^63 overflows them);
the trace readers' bound too (``ddlscope.ingest.table.MAX_COUNT``)."""


class PeakTflops(BaseModel):
    """Dense peak throughput of a GPU per precision, in TFLOP/s (1e12 FLOP/s).

    ``fp32`` on the CUDA cores; ``tf32`` TF32 tensor cores; ``fp16``/``bf16`` 16-bit tensor cores
    with FP32 accumulate. A GPU without a unit repeats its ``fp32`` figure. Source: the GPU's
    datasheet, given in :attr:`GPUSpec.source`.
    """

    model_config = SPEC_CONFIG

    fp32: float = Field(..., gt=0)
    tf32: float = Field(..., gt=0)
    fp16: float = Field(..., gt=0)
    bf16: float = Field(..., gt=0)


Generation = Literal["kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell",
                     "cdna2", "cdna3"]
"""GPU micro-architecture generations: the key of the per-generation compute efficiencies
(:class:`ddlscope.specs.efficiency.ComputeEfficiency`, catalog section ``[compute_efficiency]``)."""
GENERATIONS: tuple[str, ...] = Generation.__args__
TensorPrecision = Literal["tf32", "fp16", "bf16"]
MIB = 2**20
TENSOR_LOAD_W_PER_SM_GHZ = 2.38
"""Board power a GPU draws per SM per GHz of SM clock under dense tensor-core GEMMs at its die's full
tensor rate, W: a board whose power limit is below ``TENSOR_LOAD_W_PER_SM_GHZ x sm_count x boost_GHz
x tensor_rate_of_die`` cannot hold its boost clock under that load (:meth:`GPUSpec.sustained_tensor_fraction`;
a GeForce board, running tensor MMAs at half its die's rate, draws half of it). Fitted, not measured:
the value that minimises the median cross-GPU throughput-ratio error (which cancels any
GPU-independent calibration) on the one-GPU rows of ``shared/data/lambda_benchmarks`` and
``dle_tables`` (13 GPUs: Volta, Turing, Ampere GA100/GA102, Ada, Hopper; the fit's grid is geometric,
33 points from 0.5 to 8 W, so neighbouring values are 9 % apart); leaving each GPU out in turn the fit
gives 2.18 to 3.08 (``benchmarks/fidelity_power_limit.py``). With it the A100 SXM4 (400 W) and
the H100 SXM5 (700 W) keep their boost clock under tensor load, as their measured large-GEMM rates
(250-280 of 312 TFLOPS; about 700 of 989) and the held-out MPT/FSDP table on A100 SXM4 require.
The fit gave 2.38 before the half rate and the clock ceiling were modelled, 2.59 with them, and 2.38
again once the BERT SQuAD rows' op tables held the padding-mask add and, in FP32, DeepLearningExamples'
``BertAdam`` (2026-12-07; the fit is flat there: one grid step)."""
POWER_CLOCK_EXPONENT = 1.0 / 3.0
"""Sustained clock over boost clock = (power limit / power needed at boost) ** this: CMOS dynamic power
``P = a C V^2 f`` with the supply voltage scaled with the clock along the DVFS curve (``V ~ f``), so
``P ~ f^3`` (Hennessy and Patterson, *Computer Architecture*, 6th ed., section 1.5). Not fitted: the
leave-one-GPU-out figure of ``benchmarks/fidelity_power_limit.py`` is 9.7 / 8.9 / 8.7 % for exponents
1/4, 1/3, 1/2 (9.8 % at 1)."""


class GPUSpec(BaseModel):
    """One GPU type: peak FLOP/s per precision, memory bandwidth (GB/s = 1e9 B/s), capacity.

    Fields beyond the peaks (all optional, so a user's entry of peaks alone still validates):

    - ``generation``: micro-architecture (:data:`GENERATIONS`); selects the compute-efficiency curves.
      ``None``: the generation-neutral default curves.
    - ``tensor_core_precisions``: the precisions whose GEMM/convolution run on tensor (matrix) cores
      (``tf32``, ``fp16``, ``bf16``); ``()`` for a GPU without them (K80, M60, P40, P100); ``None``
      unknown (treated as "every precision whose peak exceeds FP32's").
    - ``sm_count`` (streaming multiprocessors or compute units), ``boost_clock_mhz``: from the
      datasheet/whitepaper, informational (the peaks already hold their product).
    - ``memory_mib``: the capacity as the device reports it (``nvidia-smi``'s ``MiB`` total, or
      ``rocm-smi``'s), in MiB of 2**20 bytes: a "16 GB" V100 reports 16,160 MiB. When given, the
      model's ``gpu_memory_bytes`` is ``memory_mib * 2**20``; else ``memory_gb * 1e9``.
    - ``memory_source``: where ``memory_mib`` comes from.
    - ``board_power_w``: the board's power limit (TDP / total board power) from its datasheet, in W;
      with ``sm_count`` and ``boost_clock_mhz`` it sets :meth:`sustained_tensor_fraction`. ``None``:
      tensor work at the boost clock (the built-in catalog leaves it unset where the figure is a
      module's, e.g. GH200, or outside the generations the power constant was fitted on: AMD, Blackwell).
    - ``tensor_rate_of_die``: the share of its die's full tensor rate per SM per clock the board runs
      FP16/BF16 MMAs with FP32 accumulate (what PyTorch's cuBLAS and cuDNN calls use) at: 0.5 on the
      GeForce RTX 20/30/40 boards (NVIDIA's Turing, GA102 and Ada architecture whitepapers, appendices:
      their FP16 tensor rate with FP32 accumulate is half that with FP16 accumulate, which the
      workstation and data-centre boards of the same dies run at the full rate), else 1. Half the
      tensor work per SM per clock draws half the tensor-load power (:meth:`sustained_tensor_fraction`);
      the datasheet peaks already hold the rate.
    - ``max_clock_mhz``: the highest SM clock GPU Boost may run the board at, MHz, as ``nvidia-smi -q``
      reports it under "Max Clocks" (NVML ``NVML_CLOCK_SM`` maximum); ``max_clock_source`` says where the
      figure comes from. Data-centre boards report their datasheet boost clock there (an A100 1,410
      MHz, an A10G 1,710 MHz): ``None`` means that. GeForce and workstation boards report more (an RTX
      3090 or RTX A6000 2,100 MHz, an RTX 4090 or RTX 6000 Ada 3,105 MHz; their "boost clock" is a
      typical clock, NVIDIA's GPU Boost raising the clock further while power and temperature allow):
      where the power limit leaves headroom, tensor work runs above the boost clock, up to this one.
      Needs ``boost_clock_mhz`` and must not be below it.
    """

    model_config = SPEC_CONFIG

    name: str
    aliases: tuple[str, ...] = ()
    peak_tflops: PeakTflops
    memory_bandwidth_gb_s: float = Field(..., gt=0)
    memory_gb: float = Field(..., gt=0)
    generation: Generation | None = None
    tensor_core_precisions: tuple[TensorPrecision, ...] | None = None
    sm_count: int | None = Field(None, ge=1, strict=True)
    boost_clock_mhz: float | None = Field(None, gt=0, strict=True)
    memory_mib: float | None = Field(None, gt=0)
    memory_source: str = ""
    board_power_w: float | None = Field(None, gt=0, strict=True)
    tensor_rate_of_die: float = Field(1.0, gt=0, le=1, strict=True)
    max_clock_mhz: float | None = Field(None, gt=0, strict=True)
    max_clock_source: str = ""
    source: str = ""

    @model_validator(mode="after")
    def _clock_inputs(self) -> GPUSpec:
        if self.board_power_w is not None and (self.sm_count is None or self.boost_clock_mhz is None):
            missing = " and ".join(n for n in ("sm_count", "boost_clock_mhz") if getattr(self, n) is None)
            raise ValueError(f"board_power_w needs {missing} too (the power-limited tensor clock is board power "
                             "over SMs x boost clock; docs/model.md)")
        if self.max_clock_mhz is not None:
            if self.boost_clock_mhz is None:
                raise ValueError("max_clock_mhz needs boost_clock_mhz too (the clock ceiling is a multiple of the "
                                 "boost clock the peaks assume; docs/model.md)")
            if self.max_clock_mhz < self.boost_clock_mhz:
                raise ValueError(f"max_clock_mhz ({self.max_clock_mhz:g}) is below boost_clock_mhz "
                                 f"({self.boost_clock_mhz:g}): the maximum clock is at least the boost clock")
        return self

    def sustained_tensor_fraction(self) -> float:
        """The SM clock a board sustains under dense tensor-core GEMMs, as a share of the boost clock its
        datasheet tensor peaks assume: ``min(max_clock_mhz / boost_clock_mhz, (board_power_w /
        (TENSOR_LOAD_W_PER_SM_GHZ x sm_count x boost_GHz x tensor_rate_of_die)) ** POWER_CLOCK_EXPONENT)``
        (NVIDIA GPU Boost lowers the clock to hold the board's power limit, and raises it up to the
        board's maximum clock while the limit leaves headroom; :data:`TENSOR_LOAD_W_PER_SM_GHZ`,
        :data:`POWER_CLOCK_EXPONENT`). The ceiling is 1 where ``max_clock_mhz`` is not given; the whole
        is 1.0 where the board power, SM count or boost clock is not given. E.g. an A100 PCIe 40 GB
        (250 W, 108 SMs, 1.41 GHz) holds ``(250 / 362.4) ** (1/3)`` = 0.884, an A100 SXM4 (400 W) 1.0;
        an RTX 4090 (450 W, 128 SMs, 2.52 GHz, half rate) runs above its boost clock at ``(450 / 383.8)
        ** (1/3)`` = 1.054, below its ceiling 3,105 / 2,520.
        """
        if self.board_power_w is None or self.sm_count is None or self.boost_clock_mhz is None:
            return 1.0
        ceiling = self.max_clock_mhz / self.boost_clock_mhz if self.max_clock_mhz is not None else 1.0
        needed_w = TENSOR_LOAD_W_PER_SM_GHZ * self.sm_count * self.boost_clock_mhz / 1e3 * self.tensor_rate_of_die
        return min(ceiling, (self.board_power_w / needed_w) ** POWER_CLOCK_EXPONENT)

    @property
    def memory_bytes(self) -> float:
        """Device memory in bytes: ``memory_mib * 2**20`` when the reported capacity is known, else
        ``memory_gb * 1e9``."""
        return self.memory_mib * MIB if self.memory_mib is not None else self.memory_gb * 1e9

    def has_tensor_cores(self, precision: str) -> bool:
        """Whether a GEMM/convolution at ``precision`` (``fp32``, ``tf32``, ``fp16``, ``bf16``) runs on
        tensor cores on this GPU. ``fp32`` never does; unknown ``tensor_core_precisions`` fall back to
        "the datasheet peak at that precision exceeds the FP32 peak" (catalog convention: a GPU
        without the unit repeats its FP32 figure)."""
        if precision == "fp32":
            return False
        if self.tensor_core_precisions is not None:
            return precision in self.tensor_core_precisions
        return getattr(self.peak_tflops, precision) > self.peak_tflops.fp32


class LinkSpec(BaseModel):
    """One link type of the alpha-beta (Hockney) model ``t = alpha + n / beta``.

    ``bandwidth_gb_s`` is beta in GB/s (1e9 bytes/s) per direction; ``latency_us`` is alpha in
    microseconds; ``rate_gbps`` the marketed bit rate for network links (informational).
    ``transport`` names how collectives use the link (``nccl-ib``, ``nccl-roce``, ``nccl-efa``,
    ``nccl-socket``, ``nccl-nvlink``, ``nccl-pcie``; informational); ``efficiency``, ``flow_gb_s``
    and ``flows`` give the bandwidth collectives achieve on it (:meth:`achieved_efficiency`).
    Source: Hockney, "The communication challenge for MPP", Parallel Computing 20 (1994).
    """

    model_config = SPEC_CONFIG

    name: str
    kind: LinkKind
    bandwidth_gb_s: float = Field(..., gt=0)
    latency_us: float = Field(..., ge=0)
    rate_gbps: float | None = Field(None, gt=0)
    transport: str = ""
    efficiency: float | None = Field(None, gt=0, le=1)
    flow_gb_s: float | None = Field(None, gt=0)
    flows: int = Field(1, ge=1)
    source: str = ""

    def achieved_efficiency(self) -> float | None:
        """The achieved share of ``bandwidth_gb_s`` for a large collective on this link, or ``None``
        where the entry states none (the system's :class:`Efficiency` then applies).

        ``efficiency`` is the transport's measured bus bandwidth over ``bandwidth_gb_s`` (NCCL
        over InfiniBand/RoCE/EFA, over NVLink/NVSwitch, over PCIe: published nccl-tests figures,
        cited in ``source``); ``flow_gb_s`` caps what one TCP connection carries (a cloud's
        per-flow limit, or one socket's throughput), and ``flows`` is how many connections the
        transport opens in parallel (NCCL's socket transport: channels x
        ``NCCL_SOCKET_NTHREADS`` x ``NCCL_NSOCKS_PERTHREAD``), so the socket transport reaches
        ``min(efficiency * bandwidth, flows * flow_gb_s)``.
        """
        eff = self.efficiency
        if self.flow_gb_s is not None:
            cap = min(1.0, self.flows * self.flow_gb_s / self.bandwidth_gb_s)
            eff = cap if eff is None else min(eff, cap)
        return eff


class ServerSpec(BaseModel):
    """A server type as named in the catalog: references to GPU and link entries by name.

    ``gpus_per_pcie_root``: GPUs sharing one x16 uplink to the host (those behind one PCIe
    switch). ``nvlink`` is a link name or ``""`` for a server without NVLink.
    """

    model_config = SPEC_CONFIG

    name: str
    gpu: str
    gpus_per_server: int = Field(..., ge=1, le=MAX_COUNT)
    pcie: str
    gpus_per_pcie_root: int = Field(..., ge=1, le=MAX_COUNT)
    nvlink: str = ""
    nic: str
    nics_per_server: int = Field(1, ge=1, le=MAX_COUNT)
    storage_read_gb_s: float = Field(..., gt=0)
    source: str = ""


class Efficiency(BaseModel):
    """Fraction of each resource's peak that training achieves, each in (0, 1].

    Defaults are stated assumptions, not measurements, chosen from commonly reported figures:
    large cuBLAS/cuDNN kernels reach 50-70 % of peak (``compute`` 0.6); memory-bound DL kernels
    reach 60-80 % of HBM bandwidth where STREAM reaches about 90 % (``memory`` 0.7); NCCL's bus
    bandwidth on NVLink and host copies over PCIe reach about 80-85 % of the link rate (``nvlink``
    0.85, ``pcie`` 0.8); TCP over a datacentre NIC about 85 % (``network`` 0.85); storage read
    bandwidth is a sustained figure already (``storage`` 1.0). ``ddlscope calibrate`` replaces
    them with measured values.
    """

    model_config = SPEC_CONFIG

    compute: float = Field(0.6, gt=0, le=1)
    memory: float = Field(0.7, gt=0, le=1)
    pcie: float = Field(0.8, gt=0, le=1)
    nvlink: float = Field(0.85, gt=0, le=1)
    network: float = Field(0.85, gt=0, le=1)
    storage: float = Field(1.0, gt=0, le=1)


class System(BaseModel):
    """The hardware one job runs on, with every number resolved.

    Build one with :func:`ddlscope.specs.catalog.Catalog.system` (by catalog name, with
    overrides) or :func:`ddlscope.specs.catalog.load_system` (from a file).

    The ``pcie`` slot is the link between a device and its host; it also carries device-to-device
    traffic on a server without NVLink. On a CPU-only host profiled by ``ddlscope calibrate`` it
    holds a ``host`` link (inter-process communication through host memory), and the *GPU* is
    the share of the CPU one replica runs on.

    Raises:
        pydantic.ValidationError: a link of the wrong kind in a slot (a PCIe link as the NIC),
            more GPUs per PCIe root than per server, or a non-positive number; the error names the
            field.
    """

    model_config = SPEC_CONFIG

    name: str
    gpu: GPUSpec
    gpus_per_server: int = Field(..., ge=1, le=MAX_COUNT)
    pcie: LinkSpec
    gpus_per_pcie_root: int = Field(..., ge=1, le=MAX_COUNT)
    nvlink: LinkSpec | None = None
    nic: LinkSpec
    nics_per_server: int = Field(1, ge=1, le=MAX_COUNT)
    storage_read_gb_s: float = Field(..., gt=0)
    efficiency: Efficiency = Efficiency()

    @model_validator(mode="after")
    def _links_in_their_slots(self) -> System:
        if self.pcie.kind not in PCIE_SLOT_KINDS:
            raise ValueError(
                f"pcie: expected a link of kind 'pcie' (or 'host' for processes of one host), "
                f"got {self.pcie.name!r} ({self.pcie.kind})"
            )
        if self.nvlink is not None and self.nvlink.kind != "nvlink":
            raise ValueError(
                f"nvlink: expected a link of kind 'nvlink' or none, got {self.nvlink.name!r} ({self.nvlink.kind})"
            )
        if self.nic.kind not in ("ethernet", "infiniband"):
            raise ValueError(
                f"nic: expected an 'ethernet' or 'infiniband' link, got {self.nic.name!r} ({self.nic.kind})"
            )
        if self.gpus_per_pcie_root > self.gpus_per_server:
            raise ValueError(
                f"gpus_per_pcie_root: expected <= gpus_per_server ({self.gpus_per_server}), "
                f"got {self.gpus_per_pcie_root}"
            )
        return self
