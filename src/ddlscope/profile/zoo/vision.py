"""ResNet-18 and ResNet-50 v1.5, our own standard definitions.

Architecture of He et al., "Deep Residual Learning for Image Recognition", CVPR 2016, Table 1:
a 7x7/2 stem convolution, 3x3/2 max-pooling, four stages of residual blocks (basic blocks of two
3x3 convolutions for 18 layers; bottlenecks 1x1-3x3-1x1 with expansion 4 for 50 layers; [2, 2, 2, 2]
and [3, 4, 6, 3] blocks), global average pooling and a fully connected classifier. Every
convolution is bias-free and followed by batch normalisation. Version 1.5 puts the stride of a
down-sampling bottleneck on its 3x3 convolution (not the first 1x1), as torchvision and NVIDIA's
DeepLearningExamples do; projection shortcuts are 1x1 convolutions with batch normalisation.
Parameter counts: 11,689,512 (ResNet-18) and 25,557,032 (ResNet-50) with 1000 classes, the same
as torchvision's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False), nn.BatchNorm2d(cout)]


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with an identity or 1x1 projection shortcut (expansion 1)."""

    expansion = 1

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        self.conv1, self.bn1 = _conv_bn(cin, width, 3, stride)
        self.conv2, self.bn2 = _conv_bn(width, width, 3)
        self.relu = nn.ReLU(inplace=True)
        cout = width * self.expansion
        self.downsample = (nn.Sequential(*_conv_bn(cin, cout, 1, stride))
                           if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, cin, H, W) -> (B, width, H/stride, W/stride)``."""
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride: v1.5), 1x1 expand (expansion 4)."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * self.expansion
        self.conv1, self.bn1 = _conv_bn(cin, width, 1)
        self.conv2, self.bn2 = _conv_bn(width, width, 3, stride)
        self.conv3, self.bn3 = _conv_bn(width, cout, 1)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (nn.Sequential(*_conv_bn(cin, cout, 1, stride))
                           if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, cin, H, W) -> (B, 4 width, H/stride, W/stride)``."""
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """A ResNet classifier: ``forward(images (B, 3, H, W) float, labels (B,) int64) -> loss``."""

    def __init__(self, block: type[BasicBlock | Bottleneck], layers: list[int], num_classes: int = 1000):
        super().__init__()
        self.conv1, self.bn1 = _conv_bn(3, 64, 7, 2)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        cin, stages = 64, []
        for i, (width, blocks) in enumerate(zip((64, 128, 256, 512), layers, strict=True)):
            stage = []
            for j in range(blocks):
                stage.append(block(cin, width, 2 if (i > 0 and j == 0) else 1))
                cin = width * block.expansion
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy loss of the batch (a scalar)."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(images))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        logits = self.fc(torch.flatten(self.avgpool(x), 1))
        return F.cross_entropy(logits, labels)


