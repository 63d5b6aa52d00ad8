"""Transformer-XL (Dai et al., ACL 2019) as NVIDIA DeepLearningExamples' PyTorch implementation
defines it (``LanguageModeling/Transformer-XL/pytorch/mem_transformer.py``): our own definition on
``torch.nn``, word-level WikiText-103 vocabulary with adaptive input and adaptive softmax.
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn

WT103_VOCAB = 267_735
"""WikiText-103 word vocabulary (Merity et al. 2016; Transformer-XL's ``wt103`` corpus)."""
WT103_CUTOFFS = (20_000, 40_000, 200_000)
"""Adaptive-softmax cluster boundaries for WikiText-103 (``cutoffs = [20000, 40000, 200000]``, as
kimiyoung/transformer-xl and DeepLearningExamples use them)."""


def zipf_cluster_fractions(vocab: int = WT103_VOCAB, cutoffs: tuple[int, ...] = WT103_CUTOFFS) -> tuple[float, ...]:
    """Share of target tokens in each adaptive-softmax tail cluster, under a Zipf law of exponent 1
    over the frequency-sorted vocabulary (Zipf 1935; the classical fit of word frequencies):
    ``P(rank <= r) = H(r) / H(V)``, ``H`` the harmonic number (``ln r + 0.5772``). Our stated
    assumption: WikiText-103's token counts are not at hand. For WT103: 5.3 %, 12.3 %, 2.3 %."""
    def h(n: int) -> float:
        return math.log(n) + 0.5772156649

    bounds = (*cutoffs, vocab)
    return tuple((h(b) - h(a)) / h(vocab) for a, b in itertools.pairwise(bounds))


class AdaptiveEmbedding(nn.Module):
    """Adaptive input (Baevski and Auli, ICLR 2019): cluster ``i`` embeds in ``d_embed / div_val^i``
    dimensions and projects to ``d_proj``; with ``div_val = 1`` and ``d_proj = d_embed`` one table and
    no projection. Output scaled by ``sqrt(d_proj)``. A step's tokens are all looked up in cluster 0
    here (shapes must be static on the meta device); the tail clusters' tables are parameters."""

    def __init__(self, vocab: int, d_embed: int, d_proj: int, cutoffs: tuple[int, ...], div_val: int):
        super().__init__()
        self.div_val, self.d_proj = div_val, d_proj
        ends = (0, *cutoffs, vocab)
        if div_val == 1:
            self.emb_layers = nn.ModuleList([nn.Embedding(vocab, d_embed)])
            self.emb_projs = nn.ParameterList(
                [nn.Parameter(torch.empty(d_proj, d_embed))] if d_proj != d_embed else [])
        else:
            dims = [d_embed // div_val**i for i in range(len(ends) - 1)]
            self.emb_layers = nn.ModuleList(nn.Embedding(hi - lo, d)
                                            for lo, hi, d in zip(ends[:-1], ends[1:], dims, strict=True))
            self.emb_projs = nn.ParameterList(nn.Parameter(torch.empty(d_proj, d)) for d in dims)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``(T, B) int64 -> (T, B, d_proj)``."""
        e = self.emb_layers[0](tokens)
        if len(self.emb_projs):
            e = F.linear(e, self.emb_projs[0])
        return e * math.sqrt(self.d_proj)


class RelPartialLearnableAttention(nn.Module):
    """Multi-head attention with relative positional encodings (Dai et al. 2019, sec. 3.3): scores
    ``(q + u) k^T + rel_shift((q + v) r^T)`` over the ``mem_len + tgt_len`` keys, causal mask
    shifted by the memory, post-layer-norm residual (``pre_lnorm = False``)."""

    def __init__(self, n_head: int, d_model: int, d_head: int, dropout: float, dropatt: float):
        super().__init__()
        self.n_head, self.d_head, self.scale = n_head, d_head, 1 / d_head**0.5
        self.qkv_net = nn.Linear(d_model, 3 * n_head * d_head, bias=False)
        self.r_net = nn.Linear(d_model, n_head * d_head, bias=False)
        self.o_net = nn.Linear(n_head * d_head, d_model, bias=False)
        self.drop, self.dropatt = nn.Dropout(dropout), nn.Dropout(dropatt)
        self.layer_norm = nn.LayerNorm(d_model)

    @staticmethod
    def _rel_shift(x: torch.Tensor) -> torch.Tensor:
        zero_pad = x.new_zeros((x.size(0), 1, *x.size()[2:]))
        padded = torch.cat([zero_pad, x], dim=1).view(x.size(1) + 1, x.size(0), *x.size()[2:])
        return padded[1:].view_as(x)

    def forward(self, w: torch.Tensor, r: torch.Tensor, r_w_bias: torch.Tensor, r_r_bias: torch.Tensor,
                mask: torch.Tensor, mem: torch.Tensor) -> torch.Tensor:
        """``w (T, B, d)``, ``r (K, d)`` position embeddings, ``mem (M, B, d)``; ``K = M + T``."""
        qlen, bsz, klen = w.size(0), w.size(1), w.size(0) + mem.size(0)
        heads = self.qkv_net(torch.cat([mem, w], 0))
        q, k, v = torch.chunk(heads, 3, dim=-1)
        q = q[-qlen:].view(qlen, bsz, self.n_head, self.d_head)
        k = k.view(klen, bsz, self.n_head, self.d_head)
        v = v.view(klen, bsz, self.n_head, self.d_head)
        rk = self.r_net(r).view(klen, self.n_head, self.d_head)
        ac = torch.einsum("ibnd,jbnd->bnij", q + r_w_bias, k)
        bd = self._rel_shift(torch.einsum("ibnd,jnd->ijbn", q + r_r_bias, rk)).permute(2, 3, 0, 1)
        score = ((ac + bd) * self.scale).masked_fill(mask, -float("inf"))
        prob = self.dropatt(F.softmax(score, dim=3))
        vec = torch.einsum("bnij,jbnd->ibnd", prob, v).contiguous().view(qlen, bsz, self.n_head * self.d_head)
        return self.layer_norm(w + self.drop(self.o_net(vec)))


class DecoderLayer(nn.Module):
    """Relative attention then a position-wise ReLU feed-forward block, each post-layer-norm."""

    def __init__(self, n_head: int, d_model: int, d_head: int, d_inner: int, dropout: float, dropatt: float):
        super().__init__()
        self.attn = RelPartialLearnableAttention(n_head, d_model, d_head, dropout, dropatt)
        self.ff = nn.Sequential(nn.Linear(d_model, d_inner), nn.ReLU(inplace=True), nn.Dropout(dropout),
                                nn.Linear(d_inner, d_model), nn.Dropout(dropout))
        self.ff_norm = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, r: torch.Tensor, u: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                mem: torch.Tensor) -> torch.Tensor:
        """``(T, B, d) -> (T, B, d)``."""
        x = self.attn(x, r, u, v, mask, mem)
        return self.ff_norm(x + self.ff(x))


class TransformerXL(nn.Module):
    """Transformer-XL language model (Dai et al., "Transformer-XL: Attentive Language Models Beyond a
    Fixed-Length Context", ACL 2019) as DeepLearningExamples' ``MemTransformerLM`` with
    ``attn_type=0``, ``same_length=False``, shared relative-position biases ``u``, ``v``, and
    the adaptive softmax's head tied to the adaptive input (``tie_weight``; with ``div_val > 1`` the
    tail projections tied too, ``tie_projs = [False, True, True, True]``).

    The adaptive softmax computes the head (cluster-0 words + one logit per tail cluster) for every
    token and each tail cluster's logits for the tokens whose target falls in it; on the meta device
    those are the first ``fraction x tokens`` tokens, fractions from :func:`zipf_cluster_fractions`
    (a stated assumption; the real split depends on the batch's words).

    ``forward(tokens (T, B) int64, targets (T, B) int64, *mems (M, B, d_model) x (n_layer + 1)) ->
    loss``: the per-token negative log-likelihood averaged; the new memories
    (``cat(mem, hidden)[-M:].detach()``) are computed as in training and dropped.
    """

    def __init__(self, n_layer: int, d_model: int, n_head: int, d_head: int, d_inner: int, dropout: float,
                 dropatt: float, div_val: int = 1, d_embed: int | None = None, vocab: int = WT103_VOCAB,
                 cutoffs: tuple[int, ...] = WT103_CUTOFFS):
        super().__init__()
        d_embed = d_embed or d_model
        self.d_model, self.n_head, self.d_head, self.div_val = d_model, n_head, d_head, div_val
        self.cutoffs, self.vocab = cutoffs, vocab
        self.word_emb = AdaptiveEmbedding(vocab, d_embed, d_model, cutoffs, div_val)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(DecoderLayer(n_head, d_model, d_head, d_inner, dropout, dropatt)
                                    for _ in range(n_layer))
        self.r_w_bias = nn.Parameter(torch.zeros(n_head, d_head))
        self.r_r_bias = nn.Parameter(torch.zeros(n_head, d_head))
        inv_freq = 1 / (10000 ** (torch.arange(0.0, d_model, 2.0) / d_model))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        # adaptive softmax: output biases per word, cluster logits; weights tied to the input tables
        self.out_bias = nn.Parameter(torch.zeros(vocab))
        self.cluster_weight = nn.Parameter(torch.zeros(len(cutoffs), d_embed))
        self.cluster_bias = nn.Parameter(torch.zeros(len(cutoffs)))
        self.head_proj = nn.Parameter(torch.empty(d_model, d_embed)) if div_val != 1 else None
        self.fractions = zipf_cluster_fractions(vocab, cutoffs)

    def _logit(self, h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               proj: torch.Tensor | None) -> torch.Tensor:
        if proj is not None:
            h = F.linear(h, proj.t().contiguous())
        return F.linear(h, weight, bias)

    def _adaptive_nll(self, hidden: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        n = hidden.size(0)
        emb = self.word_emb.emb_layers
        ends = (0, *self.cutoffs, self.vocab)
        if self.div_val == 1:
            table = emb[0].weight
            weights = [table[ends[i]:ends[i + 1]] for i in range(len(ends) - 1)]
            projs: list[torch.Tensor | None] = [None] * len(weights)
        else:
            weights = [layer.weight for layer in emb]
            projs = [self.head_proj, *list(self.word_emb.emb_projs)[1:]]
        biases = [self.out_bias[ends[i]:ends[i + 1]] for i in range(len(ends) - 1)]
        head_w = torch.cat([weights[0], self.cluster_weight], 0)
        head_b = torch.cat([biases[0], self.cluster_bias], 0)
        head_logprob = F.log_softmax(self._logit(hidden, head_w, head_b, projs[0]), dim=1)
        if not self.cutoffs:  # no clusters: one softmax over the whole vocabulary
            return -head_logprob.gather(1, target.unsqueeze(1)).squeeze(1)
        nll = -head_logprob.gather(1, target.clamp(max=self.cutoffs[0] - 1).unsqueeze(1)).squeeze(1)
        for i, frac in enumerate(self.fractions, start=1):
            k = max(1, round(frac * n))
            tail = F.log_softmax(self._logit(hidden[:k], weights[i], biases[i], projs[i]), dim=1)
            picked = tail.gather(1, (target[:k] % (ends[i + 1] - ends[i])).unsqueeze(1)).squeeze(1)
            nll = torch.cat([nll[:k] - picked - head_logprob[:k, self.cutoffs[0] + i - 1], nll[k:]])
        return nll

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor, *mems: torch.Tensor) -> torch.Tensor:
        """Mean negative log-likelihood of the ``T x B`` targets (a scalar)."""
        qlen = tokens.shape[0]
        mlen = mems[0].size(0)
        klen = mlen + qlen
        word = self.word_emb(tokens)
        mask = torch.triu(torch.ones(qlen, klen, dtype=torch.bool, device=word.device), diagonal=1 + mlen)
        pos_seq = torch.arange(klen - 1, -1, -1.0, device=word.device, dtype=word.dtype)
        sinusoid = torch.outer(pos_seq, self.inv_freq)
        pos_emb = self.drop(torch.cat([sinusoid.sin(), sinusoid.cos()], dim=-1))
        core = self.drop(word)
        hids = [core]
        for layer, mem in zip(self.layers, mems, strict=False):
            core = layer(core, pos_emb, self.r_w_bias, self.r_r_bias, mask, mem)
            hids.append(core)
        with torch.no_grad():  # the memories for the next segment
            new_mems = [torch.cat([m, h], 0)[-mlen:].detach() for m, h in zip(mems, hids, strict=False)]
        del new_mems
        hidden = self.drop(core)
        return self._adaptive_nll(hidden.reshape(-1, self.d_model), targets.reshape(-1)).mean()


XL_BASE = {"n_layer": 16, "d_model": 512, "n_head": 8, "d_head": 64, "d_inner": 2048, "dropout": 0.1,
           "dropatt": 0.0, "div_val": 1}
"""DeepLearningExamples' base model for WikiText-103 (README, "Model architecture": d_model 512,
8 heads of 64, d_inner 2048, 16 layers, tgt_len = mem_len = 192; adaptive softmax, div_val 1)."""
XL_LARGE = {"n_layer": 18, "d_model": 1024, "n_head": 16, "d_head": 64, "d_inner": 4096, "dropout": 0.2,
            "dropatt": 0.2, "div_val": 4}
"""The large model (the reference implementation's hyper-parameters, kimiyoung/transformer-xl
``run_wt103_large.sh``: div_val 4, tgt_len = mem_len = 384; Lambda ran 256)."""
XL_BASE_SOFTMAX = {**XL_BASE, "cutoffs": ()}
"""The base model as ``train.py`` builds it from command-line flags without ``--adaptive`` (its
default: ``cutoffs = []`` unless ``args.adaptive``; ``--div_val`` defaults to 1, ``--not_tied``
unset): one softmax over all 267,735 words, tied to the input table. Lambda's benchmark
(lambdal/deeplearning-benchmark ``pytorch/scripts/config_v1/config_pytorch_*.sh``) runs it so:
``--n_layer 16 --d_model 512 --n_head 8 --d_head 64 --d_inner 2048``, no ``--adaptive``."""
XL_LARGE_SOFTMAX = {**XL_LARGE, "div_val": 1, "cutoffs": ()}
"""The large model as Lambda runs it (same scripts: ``--n_layer 18 --d_model 1024 --n_head 16
--d_head 64 --d_inner 4096 --dropout 0.2 --dropatt 0.2``, no ``--adaptive``, no ``--div_val``):
a full tied softmax, one 1024-wide input table."""
XL_PAPER_BASE = {"n_layer": 16, "d_model": 410, "n_head": 10, "d_head": 41, "d_inner": 2100, "dropout": 0.1,
                 "dropatt": 0.0, "div_val": 1}
"""The paper's base model (kimiyoung/transformer-xl ``run_wt103_base.sh``; 151 M parameters in
Dai et al. 2019, Table 1), which DeepLearningExamples widened to powers of two."""


def _xl(config: dict, batch_size: int, seq_len: int, mem_len: int | None) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    model = TransformerXL(**config)
    mem = seq_len if mem_len is None else mem_len
    tokens = torch.zeros(seq_len, batch_size, dtype=torch.long)
    mems = tuple(torch.empty(mem, batch_size, config["d_model"]) for _ in range(config["n_layer"] + 1))
    return model, (tokens, tokens.clone(), *mems)


def transformer_xl_base(batch_size: int = 8, seq_len: int = 192) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """DeepLearningExamples' Transformer-XL base on WikiText-103 and a batch of ``batch_size`` streams
    of ``seq_len`` target tokens with ``mem_len = seq_len`` cached states per layer."""
    return _xl(XL_BASE, batch_size, seq_len, None)


def transformer_xl_large(batch_size: int = 2, seq_len: int = 256) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Transformer-XL large on WikiText-103 (see :data:`XL_LARGE`); as :func:`transformer_xl_base`."""
    return _xl(XL_LARGE, batch_size, seq_len, None)


def transformer_xl_base_softmax(batch_size: int = 8, seq_len: int = 192
                                ) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The base model with a full softmax (:data:`XL_BASE_SOFTMAX`, Lambda's runs); as
    :func:`transformer_xl_base`."""
    return _xl(XL_BASE_SOFTMAX, batch_size, seq_len, None)


def transformer_xl_large_softmax(batch_size: int = 2, seq_len: int = 256
                                 ) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The large model with a full softmax and one input table (:data:`XL_LARGE_SOFTMAX`, Lambda's
    runs); as :func:`transformer_xl_base`."""
    return _xl(XL_LARGE_SOFTMAX, batch_size, seq_len, None)
