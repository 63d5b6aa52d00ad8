"""The sparse models trained by ``ddlscope ps-train``: their parameters, sharding and batches.

Both models are "embedding tables + an MLP", the shape of production sparse models (Wide&Deep,
DLRM, the PAI/IMC workloads): the embedding tables are sharded by key over the parameter servers,
the MLP's dense tensors are placed whole, one tensor per server round-robin.

* ``word``: next-word prediction from a bag of context words with negative sampling
  (word2vec's CBOW objective, Mikolov et al., NIPS 2013, with an MLP between the pooled context
  and the output embedding). Table 0 holds the context (input) embeddings, table 1 the output
  embeddings; keys are frequency ranks. For a batch of ``B`` positions ``p``:
  ``q = W2 relu(W1 mean(E0[w_{p-c..p-1}]) + b1) + b2``, loss =
  ``mean_B[ softplus(-q.E1[w_p]) + sum_{k=1..K} softplus(q.E1[n_k]) ]`` with ``K`` negatives
  drawn from the unigram distribution raised to 3/4 (word2vec's choice).
* ``ctr``: one shared hashed embedding table (table 0) for all categorical fields; the field
  embeddings are concatenated with the dense features and fed to an MLP with one hidden ReLU layer
  and a logit output; loss = binary cross-entropy with logits.

Sharding: key ``k`` of any table lives on server ``k mod M`` at local row ``k div M`` (the
``"mod"`` partition strategy of TensorFlow's ``tf.nn.embedding_lookup``); since word keys are
frequency ranks, this spreads the hot keys over all shards. Dense tensor ``i`` lives on server
``i mod M``.

Initial values are a function of the seed only, not of M: table rows ~ N(0, 0.1^2); dense weights
and biases ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (PyTorch's ``nn.Linear`` default bound).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ddlscope.pstrain.data import CtrSamples

TABLE_INIT_STD = 0.1
"""Standard deviation of the initial embedding values."""


@dataclass(frozen=True)
class TableSpec:
    """An embedding table: ``rows`` keys of ``dim`` float32 values."""

    table_id: int
    name: str
    rows: int
    dim: int


@dataclass(frozen=True)
class DenseSpec:
    """A dense tensor of the MLP; ``fan_in`` sets its initial range."""

    tensor_id: int
    name: str
    shape: tuple[int, ...]
    fan_in: int


@dataclass(frozen=True)
class ModelSpec:
    """A model's parameters: its tables and dense tensors, and its hyper-parameters."""

    kind: str
    tables: tuple[TableSpec, ...]
    dense: tuple[DenseSpec, ...]
    params: dict

    def dense_owner(self, tensor_id: int, num_servers: int) -> int:
        """The server holding dense tensor ``tensor_id``."""
        return tensor_id % num_servers

    def dense_ids_of(self, server_id: int, num_servers: int) -> tuple[int, ...]:
        """The dense tensors held by ``server_id`` (may be empty when M > tensors)."""
        return tuple(d.tensor_id for d in self.dense if d.tensor_id % num_servers == server_id)


def _mlp(in_dim: int, hidden: int, out_dim: int) -> tuple[DenseSpec, ...]:
    return (
        DenseSpec(0, "mlp.0.weight", (hidden, in_dim), in_dim),
        DenseSpec(1, "mlp.0.bias", (hidden,), in_dim),
        DenseSpec(2, "mlp.2.weight", (out_dim, hidden), hidden),
        DenseSpec(3, "mlp.2.bias", (out_dim,), hidden),
    )


def word_model_spec(vocab: int, dim: int, hidden: int, window: int, negatives: int) -> ModelSpec:
    """The word model: context and output tables of ``vocab`` x ``dim``, MLP dim -> hidden -> dim."""
    return ModelSpec(
        kind="word",
        tables=(TableSpec(0, "context_embeddings", vocab, dim), TableSpec(1, "output_embeddings", vocab, dim)),
        dense=_mlp(dim, hidden, dim),
        params={"vocab": vocab, "dim": dim, "hidden": hidden, "window": window, "negatives": negatives},
    )


def ctr_model_spec(rows: int, dim: int, hidden: int, fields: int, dense_features: int) -> ModelSpec:
    """The CTR model: one hashed table of ``rows`` x ``dim``; MLP (fields*dim + dense) -> hidden -> 1."""
    return ModelSpec(
        kind="ctr",
        tables=(TableSpec(0, "feature_embeddings", rows, dim),),
        dense=_mlp(fields * dim + dense_features, hidden, 1),
        params={"rows": rows, "dim": dim, "hidden": hidden, "fields": fields, "dense_features": dense_features},
    )


