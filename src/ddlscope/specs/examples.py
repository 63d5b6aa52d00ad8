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
    """ResNet-50 v1.5 on ImageNet, 64 images per GPU, FP32, SGD: the totals ``ddlscope profile
    resnet50 --batch-size 64`` measures (torch 2.13; the population's shipped zoo profile, checked
    against a fresh profile by the tests), so the example needs no tracing.

    Cross-checks with published counts: forward 4.1e9 multiply-adds per image
    (:data:`RESNET50_FORWARD_MACS_PER_IMAGE`), so the compute-bound FLOPs are close to
    ``3 x 2 x 4.1e9 x 64`` (backward twice the forward); 25,557,032 FP32 parameters = 102.2 MB of
    gradients in 161 tensors; 110 kB JPEG read per image (the ImageNet training set's mean file
    size); 224 x 224 x 3 FP32 tensors copied to the GPU.
    """
    return Workload(
        name="resnet50-example",
        batch_size=RESNET50_IMAGES_PER_GPU,
        precision="fp32",
        compute_bound_flops=1_555_140_968_448.0,
        memory_bound_bytes=37_185_321_188.0,
        memory_bound_flops=11_408_187_093.0,
        input_bytes=38_535_680.0,
        stored_input_bytes=110e3 * RESNET50_IMAGES_PER_GPU,
        dense_param_bytes=RESNET50_PARAMS * 4,
        num_gradient_tensors=161,
        peak_memory_bytes=5_761_929_448.0,
        source="built-in example: ddlscope profile resnet50 --batch-size 64 (fp32, sgd; torch 2.13)",
    )


def example_architecture() -> Architecture:
    """The example placement: PS/Worker with 8 workers of one GPU each and 2 PS shards."""
    return Architecture(kind="ps_worker", num_workers=8, gpus_per_worker=1, num_ps=2)


EXAMPLE_SERVER = "pai-v100-nvlink-8"
"""The example system: the PAI study's 8 x V100 NVLink server with 25 Gb/s Ethernet."""
