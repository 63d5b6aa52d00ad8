"""Parameter placement, initial values and mini-batches of the two models."""

from __future__ import annotations

import numpy as np

from ddlscope.pstrain.data import load_ctr, load_text
from ddlscope.pstrain.models import (
    ctr_batches,
    ctr_model_spec,
    init_dense,
    init_table_shard,
    word_batches,
    word_model_spec,
)


def test_shards_partition_the_table_by_key_mod_servers():
    spec = word_model_spec(vocab=10, dim=3, hidden=4, window=2, negatives=1)
    full = init_table_shard(spec.tables[0], 0, 1, seed=5)
    s0, s1, s2 = (init_table_shard(spec.tables[0], s, 3, seed=5) for s in range(3))
    # keys 0,3,6,9 on server 0; 1,4,7 on server 1; 2,5,8 on server 2; local row = key // 3
    assert (len(s0), len(s1), len(s2)) == (4, 3, 3)
    np.testing.assert_array_equal(s1[2], full[7])
    np.testing.assert_array_equal(s0[3], full[9])
    # dense tensors round-robin: 4 tensors on 3 servers -> server 0 holds 0 and 3
    assert spec.dense_ids_of(0, 3) == (0, 3) and spec.dense_ids_of(2, 3) == (2,)
    assert spec.dense_ids_of(4, 5) == ()


def test_dense_init_range_is_one_over_sqrt_fan_in():
    spec = word_model_spec(vocab=10, dim=16, hidden=64, window=2, negatives=1)
    w1 = init_dense(spec.dense[0], seed=0)  # fan_in = dim = 16 -> bound 0.25
    assert w1.shape == (64, 16) and w1.dtype == np.float32
    assert np.abs(w1).max() <= 0.25 and np.abs(w1).max() > 0.24


def test_word_batches_rebuild_the_text(shared_data):
    corpus = load_text(shared_data / "text" / "tinyshakespeare.txt")
    spec = word_model_spec(len(corpus.words), 8, 8, window=3, negatives=4)
    batch = next(word_batches(corpus.tokens, corpus.counts, spec, worker_id=1, num_workers=2, batch_size=64, seed=0))
    k0, k1 = batch.keys
    i0, i1 = batch.inverse
    assert batch.samples == 64 and i0.shape == (64, 3) and i1.shape == (64, 5)
    assert np.all(np.diff(k0) > 0) and np.all(np.diff(k1) > 0)  # unique and sorted
    context = k0[i0]
    # each sample's context is 3 consecutive words of the second half of the text, followed by the target
    n = len(corpus.tokens)
    for row, target in zip(context[:8], k1[i1[:8, 0]], strict=True):
        starts = np.flatnonzero((corpus.tokens[:-3] == row[0]) & (corpus.tokens[1:-2] == row[1])
                                & (corpus.tokens[2:-1] == row[2]) & (corpus.tokens[3:] == target))
        assert (starts + 3 >= 3 + (n - 3) // 2).any()
    assert k1.max() < len(corpus.words)


def test_ctr_batches_split_samples_round_robin(shared_data):
    samples = load_ctr(shared_data / "criteo" / "criteo_sample.txt", rows=1 << 12)
    spec = ctr_model_spec(1 << 12, 4, 8, fields=26, dense_features=13)
    assert spec.dense[0].shape == (8, 26 * 4 + 13)
    batch = next(ctr_batches(samples, worker_id=1, num_workers=2, batch_size=32, seed=0))
    (keys,), (inv,) = batch.keys, batch.inverse
    # every sample of worker 1 is an odd row of the file: its keys and label match that row
    rows = [np.flatnonzero((samples.keys == keys[inv[i]]).all(axis=1)) for i in range(32)]
    assert all((r % 2 == 1).any() for r in rows)
    assert batch.dense.shape == (32, 13) and batch.labels.shape == (32,)
