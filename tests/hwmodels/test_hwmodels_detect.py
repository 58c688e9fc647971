"""detect() on machines without CuPy/GPU, and against a fake driver (matching, mismatches, unknown GPUs)."""
from __future__ import annotations

import sys
import warnings

import pytest

import hwmodels
from hwmodels import DetectError, HwModelWarning, Mismatch

from tests.hwmodels import fake_cupy

H200 = hwmodels.load("H200-SXM-141GB")
H200_LIVE_MEMORY = 143_771 * 1024**2  # what the driver reports for a 141 GB H200


def install(monkeypatch, model=H200, name="NVIDIA H200", memory=H200_LIVE_MEMORY, **overrides):
    props, attributes = fake_cupy.live_values(model, name, memory, **overrides)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy.make(props, attributes))


def test_without_cupy_the_error_suggests_load(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    with pytest.raises(DetectError) as err:
        hwmodels.detect()
    message = str(err.value)
    assert "CuPy" in message and "hwmodels.load(NAME)" in message and "H200-SXM-141GB" in message


def test_without_a_gpu_the_error_suggests_load(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy.make(None, None))
    with pytest.raises(DetectError, match=r"cannot read CUDA device 0 .*no CUDA-capable.*hwmodels.load"):
        hwmodels.detect()


def test_matching_gpu_returns_its_file_without_warnings(monkeypatch):
    # values an H200 SXM's driver reported: 60 MiB L2, 1980 MHz clock, 143771 MiB of memory
    install(monkeypatch, l2_bytes=60 * 1024**2, clock_khz=1_980_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert hwmodels.detect() is H200
    report = hwmodels.detect_report()
    assert report.matched_file == "H200-SXM-141GB" and report.mismatches == ()
    assert report.live_name == "NVIDIA H200" and "match the file" in report.describe()


def test_memory_that_ecc_holds_is_no_mismatch(monkeypatch):
    # an L4 with ECC on (the default) reports 23,034 MiB of its 24 GiB: GDDR6's ECC holds 1/16
    l4 = hwmodels.load("L4")
    install(monkeypatch, model=l4, name="NVIDIA L4", memory=23_034 * 1024**2)
    assert hwmodels.detect_report().mismatches == ()
    install(monkeypatch, model=l4, name="NVIDIA L4", memory=20 * 1024**3)
    assert hwmodels.detect_report().mismatches == (Mismatch("memory_bytes", l4.memory_bytes, 20 * 1024**3),)


def test_mismatches_are_warned_and_reported(monkeypatch):
    install(monkeypatch, sm_count=130, smem_per_block_optin=200_000, memory=100 * 1024**3)
    with pytest.warns(HwModelWarning, match="sm_count: file 132, live 130"):
        model = hwmodels.detect()
    assert model is H200
    report = hwmodels.detect_report()
    assert report.mismatches == (
        Mismatch("sm_count", 132, 130), Mismatch("smem_per_block_optin", 232448, 200_000),
        Mismatch("memory_bytes", H200.memory_bytes, 100 * 1024**3))
    assert "3 field(s) differ" in report.describe()


def test_gpu_without_a_file_is_built_from_live_properties(monkeypatch):
    install(monkeypatch, name="NVIDIA H20", sm_count=78, l2_bytes=60 * 1024**2, memory=96 * 1024**3)
    report = hwmodels.detect_report()
    model = report.model
    assert report.matched_file is None and report.template == "H100-PCIe"  # first sm_90 file by name
    assert (model.name, model.aliases, model.sm_count, model.l2_bytes) == ("NVIDIA H20", (), 78, 60 * 1024**2)
    assert model.memory_bytes == 96 * 1024**3
    assert model.memory_bandwidth == 2 * 2_619_000_000 * 6144 // 8
    assert model.mma_shapes == H200.mma_shapes and model.arch == "sm_90"
    assert "has no description file" in report.describe()
    assert hwmodels.detect() == model


def test_unknown_architecture_without_template_is_an_error(monkeypatch):
    install(monkeypatch, name="NVIDIA GeForce RTX 5090", cc_major=12, cc_minor=0)
    with pytest.raises(DetectError, match=r"compute capability 12.0.*from_file"):
        hwmodels.detect()


def test_inconsistent_live_properties_are_an_error(monkeypatch):
    install(monkeypatch, name="Odd GPU", smem_per_block_optin=300_000)
    with pytest.raises(DetectError, match="smem_per_block_optin"):
        hwmodels.detect()
