"""Per-op cost rules and the unique-rows estimate, against hand computation."""

from __future__ import annotations

import math

import polars as pl
import pytest
import torch
from torch import nn

from ddlscope.profile import profile_model
from ddlscope.profile.costs import distinct_elements, expected_unique_rows, rows_touched, tensor_bytes


def test_broadcast_operand_is_read_once():
    bias = torch.empty(768, device="meta")
    expanded = bias.expand(32, 128, 768)  # strides (0, 0, 1)
    assert distinct_elements(expanded) == 768
    assert tensor_bytes(expanded) == 768 * 4
    assert tensor_bytes(torch.empty(3, 5, dtype=torch.float16, device="meta")) == 3 * 5 * 2


def test_expected_unique_rows_hand_values():
    # N = 2, k = 2: 2 (1 - (1/2)^2) = 1.5
    assert expected_unique_rows(2, 2) == pytest.approx(1.5)
    # N = 100, k = 6: 100 (1 - 0.99^6) = 5.851985...
    assert expected_unique_rows(100, 6) == pytest.approx(100 * (1 - 0.99**6), rel=1e-12)
    # a single look-up touches one row; a single-row table is touched once
    assert expected_unique_rows(10_000_000, 1) == pytest.approx(1.0)
    assert expected_unique_rows(1, 5) == 1.0
    # never more than min(N, k): N = 30,522, k = 4,096 gives 3,833.11 (BERT's vocabulary, 8 x 512 tokens)
    u = expected_unique_rows(30_522, 4_096)
    assert u == pytest.approx(30_522 * (1 - (1 - 1 / 30_522) ** 4_096), rel=1e-12)
    assert u < 4_096
    with pytest.raises(ValueError, match="num_rows"):
        expected_unique_rows(0, 3)


def test_rows_touched_with_position_lookups():
    # 128 position ids (distinct) into 512 rows touch 128 rows; 100 more input-driven look-ups add their
    # expected distinct rows over the whole table, 512 (1 - (511/512)^100) (overlap with the position
    # rows ignored: an upper bound)
    assert rows_touched(512, 128, 128) == 128
    assert rows_touched(512, 228, 128) == pytest.approx(128 + 512 * (1 - (511 / 512) ** 100))
    assert rows_touched(100, 1000, 1000) == 100  # never more than the table
    with pytest.raises(ValueError, match="position_lookups"):
        rows_touched(10, 1, 2)


