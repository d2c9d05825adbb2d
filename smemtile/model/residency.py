"""Blocks resident per SM for a kernel (threads, registers, static shared memory), cached per distinct kernel.

The occupancy calculation's core (``occupancy.limits_batch``, without the what-if searches ``occupancy`` adds):
a tile model asks this for every candidate it ranks, and candidates that compile to the same kernel ask alike.
Pure, no family named.
"""

from __future__ import annotations

import functools

__all__ = ["residency"]


@functools.cache
def residency(arch: str, threads: int, regs: int, smem_static: int) -> tuple[int, int]:
    """(blocks per SM, shared memory the driver allocates per block, reserved part included) of a kernel of
    ``threads`` threads, ``regs`` registers per thread and ``smem_static`` bytes of static shared memory."""
    from smemtile.model.arch import get_arch
    from smemtile.model.occupancy import limits_batch

    lim = limits_batch(get_arch(arch), threads, regs, smem_static, 0)
    return int(lim["active_blocks"][0]), int(lim["smem_per_block"][0])
