"""FlashLSTM / FlashGRU / FlashElman / FlashSLSTM: layers, directions, lengths and dropout against torch.nn
(float64 on the CPU), torch conversions of deep bidirectional networks, and the argument checks."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from flashrnn_kernels import FlashElman, FlashGRU, FlashLSTM, FlashSLSTM

F64 = {"rtol": 1e-10, "atol": 1e-12}
TWINS = [(nn.LSTM, FlashLSTM), (nn.GRU, FlashGRU), (nn.RNN, FlashElman)]
TWIN_IDS = ["lstm", "gru", "elman"]


def _as_tuple(states) -> tuple[torch.Tensor, ...]:
    return states if isinstance(states, tuple) else (states,)


def _torch_run(module: nn.RNNBase, x, states, lengths):
    """torch.nn on a padded batch: packed when lengths are given, padded back to T."""
    if lengths is None:
        return module(x, states)
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    output, last = module(packed, states)
    return nn.utils.rnn.pad_packed_sequence(output, batch_first=True, total_length=x.shape[1])[0], last


def _flash_grad(flash, grads: dict[str, torch.Tensor], torch_name: str) -> torch.Tensor:
    """The flash gradient laid out as torch's parameter `torch_name` (weight_ih_l0_reverse, bias_hh_l1, ...)."""
    kind, place = torch_name.split("_", 2)[1], torch_name.split("_", 2)[2]
    if kind == "ih" and torch_name.startswith("weight"):
        return grads[f"W_{place}"]
    if torch_name.startswith("weight"):
        return grads[f"R_{place}"].reshape(-1, flash.hidden_size)
    gates = flash.input_gates if kind == "ih" else flash.recurrent_gates
    bias = grads[f"b_{place}"]
    return torch.stack([bias[flash.cell.gates.index(g)] for g in gates]).reshape(-1)


