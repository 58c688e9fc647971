"""sLSTM (xLSTM): exponential input gate, normaliser state n and log-space stabiliser m; gates i, f, z, o.

Unstabilised:  i = exp(x_i), f = sigmoid(x_f), c' = f c + i tanh(x_z), n' = f n + i, h' = sigmoid(x_o) c' / n'.
Stabilised (what runs), with m' = max(x_i, log f + m):
    i~ = exp(x_i - m'),  f~ = exp(log f + m - m'),  c' = f~ c + i~ tanh(x_z),  n' = f~ n + i~,  h' = o c' / n'
so c' and n' are the unstabilised values times exp(-m'); h' is the same. Starting from n = 0 (m = 0) the first
step gives n' > 0 whatever m' is, so no special first step is needed. The saved values are the raw input and
forget pre-activations (their gate values are recomputed from m, m') and the z and o activations. The backward
is the exact gradient of these formulas, including the path through the maximum.
"""
from __future__ import annotations

from .base import CellSpec

SLSTM = CellSpec(
    name="slstm",
    gates=("i", "f", "z", "o"),
    states=("h", "c", "n", "m"),
    forward=(
        ("a_i", "x_i"),
        ("a_f", "x_f"),
        ("a_z", "tanh(x_z)"),
        ("a_o", "sigmoid(x_o)"),
        ("log_f_plus_m", "logsigmoid(x_f) + s_m"),
        ("y_m", "maximum(x_i, log_f_plus_m)"),
        ("i_gate", "exp(x_i - y_m)"),
        ("f_gate", "exp(log_f_plus_m - y_m)"),
        ("y_c", "f_gate * s_c + i_gate * a_z"),
        ("y_n", "f_gate * s_n + i_gate"),
        ("y_h", "a_o * y_c / y_n"),
    ),
    backward=(
        ("log_f_plus_m", "logsigmoid(a_f) + s_m"),
        ("i_gate", "exp(a_i - y_m)"),
        ("f_gate", "exp(log_f_plus_m - y_m)"),
        ("dc", "dy_c + dy_h * a_o / y_n"),
        ("dn", "dy_n - dy_h * a_o * y_c / (y_n * y_n)"),
        ("d_i_gate", "dc * a_z + dn"),
        ("d_f_gate", "dc * s_c + dn * s_n"),
        ("dm", "dy_m - d_i_gate * i_gate - d_f_gate * f_gate"),
        ("i_is_max", "heaviside(a_i - log_f_plus_m)"),
        ("dx_i", "d_i_gate * i_gate + dm * i_is_max"),
        ("d_log_f_plus_m", "d_f_gate * f_gate + dm * (1 - i_is_max)"),
        ("dx_f", "d_log_f_plus_m * (1 - sigmoid(a_f))"),
        ("dx_z", "dc * i_gate * (1 - a_z * a_z)"),
        ("dx_o", "dy_h * y_c / y_n * a_o * (1 - a_o)"),
        ("ds_h", "0"),
        ("ds_c", "dc * f_gate"),
        ("ds_n", "dn * f_gate"),
        ("ds_m", "d_log_f_plus_m"),
    ),
)
