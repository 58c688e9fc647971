"""Pure-PyTorch references for the scan kernels: the sequential step loop (the oracle), the log-space parallel form
of minGRU / minLSTM (cumsum + logcumsumexp, as in "Were RNNs All We Needed?"), and the kernels' chunk-carry
decomposition (the CPU path). All tensors are [B, T, D]; h0 is [B, D] or None (zeros).
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


GATES = {
    "linear": lambda a, b: (a, b),
    "min_gru": min_gru_gates,
    "min_lstm": min_lstm_gates,
}
"""Each scan cell's (a, b) from its inputs."""


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


def chunk_length(seq_len: int) -> int:
    """The chunk length that makes linear_scan_chunked's steps (two passes of a chunk, one of the chunks) fewest,
    about sqrt(T / 2); a divisor of T within a factor 2 of it where there is one (at most 1.25x the steps), which
    leaves no ragged end to step through."""
    best = max(1, round((seq_len / 2) ** 0.5))
    divisors = [n for n in range(max(1, best // 2), 2 * best + 1) if seq_len % n == 0]
    return min(divisors, key=lambda n: 2 * n + seq_len // n) if divisors else best


def linear_scan_chunked(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None = None,
                        chunk_len: int | None = None, reverse: bool = False) -> torch.Tensor:
    """h_t = a_t * h_{t-1} + b_t (reverse: a_t * h_{t+1} + b_t, from the last step back, h0 the state after it) in
    the kernels' three passes, each a step at a time over every whole chunk at once: the chunks' maps h -> A h + B,
    their carries (a scan of the maps over the chunks), then every chunk rescanned from its carry; the steps past the
    last whole chunk one at a time. About 2 chunk_len + T / chunk_len steps instead of T (chunk_len: chunk_length(T)
    when None, and every step one at a time where that makes no more calls); the same dtypes as linear_scan_loop,
    and the same values to rounding (a chunk's steps are the loop's own). Differentiable (the GPU tests' float64
    reference); the CPU ops run it forward and in reverse."""
    dtype = b.dtype
    a, b, h0 = accumulating(a, b, h0)
    B, T, D = b.shape
    h = torch.empty_like(b)
    state = b.new_zeros(B, D) if h0 is None else h0
    L = chunk_len or chunk_length(max(T, 1))
    C = T // L
    if chunk_len is None and 2 * L + 2 * C + 4 >= T:  # no fewer calls than the loop's (pass 2 makes two per chunk)
        C = 0
    whole = slice(T - C * L, T) if reverse else slice(0, C * L)  # the chunks; the ragged end runs after them
    ragged = range(T - C * L - 1, -1, -1) if reverse else range(C * L, T)
    if C:
        ac, bc, hc = (t[:, whole].view(B, C, L, D) for t in (a, b, h))
        steps = range(L - 1, -1, -1) if reverse else range(L)
        first, *rest = steps
        fold_a, fold_b = ac[:, :, first], bc[:, :, first]
        for i in rest:
            fold_a, fold_b = fold_a * ac[:, :, i], torch.addcmul(bc[:, :, i], ac[:, :, i], fold_b)
        carries = b.new_empty(B, C, D)
        overflowed = bool(fold_a.isinf().any())  # decays above 1 can overflow a chunk's A where the loop's do not
        for c in range(C - 1, -1, -1) if reverse else range(C):
            carries[:, c] = state
            scale = fold_a[:, c]
            if overflowed:  # a zero state stays out of an overflowed product (inf * 0), its gradient as it is
                scale = torch.where(scale.isinf() & (state == 0), 0.0, scale)
            state = torch.addcmul(fold_b[:, c], scale, state)
        state = carries
        for i in steps:
            state = _step(bc[:, :, i], ac[:, :, i], state, hc[:, :, i])
        state = state[:, 0 if reverse else C - 1]  # the last chunk's own last state
    for t in ragged:
        state = _step(b[:, t], a[:, t], state, h[:, t])
    return h.to(dtype)


def _step(b_t: torch.Tensor, a_t: torch.Tensor, state: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """a_t * state + b_t, written into `out` and returned: in place where autograd does not record it."""
    if torch.is_grad_enabled() and (a_t.requires_grad or b_t.requires_grad or state.requires_grad):
        out[...] = state = torch.addcmul(b_t, a_t, state)
        return state
    return torch.addcmul(b_t, a_t, state, out=out)


def cell_scan(cell: str, inputs: list[torch.Tensor], h0: torch.Tensor | None = None) -> torch.Tensor:
    """The CPU path of the scan ops: the cell's gates (GATES), then linear_scan_chunked (gates and state in fp32 for
    bf16 / fp16 inputs, h returned in the inputs' dtype)."""
    return linear_scan_chunked(*GATES[cell](*accumulating(*inputs)), h0).to(inputs[0].dtype)
