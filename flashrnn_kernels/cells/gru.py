"""GRU in torch.nn.GRU's formulation (as cuDNN): the reset gate multiplies the recurrent term with its bias.

    r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)      z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn))    h' = (1 - z) * n + z * h

A gate's pre-activation is always Wx + b + R h, so n's two parts are two gates:
  "n"  = W_in x + b_in          (its recurrent block R[n] is zero),
  "hn" = W_hn h + b_hn          (its input projection Wx[..., hn, :, :] is zero).
Gate order (r, z, n, hn); torch's weight_ih rows (r, z, n) map to Wx gates r, z, n, weight_hh rows (r, z, n)
to R gates r, z, hn. The saved value of "hn" is the pre-activation itself, needed for dr.
"""
from __future__ import annotations

from .base import CellSpec

GRU = CellSpec(
    name="gru",
    gates=("r", "z", "n", "hn"),
    states=("h",),
    forward=(
        ("a_r", "sigmoid(x_r)"),
        ("a_z", "sigmoid(x_z)"),
        ("a_hn", "x_hn"),
        ("a_n", "tanh(x_n + a_r * x_hn)"),
        ("y_h", "(1 - a_z) * a_n + a_z * s_h"),
    ),
    backward=(
        ("dn", "dy_h * (1 - a_z) * (1 - a_n * a_n)"),
        ("dx_r", "dn * a_hn * a_r * (1 - a_r)"),
        ("dx_z", "dy_h * (s_h - a_n) * a_z * (1 - a_z)"),
        ("dx_n", "dn"),
        ("dx_hn", "dn * a_r"),
        ("ds_h", "dy_h * a_z"),
    ),
)
