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

The ``check_*`` functions read one file and run it (for :mod:`ddlscope.testing.fuzz_targets`);
:func:`replace_value` is a TOML-aware mutation that keeps the file parseable.
"""

from __future__ import annotations

import math
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
# my-catalog.toml: ddlscope predict --catalog my-catalog.toml -s my-a4500-box
[gpu."RTX-A4500"]
aliases = ["NVIDIA RTX A4500"]                   # a list of other names traces use
peak_tflops = {fp32 = 23.7, tf32 = 47.3, fp16 = 94.6, bf16 = 94.6}   # dense, per precision
memory_bandwidth_gb_s = 640.0                    # 1 GB = 1e9 bytes
memory_gb = 20.0
generation = "ampere"                            # optional: selects the compute-efficiency curves
tensor_core_precisions = ["tf32", "fp16", "bf16"]  # optional
sm_count = 56                                    # optional, with the next two: the power-limited tensor
boost_clock_mhz = 1650                           #   clock (0.969 of boost here; "How true it is" below)
board_power_w = 200                              #   the datasheet's max power, W
# max_clock_mhz = 2100                           # optional: nvidia-smi -q "Max Clocks" SM, where above boost
# tensor_rate_of_die = 0.5                       # optional: 0.5 on GeForce RTX boards (half-rate FP32 accumulate)
source = "NVIDIA RTX A4500 datasheet (2021): 23.7 TFLOPS FP32, 189.2 sparse tensor, 640 GB/s, 20 GB, 200 W"

[link."eth-50g"]
kind = "ethernet"                                # pcie, nvlink, ethernet, infiniband or host
rate_gbps = 50                                   # optional: the rate sold, in bits/s
bandwidth_gb_s = 6.25                            # bytes/s per direction
latency_us = 20.0                                # alpha of the alpha-beta model (assumed)
source = "IEEE 802.3cd 50GBASE"

[server."my-a4500-box"]
gpu = "RTX-A4500"                                # names of entries, built-in or in this file
gpus_per_server = 4
pcie = "pcie4-x16"
gpus_per_pcie_root = 2                           # GPUs sharing one x16 uplink to the host
nvlink = "none"                                  # or an nvlink entry
nic = "eth-50g"
nics_per_server = 1
storage_read_gb_s = 2.0
source = "my lab's 4 x RTX A4500 server"
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


def _check_finite(frame, what: str) -> None:
    step = frame["step_s"].to_list()
    if any(s is None or not math.isfinite(s) or s <= 0 for s in step):
        raise AssertionError(f"{what} gives step times {step}")


def _model_runs(what: str, run: Callable[[], Any]) -> Any:
    """``run()``: the model on specs that loaded; any error of it is a failure (``AssertionError``)."""
    try:
        return run()
    except Exception as exc:
        raise AssertionError(f"{what}: {type(exc).__name__}: {exc}") from exc


def check_scenario_file(path: str | Path) -> int:
    """Read ``path`` as ``--scenario FILE`` is (``parse_scenarios`` with the built-in catalog), then
    run every scenario by :func:`~ddlscope.model.scenarios.whatif` on a one-job table; the
    scenarios run.

    Raises:
        A user error (``ValueError``) from loading the file; ``AssertionError`` when scenarios that
        loaded do not run, or give a step time that is not positive and finite.
    """
    from ddlscope.cli.common import parse_scenarios
    from ddlscope.model.scenarios import whatif
    from ddlscope.specs.catalog import builtin_catalog

    cat = builtin_catalog()
    scenarios = parse_scenarios([str(path)], cat)
    out = _model_runs("the scenarios load but whatif fails",
                      lambda: whatif(_one_job(cat.system("pai-v100-nvlink-8")), scenarios, cat))
    _check_finite(out, "whatif")
    return len(scenarios)


def check_system_file(path: str | Path) -> int:
    """Read ``path`` as ``--system-file`` is (:func:`~ddlscope.specs.catalog.load_system`), then
    price a one-job table on the system; the jobs priced (1).

    Raises:
        A user error from loading; ``AssertionError`` when the model fails on the loaded system.
    """
    from ddlscope.model.step_time import breakdown
    from ddlscope.specs.catalog import load_system

    system, _ = load_system(path)
    out = _model_runs("the system loads but the model fails", lambda: breakdown(_one_job(system)))
    _check_finite(out, "the system")
    return out.height


def check_catalog_file(path: str | Path) -> int:
    """Read ``path`` as ``--catalog FILE`` is (:func:`~ddlscope.specs.catalog.load_catalog`), then
    resolve every server the file defines to a system; the servers resolved.

    Raises:
        A user error (loading, or a server that does not resolve).
    """
    from ddlscope.specs.catalog import load_catalog, read_system_file

    cat = load_catalog(path)
    servers = read_system_file(path).get("server", {})
    for name in servers:
        cat.system(name)
    return len(servers)


def _fuzz(check: Callable[[Path], int], source: str | Path | None, example: str, name: str, seed: int,
          workdir: str | Path, kind: str) -> FuzzOutcome:
    path, _, mutations = _case(source, example, name, seed, workdir, kind)
    try:
        n = check(path)
    except AssertionError as exc:
        raise AssertionError(f"seed {seed}, {path.name} mutated by {', '.join(mutations)}: {exc}") from exc
    except Exception as exc:  # any: the contract decides which are allowed
        return FuzzOutcome(seed, path, mutations, error=check_user_error(exc, [str(path)], seed, path, mutations))
    return FuzzOutcome(seed, path, mutations, jobs=n)


def fuzz_scenario_file(seed: int, workdir: str | Path, source: str | Path | None = None) -> FuzzOutcome:
    """One fuzz case of scenario files: :data:`SCENARIO_EXAMPLE` (or ``source``) mutated, then
    :func:`check_scenario_file`.

    Raises:
        AssertionError: the contract is broken (module docstring).
    """
    return _fuzz(check_scenario_file, source, SCENARIO_EXAMPLE, "scenarios.toml", seed, workdir, "scenario")


def fuzz_system_file(seed: int, workdir: str | Path, source: str | Path | None = None) -> FuzzOutcome:
    """One fuzz case of system files: :data:`SYSTEM_EXAMPLE` (or ``source``) mutated, then
    :func:`check_system_file`.

    Raises:
        AssertionError: the contract is broken.
    """
    return _fuzz(check_system_file, source, SYSTEM_EXAMPLE, "system.toml", seed, workdir, "system")


def fuzz_catalog_file(seed: int, workdir: str | Path, source: str | Path | None = None) -> FuzzOutcome:
    """One fuzz case of catalog files: :data:`CATALOG_EXAMPLE` (or ``source``) mutated, then
    :func:`check_catalog_file`.

    Raises:
        AssertionError: the contract is broken.
    """
    return _fuzz(check_catalog_file, source, CATALOG_EXAMPLE, "catalog.toml", seed, workdir, "catalog")


VALUES: tuple[str, ...] = ("-1", "0", "-0.0", "1e308", "1e-308", "nan", "inf", "-inf", "9223372036854775808", '""',
                           '"x"', "true", "[]", "{}", '"none"', "0.5", "3")
"""Values of other types and ranges a user might write in place of any value."""


def replace_value(data: bytes, rng: random.Random) -> bytes:
    """A TOML-aware mutation: replace the value of 1 to 3 ``key = value`` lines by one of
    :data:`VALUES`, so the file still parses and the specs' own checks are reached."""
    lines = data.split(b"\n")
    spots = [i for i, ln in enumerate(lines) if re.match(rb"^\s*[A-Za-z_\"][^=]*=", ln)]
    for i in rng.sample(spots, min(len(spots), rng.randint(1, 3))):
        key = lines[i].split(b"=", 1)[0]
        lines[i] = key + b"= " + rng.choice(VALUES).encode()
    return b"\n".join(lines)
