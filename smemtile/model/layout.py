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

**TMA tiles** (Hopper, ``{tma_swizzle: none|32B|64B|128B}``): the copy engine writes a box densely (one box row =
one tile row) and swizzles the *byte* address with ``Swizzle<B, 4, 3>`` (B = 1, 2, 3 for 32, 64, 128 B): the
16-byte chunk index (bits 4..4+B) is XORed with bits 7..7+B, the 128-byte line index. For elements of ``e <= 16``
bytes that is ``Swizzle<B, 4 - log2(e), 3>`` on the element offset, which :meth:`Layout.for_tma` stores as
``swizzle`` so every analysis path treats it like any other swizzle. The hardware's own rules (base alignment,
box width, global strides, the wgmma descriptor's mode) are checked in ``smemtile.model.tma``.
"""

from __future__ import annotations

import math
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


TMA_MODES = ("none", "32B", "64B", "128B")  # CU_TENSOR_MAP_SWIZZLE_NONE, _32B, _64B, _128B


def tma_byte_swizzle(mode: str) -> Swizzle | None:
    """The byte-address swizzle of a TMA mode: ``Swizzle<1|2|3, 4, 3>`` (None for ``none``)."""
    if mode not in TMA_MODES:
        raise ValueError(f"unknown TMA swizzle mode {mode!r}; allowed: {', '.join(TMA_MODES)}")
    b = TMA_MODES.index(mode)
    return Swizzle(b, 4, 3) if b else None


@dataclass(frozen=True)
class Layout:
    """Row padding (elements) and an optional swizzle of the padded element offset.

    A TMA tile (``tma`` set) also records where it sits (``base``, bytes from the start of shared memory), the
    global tensor's row stride in bytes (``global_stride``, when known) and the mode the wgmma descriptor reads
    it with (``wgmma``, when it differs from ``tma``); ``swizzle`` is then the mode's element swizzle."""

    pad: int = 0
    swizzle: Swizzle | None = None
    tma: str | None = None
    base: int = 0
    global_stride: int | None = None
    wgmma: str | None = None

    @classmethod
    def for_tma(
        cls,
        mode: str,
        elem_bytes: int,
        *,
        base: int = 0,
        global_stride: int | None = None,
        wgmma: str | None = None,
    ) -> Layout:
        """A TMA tile's layout: ``mode`` (none, 32B, 64B, 128B) as the element swizzle for ``elem_bytes``."""
        sw = tma_byte_swizzle(mode)
        if wgmma is not None:
            tma_byte_swizzle(wgmma)  # validates the name
        if elem_bytes not in (1, 2, 4, 8, 16):
            raise ValueError(f"TMA elements are 1, 2, 4, 8 or 16 bytes, not {elem_bytes}")
        el = None if sw is None else Swizzle(sw.B, sw.M - (elem_bytes.bit_length() - 1), sw.S)
        return cls(0, el, mode, int(base), global_stride, None if wgmma == mode else wgmma)

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
        rows = math.prod(int(x) for x in shape[:-1])
        return rows * self.row_stride(int(shape[-1]))

    def describe(self) -> str:
        if self.tma is not None:
            sw = tma_byte_swizzle(self.tma)
            text = f"TMA {self.tma} swizzle" + (f" ({sw} on bytes)" if sw is not None else "")
            return text + (f", base {self.base}" if self.base else "")
        parts = []
        if self.pad:
            parts.append(f"pad {self.pad}")
        if self.swizzle is not None:
            parts.append(str(self.swizzle))
        return ", ".join(parts) or "row-major, no padding"

    def to_dict(self) -> dict:
        if self.tma is not None:  # the spec form: parses back (with the buffer's dtype) to an equal layout
            t: dict = {"tma_swizzle": self.tma}
            for key, v, default in (
                ("base", self.base, 0),
                ("global_stride", self.global_stride, None),
                ("wgmma_swizzle", self.wgmma, None),
            ):
                if v != default:
                    t[key] = v
            return t
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
        if self.tma is not None and (self.pad or len(shape) != 2):
            return "a TMA tile (tma_swizzle) is a 2-D box stored densely: no padding, shape [rows, cols]"
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
        """A Layout from a Layout, None (dense), or a spec-style mapping ``{pad: N, swizzle: [B, M, S]}`` (a TMA
        mapping ``{tma_swizzle: ..., elem_bytes: N}`` needs the element size)."""
        if value is None:
            return cls()
        if isinstance(value, Layout):
            return value
        if isinstance(value, dict) and value.get("tma_swizzle") is not None:
            if "elem_bytes" not in value:
                raise TypeError("a tma_swizzle layout mapping needs elem_bytes (the element size)")
            gs = value.get("global_stride")
            return cls.for_tma(
                str(value["tma_swizzle"]),
                int(value["elem_bytes"]),
                base=int(value.get("base", 0)),
                global_stride=None if gs is None else int(gs),
                wgmma=value.get("wgmma_swizzle"),
            )
        if isinstance(value, dict):
            sw = value.get("swizzle")
            swz = Swizzle(*(int(x) for x in sw)) if sw else None
            if swz is not None and swz.B == 0:
                swz = None
            return cls(int(value.get("pad", 0) or 0), swz)
        raise TypeError(f"not a layout: {value!r}")


def swizzle_for(cols: int) -> Swizzle:
    """The ldmatrix tiles' swizzle (the kernels' ``hgemm_swizzle_b/_s``): Swizzle<B, 3, S> on a tile whose rows
    hold ``cols`` 2-byte elements.
    M = 3 keeps 16-byte granules whole; the B row bits just above one 128-byte line pick the XOR:
    cols 32 -> <2,3,3> (2 rows per line), 64 -> <3,3,3>, 2^c >= 64 -> <3,3,c-3>."""
    if cols >= 64:
        return Swizzle(3, 3, cols.bit_length() - 1 - 3)
    return Swizzle(max(0, (cols // 8).bit_length() - 1), 3, 3)
