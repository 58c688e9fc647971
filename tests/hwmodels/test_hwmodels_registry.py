"""Shipped files, known figures, alias lookup and every validation error path."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import hwmodels
from hwmodels import registry
from hwmodels.errors import HwModelError, ModelFieldError, UnknownGPUError

DATA = Path(registry.__file__).parent / "data"
SHIPPED = sorted(DATA.glob("*.toml"))
EXPECTED = {"A100-SXM4-80GB", "A100-PCIe-40GB", "H100-SXM5-80GB", "H100-PCIe", "H200-SXM-141GB", "L4",
            "L40S", "RTX-4090", "RTX-3090", "V100-SXM2-32GB", "B200"}


def test_every_issue_gpu_is_shipped():
    assert set(hwmodels.available()) == EXPECTED
    assert len(SHIPPED) == len(EXPECTED)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_file_loads_validates_and_cites_sources(path):
    model = hwmodels.from_file(path)
    assert registry.normalize(model.name) == registry.normalize(path.stem)
    assert hwmodels.load(model.name) == model
    text = path.read_text()
    assert "Technical Specifications per" in text
    assert "datasheet" in text.lower() or "whitepaper" in text.lower()
    assert model.arch == "sm_{}{}".format(*model.compute_capability)
    assert model.smem_per_block_optin + model.smem_reserved_per_block <= model.smem_per_sm
    assert set(model.mma_shapes) >= {"f16"}


@pytest.mark.parametrize("name, figures", [
    ("h100-sxm", dict(sm_count=132, regs_per_sm=65536, smem_per_block_optin=227 * 1024, arch="sm_90",
                      compute_capability=(9, 0), smem_per_sm=228 * 1024, cluster_max_portable=8,
                      cluster_max_nonportable=16, max_warps_per_sm=64, max_blocks_per_sm=32)),
    ("a100", dict(sm_count=108, smem_per_sm=164 * 1024, smem_per_block_optin=163 * 1024, arch="sm_80",
                  smem_reserved_per_block=1024, cluster_max_portable=1)),
    # H200: the driver reports a 60 MiB L2 (observed on an H200 SXM), not the H100 SXM5's 50 MiB.
    ("NVIDIA H200", dict(sm_count=132, arch="sm_90", l2_bytes=60 * 1024**2, memory_bytes=141 * 1024**3)),
    ("H100 SXM", dict(l2_bytes=50 * 1024**2)),
    ("rtx 3090", dict(max_blocks_per_sm=16, max_warps_per_sm=48, max_threads_per_sm=1536,
                      smem_per_block_optin=99 * 1024, smem_per_sm=100 * 1024)),
    ("L40S", dict(max_blocks_per_sm=24, max_warps_per_sm=48, sm_count=142)),
    ("v100", dict(smem_per_sm=96 * 1024, smem_per_block_optin=96 * 1024, smem_reserved_per_block=0,
                  smem_alloc_granularity=256, arch="sm_70")),
    ("B200", dict(sm_count=148, arch="sm_100", smem_per_block_optin=227 * 1024)),
])
def test_known_figures(name, figures):
    model = hwmodels.load(name)
    for key, value in figures.items():
        assert getattr(model, key) == value, key
    assert model.regs_per_block == 65536 and model.max_regs_per_thread == 255 and model.warp_size == 32


def test_tensor_core_shapes():
    h100, a100, l4, v100, b200 = (hwmodels.load(n) for n in ("h100", "a100", "l4", "v100", "b200"))
    assert (16, 8, 16) in h100.mma_shapes["bf16"] and (16, 8, 8) in h100.mma_shapes["tf32"]
    assert (8, 8, 4) in a100.mma_shapes["f64"] and (16, 8, 32) in a100.mma_shapes["int8"]
    assert "fp8" in l4.mma_shapes and "fp8" not in a100.mma_shapes and l4.mma_shapes["f64"] == ((8, 8, 4),)
    assert v100.mma_shapes == {"f16": ((8, 8, 4),)} and not v100.wgmma_shapes
    assert h100.wgmma_shapes["f16"][0] == (64, 8, 16) and h100.wgmma_shapes["f16"][-1] == (64, 256, 16)
    assert len(h100.wgmma_shapes["bf16"]) == 32 and h100.wgmma_shapes["tf32"][0] == (64, 8, 8)
    assert (64, 40, 32) not in h100.wgmma_shapes["int8"] and (64, 48, 32) in h100.wgmma_shapes["int8"]
    assert not a100.wgmma_shapes and not b200.wgmma_shapes


def test_tensor_shapes_lookup():
    h100, a100 = hwmodels.load("h100"), hwmodels.load("a100")
    assert h100.tensor_shapes("f16")[0] == (16, 8, 16)
    assert h100.tensor_shapes("bf16", warpgroup=True)[-1] == (64, 256, 16)
    with pytest.raises(HwModelError, match=r"A100-SXM4-80GB \(sm_80\) has no mma.sync shapes for 'fp8'; it has: "):
        a100.tensor_shapes("fp8")
    with pytest.raises(HwModelError, match="no wgmma shapes for 'f16'; it has: none"):
        a100.tensor_shapes("f16", warpgroup=True)


def test_model_is_frozen_and_hashable():
    model = hwmodels.load("h100")
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.sm_count = 1
    with pytest.raises(TypeError):
        model.mma_shapes["f16"] = ()
    assert hash(model) == hash(hwmodels.load("H100-SXM5-80GB"))


@pytest.mark.parametrize("alias, name", [
    ("h100-sxm", "H100-SXM5-80GB"), ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"),
    ("H100_SXM5_80GB", "H100-SXM5-80GB"), ("nvidia h100 pcie", "H100-PCIe"), ("NVIDIA H200", "H200-SXM-141GB"),
    ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"), ("NVIDIA A100-PCIE-40GB", "A100-PCIe-40GB"),
    ("NVIDIA GeForce RTX 4090", "RTX-4090"), ("rtx3090", "RTX-3090"), ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"),
    ("NVIDIA L4", "L4"), ("nvidia-b200", "B200"),
])
def test_alias_resolution(alias, name):
    assert hwmodels.load(alias).name == name


def test_unknown_name_lists_available():
    with pytest.raises(UnknownGPUError) as err:
        hwmodels.load("H300")
    assert "H300" in str(err.value)
    assert all(name in str(err.value) for name in EXPECTED)
    assert "from_file" in str(err.value)
    with pytest.raises(UnknownGPUError, match=r"closest: [^)]*H100-PCIe"):
        hwmodels.load("h100-pcie-94gb")
    with pytest.raises(UnknownGPUError, match="must be a string"):
        hwmodels.load(90)


BASE = (DATA / "H100-SXM5-80GB.toml").read_text()


def write(tmp_path, text, name="gpu.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("old, new, key, reason", [
    ("sm_count = 132", "sm_count = 132\nfoo = 1", "foo", "unknown key"),
    ("sm_count = 132\n", "", "sm_count", "missing"),
    ("sm_count = 132", 'sm_count = "132"', "sm_count", "must be an integer"),
    ("sm_count = 132", "sm_count = 132.0", "sm_count", "must be an integer"),
    ("cooperative_launch = true", "cooperative_launch = 1", "cooperative_launch", "true or false"),
    ("sm_count = 132", "sm_count = 0", "sm_count", "positive"),
    ("l2_bytes = 52428800", "l2_bytes = -1", "l2_bytes", "positive"),
    ("smem_reserved_per_block = 1024", "smem_reserved_per_block = -8", "smem_reserved_per_block", ">= 0"),
    ("smem_per_block_optin = 232448", "smem_per_block_optin = 240000", "smem_per_block_optin",
     "exceeds smem_per_sm"),
    ("smem_per_block = 49152", "smem_per_block = 240000", "smem_per_block", "exceeds smem_per_block_optin"),
    ("max_threads_per_sm = 2048", "max_threads_per_sm = 1536", "max_threads_per_sm", "max_warps_per_sm"),
    ("regs_per_block = 65536", "regs_per_block = 131072", "regs_per_block", "exceeds regs_per_sm"),
    ("cluster_max_portable = 8", "cluster_max_portable = 32", "cluster_max_portable", "exceeds"),
    ("smem_alloc_granularity = 128", "smem_alloc_granularity = 1000", "smem_per_sm", "multiple"),
    ('reg_alloc_granularity = "warp"', 'reg_alloc_granularity = "thread"', "reg_alloc_granularity", "one of"),
    ("compute_capability = [9, 0]", 'compute_capability = "9.0"', "compute_capability", "must be a list"),
    ("compute_capability = [9, 0]", "compute_capability = [9, 0, 1]", "compute_capability", "[major, minor]"),
    ('aliases = ["NVIDIA', 'aliases = ["", "NVIDIA', "aliases", "non-empty strings"),
    ("f16 = [[16, 8, 16]", "f12 = [[16, 8, 16]", "mma_shapes.f12", "unknown dtype"),
    ("bf16 = [[16, 8, 16], [16, 8, 8]]", "bf16 = [[16, 8]]", "mma_shapes.bf16", "three positive"),
    ("bf16 = [[16, 8, 16], [16, 8, 8]]", "bf16 = 16", "mma_shapes.bf16", "list of [m, n, k]"),
    ("tf32 = { m = 64, k = 8,", "tf32 = { m = 64, kk = 8,", "wgmma_shapes.tf32", "keys m, n, k"),
    ("fp8 = { m = 64, k = 32, n = [", "fp8 = { m = 64, k = 32, n = [], x = [", "wgmma_shapes.fp8", "keys m, n, k"),
])
def test_validation_errors_name_file_and_key(tmp_path, old, new, key, reason):
    assert old in BASE
    path = write(tmp_path, BASE.replace(old, new, 1))
    with pytest.raises(ModelFieldError) as err:
        hwmodels.from_file(path)
    message = str(err.value)
    assert str(path) in message and f"'{key}'" in message and reason in message
    assert err.value.key == key and err.value.file == str(path)


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(HwModelError, match="cannot read"):
        hwmodels.from_file(tmp_path / "absent.toml")
    with pytest.raises(HwModelError, match="not valid TOML"):
        hwmodels.from_file(write(tmp_path, "sm_count = = 3"))
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(b"name = '\xe9'\n")
    with pytest.raises(HwModelError, match=r"latin1.toml: not valid TOML: not UTF-8 text"):
        hwmodels.from_file(latin1)


def test_user_file_round_trip(tmp_path):
    path = write(tmp_path, BASE.replace('name = "H100-SXM5-80GB"', 'name = "my-h100"'))
    model = hwmodels.from_file(path)
    assert model.name == "my-h100" and model.sm_count == 132


def test_alias_claimed_twice_is_an_error(tmp_path, monkeypatch):
    write(tmp_path, BASE, "a.toml")
    write(tmp_path, BASE.replace('name = "H100-SXM5-80GB"', 'name = "other"'), "b.toml")
    monkeypatch.setattr(registry, "DATA_DIR", tmp_path)
    registry._shipped.cache_clear()
    registry._index.cache_clear()
    try:
        with pytest.raises(HwModelError, match="claimed by both"):
            hwmodels.available() and registry.find("h100")
    finally:
        registry._shipped.cache_clear()
        registry._index.cache_clear()
