"""Read the live GPU through CuPy and match it to a shipped description (the only CuPy import)."""
from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any

from .errors import DetectError, HwModelError
from .model import GPUModel
from .registry import _shipped, available, find

#: GPUModel field -> CUDA device attribute (cudaDeviceAttr / CUdevice_attribute value).
ATTRIBUTES = {
    "max_threads_per_block": 1,         # MaxThreadsPerBlock
    "smem_per_block": 8,                # MaxSharedMemoryPerBlock
    "warp_size": 10,                    # WarpSize
    "regs_per_block": 12,               # MaxRegistersPerBlock
    "clock_khz": 13,                    # ClockRate (kHz; no longer in cudaDeviceProp on CUDA 13)
    "sm_count": 16,                     # MultiProcessorCount
    "memory_clock_khz": 36,             # MemoryClockRate (kHz)
    "memory_bus_bits": 37,              # GlobalMemoryBusWidth
    "l2_bytes": 38,                     # L2CacheSize
    "max_threads_per_sm": 39,           # MaxThreadsPerMultiProcessor
    "cc_major": 75,                     # ComputeCapabilityMajor
    "cc_minor": 76,                     # ComputeCapabilityMinor
    "smem_per_sm": 81,                  # MaxSharedMemoryPerMultiprocessor
    "regs_per_sm": 82,                  # MaxRegistersPerMultiprocessor
    "cooperative_launch": 95,           # CooperativeLaunch
    "smem_per_block_optin": 97,         # MaxSharedMemoryPerBlockOptin
    "max_blocks_per_sm": 106,           # MaxBlocksPerMultiprocessor
    "smem_reserved_per_block": 111,     # ReservedSharedMemoryPerBlock
}
#: Fields the driver reports exactly; compared one to one with the file.
EXACT_FIELDS = ("compute_capability", "sm_count", "warp_size", "max_threads_per_block", "max_threads_per_sm",
                "max_blocks_per_sm", "max_warps_per_sm", "regs_per_sm", "regs_per_block", "smem_per_sm",
                "smem_per_block", "smem_per_block_optin", "smem_reserved_per_block", "l2_bytes",
                "boost_clock_mhz", "cooperative_launch")
#: The driver reports memory less what ECC and the driver itself hold: a file's nominal size may differ by this
#: (ECC on GDDR6 holds 1/16 of it: an L4 of 24 GiB reports 23,034 MiB).
MEMORY_TOLERANCE = 0.07


class HwModelWarning(UserWarning):
    """The live GPU differs from its description file."""


@dataclass(frozen=True)
class Mismatch:
    """One field where the live GPU and its file differ."""

    field: str
    file_value: Any
    live_value: Any


@dataclass(frozen=True)
class DetectReport:
    """What `detect_report` found: the model used, the driver's name, and how it was obtained.

    matched_file: the canonical name of the matching shipped file, or None when the model was built from
    live properties; template: for a built model, the shipped file of the same architecture that supplied
    the fields the driver does not report (tensor-core shapes, allocation units, L1, cluster limits).
    """

    device: int
    live_name: str
    model: GPUModel
    matched_file: str | None
    template: str | None
    mismatches: tuple[Mismatch, ...]

    def describe(self) -> str:
        """A few readable lines for logs and the CLI."""
        if self.matched_file is None:
            head = (f"device {self.device}: {self.live_name!r} has no description file; model built from "
                    f"live properties with architecture fields from {self.template}")
        else:
            head = f"device {self.device}: {self.live_name!r} -> {self.matched_file}"
        lines = [head]
        if self.matched_file is not None:
            lines.append("  live properties match the file" if not self.mismatches else
                         f"  {len(self.mismatches)} field(s) differ from the file:")
        lines += [f"    {m.field}: file {m.file_value!r}, live {m.live_value!r}" for m in self.mismatches]
        return "\n".join(lines)


def _runtime():
    try:
        import cupy
    except ImportError as err:
        raise DetectError(f"hwmodels.detect() needs CuPy and a CUDA GPU ({err}); without them use "
                          f"hwmodels.load(NAME) with one of: {', '.join(available())}") from None
    return cupy.cuda.runtime


