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


def transformer_big(batch_size: int = 96, seq_len: int = 32) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Transformer big (Vaswani et al. 2017, Table 3: d_model 1024, 16 heads, d_ff 4096, dropout 0.3,
    6 + 6 layers, 213 M parameters) with the base model's shared 37,000-token vocabulary, and
    ``batch_size`` sentence pairs of ``seq_len`` tokens each side."""
    tokens = torch.zeros(batch_size, seq_len, dtype=torch.long)
    return TransformerNMT(d_model=1024, heads=16, d_ff=4096, dropout=0.3), (tokens, tokens.clone(), tokens.clone())


# -- LSTM language model (Zaremba et al. 2014) ---------------------------------------------------
class LSTMLanguageModel(nn.Module):
    """The large regularised LSTM language model of Zaremba, Sutskever and Vinyals, "Recurrent Neural
    Network Regularization", 2014 (sec. 4.1, Penn Treebank): 10,000-word vocabulary, embedding and
    two LSTM layers of 1,500 units, dropout 0.65 on the non-recurrent connections, a 1,500 x 10,000
    softmax, 35 unrolled steps, batch 20; 66 M parameters. The LSTM runs as one fused cuDNN call.
    ``forward(tokens (B, T) int64, targets (B, T) int64) -> loss`` (the initial state zero)."""

    def __init__(self, vocab: int = 10_000, hidden: int = 1500, layers: int = 2, dropout: float = 0.65):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.rnn = nn.LSTM(hidden, hidden, layers, dropout=dropout, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-word cross-entropy (a scalar)."""
        out = self.drop(self.rnn(self.drop(self.embed(tokens)))[0])
        logits = self.decoder(out)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def lstm_lm(batch_size: int = 20, seq_len: int = 35) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """The large PTB LSTM language model and ``batch_size`` streams of ``seq_len`` tokens."""
    tokens = torch.zeros(batch_size, seq_len, dtype=torch.long)
    return LSTMLanguageModel(), (tokens, tokens.clone())


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


# -- BERT fine-tuned on SQuAD (NVIDIA DeepLearningExamples run_squad.py) ---------------------------
DLE_BERT_VOCAB = 30_528
"""BERT's 30,522-token uncased WordPiece vocabulary padded to a multiple of 8, as NVIDIA
DeepLearningExamples' ``run_squad.py`` pads ``config.vocab_size`` for Tensor Cores."""


def _bert_squad(config_kwargs: dict[str, int], batch_size: int,
                seq_len: int) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    tf = _transformers()
    config = tf.BertConfig(vocab_size=DLE_BERT_VOCAB, **config_kwargs)
    if seq_len > config.max_position_embeddings:
        raise ValueError(f"seq_len: BERT has {config.max_position_embeddings} positions, got {seq_len}")
    ids = torch.zeros(batch_size, seq_len, dtype=torch.long)
    span = torch.zeros(batch_size, dtype=torch.long)
    # the padding mask as run_squad.py passes it and modeling.py applies it: an additive
    # (batch, 1, 1, seq_len) mask, (1 - input_mask) x -10000, added to every layer's scores
    # (BertModel.forward, BertSelfAttention.forward). Given as that 4-D float mask, which Hugging Face
    # passes on as it is; a 2-D 0/1 mask would be read for its values, which the meta device cannot.
    # Its values do not change the work: zeros, every sequence filling its seq_len tokens.
    extended_mask = torch.zeros(batch_size, 1, 1, seq_len)
    batch = {"input_ids": ids, "token_type_ids": ids.clone(), "attention_mask": extended_mask,
             "start_positions": span, "end_positions": span.clone()}
    return tf.BertForQuestionAnswering(config), batch


