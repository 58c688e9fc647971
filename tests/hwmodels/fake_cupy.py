"""A stand-in for `cupy` exposing the two runtime calls hwmodels.detect uses, fed from a GPUModel."""
from __future__ import annotations

import types

from hwmodels.detect import ATTRIBUTES
from hwmodels.model import GPUModel


class FakeCUDARuntimeError(RuntimeError):
    pass


def live_values(model: GPUModel, name: str, memory_bytes: int, **overrides) -> tuple[dict, dict]:
    """(properties, attributes by id) a driver would report for `model`."""
    values = {key: getattr(model, key) for key in ATTRIBUTES if hasattr(model, key)}
    values.update(clock_khz=model.boost_clock_mhz * 1000, memory_clock_khz=2_619_000, memory_bus_bits=6144,
                  cc_major=model.compute_capability[0], cc_minor=model.compute_capability[1],
                  cooperative_launch=int(model.cooperative_launch))
    values.update(overrides)
    attributes = {ATTRIBUTES[key]: value for key, value in values.items()}
    return {"name": name.encode(), "totalGlobalMem": memory_bytes}, attributes


def make(props: dict | None, attributes: dict | None) -> types.ModuleType:
    """A module object shaped like cupy; with props None every call raises like a machine without GPU."""
    def get_props(device):
        if props is None:
            raise FakeCUDARuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
        return props

    def get_attribute(attr, device):
        if attributes is None:
            raise FakeCUDARuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
        return attributes[attr]

    runtime = types.SimpleNamespace(getDeviceProperties=get_props, deviceGetAttribute=get_attribute,
                                    CUDARuntimeError=FakeCUDARuntimeError)
    module = types.ModuleType("cupy")
    module.cuda = types.SimpleNamespace(runtime=runtime)
    return module
