"""The per-stream look-back workspace: reused without zeroing between launches, epochs distinct per launch, zeroed
when it grows or the epoch counter wraps (CPU tensors stand in for device memory)."""
from __future__ import annotations

import torch

from flashrnn_kernels.scan.function import EPOCH_LIMIT, StreamWorkspace


def test_reuse_gives_a_new_epoch_and_keeps_the_buffers():
    ws = StreamWorkspace(torch.device("cpu"))
    flags, maps, first = ws.take(100, 50)
    flags[1:] = 4 * first + 2  # words the kernel left behind
    again, maps_again, second = ws.take(80, 40)
    assert again is flags and maps_again is maps and second == first + 1
    assert all(m.numel() >= 50 for m in maps) and flags.numel() >= 101
    assert ((again[1:] >> 2) != second).all(), "an old word must not read as this launch's"


def test_growth_and_wrap_zero_the_status_words():
    ws = StreamWorkspace(torch.device("cpu"))
    flags, _, _ = ws.take(10, 10)
    flags.fill_(7)
    grown, _, epoch = ws.take(1000, 10)
    assert grown.numel() >= 1001 and not grown.any() and epoch == 1
    grown.fill_(5)
    ws.epoch = EPOCH_LIMIT - 1
    wrapped, _, epoch = ws.take(10, 10)
    assert epoch == 1 and not wrapped.any()
