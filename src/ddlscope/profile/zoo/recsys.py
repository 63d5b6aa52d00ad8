"""Recommendation models with large embedding tables: MIND and DLRM (our own definitions)."""

from __future__ import annotations

from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import nn

# -- MIND (Li et al., CIKM 2019) ------------------------------------------------------------------
MIND_TABLES: dict[str, int] = {"item": 10_000_000, "category": 20_000, "brand": 500_000, "user": 10_000_000}
"""Rows of MIND's tables: our stated assumptions at Tmall scale (the paper's Tmall data has
hundreds of millions of users and items; these sizes keep the tables realistic for one model
replica: 5.3 GB in FP32 at dimension 64)."""


def _squash(z: torch.Tensor) -> torch.Tensor:
    """Capsule squashing ``|z|^2 / (1 + |z|^2) * z / |z|`` over the last dimension (Sabour et al. 2017)."""
    sq = (z * z).sum(-1, keepdim=True)
    return sq / (1.0 + sq) * z / torch.sqrt(sq + 1e-9)


class MIND(nn.Module):
    """Multi-Interest Network with Dynamic routing (Li et al., CIKM 2019), training with sampled softmax.

    - Embedding & pooling: an item is the mean of its id, category and brand embeddings (dim ``d``).
    - Multi-interest extractor: behaviour-to-interest (B2I) dynamic routing with a shared bilinear
      map ``S`` (``d x d``), ``K`` interest capsules, ``r`` iterations, routing logits initialised
      from a fixed Gaussian, ``squash`` non-linearity; logits updated with the agreement
      ``caps_j . S e_i`` (through detached behaviours, as reference implementations do).
    - Each capsule concatenated with the user-profile embedding -> two ReLU layers -> ``K`` user
      vectors.
    - Label-aware attention: ``v_u = V_u softmax((V_u^T e_target)^p)``, ``p = 2``.
    - Sampled softmax: the target item against ``n_neg`` negatives shared by the batch.

    ``forward(user (B,), hist_item/hist_category/hist_brand (B, L), target_item/target_category/
    target_brand (B,), neg_item/neg_category/neg_brand (N,))`` returns the loss (a scalar).

    ``tables`` gives rows of some of the four tables (``item``, ``category``, ``brand``, ``user``);
    the others keep :data:`MIND_TABLES`' rows.

    Raises:
        ValueError: a ``tables`` key that is not one of the four, or a row count below 1.
    """

    def __init__(self, dim: int = 64, interests: int = 4, routing_iterations: int = 3, max_len: int = 50,
                 tables: dict[str, int] | None = None, power: float = 2.0):
        super().__init__()
        rows = {**MIND_TABLES, **(tables or {})}
        unknown = sorted(set(rows) - set(MIND_TABLES))
        if unknown:
            raise ValueError(f"MIND tables: unknown {unknown}; expected some of {sorted(MIND_TABLES)}")
        small = {k: v for k, v in rows.items() if not (isinstance(v, int) and v >= 1)}
        if small:
            raise ValueError(f"MIND tables: expected whole row counts >= 1, got {small}")
        self.item = nn.Embedding(rows["item"], dim)
        self.category = nn.Embedding(rows["category"], dim)
        self.brand = nn.Embedding(rows["brand"], dim)
        self.user = nn.Embedding(rows["user"], dim)
        self.bilinear = nn.Linear(dim, dim, bias=False)
        self.user_mlp = nn.Sequential(nn.Linear(2 * dim, 4 * dim), nn.ReLU(), nn.Linear(4 * dim, dim), nn.ReLU())
        self.interests, self.iterations, self.power = interests, routing_iterations, power
        self.register_buffer("routing_init", torch.randn(1, interests, max_len), persistent=False)

    def _items(self, item: torch.Tensor, category: torch.Tensor, brand: torch.Tensor) -> torch.Tensor:
        return (self.item(item) + self.category(category) + self.brand(brand)) / 3.0

    def forward(self, user: torch.Tensor, hist_item: torch.Tensor, hist_category: torch.Tensor,
                hist_brand: torch.Tensor, target_item: torch.Tensor, target_category: torch.Tensor,
                target_brand: torch.Tensor, neg_item: torch.Tensor, neg_category: torch.Tensor,
                neg_brand: torch.Tensor) -> torch.Tensor:
        """Sampled-softmax cross-entropy of the batch (a scalar)."""
        b, length = hist_item.shape
        behaviours = self.bilinear(self._items(hist_item, hist_category, hist_brand))  # (B, L, d)
        fixed = behaviours.detach()
        logits = self.routing_init[:, :, :length].expand(b, self.interests, length)
        for it in range(self.iterations):
            weights = torch.softmax(logits, dim=1)  # each behaviour's weights over the interests
            last = it == self.iterations - 1
            capsules = _squash(torch.bmm(weights, behaviours if last else fixed))  # (B, K, d)
            if not last:
                logits = logits + torch.bmm(capsules, fixed.transpose(1, 2))
        profile = self.user(user).unsqueeze(1).expand(b, self.interests, -1)
        users = self.user_mlp(torch.cat([capsules, profile], dim=-1))  # (B, K, d)
        target = self._items(target_item, target_category, target_brand)  # (B, d)
        attention = torch.softmax(torch.pow(torch.bmm(users, target.unsqueeze(2)).squeeze(2), self.power), dim=1)
        user_vec = torch.bmm(attention.unsqueeze(1), users).squeeze(1)  # (B, d)
        negatives = self._items(neg_item, neg_category, neg_brand)  # (N, d)
        scores = torch.cat([(user_vec * target).sum(-1, keepdim=True), user_vec @ negatives.t()], dim=1)
        return F.cross_entropy(scores, torch.zeros(b, dtype=torch.long, device=scores.device))


