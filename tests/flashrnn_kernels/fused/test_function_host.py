"""The launchers' host path without a GPU: kernels and launches are recorded instead of run.

Checks that a call's launch record (grid, block, shared memory, scratch) is the plan's, that it is derived once
per problem, and that the backward returns gradients of the inputs' shapes and dtype (the backward kernel writes
the Wx gradient in the input dtype), and that dR (one GEMM over the steps on h_{t-1}) is the sum over the steps.
"""
from __future__ import annotations

import pytest
import torch

from flashrnn_kernels.fused import function
from flashrnn_kernels.fused.plan import plan


@pytest.fixture
def recorded(monkeypatch):
    launches: list[dict] = []
    compiled: list[str] = []

    def fake_kernel(source, name, dynamic_smem=0, device=None):
        compiled.append(name)
        return ("kernel", name, dynamic_smem)

    def fake_launch(kernel, grid, block, args, shared_mem=0, device=None, cooperative=False, clustered=False):
        launches.append({"kernel": kernel, "grid": grid, "block": block, "args": args, "smem": shared_mem,
                         "cooperative": cooperative, "clustered": clustered})

    monkeypatch.setattr(function, "get_kernel", fake_kernel)
    monkeypatch.setattr(function, "launch", fake_launch)
    monkeypatch.setattr(function, "_device_gpu", lambda index: "H200")
    monkeypatch.setattr(function, "_allow_nonportable_cluster",
                        lambda kernel, device: compiled.append("cluster opt-in"))
    function._cached_launch.cache_clear()
    function._kernel.cache_clear()
    yield launches, compiled
    function._cached_launch.cache_clear()
    function._kernel.cache_clear()


def _inputs(B, T, NH, DH, dtype, grad):
    shapes = [(B, T, 4, NH, DH), (4, NH, DH, DH), (4, NH, DH), (2, B, NH, DH)]
    return [torch.randn(s, dtype=torch.float32).to(dtype).requires_grad_(grad) for s in shapes]


@pytest.mark.parametrize("B,NH,DH", [(16, 12, 64), (3, 1, 768), (17, 48, 16), (5, 3, 256)])
def test_launch_record_matches_plan(recorded, B, NH, DH):
    launches, compiled = recorded
    Wx, R, b, states = _inputs(B, 5, NH, DH, torch.bfloat16, grad=False)
    for _ in range(3):
        function.fused_forward(Wx, R, b, states, "lstm", training=False)
    expected = plan("lstm", B, NH, DH, torch.bfloat16, gpu="H200", direction="forward")
    opt_in = ["cluster opt-in"] if expected.nonportable_cluster else []
    assert compiled == ["flashrnn_fused_forward", *opt_in]
    assert len(launches) == 3
    first = launches[0]
    assert first["grid"] == expected.grid(B) and first["block"] == expected.block
    assert first["smem"] == expected.smem_bytes
    scratch = first["args"][8]
    assert (scratch is None) == (expected.scratch_bytes(B) == 0)
    if scratch is not None:
        assert scratch.numel() == expected.scratch_bytes(B)
    exchange = first["args"][9]  # zeroed for the global exchange, which is launched cooperatively
    assert first["cooperative"] == expected.global_exchange == (exchange is not None)
    if exchange is not None:
        assert exchange.numel() == expected.exchange_bytes(B) and not exchange.any()
    assert first["args"][6] is None and first["args"][7] is None  # nothing saved without gradients
    assert function._cached_launch.cache_info().misses == 1


@pytest.mark.parametrize("bindings", [True, False])
def test_backward_of_block_pairs_launches_clustered_and_cooperative(recorded, monkeypatch, bindings):
    """The 1x768 backward plans pairs of blocks (clusters of two) on an H200, launched through cuLaunchKernelEx; without
    cuda-bindings it plans single blocks, and asking for pairs says what is missing."""
    launches, compiled = recorded
    monkeypatch.setattr(function, "launch_ex_available", lambda: bindings)
    B, T, NH, DH = 3, 4, 1, 768
    Wx, R, b, states = _inputs(B, T, NH, DH, torch.bfloat16, grad=False)
    h, last, gates_save, states_save = function.fused_forward(Wx, R, b, states, "lstm", training=True)
    function.fused_backward(R, states, h, gates_save, states_save, torch.ones_like(h), torch.ones_like(last), "lstm")
    expected = plan("lstm", B, NH, DH, torch.bfloat16, gpu="H200", direction="backward",
                    exchange=None if bindings else "partials")
    assert expected.partial_sums and expected.pair_blocks == (2 if bindings else 1)
    back = launches[1]
    assert back["cooperative"] and back["clustered"] == bindings
    assert back["grid"] == expected.grid(B) and back["smem"] == expected.smem_bytes
    assert back["args"][12].numel() == expected.exchange_bytes(B) and not back["args"][12].any()
    if not bindings:
        monkeypatch.setattr(function, "EXCHANGE", "pairs")
        with pytest.raises(RuntimeError, match="cuda-bindings"):
            function.fused_backward(R, states, h, gates_save, states_save, torch.ones_like(h), torch.ones_like(last),
                                    "lstm")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_backward_gradients_have_input_shapes_and_dtype(recorded, dtype):
    launches, compiled = recorded
    B, T, NH, DH = 4, 6, 2, 32
    Wx, R, b, states = _inputs(B, T, NH, DH, dtype, grad=False)
    h, last, gates_save, states_save = function.fused_forward(Wx, R, b, states, "lstm", training=True)
    assert launches[0]["args"][6] is gates_save and gates_save.dtype == torch.float32  # saved gate values stay fp32
    assert states_save.shape == (1, B, T + 1, NH, DH) and states_save.dtype == torch.float32
    grads = function.fused_backward(R, states, h, gates_save, states_save, torch.ones_like(h), torch.ones_like(last),
                                    "lstm")
    assert compiled == ["flashrnn_fused_forward", "flashrnn_fused_backward"]
    d_wx = launches[1]["args"][7]
    assert grads[0] is d_wx and d_wx.dtype == dtype and d_wx.shape == (B, T, 4, NH, DH)
    for t, grad in zip((Wx, R, b, states), grads):
        assert grad.shape == t.shape and grad.dtype == dtype


@pytest.mark.parametrize("B,T,NH,DH", [(1, 1, 1, 16), (3, 1, 1, 16), (1, 5, 2, 16), (4, 6, 1, 32), (3, 7, 3, 16)])
def test_recurrent_weight_grad_matches_the_sum_over_steps(B, T, NH, DH):
    gen = torch.Generator().manual_seed(B * 100 + T * 10 + NH)
    d_wx = torch.randn(B, T, 4, NH, DH, generator=gen, dtype=torch.float64)
    h_prev = torch.randn(B, T, NH, DH, generator=gen, dtype=torch.float64)
    expected = torch.einsum("btgno,btni->gnoi", d_wx, h_prev)
    got = function.recurrent_weight_grad(d_wx, h_prev)
    assert got.shape == (4, NH, DH, DH) and got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
