"""DRAM traffic of each kernel of a linear_scan forward + backward pair in its own context, for Nsight Compute.

Runs CUDA graphs of repeated pairs (ours through the public linear_scan, then the elementwise pair of
scan_pair_timeline.py), replayed `--replays` times each; meant to run under

    ncu --replay-mode application --cache-control none --graph-profiling node \
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum ...

so that each kernel's DRAM bytes are counted with the caches as the previous kernels left them.
"""
from __future__ import annotations

import argparse

import torch

import common
from flashrnn_kernels.scan import linear_scan
from scan_pair_timeline import DTYPES, _elementwise_pair, pair_graph


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", type=common.parse_dims, default="1x65536x64")
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--replays", type=int, default=2)
    args = parser.parse_args()
    common.require_cuda("scan_pair_dram")
    shape = args.shape
    dtype = DTYPES[args.dtype]
    a = (torch.rand(shape, device="cuda") * 0.5 + 0.5).to(dtype).requires_grad_()
    b = torch.randn(shape, device="cuda").to(dtype).requires_grad_()
    dy = torch.randn(shape, device="cuda").to(dtype)
    for scan in (linear_scan, _elementwise_pair()):
        graph, _ = pair_graph(scan, a, b, dy, args.pairs)
        for _ in range(args.replays):
            graph.replay()
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
