"""Fuzz cases of the spec files users write: scenario files, system files and catalog files.

Each ``fuzz_*`` function takes a seed file (by default the examples of docs/model.md, below),
mutates it with :func:`ddlscope.testing.mutate.mutate`, reads it the way the CLI does and checks the
contract of docs/development.md: either a user error (``ValueError``, of which ``CatalogError`` and
pydantic's ``ValidationError`` are kinds) whose message is one line naming the file, or specs that
work: a scenario file's scenarios run through the what-if model on a one-job table, a system
file's system prices that job, a catalog file's servers resolve. Anything else raises
``AssertionError`` with the seed and mutations. They return a
:class:`~ddlscope.testing.fuzz_ingest.FuzzOutcome`.

- :func:`fuzz_scenario_file` (``specs/scenario.py``, through ``ddlscope.cli.common.parse_scenarios``);
- :func:`fuzz_system_file` (``specs/catalog.py`` ``load_system``, ``specs/system.py``);
- :func:`fuzz_catalog_file` (``specs/catalog.py`` ``load_catalog``).
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

from ddlscope.testing.fuzz_ingest import FuzzOutcome, check_user_error
from ddlscope.testing.mutate import mutate

SCENARIO_EXAMPLE = '''\
# scenarios.toml: ddlscope whatif --scenario scenarios.toml
[[scenario]]
name = "nic-100g-and-a100"
nic = "eth-100g"
gpu = "A100-SXM4-40GB"

[[scenario]]
name = "port-to-ring"
description = "PS jobs ported to ring all-reduce over NVLink 3"
only_architectures = ["ps_worker"]
architecture = "allreduce_local"
nvlink = "nvlink3"

[[scenario]]
name = "fp16-fused"
precision = "fp16"
memory_bound_scale = 0.5
overlap = 0.3
nics_per_server = 2
upgrade_only = true
'''
"""A scenario file: the first entry is the ``specs/scenario.py`` docstring's, the others use the
remaining fields (docs/model.md, "What-if scenarios")."""

SYSTEM_EXAMPLE = '''\
[system]
server = "dgx-a100"            # a catalog server (string)
gpu = "A100-SXM4-40GB"         # gpu, nic, pcie: catalog names (strings)
nvlink = "none"                # a catalog NVLink entry, or "none" (JSON null is an error)
gpus_per_server = 4            # gpus_per_server, gpus_per_pcie_root, nics_per_server: integers
storage_read_gb_s = 2.0        # a number, GB/s
efficiency = {compute = 0.5}   # a table of factors in (0, 1]
'''
"""The system file of docs/model.md."""

CATALOG_EXAMPLE = '''\
# my-catalog.toml: ddlscope predict --catalog my-catalog.toml -s my-l40s-box
[gpu."L40S"]
aliases = ["NVIDIA L40S"]                        # a list of other names traces use
peak_tflops = {fp32 = 91.6, tf32 = 183.0, fp16 = 362.0, bf16 = 362.0}   # dense, per precision
memory_bandwidth_gb_s = 864.0                    # 1 GB = 1e9 bytes
memory_gb = 48.0
source = "NVIDIA L40S datasheet (dense figures)"

[link."eth-50g"]
kind = "ethernet"                                # pcie, nvlink, ethernet, infiniband or host
rate_gbps = 50                                   # optional: the rate sold, in bits/s
bandwidth_gb_s = 6.25                            # bytes/s per direction
latency_us = 20.0                                # alpha of the alpha-beta model (assumed)
source = "IEEE 802.3cd 50GBASE"

[server."my-l40s-box"]
gpu = "L40S"                                     # names of entries, built-in or in this file
gpus_per_server = 4
pcie = "pcie4-x16"
gpus_per_pcie_root = 2                           # GPUs sharing one x16 uplink to the host
nvlink = "none"                                  # or an nvlink entry
nic = "eth-50g"
nics_per_server = 1
storage_read_gb_s = 2.0
source = "my lab's 4 x L40S server"
'''
"""The catalog file of docs/model.md."""


def _case(source: str | Path | None, example: str, name: str, seed: int, workdir: str | Path,
          kind: str) -> tuple[Path, bytes, list[str]]:
    data = Path(source).read_bytes() if source is not None else example.encode()
    mutated, mutations = mutate(data, seed)
    case = Path(workdir) / f"{kind}-{seed}"
    shutil.rmtree(case, ignore_errors=True)
    case.mkdir(parents=True)
    path = case / (Path(source).name if source is not None else name)
    path.write_bytes(mutated)
    return path, mutated, mutations


def _one_job(system):
    """A one-row Jobs table: ResNet-50-like demand, 4 PS workers on ``system``."""
    from ddlscope.model.jobs import job_row, jobs_frame
    from ddlscope.specs.architecture import Architecture
    from ddlscope.specs.workload import Workload

    w = Workload(batch_size=32, compute_bound_flops=1.2e12, memory_bound_bytes=20e9, dense_param_bytes=100e6,
                 num_gradient_tensors=160, input_bytes=19e6)
    return jobs_frame([job_row(w, Architecture(kind="ps_worker", num_workers=4, num_ps=1), system, job_id=0)])


def _check_finite(frame, what: str, seed: int, path: Path, mutations: list[str]) -> None:
    step = frame["step_s"].to_list()
    if any(s is None or not math.isfinite(s) or s <= 0 for s in step):
        raise AssertionError(f"seed {seed}, {path.name} mutated by {', '.join(mutations)}: {what} gives step "
                             f"times {step}")


def fuzz_scenario_file(seed: int, workdir: str | Path, source: str | Path | None = None) -> FuzzOutcome:
    """One fuzz case of scenario files: :data:`SCENARIO_EXAMPLE` (or ``source``) mutated, read as
    ``--scenario FILE`` is (``parse_scenarios`` with the built-in catalog), then every scenario run
    by :func:`~ddlscope.model.scenarios.whatif` on a one-job table (positive, finite step times).

    Raises:
        AssertionError: the contract is broken (module docstring).
    """
    from ddlscope.cli.common import parse_scenarios
    from ddlscope.model.scenarios import whatif
    from ddlscope.specs.catalog import builtin_catalog

    path, _, mutations = _case(source, SCENARIO_EXAMPLE, "scenarios.toml", seed, workdir, "scenario")
    cat = builtin_catalog()
    try:
        scenarios = parse_scenarios([str(path)], cat)
    except Exception as exc:  # any: the contract decides which are allowed
        return FuzzOutcome(seed, path, mutations, error=check_user_error(exc, [str(path)], seed, path, mutations))
    try:
        out = whatif(_one_job(cat.system("pai-v100-nvlink-8")), scenarios, cat)
    except Exception as exc:
        raise AssertionError(f"seed {seed}, {path.name} mutated by {', '.join(mutations)}: the scenarios load but "
                             f"whatif fails: {type(exc).__name__}: {exc}") from exc
    _check_finite(out, "whatif", seed, path, mutations)
    return FuzzOutcome(seed, path, mutations, jobs=out.height)


def fuzz_system_file(seed: int, workdir: str | Path, source: str | Path | None = None) -> FuzzOutcome:
    """One fuzz case of system files: :data:`SYSTEM_EXAMPLE` (or ``source``) mutated, read as
    ``--system-file`` is (:func:`~ddlscope.specs.catalog.load_system`), then a one-job table priced on
    the system (positive, finite step time).

    Raises:
        AssertionError: the contract is broken.
    """
    from ddlscope.model.step_time import breakdown
    from ddlscope.specs.catalog import load_system

    path, _, mutations = _case(source, SYSTEM_EXAMPLE, "system.toml", seed, workdir, "system")
    try:
        system, _ = load_system(path)
    except Exception as exc:
        return FuzzOutcome(seed, path, mutations, error=check_user_error(exc, [str(path)], seed, path, mutations))
    try:
        out = breakdown(_one_job(system))
    except Exception as exc:
        raise AssertionError(f"seed {seed}, {path.name} mutated by {', '.join(mutations)}: the system loads but the "
                             f"model fails: {type(exc).__name__}: {exc}") from exc
    _check_finite(out, "the system", seed, path, mutations)
    return FuzzOutcome(seed, path, mutations, jobs=out.height)


def fuzz_catalog_file(seed: int, workdir: str | Path, source: str | Path | None = None) -> FuzzOutcome:
    """One fuzz case of catalog files: :data:`CATALOG_EXAMPLE` (or ``source``) mutated, read as
    ``--catalog FILE`` is (:func:`~ddlscope.specs.catalog.load_catalog`), then every server the file
    defines resolved to a system.

    Raises:
        AssertionError: the contract is broken.
    """
    from ddlscope.specs.catalog import load_catalog, read_system_file

    path, _, mutations = _case(source, CATALOG_EXAMPLE, "catalog.toml", seed, workdir, "catalog")
    try:
        cat = load_catalog(path)
        servers = read_system_file(path).get("server", {})
        for name in servers:
            cat.system(name)
    except Exception as exc:
        return FuzzOutcome(seed, path, mutations, error=check_user_error(exc, [str(path)], seed, path, mutations))
    return FuzzOutcome(seed, path, mutations, jobs=len(servers))
