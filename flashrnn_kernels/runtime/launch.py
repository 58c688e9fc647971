"""Launch compiled kernels on PyTorch's current CUDA stream with torch tensors as arguments (no copies).

The usual launch goes straight to the driver (`cupy.cuda.driver.launchKernel`, i.e. cuLaunchKernel) with a
parameter block prepared once per (kernel, device, argument types) and thread: one 8-byte slot per argument, a
constant array holding each slot's address, and a `struct` layout that writes every slot in one call. Per launch
only the slot values are written; the driver copies them during the call, so the block is free again when it
returns. Arguments are converted as `as_args` converts them: tensors and None become pointers (None is 0), Python
ints and bools int32 (OverflowError outside its range), floats float32; the numpy scalars int32, uint32, int64,
uint64 and float32 keep their width. Any other argument type, a value `struct` refuses (an int beyond int32, a
float beyond float32) and a thread without a current CUDA context take CuPy's own launch, whose result is the same.
A programmatic dependent launch (`launch(..., programmatic=True)`) passes the same block to cuLaunchKernelEx.
"""
from __future__ import annotations

import struct
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

_NULL = np.uint64(0)
_cupy_streams: dict[tuple[int, int], Any] = {}
_local = threading.local()  # .blocks: {(id(kernel), device index, argument types): _ParamBlock or None}
_launch_dims_cache: dict[tuple, tuple[int, ...]] = {}
_LAUNCH_DIMS_KEPT = 4096
_programmatic_devices: dict[int, bool] = {}
_programmatic_configs: dict[tuple, tuple[Any, Any]] = {}  # (function, dims, smem, stream) -> (config, CUfunction)

_POINTER, _INT32 = "Q", "i4x"  # little-endian slot layouts: 8 bytes, or 4 bytes then 4 zero bytes
_NUMPY_SLOTS = {np.int32: _INT32, np.uint32: "I4x", np.int64: "q", np.uint64: "Q", np.float32: "f4x"}


def pointer(t: torch.Tensor | None) -> np.uint64:
    """A device pointer kernel argument; None becomes a null pointer."""
    return _NULL if t is None else np.uint64(t.data_ptr())


def as_args(values: Sequence[Any]) -> tuple:
    """Kernel arguments: tensors and None become pointers, Python ints int32, floats float32."""
    args = []
    for v in values:
        kind = type(v)
        if v is None:
            args.append(_NULL)
        elif kind is int:
            if not -(2**31) <= v < 2**31:
                raise OverflowError(f"kernel int argument {v} does not fit in int32")
            args.append(np.int32(v))
        elif isinstance(v, torch.Tensor):
            args.append(np.uint64(v.data_ptr()))
        elif kind is bool:
            args.append(np.int32(int(v)))
        elif isinstance(v, int):
            if not -(2**31) <= v < 2**31:
                raise OverflowError(f"kernel int argument {v} does not fit in int32")
            args.append(np.int32(v))
        elif isinstance(v, float):
            args.append(np.float32(v))
        else:
            args.append(v)
    return tuple(args)


