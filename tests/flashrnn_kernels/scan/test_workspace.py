"""The look-back workspaces (CPU tensors stand in for device memory). Per stream: reused without zeroing between
launches, epochs distinct per launch, zeroed when it grows or the epoch counter wraps. For captured launches: spares
zeroed ahead by eager calls, one per capture and stream, a slot of launch counters per launch."""
from __future__ import annotations

import re
from pathlib import Path

import torch

from flashrnn_kernels.scan import function
from flashrnn_kernels.scan.function import (EPOCH_LIMIT, GRAPH_SLOTS, SPARE_WORDS, SPARES, GraphWorkspaces,
                                            StreamWorkspace)


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


def _graph_workspaces():
    return GraphWorkspaces(torch.device("cpu"))


def test_eager_calls_keep_zeroed_spares_with_their_counters():
    graphs = _graph_workspaces()
    graphs.keep(stream=0, words=99)
    assert len(graphs.spares) == SPARES and graphs.capacity == 100
    for spare in graphs.spares:
        assert spare.words.shape == (2, 100) and not spare.words.any()
        assert spare.counters.shape == (GRAPH_SLOTS, 32) and not spare.counters.any()
        assert all(t.data_ptr() % 16 == 0 for t in (*spare.words, spare.counters))
    before = list(graphs.spares)
    graphs.keep(stream=0, words=60)
    assert graphs.spares == before, "spares large enough are kept as they are"
    graphs.keep(stream=0, words=150)
    assert graphs.capacity == 200 and all(s.words.shape == (2, 200) for s in graphs.spares)


def test_a_capture_gives_its_launches_on_a_stream_one_workspace_and_a_slot_each():
    graphs = _graph_workspaces()
    graphs.keep(stream=0, words=100)
    first, slot = graphs.take(capture=7, stream=5, words=100)
    assert slot == 0 and len(graphs.spares) == SPARES - 1
    assert graphs.take(capture=7, stream=5, words=40) == (first, 1), "the capture's launches on one stream share it"
    other_stream, slot = graphs.take(capture=7, stream=6, words=40)
    assert other_stream is not first and slot == 0
    assert graphs.take(capture=8, stream=5, words=10) is None, "no spare left: the caller falls back to a memset"
    assert graphs.held == [first, other_stream]
    graphs.keep(stream=0, words=10)  # the next eager call makes new ones; the captures keep theirs
    assert len(graphs.spares) == SPARES and all(s is not first and s is not other_stream for s in graphs.spares)
    slots = [graphs.take(capture=7, stream=5, words=10) for _ in range(GRAPH_SLOTS - 2)]
    assert [s for _, s in slots] == list(range(2, GRAPH_SLOTS)) and all(w is first for w, _ in slots)
    assert graphs.take(capture=7, stream=5, words=10)[1] == 0, "a full workspace: the next launch takes a spare"


def test_the_kernel_and_the_launcher_agree_on_the_graph_epochs():
    source = (Path(function.__file__).parent / "carries.cuh").read_text()
    defines = dict(re.findall(r"#define (SCAN_GRAPH_\w+) (.+)", source))
    assert int(defines["SCAN_GRAPH_SLOTS"]) == GRAPH_SLOTS
    assert eval(defines["SCAN_GRAPH_CYCLE"].replace("u", "")) == function.GRAPH_CYCLE
    top_tag = 2 * ((function.GRAPH_CYCLE + 1) * GRAPH_SLOTS - 1) + 1
    assert top_tag < 2**32, "a final state's tag fits in 32 bits"


def test_no_spares_for_launches_too_large_for_them():
    graphs = _graph_workspaces()
    graphs.keep(stream=0, words=SPARE_WORDS + 2)
    assert graphs.spares == [] and graphs.take(capture=1, stream=0, words=SPARE_WORDS + 2) is None
    graphs.keep(stream=0, words=SPARE_WORDS)
    assert graphs.take(capture=1, stream=0, words=SPARE_WORDS + 2) is None
    assert graphs.take(capture=1, stream=0, words=SPARE_WORDS) is not None


def test_spares_made_under_inference_mode_are_normal_tensors():
    with torch.inference_mode():
        graphs = _graph_workspaces()
        graphs.keep(stream=0, words=10)
    spare, _ = graphs.take(capture=1, stream=0, words=10)
    assert not spare.words.is_inference() and not spare.counters.is_inference()
    spare.counters[0] = 5
