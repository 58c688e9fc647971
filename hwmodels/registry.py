"""Load and validate GPU description files (data/*.toml) and resolve GPU names and aliases."""
from __future__ import annotations

import dataclasses
import difflib
import functools
import re
from pathlib import Path
from typing import Any

from .errors import HwModelError, ModelFieldError, UnknownGPUError
from .model import GPUModel

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser is published as `tomli`
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        tomllib = None

DATA_DIR = Path(__file__).parent / "data"
#: TOML keys: every GPUModel field.
KEYS = tuple(f.name for f in dataclasses.fields(GPUModel))
WGMMA_KEYS = ("m", "n", "k")


def normalize(name: str) -> str:
    """Lookup key of a GPU name: lower case, letters and digits only, without a leading "nvidia"."""
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    return key[len("nvidia"):] if key.startswith("nvidia") and len(key) > len("nvidia") else key


def from_file(path: str | Path) -> GPUModel:
    """Read and validate one GPU description file; errors name the file and the key."""
    path = Path(path)
    if tomllib is None:
        raise HwModelError(f"{path}: reading GPU files on Python 3.10 needs the 'tomli' package "
                           "(pip install tomli)")
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as err:
        raise HwModelError(f"{path}: cannot read GPU description: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise HwModelError(f"{path}: not valid TOML: {err}") from None
    except UnicodeDecodeError as err:
        raise HwModelError(f"{path}: not valid TOML: not UTF-8 text ({err.reason} at byte {err.start})") from None
    try:
        return GPUModel(**_fields(data))
    except ModelFieldError as err:
        raise ModelFieldError(err.key, err.reason, file=str(path)) from None


def _fields(data: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise ModelFieldError(unknown[0], f"unknown key; valid keys are {', '.join(KEYS)}")
    missing = [key for key in KEYS if key not in data]
    if missing:
        raise ModelFieldError(missing[0], f"missing (all missing: {', '.join(missing)})")
    for key in ("aliases", "compute_capability"):
        if not isinstance(data[key], list):
            raise ModelFieldError(key, f"must be a list, got {type(data[key]).__name__} {data[key]!r}")
    fields = dict(data)
    fields["mma_shapes"] = _mma_table(data["mma_shapes"])
    fields["wgmma_shapes"] = _wgmma_table(data["wgmma_shapes"])
    return fields


def _mma_table(table: Any) -> dict[str, tuple]:
    if not isinstance(table, dict):
        raise ModelFieldError("mma_shapes", "must be a table of dtype = [[m, n, k], ...]")
    for dtype, shapes in table.items():
        if not isinstance(shapes, list) or not all(isinstance(s, list) for s in shapes):
            raise ModelFieldError(f"mma_shapes.{dtype}", f"must be a list of [m, n, k], got {shapes!r}")
    return {dtype: tuple(tuple(s) for s in shapes) for dtype, shapes in table.items()}


def _wgmma_table(table: Any) -> dict[str, tuple]:
    if not isinstance(table, dict):
        raise ModelFieldError("wgmma_shapes", "must be a table of dtype = { m = .., n = [..], k = .. }")
    out = {}
    for dtype, spec in table.items():
        key = f"wgmma_shapes.{dtype}"
        if not isinstance(spec, dict) or sorted(spec) != sorted(WGMMA_KEYS):
            raise ModelFieldError(key, f"must be an inline table with keys m, n, k; got {spec!r}")
        if not isinstance(spec["n"], list) or not spec["n"]:
            raise ModelFieldError(key, f"n must be a non-empty list of widths, got {spec['n']!r}")
        out[dtype] = tuple((spec["m"], n, spec["k"]) for n in spec["n"])
    return out


@functools.lru_cache(maxsize=1)
def _shipped() -> dict[str, GPUModel]:
    """Every shipped model by canonical name (validated once)."""
    return {m.name: m for m in (from_file(p) for p in sorted(DATA_DIR.glob("*.toml")))}


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    """Normalized name or alias -> canonical name; a name claimed by two files is an error."""
    index: dict[str, str] = {}
    for model in _shipped().values():
        for label in (model.name, *model.aliases):
            key = normalize(label)
            owner = index.setdefault(key, model.name)
            if owner != model.name:
                raise HwModelError(f"alias {label!r} is claimed by both {owner} and {model.name}")
    return index


def available() -> tuple[str, ...]:
    """Canonical names of the shipped GPU models, sorted."""
    return tuple(sorted(_shipped()))


def find(name: str) -> GPUModel | None:
    """The shipped model whose name or alias matches `name` (case and punctuation ignored), else None."""
    canonical = _index().get(normalize(name))
    return _shipped()[canonical] if canonical else None


def load(name: str) -> GPUModel:
    """The shipped model called `name` or one of its aliases, e.g. "h100-sxm", "NVIDIA H200"."""
    if not isinstance(name, str):
        raise UnknownGPUError(f"GPU name must be a string, got {name!r}; available: "
                              f"{', '.join(available())}")
    model = find(name)
    if model is None:
        close = difflib.get_close_matches(normalize(name), list(_index()), n=3, cutoff=0.6)
        hint = f" (closest: {', '.join(sorted({_index()[c] for c in close}))})" if close else ""
        raise UnknownGPUError(f"no GPU description called {name!r}{hint}; available: "
                              f"{', '.join(available())}; for other GPUs write a file and use "
                              "hwmodels.from_file(path)")
    return model
