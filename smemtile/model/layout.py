"""Shared-memory layouts: how a logical (row, col) reaches an element offset.

A 2-D buffer of logical shape (rows, cols) is stored row-major with ``pad`` extra elements per row, then the
element offset goes through an optional XOR swizzle in CuTe's convention::

    Swizzle<B, M, S>:  offset ^ (((offset >> (M + S)) & (2**B - 1)) << M)

             bits: ... [M+S, M+S+B) ... [M, M+B) ... [0, M)
                        `-- yyy --'      `-- zzz --'   unchanged: runs of 2**M elements stay contiguous
                        zzz ^= yyy

so that ``Swizzle<3, 2, 3>`` on fp32 permutes 16-byte chunks (4 elements) within each 128-byte row by the row
index mod 8. A swizzle is a bijection on every aligned block of 2**(M+S+B) elements, so it never needs extra
memory; padding costs ``rows * pad`` elements.

One validity rule (:meth:`Layout.problem`, also the ``static_assert`` in ``smem_layout.cuh``): the swizzle only
changes bits ``[M, M+B)``, so an offset stays inside its aligned block of ``2**(M+B)`` elements and the buffer
must hold whole such blocks; ``S >= B`` keeps the source and target bits apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Swizzle:
    B: int
    M: int
    S: int

    def __post_init__(self) -> None:
        if not (0 <= self.B <= 8 and 0 <= self.M <= 12 and self.S >= self.B):
            raise ValueError(f"invalid Swizzle<{self.B},{self.M},{self.S}>: need 0<=B<=8, 0<=M<=12, S>=B")

    def __call__(self, offset):
        """Apply to element offsets (int or int64 array)."""
        mask = (1 << self.B) - 1
        return offset ^ (((offset >> (self.M + self.S)) & mask) << self.M)

    @property
    def block(self) -> int:
        """Elements of the aligned block an offset never leaves (the buffer must hold whole blocks)."""
        return 1 << (self.M + self.B)

    @property
    def period(self) -> int:
        """Elements after which the XOR pattern repeats (rows of one full permutation cycle)."""
        return 1 << (self.M + self.S + self.B)

    def __str__(self) -> str:
        return f"Swizzle<{self.B},{self.M},{self.S}>"

    def cpp(self) -> str:
        return f"(o) ^ ((((o) >> {self.M + self.S}) & {(1 << self.B) - 1}) << {self.M})"


@dataclass(frozen=True)
class Layout:
    """Row padding (elements) and an optional swizzle of the padded element offset."""

    pad: int = 0
    swizzle: Swizzle | None = None

    def row_stride(self, cols: int) -> int:
        return cols + self.pad

    def offset(self, row, col, cols: int):
        """Element offset of logical (row, col) in a buffer with ``cols`` logical columns."""
        o = np.asarray(row, dtype=np.int64) * self.row_stride(cols) + np.asarray(col, dtype=np.int64)
        return self.swizzle(o) if self.swizzle is not None else o

    def storage_elements(self, shape: tuple[int, ...]) -> int:
        """Elements the buffer occupies (one stage)."""
        if len(shape) == 1:
            return int(shape[0]) + self.pad
        rows = int(np.prod(shape[:-1]))
        return rows * self.row_stride(int(shape[-1]))

    def describe(self) -> str:
        parts = []
        if self.pad:
            parts.append(f"pad {self.pad}")
        if self.swizzle is not None:
            parts.append(str(self.swizzle))
        return ", ".join(parts) or "row-major, no padding"

    def to_dict(self) -> dict:
        d: dict = {"pad": self.pad}
        if self.swizzle is not None:
            d["swizzle"] = [self.swizzle.B, self.swizzle.M, self.swizzle.S]
        return d

    @property
    def swizzled(self) -> bool:
        return self.swizzle is not None and self.swizzle.B > 0

    def template_args(self) -> tuple[int, int, int, int]:
        """(PAD, B, M, S) as the kernels' ``SmemTile<ROWS, COLS, PAD, B, M, S>`` takes them."""
        sw = self.swizzle
        return (self.pad, sw.B, sw.M, sw.S) if sw is not None else (self.pad, 0, 0, 0)

    def problem(self, shape: tuple[int, ...]) -> str | None:
        """Why this layout cannot hold a buffer of ``shape`` (None when it can): the one validity rule."""
        if self.pad < 0:
            return f"padding cannot be negative ({self.pad})"
        if self.swizzle is not None:
            n = self.storage_elements(shape)
            if n % self.swizzle.block:
                return (
                    f"{self.swizzle} keeps offsets inside aligned blocks of {self.swizzle.block} elements "
                    f"(2**(M+B)); the buffer holds {n}, not a multiple"
                )
        return None

    @classmethod
    def of(cls, value: object) -> Layout:
        """A Layout from a Layout, None (dense), or a spec-style mapping ``{pad: N, swizzle: [B, M, S]}``."""
        if value is None:
            return cls()
        if isinstance(value, Layout):
            return value
        if isinstance(value, dict):
            sw = value.get("swizzle")
            swz = Swizzle(*(int(x) for x in sw)) if sw else None
            if swz is not None and swz.B == 0:
                swz = None
            return cls(int(value.get("pad", 0) or 0), swz)
        raise TypeError(f"not a layout: {value!r}")
