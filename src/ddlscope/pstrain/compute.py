"""A worker's forward and backward pass in PyTorch (CPU), on the rows and weights it pulled.

Only workers import this module (servers apply updates in NumPy and never load torch).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ddlscope.pstrain.models import Batch, ModelSpec


def loss_and_gradients(
    spec: ModelSpec, batch: Batch, rows: list[np.ndarray], dense: list[np.ndarray]
) -> tuple[float, list[np.ndarray], list[np.ndarray]]:
    """The batch's mean loss and the gradients of the pulled parameters.

    Args:
        spec: the model (``word`` or ``ctr``, see :mod:`ddlscope.pstrain.models` for the formulas).
        batch: the mini-batch; ``batch.keys[t]`` are the unique keys of table ``t``.
        rows: per table, float32 (len(keys[t]), dim): the pulled rows, in key order.
        dense: per dense tensor (in ``spec.dense`` order), its pulled float32 value.

    Returns:
        (loss, row_grads, dense_grads): the loss (nats per sample), per table float32
        (len(keys[t]), dim) gradients of the loss w.r.t. the rows (rows touched several times in
        the batch have their contributions summed), and per dense tensor its gradient.

    Raises:
        ValueError: an unknown model kind.
    """
    tables = [torch.from_numpy(np.array(r, dtype=np.float32)).requires_grad_() for r in rows]
    weights = [torch.from_numpy(np.array(d, dtype=np.float32)).requires_grad_() for d in dense]
    w1, b1, w2, b2 = weights
    if spec.kind == "word":
        ctx = tables[0][torch.from_numpy(batch.inverse[0])].mean(dim=1)
        q = F.linear(F.relu(F.linear(ctx, w1, b1)), w2, b2)
        out = tables[1][torch.from_numpy(batch.inverse[1])]
        scores = (out * q.unsqueeze(1)).sum(dim=-1)
        loss = (F.softplus(-scores[:, 0]) + F.softplus(scores[:, 1:]).sum(dim=1)).mean()
    elif spec.kind == "ctr":
        emb = tables[0][torch.from_numpy(batch.inverse[0])].flatten(start_dim=1)
        x = torch.cat([emb, torch.from_numpy(batch.dense)], dim=1)
        logit = F.linear(F.relu(F.linear(x, w1, b1)), w2, b2).squeeze(1)
        loss = F.binary_cross_entropy_with_logits(logit, torch.from_numpy(batch.labels))
    else:
        raise ValueError(f"model kind {spec.kind!r}: expected 'word' or 'ctr'")
    loss.backward()
    return (
        float(loss.detach()),
        [t.grad.numpy() for t in tables],
        [w.grad.numpy() for w in weights],
    )