def current_stream_handle(device_index: int) -> int:
    """torch's current stream on device `device_index` as a raw cudaStream_t handle (0: the default stream),
    without building a `torch.cuda.Stream`."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:
        return torch.cuda.current_stream(device_index).cuda_stream
    return raw(device_index)


def _slot(kind: type) -> str | None:
    """The slot layout of an argument of type `kind`, in `as_args`'s order of checks; None: CuPy's launch."""
    if kind is type(None) or issubclass(kind, torch.Tensor):
        return _POINTER
    if issubclass(kind, int):  # bool and int subclasses included
        return _INT32
    if issubclass(kind, float):  # numpy.float64 included: as_args makes it float32 as well
        return "f4x"
    return _NUMPY_SLOTS.get(kind)


def _filler(kinds: tuple[type, ...], pack_into: Any, slots: np.ndarray) -> Any:
    """`fill(args)`: every slot written by one `pack_into` call, each argument converted inline for its type (None
    to 0, a tensor to its data pointer, anything else as it is); compiled once per argument-type signature, so that a
    launch makes no Python call per argument."""
    values = ", ".join("0" if kind is type(None) else f"args[{i}].data_ptr()" if issubclass(kind, torch.Tensor)
                       else f"args[{i}]" for i, kind in enumerate(kinds))
    scope = {"pack_into": pack_into, "slots": slots}
    exec(f"def fill(args):\n    pack_into(slots, 0{', ' if values else ''}{values})\n", scope)
    return scope["fill"]


class _ParamBlock:
    """A kernel's parameter block for one argument-type signature: `fill(args)` writes every slot."""

    __slots__ = ("addresses", "fill", "function", "handle", "kernel", "kernel_params", "slots")

    def __init__(self, kernel: Any, kinds: tuple[type, ...], layouts: list[str]):
        self.kernel = kernel  # keeps id(kernel) in the cache key from being reused
        self.function = kernel.kernel  # the cupy.cuda.function.Function of the current device (keeps its module)
        self.handle = self.function.ptr  # the CUfunction
        self.slots = np.zeros(len(kinds), dtype=np.uint64)
        base = self.slots.ctypes.data
        self.addresses = np.array([base + 8 * i for i in range(len(kinds))], dtype=np.uint64)
        self.kernel_params = self.addresses.ctypes.data if kinds else 0  # void** kernelParams
        self.fill = _filler(kinds, struct.Struct("<" + "".join(layouts)).pack_into, self.slots)


def _param_block(cupy: Any, kernel: Any, index: int, kinds: tuple[type, ...]) -> _ParamBlock | None:
    """This thread's parameter block for `kernel` on device `index` and these argument types, made on first use;
    None where the launch goes through CuPy (an unsupported type, or no current context in this thread yet)."""
    try:
        blocks = _local.blocks
    except AttributeError:
        blocks = _local.blocks = {}
    key = (id(kernel), index, kinds)
    found = blocks.get(key, False)
    if found is not False:
        return found
    layouts = [_slot(kind) for kind in kinds]
    if None in layouts:
        blocks[key] = None
        return None
    if not cupy.cuda.driver.ctxGetCurrent():  # CuPy's launch makes the device's primary context current first
        return None
    found = blocks[key] = _ParamBlock(kernel, kinds, layouts)
    return found


def _dims(extent: Sequence[int]) -> tuple[int, int, int]:
    """A grid or block shape as three extents, each at least 1 (as CuPy's Function.__call__ pads and clamps)."""
    x, y, z = (*extent, 1, 1)[:3]
    return max(1, x), max(1, y), max(1, z)


def _launch_dims(grid: Sequence[int], block: Sequence[int]) -> tuple[int, ...]:
    """(grid x, y, z, block x, y, z) as the driver takes them, remembered for hashable (tuple) shapes."""
    try:
        return _launch_dims_cache[grid, block]
    except KeyError:
        pass
    except TypeError:  # a list: not hashable
        return (*_dims(grid), *_dims(block))
    if len(_launch_dims_cache) >= _LAUNCH_DIMS_KEPT:
        _launch_dims_cache.clear()
    found = _launch_dims_cache[grid, block] = (*_dims(grid), *_dims(block))
    return found


def _device_index(device: torch.device | int | str | None) -> int:
    if device is None:
        return torch.cuda.current_device()
    if type(device) is int:
        return device
    device = device if isinstance(device, torch.device) else torch.device(device)
    return torch.cuda.current_device() if device.index is None else device.index


class _StreamHandle:
    """A raw stream handle offered through the CUDA stream protocol (`__cuda_stream__`: version 0, handle)."""

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return 0, self.handle


def cupy_stream(index: int, handle: int) -> Any:
    """The CuPy view of a raw stream of device `index`, made once per (device, stream handle): through
    `cupy.cuda.Stream.from_external` where CuPy has it (it deprecates `ExternalStream` from 14.2), else
    `ExternalStream`. Callers use it inside `cupy.cuda.Device(index)` or on the current device, its own."""
    key = (index, handle)
    found = _cupy_streams.get(key)
    if found is None:
        import cupy

        from_external = getattr(cupy.cuda.Stream, "from_external", None)
        found = _cupy_streams[key] = (from_external(_StreamHandle(handle)) if from_external is not None
                                      else cupy.cuda.ExternalStream(handle, index))
    return found


