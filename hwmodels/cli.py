"""Command line: `hwmodels list`, `hwmodels show NAME`, `hwmodels detect [--device N]`."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from .detect import detect_report
from .errors import HwModelError
from .model import GPUModel
from .registry import available, load

KIB, MIB, GIB = 1024, 1024**2, 1024**3


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= scale and nbytes % (scale // 4) == 0:
            return f"{nbytes / scale:g} {unit} ({nbytes} B)"
    return f"{nbytes} B"


def _shapes(table) -> str:
    if not table:
        return "-"
    parts = []
    for dtype, shapes in table.items():
        ms, ks = {s[0] for s in shapes}, {s[2] for s in shapes}
        if len(shapes) > 4 and len(ms) == 1 and len(ks) == 1:
            ns = [s[1] for s in shapes]
            parts.append(f"{dtype}: m{shapes[0][0]}nNk{shapes[0][2]}, N in {ns[0]}..{ns[-1]} ({len(ns)} widths)")
        else:
            parts.append(f"{dtype}: " + " ".join(f"m{m}n{n}k{k}" for m, n, k in shapes))
    return "; ".join(parts)


def rows(gpu: GPUModel) -> list[tuple[str, str]]:
    """(label, value) rows describing `gpu`, units spelled out."""
    return [
        ("name", gpu.name), ("aliases", ", ".join(gpu.aliases) or "-"),
        ("arch", f"{gpu.arch} (compute capability {gpu.compute_capability[0]}.{gpu.compute_capability[1]})"),
        ("SMs", str(gpu.sm_count)), ("warp size", str(gpu.warp_size)),
        ("max threads / block", str(gpu.max_threads_per_block)),
        ("max threads / SM", str(gpu.max_threads_per_sm)), ("max warps / SM", str(gpu.max_warps_per_sm)),
        ("max blocks / SM", str(gpu.max_blocks_per_sm)),
        ("registers / SM", str(gpu.regs_per_sm)), ("registers / block", str(gpu.regs_per_block)),
        ("max registers / thread", str(gpu.max_regs_per_thread)),
        ("register allocation", f"{gpu.reg_alloc_unit} per {gpu.reg_alloc_granularity}, "
                                f"{gpu.register_file_partitions} partitions"),
        ("shared memory / SM", _size(gpu.smem_per_sm)),
        ("shared memory / block", f"{_size(gpu.smem_per_block)}, opt-in {_size(gpu.smem_per_block_optin)}"),
        ("shared memory reserved / block", _size(gpu.smem_reserved_per_block)),
        ("shared memory granularity", _size(gpu.smem_alloc_granularity)),
        ("L1 + shared / SM", _size(gpu.l1_bytes_per_sm)), ("L2", _size(gpu.l2_bytes)),
        ("memory", _size(gpu.memory_bytes)), ("bandwidth", f"{gpu.memory_bandwidth / 1e9:g} GB/s"),
        ("boost clock", f"{gpu.boost_clock_mhz} MHz"),
        ("cluster max (portable / non-portable)", f"{gpu.cluster_max_portable} / {gpu.cluster_max_nonportable}"),
        ("cooperative launch", "yes" if gpu.cooperative_launch else "no"),
        ("mma.sync shapes", _shapes(gpu.mma_shapes)), ("wgmma shapes", _shapes(gpu.wgmma_shapes)),
    ]


def table(gpu: GPUModel) -> str:
    """`rows` as an aligned two-column table."""
    pairs = rows(gpu)
    width = max(len(label) for label, _ in pairs)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in pairs)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 success, 2 unknown GPU or no usable device)."""
    parser = argparse.ArgumentParser(prog="hwmodels", description="GPU description files and detection")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the shipped GPU models")
    show = sub.add_parser("show", help="show one GPU model as a table")
    show.add_argument("name", help="a name or alias, e.g. h100-sxm")
    det = sub.add_parser("detect", help="read the live GPU and compare it with its file")
    det.add_argument("--device", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            for name in available():
                gpu = load(name)
                print(f"{name:<16} {gpu.arch:<7} {gpu.sm_count:>4} SMs  {_size(gpu.memory_bytes).split(' (')[0]:>8}"
                      f"  {', '.join(gpu.aliases)}")
        elif args.command == "show":
            print(table(load(args.name)))
        else:
            report = detect_report(args.device)
            print(report.describe())
            print(table(report.model))
    except HwModelError as err:
        print(f"hwmodels: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`hwmodels list | head`): exit as a cut pipeline does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 141
    return 0
