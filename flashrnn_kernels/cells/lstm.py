"""LSTM in torch.nn.LSTM's formulation: gates i, f, z (torch's "g"), o; states h, c.

    i = sigmoid(x_i)   f = sigmoid(x_f)   z = tanh(x_z)   o = sigmoid(x_o)
    c' = f * c + i * z
    h' = o * tanh(c')

The saved gate values are the activations; the backward recomputes tanh(c') from the new cell state.
"""
from __future__ import annotations

from .base import CellSpec

LSTM = CellSpec(
    name="lstm",
    gates=("i", "f", "z", "o"),
    states=("h", "c"),
    forward=(
        ("a_i", "sigmoid(x_i)"),
        ("a_f", "sigmoid(x_f)"),
        ("a_z", "tanh(x_z)"),
        ("a_o", "sigmoid(x_o)"),
        ("y_c", "a_f * s_c + a_i * a_z"),
        ("y_h", "a_o * tanh(y_c)"),
    ),
    backward=(
        ("tanh_c", "tanh(y_c)"),
        ("dc", "dy_c + dy_h * a_o * (1 - tanh_c * tanh_c)"),
        ("dx_i", "dc * a_z * a_i * (1 - a_i)"),
        ("dx_f", "dc * s_c * a_f * (1 - a_f)"),
        ("dx_z", "dc * a_i * (1 - a_z * a_z)"),
        ("dx_o", "dy_h * tanh_c * a_o * (1 - a_o)"),
        ("ds_h", "0"),
        ("ds_c", "dc * a_f"),
    ),
)
