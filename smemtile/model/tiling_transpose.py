"""Tile shapes for the ``transpose`` family (TILE x TILE through shared memory, BLOCK_ROWS thread rows), ranked
by a bandwidth model, so ``smemtile tune`` can time the most promising ones first. Pure Python.

Model: a transpose moves 2 x rows x cols x elem bytes and is bound by DRAM. Each thread keeps TILE/BLOCK_ROWS
independent loads in flight, so an SM holds ``active_threads x TILE/BLOCK_ROWS x elem`` bytes in flight;
Little's law needs ``bandwidth_per_SM x latency`` (1 us under load, assumed) to reach the copy bandwidth:
``GB/s = copy_bw x min(1, in_flight / needed) x useful / (rows, cols rounded up to TILE)``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from smemtile.model.tiling_gpus import get_gpu

LATENCY_S = 1e-6
ELEM = {"f32": 4, "f16": 2, "bf16": 2}


@dataclass(frozen=True)
class TransposeScored:
    tile: int
    block_rows: int
    threads: int
    regs: int
    smem_bytes: int
    blocks_per_sm: int
    occupancy: float
    in_flight_bytes: int
    latency_eff: float
    pad_eff: float
    gbps: float
    rank: int = 0
    reason: str = ""

    @property
    def label(self) -> str:
        return f"TILE {self.tile} x BLOCK_ROWS {self.block_rows}"

    def params(self) -> dict:
        return {"TILE": self.tile, "BLOCK_ROWS": self.block_rows}

    def to_dict(self) -> dict:
        return {**asdict(self), "label": self.label}


def rank_transpose(rows: int, cols: int, dtype: str = "f32", arch: str = "sm_90", *, gpu: str | None = None,
                   sms: int | None = None) -> list[TransposeScored]:  # fmt: skip
    """Every TILE / BLOCK_ROWS the transpose contract allows, best predicted bandwidth first."""
    from smemtile.model.arch import get_arch
    from smemtile.model.occupancy import occupancy

    a = get_arch(arch)
    g = get_gpu(gpu, a.base, sms=sms)
    e = ELEM.get(dtype, 4)
    need = g.dram_gbps * 1e9 / g.sms * LATENCY_S
    out = []
    for tile in (32, 64):
        for br in (1, 2, 4, 8, 16, 32):
            threads = tile * br
            if tile % br or not 64 <= threads <= 1024:
                continue
            per_thread = tile // br
            regs = (
                20 + 2 * per_thread
            )  # addresses + the values of the unrolled loop (32x8 f32: 28, ptxas 28-30)
            smem = tile * (tile + 1) * e
            occ = occupancy(a, threads, regs, smem, 0)
            if occ.active_blocks == 0:
                continue
            in_flight = occ.active_blocks * threads * per_thread * e
            lat = min(1.0, in_flight / need)
            pad = rows * cols / (math.ceil(rows / tile) * tile * math.ceil(cols / tile) * tile)
            out.append(TransposeScored(tile, br, threads, regs, smem, occ.active_blocks, occ.occupancy, in_flight,
                                       lat, pad, g.dram_gbps * lat * pad))  # fmt: skip
    out.sort(key=lambda s: (-round(s.gbps, 6), abs(s.threads - 256), s.tile))
    top = out[0] if out else None
    ranked = []
    for i, s in enumerate(out):
        if s is top:
            why = f"best: {s.in_flight_bytes // 1024} KiB in flight per SM covers {need / 1024:.0f} KiB (Little's law)"
        else:
            why = (f"{top.gbps / s.gbps - 1:+.1%} vs #1: {s.in_flight_bytes // 1024} KiB in flight per SM "
                   f"({s.blocks_per_sm} blocks x {s.threads} threads x {s.tile // s.block_rows} elements)")  # fmt: skip
        ranked.append(TransposeScored(**{**asdict(s), "rank": i + 1, "reason": why}))
    return ranked