def _batch(batch_size: int, image_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty(batch_size, 3, image_size, image_size), torch.zeros(batch_size, dtype=torch.long)


def resnet18(batch_size: int = 64, image_size: int = 224) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """ResNet-18 and a batch of FP32 images with int64 labels."""
    return ResNet(BasicBlock, [2, 2, 2, 2]), _batch(batch_size, image_size)


def resnet50(batch_size: int = 64, image_size: int = 224) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """ResNet-50 v1.5 and a batch of FP32 images with int64 labels."""
    return ResNet(Bottleneck, [3, 4, 6, 3]), _batch(batch_size, image_size)


class CifarResNet(nn.Module):
    """ResNet-18 for 32 x 32 CIFAR images as kuangliu/pytorch-cifar defines it (the model of
    Pollux's ``cifar10`` benchmark): a 3x3/1 stem convolution with 64 channels and no max-pooling,
    four stages of two basic blocks (64, 128, 256, 512 channels, strides 1, 2, 2, 2), 4 x 4 average
    pooling and a 10-class linear layer; 11,173,962 parameters.
    ``forward(images (B, 3, 32, 32), labels (B,) int64) -> loss``.
    """

    def __init__(self, num_classes: int = 10, layers: tuple[int, ...] = (2, 2, 2, 2)):
        super().__init__()
        self.conv1, self.bn1 = _conv_bn(3, 64, 3, 1)
        self.relu = nn.ReLU(inplace=True)
        cin, stages = 64, []
        for i, (width, blocks) in enumerate(zip((64, 128, 256, 512), layers, strict=True)):
            stage = []
            for j in range(blocks):
                stage.append(BasicBlock(cin, width, 2 if (i > 0 and j == 0) else 1))
                cin = width
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy loss of the batch (a scalar)."""
        x = self.relu(self.bn1(self.conv1(images)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        logits = self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
        return F.cross_entropy(logits, labels)


def resnet18_cifar(batch_size: int = 128, image_size: int = 32) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """The CIFAR ResNet-18 (kuangliu/pytorch-cifar) and a batch of FP32 images with int64 labels."""
    return CifarResNet(), _batch(batch_size, image_size)


def resnet101(batch_size: int = 64, image_size: int = 224) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """ResNet-101 v1.5 ([3, 4, 23, 3] bottlenecks) and a batch of FP32 images with int64 labels."""
    return ResNet(Bottleneck, [3, 4, 23, 3]), _batch(batch_size, image_size)


def resnet152(batch_size: int = 64, image_size: int = 224) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """ResNet-152 v1.5 ([3, 8, 36, 3] bottlenecks) and a batch of FP32 images with int64 labels."""
    return ResNet(Bottleneck, [3, 8, 36, 3]), _batch(batch_size, image_size)


class VGG16(nn.Module):
    """VGG-16 (Simonyan and Zisserman, ICLR 2015, configuration D): 13 3x3 convolutions with ReLU in
    five stages (64, 128, 256, 512, 512 channels) each ending in 2x2/2 max-pooling, then fully
    connected 25,088-4,096-4,096-1,000 with dropout 0.5 (no batch normalisation, biases on every
    layer); 138,357,544 parameters as torchvision's ``vgg16``.
    ``forward(images (B, 3, 224, 224), labels (B,) int64) -> loss``."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for width, convs in ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)):
            for _ in range(convs):
                layers += [nn.Conv2d(cin, width, 3, padding=1), nn.ReLU(inplace=True)]
                cin = width
            layers.append(nn.MaxPool2d(2, 2))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(7)
        self.classifier = nn.Sequential(nn.Linear(512 * 49, 4096), nn.ReLU(inplace=True), nn.Dropout(),
                                        nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(),
                                        nn.Linear(4096, num_classes))

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy loss of the batch (a scalar)."""
        x = torch.flatten(self.avgpool(self.features(images)), 1)
        return F.cross_entropy(self.classifier(x), labels)


def vgg16(batch_size: int = 64, image_size: int = 224) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """VGG-16 and a batch of FP32 images with int64 labels."""
    return VGG16(), _batch(batch_size, image_size)


# -- SSD300 (NVIDIA DeepLearningExamples PyTorch/Detection/SSD) ------------------------------------
SSD_FEATURE_MAPS = (38, 19, 10, 5, 3, 1)
SSD_BOXES_PER_LOCATION = (4, 6, 6, 6, 4, 4)
SSD_DEFAULT_BOXES = sum(f * f * n for f, n in zip(SSD_FEATURE_MAPS, SSD_BOXES_PER_LOCATION, strict=True))
"""8,732 default boxes of SSD300 (Liu et al., ECCV 2016, Table 2 / sec. 3.1)."""
COCO_LABELS = 81
"""80 COCO object classes plus background."""


class SSD300(nn.Module):
    """SSD300 v1.1 as NVIDIA DeepLearningExamples defines it (``Detection/SSD/ssd/model.py``): a
    ResNet-50 trunk up to ``layer3`` with the first ``layer3`` block's strides set to 1 (38 x 38 x
    1,024 features at 300 x 300), five extra blocks (1x1 conv to 256/256/128/128/128 channels, 3x3
    conv to 512/512/256/256/256, the first three with stride 2 and padding 1, each with batch norm
    and ReLU) giving 19, 10, 5, 3 and 1 squared maps, and 3x3 location (4 per box) and confidence
    (81 per box) heads over 4, 6, 6, 6, 4, 4 boxes per location: 8,732 boxes (Liu et al., "SSD:
    Single Shot MultiBox Detector", ECCV 2016).

    Loss (DeepLearningExamples' ``Loss``): smooth-L1 of the encoded box offsets of positive boxes plus
    cross-entropy of the positives and of the hard negatives (the ``3 x positives`` highest-loss
    background boxes, found by two sorts), averaged over positives. ``con_neg[mask] = 0`` is written
    as ``masked_fill`` (same values, no data-dependent shape).

    ``forward(images (B, 3, 300, 300), boxes (B, 4, 8732), labels (B, 8732) int64) -> loss``, with
    the ground truth already matched to the default boxes and encoded (as the data loader does).
    """

    def __init__(self, labels: int = COCO_LABELS):
        super().__init__()
        trunk = ResNet(Bottleneck, [3, 4, 6, 3])
        block = trunk.layer3[0]
        block.conv1.stride = (1, 1)
        block.conv2.stride = (1, 1)
        block.downsample[0].stride = (1, 1)
        self.feature_extractor = nn.Sequential(trunk.conv1, trunk.bn1, trunk.relu, trunk.maxpool, trunk.layer1,
                                               trunk.layer2, trunk.layer3)
        out_channels = (1024, 512, 512, 256, 256, 256)
        extra = []
        for i, (cin, cout, mid) in enumerate(zip(out_channels[:-1], out_channels[1:], (256, 256, 128, 128, 128),
                                                 strict=True)):
            stride_pad = {"stride": 2, "padding": 1} if i < 3 else {}
            extra.append(nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
                                       nn.Conv2d(mid, cout, 3, bias=False, **stride_pad), nn.BatchNorm2d(cout),
                                       nn.ReLU(inplace=True)))
        self.additional_blocks = nn.ModuleList(extra)
        self.labels = labels
        self.loc = nn.ModuleList(nn.Conv2d(c, n * 4, 3, padding=1)
                                 for c, n in zip(out_channels, SSD_BOXES_PER_LOCATION, strict=True))
        self.conf = nn.ModuleList(nn.Conv2d(c, n * labels, 3, padding=1)
                                  for c, n in zip(out_channels, SSD_BOXES_PER_LOCATION, strict=True))

    def forward(self, images: torch.Tensor, gloc: torch.Tensor, glabel: torch.Tensor) -> torch.Tensor:
        """The SSD multibox loss of the batch (a scalar)."""
        x = self.feature_extractor(images)
        sources = [x]
        for block in self.additional_blocks:
            x = block(x)
            sources.append(x)
        b = images.shape[0]
        ploc = torch.cat([head(s).reshape(b, 4, -1) for s, head in zip(sources, self.loc, strict=True)], 2)
        plabel = torch.cat([head(s).reshape(b, self.labels, -1) for s, head in zip(sources, self.conf, strict=True)],
                           2)
        mask = glabel > 0
        pos_num = mask.sum(dim=1)
        sl1 = (mask.float() * F.smooth_l1_loss(ploc, gloc, reduction="none").sum(dim=1)).sum(dim=1)
        con = F.cross_entropy(plabel, glabel, reduction="none")
        con_neg = con.clone().masked_fill(mask, 0.0)
        _, con_idx = con_neg.sort(dim=1, descending=True)
        _, con_rank = con_idx.sort(dim=1)
        neg_num = torch.clamp(3 * pos_num, max=mask.size(1)).unsqueeze(-1)
        neg_mask = con_rank < neg_num
        closs = (con * (mask.float() + neg_mask.float())).sum(dim=1)
        num_mask = (pos_num > 0).float()
        return ((sl1 + closs) * num_mask / pos_num.float().clamp(min=1e-6)).mean(dim=0)


def ssd300(batch_size: int = 48, image_size: int = 300) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """SSD300 and a batch of images with matched, encoded ground truth for the 8,732 default boxes.

    Raises:
        ValueError: ``image_size`` other than 300 (the default boxes are laid out for 300 x 300).
    """
    if image_size != 300:
        raise ValueError(f"image_size: SSD300's default boxes need 300 x 300 images, got {image_size}")
    return SSD300(), (torch.empty(batch_size, 3, 300, 300), torch.empty(batch_size, 4, SSD_DEFAULT_BOXES),
                      torch.zeros(batch_size, SSD_DEFAULT_BOXES, dtype=torch.long))


class InvertedResidual(nn.Module):
    """MobileNetV2's inverted residual block (Sandler et al., CVPR 2018, Table 1): 1x1 expansion by
    ``t`` (ReLU6; absent for t = 1), 3x3 depthwise convolution carrying the stride (ReLU6), 1x1
    linear projection; identity shortcut when the stride is 1 and the widths agree."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True)]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
                   nn.ReLU6(inplace=True), nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, cin, H, W) -> (B, cout, H/stride, W/stride)``."""
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 1.0 (Sandler et al., "MobileNetV2: Inverted Residuals and Linear Bottlenecks", CVPR
    2018, Table 2): a 3x3/2 stem of 32, 17 inverted residual blocks (t, c, n, s) = (1, 16, 1, 1), (6, 24,
    2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1), a 1x1 convolution
    to 1,280, global pooling, dropout 0.2 and a 1000-way classifier; 3,504,872 parameters as
    torchvision's ``mobilenet_v2`` (the paper: 3.4 M, 300 M multiply-adds at 224 x 224).
    ``forward(images (B, 3, H, W), labels (B,) int64) -> loss``."""

    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1))

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6(inplace=True)]
        cin = 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy loss of the batch (a scalar)."""
        x = F.adaptive_avg_pool2d(self.features(images), 1).flatten(1)
        return F.cross_entropy(self.classifier(x), labels)


def mobilenet_v2(batch_size: int = 64, image_size: int = 224) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """MobileNetV2 1.0 and a batch of FP32 images with int64 labels."""
    return MobileNetV2(), _batch(batch_size, image_size)


def _channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    b, c, h, w = x.shape
    return x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous().view(b, c, h, w)


class ShuffleUnit(nn.Module):
    """ShuffleNet V2 unit (Ma et al., ECCV 2018, Fig. 3 (c)/(d)): stride 1 splits the channels in two and
    runs one half through 1x1 - 3x3 depthwise - 1x1; stride 2 runs both a depthwise-then-1x1 branch and
    that branch on the whole input; the halves are concatenated and channel-shuffled (2 groups)."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        half = cout // 2
        self.stride = stride
        if stride > 1:
            self.branch1 = nn.Sequential(
                nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                nn.Conv2d(cin, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True))
        self.branch2 = nn.Sequential(
            nn.Conv2d(cin if stride > 1 else half, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True),
            nn.Conv2d(half, half, 3, stride, 1, groups=half, bias=False), nn.BatchNorm2d(half),
            nn.Conv2d(half, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, cin, H, W) -> (B, cout, H/stride, W/stride)``."""
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return _channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """ShuffleNet V2 1.0x (Ma et al., "ShuffleNet V2: Practical Guidelines for Efficient CNN Architecture
    Design", ECCV 2018, Table 5): 3x3/2 stem of 24 and 3x3/2 max-pooling, stages of 4, 8 and 4 units
    (116, 232, 464 channels), a 1x1 convolution to 1,024, global pooling and a 1000-way classifier;
    2,278,604 parameters as torchvision's ``shufflenet_v2_x1_0`` (the paper: 2.3 M, 146 M FLOPs, which
    it counts as multiply-adds). ``forward(images (B, 3, H, W), labels (B,) int64) -> loss``."""

    def __init__(self, repeats: tuple[int, ...] = (4, 8, 4), channels: tuple[int, ...] = (24, 116, 232, 464, 1024),
                 num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(3, channels[0], 3, 2, 1, bias=False), nn.BatchNorm2d(channels[0]),
                                   nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin, stages = channels[0], []
        for n, cout in zip(repeats, channels[1:-1], strict=True):
            stages.append(nn.Sequential(ShuffleUnit(cin, cout, 2), *[ShuffleUnit(cout, cout, 1) for _ in range(n - 1)]))
            cin = cout
        self.stage2, self.stage3, self.stage4 = stages
        self.conv5 = nn.Sequential(nn.Conv2d(cin, channels[-1], 1, bias=False), nn.BatchNorm2d(channels[-1]),
                                   nn.ReLU(inplace=True))
        self.fc = nn.Linear(channels[-1], num_classes)

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy loss of the batch (a scalar)."""
        x = self.stage4(self.stage3(self.stage2(self.maxpool(self.conv1(images)))))
        return F.cross_entropy(self.fc(self.conv5(x).mean([2, 3])), labels)


def shufflenet_v2(batch_size: int = 64, image_size: int = 224) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """ShuffleNet V2 1.0x and a batch of FP32 images with int64 labels."""
    return ShuffleNetV2(), _batch(batch_size, image_size)


# -- Inception-v3 (Szegedy et al., CVPR 2016), torchvision's layout ---------------------------------
class _BasicConv(nn.Sequential):
    def __init__(self, cin: int, cout: int, kernel: int | tuple[int, int], stride: int = 1,
                 padding: int | tuple[int, int] = 0):
        super().__init__(nn.Conv2d(cin, cout, kernel, stride, padding, bias=False), nn.BatchNorm2d(cout, eps=0.001),
                         nn.ReLU(inplace=True))


class _InceptionA(nn.Module):
    def __init__(self, cin: int, pool: int):
        super().__init__()
        self.b1 = _BasicConv(cin, 64, 1)
        self.b5 = nn.Sequential(_BasicConv(cin, 48, 1), _BasicConv(48, 64, 5, padding=2))
        self.b3 = nn.Sequential(_BasicConv(cin, 64, 1), _BasicConv(64, 96, 3, padding=1),
                                _BasicConv(96, 96, 3, padding=1))
        self.bp = _BasicConv(cin, pool, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b5(x), self.b3(x), self.bp(F.avg_pool2d(x, 3, 1, 1))], 1)


