"""GPU description files, live detection and an occupancy calculator.

    >>> import hwmodels
    >>> gpu = hwmodels.load("h100-sxm")
    >>> gpu.arch, gpu.sm_count, gpu.smem_per_block_optin
    ('sm_90', 132, 232448)
    >>> hwmodels.blocks_per_sm(gpu, 256, 64, 48 * 1024).blocks_per_sm
    4

Memory sizes are in bytes throughout.
"""
from .detect import DetectReport, HwModelWarning, Mismatch, detect, detect_report
from .errors import DetectError, HwModelError, LaunchConfigError, ModelFieldError, UnknownGPUError
from .model import GPUModel
from .occupancy import Occupancy, blocks_per_sm
from .registry import available, from_file, load

__all__ = [
    "DetectError", "DetectReport", "GPUModel", "HwModelError", "HwModelWarning", "LaunchConfigError",
    "Mismatch", "ModelFieldError", "Occupancy", "UnknownGPUError", "available", "blocks_per_sm", "detect",
    "detect_report", "from_file", "load",
]