def mind(batch_size: int = 512, seq_len: int = 50, negatives: int = 1000,
         tables: dict[str, int] | None = None) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """MIND and a batch of ``batch_size`` users with ``seq_len`` behaviours, targets and
    ``negatives`` shared negatives; ``tables`` overrides rows of :data:`MIND_TABLES` (:class:`MIND`).

    Raises:
        ValueError: bad ``tables`` (:class:`MIND`).
    """
    hist = torch.zeros(batch_size, seq_len, dtype=torch.long)
    one = torch.zeros(batch_size, dtype=torch.long)
    neg = torch.zeros(negatives, dtype=torch.long)
    batch = {
        "user": one, "hist_item": hist, "hist_category": hist.clone(), "hist_brand": hist.clone(),
        "target_item": one.clone(), "target_category": one.clone(), "target_brand": one.clone(),
        "neg_item": neg, "neg_category": neg.clone(), "neg_brand": neg.clone(),
    }
    return MIND(max_len=seq_len, tables=tables), batch


# -- DLRM (Naumov et al. 2019) --------------------------------------------------------------------
CRITEO_KAGGLE_TABLE_ROWS: tuple[int, ...] = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992, 5461306,
    10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)
"""Distinct values of the 26 categorical features of the Criteo Kaggle Display Advertising Challenge
data (45,840,617 samples) as facebookresearch/dlrm's preprocessing counts them (33,762,577 rows)."""


