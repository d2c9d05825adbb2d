"""bfloat16 on the host, for the references and the launchers: numpy has no bf16, so arrays of it travel as their
16-bit patterns (``uint16``). Pure numpy; names no family."""

from __future__ import annotations

import numpy as np


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, rounded to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns -> their float32 values (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_float64(a: np.ndarray, dtype: str) -> np.ndarray:
    """A host array of spec dtype ``dtype`` (bf16 as its bit patterns) as float64."""
    if dtype == "bf16":
        return bf16_value(a).astype(np.float64)
    return a.astype(np.float64)