class _InceptionB(nn.Module):
    def __init__(self, cin: int):
        super().__init__()
        self.b3 = _BasicConv(cin, 384, 3, stride=2)
        self.bd = nn.Sequential(_BasicConv(cin, 64, 1), _BasicConv(64, 96, 3, padding=1),
                                _BasicConv(96, 96, 3, stride=2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b3(x), self.bd(x), F.max_pool2d(x, 3, 2)], 1)


class _InceptionC(nn.Module):
    def __init__(self, cin: int, c7: int):
        super().__init__()
        self.b1 = _BasicConv(cin, 192, 1)
        self.b7 = nn.Sequential(_BasicConv(cin, c7, 1), _BasicConv(c7, c7, (1, 7), padding=(0, 3)),
                                _BasicConv(c7, 192, (7, 1), padding=(3, 0)))
        self.bd = nn.Sequential(_BasicConv(cin, c7, 1), _BasicConv(c7, c7, (7, 1), padding=(3, 0)),
                                _BasicConv(c7, c7, (1, 7), padding=(0, 3)), _BasicConv(c7, c7, (7, 1), padding=(3, 0)),
                                _BasicConv(c7, 192, (1, 7), padding=(0, 3)))
        self.bp = _BasicConv(cin, 192, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b7(x), self.bd(x), self.bp(F.avg_pool2d(x, 3, 1, 1))], 1)


