"""The kernels as torch.library custom ops: one opaque graph node each under torch.compile, with autograd.

Ops in the `flashrnn_kernels` namespace (cells are passed by name: a schema cannot carry a CellSpec):
  flashrnn_forward(Wx, R, b, states, cell, training, backend) -> (h, last, gates_save, states_save)
  flashrnn_backward(Wx?, R, b, states, h, gates_save, states_save, d_h, d_last, cell, backend)
      -> (dWx, dR, db, dstates)
  scan_forward(cell, inputs, h0?, paired) -> h   (paired: a backward follows; it picks the CUDA plan alone)
  scan_backward(cell, inputs, h0?, dh, h, needs) -> [d input..., dh0 (when h0 is given)], those that `needs` asks for
CUDA runs the kernels (fused/function.py, or alternating/function.py for backend "alternating"; scan/function.py).
Both CUDA backends save the same fp32 values (gate values, non-h states) between the two ops, and so does the CPU
forward (in float64 for float64 inputs). CPU runs the pure-PyTorch references (fused/reference.py, scan/reference.py)
forward; their backward ops are written out here (the cell's pointwise backward in reverse, the reverse linear scan),
as autograd does not run inside an op's implementation. Each op has a fake implementation (shapes and dtypes only)
and its autograd is registered with `register_autograd`.

`flashrnn_op` and `scan_op` are the entry points; inputs are assumed checked by the callers (`flashrnn`,
`flashrnn_fused`, the scan API).
"""

import torch
from torch import Tensor

from .autocast import autocast_off
from .cells import CELLS
from .fused.reference import HeadProducts, flashrnn_reference
from .scan import reference as scan_reference
from .scan.function import run_scan

SCAN_LOOPS = {
    "linear": scan_reference.linear_scan_loop,
    "min_gru": scan_reference.min_gru_loop,
    "min_lstm": scan_reference.min_lstm_loop,
}
"""Scan cells by name, with their reference loops (the oracles; the CPU ops run scan_reference.cell_scan)."""


