"""The hwmodels GPUModel of a CUDA device, detected once per device index."""
from __future__ import annotations

import functools

import hwmodels


@functools.cache
def device_gpu(index: int) -> hwmodels.GPUModel:
    """The model of CUDA device `index` (hwmodels.detect, cached)."""
    return hwmodels.detect(index)


def current_gpu() -> hwmodels.GPUModel:
    """The model of torch's current CUDA device."""
    import torch

    return device_gpu(torch.cuda.current_device())
