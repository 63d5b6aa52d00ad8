"""Language models: Transformer base for translation (our definition on ``torch.nn``), and BERT and
GPT-2 from Hugging Face ``transformers`` configurations (no weights are ever downloaded).
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


# -- Transformer base (Vaswani et al. 2017) -------------------------------------------------------
NMT_VOCAB = 37_000
"""Shared source-target byte-pair vocabulary of the WMT 2014 English-German base model (sec. 5.1)."""


class TransformerNMT(nn.Module):
    """Encoder-decoder Transformer with shared embeddings (Vaswani et al., NeurIPS 2017).

    ``torch.nn.Transformer`` (post-layer-norm, ReLU, dropout 0.1) between a shared token embedding
    scaled by ``sqrt(d_model)`` plus sinusoidal positions, and a pre-softmax projection tied to the
    embedding (sec. 3.4). ``forward(src (B, S) int64, tgt_in (B, T) int64, tgt_out (B, T) int64)``
    returns the label-smoothed (0.1) cross-entropy of the next-token predictions.
    """

    def __init__(self, vocab: int = NMT_VOCAB, d_model: int = 512, heads: int = 8, layers: int = 6,
                 d_ff: int = 2048, dropout: float = 0.1, max_len: int = 1024):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab, d_model)
        self.dropout = nn.Dropout(dropout)
        self.transformer = nn.Transformer(d_model, heads, layers, layers, d_ff, dropout, batch_first=True)
        position = torch.arange(max_len).unsqueeze(1)
        freq = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * freq)
        pe[:, 1::2] = torch.cos(position * freq)
        self.register_buffer("positions", pe, persistent=False)

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) * math.sqrt(self.d_model) + self.positions[: tokens.shape[1]]
        return self.dropout(x)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
        """Label-smoothed cross-entropy over the ``B x T`` target tokens (a scalar)."""
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1], device=tgt_in.device)
        hidden = self.transformer(self._embed(src), self._embed(tgt_in), tgt_mask=causal, tgt_is_causal=True)
        logits = F.linear(hidden, self.embed.weight)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), label_smoothing=0.1)


def transformer_nmt(batch_size: int = 96, seq_len: int = 32) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Transformer base and ``batch_size`` sentence pairs of ``seq_len`` tokens each side."""
    tokens = torch.zeros(batch_size, seq_len, dtype=torch.long)
    return TransformerNMT(), (tokens, tokens.clone(), tokens.clone())


# -- BERT (Devlin et al. 2019) and GPT-2 (Radford et al. 2019) via Hugging Face ------------------
def _transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:  # pragma: no cover - transformers is a dependency
        raise RuntimeError("the BERT/GPT-2 zoo entries need the 'transformers' package") from exc
    transformers.logging.set_verbosity_error()
    return transformers


def _bert(config_kwargs: dict[str, int], batch_size: int, seq_len: int) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    tf = _transformers()
    config = tf.BertConfig(**config_kwargs)  # vocab 30,522, 512 positions, 2 segment types by default
    if seq_len > config.max_position_embeddings:
        raise ValueError(f"seq_len: BERT has {config.max_position_embeddings} positions, got {seq_len}")
    model = tf.BertForPreTraining(config)
    ids = torch.zeros(batch_size, seq_len, dtype=torch.long)
    batch = {
        "input_ids": ids,
        "token_type_ids": ids.clone(),
        "labels": ids.clone(),  # masked-LM labels at every position (an upper bound of the 15 % masked)
        "next_sentence_label": torch.zeros(batch_size, dtype=torch.long),
    }
    return model, batch


def bert_base(batch_size: int = 32, seq_len: int = 128) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """BERT-base (L=12, H=768, A=12, intermediate 3072) pre-training model and a token batch."""
    return _bert({"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                  "intermediate_size": 3072}, batch_size, seq_len)


def bert_large(batch_size: int = 8, seq_len: int = 512) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """BERT-large (L=24, H=1024, A=16, intermediate 4096) pre-training model and a token batch."""
    return _bert({"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                  "intermediate_size": 4096}, batch_size, seq_len)


def gpt2(batch_size: int = 8, seq_len: int = 1024) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """GPT-2 small (``GPT2Config()``: 12 layers, 768 wide, 12 heads, 1024 positions, 50,257 tokens,
    tied LM head) and a batch whose labels are its inputs (the model shifts them)."""
    tf = _transformers()
    config = tf.GPT2Config()
    if seq_len > config.n_positions:
        raise ValueError(f"seq_len: GPT-2 has {config.n_positions} positions, got {seq_len}")
    ids = torch.zeros(batch_size, seq_len, dtype=torch.long)
    return tf.GPT2LMHeadModel(config), {"input_ids": ids, "labels": ids.clone()}
