"""The benchmarks' own CUDA kernels compile with nvcc, without spills: step_products.cu for sm_80 (mma.sync) and
sm_90a (mma.sync and wgmma), load_engines.cu for sm_90 (bulk copies), and the scan kernel's probe builds of
scan_probe_ab.py and scan_pair_stamps.py (their patches still apply to scan.cu); bench_scan's verdicts compare with
the baselines alone; the GPU-only scripts say so where there is no GPU."""
from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import hwmodels
from flashrnn_kernels.scan.cost_model import register_cap
from flashrnn_kernels.scan.plan import plan
from flashrnn_kernels.scan.problem import ScanProblem
from tests.nvcc import NVCC, RUNTIME_OPTIONS, requires_nvcc

KERNELS = Path(__file__).resolve().parent.parent / "benchmarks" / "kernels"


def _compile(tmp_path, source: Path, arch: str, *options: str) -> str:
    """nvcc's log of `source` compiled for `arch`, checked to have succeeded without spills."""
    result = subprocess.run([NVCC, "-cubin", f"-arch={arch}", "-Xptxas", "-v", *options, "-o",
                             str(tmp_path / "k.cubin"), str(source)], capture_output=True, text=True)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert spills and all(s == ("0", "0") for s in spills), log
    return log


@requires_nvcc
@pytest.mark.parametrize("arch,kernels", [("sm_80", {"step_mma_sync"}), ("sm_90a", {"step_mma_sync", "step_wgmma"})])
def test_step_products_compiles_without_spills(tmp_path, arch, kernels):
    log = _compile(tmp_path, KERNELS / "step_products.cu", arch)
    assert set(re.findall(r"Compiling entry function '(\w+)'", log)) == kernels, log


@requires_nvcc
def test_load_engines_compiles_without_spills(tmp_path):
    log = _compile(tmp_path, KERNELS / "load_engines.cu", "sm_90", "-std=c++17", "-DSTAGES=4")
    assert set(re.findall(r"Compiling entry function '(\w+)'", log)) == {"bulk", "per_thread", "registers"}, log


@pytest.fixture
def scan_probe(monkeypatch):
    """benchmarks/scan_probe_ab.py as a module, with the plans of the thin linear_scan pair on an H100."""
    monkeypatch.syspath_prepend(str(KERNELS.parent))  # the script imports its sibling `common`
    module = importlib.import_module("scan_probe_ab")
    gpu = hwmodels.load("h100")
    plans = [plan(ScanProblem.for_shape("linear", 1, 65536, 64, dtype, direction, paired=direction == "forward"), gpu)
             for dtype in ("float32", "bfloat16") for direction in ("forward", "backward")]
    return module, plans


def test_scan_probes_patch_the_kernel(scan_probe):
    """Every probe's anchors are still in scan.cu (probe_source fails otherwise) and change its source."""
    module, plans = scan_probe
    for p in plans:
        for name in module.PROBES:
            variant = module._variant(p, name)
            assert module._source(variant) != p.source(), name


@requires_nvcc
@pytest.mark.parametrize("name", ["nostore_nolookback_noscan", "sleep100", "stcs_all", "deterministic+ungrouped",
                                  "groupmaps"])
def test_scan_probe_builds_compile_without_spills(tmp_path, scan_probe, name):
    module, plans = scan_probe
    for p in plans:
        source = tmp_path / f"{p.problem.direction}_{p.problem.dtype}.cu"
        source.write_text(module._source(module._variant(p, name)))
        _compile(tmp_path, source, "sm_90", *RUNTIME_OPTIONS)


@requires_nvcc
def test_scan_stamps_probe_compiles_without_spills(tmp_path, scan_probe):
    """scan_pair_stamps.py's anchors are still in scan.cu, once each (probe_source fails otherwise), and its probe
    builds of the thin pair's plans, the fp32 forward holding steps among them, compile without spills."""
    _, plans = scan_probe
    stamps = importlib.import_module("scan_pair_stamps")
    assert any(p.held for p in plans)
    for p in plans:
        source = tmp_path / f"{p.problem.direction}_{p.problem.dtype}.cu"
        source.write_text(stamps.probe_source(p))
        assert source.read_text().count("stamp(") == len(stamps.POINTS)  # one call per point
        _compile(tmp_path, source, "sm_90", *RUNTIME_OPTIONS)


def test_probe_plans_of_one_plan_keep_their_own_caps_and_windows(scan_probe, monkeypatch):
    """Each probe of a plan is a plan of its own (common.probe_plan): caps of 1 and 2 blocks per SM, windows of 33
    and 66 segments and their combinations each keep their value (one key shared between them had run them all with
    the last one registered)."""
    module, plans = scan_probe
    ab = importlib.import_module("scan_paired_forward_ab")
    shapes = ["plan@1", "plan@2", "plan~33", "plan~66", "plan@1~33", "plan@2~66"]
    probes = {shape: ab._chained(plans[0], shape) for shape in shapes}
    assert len(set(probes.values())) == len(shapes) and plans[0] not in probes.values()
    assert [ab.CAPS.get(probes[s]) for s in shapes] == [1, 2, None, None, 1, 2]
    windows = [next((w for w in (33, 66) if f"if (seg >= {w})" in module._source(probes[s])), None) for s in shapes]
    assert windows == [None, None, 33, 66, 33, 66]
    variants = [module._variant(plans[0], name) for name in module.PROBES]
    assert len(set(variants) | set(probes.values())) == len(variants) + len(shapes)