class Tiny(nn.Module):
    """embedding (100 x 8) -> relu -> linear 8 -> 4 (no bias) -> sum."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 8)
        self.lin = nn.Linear(8, 4, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lin(torch.relu(self.emb(ids))).sum()


def tiny_factory(batch_size: int = 2) -> tuple[nn.Module, torch.Tensor]:
    return Tiny(), torch.zeros(batch_size, 3, dtype=torch.long)


@pytest.fixture(scope="module")
def tiny():
    return profile_model(tiny_factory, optimizer="sgd")


def _row(result, phase: str, op: str) -> dict:
    rows = result.ops.filter((pl.col("phase") == phase) & (pl.col("op") == op))
    assert rows.height >= 1, (phase, op)
    return rows.row(0, named=True)


def test_embedding_lookup_bytes(tiny):
    # 2 x 3 = 6 int64 indices (48 B) + 6 gathered rows of 8 FP32 (192 B) read; 6 x 8 x 4 = 192 B written
    row = _row(tiny, "forward", "aten.embedding")
    assert (row["read_bytes"], row["write_bytes"], row["flops"]) == (48 + 192, 192, 0.0)
    assert row["table"] == "emb.weight" and row["module"] == "emb"


def test_elementwise_bytes(tiny):
    # relu on 2 x 3 x 8 FP32: read 192 B, write 192 B, one FLOP per element (48)
    row = _row(tiny, "forward", "aten.relu")
    assert (row["read_bytes"], row["write_bytes"], row["flops"]) == (192, 192, 48.0)


def test_matmul_bytes_and_flops(tiny):
    # (6 x 8) @ (8 x 4): read (48 + 32) x 4 = 320 B, write 24 x 4 = 96 B, 2 x 6 x 8 x 4 = 384 FLOPs
    row = _row(tiny, "forward", "aten.mm")
    assert (row["read_bytes"], row["write_bytes"], row["flops"]) == (320, 96, 384.0)
    assert row["class_by_type"] == "compute_bound"
    # intensity 384 / 416 = 0.92 FLOP/B is below the V100's FP32 ridge 15.7e12 / 900e9 = 17.4 FLOP/B
    assert row["intensity_flops_per_byte"] == pytest.approx(384 / 416)
    assert row["class_by_roofline"] == "memory_bound"
    assert row["roofline_s"] == pytest.approx(416 / 900e9)


def test_sparse_table_split_and_touched_rows(tiny):
    t = tiny.totals
    # the embedding is only looked up: sparse; the linear weight is the one dense gradient tensor
    assert (t["sparse_params"], t["dense_params"]) == (800, 32)
    assert (t["dense_param_bytes"], t["num_gradient_tensors"]) == (32 * 4, 1)
    assert t["embedding_table_bytes"] == 800 * 4
    rows = 100 * (1 - 0.99**6)  # 6 look-ups into 100 rows
    assert t["sparse_rows_touched_per_step"] == pytest.approx(rows)
    assert t["sparse_bytes_per_step"] == pytest.approx(rows * 8 * 4)
    # the sparse gradient holds the touched rows only, and plain sparse SGD reads gradient and
    # weight rows and writes the weight rows: 2 and 1 words of 4 B per touched element
    grad = _row(tiny, "backward", "aten.embedding_dense_backward")
    assert grad["write_bytes"] == round(rows * 8 * 4)
    upd = _row(tiny, "optimizer", "ddlscope.sparse_sgd_update")
    assert upd["estimated"]
    assert (upd["read_bytes"], upd["write_bytes"]) == (round(rows * 8 * 4 * 2), round(rows * 8 * 4))


def test_dense_sgd_update_bytes(tiny):
    # SGD, momentum 0.9, weight decay 1e-4 on the 4 x 8 weight (128 B each tensor):
    # d = g + wd p (read p, g; write d), buf = 0.9 buf (read/write), buf += d (read buf, d; write),
    # p -= lr buf (read p, buf; write p): 11 tensor passes = 1,408 B
    opt = tiny.ops.filter((pl.col("phase") == "optimizer") & ~pl.col("estimated"))
    assert int(opt["total_bytes"].sum()) == 11 * 128
    assert set(opt["module"]) == {"lin"}


def test_activation_memory(tiny):
    # live after the forward: relu's output h (2 x 3 x 8 x 4 = 192 B, saved by relu and mm) and the
    # scalar loss (4 B); the embedding and mm outputs are already freed
    assert tiny.totals["activation_bytes"] == 192 + 4
    t = tiny.totals
    assert t["peak_memory_bytes"] >= t["param_bytes"] + t["optimizer_state_bytes"] + t["input_bytes"]


def test_dense_embeddings_option():
    r = profile_model(tiny_factory, embedding_gradients="dense")
    assert r.totals["embedding_table_bytes"] == 0
    assert r.totals["dense_param_bytes"] == (800 + 32) * 4
    assert r.totals["num_gradient_tensors"] == 2
    # a dense embedding gradient is the whole table: 100 x 8 x 4 B written
    assert _row(r, "backward", "aten.embedding_dense_backward")["write_bytes"] == 3200
    assert r.params.filter(pl.col("name") == "emb.weight")["kind"].item() == "dense"


def test_params_table_formula_matches_function(tiny):
    row = tiny.params.filter(pl.col("name") == "emb.weight").row(0, named=True)
    assert row["rows_touched_per_step"] == pytest.approx(expected_unique_rows(100, 6), rel=1e-12)
    assert row["rows"] == 100 and row["row_bytes"] == 32 and row["lookups_per_step"] == 6
    assert math.isclose(row["touched_bytes_per_step"], row["rows_touched_per_step"] * 32)


def test_pytorch_sparse_embedding_profiles_like_a_lookup_only_table(tiny):
    """nn.Embedding(sparse=True) (PyTorch's sparse gradients) gives the same totals as the plain table."""

    def sparse_factory(batch_size: int = 2) -> tuple[nn.Module, torch.Tensor]:
        model = Tiny()
        model.emb = nn.Embedding(100, 8, sparse=True)
        return model, torch.zeros(batch_size, 3, dtype=torch.long)

    t = profile_model(sparse_factory, optimizer="sgd").totals
    for key in ("sparse_bytes_per_step", "embedding_table_bytes", "dense_param_bytes", "memory_bound_bytes"):
        assert t[key] == pytest.approx(tiny.totals[key]), key
