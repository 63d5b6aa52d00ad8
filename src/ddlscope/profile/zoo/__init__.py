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
resnet101/152      ResNet-101 / -152 v1.5, 44.5 M / 60.2 M                 batch 64, 224 x 224
vgg16              VGG-16 (Simonyan and Zisserman 2015), 138.4 M           batch 64, 224 x 224
mobilenet_v2       MobileNetV2 1.0 (Sandler et al. 2018), 3.5 M            batch 64, 224 x 224
shufflenet_v2      ShuffleNet V2 1.0x (Ma et al. 2018), 2.3 M              batch 64, 224 x 224
inception_v3       Inception-v3 (Szegedy et al. 2016), 27.2 M              batch 64, 299 x 299
dcgan              DCGAN (Radford et al. 2016), PyTorch example, 6.3 M     batch 128, 64 x 64
transformer_big    Transformer big (Vaswani et al. 2017), 214.2 M          batch 96 pairs, 32 tokens
lstm_lm            2 x 1500 LSTM language model (Zaremba et al. 2014)      batch 20, 35 steps
ssd300             SSD300 v1.1, ResNet-50 trunk (NVIDIA DLE), COCO         batch 48, 300 x 300
bert_base_squad    BERT-base + SQuAD span head (NVIDIA DLE run_squad)      batch 24, sequence 384
bert_large_squad   BERT-large + SQuAD span head                            batch 8, sequence 384
gnmt               GNMT v2 (NVIDIA DLE), 160.7 M                           batch 128, 50 + 50 tokens
transformer_xl_*   Transformer-XL base / large on WikiText-103 (DLE)       base 8 x 192, large 2 x 256
                   (*_softmax: a full softmax, as Lambda runs train.py)
ncf_dle            NeuMF on MovieLens 20M (NVIDIA DLE), 31.8 M             batch 1,048,576
tacotron2          Tacotron 2 (NVIDIA DLE), 28.2 M                         batch 48, 566 mel frames
waveglow           WaveGlow (NVIDIA DLE, WN 512 channels), 268.3 M         batch 8, 8,000 samples
deepspeech2        DeepSpeech 2 (deepspeech.pytorch), 86.6 M               batch 64, 1,230 frames (12.3 s)
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

