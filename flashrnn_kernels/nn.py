"""Drop-in recurrent nn.Modules over `flashrnn`: FlashLSTM, FlashGRU, FlashSLSTM, FlashElman.

All four are one implementation, `FlashRNNBase`, parameterised by the cell: layers, directions, dropout between
layers, initial states, `batch_first`, block-diagonal heads and variable-length batches. Modules with a torch.nn
twin convert both ways (`from_torch`, `to_torch`), multi-layer and bidirectional weights included.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .autocast import ELIGIBLE, autocast_dtype, cast_eligible
from .cells import CellSpec, get_cell
from .dispatch import BACKENDS, flashrnn
from .validation import check_parameter_dtype, check_positive_ints

States = Tensor | tuple[Tensor, ...]
"""h_n alone for one-state cells (GRU, Elman), else a tuple in the cell's state order, each [L * D, B, H]."""


def _check_lengths(lengths: Tensor | Sequence[int] | None, batch: int, steps: int,
                   enforce_sorted: bool = True) -> list[int] | None:
    """Validated per-sequence lengths as a list of ints in [1, steps], one per sequence; in decreasing order unless
    `enforce_sorted` is False."""
    if lengths is None:
        return None
    if isinstance(lengths, Tensor):
        if lengths.device.type != "cpu":
            raise ValueError(
                f"lengths must be a CPU tensor (as for torch's pack_padded_sequence), got one on {lengths.device}; "
                "pass lengths.cpu()"
            )
        if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
            raise TypeError(f"lengths must hold integers (e.g. torch.int64), got dtype {lengths.dtype}")
        if lengths.dim() != 1:
            raise ValueError(f"lengths must be 1-D [B], got shape {list(lengths.shape)}")
        values = lengths.tolist()
    elif isinstance(lengths, (list, tuple)):
        bad = [n for n in lengths if not isinstance(n, int) or isinstance(n, bool)]
        if bad:
            raise TypeError(f"lengths must be a 1-D CPU integer tensor or a list of ints, got the entry {bad[0]!r}")
        values = list(lengths)
    else:
        raise TypeError(f"lengths must be a 1-D CPU integer tensor or a list of ints, got {type(lengths).__name__}")
    if len(values) != batch:
        raise ValueError(
            f"lengths has {len(values)} entries but the batch has B={batch} sequences; give one per sequence"
        )
    for index, length in enumerate(values):
        if not 1 <= length <= steps:
            raise ValueError(
                f"lengths[{index}]={length} is outside [1, T={steps}]; every sequence needs between 1 and T steps"
            )
    if enforce_sorted:
        for index in range(1, len(values)):
            if values[index] > values[index - 1]:
                raise ValueError(
                    f"lengths must be sorted in decreasing order (lengths[{index - 1}]={values[index - 1]} < "
                    f"lengths[{index}]={values[index]}), as torch's pack_padded_sequence expects with "
                    "enforce_sorted=True; sort the batch, or pass enforce_sorted=False to accept any order"
                )
    return values


def _scatter_gates(values: Tensor, present: tuple[str, ...], gates: tuple[str, ...], dim: int) -> Tensor:
    """`values` indexed by `present` gates along `dim`, widened to all `gates` with zeros for the missing ones (in the
    autocast dtype where autocast casts them, as the op would: CPU autocast's stack refuses fp16 under bf16)."""
    if present == gates:
        return values
    compute = autocast_dtype(values.device)
    values = values if compute is None else cast_eligible(values, compute)
    zeros = torch.zeros_like(values.select(dim, 0))
    return torch.stack([values.select(dim, present.index(g)) if g in present else zeros for g in gates], dim)


def _reverse(x: Tensor, lengths: list[int] | None) -> Tensor:
    """x: [B, T, F] with each sequence reversed within its own length (the padding stays in place)."""
    if lengths is None:
        return x.flip(1)
    steps = torch.arange(x.shape[1], device=x.device)
    ends = torch.tensor(lengths, device=x.device)[:, None]
    index = torch.where(steps < ends, ends - 1 - steps, steps)  # [B, T]
    return x.gather(1, index[:, :, None].expand_as(x))


