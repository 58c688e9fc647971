"""runtime.launch against a fake `cupy` whose driver reads the parameter block the way cuLaunchKernel does.

The fake `launchKernel` follows the `void**` it is given to each slot and reads as many bytes as the kernel's
parameter takes, so the tests check the exact bytes a kernel would receive: pointers, null pointers, int32 of both
signs, bools, float32, numpy scalars of every width, against `as_args` (what CuPy's own launch passes). They also
cover the int32 range error, CuPy's launch for other argument types, a thread without a current context, another
device than CuPy's current one, the stream handle, and one parameter block per thread.
"""
from __future__ import annotations

import ctypes
import struct
import sys
import threading
import types

import numpy as np
import pytest
import torch

from flashrnn_kernels.runtime import launch as launch_module
from flashrnn_kernels.runtime.launch import as_args, current_stream_handle, launch

STREAM = 0x5EED
DEVICE = torch.device("cuda", 0)


class FakeFunction:
    """A `cupy.cuda.function.Function`: a CUfunction handle, and CuPy's launch (recorded)."""

    def __init__(self, handle: int, sizes: tuple[int, ...]):
        self.ptr, self.sizes, self.calls, self.cooperative_limit = handle, sizes, [], None

    def __call__(self, grid, block, args, shared_mem=0, stream=None, enable_cooperative_groups=False):
        limit = self.cooperative_limit
        if enable_cooperative_groups and limit is not None and grid[0] * grid[1] > limit:
            raise CUDADriverError("CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: too many blocks in cooperative launch")
        self.calls.append({"grid": grid, "block": block, "args": args, "smem": shared_mem, "stream": stream,
                           "cooperative": enable_cooperative_groups})


class FakeKernel:
    """A `cupy.RawKernel` whose parameters take `sizes` bytes each."""

    def __init__(self, fake, sizes: tuple[int, ...]):
        self.kernel = FakeFunction(0xC0DE00 + len(fake.functions), sizes)
        self.name = "fake_kernel"
        fake.functions[self.kernel.ptr] = self.kernel
        self.calls = []
        self.fake = fake

    def __call__(self, grid, block, args, shared_mem=0):
        self.calls.append({"grid": grid, "block": block, "args": args, "smem": shared_mem,
                           "entered": list(self.fake.entered)})


class FakeExternalStream:
    def __init__(self, handle, device):
        self.handle, self.device, self.fake = handle, device, None

    def __enter__(self):
        self.fake.entered.append(("stream", self.handle, self.device))
        return self

    def __exit__(self, *exc):
        self.fake.entered.pop()


class CUDADriverError(RuntimeError):
    """cupy.cuda.driver.CUDADriverError."""


def make_fake():
    """(module shaped like cupy, its state): devices, context, launches decoded from the parameter blocks."""
    fake = types.SimpleNamespace(device=0, context=0xC7C7, functions={}, launches=[], entered=[])

    def launch_kernel(f, gx, gy, gz, bx, by, bz, shared_mem, stream, kernel_params, extra):
        for value in (f, gx, gy, gz, bx, by, bz, shared_mem, stream, kernel_params, extra):
            assert type(value) is int and value >= 0  # what the Cython signature (unsigned int / intptr_t) takes
        sizes = fake.functions[f].sizes
        slots = (ctypes.c_uint64 * len(sizes)).from_address(kernel_params) if sizes else []
        fake.launches.append({
            "function": f, "grid": (gx, gy, gz), "block": (bx, by, bz), "smem": shared_mem, "stream": stream,
            "kernel_params": kernel_params, "extra": extra, "slot_addresses": list(slots),
            "bytes": [ctypes.string_at(address, size) for address, size in zip(slots, sizes)],
            "slots": [ctypes.string_at(address, 8) for address in slots], "thread": threading.get_ident()})

    class Device:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            fake.entered.append(("device", self.index))
            return self

        def __exit__(self, *exc):
            fake.entered.pop()

    def external_stream(handle, device):  # ExternalStream(ptr, device_id), deprecated from CuPy 14.2
        stream = FakeExternalStream(handle, device)
        stream.fake = fake
        return stream

    def from_external(obj):  # Stream.from_external: any object with __cuda_stream__ -> (0, handle); device unknown
        version, handle = obj.__cuda_stream__()
        assert version == 0 and type(handle) is int
        return external_stream(handle, None)

    module = types.ModuleType("cupy")
    module.cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDevice=lambda: fake.device),
        driver=types.SimpleNamespace(launchKernel=launch_kernel, ctxGetCurrent=lambda: fake.context,
                                     CUDADriverError=CUDADriverError),
        Device=Device, ExternalStream=external_stream, Stream=types.SimpleNamespace(from_external=from_external))
    fake.module = module
    return module, fake


