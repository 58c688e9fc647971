"""The per-stream look-back workspace: reused without zeroing between launches, epochs distinct per launch, zeroed
when it grows or the epoch counter wraps (CPU tensors stand in for device memory)."""
from __future__ import annotations

import torch

from flashrnn_kernels.scan.function import EPOCH_LIMIT, StreamWorkspace


def test_reuse_gives_a_new_epoch_and_keeps_the_buffers():
    ws = StreamWorkspace(torch.device("cpu"))
    maps, first = ws.take(100)
    maps[0].fill_((2 * first << 32) | 7)  # a map word and a final-state word the kernel published (tags 2e, 2e + 1)
    maps[1].fill_(((2 * first + 1) << 32) | 7)
    maps_again, second = ws.take(80)
    assert all(x is y for x, y in zip(maps, maps_again)) and second == first + 1
    assert len(maps) == 2 and all(m.numel() >= 100 for m in maps)
    tags = torch.cat(maps_again) >> 32
    assert ((tags != 2 * second) & (tags != 2 * second + 1)).all(), "an old word must not read as this launch's"


def test_growth_and_wrap_zero_the_words():
    ws = StreamWorkspace(torch.device("cpu"))
    maps, _ = ws.take(10)
    for words in maps:
        words.fill_(7)
    grown, epoch = ws.take(1000)
    assert all(m.numel() >= 1000 and not m.any() for m in grown) and epoch == 1
    for words in grown:
        words.fill_(5)
    ws.epoch = EPOCH_LIMIT - 1
    wrapped, epoch = ws.take(10)
    assert epoch == 1 and not any(m.any() for m in wrapped)


def test_both_word_arrays_start_16_byte_aligned():
    """The look-back reads word pairs with 16-byte loads from both arrays, whatever size an earlier launch asked for."""
    ws = StreamWorkspace(torch.device("cpu"))
    for words in (1, 3, 7, 33, 129, 4, 1001):
        maps, _ = ws.take(words)
        assert all(m.numel() >= words and m.data_ptr() % 16 == 0 for m in maps), words


def test_a_workspace_made_under_inference_mode_wraps_outside_it():
    """The words are normal tensors whatever the grad mode of the call that made them: zeroing them in place later,
    outside inference mode, is allowed."""
    with torch.inference_mode():
        ws = StreamWorkspace(torch.device("cpu"))
        ws.take(10)
    assert not ws.words.is_inference()
    ws.epoch = EPOCH_LIMIT - 1
    maps, epoch = ws.take(10)
    assert epoch == 1 and not any(m.any() for m in maps)