@pytest.mark.parametrize("twin, cls", TWINS, ids=TWIN_IDS)
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize("with_lengths", [False, True], ids=["full", "lengths"])
def test_module_matches_torch(twin, cls, num_layers, bidirectional, with_lengths):
    torch.manual_seed(num_layers * 10 + bidirectional * 2 + with_lengths)
    B, T, I, H = 4, 6, 3, 5
    D = 2 if bidirectional else 1
    reference = twin(I, H, num_layers=num_layers, bidirectional=bidirectional, batch_first=True, dtype=torch.float64)
    flash = cls.from_torch(reference, backend="reference")
    x = torch.randn(B, T, I, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([4, 6, 1, 3]) if with_lengths else None  # unsorted, one full, one of a single step
    state_count = 2 if twin is nn.LSTM else 1
    states = tuple(torch.randn(num_layers * D, B, H, dtype=torch.float64) for _ in range(state_count))
    states = states if state_count > 1 else states[0]

    expected, expected_last = _torch_run(reference, x, states, lengths)
    output, last = flash(x, states, lengths=lengths, enforce_sorted=False)
    assert output.shape == (B, T, D * H)
    torch.testing.assert_close(output, expected, **F64)
    torch.testing.assert_close(_as_tuple(last), _as_tuple(expected_last), **F64)
    if with_lengths:
        assert output[2, 1:].abs().max() == 0 and output[3, 3:].abs().max() == 0

    upstream = [torch.randn_like(output)] + [torch.randn_like(t) for t in _as_tuple(last)]
    names = [name for name, _ in reference.named_parameters()]
    want = torch.autograd.grad([expected, *_as_tuple(expected_last)], [x, *reference.parameters()], upstream)
    got = torch.autograd.grad([output, *_as_tuple(last)], [x, *flash.parameters()], upstream)
    torch.testing.assert_close(got[0], want[0], **F64, msg="dx")
    flash_grads = dict(zip((name for name, _ in flash.named_parameters()), got[1:]))
    for name, expected_grad in zip(names, want[1:]):
        torch.testing.assert_close(_flash_grad(flash, flash_grads, name), expected_grad, **F64, msg=name)


def _per_sequence(module, x, lengths):
    """Each sequence run alone on its own prefix: (outputs, last states stacked on the batch axis)."""
    runs = [module(x[k : k + 1, :n]) for k, n in enumerate(lengths)]
    lasts = [torch.cat(parts, dim=1) for parts in zip(*(_as_tuple(last) for _, last in runs))]
    return [output[0] for output, _ in runs], lasts


def test_slstm_lengths_equal_truncated_runs():
    torch.manual_seed(5)
    model = FlashSLSTM(3, 8, num_heads=2, num_layers=2, bidirectional=True, dtype=torch.float64, backend="reference")
    lengths = [5, 2, 7]
    x = torch.randn(3, 7, 3, dtype=torch.float64)
    output, last = model(x, lengths=torch.tensor(lengths), enforce_sorted=False)
    assert output.shape == (3, 7, 16) and len(last) == 4 and all(t.shape == (4, 3, 8) for t in last)
    outputs, lasts = _per_sequence(model, x, lengths)
    for k, n in enumerate(lengths):
        torch.testing.assert_close(output[k, :n], outputs[k], **F64)
        assert output[k, n:].abs().sum() == 0
    torch.testing.assert_close(last, tuple(lasts), **F64)


def test_slstm_gradients_are_finite_and_reach_every_parameter():
    torch.manual_seed(6)
    model = FlashSLSTM(4, 6, num_heads=3, num_layers=2, dtype=torch.float64, backend="reference")
    x = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    output, (h_n, c_n, n_n, m_n) = model(x, lengths=[5, 3])
    assert (n_n > 0).all() and torch.isfinite(output).all()
    (output.square().sum() + c_n.sum()).backward()
    for name, parameter in [("x", x), *model.named_parameters()]:
        assert torch.isfinite(parameter.grad).all() and parameter.grad.abs().max() > 0, name
    assert x.grad[1, 3:].abs().max() == 0  # steps past a sequence's end do not matter


def test_slstm_gradcheck():
    torch.manual_seed(7)
    model = FlashSLSTM(2, 4, num_heads=2, bidirectional=True, dtype=torch.float64, backend="reference")
    x = torch.randn(2, 3, 2, dtype=torch.float64, requires_grad=True)
    states = tuple(torch.randn(2, 2, 4, dtype=torch.float64, requires_grad=True) for _ in range(4))
    states = (states[0], states[1], states[2].abs() + 0.5, states[3])  # the normaliser n stays positive

    def run(x, *states):
        output, last = model(x, states, lengths=[3, 2])
        return output, *last

    assert torch.autograd.gradcheck(run, (x, *states), fast_mode=True)


def test_unsorted_lengths_give_the_sorted_results_permuted():
    torch.manual_seed(8)
    model = FlashGRU(3, 4, bidirectional=True, dtype=torch.float64, backend="reference")
    x = torch.randn(4, 6, 3, dtype=torch.float64)
    lengths = [2, 6, 4, 1]
    order = sorted(range(4), key=lambda k: -lengths[k])
    message = r"lengths must be sorted in decreasing order \(lengths\[0\]=2 < lengths\[1\]=6\)"
    with pytest.raises(ValueError, match=message):
        model(x, lengths=lengths)
    output, h_n = model(x, lengths=lengths, enforce_sorted=False)
    sorted_output, sorted_h_n = model(x[order], lengths=[lengths[k] for k in order])
    torch.testing.assert_close(output[order], sorted_output, **F64)
    torch.testing.assert_close(h_n[:, order], sorted_h_n, **F64)


def test_time_major_input_and_full_lengths():
    torch.manual_seed(9)
    reference = nn.GRU(3, 4, num_layers=2, dtype=torch.float64)
    model = FlashGRU.from_torch(reference, backend="reference")
    assert not model.batch_first
    x = torch.randn(5, 2, 3, dtype=torch.float64)  # [T, B, I]
    expected, h_ref = reference(x)
    for lengths in (None, [5, 5]):
        output, h_n = model(x, lengths=lengths)
        torch.testing.assert_close((output, h_n), (expected, h_ref), **F64)


@pytest.mark.parametrize("twin, cls", TWINS, ids=TWIN_IDS)
@pytest.mark.parametrize("enforce_sorted", [False, True], ids=["any-order", "sorted"])
def test_packed_sequences_match_torch(twin, cls, enforce_sorted):
    """A PackedSequence in, a PackedSequence out laid out as torch's (data, batch sizes, sequence order), the last
    states in the batch's own order, and gradients through the packing."""
    torch.manual_seed(11)
    reference = twin(3, 4, num_layers=2, bidirectional=True, batch_first=True, dtype=torch.float64)
    flash = cls.from_torch(reference, backend="reference")
    lengths = [6, 5, 5, 2, 1] if enforce_sorted else [5, 1, 6, 5, 2]  # ties included
    x = torch.randn(5, 6, 3, dtype=torch.float64, requires_grad=True)
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=enforce_sorted)
    states = tuple(torch.randn(4, 5, 4, dtype=torch.float64) for _ in range(2 if twin is nn.LSTM else 1))
    states = states if len(states) > 1 else states[0]

    expected, expected_last = reference(packed, states)
    output, last = flash(packed, states)
    assert isinstance(output, nn.utils.rnn.PackedSequence)
    assert torch.equal(output.batch_sizes, expected.batch_sizes)
    for got, want in ((output.sorted_indices, expected.sorted_indices),
                      (output.unsorted_indices, expected.unsorted_indices)):
        assert (got is None and want is None) or torch.equal(got, want)
    torch.testing.assert_close(output.data, expected.data, **F64)
    torch.testing.assert_close(_as_tuple(last), _as_tuple(expected_last), **F64)
    upstream = torch.randn_like(expected.data)
    (want,) = torch.autograd.grad(expected.data, x, upstream, retain_graph=True)  # the packing is shared
    (got,) = torch.autograd.grad(output.data, x, upstream)
    torch.testing.assert_close(got, want, **F64)