@pytest.fixture
def fake(monkeypatch):
    module, state = make_fake()
    monkeypatch.setitem(sys.modules, "cupy", module)
    monkeypatch.setattr(launch_module, "_local", threading.local())
    monkeypatch.setattr(launch_module, "_cupy_streams", {})
    return state


def expected_bytes(args) -> list[bytes]:
    """The bytes CuPy's launch passes for each argument: those of the numpy scalar `as_args` makes."""
    return [np.asarray(value).tobytes() for value in as_args(args)]


def test_parameter_block_holds_the_exact_argument_bytes(fake):
    a, b = torch.arange(6.0), torch.zeros(3, dtype=torch.int32)
    args = (a, b, None, -5, 7, 2**31 - 1, -(2**31), True, False, 1.5, -0.1, float("nan"), np.float64(0.1),
            np.int64(-2), np.uint64(2**64 - 1), np.int32(-9), np.uint32(2**32 - 1), np.float32(0.1))
    sizes = (8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 8, 8, 4, 4, 4)
    kernel = FakeKernel(fake, sizes)
    launch(kernel, (3,), (128, 2), args, shared_mem=4096, device=DEVICE, stream=STREAM)
    assert kernel.kernel.calls == [] and kernel.calls == []
    (record,) = fake.launches
    assert record["function"] == kernel.kernel.ptr and record["extra"] == 0
    assert record["grid"] == (3, 1, 1) and record["block"] == (128, 2, 1)
    assert record["smem"] == 4096 and record["stream"] == STREAM
    got = record["bytes"]
    assert got == expected_bytes(args)
    assert got[0] == a.data_ptr().to_bytes(8, "little") and got[2] == bytes(8)
    assert got[3] == b"\xfb\xff\xff\xff" and got[6] == b"\x00\x00\x00\x80" and got[7] == b"\x01\x00\x00\x00"
    assert got[9] == struct.pack("<f", 1.5) and got[12] == np.float32(0.1).tobytes()
    assert got[13] == b"\xfe" + b"\xff" * 7 and got[14] == b"\xff" * 8
    for slot, size in zip(record["slots"], sizes):  # a 4-byte value leaves its slot's upper half zero
        assert slot[size:] == bytes(8 - size)


def test_block_is_reused_and_rewritten_on_every_call(fake):
    kernel = FakeKernel(fake, (8, 4, 4))
    first, second = torch.ones(2), torch.ones(5)
    launch(kernel, (1,), (32,), (first, 3, 0.25), device=DEVICE, stream=STREAM)
    launch(kernel, [2, 2], (64,), (second, -4, 8.0), device=DEVICE, stream=STREAM + 1)  # a list shape too
    one, two = fake.launches
    assert one["kernel_params"] == two["kernel_params"] and one["slot_addresses"] == two["slot_addresses"]
    assert one["bytes"] == expected_bytes((first, 3, 0.25))
    assert two["bytes"] == expected_bytes((second, -4, 8.0)) and two["stream"] == STREAM + 1
    assert one["grid"] == (1, 1, 1) and two["grid"] == (2, 2, 1) and two["block"] == (64, 1, 1)


def test_a_new_argument_signature_gets_its_own_block(fake):
    kernel = FakeKernel(fake, (8, 4))
    t = torch.ones(1)
    launch(kernel, (1,), (1,), (t, 2), device=DEVICE, stream=STREAM)
    launch(kernel, (1,), (1,), (None, 2.0), device=DEVICE, stream=STREAM)  # other types, other slot layouts
    launch(kernel, (1,), (1,), (t, 2), device=DEVICE, stream=STREAM)
    one, two, three = fake.launches
    assert two["bytes"] == [bytes(8), struct.pack("<f", 2.0)]
    assert one["kernel_params"] != two["kernel_params"] and one["kernel_params"] == three["kernel_params"]


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1, 2**40])
def test_int_beyond_int32_raises_and_launches_nothing(fake, value):
    kernel = FakeKernel(fake, (8, 4))
    with pytest.raises(OverflowError, match=f"kernel int argument {value} does not fit in int32"):
        launch(kernel, (1,), (1,), (torch.ones(1), value), device=DEVICE, stream=STREAM)
    assert fake.launches == [] and kernel.kernel.calls == []


