"""Trace model labels -> model-zoo names, and model mixes for traces without labels.

The built-in table is package data (``ddlscope/ingest/data/model_map.toml``); users extend or
override it with a file of the same shape (``[models]`` table of ``label = "zoo_name"``) or a
mapping. Labels match after :func:`normalize_label` (lower case, only ``a-z0-9`` kept). A value
``""`` records that the zoo has no model of that kind.

:data:`ZOO_MODELS` lists the zoo's names (from its registry, without importing torch) so that a
typo in a user map is caught early. A name outside it is accepted with ``strict=False`` (a user's
own zoo entry).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path

import polars as pl

from ddlscope.profile.zoo import ZOO
from ddlscope.specs.files import parse_pairs, read_toml_or_json

ZOO_MODELS: tuple[str, ...] = tuple(ZOO)
"""Model names of the model zoo (:data:`ddlscope.profile.zoo.ZOO`, a registry that imports no
torch); workloads are attached to jobs by these names later."""

GOLDEN_RATIO_CONJUGATE = (math.sqrt(5.0) - 1.0) / 2.0
"""phi - 1 = 0.618..., the step of the Weyl sequence used by :func:`assign_model_mix`."""


def normalize_label(expr: pl.Expr) -> pl.Expr:
    """Labels as matched: lower case, every character other than ``a-z0-9`` removed."""
    return expr.str.to_lowercase().str.replace_all(r"[^a-z0-9]", "")


def _norm(label: str) -> str:
    return "".join(ch for ch in label.lower() if ch.isascii() and ch.isalnum())


def _read(path: Path) -> Mapping[str, object]:
    data = read_toml_or_json(path, section="models")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a [models] table of label = \"zoo_name\" entries")
    return data


class ModelMap:
    """Label -> zoo model name (``None`` for a label known to have no zoo model).

    Raises:
        ValueError: a value that is not a string, two labels that normalise alike with different
            models in one source, or (``strict``) a model name outside :data:`ZOO_MODELS`;
            each naming the source and label.
    """

    def __init__(self) -> None:
        self._map: dict[str, str | None] = {}

    def add(self, entries: Mapping[str, object], origin: str, *, strict: bool = True) -> ModelMap:
        """Add (or override) ``entries`` (label -> zoo name or ``""``); returns ``self``."""
        seen: dict[str, tuple[str, str]] = {}
        for label, model in entries.items():
            if not isinstance(model, str):
                raise ValueError(f"{origin}: label {label!r}: expected a zoo model name string, got {model!r}")
            key = _norm(str(label))
            if not key:
                raise ValueError(f"{origin}: label {label!r} has no letters or digits")
            name = model.strip()
            if strict and name and name not in ZOO_MODELS:
                raise ValueError(
                    f"{origin}: label {label!r}: unknown zoo model {name!r}; expected one of {', '.join(ZOO_MODELS)}"
                )
            if key in seen and seen[key][1] != name:
                raise ValueError(
                    f"{origin}: labels {seen[key][0]!r} and {label!r} match alike but map to "
                    f"{seen[key][1]!r} and {name!r}"
                )
            seen[key] = (str(label), name)
            self._map[key] = name or None
        return self

    def copy(self) -> ModelMap:
        """An independent copy (adding to it leaves this map unchanged)."""
        out = ModelMap()
        out._map = dict(self._map)
        return out

    def as_dict(self) -> dict[str, str | None]:
        """Normalised label -> zoo name (``None``: no zoo model)."""
        return dict(self._map)

    def __contains__(self, label: str) -> bool:
        return _norm(label) in self._map

    def lookup(self, label: str) -> str | None:
        """The zoo name of one label (``None`` if unmapped or mapped to no model)."""
        return self._map.get(_norm(label))

    def expr(self, label: pl.Expr) -> pl.Expr:
        """Vectorised look-up: a String expression of zoo names, null where the label is null,
        unknown, or known to have no zoo model."""
        keys = list(self._map)
        values = [self._map[k] for k in keys]
        return normalize_label(label).replace_strict(keys, values, default=None, return_dtype=pl.String)


@cache
def _builtin_entries() -> dict[str, object]:
    text = resources.files("ddlscope.ingest").joinpath("data/model_map.toml").read_text()
    return dict(tomllib.loads(text)["models"])


def builtin_model_map() -> ModelMap:
    """A fresh :class:`ModelMap` of the built-in labels (``ingest/data/model_map.toml``)."""
    return ModelMap().add(_builtin_entries(), "built-in model map")


def load_model_map(source: ModelMap | Mapping[str, str] | str | Path | None = None, *, strict: bool = True) -> ModelMap:
    """The built-in map extended by ``source``: a :class:`ModelMap` (used as is), a mapping, or a
    TOML/JSON file with a ``[models]`` table (or the entries at the top level).

    Raises:
        ValueError: see :class:`ModelMap`; an unreadable or unparsable file.
    """
    if isinstance(source, ModelMap):
        return source
    base = builtin_model_map()
    if source is None:
        return base
    if isinstance(source, Mapping):
        return base.add(source, "model map", strict=strict)
    path = Path(source)
    return base.add(_read(path), str(path), strict=strict)


def parse_model_mix(text: str | Mapping[str, float] | None, *, strict: bool = True) -> dict[str, float] | None:
    """A model mix ``{"resnet50": 0.7, "bert_base": 0.3}`` from a mapping or the CLI form
    ``resnet50=0.7,bert_base=0.3``; weights are normalised to sum to 1.

    Raises:
        ValueError: an entry without ``=``, a weight that is not a positive number, no entries, or
            (``strict``) a model outside :data:`ZOO_MODELS`.
    """
    if text is None:
        return None
    if isinstance(text, Mapping):
        items = [(str(k), v) for k, v in text.items()]
    else:
        items = list(parse_pairs((p for p in text.split(",") if p.strip()), what="model mix",
                                 expected="model=weight").items())
    mix: dict[str, float] = {}
    for name, weight in items:
        try:
            w = float(weight)
        except (TypeError, ValueError):
            raise ValueError(f"model mix: weight of {name!r}: expected a number, got {weight!r}") from None
        if not (w > 0 and math.isfinite(w)):
            raise ValueError(f"model mix: weight of {name!r}: expected a positive number, got {weight!r}")
        if strict and name not in ZOO_MODELS:
            raise ValueError(f"model mix: unknown zoo model {name!r}; expected one of {', '.join(ZOO_MODELS)}")
        if name in mix:
            raise ValueError(f"model mix: {name!r} is given twice")
        mix[name] = mix.get(name, 0.0) + w
    if not mix:
        raise ValueError("model mix: expected at least one model=weight entry")
    total = sum(mix.values())
    return {k: v / total for k, v in mix.items()}


def assign_model_mix(mask: pl.Expr, mix: Mapping[str, float]) -> pl.Expr:
    """Zoo names for the rows where ``mask`` is true, in the proportions of ``mix``; null elsewhere.

    Rule (deterministic, no random seed): the k-th masked row in table order (k = 1, 2, ...) gets
    ``u_k = frac(k * (phi - 1))`` (the Weyl / golden-ratio sequence, equidistributed on [0, 1)) and
    the first model whose cumulative weight exceeds ``u_k``. The share of each model among n rows
    then differs from its weight by O(log n / n) (the sequence's discrepancy; Kuipers and
    Niederreiter, *Uniform Distribution of Sequences*, 1974), i.e. by a handful of jobs.
    """
    k = mask.cast(pl.Int64).cum_sum()
    u = (k.cast(pl.Float64) * GOLDEN_RATIO_CONJUGATE) % 1.0
    names = list(mix)
    expr: pl.Expr = pl.lit(names[-1])
    cumulative = 0.0
    chain = None
    for name in names[:-1]:
        cumulative += mix[name]
        chain = pl.when(u < cumulative).then(pl.lit(name)) if chain is None else chain.when(u < cumulative).then(
            pl.lit(name)
        )
    if chain is not None:
        expr = chain.otherwise(expr)
    return pl.when(mask).then(expr).otherwise(None).cast(pl.String)
