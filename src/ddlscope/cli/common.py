"""Options and helpers shared by the commands: job construction, catalog, errors."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from ddlscope.engine import MissingExtraError
from ddlscope.specs.architecture import ARCHITECTURES, Architecture
from ddlscope.specs.catalog import Catalog, CatalogError, load_catalog, load_system
from ddlscope.specs.errors import describe_validation
from ddlscope.specs.examples import EXAMPLE_SERVER
from ddlscope.specs.files import parse_pairs
from ddlscope.specs.scenario import BUILTIN_SCENARIOS, Scenario, resolve_scenarios
from ddlscope.specs.system import System
from ddlscope.specs.traits import traits_of

err_console = Console(stderr=True, soft_wrap=True)  # long messages (paths) stay on one line
"""The console of every command's progress, notes, warnings and errors (stderr)."""
out_console = Console(soft_wrap=True)
"""The console of every command's result lines beside ``report.console.emit``'s tables (stdout)."""

F = TypeVar("F", bound=Callable[..., Any])


def _shown(text: str) -> str:
    """``text`` with control characters as ``\\xNN`` (:func:`ddlscope.report.console.shown`), imported
    only when an error is printed (commands import no report module at start-up)."""
    from ddlscope.report.console import shown

    return shown(text)




def user_errors(func: F) -> F:
    """Turn the errors a user can cause (bad input, and an optional extra not installed:
    :class:`~ddlscope.engine.MissingExtraError`) into a red message and exit code 2 (no traceback)."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ValidationError as exc:
            err_console.print(f"[red]error:[/red] {escape(_shown(describe_validation(exc, exc.title.lower())))}",
                              emoji=False)
        except (ValueError, CatalogError, FileNotFoundError, OSError, MissingExtraError) as exc:
            err_console.print(f"[red]error:[/red] {escape(_shown(str(exc)))}", emoji=False)
        sys.exit(2)

    return wrapper  # type: ignore[return-value]


def user_catalog(files: list[Path] | None) -> Catalog:
    """The built-in catalog extended by ``--catalog`` files; a note on stderr names every built-in
    entry a file replaced (a replaced GPU keeps its aliases)."""
    catalog = load_catalog(*(files or []))
    if catalog.overrides:
        err_console.print(f"[yellow]note:[/yellow] replaced catalog entries: {escape(', '.join(catalog.overrides))}")
    return catalog


def check_output_file(path: Path | None, option: str) -> None:
    """Check, before any work, that ``path`` can be written as a file: it is not a folder and no
    folder above it is a file (the folders that do not exist yet are created when writing).

    Raises:
        ValueError: ``--params-out afile/p.csv: afile is a file, not a folder`` and the like.
    """
    if path is None:
        return
    if path.is_dir():
        raise ValueError(f"{option} {path}: is a folder; expected a file name")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{option} {path}: {parent} is a file, not a folder")
            break


_LOOKUPS = {"system": "server", "gpu": "gpu", "nic": "link", "nvlink": "link", "pcie": "link"}


def check_names(catalog: Catalog, **names: str | None) -> None:
    """Look up every catalog name a command's options give (``nic="eth-10g"``, ``system=...``,
    ``gpu=...``) before the command does any work; ``None`` values are skipped and ``nvlink="none"``
    is allowed.

    Raises:
        CatalogError: an unknown name, worded ``--nic: unknown link 'x'; known: ...`` (the option,
            not the catalog section, leads the message).
    """
    for option, value in names.items():
        if value is None or (option == "nvlink" and value.strip().lower() == "none"):
            continue
        section = _LOOKUPS[option]
        try:
            getattr(catalog, section)(value)
        except CatalogError as exc:
            raise CatalogError(f"--{option.replace('_', '-')}: {str(exc).removeprefix(section + ': ')}") from None


# -- options ------------------------------------------------------------------------------------
CatalogFiles = Annotated[
    list[Path] | None,
    typer.Option("--catalog", help="extra catalog file(s) (TOML/JSON) adding GPUs, links, servers"),
]
SystemName = Annotated[
    str | None, typer.Option("--system", "-s", help=f"server type from the catalog (default {EXAMPLE_SERVER})")
]
SystemFile = Annotated[
    Path | None,
    typer.Option(
        "--system-file",
        help="system file (a [system] table naming a server, with overrides; e.g. written by `ddlscope calibrate`)",
    ),
]
GpuOpt = Annotated[str | None, typer.Option("--gpu", help="override the server's GPU (catalog name)")]
NicOpt = Annotated[str | None, typer.Option("--nic", help="override the NIC (catalog link name)")]
NvlinkOpt = Annotated[
    str | None, typer.Option("--nvlink", help="override NVLink (catalog link name, or 'none')")
]
ArchOpt = Annotated[
    str | None,
    typer.Option("--architecture", "-a", help=f"one of {', '.join(ARCHITECTURES)}"),
]
WorkersOpt = Annotated[int | None, typer.Option("--workers", "-w", help="worker processes")]
GpusPerWorkerOpt = Annotated[int | None, typer.Option("--gpus-per-worker", help="GPUs per worker")]
PsOpt = Annotated[int | None, typer.Option("--ps", help="parameter-server shards (ps_worker)")]
ServersOpt = Annotated[int | None, typer.Option("--servers", help="servers (default: as few as fit)")]
ParallelOpt = Annotated[
    str | None,
    typer.Option("--parallel", help="fsdp/3d settings as key=value,...: sharding (zero1|zero2|zero3|hybrid or "
                 "FULL_SHARD...), tp, pp, cp, ep, virtual_stages, microbatches; e.g. -a 3d -w 32 --parallel tp=4,pp=2,"
                 "microbatches=16"),
]
PARALLEL_KEYS: tuple[str, ...] = ("sharding", "tp", "pp", "cp", "ep", "virtual_stages", "microbatches")
OverlapOpt = Annotated[
    str, typer.Option("--overlap", help="communication/computation overlap: scheduled (gradient buckets behind "
                      "the backward, the last one exposed, plus the wait for the slowest rank; fsdp: the prefetch of "
                      "the next unit's parameters; 3d: nothing hidden), none, full, or a fraction")
]
FlashAttentionVersionOpt = Annotated[
    int | None,
    typer.Option("--flash-attention-version", min=1, max=2,
                 help="the flash-attn release the job runs: 2 (flash-attn 2.x, PyTorch's SDPA) or 1 (flash-attn 1.x, "
                      "the PyTorch 1.13-era stacks); priced at the catalog's attention_eff / attention_v1_eff "
                      "(a decoder LLM config with flash attention only; default 2)"),
]
FormatOpt = Annotated[str, typer.Option("--format", "-f", help="table, json or csv")]
OverwriteOpt = Annotated[
    bool,
    typer.Option("--overwrite", help="write the report's files into a non-empty folder that holds no ddlscope "
                 "report (its other files are kept)"),
]


def resolve_system(
    system: str | None, system_file: Path | None, gpu: str | None, nic: str | None, nvlink: str | None,
    catalog_files: list[Path] | None,
) -> tuple[System, Catalog]:
    """The System from ``--system-file`` or ``--system`` with overrides, and the catalog used."""
    catalog = user_catalog(catalog_files)
    if system_file is not None:
        if gpu or nic or nvlink or system:
            raise ValueError("--system/--gpu/--nic/--nvlink: give the server and its overrides in the system file "
                             "when --system-file is given")
        base, catalog = load_system(system_file, catalog)
        return base, catalog
    return catalog.system(system or EXAMPLE_SERVER, gpu=gpu, nic=nic, nvlink=nvlink), catalog


def parse_parallel(text: str | None) -> dict[str, str | int]:
    """``--parallel`` ``key=value,...`` (keys of :data:`PARALLEL_KEYS`; ``sharding`` a name, the
    other keys counts as whole numbers >= 1); empty pairs (``tp=2,,pp=2``) are skipped.

    Raises:
        ValueError: a pair without ``=``, an unknown key, a key given more than once (``--parallel:
            ep is given 2 times (ep=8, ep=4); give each key once``), or a count that is not a
            whole number >= 1 (``--parallel: tp expects a whole number >= 1, got '0'``).
    """
    out: dict[str, str | int] = {}
    given: dict[str, list[str]] = {}
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in PARALLEL_KEYS:
            unknown = f" (unknown key {key!r})" if sep else ""
            raise ValueError(f"--parallel: expected key=value with a key of {', '.join(PARALLEL_KEYS)}, "
                             f"got {pair.strip()!r}{unknown}")
        given.setdefault(key, []).append(f"{key}={value}")
        if key == "sharding":
            out[key] = value
            continue
        try:
            count = int(value)
        except ValueError:
            count = 0
        if count < 1:
            raise ValueError(f"--parallel: {key} expects a whole number >= 1, got {value!r}")
        out[key] = count
    twice = {key: pairs for key, pairs in given.items() if len(pairs) > 1}
    if twice:
        raise ValueError("--parallel: " + "; ".join(f"{key} is given {len(pairs)} times ({', '.join(pairs)})"
                                                    for key, pairs in twice.items()) + "; give each key once")
    return out


def resolve_architecture(
    kind: str | None, workers: int | None, gpus_per_worker: int | None, ps: int | None, servers: int | None,
    default: Architecture, parallel: str | None = None,
) -> Architecture:
    """The Architecture from the flags; unset flags take sensible values for the kind.

    Without ``--architecture`` the ``default`` is used, with any count flags applied to it;
    ``parallel`` is the ``--parallel`` text (:func:`parse_parallel`: fsdp's sharding, 3d's tp/pp/...).
    """
    if kind is None:
        fields = default.model_dump()
    else:
        fields = {"kind": kind, "num_workers": 1, "gpus_per_worker": 1, "num_ps": 0, "num_servers": None}
        if traits_of(kind).parameter_servers:
            fields["num_ps"] = 1
    for key, value in (("num_workers", workers), ("gpus_per_worker", gpus_per_worker), ("num_ps", ps),
                       ("num_servers", servers)):
        if value is not None:
            fields[key] = value
    fields.update(parse_parallel(parallel))
    t = traits_of(kind) if kind is not None else None
    if t is not None and workers is None and gpus_per_worker is None and not t.one_worker and t.min_gpus > 1:
        # an explicit kind starts from one worker: say what to give rather than "expects >= 2 GPUs"
        split = [int(fields.get(k) or 1) for k in ("tp", "pp", "cp")]
        need = max(t.min_gpus, split[0] * split[1] * split[2])
        raise ValueError(f"-a {kind}: give the GPU count with -w/--workers (at least {need}"
                         + (f": tp x pp x cp = {need}" if need > t.min_gpus else "") + ")")
    if (kind is not None and traits_of(kind).one_worker and traits_of(kind).max_gpus != 1
            and gpus_per_worker is None and workers and workers > 1):
        # `-a 1wng -w 4` reads naturally as four GPUs under one worker
        fields["num_workers"], fields["gpus_per_worker"] = 1, workers
    return Architecture.model_validate(fields)


def parse_scenarios(items: list[str] | None, catalog: Catalog | None = None) -> list[Scenario]:
    """The ``--scenario`` values: built-in names, scenario files, or inline ``name:key=value,...``
    scenarios (all built-ins when none are given). With ``catalog``, every GPU, link and server
    they name is looked up there before any job is read
    (:func:`ddlscope.model.scenarios.check_scenarios`).

    Raises:
        ValueError: an unknown name, a bad file or inline field (an unknown inline key lists the
            valid ones), a scenario name given twice (naming where each came from), or
            (``catalog``) ``FILE: scenario NAME: unknown GPU ...`` and the like (the file named
            when the scenario came from one).
    """
    sourced = _parse_scenarios(items)
    where: dict[str, list[str]] = {}
    for source, sc in sourced:
        where.setdefault(sc.name, []).append(source)
    twice = {name: sources for name, sources in where.items() if len(sources) > 1}
    if twice:
        raise ValueError("; ".join(f"scenario {name!r} is given {len(sources)} times ({', '.join(sources)})"
                                   for name, sources in twice.items()) + ": scenario names must be unique")
    if catalog is not None:
        from ddlscope.model.scenarios import check_scenarios

        for source, sc in sourced:
            try:
                check_scenarios([sc], catalog)
            except ValueError as exc:
                raise ValueError(f"{source}: {exc}" if source not in ("built-in", "inline") else str(exc)) from None
    return [sc for _, sc in sourced]


_SCENARIO_KEYS = ", ".join(k for k in Scenario.model_fields if k != "name")


def _parse_scenarios(items: list[str] | None) -> list[tuple[str, Scenario]]:
    """``(source, scenario)`` pairs; source is ``built-in``, ``inline`` or the scenario file."""
    if not items:
        return [("built-in", sc) for sc in BUILTIN_SCENARIOS.values()]
    out: list[tuple[str, Scenario]] = []
    for item in items:
        if ":" in item and "=" in item:
            name, _, body = item.partition(":")
            pairs = parse_pairs((p for p in body.split(",") if p.strip()), what=f"--scenario {item!r}",
                                expected="key=value pairs after 'name:'")
            if "name" in pairs:
                raise ValueError(f"--scenario {item!r}: the name goes before ':', not in name=...")
            fields: dict[str, object] = {"name": name, **pairs}
            if "only_architectures" in fields:
                fields["only_architectures"] = tuple(str(fields["only_architectures"]).split("+"))
            try:
                out.append(("inline", Scenario.model_validate(fields)))
            except ValidationError as exc:
                unknown = any(e["type"] == "extra_forbidden" for e in exc.errors())
                raise ValueError(f"--scenario {item!r}: {describe_validation(exc, 'scenario')}"
                                 + (f"; valid keys: {_SCENARIO_KEYS}" if unknown else "")) from None
        elif item in BUILTIN_SCENARIOS:
            out.append(("built-in", BUILTIN_SCENARIOS[item]))
        else:
            out.extend((item, sc) for sc in resolve_scenarios([item]))
    return out
