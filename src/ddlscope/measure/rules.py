"""Classification rules as data: kernel name -> class, precision, collective; host patterns.

The built-in rules are package data (``ddlscope/measure/data/trace_rules.toml``, every rule with
its rationale in comments). Users extend them with their own files (``ddlscope trace --rules
FILE``), in the same TOML format (or the same document as JSON, ``.json``; both read by
:func:`ddlscope.specs.files.read_toml_or_json`) or as a CSV of kernel rules (columns
``pattern,class,kind``).
User rules are tried before the built-in ones, so they can override any of them.

Patterns are regular expressions in the syntax of the Rust ``regex`` crate (what Polars uses);
the first matching rule wins. Classification runs once per *distinct* name, vectorised over the
names with Polars string expressions (one ``str.contains`` per rule), and the result is joined
back onto the events: a trace with 200,000 kernels and 400 distinct names costs 400 x rules regex
tests.
"""

from __future__ import annotations

import csv
import io
import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl

from ddlscope.model import collectives as model_collectives
from ddlscope.specs.files import read_toml_or_json

KERNEL_CLASSES: tuple[str, ...] = ("compute_bound", "memory_bound", "communication", "data_io", "device_copy")
"""Classes a kernel rule may assign. A name no rule matches is ``unclassified``."""
UNCLASSIFIED = "unclassified"
COLLECTIVES: tuple[str, ...] = (*model_collectives.COLLECTIVES, "other")
"""Communication kinds, in report order: the canonical collective names of
:data:`ddlscope.model.collectives.COLLECTIVES` and ``other`` (a communication kernel of no known
collective)."""
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16")
DEFAULT_PRECISION = "fp32"
MARKER_MODES: tuple[str, ...] = ("span", "start", "end")


class RulesError(ValueError):
    """A rules file that cannot be read, does not parse, or holds an invalid rule (the message
    names the file, the section, the rule's position and the field)."""


@dataclass(frozen=True)
class IterationMarker:
    """How to find iterations from CPU events: see the ``[[iteration_marker]]`` section of the
    built-in rules file for the meaning of ``mode``, ``end_pattern`` and ``warmup_pattern`` (a
    marker event whose name matches it is a warm-up iteration)."""

    name: str
    pattern: str
    mode: str
    end_pattern: str | None = None
    warmup_pattern: str | None = None
    event: str = "marker event"


@dataclass(frozen=True)
class TraceRules:
    """All rules, in the order they are tried (user rules first).

    Attributes:
        kernel: columns ``pattern``, ``class``, ``kind``, ``origin`` (file and rule number).
        precision: columns ``pattern``, ``precision``, ``origin``.
        collective: columns ``pattern``, ``kind``, ``origin``.
        host: ``data_loader`` and ``synchronisation`` patterns.
        markers: iteration markers, tried in order.
        origins: the files the rules came from (user files first, then the built-in file).
    """

    kernel: pl.DataFrame
    precision: pl.DataFrame
    collective: pl.DataFrame
    host: dict[str, str]
    markers: tuple[IterationMarker, ...]
    origins: tuple[str, ...] = field(default_factory=tuple)


_KERNEL_SCHEMA = {"pattern": pl.String, "class": pl.String, "kind": pl.String, "origin": pl.String}
_PRECISION_SCHEMA = {"pattern": pl.String, "precision": pl.String, "origin": pl.String}
_COLLECTIVE_SCHEMA = {"pattern": pl.String, "kind": pl.String, "origin": pl.String}
_HOST_KEYS = ("data_loader", "synchronisation")


def _check_pattern(pattern: Any, where: str, name: str = "pattern") -> str:
    """``pattern`` if it is a valid non-empty regular expression, else a :class:`RulesError`
    naming ``where`` (file and rule) and the field ``name``."""
    if not isinstance(pattern, str) or not pattern:
        raise RulesError(f"{where}: {name}: expected a non-empty regular expression, got {pattern!r}")
    try:
        pl.Series([""]).str.contains(pattern)
    except Exception as exc:  # polars raises ComputeError for a bad regex
        raise RulesError(f"{where}: {name} {pattern!r} is not a valid regular expression "
                         f"(Rust regex syntax): {str(exc).splitlines()[0]}") from exc
    return pattern


