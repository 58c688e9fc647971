"""Where the tests find nvcc: on PATH, else the toolkit's wrapper in /usr/local/bin; None where there is none (the
tests that compile with it skip)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

NVCC = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").exists() else None)

requires_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
