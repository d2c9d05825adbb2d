"""Bank behaviour of a configuration's shared-memory accesses, from the family's own index formulas.

Each :class:`~smemtile.codegen.contract.Access` gives logical (row, col) per lane; the buffer's layout maps them
to byte addresses exactly as the kernel does (``SmemTile::offset``). Conflicts are counted with the model of
``smemtile.model.banks.analyze_addresses`` (phases fitted to Nsight Compute); without it, the classic one:

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


def _wavefronts(addr: np.ndarray, op: str, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Per instruction (rows of ``addr``): (wavefronts, ideal). Idle lanes (-1) repeat an active lane's address."""
    first = np.where(addr >= 0, addr, np.iinfo(np.int64).max).min(axis=1, keepdims=True)
    addr = np.where(addr >= 0, addr, first)
    try:  # the project's bank model (phases fitted to Nsight Compute)
        from smemtile.model.banks import analyze_addresses
    except ImportError:
        pairs = [_wavefronts_classic(row, width) for row in addr]
        return np.array([w for w, _ in pairs]), np.array([i for _, i in pairs])
    res = analyze_addresses(addr, op, width)
    return np.asarray(res.wavefronts), np.asarray(res.ideal_wavefronts)


def byte_addresses(fam: Family, cfg: KernelConfig, acc: Access) -> np.ndarray:
    buf = next(b for b in fam.buffers(cfg) if b.name == acc.buffer)
    lay = cfg.layouts[acc.buffer]
    rows, cols = np.asarray(acc.rows), np.asarray(acc.cols)
    off = lay.offsets(np.maximum(rows, 0), np.maximum(cols, 0), buf.cols) * buf.elem_bytes
    return np.where((rows < 0) | (cols < 0), -1, off)


def bank_table(fam: Family, cfg: KernelConfig) -> list[AccessBanks]:
    """Worst wavefronts per access over all its instructions and warps."""
    out = []
    for acc in fam.accesses(cfg):
        addr = np.unique(byte_addresses(fam, cfg, acc).reshape(-1, 32), axis=0)
        addr = addr[(addr >= 0).any(axis=1)]
        waves, ideal = _wavefronts(addr, acc.op, acc.width)
        k = int(np.argmax(waves / ideal))
        out.append(
            AccessBanks(
                acc.name,
                acc.buffer,
                acc.op,
                acc.width,
                acc.inner_loop,
                int(np.asarray(acc.rows).reshape(-1, 32).shape[0]),
                int(waves[k]),
                int(ideal[k]),
                round(float(waves[k] / ideal[k]), 3),
            )
        )
    return out