@pytest.mark.parametrize("twin, cls", TWINS, ids=TWIN_IDS)
@pytest.mark.parametrize("batch_first", [True, False])
def test_unbatched_sequences_match_torch(twin, cls, batch_first):
    """x [T, input_size] and states [num_layers * D, H], as torch.nn's RNNs take one sequence."""
    torch.manual_seed(12)
    reference = twin(3, 4, num_layers=2, bidirectional=True, batch_first=batch_first, dtype=torch.float64)
    flash = cls.from_torch(reference, backend="reference")
    x = torch.randn(6, 3, dtype=torch.float64)
    states = tuple(torch.randn(4, 4, dtype=torch.float64) for _ in range(2 if twin is nn.LSTM else 1))
    for given in (None, states if len(states) > 1 else states[0]):
        expected, expected_last = reference(x, given)
        output, last = flash(x, given)
        assert output.shape == (6, 8)
        torch.testing.assert_close(output, expected, **F64)
        torch.testing.assert_close(_as_tuple(last), _as_tuple(expected_last), **F64)


def test_dropout_between_layers_only_while_training():
    torch.manual_seed(10)
    reference = nn.LSTM(3, 4, num_layers=2, dropout=1.0, batch_first=True, dtype=torch.float64)
    model = FlashLSTM.from_torch(reference, backend="reference")
    assert model.dropout == 1.0
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    model.eval()
    torch.testing.assert_close(model(x)[0], reference.eval()(x)[0], **F64)
    model.train()
    output, (h_n, c_n) = model(x)  # dropout 1 zeroes the second layer's input, and only that
    second = nn.LSTM(4, 4, batch_first=True, dtype=torch.float64)
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        getattr(second, f"{name}_l0").data.copy_(getattr(reference, f"{name}_l1"))
    expected, (h_ref, _) = second(torch.zeros(2, 5, 4, dtype=torch.float64))
    assert output.abs().max() > 0
    torch.testing.assert_close(output, expected, **F64)
    torch.testing.assert_close(h_n[1], h_ref[0], **F64)


