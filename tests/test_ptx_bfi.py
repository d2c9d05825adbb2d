"""The PTX emulator's bfi: ``bfi.b32 d, a, b, c, e`` inserts the low e bits of a into b at bit c (PTX ISA, Integer
Arithmetic: bfi); position and length are operands 2 and 3 (flash_attn's index math compiles to it)."""

from __future__ import annotations

import numpy as np

from smemtile.model.ptx_ops import LANES, _int_op


def _bfi(a: int, b: int, pos: int, ln: int, bits: int = 32) -> int:
    x = [np.full(LANES, v, dtype=np.int64) for v in (a, b, pos, ln)]
    return int(_int_op("bfi", ["bfi", f"b{bits}"], f"b{bits}", x, None)[0])


def test_bfi_inserts_a_into_b_at_the_position_with_the_length():
    assert _bfi(0b101, 0xFFFF0000, 4, 3) == 0xFFFF0050
    assert _bfi(0xFF, 0, 8, 4) == 0x0F00  # only the low 4 bits of a
    assert _bfi(0x3, 0xFFFFFFFF, 30, 2) == 0xFFFFFFFF
    assert _bfi(0x0, 0xFFFFFFFF, 0, 8) == 0xFFFFFF00
    assert _bfi(0x1, 0x0, 63, 1, bits=64) & ((1 << 64) - 1) == 1 << 63  # int64 lanes hold the bits


def test_bfi_of_length_zero_is_b():
    assert _bfi(0xFFFF, 0x1234, 4, 0) == 0x1234