#: fields each rule of a section may set (an unknown field, e.g. a misspelt ``warmup_patern``, is an error)
_FIELDS: dict[str, tuple[str, ...]] = {
    "kernel": ("pattern", "class", "kind"),
    "precision": ("pattern", "precision"),
    "collective": ("pattern", "kind"),
    "iteration_marker": ("name", "pattern", "mode", "end_pattern", "warmup_pattern", "event"),
}


def _entries(data: dict[str, Any], section: str, origin: str) -> list[dict[str, Any]]:
    block = data.get(section, [])
    if not isinstance(block, list) or not all(isinstance(x, dict) for x in block):
        raise RulesError(f"{origin}: [[{section}]] must be an array of tables")
    for i, e in enumerate(block, 1):
        extra = set(e) - set(_FIELDS[section])
        if extra:
            raise RulesError(f"{origin}: [[{section}]] #{i}: unknown field(s) {sorted(extra)}; expected "
                             f"{', '.join(_FIELDS[section])}")
    return block


def _parse_toml(data: Any, origin: str) -> dict[str, Any]:
    """Check a parsed rules document (TOML or JSON) and return its rules by section; every error
    names ``origin`` (the file), the section, the rule's position and the field."""
    if not isinstance(data, dict):
        raise RulesError(f"{origin}: expected a table of sections (kernel, precision, collective, host, "
                         f"iteration_marker), got a {type(data).__name__}")
    unknown = set(data) - {"kernel", "precision", "collective", "host", "iteration_marker"}
    if unknown:
        raise RulesError(f"{origin}: unknown section(s) {sorted(unknown)}; expected kernel, precision, "
                         "collective, host, iteration_marker")
    kernel, precision, collective, markers = [], [], [], []
    for i, e in enumerate(_entries(data, "kernel", origin), 1):
        where = f"{origin}: [[kernel]] #{i}"
        cls = e.get("class")
        if cls not in KERNEL_CLASSES:
            raise RulesError(f"{where}: class: expected one of {', '.join(KERNEL_CLASSES)}, got {cls!r}")
        kind = e.get("kind", cls)
        if not isinstance(kind, str) or not kind:
            raise RulesError(f"{where}: kind: expected a non-empty string, got {kind!r}")
        if cls == "communication" and kind not in COLLECTIVES:
            raise RulesError(f"{where}: kind: a communication rule's kind must be one of "
                             f"{', '.join(COLLECTIVES)}, got {kind!r}")
        kernel.append({"pattern": _check_pattern(e.get("pattern"), where), "class": cls, "kind": kind,
                       "origin": f"{origin}#kernel{i}"})
    for i, e in enumerate(_entries(data, "precision", origin), 1):
        where = f"{origin}: [[precision]] #{i}"
        if e.get("precision") not in PRECISIONS:
            raise RulesError(f"{where}: precision: expected one of {', '.join(PRECISIONS)}, got {e.get('precision')!r}")
        precision.append({"pattern": _check_pattern(e.get("pattern"), where), "precision": e["precision"],
                          "origin": f"{origin}#precision{i}"})
    for i, e in enumerate(_entries(data, "collective", origin), 1):
        where = f"{origin}: [[collective]] #{i}"
        if e.get("kind") not in COLLECTIVES:
            raise RulesError(f"{where}: kind: expected one of {', '.join(COLLECTIVES)}, got {e.get('kind')!r}")
        collective.append({"pattern": _check_pattern(e.get("pattern"), where), "kind": e["kind"],
                           "origin": f"{origin}#collective{i}"})
    host = data.get("host", {})
    if not isinstance(host, dict):
        raise RulesError(f"{origin}: [host] must be a table of {', '.join(_HOST_KEYS)} patterns")
    if set(host) - set(_HOST_KEYS):
        raise RulesError(f"{origin}: [host]: unknown field(s) {sorted(set(host) - set(_HOST_KEYS))}; expected "
                         f"{', '.join(_HOST_KEYS)}")
    host = {k: _check_pattern(v, f"{origin}: [host]", k) for k, v in host.items()}
    for i, e in enumerate(_entries(data, "iteration_marker", origin), 1):
        where = f"{origin}: [[iteration_marker]] #{i}"
        if e.get("mode") not in MARKER_MODES:
            raise RulesError(f"{where}: mode: expected one of {', '.join(MARKER_MODES)}, got {e.get('mode')!r}")
        end, warm, event = e.get("end_pattern"), e.get("warmup_pattern"), e.get("event", "marker event")
        if not isinstance(event, str) or not event.strip():
            raise RulesError(f"{where}: event: expected a non-empty string (what one marker event is, e.g. "
                             f"'optimizer step'), got {event!r}")
        markers.append(IterationMarker(
            event=event.strip(),
            name=str(e.get("name") or e.get("pattern")), pattern=_check_pattern(e.get("pattern"), where),
            mode=e["mode"], end_pattern=None if end is None else _check_pattern(end, where, "end_pattern"),
            warmup_pattern=None if warm is None else _check_pattern(warm, where, "warmup_pattern"),
        ))
    return {"kernel": kernel, "precision": precision, "collective": collective, "host": host, "markers": markers}