def _run_with_lengths(
    Wx: Tensor, R: Tensor, b: Tensor, states: Tensor, cell: CellSpec, backend: str, lengths: list[int]
) -> tuple[Tensor, Tensor]:
    """`flashrnn` over sequences of their own lengths: one call per stretch between consecutive distinct lengths,
    each on the sequences still running. Returns (h [B, T, NH, DH] zero past each end, states at each length)."""
    B, T, _, NH, DH = Wx.shape
    pieces, start = [], 0
    for end in sorted(set(lengths)):
        running = [k for k, n in enumerate(lengths) if n >= end]
        if len(running) == B:
            h, states = flashrnn(Wx[:, start:end].contiguous(), R, b, states.contiguous(), cell=cell, backend=backend)
        else:
            index = torch.tensor(running, device=Wx.device)
            segment = Wx.index_select(0, index)[:, start:end].contiguous()
            h, last = flashrnn(segment, R, b, states.index_select(1, index), cell=cell, backend=backend)
            states = states.index_copy(1, index, last)
            h = h.new_zeros(B, *h.shape[1:]).index_copy(0, index, h)
        pieces.append(h)
        start = end
    if start < T:
        pieces.append(Wx.new_zeros(B, T - start, NH, DH))
    return torch.cat(pieces, dim=1), states


