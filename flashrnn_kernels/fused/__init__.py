"""Fused persistent recurrent kernels: problem -> plan (constrint) -> CUDA source -> launch -> autograd."""
