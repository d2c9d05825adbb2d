"""smemtile: a shared-memory tile advisor for CUDA kernels."""

__version__ = "0.1.0"
