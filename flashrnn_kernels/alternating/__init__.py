"""Alternating backend: per step one cuBLAS GEMM and one pointwise kernel, the sequence replayed from CUDA graphs;
`choose` decides between it and the fused kernel."""
from .choice import BackendChoice, choose
from .function import flashrnn_alternating
from .runner import clear_graphs

__all__ = ["BackendChoice", "choose", "clear_graphs", "flashrnn_alternating"]
