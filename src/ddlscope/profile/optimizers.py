"""Optimizers the profiler traces that ``torch.optim`` does not have.

:class:`BertAdam` is the Adam variant NVIDIA DeepLearningExamples' BERT scripts (``run_squad.py``,
``run_glue.py``) step in FP32, written as that code writes it, so that the op table holds the kernels
it launches and the bytes they move (``PyTorch/LanguageModeling/BERT/optimization.py``, class
``BertAdam``).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class BertAdam(torch.optim.Optimizer):
    """DeepLearningExamples' ``BertAdam`` (no bias correction, decoupled weight decay, a warm-up
    learning-rate schedule), traced op by op.

    What one step launches, as ``optimization.py`` writes it:

    - before the loop, the L2 norm of every gradient together (apex ``multi_tensor_l2norm``, a
      multi-tensor kernel reading each gradient once) and ``.item()`` on it, a host synchronisation.
      It is not traced here (the profiler's tensors have no values); :data:`ddlscope.profile.api`
      appends it as one analytic row, ``ddlscope.multi_tensor_l2norm``.
    - per parameter, each a kernel of its own: ``m.mul_(b1).add_(grad, alpha=1 - b1)``,
      ``v.mul_(b2).addcmul_(grad, grad, value=1 - b2)``, ``update = m / (v.sqrt() + e)`` (3 kernels,
      2 temporaries), with weight decay ``update += wd * p`` (2), ``update_with_lr = lr * update``,
      ``p.add_(-update_with_lr)`` (2: the negation is a kernel): 12 kernels, 10 without weight decay.
    - the clipping branch (``if global_grad_norm > max_grad_norm: p = p * max_grad_norm /
      global_grad_norm``) depends on the norm's value; it rebinds ``p`` to a scaled copy, so the
      update then lands on the copy. Not traced: its two kernels per parameter run only on steps
      whose norm exceeds the limit, which the profiler cannot know.

    Args:
        params: the parameters, or parameter groups (dicts with ``params`` and optionally
            ``weight_decay``).
        lr: learning rate (the traced value does not change the work).
        b1, b2: the moments' decay rates; e: epsilon.
        weight_decay: decoupled weight decay, 0.01 in DeepLearningExamples, applied to every
            parameter of the group (the scripts' groups leave biases and LayerNorm weights out).

    Raises:
        ValueError: a negative learning rate or weight decay, or a decay rate outside [0, 1).
    """

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict], lr: float = 5e-5, b1: float = 0.9,
                 b2: float = 0.999, e: float = 1e-6, weight_decay: float = 0.01) -> None:
        if lr < 0.0 or weight_decay < 0.0:
            raise ValueError(f"BertAdam: lr and weight_decay must be >= 0, got {lr} and {weight_decay}")
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(f"BertAdam: b1 and b2 must be in [0, 1), got {b1} and {b2}")
        super().__init__(params, {"lr": lr, "b1": b1, "b2": b2, "e": e, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        """One update of every parameter with a gradient (see the class docstring for the kernels)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                if not state:
                    state["next_m"] = torch.zeros_like(p)
                    state["next_v"] = torch.zeros_like(p)
                m, v = state["next_m"], state["next_v"]
                m.mul_(group["b1"]).add_(grad, alpha=1 - group["b1"])
                v.mul_(group["b2"]).addcmul_(grad, grad, value=1 - group["b2"])
                update = m / (v.sqrt() + group["e"])
                if group["weight_decay"] > 0.0:
                    update += group["weight_decay"] * p
                update_with_lr = group["lr"] * update
                p.add_(-update_with_lr)
