"""The local validation's models are the zoo's, at the sizes the cases state."""

from __future__ import annotations

import pytest
import torch

from ddlscope.profile.zoo.recsys import MIND, MIND_TABLES, mind
from ddlscope.validate.models import CASES, MIND_SMALL_TABLES


def test_mind_small_builds_the_zoo_mind_with_its_small_tables():
    model, batch = CASES["mind_small"].factory(batch_size=64)
    rows = {name: getattr(model, name).num_embeddings for name in ("item", "category", "brand", "user")}
    assert rows == MIND_SMALL_TABLES == {"item": 20_000, "category": 500, "brand": 2_000, "user": 20_000}
    assert model.item.embedding_dim == 64  # the zoo's dimension
    assert batch["hist_item"].shape == (64, 50) and batch["neg_item"].shape == (200,)


def test_mind_tables_override_some_rows_and_reject_unknown_names():
    with torch.device("meta"):  # the Tmall-scale defaults would allocate 2 x 2.56 GB
        model, _ = mind(batch_size=2, seq_len=4, negatives=3, tables={"item": 1_000})
        assert model.item.num_embeddings == 1_000  # given
        assert model.user.num_embeddings == MIND_TABLES["user"] == 10_000_000  # the default
        assert MIND(tables={}).brand.num_embeddings == MIND_TABLES["brand"] == 500_000
        with pytest.raises(ValueError, match=r"MIND tables: unknown \['items'\]"):
            MIND(tables={"items": 10})
        with pytest.raises(ValueError, match=r"expected whole row counts >= 1, got \{'brand': 0\}"):
            MIND(tables={"brand": 0})