COCO_MEAN_JPEG_BYTES = 18e9 / 118_287
"""Mean size of a COCO 2017 training JPEG: about 18 GB for 118,287 images (152 kB)."""

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
    ZooEntry(
        "resnet101", "vision", "ResNet-101 v1.5 image classifier, 1000 classes, cross-entropy",
        "He et al., CVPR 2016, Table 1 (101-layer: [3, 4, 23, 3] bottlenecks), v1.5; 44,549,160 parameters as "
        "torchvision's resnet101",
        _lazy("vision", "resnet101"), batch_size=64, image_size=224,
        size_meaning="batch_size images of image_size x image_size x 3",
        stored_input_bytes_per_sample=IMAGENET_MEAN_JPEG_BYTES),
    ZooEntry(
        "resnet152", "vision", "ResNet-152 v1.5 image classifier, 1000 classes, cross-entropy",
        "He et al., CVPR 2016, Table 1 (152-layer: [3, 8, 36, 3] bottlenecks), v1.5; 60,192,808 parameters as "
        "torchvision's resnet152",
        _lazy("vision", "resnet152"), batch_size=64, image_size=224,
        size_meaning="batch_size images of image_size x image_size x 3",
        stored_input_bytes_per_sample=IMAGENET_MEAN_JPEG_BYTES),
    ZooEntry(
        "vgg16", "vision", "VGG-16 image classifier (configuration D), 1000 classes, cross-entropy",
        "Simonyan and Zisserman, 'Very Deep Convolutional Networks for Large-Scale Image Recognition', ICLR 2015, "
        "Table 1 D; 138,357,544 parameters as torchvision's vgg16",
        _lazy("vision", "vgg16"), batch_size=64, image_size=224,
        size_meaning="batch_size images of image_size x image_size x 3",
        stored_input_bytes_per_sample=IMAGENET_MEAN_JPEG_BYTES),
    ZooEntry(
        "mobilenet_v2", "vision", "MobileNetV2 1.0 image classifier (depthwise separable), 1000 classes",
        "Sandler et al., 'MobileNetV2: Inverted Residuals and Linear Bottlenecks', CVPR 2018, Table 2 (3.4 M "
        "parameters, 300 M multiply-adds); 3,504,872 parameters as torchvision's mobilenet_v2",
        _lazy("vision", "mobilenet_v2"), batch_size=64, image_size=224,
        size_meaning="batch_size images of image_size x image_size x 3",
        stored_input_bytes_per_sample=IMAGENET_MEAN_JPEG_BYTES),
    ZooEntry(
        "shufflenet_v2", "vision", "ShuffleNet V2 1.0x image classifier (channel split and shuffle), 1000 classes",
        "Ma et al., 'ShuffleNet V2: Practical Guidelines for Efficient CNN Architecture Design', ECCV 2018, Table 5 "
        "(1.0x: 2.3 M parameters, 146 M multiply-adds); 2,278,604 parameters as torchvision's shufflenet_v2_x1_0",
        _lazy("vision", "shufflenet_v2"), batch_size=64, image_size=224,
        size_meaning="batch_size images of image_size x image_size x 3",
        stored_input_bytes_per_sample=IMAGENET_MEAN_JPEG_BYTES),
    ZooEntry(
        "inception_v3", "vision", "Inception-v3 image classifier with its auxiliary head, 1000 classes",
        "Szegedy et al., 'Rethinking the Inception Architecture for Computer Vision', CVPR 2016, Table 1; "
        "torchvision's inception_v3 layout (27,161,264 parameters with the auxiliary classifier; 5.71 G "
        "multiply-adds at 299 x 299); loss = CE + 0.4 x auxiliary CE as torchvision's reference training",
        _lazy("vision", "inception_v3"), batch_size=64, image_size=299,
        size_meaning="batch_size images of image_size x image_size x 3",
        stored_input_bytes_per_sample=IMAGENET_MEAN_JPEG_BYTES),
    ZooEntry(
        "dcgan", "vision", "DCGAN generator + discriminator on 64 x 64 images, one adversarial iteration",
        "Radford, Metz and Chintala, 'Unsupervised Representation Learning with Deep Convolutional GANs', "
        "ICLR 2016; the layout and training loop of PyTorch's examples/dcgan/main.py (nz 100, ngf = ndf = 64, "
        "batch 128, Adam beta1 0.5): 3,576,704 + 2,765,568 parameters; a Habitat (USENIX ATC 2021) benchmark model",
        _lazy("vision", "dcgan"), batch_size=128, image_size=64,
        size_meaning="batch_size real 64 x 64 x 3 images and as many latent vectors"),
    ZooEntry(
        "transformer_big", "nlp", "Transformer big encoder-decoder for translation, label-smoothed cross-entropy",
        "Vaswani et al., NeurIPS 2017, Table 3 'big': d_model 1024, 16 heads, d_ff 4096, dropout 0.3, 6 + 6 layers "
        "(213 M); the shared 37,000-token vocabulary of the base model; 214,249,472 parameters",
        _lazy("nlp", "transformer_big"), batch_size=96, seq_len=32,
        size_meaning="batch_size sentence pairs of seq_len source and seq_len target tokens"),
    ZooEntry(
        "lstm_lm", "nlp", "Large regularised 2-layer LSTM word language model (Penn Treebank)",
        "Zaremba, Sutskever and Vinyals, 'Recurrent Neural Network Regularization', 2014, sec. 4.1: 2 layers of "
        "1,500 units, 10,000 words, dropout 0.65, 35 unrolled steps, batch 20, 66 M parameters; 66,034,000 here",
        _lazy("nlp", "lstm_lm"), batch_size=20, seq_len=35,
        size_meaning="batch_size token streams of seq_len steps"),
    ZooEntry(
        "ssd300", "vision", "SSD300 v1.1 object detector (ResNet-50 trunk), COCO, multibox loss",
        "Liu et al., 'SSD: Single Shot MultiBox Detector', ECCV 2016 (300 x 300, 8,732 default boxes); NVIDIA "
        "DeepLearningExamples PyTorch/Detection/SSD (ResNet-50 to layer3 with stride 1, extra blocks, 81 COCO labels, "
        "hard-negative mining 3:1); batch 48 as Lambda's fp32 16 GB runs (lambdal/deeplearning-benchmark "
        "pytorch/scripts/config_v1/config_pytorch_16GB.sh)",
        _lazy("vision", "ssd300"), batch_size=48, image_size=300,
        size_meaning="batch_size images of 300 x 300 x 3 with matched ground-truth boxes",
        stored_input_bytes_per_sample=COCO_MEAN_JPEG_BYTES),
    ZooEntry(
        "bert_base_squad", "nlp", "BERT-base fine-tuning on SQuAD v1.1 (span start/end cross-entropy)",
        "Devlin et al., NAACL 2019, sec. 4.2 (SQuAD: start/end vectors over the final hidden states); NVIDIA "
        "DeepLearningExamples PyTorch/LanguageModeling/BERT run_squad.py (max_seq_length 384, vocabulary padded to "
        "30,528); batch 24 as Lambda's fp32 16 GB runs; Hugging Face BertForQuestionAnswering from BertConfig",
        _lazy("nlp", "bert_base_squad"), batch_size=24, seq_len=384,
        size_meaning="batch_size question+passage sequences of seq_len tokens"),
    ZooEntry(
        "bert_large_squad", "nlp", "BERT-large fine-tuning on SQuAD v1.1 (span start/end cross-entropy)",
        "Devlin et al., NAACL 2019, sec. 4.2; NVIDIA DeepLearningExamples run_squad.py (max_seq_length 384, "
        "vocabulary 30,528); batch 8 as Lambda's fp32 16 GB runs",
        _lazy("nlp", "bert_large_squad"), batch_size=8, seq_len=384,
        size_meaning="batch_size question+passage sequences of seq_len tokens"),
    ZooEntry(
        "gnmt", "nlp", "GNMT v2 LSTM encoder-decoder with normalised Bahdanau attention, label-smoothed CE",
        "Wu et al., 'Google's Neural Machine Translation System', 2016; NVIDIA DeepLearningExamples "
        "PyTorch/Translation/GNMT (README 'Default configuration': 4-layer encoder, first bidirectional, 4-layer "
        "decoder, hidden 1024, residual from layer 3, dropout 0.2, shared embeddings, label smoothing 0.1; WMT16 "
        "en-de BPE vocabulary 32,320; --max-length-train 50; batch 128 per GPU); 160,671,297 parameters",
        _lazy("nlp", "gnmt"), batch_size=128, seq_len=50,
        size_meaning="batch_size sentence pairs of seq_len source and seq_len target tokens"),
    ZooEntry(
        "transformer_xl_base", "nlp", "Transformer-XL base language model on WikiText-103 (adaptive softmax)",
        "Dai et al., 'Transformer-XL', ACL 2019; NVIDIA DeepLearningExamples LanguageModeling/Transformer-XL "
        "base (README: 16 layers, d_model 512, 8 heads of 64, d_inner 2048, tgt_len = mem_len = 192, div_val 1, "
        "tied adaptive softmax with cutoffs 20k/40k/200k over 267,735 words); 191,950,298 parameters (the "
        "paper's narrower base, d_model 410, is 151 M); batch 8 as Lambda's fp32 16 GB runs",
        _lazy("transformer_xl", "transformer_xl_base"), batch_size=8, seq_len=192,
        size_meaning="batch_size streams of seq_len target tokens (plus seq_len cached tokens per layer)"),
    ZooEntry(
        "transformer_xl_large", "nlp", "Transformer-XL large language model on WikiText-103 (adaptive softmax)",
        "Dai et al., ACL 2019; kimiyoung/transformer-xl run_wt103_large.sh as DeepLearningExamples' large model "
        "(18 layers, d_model 1024, 16 heads of 64, d_inner 4096, div_val 4, dropout 0.2); tgt_len = mem_len = 256 "
        "and batch 2 as Lambda's fp32 16 GB runs (DeepLearningExamples trains with 384); 285,170,506 parameters",
        _lazy("transformer_xl", "transformer_xl_large"), batch_size=2, seq_len=256,
        size_meaning="batch_size streams of seq_len target tokens (plus seq_len cached tokens per layer)"),
    ZooEntry(
        "transformer_xl_base_softmax", "nlp",
        "Transformer-XL base with a full softmax over the 267,735 words (train.py without --adaptive)",
        "as transformer_xl_base, but built as DeepLearningExamples' train.py builds it from flags without "
        "--adaptive (cutoffs = [], div_val 1, tied): the way Lambda's benchmark (lambdal/deeplearning-benchmark "
        "pytorch/scripts/config_v1) runs it",
        _lazy("transformer_xl", "transformer_xl_base_softmax"), batch_size=8, seq_len=192,
        size_meaning="batch_size streams of seq_len target tokens (plus seq_len cached tokens per layer)"),
    ZooEntry(
        "transformer_xl_large_softmax", "nlp",
        "Transformer-XL large with a full softmax and one input table (train.py without --adaptive, --div_val)",
        "as transformer_xl_large, but div_val 1 and a full tied softmax, as Lambda's benchmark runs "
        "DeepLearningExamples' train.py (lambdal/deeplearning-benchmark pytorch/scripts/config_v1)",
        _lazy("transformer_xl", "transformer_xl_large_softmax"), batch_size=2, seq_len=256,
        size_meaning="batch_size streams of seq_len target tokens (plus seq_len cached tokens per layer)"),
    ZooEntry(
        "ncf_dle", "recsys", "NeuMF on MovieLens 20M as NVIDIA DeepLearningExamples trains it",
        "He et al., WWW 2017; NVIDIA DeepLearningExamples PyTorch/Recommendation/NCF (ml-20m: 138,493 users, "
        "26,744 items; factors 64, MLP 256-256-128-64, dropout 0.5, batch 2^20 = 1,048,576 samples incl. "
        "negatives); 31,832,577 parameters",
        _lazy("recsys", "ncf_dle"), batch_size=1_048_576,
        size_meaning="batch_size (user, item, label) samples, negatives included"),
    ZooEntry(
        "tacotron2", "speech", "Tacotron 2 text-to-mel-spectrogram model (teacher-forced decoder)",
        "Shen et al., ICASSP 2018; NVIDIA DeepLearningExamples PyTorch/SpeechSynthesis/Tacotron2 (tacotron2/model.py "
        "defaults: 148 symbols, embedding 512, 3 encoder convolutions, BiLSTM 2 x 256, attention/decoder LSTMCells "
        "1024, location-sensitive attention 128, post-net 5 x 512); 28,193,153 parameters; LJSpeech mean clip "
        "6.57 s = 566 frames of hop 256 at 22,050 Hz; batch 48 as Lambda's runs",
        _lazy("speech", "tacotron2"), batch_size=48, seq_len=566,
        size_meaning="batch_size utterances of seq_len mel frames (and 100 input symbols)"),
    ZooEntry(
        "waveglow", "speech", "WaveGlow flow-based vocoder (negative log-likelihood)",
        "Prenger, Valle and Catanzaro, 'WaveGlow', ICASSP 2019; NVIDIA DeepLearningExamples waveglow/arg_parser.py "
        "defaults: 12 flows, group 8, early output 2 every 4, WN 8 layers x 512 channels (--wn-channels 512; "
        "NVIDIA/waveglow's 256 channels give the 87.88 M of the paper); segment 8,000 samples and batch 8 as "
        "Lambda's runs (config_v1 --segment-length 8000); 268,294,760 parameters",
        _lazy("speech", "waveglow"), batch_size=8, seq_len=8000,
        size_meaning="batch_size audio segments of seq_len samples at 22,050 Hz with their mel spectrograms"),
    ZooEntry(
        "deepspeech2", "speech", "DeepSpeech 2 speech recognizer (2 conv + 5 BiLSTM), CTC loss",
        "Amodei et al., 'Deep Speech 2', ICML 2016; SeanNaren/deepspeech.pytorch model.py with BiDirectionalConfig "
        "(LSTM, hidden 1024, 5 layers), 161-bin spectrogram (20 ms window, 10 ms stride, 16 kHz), 29 characters, "
        "batch 64; 86,618,400 parameters; LibriSpeech's mean utterance 12.3 s = 1,230 frames",
        _lazy("speech", "deepspeech2"), batch_size=64, seq_len=1230,
        size_meaning="batch_size utterances of seq_len spectrogram frames (10 ms each)"),
)}
"""All zoo models by name."""
