"""A 2-layer GCN on a Reddit-sized graph, with edge-list message passing (our own definition)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

REDDIT_NODES = 232_965
REDDIT_EDGES = 114_615_892
REDDIT_FEATURES = 602
REDDIT_CLASSES = 41
"""The Reddit post graph of Hamilton et al. (NeurIPS 2017) as PyTorch Geometric's ``Reddit``
dataset holds it (directed edge count, both directions of each link)."""


class GCN(nn.Module):
    """Two graph-convolution layers (Kipf and Welling, ICLR 2017):
    ``H' = D^-1/2 (A + I) D^-1/2 H W + b``, each layer transforming first and then aggregating
    (as PyTorch Geometric's ``GCNConv``), ReLU and dropout 0.5 between, cross-entropy on the nodes.

    Aggregation is edge-list message passing, the way sparse GNN libraries run it: gather the
    source rows (``index_select``), scale by the normalised edge weight, scatter-add into the
    destination rows (``index_add_``). No dense ``N x N`` adjacency exists, so FLOPs and bytes are
    those of the ``E`` messages.

    ``forward(x (N, F), src (E,), dst (E,), edge_weight (E,), labels (N,))`` returns the loss.
    """

    def __init__(self, in_features: int = REDDIT_FEATURES, hidden: int = 128, classes: int = REDDIT_CLASSES,
                 dropout: float = 0.5):
        super().__init__()
        self.lin1 = nn.Linear(in_features, hidden, bias=False)
        self.bias1 = nn.Parameter(torch.zeros(hidden))
        self.lin2 = nn.Linear(hidden, classes, bias=False)
        self.bias2 = nn.Parameter(torch.zeros(classes))
        self.dropout = dropout

    @staticmethod
    def propagate(h: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``out[dst] += weight * h[src]`` over all edges: ``(N, F) -> (N, F)``."""
        messages = h.index_select(0, src) * weight.unsqueeze(1)
        return torch.zeros_like(h).index_add_(0, dst, messages)

    def forward(self, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, edge_weight: torch.Tensor,
                labels: torch.Tensor) -> torch.Tensor:
        """Node-classification cross-entropy over all nodes (a scalar)."""
        h = F.dropout(x, self.dropout, self.training)
        h = F.relu(self.propagate(self.lin1(h), src, dst, edge_weight) + self.bias1)
        h = F.dropout(h, self.dropout, self.training)
        h = self.propagate(self.lin2(h), src, dst, edge_weight) + self.bias2
        return F.cross_entropy(h, labels)


def gcn_reddit(batch_size: int = REDDIT_NODES) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The GCN and a graph of ``batch_size`` nodes whose edges keep Reddit's mean degree
    (``round(batch_size x 114,615,892 / 232,965)`` edges) plus one self-loop per node, with the
    normalised edge weights precomputed (as ``GCNConv(cached=True)`` keeps them)."""
    edges = round(batch_size * REDDIT_EDGES / REDDIT_NODES) + batch_size
    src = torch.zeros(edges, dtype=torch.long)
    batch = (torch.empty(batch_size, REDDIT_FEATURES), src, src.clone(), torch.empty(edges),
             torch.zeros(batch_size, dtype=torch.long))
    return GCN(), batch
