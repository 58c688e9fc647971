"""Exceptions raised by hwmodels."""
from __future__ import annotations


class HwModelError(ValueError):
    """A GPU description is missing, unknown or invalid."""


class ModelFieldError(HwModelError):
    """One field of a GPU description is wrong; names the file (where known) and the key."""

    def __init__(self, key: str, reason: str, file: str | None = None) -> None:
        self.key = key
        self.reason = reason
        self.file = file
        where = f"{file}: " if file else ""
        super().__init__(f"{where}key '{key}': {reason}")


class UnknownGPUError(HwModelError, LookupError):
    """No shipped or user file matches a GPU name."""


class DetectError(HwModelError):
    """The live GPU cannot be read (no CuPy, no device, or no usable description)."""


class LaunchConfigError(ValueError):
    """A launch configuration can never be resident on the GPU; the message says what would fit."""