class FlashRNNBase(nn.Module):
    """A multi-layer, optionally bidirectional recurrent network of one cell with `num_heads` block-diagonal heads.

    Subclasses name the cell and which of its gates take the input projection and the recurrent term (torch's
    weight_ih and weight_hh rows, in torch's order). Parameters, for layer k and suffix "" or "_reverse"
    (H = hidden_size, NH = num_heads, DH = H // NH, G = the cell's gates, I_k = input_size or D * H):
      W_l{k}: [len(input_gates) * H, I_k] input projection, rows (gate, head, dim) as torch's weight_ih_l{k};
      R_l{k}: [len(recurrent_gates), NH, DH, DH] recurrent weights (gate, head, out, in);
      b_l{k}: [G, NH, DH] one bias per cell gate (torch's bias_ih + bias_hh where a gate has both); absent
      when bias=False. `W`, `R`, `b` name the first layer's forward-direction parameters.
    Initialised like torch.nn.LSTM: every entry uniform in [-1/sqrt(H), 1/sqrt(H)].

    forward(x, states=None, lengths=None, enforce_sorted=True) follows torch.nn's conventions: x is [B, T, input_size]
    (batch_first=True, the default) or [T, B, input_size]; `states` holds each state's initial value
    [num_layers * D, B, H] (D = 2 if bidirectional else 1; zeros when None), as a tensor for one-state cells and a
    tuple in the cell's state order otherwise; the output is [B, T, D * H] (or [T, B, D * H]) and the last states
    have the same form as `states`. `lengths` ([B] ints, CPU, each in [1, T], in decreasing order unless
    `enforce_sorted=False`, as for torch's pack_padded_sequence) makes a padded batch
    behave like torch's packed sequences: outputs past a sequence's end are zero, its last states are taken at its
    own length, and the reverse direction starts at its own end (each layer and direction then makes one `flashrnn`
    call per distinct length, on the sequences still running). x may also be a PackedSequence (the output is then
    packed like it) or one unbatched sequence [T, input_size] with states [num_layers * D, H], as for torch.nn's
    RNNs. Under torch.autocast the layers compute in the autocast dtype, as torch.nn's RNNs do on cuDNN: x and the
    states may then have any dtype autocast casts, and the output and last states have the autocast dtype.
    `dropout` applies to the outputs of every layer but the last while training. `backend` is passed to `flashrnn`
    ("auto", "fused", "alternating" or "reference").
    torch.compile(module, fullgraph=True) works (the kernels are custom ops); give `lengths` as a list of ints
    there, as reading a tensor's values breaks the graph (each distinct list compiles once).
    """

    cell_name: ClassVar[str]
    input_gates: ClassVar[tuple[str, ...]]
    recurrent_gates: ClassVar[tuple[str, ...]]
    torch_type: ClassVar[type[nn.RNNBase] | None] = None

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_heads: int = 1,
        bias: bool = True,
        batch_first: bool = True,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        backend: str = "auto",
        *,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
    ):
        super().__init__()
        check_positive_ints(input_size=input_size, hidden_size=hidden_size, num_heads=num_heads,
                            num_layers=num_layers)
        if hidden_size % num_heads:
            raise ValueError(
                f"hidden_size={hidden_size} is not divisible by num_heads={num_heads}; "
                f"use a num_heads among the divisors of {hidden_size}"
            )
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; valid backends: {list(BACKENDS)}")
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real) or not 0 <= dropout <= 1:
            raise ValueError(f"dropout must be a probability in [0, 1] (a real number), got {dropout!r}")
        check_parameter_dtype(dtype)
        self.cell = get_cell(self.cell_name)
        self.input_size, self.hidden_size, self.num_heads = input_size, hidden_size, num_heads
        self.head_dim = hidden_size // num_heads
        self.num_layers, self.bidirectional, self.dropout = num_layers, bool(bidirectional), float(dropout)
        self.batch_first, self.backend = batch_first, backend
        NH, DH = num_heads, self.head_dim
        factory = {"dtype": dtype, "device": device}
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else self.directions * hidden_size
            for suffix in self._suffixes:
                name = f"l{layer}{suffix}"
                W = torch.empty(len(self.input_gates) * hidden_size, layer_input, **factory)
                self.register_parameter(f"W_{name}", nn.Parameter(W))
                R = torch.empty(len(self.recurrent_gates), NH, DH, DH, **factory)
                self.register_parameter(f"R_{name}", nn.Parameter(R))
                b = nn.Parameter(torch.empty(self.cell.gate_count, NH, DH, **factory)) if bias else None
                self.register_parameter(f"b_{name}", b)
        self.reset_parameters()

    @property
    def directions(self) -> int:
        """D: 2 for a bidirectional network, else 1."""
        return 2 if self.bidirectional else 1

    @property
    def _suffixes(self) -> tuple[str, ...]:
        return ("", "_reverse")[: self.directions]

    def layer_parameters(self, layer: int, reverse: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
        """(W, R, b) of one layer and direction."""
        name = f"l{layer}{'_reverse' if reverse else ''}"
        return getattr(self, f"W_{name}"), getattr(self, f"R_{name}"), getattr(self, f"b_{name}")

    @property
    def W(self) -> Tensor:
        """The first layer's forward-direction input projection, W_l0."""
        return self.W_l0

    @property
    def R(self) -> Tensor:
        """The first layer's forward-direction recurrent weights, R_l0."""
        return self.R_l0

    @property
    def b(self) -> Tensor | None:
        """The first layer's forward-direction bias, b_l0 (None when bias=False)."""
        return self.b_l0

    def reset_parameters(self) -> None:
        """Uniform in [-1/sqrt(hidden_size), 1/sqrt(hidden_size)], as torch.nn.LSTM."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for parameter in self.parameters():
            nn.init.uniform_(parameter, -bound, bound)

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, num_heads={self.num_heads}, num_layers={self.num_layers}, "
            f"bidirectional={self.bidirectional}, dropout={self.dropout}, bias={self.b is not None}, "
            f"batch_first={self.batch_first}, backend={self.backend!r}"
        )

    def _state_names(self) -> list[str]:
        return [f"{name}_0" for name in self.cell.states]

    def _initial_states(self, states: States | None, batch: int, compute: torch.dtype | None) -> Tensor | None:
        """[S, L * D, B, NH, DH] from the caller's states (in `compute` when autocast gives one), or None."""
        if states is None:
            return None
        expected = (self.num_layers * self.directions, batch, self.hidden_size)
        states = self._state_tuple(states, "[num_layers * D, B, hidden_size]")
        for name, tensor in zip(self._state_names(), states):
            if not isinstance(tensor, Tensor) or tuple(tensor.shape) != expected:
                shape = list(tensor.shape) if isinstance(tensor, Tensor) else type(tensor).__name__
                raise ValueError(
                    f"{name} must have shape [num_layers * D, B, hidden_size] = {list(expected)}, got {shape}"
                )
            self._check_like_weights(name, tensor, compute, f"convert {name} to match")
        states = tuple(states) if compute is None else tuple(t.to(compute) for t in states)
        return torch.stack(states).reshape(len(states), *expected[:2], self.num_heads, self.head_dim)

    def _state_tuple(self, states: States, layout: str) -> tuple[Tensor, ...]:
        """The caller's states as a tuple in the cell's order (a lone tensor for one-state cells)."""
        names = self._state_names()
        if len(names) == 1:
            if not isinstance(states, Tensor):
                raise ValueError(f"states must be a tensor h_0 {layout} or None, got a {type(states).__name__}")
            return (states,)
        if not (isinstance(states, (tuple, list)) and len(states) == len(names)):
            raise ValueError(f"states must be a tuple ({', '.join(names)}), each {layout}, or None")
        return tuple(states)

    def _compute_dtype(self, device: torch.device) -> torch.dtype | None:
        """The autocast dtype on `device` when autocast is on there and applies to the weights, else None."""
        dtype = autocast_dtype(device)
        return dtype if dtype is not None and self.layer_parameters(0)[0].dtype in ELIGIBLE else None

    def _check_like_weights(self, name: str, tensor: Tensor, compute: torch.dtype | None, advice: str) -> None:
        """A TypeError, ending in `advice`, unless `tensor` is on the weights' device and has their dtype (any dtype
        autocast casts, when it is on: `compute`)."""
        weight = self.layer_parameters(0)[0]
        dtype_ok = tensor.dtype == weight.dtype or (compute is not None and tensor.dtype in ELIGIBLE)
        if not dtype_ok or tensor.device != weight.device:
            raise TypeError(f"{name} is {tensor.dtype} on {tensor.device} but the module's weights are {weight.dtype} "
                            f"on {weight.device}; {advice}")

    def _direction(
        self, x: Tensor, params: tuple[Tensor, Tensor, Tensor | None], states: Tensor | None, lengths: list[int] | None
    ) -> tuple[Tensor, Tensor]:
        """One layer in one direction (forward in time): x [B, T, I] -> (h [B, T, H], last [S, B, NH, DH])."""
        W, R, b = params
        B, T, _ = x.shape
        gates, NH, DH = self.cell.gates, self.num_heads, self.head_dim
        projected = nn.functional.linear(x, W).view(B, T, len(self.input_gates), NH, DH)
        Wx = _scatter_gates(projected, self.input_gates, gates, dim=2).contiguous()
        R = _scatter_gates(R, self.recurrent_gates, gates, dim=0)
        b = b if b is not None else R.new_zeros(len(gates), NH, DH)
        if lengths is None:
            h, last = flashrnn(Wx, R, b, states, cell=self.cell, backend=self.backend)
        else:
            if states is None:
                states = Wx.new_zeros(self.cell.state_count, B, NH, DH)
            h, last = _run_with_lengths(Wx, R, b, states, self.cell, self.backend, lengths)
        return h.reshape(B, T, self.hidden_size), last

    def forward(
        self, x: Tensor | PackedSequence, states: States | None = None, lengths: Tensor | Sequence[int] | None = None,
        enforce_sorted: bool = True,
    ) -> tuple[Tensor | PackedSequence, States]:
        if isinstance(x, PackedSequence):
            return self._forward_packed(x, states, lengths)
        if not isinstance(x, Tensor) or x.dim() not in (2, 3) or x.shape[-1] != self.input_size:
            layout = "[B, T, input_size]" if self.batch_first else "[T, B, input_size]"
            shape = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x must be {layout} with input_size={self.input_size}, got shape {shape} (one "
                             "sequence [T, input_size] and a PackedSequence work too)")
        if x.dim() == 2:
            return self._forward_unbatched(x, states, lengths)
        output, last = self._run(x if self.batch_first else x.transpose(0, 1), states, lengths, enforce_sorted)
        return (output if self.batch_first else output.transpose(0, 1)), last

    def _run(self, x: Tensor, states: States | None, lengths: Tensor | Sequence[int] | None,
             enforce_sorted: bool) -> tuple[Tensor, States]:
        """forward on a batch-first x [B, T, input_size]: (output [B, T, D * H], last states)."""
        compute = self._compute_dtype(x.device)
        self._check_like_weights("x", x, compute, "convert the input (x.to(dtype, device)) or the module (.to(...))")
        B, T, _ = x.shape
        lengths = _check_lengths(lengths, B, T, enforce_sorted)
        initial = self._initial_states(states, B, compute)
        if B == 0 or T == 0:  # nothing to run: the last states are the initial ones
            return self._empty_run(x, initial, compute)
        finals = []
        for layer in range(self.num_layers):
            if layer > 0:
                x = nn.functional.dropout(x, self.dropout, self.training)
            outputs = []
            for direction in range(self.directions):
                index = layer * self.directions + direction
                start = None if initial is None else initial[:, index].contiguous()
                params = self.layer_parameters(layer, reverse=direction == 1)
                if direction == 0:
                    h, last = self._direction(x, params, start, lengths)
                else:
                    h, last = self._direction(_reverse(x, lengths), params, start, lengths)
                    h = _reverse(h, lengths)
                outputs.append(h)
                finals.append(last)
            x = torch.cat(outputs, dim=-1) if len(outputs) > 1 else outputs[0]
        last = torch.stack(finals, dim=1).reshape(self.cell.state_count, len(finals), B, self.hidden_size)
        return x, (last[0] if self.cell.state_count == 1 else tuple(last.unbind(0)))

    def _empty_run(self, x: Tensor, initial: Tensor | None, compute: torch.dtype | None) -> tuple[Tensor, States]:
        """_run's result for a batch or a sequence of length 0 (x [B, T, I]): an empty output, and the initial states
        (zeros where none are given) as the last ones."""
        B, T, _ = x.shape
        output = x.new_zeros(B, T, self.directions * self.hidden_size, dtype=compute)
        shape = (self.cell.state_count, self.num_layers * self.directions, B, self.hidden_size)
        last = output.new_zeros(shape) if initial is None else initial.reshape(shape)
        return output, (last[0] if self.cell.state_count == 1 else tuple(last.unbind(0)))

    def _forward_unbatched(self, x: Tensor, states: States | None,
                           lengths: Tensor | Sequence[int] | None) -> tuple[Tensor, States]:
        """forward on one sequence x [T, input_size], states each [num_layers * D, H], as torch.nn's RNNs take it."""
        if lengths is not None:
            raise ValueError("lengths= needs a batch; an unbatched x [T, input_size] is one sequence of T steps")
        if states is not None:
            states = self._state_tuple(states, "[num_layers * D, hidden_size] for an unbatched x")
            expected = [self.num_layers * self.directions, self.hidden_size]
            bad = [t for t in states if not isinstance(t, Tensor) or list(t.shape) != expected]
            if bad:
                shape = list(bad[0].shape) if isinstance(bad[0], Tensor) else type(bad[0]).__name__
                raise ValueError(f"an unbatched x [T, input_size] takes states [num_layers * D, hidden_size] = "
                                 f"{expected}, got {shape}")
            states = tuple(t.unsqueeze(1) for t in states)
            states = states[0] if len(states) == 1 else states
        output, last = self.forward(x.unsqueeze(0 if self.batch_first else 1), states)
        last = tuple(t.squeeze(1) for t in (last if isinstance(last, tuple) else (last,)))
        return output.squeeze(0 if self.batch_first else 1), (last[0] if len(last) == 1 else last)

    def _forward_packed(self, x: PackedSequence, states: States | None,
                        lengths: Tensor | Sequence[int] | None) -> tuple[PackedSequence, States]:
        """forward on a PackedSequence, as torch.nn's RNNs: the output packed like x, states in x's batch order."""
        if lengths is not None:
            raise ValueError("lengths= is for padded batches; a PackedSequence carries its own lengths")
        if x.data.dim() != 2 or x.data.shape[1] != self.input_size:
            raise ValueError(f"a PackedSequence's sequences must each be [T_i, input_size] with input_size="
                             f"{self.input_size} (packed data [N, {self.input_size}]), got packed data of shape "
                             f"{list(x.data.shape)}")
        padded, lengths = pad_packed_sequence(x, batch_first=True)  # x's batch order; lengths on the CPU
        output, last = self._run(padded, states, lengths.tolist(), enforce_sorted=False)
        order = x.sorted_indices
        if order is not None:  # pack in x's own order of sequences, so that the data lines up with x's
            output, lengths = output.index_select(0, order), lengths[order.cpu()]
        return x._replace(data=pack_padded_sequence(output, lengths, batch_first=True).data), last

    @classmethod
    def from_torch(cls, module: nn.RNNBase, backend: str = "auto") -> FlashRNNBase:
        """A module (num_heads=1) computing the same function as `module`, every layer and direction copied."""
        twin = cls.torch_type
        if twin is None:
            raise TypeError(
                f"{cls.__name__} has no torch.nn counterpart; from_torch serves FlashLSTM, FlashGRU and FlashElman"
            )
        if not isinstance(module, twin):
            raise TypeError(
                f"{cls.__name__}.from_torch expects a torch.nn.{twin.__name__}, got {type(module).__name__}"
            )
        unsupported = {"proj_size": (getattr(module, "proj_size", 0), 0)}
        if twin is nn.RNN:
            unsupported["nonlinearity"] = (module.nonlinearity, "tanh")
        for name, (value, needed) in unsupported.items():
            if value != needed:
                raise ValueError(
                    f"from_torch supports nn.{twin.__name__} with {name}={needed!r} only, got {name}={value!r}"
                )
        weight = module.weight_ih_l0
        flash = cls(
            module.input_size, module.hidden_size, num_heads=1, bias=module.bias, batch_first=module.batch_first,
            dtype=weight.dtype, device=weight.device, backend=backend, num_layers=module.num_layers,
            bidirectional=module.bidirectional, dropout=module.dropout,
        )
        H, gates = module.hidden_size, flash.cell.gates
        with torch.no_grad():
            for layer in range(module.num_layers):
                for suffix in flash._suffixes:
                    W, R, b = flash.layer_parameters(layer, reverse=bool(suffix))
                    W.copy_(getattr(module, f"weight_ih_l{layer}{suffix}"))
                    R.copy_(getattr(module, f"weight_hh_l{layer}{suffix}").view(-1, 1, H, H))
                    if b is not None:
                        b_ih = getattr(module, f"bias_ih_l{layer}{suffix}").view(-1, 1, H)
                        b_hh = getattr(module, f"bias_hh_l{layer}{suffix}").view(-1, 1, H)
                        b.copy_(
                            _scatter_gates(b_ih, cls.input_gates, gates, 0)
                            + _scatter_gates(b_hh, cls.recurrent_gates, gates, 0)
                        )
        return flash

    def to_torch(self) -> nn.RNNBase:
        """An equivalent torch.nn module; several heads become block-diagonal weight_hh, and a gate with both an
        input and a recurrent part keeps its whole bias in bias_ih (bias_hh zero there)."""
        twin = self.torch_type
        if twin is None:
            raise TypeError(f"{type(self).__name__} has no torch.nn counterpart to convert to")
        module = twin(
            self.input_size, self.hidden_size, num_layers=self.num_layers, bias=self.b is not None,
            batch_first=self.batch_first, dropout=self.dropout, bidirectional=self.bidirectional,
            dtype=self.W.dtype, device=self.W.device,
        )
        gates, H = self.cell.gates, self.hidden_size
        with torch.no_grad():
            for layer in range(self.num_layers):
                for suffix in self._suffixes:
                    W, R, b = self.layer_parameters(layer, reverse=bool(suffix))
                    getattr(module, f"weight_ih_l{layer}{suffix}").copy_(W)
                    blocks = torch.stack([torch.block_diag(*R[g]) for g in range(R.shape[0])])
                    getattr(module, f"weight_hh_l{layer}{suffix}").copy_(blocks.view(-1, H))
                    if b is not None:
                        only_recurrent = [g if g not in self.input_gates else None for g in self.recurrent_gates]
                        b_ih = torch.stack([b[gates.index(g)] for g in self.input_gates])
                        b_hh = torch.stack([b[gates.index(g)] if g else torch.zeros_like(b[0]) for g in only_recurrent])
                        getattr(module, f"bias_ih_l{layer}{suffix}").copy_(b_ih.reshape(-1))
                        getattr(module, f"bias_hh_l{layer}{suffix}").copy_(b_hh.reshape(-1))
        return module


class FlashLSTM(FlashRNNBase):
    """LSTM (gates i, f, z, o as torch's i, f, g, o); forward returns (output, (h_n, c_n)) like torch.nn.LSTM."""

    cell_name = "lstm"
    input_gates = recurrent_gates = ("i", "f", "z", "o")
    torch_type = nn.LSTM


class FlashGRU(FlashRNNBase):
    """GRU in torch.nn.GRU's formulation (see cells/gru.py); forward returns (output, h_n) like torch.nn.GRU.

    W holds torch's weight_ih rows (r, z, n), R its weight_hh rows (r, z, hn), b the four cell gates' biases
    (r and z: bias_ih + bias_hh; n: bias_ih; hn: bias_hh, which the reset gate multiplies)."""

    cell_name = "gru"
    input_gates = ("r", "z", "n")
    recurrent_gates = ("r", "z", "hn")
    torch_type = nn.GRU


class FlashElman(FlashRNNBase):
    """Elman network with tanh, as torch.nn.RNN(nonlinearity="tanh"); forward returns (output, h_n)."""

    cell_name = "elman"
    input_gates = recurrent_gates = ("z",)
    torch_type = nn.RNN


class FlashSLSTM(FlashRNNBase):
    """sLSTM (xLSTM's exponentially gated, normalised LSTM; gates i, f, z, o, states h, c, n, m).

    forward returns (output, (h_n, c_n, n_n, m_n)) and takes `states` in the same form; no torch.nn twin."""

    cell_name = "slstm"
    input_gates = recurrent_gates = ("i", "f", "z", "o")
