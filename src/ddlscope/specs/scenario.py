"""The Scenario spec: one what-if change to a job's architecture, hardware or workload.

A scenario lists only what it changes; everything else stays as in the baseline. Changes apply to
the jobs selected by ``only_architectures`` (all jobs when empty). An architecture port applies only
where the ported job fits (e.g. ``allreduce_local`` needs all GPUs in one server); jobs where it
does not are kept unchanged and marked ``scenario_applied = false``.

The built-in scenarios (:data:`BUILTIN_SCENARIOS`) are the PAI study's what-ifs (IISWC 2019;
reconstruction) plus the usual hardware and software upgrades.

Scenario files are TOML (``[[scenario]]`` tables) or JSON (a list of objects) with these fields::

    [[scenario]]
    name = "nic-100g-and-a100"
    nic = "eth-100g"
    gpu = "A100-SXM4-40GB"
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from ddlscope.specs.architecture import ArchitectureKind, Sharding
from ddlscope.specs.base import SPEC_CONFIG
from ddlscope.specs.errors import describe_validation
from ddlscope.specs.files import read_toml_or_json
from ddlscope.specs.overlap import overlap_fraction
from ddlscope.specs.system import MAX_COUNT
from ddlscope.specs.traits import canonical_sharding, traits_of
from ddlscope.specs.workload import Precision


class Scenario(BaseModel):
    """One what-if: the fields given override the baseline job's.

    - ``name``, ``description``: labels.
    - ``only_architectures``: apply to jobs of these architectures only (empty: all).
    - ``architecture``: port target. Counts follow the port: ``allreduce_local`` and ``1wng`` put
      all GPUs in one server (only where they fit), ``allreduce_cluster`` and ``pearl`` use
      ``ceil(p / server GPUs)`` servers (only where the GPUs divide evenly; ``allreduce_cluster``
      needs two or more), ``ps_worker`` one worker per GPU and ``num_ps`` shards (default: one per
      server), ``1w1g`` only for one-GPU jobs.
    - ``num_ps``: PS shards of a port to ``ps_worker``.
    - ``sharding``: the sharding of a port to ``fsdp`` (``zero1|zero2|zero3|hybrid`` or FSDP's
      ``FULL_SHARD``...; default ``zero3``). ``fsdp`` ports use ``ceil(p / server GPUs)`` servers
      where the GPUs divide evenly.
    - ``server``: swap the whole server type (GPU, links, counts; efficiencies are kept).
    - ``gpu``, ``nic``, ``nvlink`` (``"none"`` removes NVLink), ``pcie``: swap one part.
    - ``nics_per_server``: NICs per server.
    - ``precision``: new arithmetic precision; memory-bound bytes scale by bytes per element
      (:func:`~ddlscope.specs.workload.precision_bytes_factor`). A scenario that changes only the
      precision applies only to jobs it changes: not to a job already at that precision, and a
      16-bit target (``fp16``/``bf16``, mixed precision) not to a job already in 16-bit mixed
      precision.
    - ``memory_bound_scale``: factor on memory-bound bytes (op fusion), in (0, 1].
    - ``overlap``: overlap policy (``none``, ``full``) or fraction.
    - ``upgrade_only``: apply the GPU and link swaps only to jobs for which they are upgrades (a
      link of more bandwidth than the job's, a GPU at least as fast in peak FLOP/s at the job's
      precision and in memory bandwidth); other jobs keep their hardware and count as not applied.
      The built-in hardware scenarios set it, so ``add-nvlink`` never replaces NVLink 3 by NVLink 2
      and ``ethernet-100g`` never slows a 200 Gb/s network. A scenario with an ``architecture`` port
      swaps its links (``nvlink``, ``nic``, ``pcie``) only where the job's own link is slower or
      absent (a link at least as fast is kept, the port still applies): ``ps-to-allreduce-nvlink``
      keeps a DGX H100's NVLink 4.

    Raises:
        pydantic.ValidationError: unknown fields, a scale outside (0, 1], a bad overlap.
    """

    model_config = SPEC_CONFIG

    name: str = Field(..., min_length=1)
    description: str = ""
    only_architectures: tuple[ArchitectureKind, ...] = ()
    architecture: ArchitectureKind | None = None
    num_ps: int | None = Field(None, ge=1, le=MAX_COUNT)
    server: str | None = None
    gpu: str | None = None
    nic: str | None = None
    nvlink: str | None = None
    pcie: str | None = None
    nics_per_server: int | None = Field(None, ge=1, le=MAX_COUNT)
    precision: Precision | None = None
    memory_bound_scale: float = Field(1.0, gt=0, le=1)
    overlap: str | float | None = None
    upgrade_only: bool = False
    sharding: Sharding | None = None

    @field_validator("sharding", mode="before")
    @classmethod
    def _sharding_name(cls, v: object) -> object:
        """FSDP's names (``FULL_SHARD``...) as the ZeRO ones; only with a port to ``fsdp``."""
        return None if v is None else canonical_sharding(str(v))

    @model_validator(mode="after")
    def _sharding_needs_port(self) -> Scenario:
        if self.architecture is not None and not traits_of(self.architecture).port_target:
            raise ValueError(f"architecture: {self.architecture} is not a port target (its tp/pp plan is the job's; "
                             "see ddlscope plan)")
        if self.sharding is not None and (self.architecture is None or not traits_of(self.architecture).sharded):
            raise ValueError(f"sharding: a sharding needs a port to fsdp (architecture = 'fsdp'), got "
                             f"architecture={self.architecture!r}")
        return self

    @field_validator("overlap")
    @classmethod
    def _overlap_ok(cls, v: str | float | None) -> str | float | None:
        if v is None:
            return v
        overlap_fraction(v)
        return v

    @field_validator("name")
    @classmethod
    def _not_baseline(cls, v: str) -> str:
        if v.strip().lower() == "baseline":
            raise ValueError("name: 'baseline' is reserved for the unchanged job")
        return v