def _parse_csv(text: str, origin: str) -> dict[str, Any]:
    """Kernel rules from CSV text: header ``pattern,class[,kind]`` (any order), one rule a row.

    Every field the header names is required in every row (a short row or an empty value is
    refused, naming the line and the field); without a ``kind`` column, kind = the class. Blank
    lines are skipped; line numbers count them (the header is line 1).

    Raises:
        RulesError: a bad header, a row with a missing, empty or extra field, or an invalid rule
            (``FILE: line N: FIELD: ...``).
    """
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise RulesError(f"{origin}: line 1: not valid CSV: {exc}") from None
    if not header or not {"pattern", "class"} <= set(header) or not set(header) <= {"pattern", "class", "kind"}:
        shown = header if header is None or len(str(header)) <= 200 else str(header)[:200] + "..."
        raise RulesError(f"{origin}: a CSV rules file needs the header pattern,class[,kind]; got {shown}")
    if len(set(header)) < len(header):
        dup = sorted({h for h in header if header.count(h) > 1})
        raise RulesError(f"{origin}: line 1: column(s) {', '.join(dup)} named twice in the header "
                         f"({','.join(header)}); expected pattern,class[,kind] once each")
    rows, lines = [], []
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise RulesError(f"{origin}: line {reader.line_num}: not valid CSV: {exc}") from None
        line = reader.line_num
        if not fields:
            continue
        if len(fields) > len(header):
            raise RulesError(f"{origin}: line {line}: {len(fields)} fields, the header has {len(header)} "
                             f"({','.join(header)})")
        for name, value in zip(header, fields + [""] * (len(header) - len(fields)), strict=True):
            if not value.strip():
                raise RulesError(f"{origin}: line {line}: {name}: missing (the header has {len(header)} fields: "
                                 f"{','.join(header)}; this row has {sum(1 for f in fields if f.strip())})")
        rows.append(dict(zip(header, fields, strict=True)))
        lines.append(line)
    try:
        return _parse_toml({"kernel": rows}, origin)
    except RulesError as exc:  # report CSV line numbers
        msg = str(exc)
        for i in range(len(rows), 0, -1):
            msg = msg.replace(f"[[kernel]] #{i}:", f"line {lines[i - 1]}:")
        raise RulesError(msg) from None


