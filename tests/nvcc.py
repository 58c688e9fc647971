"""Where the tests find nvcc: on PATH, else the toolkit's wrapper in /usr/local/bin; None where there is none (the
tests that compile with it skip, unless FLASHRNN_REQUIRE_NVCC is set, as .ci/run sets it: then the run fails)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from flashrnn_kernels.runtime.compile import DEFAULT_OPTIONS

RUNTIME_OPTIONS = (*DEFAULT_OPTIONS, "-ftz=true")
"""The options of a runtime compile, for nvcc checks of generated sources: compile.DEFAULT_OPTIONS, then the
-ftz=true that CuPy appends to every compile (the kernels flush fp32 subnormals; ptxas schedules and allocates
registers for that code)."""

NVCC = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").exists() else None)

if NVCC is None and os.environ.get("FLASHRNN_REQUIRE_NVCC"):
    raise RuntimeError("FLASHRNN_REQUIRE_NVCC is set but no nvcc was found (on PATH or at /usr/local/bin/nvcc): the "
                       "generated CUDA sources cannot be compiled; install the CUDA toolkit or unset the variable")

requires_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")


def compile_ptx(source: str, path: Path, arch: str) -> Path:
    """Write `source` to `path` and compile it with RUNTIME_OPTIONS to PTX for `arch` (e.g. sm_90, compute_80);
    returns the PTX file's path (the assertion carries nvcc's log)."""
    path.write_text(source)
    ptx = path.with_suffix(".ptx")
    out = subprocess.run([NVCC, "-ptx", f"-arch={arch}", *RUNTIME_OPTIONS, "-o", str(ptx), str(path)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return ptx


def assert_divides_without_slow_paths(source: str, path: Path, reciprocal: bool = True) -> None:
    """Compile `source` (written to `path`) to PTX for sm_90 with RUNTIME_OPTIONS and check that it has no
    IEEE-rounded division or reciprocal (div.rn / rcp.rn), which ptxas wraps in a branch to a slow path, and, with
    `reciprocal`, that it takes its reciprocals as rcp.approx."""
    ptx = compile_ptx(source, path, "sm_90").read_text()
    assert not reciprocal or "rcp.approx.ftz.f32" in ptx, f"{path.name}: no rcp.approx in the PTX"
    assert not re.search(r"\b(?:div|rcp)\.rn(?:\.ftz)?\.f32\b", ptx), f"{path.name}: IEEE division in the PTX"
