"""The model zoo: the kinds of models the two case studies characterise, ready to profile.

Each :class:`ZooEntry` names its source (paper, configuration) and its default sizes. A factory
takes ``batch_size`` and ``seq_len`` or ``image_size`` and returns ``(model, example_batch)``;
the model computes its own training loss. Nothing is downloaded: the Hugging Face models are built
from configuration objects with ``HF_HUB_OFFLINE=1``.

=================  ======================================================  ==========================
name               model                                                   default sizes
=================  ======================================================  ==========================
resnet18           ResNet-18 (He et al. 2016), 11.7 M parameters           batch 64, 224 x 224
resnet50           ResNet-50 v1.5, 25.6 M parameters                       batch 64, 224 x 224
resnet18_cifar     ResNet-18 for CIFAR-10 (kuangliu/pytorch-cifar), 11.2 M batch 128, 32 x 32
transformer_nmt    Transformer base (Vaswani et al. 2017), 37k shared      batch 96 sentence pairs,
                   vocabulary                                              32 tokens each side
bert_base          BERT-base pre-training (Devlin et al. 2019), 110 M      batch 32, sequence 128
bert_large         BERT-large pre-training, 340 M                          batch 8, sequence 512
gpt2               GPT-2 small (Radford et al. 2019), 124 M                batch 8, sequence 1024
mind               MIND multi-interest retrieval (Li et al. 2019)          batch 512, 50 behaviours
dlrm               DLRM on Criteo Kaggle tables (Naumov et al. 2019)       batch 128
ncf                NeuMF on MovieLens 1M (He et al. 2017)                  batch 256
gcn_reddit         2-layer GCN (Kipf and Welling 2017) on a Reddit-sized   batch = 232,965 nodes
                   graph (edge-list message passing)                       (full graph)
wav2vec2_base      wav2vec 2.0 base + CTC head (Baevski et al. 2020)       batch 8, 15 s of 16 kHz
=================  ======================================================  ==========================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ZooEntry:
    """One zoo model.

    Attributes:
        name: the zoo name (``ddlscope profile NAME``).
        kind: ``vision``, ``nlp``, ``recsys``, ``graph`` or ``speech``.
        description: one line.
        source: where the architecture and sizes come from.
        factory: ``factory(batch_size=..., seq_len=... | image_size=...) -> (model, batch)``.
        batch_size: default samples per replica per step.
        seq_len: default sequence length (tokens, behaviours or audio samples), or None.
        image_size: default image side in pixels, or None.
        size_meaning: what ``batch_size`` and ``seq_len``/``image_size`` count for this model.
        stored_input_bytes_per_sample: bytes read from storage per sample (e.g. a JPEG), when
            known; None otherwise.
    """

    name: str
    kind: str
    description: str
    source: str
    factory: Callable[..., tuple[Any, Any]]
    batch_size: int
    seq_len: int | None = None
    image_size: int | None = None
    size_meaning: str = ""
    stored_input_bytes_per_sample: float | None = None

    def sizes(self, *, batch_size: int | None = None, seq_len: int | None = None,
              image_size: int | None = None) -> dict[str, int]:
        """The keyword sizes for :attr:`factory`: the given ones over the defaults.

        Raises:
            ValueError: ``seq_len`` for a model without sequences, or ``image_size`` for a model
                without images.
        """
        if seq_len is not None and self.seq_len is None:
            raise ValueError(f"seq_len: model {self.name!r} has no sequence length ({self.size_meaning})")
        if image_size is not None and self.image_size is None:
            raise ValueError(f"image_size: model {self.name!r} has no image size ({self.size_meaning})")
        out = {"batch_size": batch_size or self.batch_size}
        if self.seq_len is not None:
            out["seq_len"] = seq_len or self.seq_len
        if self.image_size is not None:
            out["image_size"] = image_size or self.image_size
        return out


def _lazy(module: str, attr: str) -> Callable[..., tuple[Any, Any]]:
    """A factory that imports its module on first call (keeps ``transformers`` out of start-up)."""

    def factory(**kwargs: Any) -> tuple[Any, Any]:
        import importlib

        return getattr(importlib.import_module(f"ddlscope.profile.zoo.{module}"), attr)(**kwargs)

    factory.__name__ = factory.__qualname__ = attr
    return factory


IMAGENET_MEAN_JPEG_BYTES = 110e3
"""Mean size of an ImageNet (ILSVRC-2012) training JPEG, about 110 kB (the 1.28 M-image training
set is about 140 GB)."""

ZOO: dict[str, ZooEntry] = {e.name: e for e in (
    ZooEntry(
        "resnet18", "vision", "ResNet-18 image classifier, 1000 classes, cross-entropy",
        "He et al., 'Deep Residual Learning for Image Recognition', CVPR 2016, Table 1 (18-layer); "
        "11,689,512 parameters as torchvision's resnet18",
        _lazy("vision", "resnet18"), batch_size=64, image_size=224,
        size_meaning="batch_size images of image_size x image_size x 3",
        stored_input_bytes_per_sample=IMAGENET_MEAN_JPEG_BYTES),
    ZooEntry(
        "resnet50", "vision", "ResNet-50 v1.5 image classifier, 1000 classes, cross-entropy",
        "He et al., CVPR 2016, Table 1 (50-layer), v1.5 variant (stride 2 on the 3x3 convolution of the "
        "first bottleneck of a stage, as torchvision and NVIDIA DeepLearningExamples); 25,557,032 parameters",
        _lazy("vision", "resnet50"), batch_size=64, image_size=224,
        size_meaning="batch_size images of image_size x image_size x 3",
        stored_input_bytes_per_sample=IMAGENET_MEAN_JPEG_BYTES),
    ZooEntry(
        "resnet18_cifar", "vision", "ResNet-18 for 32 x 32 CIFAR-10 images, 10 classes, cross-entropy",
        "kuangliu/pytorch-cifar models/resnet.py ResNet18 (3x3/1 stem, no max-pooling, 4x4 average pooling), "
        "the model of the Pollux (OSDI 2021) cifar10 benchmark (adaptdl benchmark/models/cifar10, "
        "--model=ResNet18); 11,173,962 parameters; CIFAR-10 (Krizhevsky 2009): 32 x 32 RGB, batch 128",
        _lazy("vision", "resnet18_cifar"), batch_size=128, image_size=32,
        size_meaning="batch_size images of image_size x image_size x 3",
        stored_input_bytes_per_sample=3 * 32 * 32 + 1),
    ZooEntry(
        "transformer_nmt", "nlp", "Transformer base encoder-decoder for translation, label-smoothed cross-entropy",
        "Vaswani et al., 'Attention Is All You Need', NeurIPS 2017, base model (Table 3): d_model 512, 6+6 "
        "layers, 8 heads, d_ff 2048, dropout 0.1, shared 37,000-token BPE vocabulary with tied embeddings and "
        "pre-softmax projection (sec. 3.4), label smoothing 0.1; batches of ~25,000 source + 25,000 target tokens "
        "over 8 GPUs (sec. 5.1), so ~3,100 tokens per GPU each side: 96 pairs x 32 tokens",
        _lazy("nlp", "transformer_nmt"), batch_size=96, seq_len=32,
        size_meaning="batch_size sentence pairs of seq_len source and seq_len target tokens"),
    ZooEntry(
        "bert_base", "nlp", "BERT-base pre-training (masked LM over all positions + next-sentence prediction)",
        "Devlin et al., 'BERT', NAACL 2019: L=12, H=768, A=12, 110 M parameters, WordPiece vocabulary 30,522; "
        "phase 1 uses 128-token sequences; Hugging Face transformers BertForPreTraining from BertConfig",
        _lazy("nlp", "bert_base"), batch_size=32, seq_len=128,
        size_meaning="batch_size sequences of seq_len tokens"),
    ZooEntry(
        "bert_large", "nlp", "BERT-large pre-training (masked LM over all positions + next-sentence prediction)",
        "Devlin et al., NAACL 2019: L=24, H=1024, A=16, 340 M parameters; phase 2 uses 512-token sequences; "
        "Hugging Face transformers BertForPreTraining from BertConfig",
        _lazy("nlp", "bert_large"), batch_size=8, seq_len=512,
        size_meaning="batch_size sequences of seq_len tokens"),
    ZooEntry(
        "gpt2", "nlp", "GPT-2 small causal language model",
        "Radford et al., 'Language Models are Unsupervised Multitask Learners', 2019: 12 layers, d_model 768, "
        "context 1024, vocabulary 50,257; 124,439,808 parameters (OpenAI's '124M'); Hugging Face "
        "GPT2LMHeadModel from GPT2Config()",
        _lazy("nlp", "gpt2"), batch_size=8, seq_len=1024,
        size_meaning="batch_size sequences of seq_len tokens"),
    ZooEntry(
        "mind", "recsys", "MIND multi-interest user model with dynamic routing and sampled softmax",
        "Li et al., 'Multi-Interest Network with Dynamic Routing for Recommendation at Tmall', CIKM 2019: "
        "behaviour sequence of item (id, category, brand) embeddings, B2I dynamic routing (3 iterations, "
        "K=4 interests), label-aware attention (p=2), sampled softmax. Table sizes are our stated assumptions "
        "at Tmall scale: 10 M items, 20,000 categories, 500,000 brands, 10 M users, dimension 64; "
        "1,000 shared negative samples per batch",
        _lazy("recsys", "mind"), batch_size=512, seq_len=50,
        size_meaning="batch_size users with seq_len behaviours each"),
    ZooEntry(
        "dlrm", "recsys", "DLRM click-through-rate model on the Criteo Kaggle feature set",
        "Naumov et al., 'Deep Learning Recommendation Model for Personalization and Recommendation Systems', "
        "2019, and facebookresearch/dlrm's Criteo Kaggle benchmark: 13 dense features, 26 embedding tables with "
        "the Kaggle cardinalities (33,762,577 rows in all), dimension 16, bottom MLP 13-512-256-64-16, dot "
        "interaction, top MLP 367-512-256-1, batch 128",
        _lazy("recsys", "dlrm"), batch_size=128,
        size_meaning="batch_size samples, one index per table each"),
    ZooEntry(
        "ncf", "recsys", "NeuMF (GMF + MLP) neural collaborative filtering, binary cross-entropy",
        "He et al., 'Neural Collaborative Filtering', WWW 2017, NeuMF without pre-training; the Pollux (OSDI 2021) "
        "ncf benchmark's configuration (adaptdl benchmark/models/ncf: ml-1m with 6,040 users and 3,706 items, "
        "32 predictive factors, 3 MLP layers 256-128-64-32, dropout 0, Adam, batch 256)",
        _lazy("recsys", "ncf"), batch_size=256,
        size_meaning="batch_size (user, item, label) interactions"),
    ZooEntry(
        "gcn_reddit", "graph", "2-layer GCN, full-graph node classification, edge-list message passing",
        "Kipf and Welling, 'Semi-Supervised Classification with Graph Convolutional Networks', ICLR 2017 "
        "(symmetric normalisation with self-loops, transform then aggregate); Reddit graph of Hamilton et al., "
        "'Inductive Representation Learning on Large Graphs', NeurIPS 2017, as in PyTorch Geometric: 232,965 "
        "nodes, 114,615,892 edges, 602 features, 41 classes; hidden size 128",
        _lazy("graph", "gcn_reddit"), batch_size=232_965,
        size_meaning="batch_size nodes per step (the full graph by default); edges scale with the nodes at "
                     "Reddit's mean degree"),
    ZooEntry(
        "wav2vec2_base", "speech", "wav2vec 2.0 base fine-tuned with a CTC head (32 characters)",
        "Baevski et al., 'wav2vec 2.0', NeurIPS 2020, BASE: 7-layer convolutional feature encoder (frozen in "
        "fine-tuning, sec. 4.2), 12 transformer blocks, d_model 768, 8 heads... as Hugging Face Wav2Vec2Config "
        "defaults (12 heads), 95 M parameters; 16 kHz audio, 15 s per sample",
        _lazy("speech", "wav2vec2_base"), batch_size=8, seq_len=240_000,
        size_meaning="batch_size utterances of seq_len audio samples at 16 kHz"),
)}
"""All zoo models by name."""
