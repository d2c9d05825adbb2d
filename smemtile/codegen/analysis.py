"""Bank behaviour of a configuration's shared-memory accesses, from the family's own index formulas.

Each :class:`~smemtile.codegen.contract.Access` gives logical (row, col) per lane; the buffer's layout maps them
to byte addresses exactly as the kernel does (``SmemTile::offset``). Conflicts are counted with the model of
``smemtile.model.banks.analyze_addresses`` (phases fitted to Nsight Compute).

``ideal`` is the phase count (what the instruction costs without conflicts); ``degree = worst wavefronts / ideal``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from smemtile.codegen.contract import Access, Family, KernelConfig
from smemtile.model.banks import analyze_addresses


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


def _wavefronts(
    addr: np.ndarray, op: str, width: int, sources: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per instruction (rows of ``addr``): (wavefronts, ideal). Idle lanes (-1) take no part."""
    res = analyze_addresses(addr, op, width, sources=sources, active=addr >= 0)
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
        addr = byte_addresses(fam, cfg, acc).reshape(-1, 32)
        src = acc.sources
        both = addr if src is None else np.concatenate([addr, src.reshape(-1, 32)], axis=1)
        both = np.unique(both[(addr >= 0).any(axis=1)], axis=0)
        addr, src = both[:, :32], (None if src is None else both[:, 32:])
        waves, ideal = _wavefronts(addr, acc.op, acc.width, src)
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