def test_scan_probe_deterministic_variant_is_the_deterministic_plan(scan_probe):
    module, plans = scan_probe
    for p in plans:
        variant = module._variant(p, "deterministic")
        assert variant.problem.deterministic and variant.defines()["SCAN_DETERMINISTIC"] == 1
        assert variant.threads_d == p.threads_d and variant.steps == p.steps and variant.carry == p.carry


def test_scan_table_judges_against_accelerated_scan_alone(monkeypatch):
    """bench_scan.judge: linear_scan's speedup and target are against accelerated-scan's kernels, never against the
    table's row of our own deterministic mode."""
    monkeypatch.syspath_prepend(str(KERNELS.parent))
    bench = importlib.import_module("bench_scan")

    def row(impl, ms):
        return {"op": "linear_scan", "impl": impl, "shape": "1x65536x64", "T": 65536, "dtype": "fp32",
                "pass_": "forward", "ms": ms, "% of copy": 80.0}
    rows = [row("ours", 0.01), row(bench.DETERMINISTIC, 0.0101), row("accelerated-scan warp", 0.03),
            row("accelerated-scan triton", 0.05)]
    bench.judge(rows)
    assert rows[0]["speedup vs best accelerated-scan"] == pytest.approx(3.0)
    assert rows[0]["target vs accelerated-scan"] == "pass" and rows[0]["target >=95% copy"] == "FAIL"
    assert not any(k.startswith(("speedup", "target")) for k in rows[1])


GPU_SCRIPTS = {
    "bench_scan": [], "bench_step_products": [], "fused_packages_ab": [], "fused_plan_variants": [],
    "host_overhead": [], "load_engines_probe": [], "sanitize_case": [], "sanitize_scan": [],
    "scan_cell_pairs": ["--trees", "."],
    "scan_graph_words_ab": [], "scan_model_plans_ab": [], "scan_occupancy_ab": [], "scan_pair_dram": [],
    "scan_pair_stamps": [], "scan_pair_timeline": [],
    "scan_paired_forward_ab": [], "scan_probe_ab": [], "scan_wanted_grads_ab": [],
    "scan_zero_guard_ab": ["--before", "scan.cu"], "stream_partition_probe": [],
}
"""The benchmark scripts that need a GPU, with the arguments they require."""


def test_gpu_scripts_are_listed():
    """Every script under benchmarks/ that calls require_cuda is in GPU_SCRIPTS, so the test below runs it."""
    calling = {path.stem for path in KERNELS.parent.glob("*.py") if "require_cuda(" in path.read_text()}
    assert calling - {"common"} == set(GPU_SCRIPTS)