def launch_ex_available() -> bool:
    """Whether this process has cuLaunchKernelEx, which CuPy does not wrap, from the cuda-bindings package: cooperative
    launches of kernels compiled with cluster dimensions and programmatic dependent launches take it."""
    try:
        from cuda.bindings import driver  # noqa: F401
    except ImportError:
        return False
    return True


def capture_id(handle: int) -> int | None:
    """The id of the CUDA graph capture that raw stream `handle` takes part in (unique in the process), or None when
    the stream is not capturing or cuda-bindings is not installed."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    err, status, capture, *_ = driver.cuStreamGetCaptureInfo(driver.CUstream(handle))
    if err != driver.CUresult.CUDA_SUCCESS or status != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE:
        return None
    return int(capture)


def _too_large(kernel: Any, grid: tuple[int, ...], detail: str = "") -> RuntimeError:
    """The error of a cooperative grid that the GPU cannot hold at once."""
    return RuntimeError(f"the grid {tuple(grid)} of {kernel.name} needs all its blocks resident at once, more than "
                        f"this GPU holds (fewer SMs than its model, MIG, or other work?){detail}")


def _launch_config(driver: Any, dims: tuple[int, ...], shared_mem: int, handle: int, attribute: str,
                   field: str) -> Any:
    """A cuLaunchKernelEx configuration: grid and block `dims` (six extents), `shared_mem` bytes, raw stream `handle`
    and one launch attribute, CU_LAUNCH_ATTRIBUTE_<attribute>, whose value's `field` is 1."""
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ, config.blockDimX, config.blockDimY, config.blockDimZ = dims
    config.sharedMemBytes = shared_mem
    config.hStream = driver.CUstream(handle)
    value = driver.CUlaunchAttribute()
    value.id = getattr(driver.CUlaunchAttributeID, f"CU_LAUNCH_ATTRIBUTE_{attribute}")
    setattr(value.value, field, 1)
    config.attrs = [value]
    config.numAttrs = 1
    return config


def _launch_clustered_cooperative(kernel: Any, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any],
                                  shared_mem: int, handle: int) -> None:
    """cuLaunchKernelEx with the cooperative attribute, for a kernel whose cluster dimensions are compiled in
    (cuLaunchCooperativeKernel refuses those)."""
    from cuda.bindings import driver

    values = [np.asarray(v) for v in as_args(args)]  # 0-d arrays hold each argument's bytes
    params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
    config = _launch_config(driver, (*_dims(grid), *_dims(block)), shared_mem, handle, "COOPERATIVE", "cooperative")
    (err,) = driver.cuLaunchKernelEx(config, driver.CUfunction(kernel.kernel.ptr), params.ctypes.data, 0)
    if err == driver.CUresult.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE:
        raise _too_large(kernel, grid)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuLaunchKernelEx of {kernel.name} (cooperative, clustered) failed: {err}")


def _programmatic_available(index: int) -> bool:
    """Whether launches on device `index` can be programmatic dependent launches: sm_90 or newer, and cuda-bindings
    (for cuLaunchKernelEx) importable."""
    found = _programmatic_devices.get(index)
    if found is None:
        found = torch.cuda.get_device_capability(index) >= (9, 0) and launch_ex_available()
        _programmatic_devices[index] = found
    return found


