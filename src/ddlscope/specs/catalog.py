"""The hardware catalog: GPUs, links and server types, each number with its datasheet source.

The built-in catalog is package data (``ddlscope/specs/data/catalog.toml``). Users add or
override entries from their own TOML or JSON file with the same three sections::

    [gpu."MyGPU"]
    peak_tflops = { fp32 = 20.0, tf32 = 80.0, fp16 = 160.0, bf16 = 160.0 }
    memory_bandwidth_gb_s = 1000
    memory_gb = 48
    source = "vendor datasheet, 2025"

    [link."eth-800g"]
    kind = "ethernet"
    bandwidth_gb_s = 100.0
    latency_us = 20.0

    [server."my-box"]
    gpu = "MyGPU"
    gpus_per_server = 4
    pcie = "pcie5-x16"
    gpus_per_pcie_root = 2
    nvlink = ""
    nic = "eth-800g"
    storage_read_gb_s = 5.0

A *system file* (``--system-file`` of the CLI, or written by ``ddlscope calibrate``) may hold such
entries plus a ``[system]`` table naming a server and overrides (and a ``[calibration]`` table of
measurements, which the catalog ignores)::

    [system]
    server = "pai-v100-nvlink-8"
    gpu = "A100-SXM4-80GB"     # optional overrides: gpu, nic, nvlink ("none"), pcie,
    nic = "eth-100g"           # gpus_per_server, gpus_per_pcie_root, nics_per_server,
    [system.efficiency]        # storage_read_gb_s, efficiency
    network = 0.7
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ddlscope.specs.efficiency import ComputeEfficiency
from ddlscope.specs.errors import describe_validation
from ddlscope.specs.files import read_toml_or_json
from ddlscope.specs.system import GENERATIONS, Efficiency, GPUSpec, LinkSpec, ServerSpec, System

SECTIONS = ("gpu", "link", "server", "compute_efficiency")
IGNORED_SECTIONS = ("system", "calibration")
"""Sections of a system file the catalog itself does not read: ``[system]`` (resolved by
:func:`load_system`) and ``[calibration]`` (the measurements ``ddlscope calibrate`` writes beside
the entries, read by :mod:`ddlscope.calibrate`)."""
NO_NVLINK = "none"
_COUNT = re.compile(r"(?:^|\s)(\d+)\s*x\s*", re.IGNORECASE)
"""A GPU count in a server label: ``2x``, ``8x`` or ``4x`` glued to the name (``4xV100``)."""


class CatalogError(ValueError):
    """An unknown catalog name, or a catalog/system file that does not parse or validate."""


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        data = read_toml_or_json(path)
    except ValueError as exc:
        raise CatalogError(str(exc)) from exc
    if not isinstance(data, dict):
        raise CatalogError(f"{path}: expected a table/object at the top level")
    return data


class Catalog:
    """GPU, link and server entries by name, case-insensitive, with aliases for GPUs.

    Attributes:
        gpus, links, servers: dicts from canonical name to :class:`GPUSpec`, :class:`LinkSpec`,
            :class:`ServerSpec`.

    Raises:
        CatalogError: an entry that does not validate (naming section, entry and field), a server
            that refers to an unknown GPU or link, or an unknown name on look-up (listing the
            known ones).
    """

    def __init__(self, entries: Mapping[str, Mapping[str, Mapping[str, Any]]], origin: str = "catalog"):
        self.gpus: dict[str, GPUSpec] = {}
        self.links: dict[str, LinkSpec] = {}
        self.servers: dict[str, ServerSpec] = {}
        self.compute_efficiency: dict[str, ComputeEfficiency] = {}
        """Op-pricing parameters by GPU generation (plus ``default``), see :mod:`ddlscope.specs.efficiency`."""
        self._alias: dict[str, str] = {}
        self.overrides: list[str] = []
        """Entries a later file replaced (``section.name (from file)``), for a note to the user."""
        self.add(entries, origin)

    def add(self, entries: Mapping[str, Mapping[str, Mapping[str, Any]]], origin: str) -> None:
        """Add (or override) entries from a mapping ``{"gpu": {name: {...}}, "link": ..., "server": ...}``.

        An entry whose name matches an existing one after normalising (case, ``_``/``-``, spaces)
        or, for a GPU, matches one of its aliases, replaces it (recorded in :attr:`overrides`); a
        replaced GPU keeps the old entry's names as aliases.

        Raises:
            CatalogError: an unknown section, an entry that does not validate, a GPU written in the
                flat shape ``ddlscope catalog gpus`` prints (``fp32_tflops``, aliases as one string:
                the error shows the ``peak_tflops`` table), or a server naming an unknown entry.
        """
        unknown = set(entries) - set(SECTIONS) - set(IGNORED_SECTIONS)
        if unknown:
            raise CatalogError(f"{origin}: unknown section(s) {sorted(unknown)}; expected {list(SECTIONS)}")
        kinds = {"gpu": (GPUSpec, self.gpus), "link": (LinkSpec, self.links), "server": (ServerSpec, self.servers)}
        self._add_efficiencies(entries.get("compute_efficiency", {}), origin)
        for section in SECTIONS[:3]:
            block = entries.get(section, {})
            if not isinstance(block, Mapping):
                raise CatalogError(f"{origin}: [{section}] must be a table of named entries")
            model, target = kinds[section]
            for name, fields in block.items():
                if not isinstance(fields, Mapping):
                    raise CatalogError(f"{origin}: [{section}.{name}] must be a table")
                if section == "gpu":
                    _check_gpu_shape(fields, f"{origin}: [gpu.\"{name}\"]")
                try:
                    spec = model.model_validate({"name": name, **fields})
                except ValidationError as exc:
                    raise CatalogError(f"{origin}: [{section}.\"{name}\"]: {_describe(exc)}") from exc
                existing = self._existing(section, name)
                if existing is not None:
                    self.overrides.append(f"{section}.{existing}" + (f" as {name}" if existing != name else "")
                                          + f" (from {origin})")
                    old = target.pop(existing)
                    if section == "gpu":  # keep the names traces use for it (e.g. PAI's "V100")
                        spec = spec.model_copy(update={"aliases": tuple(dict.fromkeys(
                            (*old.aliases, *((existing,) if existing != name else ()), *spec.aliases)))})
                target[name] = spec
                if section == "gpu":
                    for alias in (name, *spec.aliases):
                        self._alias[_norm(alias)] = name
        for name, server in list(self.servers.items()):
            if _norm(server.nvlink) == NO_NVLINK:
                server = self.servers[name] = server.model_copy(update={"nvlink": ""})
            try:
                self.gpu(server.gpu)
                self.link(server.pcie)
                self.link(server.nic)
                if server.nvlink:
                    self.link(server.nvlink)
                try:  # each link fits its slot (no PCIe link as NVLink): checked where the entry is
                    self.system(name)
                except CatalogError as exc:
                    raise CatalogError(str(exc).removeprefix(f"system {name!r}: ")) from None
            except CatalogError as exc:
                raise CatalogError(f"{origin}: [server.\"{name}\"]: {exc}") from exc

    def _add_efficiencies(self, block: Any, origin: str) -> None:
        """Add ``[compute_efficiency."<generation>"]`` entries; a later entry for a generation
        replaces only the fields it gives (the rest stay, with their sources)."""
        if not isinstance(block, Mapping):
            raise CatalogError(f"{origin}: [compute_efficiency] must be a table of generations")
        for gen, fields in block.items():
            where = f"{origin}: [compute_efficiency.\"{gen}\"]"
            if gen != "default" and gen not in GENERATIONS:
                raise CatalogError(f"{where}: unknown generation; expected default or one of {', '.join(GENERATIONS)}")
            if not isinstance(fields, Mapping):
                raise CatalogError(f"{where} must be a table")
            base = self.compute_efficiency.get(gen) or self.compute_efficiency.get("default") or ComputeEfficiency()
            data = {**base.model_dump(), **fields, "generation": gen}
            src = fields.get("source", {})
            if isinstance(src, str):  # one source for every field the entry gives
                src = {k: src for k in fields if k != "source"}
            if not isinstance(src, Mapping):
                raise CatalogError(f"{where}: source: expected a string or a table field -> citation")
            given = {k: f"{v} ({origin})" for k, v in src.items()}
            data["source"] = {**base.source, **given}
            try:
                spec = ComputeEfficiency.model_validate(data)
            except ValidationError as exc:
                raise CatalogError(f"{where}: {_describe(exc)}") from exc
            if gen in self.compute_efficiency and origin != "built-in catalog":
                self.overrides.append(f"compute_efficiency.{gen} (from {origin})")
            self.compute_efficiency[gen] = spec

    def efficiency_for(self, gpu: GPUSpec) -> ComputeEfficiency:
        """The compute efficiencies of ``gpu``'s generation, or the ``default`` entry when the
        GPU has no generation or the catalog has none for it."""
        return (self.compute_efficiency.get(gpu.generation or "default") or self.compute_efficiency.get("default")
                or ComputeEfficiency())

    def _existing(self, section: str, name: str) -> str | None:
        """The key of the entry ``name`` replaces: the same name, a spelling that normalises equal
        (``v100_sxm2_16gb`` for ``V100-SXM2-16GB``) or, for a GPU, one of its aliases."""
        if section == "gpu":
            return self._alias.get(_norm(name))
        target = self.links if section == "link" else self.servers
        return next((key for key in target if _norm(key) == _norm(name)), None)

    # -- look-ups -------------------------------------------------------------------------------
    def gpu(self, name: str) -> GPUSpec:
        """The GPU named ``name`` or one of its aliases: case-insensitive, ``_``/``-``/spaces alike;
        a name that matches no entry that way but one entry with every separator removed (``gtx1080ti``,
        ``RTX2070``) is that entry.

        Raises:
            CatalogError: an empty name, or an unknown one (the message lists the closest names and
                every known GPU).
        """
        if not name or not name.strip():
            raise CatalogError(f"gpu: expected a GPU name, got {name!r}; known: {', '.join(sorted(self.gpus))}")
        key = self._alias.get(_norm(name))
        if key is None:
            squashed = {}
            for alias, target in self._alias.items():
                squashed.setdefault(alias.replace("-", "").replace(".", ""), set()).add(target)
            hits = squashed.get(_norm(name).replace("-", "").replace(".", ""), set())
            key = next(iter(hits)) if len(hits) == 1 else None
        if key is None:
            import difflib

            query = _norm(name)
            # names that contain the one given first (``tesla-v100`` -> the V100s), then the closest spellings
            near = sorted({t for a, t in self._alias.items() if query in a})[:6] or sorted(
                {self._alias[c] for c in difflib.get_close_matches(query, list(self._alias), n=3, cutoff=0.6)})
            hint = f" (did you mean {', '.join(near)}?)" if near else ""
            raise CatalogError(f"gpu: unknown GPU {name!r}{hint}; known: {', '.join(sorted(self.gpus))}")
        return self.gpus[key]

    def gpu_of_label(self, label: str) -> tuple[GPUSpec, int]:
        """The GPU and count of a server label such as benchmark tables write them
        (``"LambdaCloud 4xV100 16GB"``, ``"Dell 2x H100 80GB SXM5"``, ``"RTX 4090"``): a ``<n>x``
        token is the GPU count (1 without one) and the rest, with single spaces, is looked up as
        a GPU name or alias.

        Raises:
            CatalogError: the rest names no GPU (listing the known ones).
        """
        m = _COUNT.search(label)
        count = int(m.group(1)) if m else 1
        rest = " ".join((_COUNT.sub(" ", label, count=1) if m else label).split())
        return self.gpu(rest), count

    def link(self, name: str) -> LinkSpec:
        """The link named ``name`` (case-insensitive)."""
        for key, spec in self.links.items():
            if _norm(key) == _norm(name):
                return spec
        raise CatalogError(f"link: unknown link {name!r}; known: {', '.join(sorted(self.links))}")

    def server(self, name: str) -> ServerSpec:
        """The server type named ``name`` (case-insensitive)."""
        for key, spec in self.servers.items():
            if _norm(key) == _norm(name):
                return spec
        raise CatalogError(f"server: unknown server {name!r}; known: {', '.join(sorted(self.servers))}")

    def system(
        self,
        server: str,
        *,
        gpu: str | None = None,
        nic: str | None = None,
        nvlink: str | None = None,
        pcie: str | None = None,
        gpus_per_server: int | None = None,
        gpus_per_pcie_root: int | None = None,
        nics_per_server: int | None = None,
        storage_read_gb_s: float | None = None,
        efficiency: Efficiency | Mapping[str, float] | None = None,
        name: str | None = None,
    ) -> System:
        """A :class:`System` from server type ``server`` with optional overrides.

        ``nvlink="none"`` removes NVLink (GPU-to-GPU traffic then goes over PCIe).

        Raises:
            CatalogError: unknown names, or a combination that does not validate.
        """
        base = self.server(server)
        nv = base.nvlink if nvlink is None else ("" if _norm(nvlink) == NO_NVLINK else nvlink)
        def pick(value, default):  # an override of 0 is a value (and fails validation), not "unset"
            return default if value is None else value

        parts = {
            "gpu": self.gpu(base.gpu if gpu is None else gpu),  # an empty override is an error, not the default
            "gpus_per_server": pick(gpus_per_server, base.gpus_per_server),
            "pcie": self.link(base.pcie if pcie is None else pcie),
            "gpus_per_pcie_root": pick(gpus_per_pcie_root, base.gpus_per_pcie_root),
            "nvlink": self.link(nv) if nv else None,
            "nic": self.link(base.nic if nic is None else nic),
            "nics_per_server": pick(nics_per_server, base.nics_per_server),
            "storage_read_gb_s": pick(storage_read_gb_s, base.storage_read_gb_s),
        }
        if gpus_per_pcie_root is None and parts["gpus_per_server"] >= 1:
            # a smaller server than the type's: its GPUs cannot share a root with more GPUs than it has
            parts["gpus_per_pcie_root"] = min(parts["gpus_per_pcie_root"], parts["gpus_per_server"])
        # the label names what each override resolved to (an alias such as "V100" is one catalog GPU)
        resolved = {"gpu": parts["gpu"].name if gpu else None, "nic": nic, "nvlink": nvlink, "pcie": pcie}
        changed = [f"{k}={v}" for k, v in resolved.items() if v]
        label = name or (base.name + (f"[{','.join(changed)}]" if changed else ""))
        try:
            return System(name=label, efficiency=Efficiency.model_validate(dict(efficiency or {})), **parts)
        except ValidationError as exc:
            raise CatalogError(f"system {label!r}: {_describe(exc)}") from exc


_GPU_EXAMPLE = ("peak_tflops takes a table of the four precisions, e.g. TOML `peak_tflops = {fp32 = 15.7, "
                "tf32 = 15.7, fp16 = 125, bf16 = 15.7}` or JSON `\"peak_tflops\": {\"fp32\": 15.7, ...}`")


def _check_gpu_shape(fields: Mapping[str, Any], where: str) -> None:
    """Catch the flat shape ``ddlscope catalog gpus`` prints (``fp32_tflops``, aliases as one string)."""
    flat = sorted(k for k in fields if k.endswith("_tflops") and k != "peak_tflops")
    if flat:
        raise CatalogError(f"{where}: {', '.join(flat)}: not catalog fields; {_GPU_EXAMPLE} (docs/model.md)")
    if isinstance(fields.get("aliases"), str):
        raise CatalogError(f"{where}: aliases: expected a list of names, e.g. aliases = [\"V100\", \"Tesla V100\"], "
                           f"got {fields['aliases']!r}")


def _describe(exc: ValidationError) -> str:
    return describe_validation(exc)


@cache
def _builtin_entries() -> dict[str, Any]:
    text = resources.files("ddlscope.specs").joinpath("data/catalog.toml").read_text()
    return tomllib.loads(text)


def builtin_catalog() -> Catalog:
    """A fresh :class:`Catalog` holding the built-in entries (``specs/data/catalog.toml``)."""
    return Catalog(_builtin_entries(), origin="built-in catalog")


def load_catalog(*paths: str | Path) -> Catalog:
    """The built-in catalog extended (entries added or overridden) by the TOML/JSON ``paths``.

    Raises:
        CatalogError: a file that cannot be read, parsed or validated (naming the file and entry).
    """
    cat = builtin_catalog()
    for p in paths:
        path = Path(p)
        cat.add(_read_mapping(path), origin=str(path))
    return cat


def load_system(path: str | Path, catalog: Catalog | None = None) -> tuple[System, Catalog]:
    """Read a system file: catalog entries plus a ``[system]`` table (see module docstring).

    Returns the resolved :class:`System` and the catalog extended by the file's entries. A caller
    that needs the file's other tables too (``ddlscope validate``'s ``[calibration]``) reads the
    file once with :func:`read_system_file` and resolves it with :func:`system_from_mapping`.

    Raises:
        CatalogError: unreadable file, no ``[system]`` table, unknown names, invalid values.
    """
    path = Path(path)
    return system_from_mapping(read_system_file(path), catalog, origin=str(path))


def read_system_file(path: str | Path) -> dict[str, Any]:
    """The top-level table of a TOML or JSON system (or catalog) file, parsed, not yet validated.

    Raises:
        CatalogError: the file cannot be read or parsed, or its top level is not a table (naming it).
    """
    return _read_mapping(Path(path))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


_NAME = "a string (a catalog name)"
_SYSTEM_FIELDS: dict[str, tuple[str, Any]] = {
    "server": (_NAME, _is_str), "gpu": (_NAME, _is_str), "nic": (_NAME, _is_str), "pcie": (_NAME, _is_str),
    "nvlink": ('a string (a catalog name, or "none" for no NVLink)', _is_str),
    "name": ("a string", _is_str),
    "gpus_per_server": ("an integer", _is_int), "gpus_per_pcie_root": ("an integer", _is_int),
    "nics_per_server": ("an integer", _is_int), "storage_read_gb_s": ("a number (GB/s)", _is_number),
    "efficiency": (f"a table of factors in (0, 1] (some of {', '.join(Efficiency.model_fields)})",
                   lambda v: isinstance(v, Mapping)),
}
"""The fields of a ``[system]`` table: what each takes (as said in errors) and its type check."""


def system_from_mapping(data: Mapping[str, Any], catalog: Catalog | None = None, *,
                        origin: str = "system file") -> tuple[System, Catalog]:
    """Resolve a parsed system file (:func:`read_system_file`): its ``gpu``/``link``/``server``
    entries are added to ``catalog`` (a fresh built-in one by default) and its ``[system]`` table
    resolved against it; other top-level tables (``[calibration]``) are ignored.

    Returns the :class:`System` and the extended catalog.

    Raises:
        CatalogError: no ``[system]`` table with ``server`` (``[system]`` fields written at the
            top level are named and the table asked for), an unknown ``[system]`` field, a field of
            the wrong type (``gpu = 5``, ``nvlink = null``: what it takes and what it got), unknown
            names or invalid values; every message starts with ``origin`` (the file's path).
    """
    spec = data.get("system")
    if spec is None and isinstance(data.get("server"), str):
        # the [system] fields written at the top level, where `server` names catalog entries instead
        bare = sorted(k for k, v in data.items() if k in _SYSTEM_FIELDS and not isinstance(v, Mapping))
        raise CatalogError(
            f"{origin}: found {', '.join(bare)} at the top level; put them under a [system] table "
            f"(TOML: a line `[system]` above them; JSON: {{\"system\": {{\"server\": ...}}}}); "
            f"top-level [gpu]/[link]/[server] tables hold catalog entries")
    cat = catalog or builtin_catalog()
    cat.add({k: v for k, v in data.items() if k in SECTIONS}, origin=origin)
    if not isinstance(spec, Mapping) or "server" not in spec:
        raise CatalogError(f"{origin}: expected a [system] table with at least `server = \"<name>\"`")
    extra = set(spec) - set(_SYSTEM_FIELDS)
    if extra:
        raise CatalogError(f"{origin}: [system] has unknown field(s) {sorted(extra)}; expected some of "
                           f"{sorted(_SYSTEM_FIELDS)}")
    for key, value in spec.items():
        kind, ok = _SYSTEM_FIELDS[key]
        if not ok(value):
            raise CatalogError(f"{origin}: [system] {key}: expected {kind}, got {value!r}")
    try:
        return cat.system(**spec), cat
    except CatalogError as exc:
        raise CatalogError(f"{origin}: {exc}") from exc
