"""Pure model layer: numpy and the standard library only. No CUDA import, no printing."""
