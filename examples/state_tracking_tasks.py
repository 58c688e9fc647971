"""The state-tracking tasks of examples/state_tracking.py: running parity of bits, running composition in S5.

Each task draws a batch of token sequences with a target at every step (the state after that prefix), pads
sequences shorter than the batch's longest with a token that leaves the state unchanged, and says how training
sequences are drawn and at which sizes the example runs (its full and its quick settings).
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

Batch = tuple[Tensor, Tensor, Tensor]
"""tokens [B, T] (long), targets [B, T] (long; the state after each prefix), lengths [B] (long, each in [1, T])."""


def _lengths(batch: int, max_length: int, generator: torch.Generator, fixed: bool) -> Tensor:
    if fixed:
        return torch.full((batch,), max_length)
    return torch.randint(1, max_length + 1, (batch,), generator=generator)


def parity_batch(batch: int, max_length: int, generator: torch.Generator, fixed: bool = False) -> Batch:
    """bits in {0, 1}, their running parity, and lengths (each max_length when `fixed`); 0 bits pad."""
    bits = torch.randint(0, 2, (batch, max_length), generator=generator)
    lengths = _lengths(batch, max_length, generator, fixed)
    bits = bits * (torch.arange(max_length) < lengths[:, None])  # zero padding past each end
    return bits, bits.cumsum(1) % 2, lengths


@functools.cache
def permutations() -> tuple[tuple[int, ...], ...]:
    """The 120 permutations of (0, 1, 2, 3, 4) in lexicographic order: token k is permutations()[k], token 0 the
    identity. A permutation p maps i to p[i]."""
    return tuple(itertools.permutations(range(5)))


@functools.cache
def composition_table() -> Tensor:
    """[120, 120] long: table[a, b] is the token of a after b, the permutation i -> a[b[i]]."""
    index = {p: k for k, p in enumerate(permutations())}
    return torch.tensor([[index[tuple(a[i] for i in b)] for b in permutations()] for a in permutations()])


def s5_batch(batch: int, max_length: int, generator: torch.Generator, fixed: bool = False) -> Batch:
    """Permutation tokens in [0, 120), their running composition (the newest permutation applied last:
    state_t = token_t after state_{t-1}, state_0 = token_0), and lengths; identity tokens pad."""
    tokens = torch.randint(0, len(permutations()), (batch, max_length), generator=generator)
    lengths = _lengths(batch, max_length, generator, fixed)
    tokens = tokens * (torch.arange(max_length) < lengths[:, None])  # token 0 (identity) past each end
    table = composition_table()
    states = [tokens[:, 0]]
    for step in range(1, max_length):
        states.append(table[tokens[:, step], states[-1]])
    return tokens, torch.stack(states, dim=1), lengths


@dataclass(frozen=True)
class Settings:
    """Sizes of one run: `steps` training batches of `batch` sequences of lengths up to `train_length`,
    evaluated on `samples` sequences of each of `eval_lengths`; every model `hidden_size` wide, the FlashSLSTM
    with `slstm_heads` heads; learning rates (FlashLSTM, FlashSLSTM, Transformer)."""

    steps: int
    batch: int
    train_length: int
    eval_lengths: tuple[int, ...]
    hidden_size: int
    samples: int
    slstm_heads: int
    learning_rates: tuple[float, float, float]


@dataclass(frozen=True)
class Task:
    """A state-tracking task: `tokens` input symbols, `classes` states, `draw` makes a Batch.

    `varied_lengths`: training batches mix lengths 1..train_length (padding, `lengths=`), else every sequence of
    a batch has length train_length (each of its prefixes is still a training example). `state` names what is
    tracked ("parity"), `title` the task in headings; `stem` starts the output file names.
    """

    name: str
    title: str
    state: str
    tokens: int
    classes: int
    draw: Callable[[int, int, torch.Generator, bool], Batch]
    varied_lengths: bool
    stem: str
    full: Settings
    quick: Settings

    @property
    def chance(self) -> float:
        """Accuracy of a uniform guess."""
        return 1.0 / self.classes


# Parity keeps the unprefixed file names of its committed results (benchmarks/results/state_tracking*). S5 batches
# have one length, so each layer is one fused-kernel call per step. S5's full settings are for a GPU. Measured on a
# CPU (width 256, batches of 256, lr 3e-3 with a cosine decay over 5,000 steps): the models learn the composition
# one prefix position after another; the FlashLSTM gets the 2nd position right after ~700 steps, the 3rd 88% and
# the 16th 13% right after 2,800, and 91% and 30% after 3,700 (at width 128 it learns about half as fast per step;
# the FlashSLSTM with 4 heads gets the 3rd position 38% right after 1,300 steps, where the FlashLSTM had 70%).
# Hence width 256 and, where a step costs milliseconds, batches of 1,024 and 20,000 steps. The quick settings
# only exercise the code: nothing past the first position is learned in them.
TASKS: dict[str, Task] = {
    "parity": Task(
        name="parity", title="running parity of a bit stream", state="parity", tokens=2, classes=2,
        draw=parity_batch, varied_lengths=True, stem="state_tracking",
        full=Settings(steps=3000, batch=32, train_length=10, eval_lengths=(5, 10, 20, 40, 80, 160, 320),
                      hidden_size=32, samples=256, slstm_heads=4, learning_rates=(1e-2, 1e-2, 1e-3)),
        quick=Settings(steps=300, batch=32, train_length=10, eval_lengths=(5, 10, 20, 40, 80),
                       hidden_size=32, samples=256, slstm_heads=4, learning_rates=(1e-2, 1e-2, 1e-3)),
    ),
    "s5": Task(
        name="s5", title="running composition of permutations of 5 elements (S5)", state="composition",
        tokens=120, classes=120, draw=s5_batch, varied_lengths=False, stem="state_tracking_s5",
        full=Settings(steps=20000, batch=1024, train_length=16, eval_lengths=(8, 16, 32, 64, 128, 256, 512),
                      hidden_size=256, samples=512, slstm_heads=4, learning_rates=(3e-3, 3e-3, 5e-4)),
        quick=Settings(steps=1500, batch=64, train_length=6, eval_lengths=(3, 6, 12, 24, 48),
                       hidden_size=64, samples=256, slstm_heads=4, learning_rates=(1e-2, 1e-2, 1e-3)),
    ),
}
