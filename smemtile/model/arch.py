"""Architecture database: the per-SM and per-block limits the CUDA driver uses.

Sources: the CUDA C++ Programming Guide, table "Technical Specifications per Compute Capability", and
``cuda_occupancy.h`` from the CUDA 13.0 toolkit (allocation granularities, reserved shared memory, carveouts).
The sm_90 row was checked against the H200's device attributes (see shared/HARDWARE.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from smemtile.errors import SpecError

KB = 1024


@dataclass(frozen=True)
class Arch:
    name: str  # "sm_90"
    cc: tuple[int, int]
    max_threads_per_sm: int
    max_blocks_per_sm: int
    smem_per_sm: int  # bytes: the largest carveout
    smem_optin_per_block: int  # bytes: cudaDevAttrMaxSharedMemoryPerBlockOptin
    smem_reserved_per_block: int  # bytes the driver reserves for each resident block
    smem_alloc_unit: int  # shared-memory allocation granularity, bytes
    carveouts_kb: tuple[int, ...]  # shared-memory sizes the SM can be configured to, KB
    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256  # registers are allocated per warp in units of this many
    sub_partitions: int = 4  # register file is split over the SM's 4 schedulers
    max_threads_per_block: int = 1024
    warp_size: int = 32
    smem_default_per_block: int = 48 * KB  # without cudaFuncSetAttribute(MaxDynamicSharedMemorySize)
    banks: int = 32
    bank_bytes: int = 4
    source: str = "CUDA C++ Programming Guide (CC table) and cuda_occupancy.h, CUDA 13.0"

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size

    @property
    def has_ldmatrix(self) -> bool:
        return self.cc >= (7, 5)

    @property
    def has_cp_async(self) -> bool:
        return self.cc >= (8, 0)

    @property
    def has_tma(self) -> bool:
        return self.cc >= (9, 0)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["cc"] = f"{self.cc[0]}.{self.cc[1]}"
        d.update(
            max_warps_per_sm=self.max_warps_per_sm,
            has_ldmatrix=self.has_ldmatrix,
            has_cp_async=self.has_cp_async,
            has_tma=self.has_tma,
        )
        return d


_C80 = (0, 8, 16, 32, 64, 100, 132, 164)
_C86 = (0, 8, 16, 32, 64, 100)
_C90 = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)

ARCHS: dict[str, Arch] = {
    a.name: a
    for a in [
        Arch("sm_70", (7, 0), 2048, 32, 96 * KB, 96 * KB, 0, 256, (0, 8, 16, 32, 64, 96)),
        Arch("sm_75", (7, 5), 1024, 16, 64 * KB, 64 * KB, 0, 256, (32, 64)),
        Arch("sm_80", (8, 0), 2048, 32, 164 * KB, 163 * KB, 1 * KB, 128, _C80),
        Arch("sm_86", (8, 6), 1536, 16, 100 * KB, 99 * KB, 1 * KB, 128, _C86),
        Arch("sm_87", (8, 7), 1536, 16, 164 * KB, 163 * KB, 1 * KB, 128, _C80),
        Arch("sm_89", (8, 9), 1536, 24, 100 * KB, 99 * KB, 1 * KB, 128, _C86),
        Arch("sm_90", (9, 0), 2048, 32, 228 * KB, 227 * KB, 1 * KB, 128, _C90),
        Arch("sm_100", (10, 0), 2048, 32, 228 * KB, 227 * KB, 1 * KB, 128, _C90),
        Arch("sm_103", (10, 3), 2048, 32, 228 * KB, 227 * KB, 1 * KB, 128, _C90),
        Arch("sm_120", (12, 0), 1536, 24, 100 * KB, 99 * KB, 1 * KB, 128, _C86),
        Arch("sm_121", (12, 1), 1536, 24, 100 * KB, 99 * KB, 1 * KB, 128, _C86),
    ]
}


def get_arch(name: str, *, key: str = "arch", source: str | None = None) -> Arch:
    """Look up an architecture by ``sm_XX`` (also accepts ``90``, ``9.0``, ``sm90``, ``sm_90a``)."""
    text = str(name).strip().lower()
    if text.startswith("sm"):
        text = text[2:].lstrip("_")
    text = text.rstrip("af")  # sm_90a / sm_100f: same resource limits
    if "." in text:
        major, _, minor = text.partition(".")
        text = major + minor
    cand = f"sm_{text}"
    if cand in ARCHS:
        return ARCHS[cand]
    known = ", ".join(ARCHS)
    raise SpecError(f"unknown architecture {name!r}; known: {known} (or auto on a GPU)", key=key, source=source)