def _fused_saves(Wx: Tensor, states: Tensor, training: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shapes of (gates_save, states_save): filled by the forward when training (the CUDA kernels, or on CPU the
    reference), else empty ((0,))."""
    B, T, G, NH, DH = Wx.shape
    S = states.shape[0]
    if not training:
        return (0,), (0,)
    return (B, T, G, NH, DH), ((S - 1, B, T + 1, NH, DH) if S > 1 else (0,))


def _save_dtype(Wx: Tensor) -> torch.dtype:
    """The saves' dtype: the compute dtype, float32 (float64 for float64 inputs, which only the CPU reference runs)."""
    return torch.float64 if Wx.dtype == torch.float64 else torch.float32


def _missing_saves() -> ValueError:
    return ValueError("flashrnn_kernels::flashrnn_backward got no saved gate values: the forward ran with "
                      "training=False; run it with training=True to differentiate")


def _cell(name: str) -> str:
    if name not in CELLS:
        raise ValueError(f"unknown cell {name!r} for flashrnn_kernels::flashrnn_*; registered cells: {sorted(CELLS)}")
    return name


def _dense(*tensors: Tensor) -> tuple[Tensor, ...]:
    """The kernels index with fixed strides: compiled graphs keep eager's strides for custom ops by default
    (torch._functorch.config.custom_op_default_layout_constraint), and this holds where that setting is changed."""
    return tuple(t.contiguous() for t in tensors)


def _contiguous(t: Tensor) -> Tensor:
    return t.clone(memory_format=torch.contiguous_format)


def _reference_backward(R: Tensor, states: Tensor, h: Tensor, gates_save: Tensor, states_save: Tensor,
                        d_h: Tensor, d_last: Tensor, cell: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of flashrnn_reference's (h, last) w.r.t. (Wx, R, b, states) from the forward's saves, by the
    cell's pointwise backward (CellSpec.torch_backward) run in reverse over the steps, as the CUDA backward does; no
    autograd, which does not run inside an op's implementation. Computes in the saves' dtype."""
    spec = CELLS[cell]
    out_dtype, compute = h.dtype, gates_save.dtype
    R, states, h, d_h, d_last = (t.to(compute) for t in (R, states, h, d_h, d_last))
    first, carried = spec.states[0], spec.states[1:]
    T = h.shape[1]
    h_prev = torch.cat([states[0].unsqueeze(1), h[:, :-1]], dim=1)  # [B, T, NH, DH]

    def states_at(t: int) -> dict[str, Tensor]:  # before step t; t = T: the last
        found = {first: h_prev[:, t] if t < T else h[:, -1]}
        found.update({name: states_save[k, :, t] for k, name in enumerate(carried)})
        return found

    products = HeadProducts(R)
    d_state = {name: d_last[k] for k, name in enumerate(spec.states)}
    d_wx = torch.empty_like(gates_save)
    for t in reversed(range(T)):
        d_state[first] = d_state[first] + d_h[:, t]
        gates = {g: gates_save[:, t, k] for k, g in enumerate(spec.gates)}
        d_pre, d_previous = spec.torch_backward(gates, states_at(t), states_at(t + 1), d_state)
        for k, g in enumerate(spec.gates):
            d_wx[:, t, k] = d_pre[g]
        d_previous[first] = d_previous[first] + products.transposed(d_wx[:, t])
        d_state = d_previous
    d_r = torch.einsum("btgno,btni->gnoi", d_wx, h_prev)
    d_states = torch.stack([torch.broadcast_to(d_state[name], states[0].shape) for name in spec.states])
    grads = (d_wx, d_r, d_wx.sum(dim=(0, 1)), d_states)
    return tuple(_contiguous(g.to(out_dtype)) for g in grads)


HIGHER_ORDER = {"flashrnn": "flashrnn_kernels.fused.reference.flashrnn_reference",
                "linear_scan / min_gru / min_lstm": "the loops of flashrnn_kernels.scan.reference"}
"""What gives gradients of gradients where the ops do not: the pure-PyTorch references."""


def first_order_message(ops: str) -> str:
    return (f"gradients of the gradients of {ops} (a backward through a create_graph=True backward) are not "
            f"implemented: the backward ops are first order; for higher orders use {HIGHER_ORDER[ops]}")


def _first_order_only(ops: str):
    """The autograd of a backward op: raises once a second backward reaches it. Grad mode is on inside a backward
    only with create_graph=True; the eager autograd.Functions then call the backward through its op, so that the
    gradients they return carry this node instead of silently having no derivative."""

    def backward(ctx, *grads):
        raise RuntimeError(first_order_message(ops))

    return backward


# ---- flashrnn: the recurrent cells -------------------------------------------------------------------------

CUDA_BACKENDS = ("fused", "alternating")


def _backend(name: str) -> str:
    if name not in CUDA_BACKENDS:
        raise ValueError(f"flashrnn_kernels::flashrnn_* backend must be one of {CUDA_BACKENDS}, got {name!r}")
    return name


def _cuda_functions(backend: str):
    """(forward, backward) of a CUDA backend, with one signature each; imported when a kernel runs (CuPy, and the
    fused kernel plans with the solver)."""
    if _backend(backend) == "alternating":
        from .alternating.function import alternating_backward, alternating_forward

        return alternating_forward, alternating_backward
    from .fused.function import fused_backward, fused_forward

    return fused_forward, fused_backward


@torch.library.custom_op("flashrnn_kernels::flashrnn_forward", mutates_args=(), device_types="cpu")
def flashrnn_forward(Wx: Tensor, R: Tensor, b: Tensor, states: Tensor, cell: str, training: bool,
                     backend: str = "fused") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Wx [B, T, G, NH, DH], R [G, NH, DH, DH], b [G, NH, DH], states [S, B, NH, DH] -> (h [B, T, NH, DH],
    last [S, B, NH, DH], gates_save, states_save); the saves are the values the backward reads (the gate values and
    the states after h, in _save_dtype; empty when not `training`). `backend`: the CUDA implementation, "fused" or
    "alternating" (CPU: the reference either way)."""
    _backend(backend)
    gates_shape, states_shape = _fused_saves(Wx, states, training)
    saves = Wx.new_empty(gates_shape, dtype=_save_dtype(Wx)), Wx.new_empty(states_shape, dtype=_save_dtype(Wx))
    h, last = flashrnn_reference(Wx, R, b, states, _cell(cell), saves if training else None)
    return h, last, *saves


@flashrnn_forward.register_kernel("cuda")
def _flashrnn_forward_cuda(Wx: Tensor, R: Tensor, b: Tensor, states: Tensor, cell: str, training: bool,
                           backend: str = "fused") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    forward, _ = _cuda_functions(backend)
    Wx, R, b, states = _dense(Wx, R, b, states)
    h, last, gates_save, states_save = forward(Wx, R, b, states, _cell(cell), training)
    empty = Wx.new_empty(0, dtype=torch.float32)
    return h, last, empty if gates_save is None else gates_save, empty.clone() if states_save is None else states_save


@flashrnn_forward.register_fake
def _flashrnn_forward_fake(Wx: Tensor, R: Tensor, b: Tensor, states: Tensor, cell: str, training: bool,
                           backend: str = "fused") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    B, T, _, NH, DH = Wx.shape
    gates_shape, states_shape = _fused_saves(Wx, states, training)
    return (Wx.new_empty(B, T, NH, DH), Wx.new_empty(states.shape), Wx.new_empty(gates_shape, dtype=_save_dtype(Wx)),
            Wx.new_empty(states_shape, dtype=_save_dtype(Wx)))


@torch.library.custom_op("flashrnn_kernels::flashrnn_backward", mutates_args=(), device_types="cpu")
@autocast_off  # a backward called under autocast keeps its products' dtypes (both implementations)
def flashrnn_backward(Wx: Tensor | None, R: Tensor, b: Tensor, states: Tensor, h: Tensor, gates_save: Tensor,
                      states_save: Tensor, d_h: Tensor, d_last: Tensor, cell: str,
                      backend: str = "fused") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of (Wx, R, b, states) from d_h [B, T, NH, DH] and d_last [S, B, NH, DH], from the forward's
    saves: on CPU the reference's pointwise backward in reverse (_reference_backward), on CUDA `backend`'s. `Wx` is
    not read (None from this module): the schema keeps it, so that graphs compiled and cached by torch.compile
    against earlier releases, which pass it, still call the op."""
    _backend(backend)
    if gates_save.numel() == 0:
        raise _missing_saves()
    return _reference_backward(R, states, h, gates_save, states_save, d_h, d_last, _cell(cell))


@flashrnn_backward.register_kernel("cuda")
@autocast_off
def _flashrnn_backward_cuda(Wx: Tensor | None, R: Tensor, b: Tensor, states: Tensor, h: Tensor,
                            gates_save: Tensor, states_save: Tensor, d_h: Tensor, d_last: Tensor, cell: str,
                            backend: str = "fused") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    _, backward = _cuda_functions(backend)
    if gates_save.numel() == 0:
        raise _missing_saves()
    saved = states_save if states_save.numel() else None
    R, states, h, gates_save = _dense(R, states, h, gates_save)
    grads = backward(R, states, h, gates_save, saved, d_h, d_last, _cell(cell))
    return tuple(g.contiguous() for g in grads)  # dense outputs whatever a backend returns (a no-op for both)


@flashrnn_backward.register_fake
def _flashrnn_backward_fake(Wx: Tensor | None, R: Tensor, b: Tensor, states: Tensor, h: Tensor,
                            gates_save: Tensor, states_save: Tensor, d_h: Tensor, d_last: Tensor, cell: str,
                            backend: str = "fused") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    B, T, NH, DH = h.shape
    G = R.shape[0]
    return h.new_empty(B, T, G, NH, DH), h.new_empty(R.shape), h.new_empty(b.shape), h.new_empty(states.shape)


def _flashrnn_setup_context(ctx, inputs, output) -> None:
    _, R, b, states, cell, _, backend = inputs
    h, _, gates_save, states_save = output
    ctx.cell, ctx.backend = cell, backend
    ctx.set_materialize_grads(False)  # no zero-filled gradients for the saves or an unused output
    ctx.mark_non_differentiable(gates_save, states_save)
    ctx.save_for_backward(R, b, states, h, gates_save, states_save)


def _upstream(h: Tensor, states: Tensor, d_h: Tensor | None, d_last: Tensor | None) -> tuple[Tensor, Tensor]:
    """The upstream gradients of (h, last states), zeros for an output that got none."""
    return (torch.zeros_like(h) if d_h is None else d_h, torch.zeros_like(states) if d_last is None else d_last)


def _flashrnn_autograd_backward(ctx, d_h: Tensor | None, d_last: Tensor | None, *_saves):
    R, b, states, h, gates_save, states_save = ctx.saved_tensors
    d_h, d_last = _upstream(h, states, d_h, d_last)
    grads = flashrnn_backward(None, R, b, states, h, gates_save, states_save, d_h, d_last, ctx.cell, ctx.backend)
    return *grads, None, None, None


flashrnn_forward.register_autograd(_flashrnn_autograd_backward, setup_context=_flashrnn_setup_context)
flashrnn_backward.register_autograd(_first_order_only("flashrnn"))


class _EagerFlashRNN(torch.autograd.Function):
    """The CUDA implementations of flashrnn_forward / flashrnn_backward as an autograd.Function: eager calls skip
    the custom-op dispatch, which short sequences wait for (12x64 bf16, B=16, T=64 on an H200: 0.193 ms forward
    through the op, 0.152 ms without it); torch.compile sees the op."""

    @staticmethod
    def forward(ctx, cell: str, training: bool, Wx: Tensor, R: Tensor, b: Tensor,
                states: Tensor) -> tuple[Tensor, Tensor]:
        h, last, gates_save, states_save = _flashrnn_forward_cuda(Wx, R, b, states, cell, training)
        ctx.cell = cell
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(R, b, states, h, gates_save, states_save)
        return h, last

    @staticmethod
    def backward(ctx, d_h: Tensor | None, d_last: Tensor | None):
        R, b, states, h, gates_save, states_save = ctx.saved_tensors
        d_h, d_last = _upstream(h, states, d_h, d_last)
        backward = flashrnn_backward if torch.is_grad_enabled() else _flashrnn_backward_cuda  # see _first_order_only
        grads = backward(None, R, b, states, h, gates_save, states_save, d_h, d_last, ctx.cell)
        return None, None, *grads


def flashrnn_op(Wx: Tensor, R: Tensor, b: Tensor, states: Tensor, cell: str,
                backend: str = "fused") -> tuple[Tensor, Tensor]:
    """`flashrnn` through the custom op for a registered cell name: (h [B, T, NH, DH], last [S, B, NH, DH]); eager
    CUDA calls of the fused backend take `_EagerFlashRNN`, the same launches with less host work per call.

    Saves for the backward only when grad mode is on and an input requires grad."""
    training = torch.is_grad_enabled() and any(t.requires_grad for t in (Wx, R, b, states))
    if Wx.is_cuda and backend == "fused" and not torch.compiler.is_compiling():
        return _EagerFlashRNN.apply(cell, training, Wx, R, b, states)
    h, last, _, _ = flashrnn_forward(Wx, R, b, states, cell, training, backend)
    return h, last


# ---- scan: linear scan, minGRU, minLSTM ----------------------------------------------------------------------

def _check_scan_cell(cell: str) -> None:
    if cell not in SCAN_LOOPS:
        raise ValueError(f"unknown scan cell {cell!r} for flashrnn_kernels::scan_*; valid: {sorted(SCAN_LOOPS)}")


def _g_derivative(x: Tensor) -> Tensor:
    """d/dx of scan_reference.g: 1 for x >= 0, sigmoid'(x) below."""
    sig = torch.sigmoid(x)
    return torch.where(x >= 0, torch.ones_like(x), sig * (1 - sig))


def _scan_reference_backward(cell: str, inputs: list[Tensor], h0: Tensor | None, dh: Tensor,
                             h: Tensor) -> list[Tensor]:
    """Gradients of the reference loop (computed in fp32 for bf16 / fp16 inputs, returned in the inputs' dtype): the
    reverse scan g_t = dh_t + a_{t+1} g_{t+1} gives da_t = g_t h_{t-1}, db_t = g_t and dh0 = a_1 g_1, then the
    chain rule through the cell's gates."""
    dtype = inputs[0].dtype
    *inputs, h0, dh, h = scan_reference.accumulating(*inputs, h0, dh, h)
    a, _ = scan_reference.GATES[cell](*inputs)
    a_next = torch.cat([a[:, 1:], torch.zeros_like(a[:, :1])], dim=1)
    g = scan_reference.linear_scan_chunked(a_next, dh, reverse=True)
    start = torch.zeros_like(h[:, :1]) if h0 is None else h0.unsqueeze(1)
    da, db = g * torch.cat([start, h[:, :-1]], dim=1), g
    if cell == "linear":
        grads = [da, db]
    elif cell == "min_gru":  # a = 1 - z, b = z g(h_pre), z = sigmoid(k)
        k, h_pre = inputs
        z = torch.sigmoid(k)
        grads = [z * (1 - z) * (db * scan_reference.g(h_pre) - da), db * z * _g_derivative(h_pre)]
    else:  # a = fs / (fs + is), b = is / (fs + is) g(h_pre), fs = sigmoid(f), is = sigmoid(i)
        f, i, h_pre = inputs
        fs, is_ = torch.sigmoid(f), torch.sigmoid(i)
        total = fs + is_
        # d(fs / total) = (is dfs - fs dis) / total^2 and d(is / total) = -d(fs / total)
        d_ratio = (da - db * scan_reference.g(h_pre)) / (total * total)
        grads = [d_ratio * is_ * fs * (1 - fs), -d_ratio * fs * is_ * (1 - is_),
                 db * is_ / total * _g_derivative(h_pre)]
    if h0 is not None:  # no steps: h does not depend on h0
        grads.append(a[:, 0] * g[:, 0] if a.shape[1] else torch.zeros_like(h0))
    return [_contiguous(t.to(dtype)) for t in grads]


@torch.library.custom_op("flashrnn_kernels::scan_forward", mutates_args=(), device_types="cpu")
def scan_forward(cell: str, inputs: list[Tensor], h0: Tensor | None, paired: bool = False) -> Tensor:
    """h [B, T, D] of the scan `cell` over its inputs (each [B, T, D]) from h0 [B, D] (zeros when None). `paired`:
    autograd will differentiate this call, so on CUDA the forward takes the plan made for a forward + backward pair
    (scan.problem.ScanProblem.paired); the result is the same up to rounding."""
    _check_scan_cell(cell)
    return scan_reference.cell_scan(cell, inputs, h0)


@scan_forward.register_kernel("cuda")
def _scan_forward_cuda(cell: str, inputs: list[Tensor], h0: Tensor | None, paired: bool = False) -> Tensor:
    _check_scan_cell(cell)
    (h,) = run_scan(cell, "forward", _dense(*inputs), h0 if h0 is None else h0.contiguous(), paired=paired)
    return h


@scan_forward.register_fake
def _scan_forward_fake(cell: str, inputs: list[Tensor], h0: Tensor | None, paired: bool = False) -> Tensor:
    return inputs[0].new_empty(inputs[0].shape)


def _wanted(grads: list[Tensor | None], needs: list[bool]) -> list[Tensor]:
    """The gradients `needs` asks for, in order: needs[i] for input i, needs[-1] for h0 (when it is given)."""
    return [g for g, need in zip(grads, needs) if need and g is not None]


def _spread(grads: list[Tensor], needs: tuple[bool, ...], has_h0: bool) -> tuple[list[Tensor | None], Tensor | None]:
    """scan_backward's wanted gradients back in place: (one per input, None where not wanted; h0's or None)."""
    found = iter(grads)
    inputs = [next(found) if need else None for need in needs[:-1]]
    return inputs, next(found) if has_h0 and needs[-1] else None


@torch.library.custom_op("flashrnn_kernels::scan_backward", mutates_args=(), device_types="cpu")
def scan_backward(cell: str, inputs: list[Tensor], h0: Tensor | None, dh: Tensor, h: Tensor,
                  needs: list[bool]) -> list[Tensor]:
    """Gradients of the inputs, then of h0 when it is given, from dh [B, T, D] (h: the forward's output): those that
    `needs` (one flag per input, then h0's) asks for (`_wanted`)."""
    _check_scan_cell(cell)
    grads = _scan_reference_backward(cell, inputs, h0, dh, h)
    return _wanted(grads + [None] * (len(needs) - len(grads)), needs)


@scan_backward.register_kernel("cuda")
def _scan_backward_cuda(cell: str, inputs: list[Tensor], h0: Tensor | None, dh: Tensor, h: Tensor,
                        needs: list[bool], settled: bool = False) -> list[Tensor]:
    """`settled`: `inputs` are autograd's saved tensors of an eager forward (run_scan); never so through the op,
    whose inputs a compiled graph may compute in the kernel just before."""
    _check_scan_cell(cell)
    h0 = h0 if h0 is None else h0.contiguous()
    dense = _dense(*inputs)
    *grads, grad_h0 = run_scan(cell, "backward", dense, h0, dh.contiguous(), h.contiguous(), needs=tuple(needs),
                               settled=settled and all(d is t for d, t in zip(dense, inputs)))
    return _wanted([*grads, None if grad_h0 is None else grad_h0.to(h0.dtype)], needs)


@scan_backward.register_fake
def _scan_backward_fake(cell: str, inputs: list[Tensor], h0: Tensor | None, dh: Tensor, h: Tensor,
                        needs: list[bool]) -> list[Tensor]:
    return _wanted([t.new_empty(t.shape) for t in inputs] + [None if h0 is None else h0.new_empty(h0.shape)], needs)


def _scan_setup_context(ctx, inputs, output) -> None:
    cell, tensors, h0 = inputs[:3]  # then `paired`, where the call passes it
    ctx.cell, ctx.has_h0 = cell, h0 is not None
    ctx.save_for_backward(output, h0, *tensors)


def _scan_autograd_backward(ctx, dh: Tensor):
    h, h0, *tensors = ctx.saved_tensors
    _, inputs_need, h0_needs, *flags = ctx.needs_input_grad  # (cell, [one per input], h0, [paired])
    needs = (*inputs_need, bool(h0_needs))
    grads = scan_backward(ctx.cell, tensors, h0, dh, h, list(needs))
    return None, *_spread(grads, needs, ctx.has_h0), *(None for _ in flags)


scan_forward.register_autograd(_scan_autograd_backward, setup_context=_scan_setup_context)
scan_backward.register_autograd(_first_order_only("linear_scan / min_gru / min_lstm"))


class _EagerScan(torch.autograd.Function):
    """The CUDA implementations of scan_forward / scan_backward as an autograd.Function: eager calls skip the
    custom-op dispatch (about 50 us of host time per call on an H200 host); torch.compile sees the op."""

    @staticmethod
    def forward(ctx, cell: str, paired: bool, h0: Tensor | None, *inputs: Tensor) -> Tensor:
        h = _scan_forward_cuda(cell, list(inputs), h0, paired)
        ctx.cell = cell
        ctx.save_for_backward(h, h0, *inputs)
        return h

    @staticmethod
    def backward(ctx, dh: Tensor):
        h, h0, *tensors = ctx.saved_tensors
        _, _, h0_needs, *inputs_need = ctx.needs_input_grad  # (cell, paired, h0, *inputs)
        needs = (*inputs_need, h0_needs)
        if torch.is_grad_enabled():  # see _first_order_only
            grads = scan_backward(ctx.cell, tensors, h0, dh, h, list(needs))
        else:
            grads = _scan_backward_cuda(ctx.cell, tensors, h0, dh, h, list(needs), settled=True)
        inputs, grad_h0 = _spread(grads, needs, h0 is not None)
        return None, None, grad_h0, *inputs


def scan_op(cell: str, inputs: tuple[Tensor, ...], h0: Tensor | None) -> Tensor:
    """h [B, T, D]: the scan `cell` ("linear", "min_gru", "min_lstm") through the custom op; eager CUDA calls take
    `_EagerScan`, the same launches with less host work per call."""
    paired = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (*inputs, h0))
    if inputs[0].is_cuda and not torch.compiler.is_compiling():
        return _EagerScan.apply(cell, paired, h0, *inputs)
    return scan_forward(cell, list(inputs), h0, paired)
