"""Bank behaviour of a configuration's shared-memory accesses, from the family's own index formulas.

Each :class:`~smemtile.codegen.contract.Access` gives logical (row, col) per lane; the buffer's layout maps them
to byte addresses exactly as the kernel does (``SmemTile::offset``). Conflicts are counted with the model of
``smemtile.model.banks`` when it offers ``wavefronts(addresses, width)``; otherwise with the classic one below:

    lanes are served in phases of 128 bytes (32 lanes for <= 4-byte accesses, 16 for 8-byte, 8 for 16-byte);
    a phase costs as many wavefronts as the most distinct 4-byte words any one of the 32 banks must deliver.

``ideal`` is the phase count (1 wavefront per 128 bytes requested); ``degree = worst wavefronts / ideal``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from smemtile.codegen.contract import Access, Family, KernelConfig

BANKS, WORD = 32, 4


@dataclass(frozen=True)
class AccessBanks:
    name: str
    buffer: str
    op: str
    width: int
    inner_loop: bool
    instructions: int
    wavefronts: int  # worst instruction
    ideal: int
    degree: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _wavefronts_classic(addr: np.ndarray, width: int) -> tuple[int, int]:
    """(wavefronts, ideal) of one warp instruction; ``addr`` has 32 byte addresses, -1 for an idle lane."""
    per_phase = max(1, 128 // max(width, WORD)) if width > WORD else 32
    waves = ideal = 0
    words_per_lane = max(1, width // WORD)
    for start in range(0, 32, per_phase):
        a = addr[start : start + per_phase]
        a = a[a >= 0]
        if a.size == 0:
            continue
        words = np.unique((a[:, None] // WORD + np.arange(words_per_lane)[None]).ravel())
        banks = words % BANKS
        waves += int(np.bincount(banks, minlength=BANKS).max())
        ideal += 1
    return waves, ideal


def _wavefront_fn():
    try:  # the project's bank model, when it exposes a per-instruction wavefront count
        from smemtile.model.banks import wavefronts  # type: ignore[attr-defined]

        return wavefronts
    except ImportError:
        return _wavefronts_classic


def byte_addresses(fam: Family, cfg: KernelConfig, acc: Access) -> np.ndarray:
    buf = next(b for b in fam.buffers(cfg) if b.name == acc.buffer)
    lay = cfg.layouts[acc.buffer]
    rows, cols = np.asarray(acc.rows), np.asarray(acc.cols)
    off = lay.offsets(np.maximum(rows, 0), np.maximum(cols, 0), buf.cols) * buf.elem_bytes
    return np.where((rows < 0) | (cols < 0), -1, off)


def bank_table(fam: Family, cfg: KernelConfig) -> list[AccessBanks]:
    """Worst wavefronts per access over all its instructions and warps."""
    fn = _wavefront_fn()
    out = []
    for acc in fam.accesses(cfg):
        addr = byte_addresses(fam, cfg, acc).reshape(-1, 32)
        worst, worst_ideal = 0, 1
        for row in np.unique(addr, axis=0):
            w, i = fn(row, acc.width)
            if i and w / i > worst / worst_ideal:
                worst, worst_ideal = w, i
        if worst == 0:
            worst = worst_ideal
        out.append(
            AccessBanks(
                acc.name,
                acc.buffer,
                acc.op,
                acc.width,
                acc.inner_loop,
                addr.shape[0],
                worst,
                worst_ideal,
                round(worst / worst_ideal, 3),
            )
        )
    return out
