"""Pure-PyTorch step loop over a CellSpec: the test oracle and the CPU path of `flashrnn`.

Tensors: Wx [B, T, G, NH, DH], R [G, NH, DH, DH] (gate, head, out, in), b [G, NH, DH], states [S, B, NH, DH].
Pre-activation of gate g at step t: Wx[:, t, g] + b[g] + R[g] @ h_{t-1} per head. Gradients come from autograd.

Precision: float32 and float64 inputs are computed in their own dtype (float64 is the oracle of the tests);
bfloat16 and float16 inputs are computed in float32 and the results rounded back, as the fused kernel keeps its
accumulators and states in float32.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..cells import CellSpec, get_cell


class HeadProducts:
    """R's per-step products, head by head, as batched matrix products (on a CPU an einsum of these shapes cost about
    ten times as much per step). R: [G, NH, DH, DH] (gate, head, out, in)."""

    def __init__(self, R: Tensor):
        self.gates, self.heads, self.dim = R.shape[:3]
        self.rows = R.permute(1, 3, 0, 2).reshape(self.heads, self.dim, -1)  # [NH, in, (gate, out)]
        self.columns = R.permute(1, 0, 2, 3).reshape(self.heads, -1, self.dim)  # [NH, (gate, out), in]

    def recurrent(self, h: Tensor) -> Tensor:
        """R @ h per gate and head: h [B, NH, DH] -> [B, G, NH, DH]."""
        batch = h.shape[0]
        product = torch.bmm(h.transpose(0, 1), self.rows)  # [NH, B, G * DH]
        return product.view(self.heads, batch, self.gates, self.dim).permute(1, 2, 0, 3)

    def transposed(self, d_pre: Tensor) -> Tensor:
        """R^T summed over gates: d_pre [B, G, NH, DH] -> [B, NH, DH]."""
        batch = d_pre.shape[0]
        rows = d_pre.permute(2, 0, 1, 3).reshape(self.heads, batch, self.gates * self.dim)
        return torch.bmm(rows, self.columns).transpose(0, 1)


def flashrnn_reference(
    Wx: Tensor, R: Tensor, b: Tensor, states: Tensor, cell: str | CellSpec = "lstm",
    saves: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """Run `cell` over the sequence; returns (h [B, T, NH, DH], last_states [S, B, NH, DH]) in Wx's dtype.

    `saves` (gates_save [B, T, G, NH, DH], states_save [S - 1, B, T + 1, NH, DH], or an empty one for a cell of one
    state) get each step's gate values and the states after h (index 0: the initial states), as the CUDA forward
    saves them for its backward. Inputs are assumed validated (see `flashrnn_kernels.flashrnn`): consistent shapes,
    one dtype and device.
    """
    spec = get_cell(cell)
    out_dtype = Wx.dtype
    compute = out_dtype if out_dtype in (torch.float32, torch.float64) else torch.float32
    Wx, R, b, states = (t.to(compute) for t in (Wx, R, b, states))
    current = {name: states[k] for k, name in enumerate(spec.states)}
    products = HeadProducts(R)
    gates_save, states_save = saves if saves is not None else (None, None)
    carried = spec.states[1:] if saves is not None else ()
    for k, name in enumerate(carried):
        states_save[k, :, 0] = current[name]
    outputs = []
    for t in range(Wx.shape[1]):
        pre = Wx[:, t] + b + products.recurrent(current[spec.states[0]])  # [B, G, NH, DH]
        current, gates = spec.torch_forward({g: pre[:, k] for k, g in enumerate(spec.gates)}, current)
        if gates_save is not None:
            for k, g in enumerate(spec.gates):
                gates_save[:, t, k] = gates[g]
        for k, name in enumerate(carried):
            states_save[k, :, t + 1] = current[name]
        outputs.append(current[spec.states[0]])
    h = torch.stack(outputs, dim=1)
    last = torch.stack([current[name] for name in spec.states], dim=0)
    return h.to(out_dtype), last.to(out_dtype)
