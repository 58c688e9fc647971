"""Compile and launch CUDA sources rendered from plans (CuPy backend)."""
