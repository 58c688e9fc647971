"""The benchmarks' own CUDA kernels compile with nvcc, without spills: step_products.cu for sm_80 (mma.sync) and
sm_90a (mma.sync and wgmma)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.nvcc import NVCC, requires_nvcc

SOURCE = Path(__file__).resolve().parent.parent / "benchmarks" / "kernels" / "step_products.cu"


@requires_nvcc
@pytest.mark.parametrize("arch,kernels", [("sm_80", {"step_mma_sync"}), ("sm_90a", {"step_mma_sync", "step_wgmma"})])
def test_step_products_compiles_without_spills(tmp_path, arch, kernels):
    result = subprocess.run([NVCC, "-cubin", f"-arch={arch}", "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"),
                             str(SOURCE)], capture_output=True, text=True)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    assert set(re.findall(r"Compiling entry function '(\w+)'", log)) == kernels, log
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert spills and all(s == ("0", "0") for s in spills), log
