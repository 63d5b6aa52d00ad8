"""The models ``ddlscope validate`` trains on this machine: zoo architectures at sizes a CPU core
runs a step of in a fraction of a second.

Each case is a factory ``factory(batch_size=...) -> (model, batch)`` in the zoo's convention, so
the same code is profiled on the meta device (:func:`ddlscope.profile.profile_model`) and trained
for real; the real batch replaces floating-point inputs by uniform random values (integer inputs,
indices and labels, stay 0: valid for every model).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class ValidationCase:
    """One model of the local validation.

    Attributes:
        name: label in the tables.
        zoo: the zoo model it shrinks.
        description: sizes, one line.
        factory: ``factory(batch_size=...) -> (model, batch)``.
        batch_size: samples per replica per step.
    """

    name: str
    zoo: str
    description: str
    factory: Callable[..., tuple[nn.Module, Any]]
    batch_size: int


def _resnet18_cifar(batch_size: int = 4) -> tuple[nn.Module, Any]:
    from ddlscope.profile.zoo.vision import resnet18_cifar

    return resnet18_cifar(batch_size=batch_size, image_size=32)


def _resnet18_64(batch_size: int = 8) -> tuple[nn.Module, Any]:
    from ddlscope.profile.zoo.vision import resnet18

    return resnet18(batch_size=batch_size, image_size=64)


def _transformer_small(batch_size: int = 8) -> tuple[nn.Module, Any]:
    from ddlscope.profile.zoo.nlp import TransformerNMT

    tokens = torch.zeros(batch_size, 32, dtype=torch.long)
    return (TransformerNMT(vocab=8000, d_model=256, heads=4, layers=2, d_ff=1024, max_len=64),
            (tokens, tokens.clone(), tokens.clone()))


DLRM_SMALL_MAX_ROWS = 20_000


def _dlrm_small(batch_size: int = 128) -> tuple[nn.Module, Any]:
    from ddlscope.profile.zoo.recsys import CRITEO_KAGGLE_TABLE_ROWS, DLRM

    rows = tuple(min(r, DLRM_SMALL_MAX_ROWS) for r in CRITEO_KAGGLE_TABLE_ROWS)
    batch = (torch.zeros(batch_size, 13), torch.zeros(len(rows), batch_size, dtype=torch.long),
             torch.zeros(batch_size))
    return DLRM(table_rows=rows), batch


MIND_SMALL_TABLES = {"item": 20_000, "category": 500, "brand": 2_000, "user": 20_000}
"""Rows of mind_small's tables (every table of the zoo's MIND, shrunk to fit a CPU core's step)."""


def _mind_small(batch_size: int = 64) -> tuple[nn.Module, Any]:
    from ddlscope.profile.zoo.recsys import mind

    return mind(batch_size=batch_size, seq_len=50, negatives=200, tables=MIND_SMALL_TABLES)


CASES: dict[str, ValidationCase] = {c.name: c for c in (
    ValidationCase("resnet18_cifar", "resnet18_cifar", "CIFAR ResNet-18, 4 images of 32 x 32", _resnet18_cifar, 4),
    ValidationCase("resnet18_64", "resnet18", "ResNet-18, 8 images of 64 x 64", _resnet18_64, 8),
    ValidationCase("transformer_small", "transformer_nmt",
                   "Transformer d 256, 2+2 layers, 4 heads, FFN 1024, vocabulary 8,000; 8 pairs x 32 tokens",
                   _transformer_small, 8),
    ValidationCase("dlrm_small", "dlrm", f"DLRM, Kaggle tables capped at {DLRM_SMALL_MAX_ROWS:,} rows; batch 128",
                   _dlrm_small, 128),
    ValidationCase("mind_small", "mind", "MIND, tables 20k items/users, 500 categories, 2k brands; 64 users x 50 "
                   "behaviours, 200 negatives", _mind_small, 64),
)}
"""The local validation models by name."""


def real_batch(batch: Any, seed: int = 0) -> Any:
    """``batch`` with floating-point tensors replaced by uniform [0, 1) values (integer tensors kept)."""
    gen = torch.Generator().manual_seed(seed)

    def fill(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return torch.rand(x.shape, generator=gen, dtype=x.dtype)
        return x

    if isinstance(batch, dict):
        return {k: fill(v) for k, v in batch.items()}
    if isinstance(batch, tuple | list):
        return type(batch)(fill(v) for v in batch)
    return fill(batch)


def call_model(model: nn.Module, batch: Any) -> torch.Tensor:
    """The loss of ``model`` on ``batch`` (dict -> kwargs, tuple -> args), as the profiler calls it."""
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, tuple | list):
        return model(*batch)
    return model(batch)