class _InceptionD(nn.Module):
    def __init__(self, cin: int):
        super().__init__()
        self.b3 = nn.Sequential(_BasicConv(cin, 192, 1), _BasicConv(192, 320, 3, stride=2))
        self.b7 = nn.Sequential(_BasicConv(cin, 192, 1), _BasicConv(192, 192, (1, 7), padding=(0, 3)),
                                _BasicConv(192, 192, (7, 1), padding=(3, 0)), _BasicConv(192, 192, 3, stride=2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b3(x), self.b7(x), F.max_pool2d(x, 3, 2)], 1)


class _InceptionE(nn.Module):
    def __init__(self, cin: int):
        super().__init__()
        self.b1 = _BasicConv(cin, 320, 1)
        self.b3_1 = _BasicConv(cin, 384, 1)
        self.b3_a = _BasicConv(384, 384, (1, 3), padding=(0, 1))
        self.b3_b = _BasicConv(384, 384, (3, 1), padding=(1, 0))
        self.bd_1 = nn.Sequential(_BasicConv(cin, 448, 1), _BasicConv(448, 384, 3, padding=1))
        self.bd_a = _BasicConv(384, 384, (1, 3), padding=(0, 1))
        self.bd_b = _BasicConv(384, 384, (3, 1), padding=(1, 0))
        self.bp = _BasicConv(cin, 192, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, z = self.b3_1(x), self.bd_1(x)
        return torch.cat([self.b1(x), self.b3_a(y), self.b3_b(y), self.bd_a(z), self.bd_b(z),
                          self.bp(F.avg_pool2d(x, 3, 1, 1))], 1)


class InceptionV3(nn.Module):
    """Inception-v3 (Szegedy et al., "Rethinking the Inception Architecture for Computer Vision", CVPR
    2016, Table 1) in torchvision's layout: stem of five convolutions and two max-poolings, 3 x
    Inception-A (35 x 35), a grid reduction, 4 x Inception-C with factorised 7x7 (17 x 17), an
    auxiliary classifier on the 17 x 17 grid, a reduction, 2 x Inception-E (8 x 8), pooling, dropout
    0.5 and the classifier; batch norm (eps 0.001) after every bias-free convolution; 27,161,264
    parameters with the auxiliary head, as torchvision's ``inception_v3``. Training loss: cross-entropy
    + 0.4 x the auxiliary head's (torchvision's reference training script).
    ``forward(images (B, 3, 299, 299), labels (B,) int64) -> loss``."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(_BasicConv(3, 32, 3, stride=2), _BasicConv(32, 32, 3),
                                  _BasicConv(32, 64, 3, padding=1), nn.MaxPool2d(3, 2), _BasicConv(64, 80, 1),
                                  _BasicConv(80, 192, 3), nn.MaxPool2d(3, 2))
        self.mixed_5 = nn.Sequential(_InceptionA(192, 32), _InceptionA(256, 64), _InceptionA(288, 64))
        self.mixed_6 = nn.Sequential(_InceptionB(288), _InceptionC(768, 128), _InceptionC(768, 160),
                                     _InceptionC(768, 160), _InceptionC(768, 192))
        self.aux = nn.Sequential(nn.AvgPool2d(5, 3), _BasicConv(768, 128, 1), _BasicConv(128, 768, 5),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(768, num_classes))
        self.mixed_7 = nn.Sequential(_InceptionD(768), _InceptionE(1280), _InceptionE(2048))
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of the main and (x 0.4) auxiliary classifiers (a scalar)."""
        x = self.mixed_6(self.mixed_5(self.stem(images)))
        aux = self.aux(x)
        x = F.adaptive_avg_pool2d(self.mixed_7(x), 1).flatten(1)
        return F.cross_entropy(self.fc(self.dropout(x)), labels) + 0.4 * F.cross_entropy(aux, labels)


def inception_v3(batch_size: int = 64, image_size: int = 299) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """Inception-v3 and a batch of FP32 images with int64 labels (299 x 299 by default)."""
    return InceptionV3(), _batch(batch_size, image_size)


class DCGAN(nn.Module):
    """DCGAN (Radford, Metz and Chintala, "Unsupervised Representation Learning with Deep Convolutional
    Generative Adversarial Networks", ICLR 2016) as PyTorch's ``examples/dcgan/main.py`` trains it on
    64 x 64 RGB images: latent ``nz = 100``, ``ngf = ndf = 64``. The generator is five transposed
    4x4 convolutions (100 -> 512 -> 256 -> 128 -> 64 -> 3; batch norm and ReLU between, tanh out),
    the discriminator five 4x4 convolutions (3 -> 64 -> 128 -> 256 -> 512 -> 1; batch norm from the
    second, leaky ReLU 0.2, sigmoid out); 3,576,704 + 2,765,568 = 6,342,272 parameters.

    One training iteration of the example is one step here: ``forward(real (B, 3, 64, 64), noise
    (B, 100, 1, 1)) -> loss`` returns ``BCE(D(real), 1) + BCE(D(G(noise).detach()), 0) +
    BCE(D(G(noise)), 1)``: the generator runs once, the discriminator three times (real, the detached
    fake for its own loss, the fake again for the generator's), and one backward of the sum computes
    the gradients the example's two backward passes compute (the discriminator's from all three
    terms, as the example's ``errG.backward()`` also fills them; the generator's from the last);
    one optimizer over both networks has the same per-parameter update work as the example's two
    (``Adam(lr=2e-4, betas=(0.5, 0.999))`` each: profile with ``--optimizer adam``)."""

    def __init__(self, nz: int = 100, ngf: int = 64, ndf: int = 64, nc: int = 3):
        super().__init__()

        def up(cin: int, cout: int, stride: int, pad: int) -> list[nn.Module]:
            return [nn.ConvTranspose2d(cin, cout, 4, stride, pad, bias=False), nn.BatchNorm2d(cout), nn.ReLU(True)]

        def down(cin: int, cout: int, bn: bool) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 4, 2, 1, bias=False), *([nn.BatchNorm2d(cout)] if bn else []),
                    nn.LeakyReLU(0.2, inplace=True)]

        self.generator = nn.Sequential(*up(nz, ngf * 8, 1, 0), *up(ngf * 8, ngf * 4, 2, 1), *up(ngf * 4, ngf * 2, 2, 1),
                                       *up(ngf * 2, ngf, 2, 1), nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),
                                       nn.Tanh())
        self.discriminator = nn.Sequential(*down(nc, ndf, False), *down(ndf, ndf * 2, True),
                                           *down(ndf * 2, ndf * 4, True), *down(ndf * 4, ndf * 8, True),
                                           nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False), nn.Sigmoid())

    def forward(self, real: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """The iteration's three losses summed (a scalar; class docstring)."""
        fake = self.generator(noise)
        d_real = self.discriminator(real).view(-1)
        d_fake = self.discriminator(fake.detach()).view(-1)
        d_gen = self.discriminator(fake).view(-1)
        return (F.binary_cross_entropy(d_real, torch.ones_like(d_real))
                + F.binary_cross_entropy(d_fake, torch.zeros_like(d_fake))
                + F.binary_cross_entropy(d_gen, torch.ones_like(d_gen)))


def dcgan(batch_size: int = 128, image_size: int = 64) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """DCGAN and a batch of FP32 64 x 64 images with their latent noise (``(B, 100, 1, 1)``).

    Raises:
        ValueError: ``image_size`` other than 64 (the generator's five layers make 64 x 64 images).
    """
    if image_size != 64:
        raise ValueError(f"image_size: DCGAN's generator makes 64 x 64 images, got {image_size}")
    return DCGAN(), (torch.empty(batch_size, 3, 64, 64), torch.empty(batch_size, 100, 1, 1))
