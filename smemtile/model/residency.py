"""Blocks resident per SM for a kernel (threads, registers, static shared memory), cached per distinct kernel.

The occupancy calculation's core (``occupancy.limits_batch``, without the what-if searches ``occupancy`` adds):
a tile model asks this for every candidate it ranks, and candidates that compile to the same kernel ask alike;
:func:`prime` answers many kernels of one architecture in one vectorised call first. Pure, no family named.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["prime", "residency"]

_CACHE: dict[tuple[str, int, int, int], tuple[int, int]] = {}


def prime(arch: str, kernels: Iterable[tuple[int, int, int]]) -> None:
    """Compute (and cache) :func:`residency` for every ``(threads, regs, smem_static)`` of ``kernels`` on
    ``arch`` not yet known, in one call of the occupancy core (element by element the same arithmetic)."""
    from smemtile.model.arch import get_arch
    from smemtile.model.occupancy import limits_batch

    todo = sorted({(int(t), int(r), int(s)) for t, r, s in kernels} - {k[1:] for k in _CACHE if k[0] == arch})
    if not todo:
        return
    threads, regs, smem = zip(*todo, strict=True)
    lim = limits_batch(get_arch(arch), list(threads), list(regs), list(smem), 0)
    for i, (t, r, s) in enumerate(todo):
        _CACHE[(arch, t, r, s)] = (int(lim["active_blocks"][i]), int(lim["smem_per_block"][i]))


def residency(arch: str, threads: int, regs: int, smem_static: int) -> tuple[int, int]:
    """(blocks per SM, shared memory the driver allocates per block, reserved part included) of a kernel of
    ``threads`` threads, ``regs`` registers per thread and ``smem_static`` bytes of static shared memory."""
    key = (arch, int(threads), int(regs), int(smem_static))
    hit = _CACHE.get(key)
    if hit is None:
        prime(arch, [key[1:]])
        hit = _CACHE[key]
    return hit