def _mlp(sizes: tuple[int, ...], last_relu: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2 or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """DLRM (Naumov et al. 2019) as facebookresearch/dlrm's Criteo Kaggle benchmark configures it:
    bottom MLP 13-512-256-64-16 (ReLU), 26 sum-pooled ``EmbeddingBag`` tables of dimension 16,
    pairwise dot-product interaction of the 27 vectors (351 pairs, no self-interaction), top MLP
    367-512-256-1, binary cross-entropy on the logit.

    ``forward(dense (B, 13) float, sparse (26, B) int64, labels (B,) float)`` returns the loss.
    """

    def __init__(self, table_rows: tuple[int, ...] = CRITEO_KAGGLE_TABLE_ROWS, dim: int = 16,
                 bottom: tuple[int, ...] = (13, 512, 256, 64, 16), top: tuple[int, ...] = (512, 256, 1)):
        super().__init__()
        self.bottom = _mlp(bottom, last_relu=True)
        self.tables = nn.ModuleList(nn.EmbeddingBag(n, dim, mode="sum") for n in table_rows)
        features = len(table_rows) + 1
        li, lj = torch.tril_indices(features, features, offset=-1)
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)
        self.top = _mlp((dim + features * (features - 1) // 2, *top), last_relu=False)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Binary cross-entropy of the click predictions (a scalar)."""
        x = self.bottom(dense)
        pooled = [table(sparse[i].view(-1, 1)) for i, table in enumerate(self.tables)]
        t = torch.stack([x, *pooled], dim=1)  # (B, 27, d)
        z = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]  # (B, 351)
        logit = self.top(torch.cat([x, z], dim=1)).squeeze(1)
        return F.binary_cross_entropy_with_logits(logit, labels)


def dlrm(batch_size: int = 128) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """DLRM and a Criteo-like batch: 13 dense features, one index per table, click labels."""
    batch = (torch.zeros(batch_size, 13), torch.zeros(len(CRITEO_KAGGLE_TABLE_ROWS), batch_size, dtype=torch.long),
             torch.zeros(batch_size))
    return DLRM(), batch


# -- NCF / NeuMF (He et al., WWW 2017) ------------------------------------------------------------
ML1M_USERS, ML1M_ITEMS = 6040, 3706
"""Users and items of MovieLens 1M as the NCF authors' preprocessed ml-1m split holds them
(He et al. 2017, Table 1: 6,040 users, 3,706 items)."""


class NeuMF(nn.Module):
    """NeuMF, the fusion of GMF and an MLP (He et al., "Neural Collaborative Filtering", WWW 2017,
    sec. 3.4), trained from scratch ("NeuMF-end") with binary cross-entropy on logits, as the Pollux
    (OSDI 2021) ``ncf`` benchmark configures it (adaptdl benchmark/models/ncf: 32 predictive
    factors, 3 MLP layers, dropout 0, ml-1m): GMF embeddings of dimension ``f``, MLP embeddings of
    ``f * 2^(L-1)`` per side, MLP ``2 f 2^(L-1) -> ... -> f`` halving with ReLU, prediction
    ``Linear(2 f, 1)`` on the concatenated GMF and MLP outputs.

    ``forward(user (B,) int64, item (B,) int64, label (B,) float) -> loss``.
    """

    def __init__(self, users: int = ML1M_USERS, items: int = ML1M_ITEMS, factors: int = 32, layers: int = 3):
        super().__init__()
        mlp_dim = factors * 2 ** (layers - 1)
        self.user_gmf = nn.Embedding(users, factors)
        self.item_gmf = nn.Embedding(items, factors)
        self.user_mlp = nn.Embedding(users, mlp_dim)
        self.item_mlp = nn.Embedding(items, mlp_dim)
        mlp: list[nn.Module] = []
        for i in range(layers):
            width = factors * 2 ** (layers - i)
            mlp += [nn.Linear(width, width // 2), nn.ReLU()]
        self.mlp = nn.Sequential(*mlp)
        self.predict = nn.Linear(2 * factors, 1)

    def forward(self, user: torch.Tensor, item: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        """Binary cross-entropy of the predicted interactions (a scalar)."""
        gmf = self.user_gmf(user) * self.item_gmf(item)
        mlp = self.mlp(torch.cat([self.user_mlp(user), self.item_mlp(item)], dim=-1))
        logit = self.predict(torch.cat([gmf, mlp], dim=-1)).view(-1)
        return F.binary_cross_entropy_with_logits(logit, label)


def ncf(batch_size: int = 256) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """NeuMF on MovieLens 1M and a batch of (user, item, label) interactions."""
    ids = torch.zeros(batch_size, dtype=torch.long)
    return NeuMF(), (ids, ids.clone(), torch.zeros(batch_size))


ML20M_USERS, ML20M_ITEMS = 138_493, 26_744
"""Users and rated items of MovieLens 20M (Harper and Konstan, ACM TiiS 2015), the data set of NVIDIA
DeepLearningExamples' PyTorch NCF (its README: 138,493 users, 26,744 items)."""


class NeuMFDLE(nn.Module):
    """NeuMF as NVIDIA DeepLearningExamples' PyTorch NCF defines it (``Recommendation/NCF/neumf.py``,
    defaults ``--factors 64 --layers 256 256 128 64 --dropout 0.5``): GMF embeddings of 64 per user
    and item, MLP embeddings of 128 each (half the first layer), MLP 256-256-128-64 with ReLU and
    dropout, prediction ``Linear(64 + 64, 1)``, binary cross-entropy on logits.
    ``forward(user (B,), item (B,), label (B,) float) -> loss``."""

    def __init__(self, users: int = ML20M_USERS, items: int = ML20M_ITEMS, mf_dim: int = 64,
                 layers: tuple[int, ...] = (256, 256, 128, 64), dropout: float = 0.5):
        super().__init__()
        self.mf_user_embed = nn.Embedding(users, mf_dim)
        self.mf_item_embed = nn.Embedding(items, mf_dim)
        self.mlp_user_embed = nn.Embedding(users, layers[0] // 2)
        self.mlp_item_embed = nn.Embedding(items, layers[0] // 2)
        mlp: list[nn.Module] = []
        for a, b in pairwise(layers):
            mlp += [nn.Linear(a, b), nn.ReLU(), nn.Dropout(dropout)]
        self.mlp = nn.Sequential(*mlp)
        self.final = nn.Linear(layers[-1] + mf_dim, 1)

    def forward(self, user: torch.Tensor, item: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        """Binary cross-entropy of the predicted interactions (a scalar)."""
        gmf = self.mf_user_embed(user) * self.mf_item_embed(item)
        mlp = self.mlp(torch.cat([self.mlp_user_embed(user), self.mlp_item_embed(item)], dim=1))
        return F.binary_cross_entropy_with_logits(self.final(torch.cat([gmf, mlp], dim=1)).view(-1), label)


def ncf_dle(batch_size: int = 1_048_576) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """DeepLearningExamples' NeuMF on MovieLens 20M and a batch of (user, item, label) samples
    (positives and their sampled negatives together, as its ``--batch_size`` counts them)."""
    ids = torch.zeros(batch_size, dtype=torch.long)
    return NeuMFDLE(), (ids, ids.clone(), torch.zeros(batch_size))