def test_float_beyond_float32_goes_through_cupy_as_infinity(fake):
    kernel = FakeKernel(fake, (4,))
    with pytest.warns(RuntimeWarning, match="overflow"):
        launch(kernel, (1,), (1,), (1e300,), device=DEVICE, stream=STREAM)
    assert fake.launches == []
    (call,) = kernel.kernel.calls
    assert call["args"] == (np.float32(np.inf),) and type(call["args"][0]) is np.float32


def test_other_argument_types_go_through_cupys_launch(fake):
    kernel = FakeKernel(fake, (8, 2))
    marker = object()  # e.g. a cupy.ndarray, which CuPy's launch understands
    t = torch.ones(3)
    launch(kernel, (4,), (8,), (t, np.float16(1.5)), shared_mem=16, device=DEVICE, stream=STREAM)
    launch(kernel, (4,), (8,), (t, marker), device=DEVICE, stream=STREAM)
    assert fake.launches == []
    first, second = kernel.kernel.calls
    assert first["args"][0] == np.uint64(t.data_ptr()) and first["args"][1] == np.float16(1.5)
    assert first["grid"] == (4,) and first["block"] == (8,) and first["smem"] == 16
    assert (first["stream"].handle, first["stream"].device) == (STREAM, None)
    assert second["args"][1] is marker


def test_a_thread_without_context_goes_through_cupy_once(fake):
    kernel = FakeKernel(fake, (4,))
    fake.context = 0
    launch(kernel, (1,), (1,), (1,), device=DEVICE, stream=STREAM)
    assert fake.launches == [] and len(kernel.kernel.calls) == 1
    fake.context = 0xC7C7  # CuPy's launch made the primary context current
    launch(kernel, (1,), (1,), (2,), device=DEVICE, stream=STREAM)
    assert len(kernel.kernel.calls) == 1 and fake.launches[0]["bytes"] == [struct.pack("<i", 2)]


def test_stream_of_another_device_enters_its_device_and_stream(fake):
    fake.device = 1
    kernel = FakeKernel(fake, (8, 4))
    t = torch.ones(2)
    launch(kernel, [2, 3], [32], (t, 5), shared_mem=64, device=DEVICE, stream=STREAM)
    assert fake.launches == [] and kernel.kernel.calls == []
    (call,) = kernel.calls
    assert call["entered"] == [("device", 0), ("stream", STREAM, None)]
    assert call["grid"] == (2, 3) and call["block"] == (32,) and call["smem"] == 64
    assert call["args"] == (np.uint64(t.data_ptr()), np.int32(5)) and type(call["args"][1]) is np.int32
    assert fake.entered == []


def test_cupy_without_from_external_takes_external_stream_with_the_device(fake):
    del fake.module.cuda.Stream.from_external  # CuPy before 14
    fake.device = 1
    kernel = FakeKernel(fake, (4,))
    launch(kernel, (1,), (1,), (1,), device=DEVICE, stream=STREAM)
    (call,) = kernel.calls
    assert call["entered"] == [("device", 0), ("stream", STREAM, 0)]


def test_torch_stream_and_current_stream(fake, monkeypatch):
    kernel = FakeKernel(fake, (4,))
    fake.device = 2
    launch(kernel, (1,), (1,), (1,), stream=types.SimpleNamespace(device_index=2, cuda_stream=0xAB))
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 0x1000 + index, raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    assert current_stream_handle(5) == 0x1005
    launch(kernel, (1,), (1,), (1,))
    launch(kernel, (1,), (1,), (1,), device=torch.device("cuda"))
    launch(kernel, (1,), (1,), (1,), device=torch.device("cuda", 2))
    assert [record["stream"] for record in fake.launches] == [0xAB, 0x1002, 0x1002, 0x1002]


