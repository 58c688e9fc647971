"""torch.autocast and the recurrent ops: the dtype a call computes in, and kernels run with autocast off.

The ops follow torch's own recurrent layers under autocast: `flashrnn` and the modules compute in the autocast dtype
(as cuDNN's RNNs do), casting fp32 / fp16 / bf16 inputs and weights to it, with the kernels' fp32 accumulation
inside. The scan ops take the widest of their inputs' dtypes instead, so that decays made in fp32 keep their
precision (a decay of 0.999 is 1.0 in bf16). Inside the ops autocast is off: their matrix products keep the dtypes
the kernels were checked with, also when a backward runs under autocast.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import TypeVar

import torch

ELIGIBLE: tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16)
"""The dtypes autocast casts (float64 and integer tensors keep theirs)."""

_F = TypeVar("_F", bound=Callable)


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The dtype torch.autocast gives matrix products on `device`'s type, or None where autocast is off."""
    kind = device.type
    if kind not in ("cpu", "cuda") or not torch.is_autocast_enabled(kind):
        return None
    return torch.get_autocast_dtype(kind)


def mixes(device: torch.device, *dtypes: torch.dtype) -> bool:
    """True when autocast is on for `device` and casts every one of `dtypes`: tensors of these dtypes may meet."""
    return autocast_dtype(device) is not None and all(dtype in ELIGIBLE for dtype in dtypes)


def widest(dtypes: list[torch.dtype]) -> torch.dtype:
    """The dtype every one of `dtypes` promotes to (torch's promotion rules)."""
    return functools.reduce(torch.promote_types, dtypes)


def cast_eligible(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`tensor` in `dtype` where autocast would cast it (fp32, fp16, bf16), else unchanged."""
    return tensor.to(dtype) if tensor.dtype in ELIGIBLE else tensor


def autocast_off(fn: _F) -> _F:
    """`fn` run with autocast off on CPU and CUDA (a no-op where it is off already)."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        kinds = [kind for kind in ("cuda", "cpu") if torch.is_autocast_enabled(kind)]
        if not kinds:
            return fn(*args, **kwargs)
        with contextlib.ExitStack() as stack:
            for kind in kinds:
                stack.enter_context(torch.autocast(kind, enabled=False))
            return fn(*args, **kwargs)

    return run  # type: ignore[return-value]
