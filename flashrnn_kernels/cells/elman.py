"""Elman RNN with tanh, as torch.nn.RNN(nonlinearity="tanh"): h' = tanh(W_ih x + b_ih + W_hh h + b_hh).

One gate "z" (the pre-activation); one state h.
"""
from __future__ import annotations

from .base import CellSpec

ELMAN = CellSpec(
    name="elman",
    gates=("z",),
    states=("h",),
    forward=(
        ("a_z", "tanh(x_z)"),
        ("y_h", "a_z"),
    ),
    backward=(
        ("dx_z", "dy_h * (1 - a_z * a_z)"),
        ("ds_h", "0"),
    ),
)