@pytest.mark.parametrize("twin, cls", TWINS, ids=TWIN_IDS)
def test_round_trips_of_deep_bidirectional_networks(twin, cls):
    torch.manual_seed(11)
    reference = twin(3, 4, num_layers=3, bidirectional=True, dropout=0.25, dtype=torch.float64)
    flash = cls.from_torch(reference, backend="reference")
    back = flash.to_torch()
    assert (back.num_layers, back.bidirectional, back.dropout, back.batch_first) == (3, True, 0.25, False)
    for name, parameter in reference.named_parameters():  # biases may move between bias_ih and bias_hh
        if name.startswith("weight"):
            torch.testing.assert_close(getattr(back, name), parameter, rtol=0, atol=0, msg=name)
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    torch.testing.assert_close(back.eval()(x)[0], reference.eval()(x)[0], **F64)
    again = cls.from_torch(back, backend="reference")
    for (name, p), (_, q) in zip(flash.named_parameters(), again.named_parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("cls", [FlashLSTM, FlashGRU, FlashElman])
def test_to_torch_of_multi_head_bidirectional_module(cls):
    torch.manual_seed(12)
    flash = cls(3, 8, num_heads=4, num_layers=2, bidirectional=True, dtype=torch.float64, backend="reference")
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    expected, expected_last = flash(x, lengths=[5, 3])
    output, last = _torch_run(flash.to_torch(), x, None, [5, 3])
    torch.testing.assert_close((output, _as_tuple(last)), (expected, _as_tuple(expected_last)), **F64)


def test_parameter_names_shapes_and_first_layer_aliases():
    model = FlashGRU(3, 8, num_heads=2, num_layers=2, bidirectional=True, bias=False)
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    assert shapes == {
        "W_l0": (24, 3), "R_l0": (3, 2, 4, 4), "W_l0_reverse": (24, 3), "R_l0_reverse": (3, 2, 4, 4),
        "W_l1": (24, 16), "R_l1": (3, 2, 4, 4), "W_l1_reverse": (24, 16), "R_l1_reverse": (3, 2, 4, 4),
    }
    assert model.W is model.W_l0 and model.R is model.R_l0 and model.b is None
    assert FlashSLSTM(3, 8).b.shape == (4, 1, 8) and FlashElman(3, 8).R.shape == (1, 1, 8, 8)
    assert "num_layers=2, bidirectional=True" in repr(model)


X = torch.zeros(3, 6, 2)


@pytest.mark.parametrize(
    "lengths, error, message",
    [
        ([6, 7, 1], ValueError, r"lengths\[1\]=7 is outside \[1, T=6\]"),
        ([6, 0, 1], ValueError, r"lengths\[1\]=0 is outside \[1, T=6\]"),
        ([6, 2, -1], ValueError, r"lengths\[2\]=-1 is outside \[1, T=6\]"),
        ([6, 2], ValueError, r"lengths has 2 entries but the batch has B=3 sequences"),
        (torch.tensor([6.0, 2.0, 1.0]), TypeError, r"lengths must hold integers .*got dtype torch.float32"),
        (torch.tensor([True, True, True]), TypeError, r"got dtype torch.bool"),
        (torch.tensor([[6, 2, 1]]), ValueError, r"lengths must be 1-D \[B\], got shape \[1, 3\]"),
        (torch.tensor([6, 2, 1], device="meta"), ValueError, r"lengths must be a CPU tensor .* on meta"),
        ([6, 2.0, 1], TypeError, r"lengths must be a 1-D CPU integer tensor or a list of ints, got the entry 2.0"),
        ("6 2 1", TypeError, r"lengths must be a 1-D CPU integer tensor or a list of ints, got str"),
    ],
)
def test_bad_lengths(lengths, error, message):
    with pytest.raises(error, match=message):
        FlashGRU(2, 4, backend="reference")(X, lengths=lengths)


def test_bad_states():
    gru, slstm = FlashGRU(2, 4, num_layers=2, backend="reference"), FlashSLSTM(2, 4, backend="reference")
    with pytest.raises(ValueError, match=r"states must be a tensor h_0 \[num_layers \* D, B, hidden_size\]"):
        gru(X, (torch.zeros(2, 3, 4),))  # a one-state cell takes h_0 itself, as torch.nn.GRU
    with pytest.raises(ValueError, match=r"h_0 must have shape \[num_layers \* D, B, hidden_size\] = \[2, 3, 4\]"):
        gru(X, torch.zeros(1, 3, 4))
    with pytest.raises(ValueError, match=r"states must be a tuple \(h_0, c_0, n_0, m_0\)"):
        slstm(X, (torch.zeros(1, 3, 4),) * 2)
    with pytest.raises(ValueError, match=r"m_0 must have shape .* = \[1, 3, 4\], got \[3, 4\]"):
        slstm(X, (torch.zeros(1, 3, 4),) * 3 + (torch.zeros(3, 4),))
    with pytest.raises(ValueError, match=r"x must be \[B, T, input_size\] with input_size=2, got shape \[1, 3, 6, 2\]"):
        gru(X[None])
    with pytest.raises(ValueError, match=r"unbatched x \[T, input_size\] takes states .* = \[2, 4\], got \[2, 1, 4\]"):
        gru(X[0], torch.zeros(2, 1, 4))
    with pytest.raises(ValueError, match=r"unbatched x \[T, input_size\] takes states .* = \[2, 4\], got \[2, 5\]"):
        gru(X[0], torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"lengths= needs a batch"):
        gru(X[0], lengths=[6])
    packed = nn.utils.rnn.pack_padded_sequence(X, [6, 3, 2], batch_first=True)
    with pytest.raises(ValueError, match=r"a PackedSequence carries its own lengths"):
        gru(packed, lengths=[6, 3, 2])
    for items in ([torch.randn(3, 5)], [torch.randn(3, 1, 2)]):
        with pytest.raises(ValueError, match=r"sequences must each be \[T_i, input_size\] with input_size=2"):
            gru(nn.utils.rnn.pack_sequence(items))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_layers": 0}, r"num_layers must be a positive int, got 0"),
        ({"dropout": 1.5}, r"dropout must be a probability in \[0, 1\] \(a real number\), got 1.5"),
        ({"dtype": torch.int64}, r"dtype must be one of .* or None for torch's default, got torch.int64"),
        ({"num_heads": 3}, r"hidden_size=4 is not divisible by num_heads=3"),
    ],
)
def test_constructor_checks(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        FlashGRU(2, 4, **kwargs)


def test_any_real_dropout():
    numpy = pytest.importorskip("numpy")
    assert FlashGRU(2, 4, num_layers=2, dropout=numpy.float32(0.25)).dropout == 0.25


@pytest.mark.parametrize(
    "cls, module, error, message",
    [
        (FlashElman, nn.RNN(3, 4, nonlinearity="relu"), ValueError, r"nonlinearity='tanh' only, got nonlinearity='re"),
        (FlashLSTM, nn.LSTM(3, 4, num_layers=2, proj_size=2), ValueError, r"proj_size=0 only, got proj_size=2"),
        (FlashGRU, nn.LSTM(3, 4), TypeError, r"FlashGRU.from_torch expects a torch.nn.GRU, got LSTM"),
        (FlashElman, nn.GRU(3, 4), TypeError, r"FlashElman.from_torch expects a torch.nn.RNN, got GRU"),
        (FlashSLSTM, nn.LSTM(3, 4), TypeError, r"FlashSLSTM has no torch.nn counterpart"),
    ],
)
def test_from_torch_rejections(cls, module, error, message):
    with pytest.raises(error, match=message):
        cls.from_torch(module)


def test_slstm_to_torch_is_rejected():
    with pytest.raises(TypeError, match=r"FlashSLSTM has no torch.nn counterpart to convert to"):
        FlashSLSTM(2, 4).to_torch()


@pytest.mark.parametrize("cls", [FlashLSTM, FlashGRU, FlashSLSTM, FlashElman])
def test_pickled_and_copied_modules_keep_their_registered_cell(cls):
    import copy
    import io
    import pickle

    from flashrnn_kernels.cells import CELLS

    module = cls(3, 4, num_layers=2)
    saved = io.BytesIO()
    torch.save(module, saved)
    saved.seek(0)
    copies = [pickle.loads(pickle.dumps(module)), copy.deepcopy(module), torch.load(saved, weights_only=False)]
    x = torch.randn(2, 5, 3)
    for other in copies:  # the dispatch picks kernels by the registered cell's identity
        assert other.cell is CELLS[module.cell.name]
        assert torch.equal(other(x)[0], module(x)[0])


def test_custom_cells_pickle_by_definition():
    import pickle

    from flashrnn_kernels.cells import CELLS, CellSpec

    elman = CELLS["elman"]
    mine = CellSpec("mine", elman.gates, elman.states, elman.forward, elman.backward)
    back = pickle.loads(pickle.dumps(mine))
    assert back == mine and back is not mine and back.cuda_forward() == mine.cuda_forward()