def _launch_programmatic(prepared: _ParamBlock, dims: tuple[int, ...], shared_mem: int, handle: int) -> None:
    """cuLaunchKernelEx of a prepared parameter block with programmatic stream serialization allowed, its launch
    configuration made once per (function, shape, shared memory, stream)."""
    from cuda.bindings import driver

    key = (prepared.handle, dims, shared_mem, handle)
    found = _programmatic_configs.get(key)
    if found is None:
        config = _launch_config(driver, dims, shared_mem, handle, "PROGRAMMATIC_STREAM_SERIALIZATION",
                                "programmaticStreamSerializationAllowed")
        if len(_programmatic_configs) >= _LAUNCH_DIMS_KEPT:
            _programmatic_configs.clear()
        found = _programmatic_configs[key] = (config, driver.CUfunction(prepared.handle))
    (err,) = driver.cuLaunchKernelEx(found[0], found[1], prepared.kernel_params, 0)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuLaunchKernelEx of {prepared.kernel.name} (programmatic dependent launch) failed: {err}")


def launch(kernel: Any, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any], shared_mem: int = 0,
           device: torch.device | None = None, stream: torch.cuda.Stream | int | None = None,
           cooperative: bool = False, clustered: bool = False, programmatic: bool = False) -> None:
    """Launch `kernel` (a `cupy.RawKernel`) on `stream`: a `torch.cuda.Stream`, a raw stream handle of `device`, or
    None for torch's current stream of `device` (`device` itself defaulting to the current device). `cooperative`
    launches it with cuLaunchCooperativeKernel, which runs every block at once or fails (blocks that wait on each
    other need that guarantee); a grid too large for the GPU then raises a RuntimeError that says so. `clustered`
    (with `cooperative`): the kernel has cluster dimensions compiled in, so the launch goes through cuLaunchKernelEx
    (`launch_ex_available`). `programmatic`: a programmatic dependent launch (cuLaunchKernelEx with
    programmatic stream serialization), which may begin while the previous kernel on the stream ends, for a kernel
    whose blocks wait for it (griddepcontrol.wait) before they touch memory; on sm_90 and newer with cuda-bindings and
    a prepared parameter block, a plain launch otherwise.

    When the stream's device is CuPy's current device, the launch goes straight to the driver with this thread's
    prepared parameter block (see the module docstring), or, for arguments it does not cover, through the kernel's
    `cupy.cuda.function.Function` with the stream passed explicitly; either way no device or stream context is
    switched. Otherwise both contexts are entered first and the kernel is called through CuPy."""
    import cupy

    if stream is None:
        index = _device_index(device)
        handle = current_stream_handle(index)
    elif isinstance(stream, int):
        index, handle = _device_index(device), stream
    else:
        index, handle = stream.device_index, stream.cuda_stream
    if cooperative and clustered:
        with cupy.cuda.Device(index):
            _launch_clustered_cooperative(kernel, grid, block, args, shared_mem, handle)
        return
    if cooperative:
        try:
            with cupy.cuda.Device(index):
                kernel.kernel(tuple(grid), tuple(block), as_args(args), shared_mem, cupy_stream(index, handle),
                              enable_cooperative_groups=True)
        except (ValueError, cupy.cuda.driver.CUDADriverError) as exc:  # CuPy's grid check, or the driver's
            if isinstance(exc, cupy.cuda.driver.CUDADriverError) and "COOPERATIVE_LAUNCH_TOO_LARGE" not in str(exc):
                raise
            raise _too_large(kernel, grid, f": {exc}") from exc
        return
    if cupy.cuda.runtime.getDevice() != index:
        with cupy.cuda.Device(index), cupy_stream(index, handle):
            kernel(tuple(grid), tuple(block), as_args(args), shared_mem=shared_mem)
        return
    prepared = _param_block(cupy, kernel, index, tuple(map(type, args)))
    if prepared is not None:
        try:
            prepared.fill(args)
        except (struct.error, OverflowError):  # out of int32 / float32 range: as_args below raises or converts
            prepared = None
    if prepared is None:
        kernel.kernel(tuple(grid), tuple(block), as_args(args), shared_mem, cupy_stream(index, handle))
        return
    if programmatic and _programmatic_available(index):
        _launch_programmatic(prepared, _launch_dims(grid, block), shared_mem, handle)
        return
    cupy.cuda.driver.launchKernel(prepared.handle, *_launch_dims(grid, block), shared_mem, handle,
                                  prepared.kernel_params, 0)