def _read_file(path: Path) -> dict[str, Any]:
    """The rules of one user file: a CSV of kernel rules (``.csv``), else TOML or JSON (``.json``)
    read by the project's :func:`~ddlscope.specs.files.read_toml_or_json`.

    Raises:
        RulesError: the file cannot be read or parsed (``<path>: cannot read: ...``, ``<path>: not
            valid TOML: ... (at line N, column M)``), or a rule is invalid (file, rule, field).
    """
    if path.suffix.lower() == ".csv":
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise RulesError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            raise RulesError(f"{path}: not valid UTF-8 at byte {exc.start + 1} (line {line}): byte "
                             f"0x{raw[exc.start]:02x} ({exc.reason}); expected a UTF-8 CSV file") from None
        return _parse_csv(text, str(path))
    try:
        data = read_toml_or_json(path)
    except ValueError as exc:
        raise RulesError(str(exc)) from exc
    return _parse_toml(data, str(path))


@cache
def _builtin() -> dict[str, Any]:
    text = resources.files("ddlscope.measure").joinpath("data/trace_rules.toml").read_text()
    return _parse_toml(tomllib.loads(text), "built-in trace_rules.toml")


def load_rules(*user_files: str | Path) -> TraceRules:
    """The built-in rules with ``user_files`` (TOML, JSON or CSV) tried first, in the order given.

    Raises:
        RulesError: an unreadable file, bad TOML/CSV, an unknown class/kind/precision/mode, or a
            pattern that is not a valid regular expression (the message names file, rule, field).
    """
    parts = [_read_file(Path(p)) for p in user_files] + [_builtin()]
    host: dict[str, str] = {}
    for part in reversed(parts):  # earlier files override later ones
        host.update(part["host"])
    return TraceRules(
        kernel=pl.DataFrame([r for p in parts for r in p["kernel"]], schema=_KERNEL_SCHEMA),
        precision=pl.DataFrame([r for p in parts for r in p["precision"]], schema=_PRECISION_SCHEMA),
        collective=pl.DataFrame([r for p in parts for r in p["collective"]], schema=_COLLECTIVE_SCHEMA),
        host=host,
        markers=tuple(m for p in parts for m in p["markers"]),
        origins=(*(str(p) for p in user_files), "built-in trace_rules.toml"),
    )


def _first_match(col: pl.Expr, patterns: list[str], values: list[str | None]) -> pl.Expr:
    """The value of the first pattern that ``col`` contains (null where none does)."""
    return pl.coalesce([pl.when(col.str.contains(p)).then(pl.lit(v)) for p, v in zip(patterns, values, strict=True)]
                       or [pl.lit(None, pl.String)])


def classify_names(names: pl.Series, rules: TraceRules) -> pl.DataFrame:
    """Classify distinct GPU activity names.

    Args:
        names: kernel / memcpy / memset names (duplicates allowed; classified once each).

    Returns:
        One row per distinct name: ``name``, ``class`` (one of :data:`KERNEL_CLASSES` or
        ``unclassified``), ``kind`` (the rule's kind; ``unclassified`` when no rule matched),
        ``precision`` (from the precision rules, :data:`DEFAULT_PRECISION` when none matched;
        meaningful for compute-bound kernels) and ``rule`` (the origin of the matching rule).
    """
    k = rules.kernel
    idx = _first_match(pl.col("name"), k["pattern"].to_list(), [str(i) for i in range(k.height)]).cast(pl.Int64)
    frame = pl.DataFrame({"name": names.unique()}).with_columns(_rule=idx)
    lookup = k.with_row_index("_rule").with_columns(pl.col("_rule").cast(pl.Int64)).rename({"origin": "rule"})
    p = rules.precision
    return (
        frame.join(lookup.drop("pattern"), on="_rule", how="left")
        .with_columns(
            pl.col("class").fill_null(UNCLASSIFIED),
            pl.col("kind").fill_null(UNCLASSIFIED),
            precision=_first_match(pl.col("name"), p["pattern"].to_list(), p["precision"].to_list())
            .fill_null(DEFAULT_PRECISION),
        )
        .drop("_rule")
    )


def collective_expr(col: pl.Expr, rules: TraceRules) -> pl.Expr:
    """Expression: the collective kind that ``col`` (an annotation name or a ``Collective name``
    argument) names, by the collective rules; null where no rule matches."""
    c = rules.collective
    return _first_match(col, c["pattern"].to_list(), c["kind"].to_list())