def read_live(device: int = 0) -> dict[str, Any]:
    """The driver's name, total memory and the ATTRIBUTES of `device`, as a plain dict."""
    runtime = _runtime()
    cuda_error = getattr(runtime, "CUDARuntimeError", RuntimeError)
    try:
        props = runtime.getDeviceProperties(device)
        live = {key: int(runtime.deviceGetAttribute(attr, device)) for key, attr in ATTRIBUTES.items()}
    except cuda_error as err:
        raise DetectError(f"cannot read CUDA device {device} ({err}); without a GPU use "
                          f"hwmodels.load(NAME) with one of: {', '.join(available())}") from None
    name = props["name"]
    live["name"] = name.decode() if isinstance(name, bytes) else str(name)
    live["memory_bytes"] = int(props["totalGlobalMem"])
    return live


def _live_fields(live: dict[str, Any]) -> dict[str, Any]:
    """GPUModel fields the driver reports, in the model's units."""
    fields = {key: live[key] for key in ATTRIBUTES if key in {f.name for f in dataclasses.fields(GPUModel)}}
    fields["compute_capability"] = (live["cc_major"], live["cc_minor"])
    fields["max_warps_per_sm"] = live["max_threads_per_sm"] // live["warp_size"]
    fields["boost_clock_mhz"] = live["clock_khz"] // 1000
    fields["cooperative_launch"] = bool(live["cooperative_launch"])
    fields["memory_bytes"] = live["memory_bytes"]
    fields["memory_bandwidth"] = 2 * live["memory_clock_khz"] * 1000 * live["memory_bus_bits"] // 8
    return fields


def compare(model: GPUModel, live: dict[str, Any]) -> tuple[Mismatch, ...]:
    """Fields where `model` differs from live properties (as `read_live` returns them)."""
    fields = _live_fields(live)
    out = [Mismatch(key, getattr(model, key), fields[key]) for key in EXACT_FIELDS
           if getattr(model, key) != fields[key]]
    if abs(fields["memory_bytes"] - model.memory_bytes) > MEMORY_TOLERANCE * model.memory_bytes:
        out.append(Mismatch("memory_bytes", model.memory_bytes, fields["memory_bytes"]))
    return tuple(out)


def from_live(live: dict[str, Any]) -> tuple[GPUModel, str]:
    """A model for a GPU without a file: live values over a shipped file of the same compute capability
    (same major version as a fallback). Returns the model and the template's name."""
    fields = _live_fields(live)
    cc = fields["compute_capability"]
    models = sorted(_shipped().values(), key=lambda m: m.name)
    same = [m for m in models if m.compute_capability == cc] or \
           [m for m in models if m.compute_capability[0] == cc[0]]
    if not same:
        raise DetectError(f"{live['name']!r} (compute capability {cc[0]}.{cc[1]}) has no description file and "
                          "no shipped file of its architecture to borrow tensor-core shapes and allocation "
                          "units from; write one (see hwmodels/data/*.toml) and load it with "
                          "hwmodels.from_file(path)")
    template = same[0]
    try:
        model = dataclasses.replace(template, name=live["name"], aliases=(), **fields)
    except HwModelError as err:
        raise DetectError(f"live properties of {live['name']!r} do not form a valid model: {err}") from None
    return model, template.name


def detect_report(device: int = 0) -> DetectReport:
    """Read `device` and return the model with how it was matched and every field that differs."""
    live = read_live(device)
    model = find(live["name"])
    if model is None:
        built, template = from_live(live)
        return DetectReport(device, live["name"], built, None, template, ())
    return DetectReport(device, live["name"], model, model.name, None, compare(model, live))


def detect(device: int = 0) -> GPUModel:
    """The model of the live GPU `device`: its file's model (a HwModelWarning lists fields that differ
    from the live values), or one built from live properties when no file matches."""
    report = detect_report(device)
    if report.mismatches:
        warnings.warn(report.describe(), HwModelWarning, stacklevel=2)
    return report.model
