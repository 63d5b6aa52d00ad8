"""Built-in example jobs: the default input of ``ddlscope predict`` and ``ddlscope whatif``."""

from __future__ import annotations

from ddlscope.specs.architecture import Architecture
from ddlscope.specs.workload import Workload

RESNET50_IMAGES_PER_GPU = 64
RESNET50_FORWARD_MACS_PER_IMAGE = 4.1e9
"""Multiply-accumulates of one ResNet-50 forward pass at 224x224 (He et al., "Deep Residual
Learning for Image Recognition", CVPR 2016, Table 1 gives 3.8e9 "FLOPs" counted as multiply-adds
for the original model; torchvision's ResNet-50 v1.5, with the stride on the 3x3 convolution, has
4.1e9 as counted by fvcore and ptflops)."""
RESNET50_PARAMS = 25_557_032
"""torchvision ResNet-50 parameter count (1000 classes)."""


def example_workload() -> Workload:
    """ResNet-50 on ImageNet, 64 images per GPU, FP32 (the example's numbers, with sources).

    - compute-bound FLOPs: ``3 x 2 x 4.1e9 x 64``: forward multiply-adds x 2 FLOPs each, backward
      twice the forward (the usual 1:2 forward:backward ratio; Kaplan et al. 2020, sec. 2.1).
    - memory-bound bytes: ``1.2e9 x 64``, an estimate of element-wise (BatchNorm, ReLU, residual
      add) traffic per image over forward and backward; ``ddlscope profile resnet50`` measures it.
    - input: 224 x 224 x 3 FP32 tensors copied to the GPU; 110 kB JPEG read per image (the ImageNet
      training set's mean file size).
    - dense parameters: 25,557,032 FP32 weights = gradient bytes, in 161 gradient tensors.
    """
    b = RESNET50_IMAGES_PER_GPU
    return Workload(
        name="resnet50-example",
        batch_size=b,
        precision="fp32",
        compute_bound_flops=3 * 2 * RESNET50_FORWARD_MACS_PER_IMAGE * b,
        memory_bound_bytes=1.2e9 * b,
        memory_bound_flops=0.0,
        input_bytes=224 * 224 * 3 * 4 * b,
        stored_input_bytes=110e3 * b,
        dense_param_bytes=RESNET50_PARAMS * 4,
        num_gradient_tensors=161,
        source="built-in example (published counts and estimates; see ddlscope.specs.examples)",
    )


def example_architecture() -> Architecture:
    """The example placement: PS/Worker with 8 workers of one GPU each and 2 PS shards."""
    return Architecture(kind="ps_worker", num_workers=8, gpus_per_worker=1, num_ps=2)


EXAMPLE_SERVER = "pai-v100-nvlink-8"
"""The example system: the PAI study's 8 x V100 NVLink server with 25 Gb/s Ethernet."""
