"""Implementations the fused kernels are measured against: cuDNN, a plain PyTorch loop, the flashrnn package.

Each anchor that shares the head-wise API takes ``Wx [B, T, 4, NH, DH]``, ``R [4, NH, DH, DH]``,
``b [4, NH, DH]``, ``states [2, B, NH, DH]`` and returns ``(h [B, T, NH, DH], last_states [2, B, NH, DH])``.
"""
