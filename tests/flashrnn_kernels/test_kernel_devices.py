"""Kernels fetched for a device against a fake `cupy` that keeps, as CuPy does, one function per device for each
kernel and sets an attribute on the current device's function only: the fused and scan kernels get their dynamic
shared-memory limit on the device they run on, whichever device is current (the GPU tests of two devices:
test_devices_gpu.py)."""
from __future__ import annotations

import sys
import types
from contextlib import contextmanager

import hwmodels
import pytest

from flashrnn_kernels.fused import function as fused_function
from flashrnn_kernels.fused.plan import plan as fused_plan
from flashrnn_kernels.runtime import compile as compile_module
from flashrnn_kernels.scan import function as scan_function
from flashrnn_kernels.scan.plan import plan as scan_plan
from flashrnn_kernels.scan.problem import ScanProblem

H200 = hwmodels.load("H200-SXM-141GB")


class FakeFunction:
    def __init__(self, device: int):
        self.device, self.ptr, self.max_dynamic_smem = device, 0xF00 + device, 48 * 1024 - 1


class FakeKernel:
    """A `cupy.RawKernel`: `kernel` is the current device's function, loaded on first use there."""

    def __init__(self, fake):
        self.fake, self.functions = fake, {}

    @property
    def kernel(self) -> FakeFunction:
        device = self.fake.current
        return self.functions.setdefault(device, FakeFunction(device))

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self.kernel.max_dynamic_smem

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value: int) -> None:
        self.kernel.max_dynamic_smem = value


@pytest.fixture
def fake(monkeypatch):
    state = types.SimpleNamespace(current=0, kernels={})

    @contextmanager
    def device(index=None):
        before = state.current
        state.current = before if index is None else index
        try:
            yield
        finally:
            state.current = before

    class RawModule:
        def __init__(self, code, options, backend):
            self.code = code

        def compile(self):
            pass

        def get_function(self, name):
            return state.kernels.setdefault((self.code, name), FakeKernel(state))

    def Device(index=None):  # noqa: N802 (CuPy's name)
        context = device(index)
        context.compute_capability = "90"
        return context

    cupy = types.ModuleType("cupy")
    cupy.RawModule = RawModule
    cupy.cuda = types.SimpleNamespace(Device=Device, compiler=types.SimpleNamespace(CompileException=RuntimeError))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(compile_module, "_modules", {})
    fused_function._kernel.cache_clear()
    scan_function._kernel.cache_clear()
    yield state
    fused_function._kernel.cache_clear()
    scan_function._kernel.cache_clear()


def _limits(kernel: FakeKernel) -> dict[int, int]:
    return {device: f.max_dynamic_smem for device, f in sorted(kernel.functions.items())}


def test_get_kernel_sets_the_limit_on_the_requested_device(fake):
    kernel = compile_module.get_kernel("// k\n", "k", dynamic_smem=100_000, device=1)
    assert fake.current == 0, "the current device is restored"
    assert _limits(kernel) == {1: 100_000}
    assert compile_module.get_kernel("// k\n", "k", dynamic_smem=100_000, device=0) is kernel
    assert _limits(kernel) == {0: 100_000, 1: 100_000}


@pytest.mark.parametrize("first, current", [(0, 0), (1, 0), (0, 1)])
def test_fused_and_scan_kernels_are_ready_on_each_device(fake, first, current):
    """Whichever device a plan's kernel is first fetched for and whichever is current, each device's function
    allows the plan's shared memory."""
    fused = fused_plan("lstm", 16, 12, 64, "bf16", gpu=H200, direction="backward")
    scan = scan_plan(ScanProblem.for_shape("linear", 1, 65536, 64, "float32", "forward"), H200)
    assert fused.smem_bytes > 48 * 1024 and scan.stage_bytes > 48 * 1024, "limits above the default"
    fake.current = current
    for device in (first, 1 - first):
        fused_kernel = fused_function._kernel(fused, device)
        scan_kernel = scan_function._kernel(scan, device)
    assert fake.current == current
    assert _limits(fused_kernel) == {0: fused.smem_bytes, 1: fused.smem_bytes}
    assert _limits(scan_kernel) == {0: scan.stage_bytes, 1: scan.stage_bytes}
