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