def test_each_thread_writes_its_own_block(fake):
    kernel = FakeKernel(fake, (8, 4))
    tensors = [torch.ones(1) for _ in range(4)]
    start, end = threading.Barrier(len(tensors)), threading.Barrier(len(tensors))

    def worker(t):
        start.wait()
        for i in range(300):
            launch(kernel, (1,), (1,), (t, i), device=DEVICE, stream=STREAM)
        end.wait()  # every thread's block stays alive until all are done, so none reuses another's memory

    threads = [threading.Thread(target=worker, args=(t,)) for t in tensors]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(fake.launches) == 300 * len(tensors)
    by_thread: dict[int, set[int]] = {}
    for record in fake.launches:
        by_thread.setdefault(record["thread"], set()).add(record["kernel_params"])
        assert record["bytes"][0] in {t.data_ptr().to_bytes(8, "little") for t in tensors}
    assert all(len(params) == 1 for params in by_thread.values())
    assert len(set.union(*by_thread.values())) == len(tensors)
    for t in tensors:  # each thread saw its own tensor with 0, 1, ..., 299 in order
        mine = [r for r in fake.launches if r["bytes"][0] == t.data_ptr().to_bytes(8, "little")]
        assert [struct.unpack("<i", r["bytes"][1])[0] for r in mine] == list(range(300))


def test_kernel_without_arguments(fake):
    kernel = FakeKernel(fake, ())
    launch(kernel, (0,), (0, 0, 0), (), device=DEVICE, stream=STREAM)
    (record,) = fake.launches
    assert record["kernel_params"] == 0 and record["bytes"] == []
    assert record["grid"] == (1, 1, 1) and record["block"] == (1, 1, 1)  # CuPy clamps extents to 1 as well


def test_cooperative_launch_goes_through_cupy_on_the_stream(fake):
    kernel = FakeKernel(fake, (8, 4))
    t = torch.arange(3.0)
    launch(kernel, (48, 2), (256,), (t, 7), shared_mem=1024, device=DEVICE, stream=STREAM, cooperative=True)
    assert fake.launches == [] and kernel.calls == []
    (call,) = kernel.kernel.calls
    assert call["cooperative"] and call["grid"] == (48, 2) and call["block"] == (256,) and call["smem"] == 1024
    assert call["stream"].handle == STREAM and call["args"] == as_args((t, 7))


def test_cooperative_grid_too_large_says_why(fake):
    kernel = FakeKernel(fake, (8,))
    kernel.kernel.cooperative_limit = 132
    with pytest.raises(RuntimeError, match=r"needs all its blocks resident at once.*COOPERATIVE_LAUNCH_TOO_LARGE"):
        launch(kernel, (48, 3), (256,), (None,), device=DEVICE, stream=STREAM, cooperative=True)
    launch(kernel, (48, 3), (256,), (None,), device=DEVICE, stream=STREAM)  # an ordinary launch is not limited
    assert len(fake.launches) == 1 and kernel.kernel.calls == []


def fake_bindings(monkeypatch, fake, capability=(9, 0)):
    """A fake `cuda.bindings.driver` whose cuLaunchKernelEx reads the parameter block as the fake launchKernel does,
    on a device of compute capability `capability`; its launches go to fake.launches with their configuration."""
    def launch_ex(config, function, kernel_params, extra):
        sizes = fake.functions[function[1]].sizes
        slots = (ctypes.c_uint64 * len(sizes)).from_address(kernel_params) if sizes else []
        fake.launches.append({
            "ex": True, "function": function[1], "config": config, "kernel_params": kernel_params, "extra": extra,
            "grid": (config.gridDimX, config.gridDimY, config.gridDimZ),
            "block": (config.blockDimX, config.blockDimY, config.blockDimZ), "smem": config.sharedMemBytes,
            "stream": config.hStream[1], "attrs": [(a.id, vars(a.value)) for a in config.attrs[:config.numAttrs]],
            "bytes": [ctypes.string_at(address, size) for address, size in zip(slots, sizes)]})
        return (0,)

    class Value:
        programmaticStreamSerializationAllowed = 0

    class Attribute:
        def __init__(self):
            self.id, self.value = None, Value()

    driver = types.SimpleNamespace(
        CUlaunchConfig=types.SimpleNamespace, CUlaunchAttribute=Attribute, CUstream=lambda h: ("stream", h),
        CUfunction=lambda h: ("function", h), cuLaunchKernelEx=launch_ex,
        CUresult=types.SimpleNamespace(CUDA_SUCCESS=0, CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE=720),
        CUlaunchAttributeID=types.SimpleNamespace(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION="serialization",
                                                  CU_LAUNCH_ATTRIBUTE_COOPERATIVE="cooperative"))
    bindings = types.ModuleType("cuda.bindings")
    bindings.driver = driver
    package = types.ModuleType("cuda")
    package.bindings = bindings
    for name, module in (("cuda", package), ("cuda.bindings", bindings), ("cuda.bindings.driver", driver)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capability)
    monkeypatch.setattr(launch_module, "_programmatic_devices", {})
    monkeypatch.setattr(launch_module, "_programmatic_configs", {})