def init_table_shard(spec: TableSpec, server_id: int, num_servers: int, seed: int) -> np.ndarray:
    """Initial rows of ``spec`` held by ``server_id``: float32 (ceil((rows - s) / M), dim).

    Local row ``r`` is key ``r * M + s``; values are those of the whole table drawn from
    ``default_rng([seed, table_id])``, so they do not depend on M.
    """
    rng = np.random.default_rng([seed, spec.table_id])
    full = rng.normal(0.0, TABLE_INIT_STD, size=(spec.rows, spec.dim)).astype(np.float32)
    return np.ascontiguousarray(full[server_id::num_servers])


def init_dense(spec: DenseSpec, seed: int) -> np.ndarray:
    """Initial value of a dense tensor: float32 ``spec.shape`` ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    rng = np.random.default_rng([seed, 1_000_000 + spec.tensor_id])
    bound = 1.0 / np.sqrt(spec.fan_in)
    return rng.uniform(-bound, bound, size=spec.shape).astype(np.float32)


@dataclass(frozen=True)
class Batch:
    """One worker's mini-batch.

    Attributes:
        keys: per table, the unique int64 keys the batch touches (sorted).
        inverse: per table, int64 index arrays into ``keys`` giving each sample's rows
            (word: context (B, window) and target+negatives (B, 1+K); ctr: (B, fields)).
        dense: float32 (B, dense_features) inputs of the MLP (ctr), or None.
        labels: float32 (B,) click labels (ctr), or None.
        samples: B.
    """

    keys: tuple[np.ndarray, ...]
    inverse: tuple[np.ndarray, ...]
    dense: np.ndarray | None
    labels: np.ndarray | None
    samples: int


def _index_stream(n: int, batch_size: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Batches of ``min(batch_size, n)`` indices in ``[0, n)``, epoch after epoch, each epoch shuffled."""
    size = min(batch_size, n)
    buf = np.empty(0, dtype=np.int64)
    while True:
        while len(buf) < size:
            buf = np.concatenate([buf, rng.permutation(n)])
        yield buf[:size]
        buf = buf[size:]


def _unique(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    keys, inv = np.unique(a, return_inverse=True)
    return keys.astype(np.int64), inv.reshape(a.shape).astype(np.int64)


def word_batches(corpus_tokens: np.ndarray, counts: np.ndarray, spec: ModelSpec, worker_id: int,
                 num_workers: int, batch_size: int, seed: int) -> Iterator[Batch]:
    """Mini-batches of worker ``worker_id``: its contiguous 1/N of the text's positions, shuffled.

    Each sample is a position ``p >= window`` with context ``tokens[p-window:p]`` and target
    ``tokens[p]``, plus ``negatives`` keys drawn i.i.d. from ``counts^0.75`` (normalised).

    Raises:
        ValueError: the worker's share of the text has no position with a full context.
    """
    window, negatives = spec.params["window"], spec.params["negatives"]
    positions = np.arange(window, len(corpus_tokens))
    share = np.array_split(positions, num_workers)[worker_id]
    if len(share) == 0:
        raise ValueError(f"worker {worker_id}: the text's {len(corpus_tokens)} words leave no sample for "
                         f"{num_workers} workers with a context of {window} words")
    cdf = np.cumsum(counts.astype(np.float64) ** 0.75)
    cdf /= cdf[-1]
    rng = np.random.default_rng([seed, 7, worker_id])
    offsets = np.arange(-window, 0)
    for idx in _index_stream(len(share), batch_size, rng):
        p = share[idx]
        context = corpus_tokens[p[:, None] + offsets]
        negs = np.minimum(np.searchsorted(cdf, rng.random((len(p), negatives)), side="right"), len(cdf) - 1)
        outputs = np.concatenate([corpus_tokens[p][:, None], negs], axis=1)
        k0, i0 = _unique(context)
        k1, i1 = _unique(outputs)
        yield Batch((k0, k1), (i0, i1), None, None, len(p))


def ctr_batches(samples: CtrSamples, worker_id: int, num_workers: int, batch_size: int,
                seed: int) -> Iterator[Batch]:
    """Mini-batches of worker ``worker_id``: samples ``i`` with ``i mod N == worker_id``, shuffled.

    Raises:
        ValueError: the worker has no sample (fewer samples than workers).
    """
    mine = np.arange(worker_id, len(samples.labels), num_workers)
    if len(mine) == 0:
        raise ValueError(f"worker {worker_id}: {len(samples.labels)} samples leave none for {num_workers} workers")
    rng = np.random.default_rng([seed, 11, worker_id])
    for idx in _index_stream(len(mine), batch_size, rng):
        rows = mine[idx]
        k, inv = _unique(samples.keys[rows])
        yield Batch((k,), (inv,), samples.dense[rows], samples.labels[rows], len(rows))
