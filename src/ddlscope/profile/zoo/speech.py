"""Speech: wav2vec 2.0 base with a CTC head, from a Hugging Face configuration (no weights)."""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

CTC_VOCAB = 32
"""Output characters of the LibriSpeech fine-tuning (fairseq's letter dictionary, with blank)."""
SAMPLES_PER_TARGET = 320 * 4
"""Audio samples per target character for the example batch: one character per four 20 ms frames
(320 samples at 16 kHz), about 12 characters per second of speech."""

_LIB: torch.library.Library | None = None


def _register_ctc_meta() -> None:
    """Meta kernels for ``aten::_ctc_loss.Tensor`` and its backward, which PyTorch lacks, so a CTC
    loss traces on the meta device. Shapes from ``aten/src/ATen/native/LossCTC.cpp``: the loss is
    ``(B,)`` and the forward variables ``log_alpha`` are ``(B, T, 2 * max_target_length + 1)``;
    the backward returns a gradient shaped like ``log_probs``. Padded 2-D targets only."""
    global _LIB
    if _LIB is not None or torch._C._dispatch_has_kernel_for_dispatch_key("aten::_ctc_loss.Tensor", "Meta"):
        return
    lib = torch.library.Library("aten", "IMPL")

    def ctc(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
        t, b = log_probs.shape[0], log_probs.shape[1]
        if targets.dim() != 2:
            raise NotImplementedError("ctc_loss on the meta device needs padded 2-D targets (B, S)")
        return (log_probs.new_empty(b), log_probs.new_empty(b, t, 2 * targets.shape[1] + 1))

    def ctc_backward(grad, log_probs, targets, input_lengths, target_lengths, nll, log_alpha, blank,
                     zero_infinity=False):
        return log_probs.new_empty(log_probs.shape)

    lib.impl("_ctc_loss.Tensor", ctc, "Meta")
    lib.impl("_ctc_loss_backward.Tensor", ctc_backward, "Meta")
    _LIB = lib


class Wav2Vec2CTC(nn.Module):
    """wav2vec 2.0 (Hugging Face ``Wav2Vec2Model``) + dropout + linear CTC head, CTC loss (mean).

    The convolutional feature encoder is frozen, as in the paper's fine-tuning (Baevski et al.,
    NeurIPS 2020, sec. 4.2). SpecAugment-style time masking and LayerDrop are off: both draw random
    numbers that steer Python control flow, which a meta-device trace cannot follow; their cost is
    a few element-wise ops.

    ``forward(input_values (B, samples) float, labels (B, S) int64)`` returns the loss.
    """

    def __init__(self) -> None:
        super().__init__()
        import transformers

        transformers.logging.set_verbosity_error()
        config = transformers.Wav2Vec2Config(vocab_size=CTC_VOCAB, mask_time_prob=0.0, apply_spec_augment=False,
                                             layerdrop=0.0)
        self.wav2vec2 = transformers.Wav2Vec2Model(config)
        self.wav2vec2.freeze_feature_encoder()
        self.dropout = nn.Dropout(config.final_dropout)
        self.lm_head = nn.Linear(config.hidden_size, CTC_VOCAB)

    def forward(self, input_values: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """CTC loss of the batch, averaged over target lengths (a scalar)."""
        hidden = self.wav2vec2(input_values).last_hidden_state
        log_probs = F.log_softmax(self.lm_head(self.dropout(hidden)), dim=-1).transpose(0, 1)  # (T, B, C)
        frames, b = log_probs.shape[0], log_probs.shape[1]
        input_lengths = torch.full((b,), frames, dtype=torch.long, device=log_probs.device)
        target_lengths = torch.full((b,), labels.shape[1], dtype=torch.long, device=log_probs.device)
        return F.ctc_loss(log_probs, labels, input_lengths, target_lengths, blank=0, zero_infinity=True)


def wav2vec2_base(batch_size: int = 8, seq_len: int = 240_000) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """wav2vec 2.0 base + CTC and ``batch_size`` utterances of ``seq_len`` 16 kHz samples with
    padded character targets (``seq_len / 1280`` characters)."""
    _register_ctc_meta()
    targets = max(1, seq_len // SAMPLES_PER_TARGET)
    return Wav2Vec2CTC(), (torch.empty(batch_size, seq_len), torch.ones(batch_size, targets, dtype=torch.long))