BUILTIN_SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="ps-to-allreduce-nvlink",
            description="port PS/Worker jobs that fit one server to ring all-reduce over NVLink "
            "(PAI study what-if; NVLink 2 added where the server lacks it or has a slower link, a faster NVLink kept)",
            only_architectures=("ps_worker",),
            architecture="allreduce_local",
            nvlink="nvlink2",
        ),
        Scenario(name="ethernet-100g", description="NIC upgraded to 100 Gb/s Ethernet (where slower)",
                 nic="eth-100g", upgrade_only=True),
        Scenario(name="add-nvlink", description="NVLink 2 between the GPUs of servers without NVLink",
                 nvlink="nvlink2", upgrade_only=True),
        Scenario(name="gpu-a100", description="GPU upgraded to an A100 SXM4 40 GB (where slower)",
                 gpu="A100-SXM4-40GB", upgrade_only=True),
        Scenario(name="gpu-h100", description="GPU upgraded to an H100 SXM5 80 GB (where slower)",
                 gpu="H100-SXM5-80GB", upgrade_only=True),
        Scenario(name="mixed-precision", description="FP16 automatic mixed precision", precision="fp16"),
        Scenario(
            name="op-fusion",
            description="element-wise op fusion halves memory-bound bytes (stated factor 0.5)",
            memory_bound_scale=0.5,
        ),
        Scenario(name="overlap-full", description="communication overlapped with computation", overlap="full"),
    )
}
"""Built-in scenarios by name."""

def load_scenarios(path: str | Path) -> list[Scenario]:
    """Read scenarios from a TOML (``[[scenario]]``) or JSON (list of objects) file.

    Raises:
        ValueError: unreadable or unparsable file, or an invalid entry (naming file, entry index
            and field).
    """
    path = Path(path)
    data = read_toml_or_json(path)
    entries = data.get("scenario") if isinstance(data, dict) else data
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: expected a non-empty list of scenarios ([[scenario]] tables in TOML)")
    out = []
    for i, entry in enumerate(entries):
        try:
            out.append(Scenario.model_validate(entry))
        except ValidationError as exc:
            errs = describe_validation(exc)
            if any(e["type"] == "extra_forbidden" for e in exc.errors()):
                errs += f"; valid keys: {', '.join(Scenario.model_fields)}"
            raise ValueError(f"{path}: scenario #{i + 1}: {errs}") from exc
    return out


def resolve_scenarios(names_or_files: list[str]) -> list[Scenario]:
    """Built-in scenario names and/or scenario files, in the order given.

    Raises:
        ValueError: a name that is neither a built-in scenario nor an existing file.
    """
    out: list[Scenario] = []
    for item in names_or_files:
        if item in BUILTIN_SCENARIOS:
            out.append(BUILTIN_SCENARIOS[item])
        elif Path(item).is_file():
            out.extend(load_scenarios(item))
        else:
            raise ValueError(
                f"scenario: {item!r} is neither a built-in scenario ({', '.join(BUILTIN_SCENARIOS)}) nor a file"
            )
    return out
