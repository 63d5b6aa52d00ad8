"""Optimizers the profiler traces that ``torch.optim`` does not have.

:class:`BertAdam` is the Adam variant NVIDIA DeepLearningExamples' BERT scripts (``run_squad.py``,
``run_glue.py``) step in FP32, written as that code writes it, so that the op table holds the kernels
it launches and the bytes they move (``PyTorch/LanguageModeling/BERT/optimization.py``, class
``BertAdam``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable

import torch


class BertAdam(torch.optim.Optimizer):
    """DeepLearningExamples' ``BertAdam`` (no bias correction, decoupled weight decay), traced op by op.
    The original's warm-up schedule (``warmup``, ``t_total``, ``schedule``) only changes the learning
    rate's value, not the work, so this class takes a constant ``lr``; its ``max_grad_norm`` clipping
    is the branch described below.

    What one step launches, as ``optimization.py`` writes it:

    - before the loop, the L2 norm of every gradient together (apex ``multi_tensor_l2norm``, a
      multi-tensor kernel reading each gradient once) and ``.item()`` on it, a host synchronisation.
      It is not traced here (the profiler's tensors have no values);
      :func:`ddlscope.profile.api.profile_model` appends it as one analytic row,
      ``ddlscope.multi_tensor_l2norm``.
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
        lr: learning rate, >= 0 (the traced value does not change the work).
        b1, b2: the moments' decay rates, in [0, 1); e: epsilon, >= 0 (the original's check).
        weight_decay: decoupled weight decay, 0.01 in DeepLearningExamples, applied to every
            parameter of the group (the scripts' groups leave biases and LayerNorm weights out).

    Raises:
        ValueError: a learning rate, weight decay or epsilon that is negative or not a finite number,
            or a decay rate outside [0, 1); at a step, a sparse gradient (as the original refuses it).
    """

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict], lr: float = 5e-5, b1: float = 0.9,
                 b2: float = 0.999, e: float = 1e-6, weight_decay: float = 0.01) -> None:
        for name, value in (("lr", lr), ("weight_decay", weight_decay), ("e", e), ("b1", b1), ("b2", b2)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ValueError(f"BertAdam: {name} must be a finite number, got {value!r}")
        if lr < 0.0 or weight_decay < 0.0 or e < 0.0:
            raise ValueError(f"BertAdam: lr, weight_decay and e must be >= 0, got {lr}, {weight_decay} and {e}")
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(f"BertAdam: b1 and b2 must be in [0, 1), got {b1} and {b2}")
        super().__init__(params, {"lr": lr, "b1": b1, "b2": b2, "e": e, "weight_decay": weight_decay})

    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:  # type: ignore[override]
        """One update of every parameter with a gradient (see the class docstring for the kernels).
        ``closure``, if given, is called first (with gradients enabled) and its loss returned, as
        ``torch.optim`` optimizers do.

        Raises:
            ValueError: a parameter with a sparse gradient.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with torch.no_grad():
            self._update()
        return loss

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if grad.is_sparse:
                    raise ValueError("BertAdam does not support sparse gradients (nor does DeepLearningExamples' "
                                     "original); use dense embeddings")
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
