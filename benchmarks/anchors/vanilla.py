"""A plain PyTorch LSTM loop over time in the head-wise layout: one batched matmul plus pointwise ops per step."""

from __future__ import annotations

import torch


def lstm_loop(
    Wx: torch.Tensor, R: torch.Tensor, b: torch.Tensor, states: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """LSTM over ``Wx: [B, T, 4, NH, DH]`` with ``R: [4, NH, DH_out, DH_in]``, ``b: [4, NH, DH]``,
    ``states: [2, B, NH, DH]``.

    Gates in torch.nn.LSTM order (input, forget, cell candidate, output); all math in the inputs' dtype.
    Returns ``h: [B, T, NH, DH]`` and ``last_states: [2, B, NH, DH]`` (h, c).
    """
    batch, seq, gates, heads, dim = Wx.shape
    if gates != 4 or R.shape != (4, heads, dim, dim) or b.shape != (4, heads, dim) or states.shape != (
        2, batch, heads, dim
    ):
        raise ValueError(
            f"lstm_loop needs Wx [B,T,4,NH,DH], R [4,NH,DH,DH], b [4,NH,DH], states [2,B,NH,DH]; got "
            f"{tuple(Wx.shape)}, {tuple(R.shape)}, {tuple(b.shape)}, {tuple(states.shape)}"
        )
    # [NH, DH_in, 4 * DH_out]: one bmm per step gives every gate of every head.
    weights = R.permute(1, 3, 0, 2).reshape(heads, dim, 4 * dim)
    bias = b.unsqueeze(0)
    h, c = states[0], states[1]
    outputs = []
    for t in range(seq):
        recurrent = torch.bmm(h.transpose(0, 1), weights).view(heads, batch, 4, dim).permute(1, 2, 0, 3)
        gate_in, gate_forget, candidate, gate_out = (Wx[:, t] + recurrent + bias).unbind(1)
        c = torch.sigmoid(gate_forget) * c + torch.sigmoid(gate_in) * torch.tanh(candidate)
        h = torch.sigmoid(gate_out) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs, dim=1), torch.stack((h, c))
