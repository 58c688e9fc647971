"""Pure-PyTorch references for the scan kernels: the sequential step loop (the oracle and the CPU path), the
log-space parallel form of minGRU / minLSTM (cumsum + logcumsumexp, as in "Were RNNs All We Needed?"), and the
chunk-carry decomposition the kernel uses. All tensors are [B, T, D]; h0 is [B, D] or None (zeros).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def g(x: torch.Tensor) -> torch.Tensor:
    """The paper's candidate activation: x + 1/2 for x >= 0, sigmoid(x) below (positive, continuous)."""
    return torch.where(x >= 0, x + 0.5, torch.sigmoid(x))


def log_g(x: torch.Tensor) -> torch.Tensor:
    """log(g(x)), computed without forming g for x < 0."""
    return torch.where(x >= 0, torch.log(F.relu(x) + 0.5), -F.softplus(-x))


def min_gru_gates(k: torch.Tensor, h_pre: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """minGRU's (a, b): z = sigmoid(k), a = 1 - z, b = z * g(h_pre)."""
    z = torch.sigmoid(k)
    return torch.sigmoid(-k), z * g(h_pre)


def min_lstm_gates(f: torch.Tensor, i: torch.Tensor, h_pre: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """minLSTM's (a, b) with normalised gates: a = f' = f/(f+i), b = i' * g(h_pre), f, i = sigmoid of inputs."""
    fs, is_ = torch.sigmoid(f), torch.sigmoid(i)
    total = fs + is_
    return fs / total, is_ / total * g(h_pre)


def accumulating(*tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    """The tensors in the dtype the loops compute in: fp32 for bf16 / fp16 (as the kernels accumulate; a half-precision
    running state stops growing once its increments fall below half an ulp), else their own."""
    return [t.float() if t is not None and t.dtype in (torch.bfloat16, torch.float16) else t for t in tensors]


def linear_scan_loop(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
    """h_t = a_t * h_{t-1} + b_t, one step at a time (the oracle): in fp32 for bf16 / fp16 inputs, each h_t returned
    in the inputs' dtype."""
    dtype = b.dtype
    a, b, h0 = accumulating(a, b, h0)
    h = b.new_zeros(b.shape[0], b.shape[2]) if h0 is None else h0
    out = []
    for t in range(a.shape[1]):
        h = a[:, t] * h + b[:, t]
        out.append(h)
    return (torch.stack(out, dim=1) if out else torch.empty_like(b)).to(dtype)


def min_gru_loop(k: torch.Tensor, h_pre: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
    """minGRU by the step loop (gates and state in fp32 for bf16 / fp16 inputs; returned in the inputs' dtype)."""
    return linear_scan_loop(*min_gru_gates(*accumulating(k, h_pre)), h0).to(k.dtype)


def min_lstm_loop(f: torch.Tensor, i: torch.Tensor, h_pre: torch.Tensor,
                  h0: torch.Tensor | None = None) -> torch.Tensor:
    """minLSTM by the step loop (gates and state in fp32 for bf16 / fp16 inputs; returned in the inputs' dtype)."""
    return linear_scan_loop(*min_lstm_gates(*accumulating(f, i, h_pre)), h0).to(f.dtype)


def log_space_scan(log_a: torch.Tensor, log_b: torch.Tensor, log_h0: torch.Tensor | None = None) -> torch.Tensor:
    """exp of log h_t for h_t = a_t h_{t-1} + b_t with positive a, b (and h0): h = e^{A*} sum e^{log b - A*}."""
    if log_h0 is not None:
        log_a = F.pad(log_a, (0, 0, 1, 0))
        log_b = torch.cat([log_h0.unsqueeze(1), log_b], dim=1)
    a_star = torch.cumsum(log_a, dim=1)
    log_h = a_star + torch.logcumsumexp(log_b - a_star, dim=1)
    return torch.exp(log_h[:, 1:] if log_h0 is not None else log_h)


def _log_h0(h0: torch.Tensor | None) -> torch.Tensor | None:
    if h0 is None:
        return None
    if not bool((h0 > 0).all()):
        raise ValueError("the log-space form needs a positive h0 (as g() produces); use the loop for any h0")
    return torch.log(h0)


def min_gru_log_space(k: torch.Tensor, h_pre: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
    """minGRU by the log-space parallel scan: log a = -softplus(k), log b = -softplus(-k) + log g(h_pre)."""
    return log_space_scan(-F.softplus(k), -F.softplus(-k) + log_g(h_pre), _log_h0(h0))


def min_lstm_log_space(f: torch.Tensor, i: torch.Tensor, h_pre: torch.Tensor,
                       h0: torch.Tensor | None = None) -> torch.Tensor:
    """minLSTM by the log-space parallel scan: with d = softplus(-f) - softplus(-i), log f' = -softplus(d) and
    log i' = -softplus(-d)."""
    diff = F.softplus(-f) - F.softplus(-i)
    return log_space_scan(-F.softplus(diff), -F.softplus(-diff) + log_g(h_pre), _log_h0(h0))


def chunk_local(a: torch.Tensor, b: torch.Tensor, chunk_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunk-local pass: T padded (a = 1, b = 0) to whole chunks, every chunk scanned from zero at once.

    Returns (prod, local), both [B, chunks, chunk_len, D]: prod = running product of a inside the chunk, local =
    the chunk's states started from zero; a chunk's map is h -> prod[:, c, -1] h + local[:, c, -1].
    """
    B, T, D = a.shape
    chunks = -(-T // chunk_len)
    pad = chunks * chunk_len - T
    a = torch.cat([a, a.new_ones(B, pad, D)], 1).reshape(B, chunks, chunk_len, D)
    b = torch.cat([b, b.new_zeros(B, pad, D)], 1).reshape(B, chunks, chunk_len, D)
    return torch.cumprod(a, dim=2), linear_scan_loop(a.flatten(0, 1), b.flatten(0, 1)).reshape(a.shape)


def linear_scan_chunked(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None, chunk_len: int) -> torch.Tensor:
    """The kernel's decomposition: chunk-local scans, the carry pass over chunks (itself a linear scan of the
    chunk maps), then each chunk's states shifted by its carry-in. chunk_len + T / chunk_len sequential steps."""
    T = a.shape[1]
    if T == 0:
        return torch.empty_like(b)
    prod, local = chunk_local(a, b, chunk_len)
    carries = linear_scan_loop(prod[:, :, -1], local[:, :, -1], h0)
    first = torch.zeros_like(b[:, :1]) if h0 is None else h0.unsqueeze(1)
    carry_in = torch.cat([first, carries[:, :-1]], dim=1)
    h = local + prod * carry_in.unsqueeze(2)
    return h.flatten(1, 2)[:, :T]
