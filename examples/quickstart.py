"""Quickstart: a FlashLSTM copied from torch.nn.LSTM gives the same outputs and gradients; heads via flashrnn().

Runs the fused CUDA kernel when a GPU is present, the pure-PyTorch reference otherwise (small sizes: seconds
on a CPU). Results are checked against a float64 torch.nn.LSTM on the CPU.

    python examples/quickstart.py
"""
from __future__ import annotations

import copy
import time

import torch
from torch import nn

from flashrnn_kernels import FlashLSTM, flashrnn


def _max_error(value: torch.Tensor, expected: torch.Tensor) -> float:
    return (value.detach().double().cpu() - expected.detach()).abs().max().item()


def main(
    batch: int = 4, steps: int = 64, input_size: int = 32, hidden_size: int = 64, num_heads: int = 4,
    device: str | None = None,
) -> dict[str, float | str]:
    """Compare FlashLSTM with nn.LSTM, then run a multi-head LSTM with flashrnn(); returns the measurements."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    backend = "fused" if device.type == "cuda" else "reference"
    torch.manual_seed(0)

    lstm = nn.LSTM(input_size, hidden_size, batch_first=True, device=device)
    model = FlashLSTM.from_torch(lstm, backend=backend)
    oracle = copy.deepcopy(lstm).double().cpu()  # float64 ground truth

    x = torch.randn(batch, steps, input_size, device=device, requires_grad=True)
    start = time.perf_counter()
    output, (h_n, c_n) = model(x)
    output.square().sum().backward()
    seconds = time.perf_counter() - start

    x64 = x.detach().double().cpu().requires_grad_()
    expected, (h_ref, c_ref) = oracle(x64)
    expected.square().sum().backward()
    results: dict[str, float | str] = {
        "device": str(device),
        "backend": backend,
        "output_error": _max_error(output, expected),
        "h_n_error": _max_error(h_n, h_ref),
        "c_n_error": _max_error(c_n, c_ref),
        "grad_x_error": _max_error(x.grad, x64.grad),
        "grad_R_error": _max_error(model.R.grad.view(4 * hidden_size, hidden_size), oracle.weight_hh_l0.grad),
        "forward_backward_seconds": seconds,
    }

    # The op itself: NH heads of DH units, each with its own recurrent matrix per gate.
    head_dim = hidden_size // num_heads
    Wx = torch.randn(batch, steps, 4, num_heads, head_dim, device=device)
    R = torch.randn(4, num_heads, head_dim, head_dim, device=device) / head_dim**0.5
    b = torch.zeros(4, num_heads, head_dim, device=device)
    h, last_states = flashrnn(Wx, R, b, backend=backend)
    results["heads_h_shape"] = str(tuple(h.shape))
    results["heads_states_shape"] = str(tuple(last_states.shape))

    print(f"FlashLSTM vs nn.LSTM on {device} ({backend} backend), B={batch} T={steps} H={hidden_size}:")
    for key in ("output_error", "h_n_error", "c_n_error", "grad_x_error", "grad_R_error"):
        print(f"  max |{key.removesuffix('_error')} - float64 nn.LSTM| = {results[key]:.2e}")
    print(f"  first forward + backward took {seconds * 1e3:.1f} ms (on a GPU this includes planning and compiling)")
    print(f"flashrnn with {num_heads} heads of {head_dim}: h {tuple(h.shape)}, last states {tuple(last_states.shape)}")
    return results


if __name__ == "__main__":
    main()
