"""The hwmodels command line."""
from __future__ import annotations

import subprocess
import sys

import pytest

import hwmodels
from hwmodels.cli import main

from tests.hwmodels import fake_cupy


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == list(hwmodels.available())
    assert any("H200-SXM-141GB" in line and "sm_90" in line and "132 SMs" in line for line in out)


def test_show_table(capsys):
    assert main(["show", "h100-sxm"]) == 0
    out = capsys.readouterr().out
    assert "H100-SXM5-80GB" in out and "sm_90 (compute capability 9.0)" in out
    assert "opt-in 227 KiB (232448 B)" in out and "228 KiB" in out and "8 / 16" in out
    assert "m16n8k16" in out and "m64nNk16, N in 8..256 (32 widths)" in out
    rows = [line for line in out.splitlines() if line.startswith("SMs ")]
    assert rows and rows[0].split()[-1] == "132"


def test_show_unknown_name(capsys):
    assert main(["show", "nope"]) == 2
    err = capsys.readouterr().err
    assert "'nope'" in err and "H200-SXM-141GB" in err


def test_detect_without_cupy(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert main(["detect"]) == 2
    assert "hwmodels.load(NAME)" in capsys.readouterr().err


def test_detect_with_a_device(capsys, monkeypatch):
    h200 = hwmodels.load("h200")
    props, attributes = fake_cupy.live_values(h200, "NVIDIA H200", h200.memory_bytes, sm_count=131)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy.make(props, attributes))
    assert main(["detect", "--device", "0"]) == 0
    out = capsys.readouterr().out
    assert "'NVIDIA H200' -> H200-SXM-141GB" in out and "sm_count: file 132, live 131" in out


def test_usage_error_exits_2():
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2


def test_python_dash_m():
    done = subprocess.run([sys.executable, "-m", "hwmodels", "show", "NVIDIA A100-SXM4-80GB"],
                          capture_output=True, text=True, check=True)
    assert "A100-SXM4-80GB" in done.stdout and "163 KiB" in done.stdout