def test_programmatic_launch_passes_the_block_to_cuLaunchKernelEx(fake, monkeypatch):
    fake_bindings(monkeypatch, fake)
    kernel = FakeKernel(fake, (8, 4, 4))
    t, u = torch.ones(2), torch.ones(3)
    launch(kernel, (5, 2), (32, 4), (t, -3, 0.5), shared_mem=2048, device=DEVICE, stream=STREAM, programmatic=True)
    launch(kernel, (5, 2), (32, 4), (u, 9, 2.0), shared_mem=2048, device=DEVICE, stream=STREAM, programmatic=True)
    launch(kernel, (5, 2), (32, 4), (u, 9, 2.0), shared_mem=2048, device=DEVICE, stream=STREAM + 1, programmatic=True)
    one, two, three = fake.launches
    assert one["ex"] and one["function"] == kernel.kernel.ptr and one["extra"] == 0
    assert one["grid"] == (5, 2, 1) and one["block"] == (32, 4, 1) and one["smem"] == 2048 and one["stream"] == STREAM
    assert one["attrs"] == [("serialization", {"programmaticStreamSerializationAllowed": 1})]
    assert one["bytes"] == expected_bytes((t, -3, 0.5)) and two["bytes"] == expected_bytes((u, 9, 2.0))
    assert one["config"] is two["config"] and one["kernel_params"] == two["kernel_params"]  # made once, reused
    assert three["stream"] == STREAM + 1 and three["config"] is not one["config"]


@pytest.mark.parametrize("capability", [(8, 0), (8, 9)])
def test_programmatic_launch_is_a_plain_one_before_sm_90(fake, monkeypatch, capability):
    fake_bindings(monkeypatch, fake, capability)
    kernel = FakeKernel(fake, (8,))
    launch(kernel, (1,), (32,), (torch.ones(1),), device=DEVICE, stream=STREAM, programmatic=True)
    (record,) = fake.launches
    assert "ex" not in record and record["stream"] == STREAM


def test_programmatic_launch_is_a_plain_one_without_cuda_bindings(fake, monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # import fails
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (9, 0))
    monkeypatch.setattr(launch_module, "_programmatic_devices", {})
    kernel, t = FakeKernel(fake, (8,)), torch.ones(1)
    launch(kernel, (1,), (32,), (t,), device=DEVICE, stream=STREAM, programmatic=True)
    (record,) = fake.launches
    assert "ex" not in record and record["bytes"] == expected_bytes((t,))


def test_clustered_cooperative_launch_passes_its_arguments_to_cuLaunchKernelEx(fake, monkeypatch):
    fake_bindings(monkeypatch, fake)
    kernel = FakeKernel(fake, (8, 4))
    t = torch.ones(4)
    launch(kernel, (48, 2), (256,), (t, 7), shared_mem=1024, device=DEVICE, stream=STREAM, cooperative=True,
           clustered=True)
    (record,) = fake.launches
    assert record["ex"] and record["function"] == kernel.kernel.ptr and record["stream"] == STREAM
    assert record["grid"] == (48, 2, 1) and record["block"] == (256, 1, 1) and record["smem"] == 1024
    assert record["attrs"] == [("cooperative", {"cooperative": 1})] and record["bytes"] == expected_bytes((t, 7))