def bert_base_squad(batch_size: int = 24, seq_len: int = 384) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """BERT-base (L=12, H=768, A=12) with the SQuAD span head (``BertForQuestionAnswering``: a
    ``H x 2`` start/end classifier, cross-entropy on both), vocabulary padded to 30,528, and a batch
    of ``seq_len``-token question+passage sequences, their additive padding mask (``batch x 1 x 1 x
    seq_len``, added to the attention scores of every layer as DeepLearningExamples' ``modeling.py``
    adds it) and answer spans."""
    return _bert_squad({"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                        "intermediate_size": 3072}, batch_size, seq_len)


def bert_large_squad(batch_size: int = 8, seq_len: int = 384) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """BERT-large (L=24, H=1024, A=16) with the SQuAD span head; as :func:`bert_base_squad`."""
    return _bert_squad({"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                        "intermediate_size": 4096}, batch_size, seq_len)


# -- GNMT v2 (NVIDIA DeepLearningExamples PyTorch/Translation/GNMT) --------------------------------
GNMT_VOCAB = 32_320
"""WMT16 English-German shared BPE vocabulary of GNMT v2 (32,000 merges; DeepLearningExamples pads
the vocabulary to a multiple of 8: 32,320 entries)."""


class BahdanauAttention(nn.Module):
    """Normalised Bahdanau attention as GNMT v2 uses it (DeepLearningExamples
    ``seq2seq/models/attention.py``): ``score(q, k) = v_n . tanh(W_q q + W_k k + b)`` with
    ``v_n = g v / |v|``, softmax over the source positions (padding masked), context = weights x keys.
    ``forward(query (B, T, n), keys (B, S, n)) -> context (B, T, n)``."""

    def __init__(self, size: int = 1024):
        super().__init__()
        self.linear_q = nn.Linear(size, size, bias=False)
        self.linear_k = nn.Linear(size, size, bias=False)
        self.linear_att = nn.Parameter(torch.empty(size))
        self.normalize_scalar = nn.Parameter(torch.empty(1))
        self.normalize_bias = nn.Parameter(torch.empty(size))

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Attention context for every decoder position (teacher forcing)."""
        q, k = self.linear_q(query), self.linear_k(keys)
        summed = q.unsqueeze(2) + k.unsqueeze(1) + self.normalize_bias  # (B, T, S, n)
        v = self.linear_att / self.linear_att.norm() * self.normalize_scalar
        scores = torch.tanh(summed).matmul(v)  # (B, T, S)
        return torch.bmm(F.softmax(scores, dim=-1), keys)


class GNMT(nn.Module):
    """GNMT v2 (Wu et al., "Google's Neural Machine Translation System", 2016, as NVIDIA
    DeepLearningExamples' PyTorch GNMT v2 defines it): shared 1024-wide embedding; encoder of 4 LSTM
    layers (the first bidirectional, the second taking its 2048-wide output, residual connections
    from the third), dropout 0.2 on every LSTM input; decoder of 4 LSTM layers whose first layer's
    output queries the normalised Bahdanau attention, the context concatenated to the input of the
    three others (residual from the third); a 1024 x vocabulary classifier and label-smoothed (0.1)
    cross-entropy. Batch-first here (DeepLearningExamples runs time-major; the cuDNN kernel and its
    FLOPs are the same). All sequences are full length: no padding, packing or masking.

    ``forward(src (B, S) int64, tgt_in (B, T) int64, tgt_out (B, T) int64) -> loss``.
    """

    def __init__(self, vocab: int = GNMT_VOCAB, hidden: int = 1024, layers: int = 4, dropout: float = 0.2):
        super().__init__()
        self.embedder = nn.Embedding(vocab, hidden)
        self.encoder = nn.ModuleList([nn.LSTM(hidden, hidden, batch_first=True, bidirectional=True),
                                      nn.LSTM(2 * hidden, hidden, batch_first=True),
                                      *[nn.LSTM(hidden, hidden, batch_first=True) for _ in range(layers - 2)]])
        self.att_rnn = nn.LSTM(hidden, hidden, batch_first=True)
        self.attn = BahdanauAttention(hidden)
        self.decoder = nn.ModuleList([nn.LSTM(2 * hidden, hidden, batch_first=True) for _ in range(layers - 1)])
        self.classifier = nn.Linear(hidden, vocab)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
        """Label-smoothed cross-entropy over the ``B x T`` target tokens (a scalar)."""
        x = self.embedder(src)
        for i, rnn in enumerate(self.encoder):
            y = rnn(self.dropout(x))[0]
            x = y + x if i >= 2 else y
        context = x
        y, _ = self.att_rnn(self.embedder(tgt_in))
        attn = self.attn(y, context)
        x = y
        for i, rnn in enumerate(self.decoder):
            out = rnn(torch.cat((self.dropout(x), attn), dim=2))[0]
            x = out + x if i >= 1 else out
        logits = self.classifier(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), label_smoothing=0.1)


def gnmt(batch_size: int = 128, seq_len: int = 50) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """GNMT v2 and ``batch_size`` sentence pairs of ``seq_len`` source and target tokens."""
    tokens = torch.zeros(batch_size, seq_len, dtype=torch.long)
    return GNMT(), (tokens, tokens.clone(), tokens.clone())