@pytest.mark.parametrize("script", sorted(GPU_SCRIPTS))
def test_gpu_scripts_exit_with_a_message_without_cuda(script):
    """Without a visible GPU each GPU-only script exits non-zero naming itself and what it needs, not with a
    traceback from inside torch or CuPy."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", BENCH_RESULTS_DIR=os.devnull)
    result = subprocess.run([sys.executable, f"{script}.py", *GPU_SCRIPTS[script]], cwd=KERNELS.parent, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0, result.stdout + result.stderr
    assert f"{script}: CUDA is not available" in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_scan_cell_pairs_tabulates_medians_per_tree(monkeypatch):
    """scan_cell_pairs.table: one row per measurement, a column per tree in the order met, the median of its rounds
    in us; a tree whose every round failed a measurement reads "failed"."""
    monkeypatch.syspath_prepend(str(KERNELS.parent))
    pairs = importlib.import_module("scan_cell_pairs")
    lines = ["measured on: test", 'round 1 tree old RESULT {"pair": 0.5, "fwd": 0.2}',
             'round 1 tree new RESULT {"pair": 0.7, "fwd": "RuntimeError: x"}',
             'round 2 tree old RESULT {"pair": 0.7, "fwd": 0.2}', "round 2 tree new FAILED boom",
             'round 3 tree old RESULT {"pair": 0.6, "fwd": 0.3}', "round 1 tree broken FAILED boom"]
    assert pairs.table(lines) == [{"measurement": "pair", "old": 600.0, "new": 700.0, "broken": "failed"},
                                  {"measurement": "fwd", "old": 200.0, "new": "failed", "broken": "failed"}]


def test_scan_cell_pairs_parses_cases(monkeypatch):
    """--cases: cell, shape and dtype per case; a bad cell, dtype or form is refused with the form that works."""
    monkeypatch.syspath_prepend(str(KERNELS.parent))
    pairs = importlib.import_module("scan_cell_pairs")
    assert pairs.parse_cases("min_gru:1x65536x64:bfloat16,min_lstm:8x256x1536:float32") == [
        ("min_gru", (1, 65536, 64), "bfloat16"), ("min_lstm", (8, 256, 1536), "float32")]
    for bad in ("linear:1x2x3:float32", "min_gru:1x2x3:int8", "min_gru:1x2x3", "min_gru:1x0x3:float32"):
        with pytest.raises(ValueError, match="cell:BxTxD:dtype"):
            pairs.parse_cases(bad)


def test_shapes_parse_as_three_positive_dims(monkeypatch):
    """common.parse_dims / parse_dims_list, the --shapes type of the scan scripts: BxTxD to ints; anything else is
    refused with the form that works; format_dims writes a shape back in that form."""
    monkeypatch.syspath_prepend(str(KERNELS.parent))
    common = importlib.import_module("common")
    assert common.parse_dims_list("1x65536x64,8x4096x1536") == [(1, 65536, 64), (8, 4096, 1536)]
    assert common.format_dims((1, 65536, 64)) == "1x65536x64"
    assert common.parse_dims(common.format_dims((8, 4096, 1536))) == (8, 4096, 1536)
    for bad in ("8x4096", "1x0x64", "1xTx64", "", "8x4096x1536x2"):
        with pytest.raises(argparse.ArgumentTypeError, match="3 positive integers joined by 'x'"):
            common.parse_dims(bad)


def _occupancy_ab(monkeypatch):
    monkeypatch.syspath_prepend(str(KERNELS.parent))
    return importlib.import_module("scan_occupancy_ab")


def test_scan_occupancy_ab_adds_a_block_only_where_the_sm_holds_it(monkeypatch):
    """one_block_more: min_blocks + 1 and its register cap, where the SM holds that many blocks at that cap (hwmodels'
    occupancy); None where it does not (the whole-lane fp32 minLSTM forward at [8, 4096, 1536] fills the SM's shared
    memory at 4 blocks)."""
    occupancy = _occupancy_ab(monkeypatch)
    gpu, added = hwmodels.load("H200-SXM-141GB"), 0
    for cell, dtype, direction, shape in itertools.product(occupancy.CELLS, ("float32", "bfloat16", "float16"),
                                                           occupancy.DIRECTIONS, occupancy.SHAPES):
        p = plan(ScanProblem.for_shape(cell, *shape, dtype, direction), gpu)
        more = occupancy.one_block_more(p, gpu)
        if more is None:
            continue
        added += 1
        blocks = p.min_blocks + 1
        assert dataclasses.replace(more, min_blocks=p.min_blocks, regs_estimate=p.regs_estimate) == p
        assert more.min_blocks == blocks and more.regs_estimate == register_cap(gpu, p.threads, blocks) >= 64
        assert hwmodels.blocks_per_sm(gpu, p.threads, more.regs_estimate,
                                      p.smem_bytes + p.stage_bytes).blocks_per_sm >= blocks
    assert added >= 40
    whole = plan(ScanProblem.for_shape("min_lstm", 8, 4096, 1536, "float32", "forward"), gpu)
    assert occupancy.one_block_more(whole, gpu) is None


@pytest.mark.parametrize("name", ["linear", "min_gru", "min_lstm"])
def test_sanitize_scan_runs_a_held_forward(monkeypatch, name):
    """sanitize_scan.py's pairs (the ones `--only held` keeps among them) include a chained forward holding 4 of 21
    steps per thread, with the chained backward, in both dtypes."""
    monkeypatch.syspath_prepend(str(KERNELS.parent))
    sanitize = importlib.import_module("sanitize_scan")
    gpu = hwmodels.load("h100")
    for dtype in (torch.bfloat16, torch.float32):
        held = [(f, b) for label, f, b in sanitize.plans(name, dtype, gpu) if "held" in label]
        assert [(f.carry, f.steps, f.held, b.carry, b.held) for f, b in held] == [("chained", 21, 4, "chained", 0)]


@pytest.mark.parametrize("script, stem", [("bench_fused", "fused_lstm_plumbing"),
                                          ("bench_cells", "fused_cells_plumbing")])
def test_fused_benchmarks_check_their_tables_on_a_cpu(tmp_path, script, stem):
    """Without a GPU, bench_fused / bench_cells --quick fill their tables from the pure-PyTorch stand-in at tiny sizes
    under a title that says so; without --quick they exit non-zero with a message instead of measuring."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", BENCH_RESULTS_DIR=str(tmp_path))
    refused = subprocess.run([sys.executable, f"{script}.py"], cwd=KERNELS.parent, env=env, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 1 and f"{script}: CUDA is not available" in refused.stderr, refused.stderr
    checked = subprocess.run([sys.executable, f"{script}.py", "--quick"], cwd=KERNELS.parent, env=env,
                             capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    table = (tmp_path / f"{stem}.md").read_text()
    assert "PLUMBING CHECK on CPU" in table and "Traceback" not in checked.stderr
    assert "plots failed" not in checked.stdout and list(tmp_path.glob(f"{stem}_*.png")), checked.stdout
    with open(tmp_path / f"{stem}.csv", newline="") as f:
        assert list(csv.DictReader(f)), f"{stem}.csv has no rows"
